// The int8 kernels on AMX tiles (matmul_dot.h Int8Path::kAmxInt8: Sapphire Rapids and later Xeons).
// One TDPBSUD multiplies 16 rows of q_x (a q8_0 block of each, 32 signed bytes) by a 16-column group's
// packed block (the same 8 vectors of 16 columns x 4 bytes that VPDPBUSD reads, here a 8-row tile):
// 8,192 multiply-adds, where one VPDPBUSD does 64. Each block's int32 sums are exact, as on every
// int8 path, and then go through the AVX-512 kernel's own fp32 step (matmul_dot512-inl.h): the same
// bits as VPDPBUSD's.
//
// The tiles: 0-3 accumulate four column groups (64 outputs) of 16 rows, 4 holds the rows' block of
// q_x, 5-7 the groups' weights in turn. A tile's int32 sums start at -offset * its row's sum of q_x
// (loaded from a start tile; the weights are stored + 128 for q8, q4's nibbles are 0..15 for q - 8,
// ...), so that they end at the exact sum of q_x q_w, and are stored after every block for the fp32
// step: acc += sum * (scale_w * scale_x) per block, in the order of the blocks, the accumulators in L1.
// q8, q4 and q32's q4_1, q5_0 and q5_1 (nibbles and fifth bits unpacked into a tile's 512 bytes per
// group and block) run on the tiles from kAmxMinRows rows; fewer rows, and the K-quants (whose
// sub-block scales the fp32 step would need per 16 or 32 inputs), take the VPDPBUSD kernels.
//
// The kernel is a template over its tiles: AmxTiles (the instructions) or AmxTileModel (amx_tiles.h:
// plain C++), on which it runs and is tested on CPUs without AMX (SetAmxInt8TileModel).
#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/matmul_dot_tiles.h"

#define STEADY_DOT_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vnni,f16c")))
#define STEADY_AMX_INT8_TARGET \
  __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vnni,f16c")))

namespace steady::cpu::dot {
namespace {

#include "kernels/cpu/matmul_dot512-inl.h"

constexpr int kAmxGroups = 4;   // accumulator tiles 0-3, a group of 16 columns each
constexpr int kRowsTile = 4;    // 16 rows x 32 bytes of q_x
constexpr int kAmxRows = 16;    // rows per pass: the tiles' height
constexpr int kAmxMinRows = 4;  // below, the VPDPBUSD kernels (their 1-3 row tiles)
constexpr int WeightTile(int c) { return 5 + c % 3; }

// The instructions, for AmxTiles' tile numbers (GCC's tile intrinsics take the number as a literal,
// so each operation is a switch over the tiles the kernel uses; inlined, with a constant tile).
struct AmxTiles {
  STEADY_AMX_INT8_TARGET static void LoadConfig(const TileConfig& config) { _tile_loadconfig(&config); }
  STEADY_AMX_INT8_TARGET static void Release() { _tile_release(); }
  STEADY_AMX_INT8_TARGET static inline void Zero(int t) {
    switch (t) {
      case 0: _tile_zero(0); break;
      case 1: _tile_zero(1); break;
      case 2: _tile_zero(2); break;
      case 3: _tile_zero(3); break;
      default: __builtin_trap();
    }
  }
  STEADY_AMX_INT8_TARGET static inline void Load(int t, const void* base, int64_t stride) {
    switch (t) {
      case 0: _tile_loadd(0, base, stride); break;
      case 1: _tile_loadd(1, base, stride); break;
      case 2: _tile_loadd(2, base, stride); break;
      case 3: _tile_loadd(3, base, stride); break;
      case 4: _tile_loadd(4, base, stride); break;
      case 5: _tile_loadd(5, base, stride); break;
      case 6: _tile_loadd(6, base, stride); break;
      case 7: _tile_loadd(7, base, stride); break;
      default: __builtin_trap();
    }
  }
  STEADY_AMX_INT8_TARGET static inline void Store(int t, void* base, int64_t stride) {
    switch (t) {
      case 0: _tile_stored(0, base, stride); break;
      case 1: _tile_stored(1, base, stride); break;
      case 2: _tile_stored(2, base, stride); break;
      case 3: _tile_stored(3, base, stride); break;
      default: __builtin_trap();
    }
  }
  // Only the kernel's pairs: accumulator c, the rows' tile, c's weight tile.
  STEADY_AMX_INT8_TARGET static inline void DotSignedUnsigned(int c, int a, int b) {
    if (a != kRowsTile || b != WeightTile(c)) __builtin_trap();
    switch (c) {
      case 0: _tile_dpbsud(0, 4, 5); break;
      case 1: _tile_dpbsud(1, 4, 6); break;
      case 2: _tile_dpbsud(2, 4, 7); break;
      case 3: _tile_dpbsud(3, 4, 5); break;
      default: __builtin_trap();
    }
  }
};

// Tiles 0-3: 16 rows x 16 int32 sums; 4: 16 rows x 32 bytes of q_x; 5-7: 8 rows (4 inputs each) x 16
// columns x 4 bytes of weights.
TileConfig Int8Config() {
  TileConfig config;
  for (int t = 0; t < kTiles; ++t) {
    config.rows[t] = t == kRowsTile || t < kAmxGroups ? kAmxRows : kQ8Block / 4;
    config.bytes_per_row[t] = t == kRowsTile ? kQ8Block : 64;
  }
  return config;
}

// The formats, as the kernel reads a group's packed block: where its weight tile is (Weights, which
// may unpack into `tile`, 512 bytes), what its sums start at (-kOffset * the block's sum of q_x) and
// its fp32 step (Scales, and Min for the formats with a minimum).
struct Q8Format {
  static constexpr int64_t kRecord = kQ8Record;
  static constexpr int32_t kOffset = 128;
  static constexpr bool kMin = false;
  STEADY_DOT_TARGET static const uint8_t* Weights(const uint8_t* record, uint8_t*) { return record; }
  STEADY_DOT_TARGET static __m512 Scales(const uint8_t* record) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(record + 512));
  }
  STEADY_DOT_TARGET static __m512 Min(const uint8_t*) { return _mm512_setzero_ps(); }
};

