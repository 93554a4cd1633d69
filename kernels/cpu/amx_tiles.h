// AMX's tile registers for the kernels that use them (kernels/cpu only): the LDTILECFG operand, and
// AmxTileModel, the instructions the int8 kernel uses (matmul_dot_amx.cc) in plain C++ after the
// pseudo-code of Intel's ISA reference, so that the kernel's packing, indexing and arithmetic run and
// are tested on CPUs without AMX (tests/kernels/cpu_dot_test.cc, cpu_amx_test.cc). The model keeps
// eight tiles of up to 16 rows x 64 bytes per thread, shaped by the configuration, and fails a CHECK
// where the instructions fault: a tile used before LDTILECFG or after TILERELEASE, a configuration
// outside palette 1's limits, a TDPBSUD whose tiles' shapes do not fit together or are not distinct.
#ifndef STEADY_KERNELS_CPU_AMX_TILES_H_
#define STEADY_KERNELS_CPU_AMX_TILES_H_

#include <cstdint>

namespace steady::cpu {

// The LDTILECFG operand (palette 1: eight tiles, each at most 16 rows of at most 64 bytes); a tile
// with 0 rows and 0 bytes is not configured.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

#if defined(__x86_64__)
// LDTILECFG of the whole 64-byte operand. Not GCC 12's _tile_loadconfig: its asm names only the
// operand's first 8 bytes as read, so once inlined the compiler may drop the stores of the rows and
// bytes per row (it did, for the int8 kernel: every tile left unconfigured, and the first TILELOADD
// faults).
inline void LoadTileConfig(const TileConfig& config) { asm volatile("ldtilecfg %0" : : "m"(config)); }
#endif

inline constexpr int kTiles = 8;          // palette 1
inline constexpr int kTileMaxRows = 16;
inline constexpr int kTileMaxBytes = 64;  // per row

// The tile instructions, one static function each (the names the kernel's hardware policy also
// has), on this thread's model tiles.
struct AmxTileModel {
  static void LoadConfig(const TileConfig& config);     // LDTILECFG: every tile zero
  static void Release();                                // TILERELEASE: unconfigured again
  static void Zero(int t);                              // TILEZERO
  static void Load(int t, const void* base, int64_t stride);  // TILELOADD: rows x bytes, `stride` apart
  static void Store(int t, void* base, int64_t stride);       // TILESTORED
  // TDPBSUD: c[m][n] (int32) += sum over k of a's signed bytes 4k..4k+3 of row m times b's unsigned
  // bytes 4n..4n+3 of row k, wrapping as the instruction does.
  static void DotSignedUnsigned(int c, int a, int b);
};

}  // namespace steady::cpu

#endif  // STEADY_KERNELS_CPU_AMX_TILES_H_
