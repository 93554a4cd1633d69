// AmxTileModel (amx_tiles.h): the tile instructions after the pseudo-code of Intel's ISA reference
// (TILELOADD, TILESTORED, TILEZERO, TDPBSUD), in plain C++ on any CPU.
#include "kernels/cpu/amx_tiles.h"

#include <cstring>

#include "base/check.h"

namespace steady::cpu {
namespace {

struct Tile {
  int rows = 0, bytes = 0;  // as configured; 0 and 0: not configured
  uint8_t data[kTileMaxRows][kTileMaxBytes] = {};
};

struct ModelTiles {
  bool configured = false;
  Tile tiles[kTiles];
};

ModelTiles& This() {
  thread_local ModelTiles model;
  return model;
}

// Tile t of this thread, which must be configured (the instructions raise #UD otherwise).
Tile& Configured(int t) {
  ModelTiles& m = This();
  STEADY_CHECK(m.configured && "a tile instruction before LDTILECFG (or after TILERELEASE)");
  STEADY_CHECK(t >= 0 && t < kTiles);
  Tile& tile = m.tiles[t];
  STEADY_CHECK(tile.rows > 0 && "a tile instruction on a tile the configuration leaves out");
  return tile;
}

int32_t Dword(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

void AmxTileModel::LoadConfig(const TileConfig& config) {
  STEADY_CHECK(config.palette == 1 && "palette 1 only");
  STEADY_CHECK(config.start_row == 0);
  ModelTiles& m = This();
  for (int t = 0; t < kTiles; ++t) {
    const int rows = config.rows[t], bytes = config.bytes_per_row[t];
    STEADY_CHECK((rows == 0) == (bytes == 0) && "a tile with rows but no bytes, or bytes but no rows");
    STEADY_CHECK(rows <= kTileMaxRows && bytes <= kTileMaxBytes && "a tile larger than palette 1's 16 x 64 bytes");
    m.tiles[t].rows = rows;
    m.tiles[t].bytes = bytes;
    std::memset(m.tiles[t].data, 0, sizeof(m.tiles[t].data));
  }
  for (int t = kTiles; t < 16; ++t) STEADY_CHECK(config.rows[t] == 0 && config.bytes_per_row[t] == 0);
  m.configured = true;
}

void AmxTileModel::Release() {
  ModelTiles& m = This();
  m = ModelTiles{};
}

void AmxTileModel::Zero(int t) { std::memset(Configured(t).data, 0, sizeof(Tile::data)); }

void AmxTileModel::Load(int t, const void* base, int64_t stride) {
  Tile& tile = Configured(t);
  std::memset(tile.data, 0, sizeof(tile.data));  // rows and bytes past the shape read as zero
  for (int r = 0; r < tile.rows; ++r) std::memcpy(tile.data[r], static_cast<const uint8_t*>(base) + r * stride, size_t(tile.bytes));
}

void AmxTileModel::Store(int t, void* base, int64_t stride) {
  const Tile& tile = Configured(t);
  for (int r = 0; r < tile.rows; ++r) std::memcpy(static_cast<uint8_t*>(base) + r * stride, tile.data[r], size_t(tile.bytes));
}

void AmxTileModel::DotSignedUnsigned(int c, int a, int b) {
  STEADY_CHECK(c != a && a != b && c != b && "TDPBSUD's three tiles must differ");
  Tile &dst = Configured(c);
  const Tile &src1 = Configured(a), &src2 = Configured(b);
  // The instruction's #UD conditions on the shapes.
  STEADY_CHECK(dst.bytes % 4 == 0 && src1.bytes % 4 == 0 && "TDPBSUD: rows of whole dwords");
  STEADY_CHECK(dst.rows == src1.rows && "TDPBSUD: the accumulator and the first source differ in rows");
  STEADY_CHECK(src1.bytes / 4 == src2.rows && "TDPBSUD: the first source's dwords per row are not the second's rows");
  STEADY_CHECK(dst.bytes == src2.bytes && "TDPBSUD: the accumulator and the second source differ in bytes per row");
  for (int m = 0; m < dst.rows; ++m) {
    for (int n = 0; n < dst.bytes / 4; ++n) {
      uint32_t sum = uint32_t(Dword(dst.data[m] + 4 * n));  // wraps as the instruction's adds do
      for (int k = 0; k < src1.bytes / 4; ++k) {
        for (int i = 0; i < 4; ++i) {
          const int32_t x = int8_t(src1.data[m][4 * k + i]);
          const int32_t y = src2.data[k][4 * n + i];
          sum += uint32_t(x * y);
        }
      }
      std::memcpy(dst.data[m] + 4 * n, &sum, 4);
    }
  }
}

}  // namespace steady::cpu