// q4 and q32's types: Block32Op's records (matmul_dot512.cc), the nibbles (with kFifth their fifth
// bits) unpacked to one byte each: vector v's low nibbles are inputs 4v..4v+3, its high ones
// 16 + 4v.., tile rows v and v + 4.
template <bool kFifth, bool kMinimum, int kOffsetValue>
struct Block32Format {
  static constexpr int64_t kRecord = Block32Record(kFifth, kMinimum), kScalesAt = Block32Scales(kFifth);
  static constexpr int32_t kOffset = kOffsetValue;
  static constexpr bool kMin = kMinimum;
  STEADY_DOT_TARGET static const uint8_t* Weights(const uint8_t* record, uint8_t* tile) {
    const __m512i low = _mm512_set1_epi8(0x0f);
    for (int v = 0; v < 4; ++v) {
      const __m512i raw = _mm512_loadu_si512(record + v * 64);
      _mm512_store_si512(tile + v * 64, Nibbles<kFifth>(raw, low, record + 256, 2 * v));
      _mm512_store_si512(tile + (v + 4) * 64, Nibbles<kFifth>(_mm512_srli_epi16(raw, 4), low, record + 256, 2 * v + 1));
    }
    return tile;
  }
  STEADY_DOT_TARGET static __m512 Scales(const uint8_t* record) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(record + kScalesAt)));
  }
  STEADY_DOT_TARGET static __m512 Min(const uint8_t* record) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(record + kScalesAt + 32)));
  }
};

// y's columns of groups [g0, g1) of one product: per tile of kAmxGroups groups and pass of 16 rows,
// every block through the tiles and then the fp32 step. x.x has whole passes of rows (zero padded).
template <class Tiles, class Format>
STEADY_AMX_INT8_TARGET void Groups(const Q8Rows& x, int rows, const uint8_t* packed, int64_t out, int64_t g0,
                                   int64_t g1, float* y) {
  const int64_t steps = x.blocks;
  alignas(64) int32_t start[kAmxRows][16];
  alignas(64) int32_t sums[kAmxGroups][kAmxRows][16];
  alignas(64) uint8_t unpacked[kAmxGroups][512];
  alignas(64) float acc[kAmxRows][kAmxGroups * kGroup];
  Tiles::LoadConfig(Int8Config());
  for (int64_t g = g0; g < g1; g += kAmxGroups) {
    const int groups = int(std::min<int64_t>(kAmxGroups, g1 - g));
    const uint8_t* w = packed + g * steps * Format::kRecord;  // group g + c's block b: (c * steps + b) records on
    for (int r0 = 0; r0 < rows; r0 += kAmxRows) {
      const int m = std::min(kAmxRows, rows - r0);
      std::memset(acc, 0, sizeof(acc));
      for (int64_t b = 0; b < steps; ++b) {
        for (int rr = 0; rr < kAmxRows; ++rr) {
          const int32_t s = rr < m ? -Format::kOffset * x.xsum[(r0 + rr) * steps + b] : 0;
          _mm512_store_si512(start[rr], _mm512_set1_epi32(s));
        }
        Tiles::Load(kRowsTile, x.x + (r0 * steps + b) * kQ8Block, steps * kQ8Block);
        for (int c = 0; c < groups; ++c) {
          Tiles::Load(c, start, sizeof(start[0]));
          Tiles::Load(WeightTile(c), Format::Weights(w + (c * steps + b) * Format::kRecord, unpacked[c]), 64);
          Tiles::DotSignedUnsigned(c, kRowsTile, WeightTile(c));
        }
        for (int c = 0; c < groups; ++c) Tiles::Store(c, sums[c], sizeof(sums[c][0]));
        for (int c = 0; c < groups; ++c) {
          const uint8_t* record = w + (c * steps + b) * Format::kRecord;
          const __m512 ws = Format::Scales(record);
          for (int rr = 0; rr < m; ++rr) {
            float* a = &acc[rr][c * kGroup];
            const int64_t i = (r0 + rr) * steps + b;
            __m512 sum = ScaleOne(_mm512_load_si512(sums[c][rr]), ws, x.xscale[i], _mm512_load_ps(a));
            if constexpr (Format::kMin) sum = _mm512_fmadd_ps(Format::Min(record), _mm512_set1_ps(x.xscale[i] * float(x.xsum[i])), sum);
            _mm512_store_ps(a, sum);
          }
        }
      }
      const int64_t cols = std::min<int64_t>(groups * kGroup, out - g * kGroup);
      for (int rr = 0; rr < m; ++rr) std::memcpy(y + (r0 + rr) * out + g * kGroup, acc[rr], sizeof(float) * cols);
    }
  }
  Tiles::Release();
}

// x quantized once (AVX-512's quantizer), copied with zero rows up to a whole pass, then every
// product's column groups through Groups on the compute threads.
template <class Tiles, class Format>
void OnTiles(const float* x, int rows, int in, const DotProduct* products, int count) {
  Q8Rows xq = QuantizeRows(x, rows, in, QuantizeRow512);
  thread_local std::vector<int8_t> scratch;
  const int64_t bytes = xq.blocks * kQ8Block, padded = (rows + kAmxRows - 1) / kAmxRows * kAmxRows;
  int8_t* q = Scratch(scratch, size_t(padded * bytes));
  std::memcpy(q, xq.x, size_t(rows * bytes));
  std::memset(q + rows * bytes, 0, size_t((padded - rows) * bytes));
  xq.x = q;
  SplitGroups(kAmxGroups, rows, in, products, count, [&](int i, int64_t g0, int64_t g1) {
    const DotProduct& p = products[i];
    Groups<Tiles, Format>(xq, rows, static_cast<const uint8_t*>(p.packed), p.out, g0, g1, p.y);
  });
}

// On the tiles from kAmxMinRows rows (on the model at every row count, so that the tests reach the
// tiles' code with 1-3 rows too), else the VPDPBUSD kernel `vnni` names.
template <class Tiles, class Format, Int8Kernel Int8Kernels::*vnni>
void Kernel(const float* x, int rows, int in, const DotProduct* products, int count) {
  if (rows < kAmxMinRows && std::is_same_v<Tiles, AmxTiles>) return (kAvx512VnniKernels.*vnni)(x, rows, in, products, count);
  OnTiles<Tiles, Format>(x, rows, in, products, count);
}
template <Int8Kernel Int8Kernels::*vnni>
void Vnni(const float* x, int rows, int in, const DotProduct* products, int count) {
  (kAvx512VnniKernels.*vnni)(x, rows, in, products, count);
}

template <class Tiles>
constexpr Int8Kernels kTileKernels = {
    Kernel<Tiles, Q8Format, &Int8Kernels::q8>,
    Kernel<Tiles, Block32Format<false, false, 8>, &Int8Kernels::q4>,
    Vnni<&Int8Kernels::q4k>,
    Vnni<&Int8Kernels::q5k>,
    Vnni<&Int8Kernels::q6k>,
    Kernel<Tiles, Block32Format<false, true, 0>, &Int8Kernels::q4_1>,
    Kernel<Tiles, Block32Format<true, false, 16>, &Int8Kernels::q5_0>,
    Kernel<Tiles, Block32Format<true, true, 0>, &Int8Kernels::q5_1>,
};

}  // namespace

const Int8Kernels kAmxInt8Kernels = kTileKernels<AmxTiles>;
const Int8Kernels kAmxInt8ModelKernels = kTileKernels<AmxTileModel>;

}  // namespace steady::cpu::dot

#endif  // __x86_64__
