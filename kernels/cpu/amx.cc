// The AMX bf16 GEMM (amx.h). Compiled for any x86-64 CPU: the AMX and AVX-512 instructions live in
// functions with a target attribute, reached only after AmxAvailable() has checked the CPU and the
// kernel, so the binary still runs where they are missing. Elsewhere (AArch64) only the packing and
// the reference are compiled, and AmxAvailable() is false.
#include "kernels/cpu/amx.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/parallel.h"

#if defined(__x86_64__)
#define STEADY_AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")))
#endif

namespace steady::cpu {
namespace {

constexpr int kTileRows = 16;                         // rows of every tile
constexpr int kGroupTiles = kAmxGroup / 16;           // accumulator tiles of 16 fp32 columns per group
constexpr int64_t kTileValues = 16 * kAmxBlock;       // bf16 values in one 32x16 weight tile (1 KB)

#if defined(__x86_64__)
constexpr long kArchReqXcompPerm = 0x1023;            // linux/arch/x86/include/uapi/asm/prctl.h
constexpr int kXfeatureXtileData = 18;

// What this process may run on AMX tiles: each instruction set with AVX-512 F, BW and VL (the
// kernels' other half) and, for bf16, AVX512_BF16 (rounding the activations).
struct AmxSupport {
  bool bf16 = false, int8 = false;
};

AmxSupport ProbeAmx() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return {};  // OSXSAVE: xgetbv works
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return {};
  const bool amx_bf16 = d & (1u << 22), amx_tile = d & (1u << 24), amx_int8 = d & (1u << 25);
  const bool avx512 = (b & (1u << 16)) && (b & (1u << 30)) && (b & (1u << 31));  // F, BW, VL
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return {};
  const bool avx512_bf16 = a & (1u << 5);
  if (!(amx_tile && avx512 && (amx_bf16 || amx_int8))) return {};
  unsigned lo = 0, hi = 0;
  asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & 0xe6u) != 0xe6u) return {};  // the OS saves SSE, AVX and AVX-512 state
  // Linux hands out the 8 KB of tile data per process on request (since 5.16).
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) != 0) return {};
  return {amx_bf16 && avx512_bf16, amx_int8};
}

const AmxSupport& Support() {
  static const AmxSupport support = ProbeAmx();
  return support;
}

// Tiles 0-3 accumulate (fp32), the others hold 16 rows x 32 inputs of x or a 32x16 weight tile
// (bf16 pairs): all eight 16 rows by 64 bytes.
STEADY_AMX_TARGET void ConfigureTiles() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.bytes_per_row[t] = 64;
    config.rows[t] = kTileRows;
  }
  LoadTileConfig(config);
}

// xb[padded_rows, in_pad] = bf16(x[rows, in]) rounded to nearest even, zero beyond rows and in.
STEADY_AMX_TARGET void RoundRows(const float* x, int rows, int in, int64_t in_pad, int padded_rows, uint16_t* xb) {
  for (int r = 0; r < padded_rows; ++r) {
    for (int64_t k = 0; k < in_pad; k += 16) {
      const int64_t left = r < rows ? std::clamp<int64_t>(in - k, 0, 16) : 0;
      const __mmask16 m = __mmask16((1u << left) - 1u);
      const __m512 v = left > 0 ? _mm512_maskz_loadu_ps(m, x + int64_t(r) * in + k) : _mm512_setzero_ps();
      const __m256bh b = _mm512_cvtneps_pbh(v);
      std::memcpy(xb + r * in_pad + k, &b, sizeof(b));
    }
  }
}

// Copies rows [r0, min(rows, r0 + 16)) of a 16-row accumulator block into y's columns [j0, j0 + cols).
void StoreRows(const float (*acc)[kAmxGroup], int rows, int r0, int out, int64_t j0, int64_t cols, float* y) {
  for (int r = r0; r < std::min(rows, r0 + kTileRows); ++r) {
    std::memcpy(y + int64_t(r) * out + j0, acc[r - r0], size_t(cols) * sizeof(float));
  }
}

// 32 rows (tiles 4 and 5) by one group's 64 columns, in two halves of 32 columns: each weight tile
// (6, 7) serves both row blocks, accumulators 0-1 the first 16 rows, 2-3 the next.
STEADY_AMX_TARGET void RowPair(const uint16_t* xr, int64_t stride, int64_t blocks, const uint16_t* wg,
                               float (*top)[kAmxGroup], float (*bottom)[kAmxGroup]) {
  for (int half = 0; half < 2; ++half) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t kb = 0; kb < blocks; ++kb) {
      const uint16_t* w = wg + (kb * kGroupTiles + 2 * half) * kTileValues;
      _tile_loadd(4, xr + kb * kAmxBlock, stride);
      _tile_loadd(5, xr + kb * kAmxBlock + kTileRows * stride / 2, stride);
      _tile_loadd(6, w, 64);
      _tile_loadd(7, w + kTileValues, 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    const int c = half * 32;
    _tile_stored(0, &top[0][c], kAmxGroup * sizeof(float));
    _tile_stored(1, &top[0][c + 16], kAmxGroup * sizeof(float));
    _tile_stored(2, &bottom[0][c], kAmxGroup * sizeof(float));
    _tile_stored(3, &bottom[0][c + 16], kAmxGroup * sizeof(float));
  }
}

// 16 rows (tile 4) by one group's four column tiles (accumulators 0-3), weight tiles 5-7 in turn.
STEADY_AMX_TARGET void RowBlock(const uint16_t* xr, int64_t stride, int64_t blocks, const uint16_t* wg,
                                float (*acc)[kAmxGroup]) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t kb = 0; kb < blocks; ++kb) {
    const uint16_t* w = wg + kb * kGroupTiles * kTileValues;
    _tile_loadd(4, xr + kb * kAmxBlock, stride);
    _tile_loadd(5, w, 64);
    _tile_loadd(6, w + kTileValues, 64);
    _tile_loadd(7, w + 2 * kTileValues, 64);
    _tile_dpbf16ps(0, 4, 5);
    _tile_loadd(5, w + 3 * kTileValues, 64);
    _tile_dpbf16ps(1, 4, 6);
    _tile_dpbf16ps(2, 4, 7);
    _tile_dpbf16ps(3, 4, 5);
  }
  _tile_stored(0, &acc[0][0], kAmxGroup * sizeof(float));
  _tile_stored(1, &acc[0][16], kAmxGroup * sizeof(float));
  _tile_stored(2, &acc[0][32], kAmxGroup * sizeof(float));
  _tile_stored(3, &acc[0][48], kAmxGroup * sizeof(float));
}

// y's columns of groups [g0, g1): 32 rows of x at a time against each group's weights (then 16),
// which stay in L2 from the first rows to the last. Every y element is the same chain of tile
// products over the blocks of `in` whichever path computes it.
STEADY_AMX_TARGET void Groups(const uint16_t* xb, int rows, int64_t in_pad, const uint16_t* packed, int out,
                              int64_t g0, int64_t g1, float* y) {
  ConfigureTiles();
  const int64_t blocks = in_pad / kAmxBlock;
  const int64_t stride = in_pad * int64_t(sizeof(uint16_t));
  alignas(64) float top[kTileRows][kAmxGroup], bottom[kTileRows][kAmxGroup];
  for (int64_t g = g0; g < g1; ++g) {
    const uint16_t* wg = packed + g * blocks * kGroupTiles * kTileValues;
    const int64_t j0 = g * kAmxGroup, cols = std::min<int64_t>(kAmxGroup, out - j0);
    int r0 = 0;
    for (; r0 + kTileRows < rows; r0 += 2 * kTileRows) {
      RowPair(xb + r0 * in_pad, stride, blocks, wg, top, bottom);
      StoreRows(top, rows, r0, out, j0, cols, y);
      StoreRows(bottom, rows, r0 + kTileRows, out, j0, cols, y);
    }
    if (r0 < rows) {
      RowBlock(xb + r0 * in_pad, stride, blocks, wg, top);
      StoreRows(top, rows, r0, out, j0, cols, y);
    }
  }
  _tile_release();
}

#endif  // __x86_64__

int64_t PaddedIn(int in) { return (int64_t(in) + kAmxBlock - 1) / kAmxBlock * kAmxBlock; }
int64_t GroupCount(int out) { return (int64_t(out) + kAmxGroup - 1) / kAmxGroup; }

}  // namespace

bool AmxAvailable() {
#if defined(__x86_64__)
  return Support().bf16;
#else
  return false;
#endif
}

bool AmxInt8Available() {
#if defined(__x86_64__)
  return Support().int8;
#else
  return false;
#endif
}

int64_t AmxPackedSize(int out, int in) { return GroupCount(out) * kAmxGroup * PaddedIn(in); }

void PackAmxBf16(const uint16_t* w, int out, int in, uint16_t* packed) {
  const int64_t blocks = PaddedIn(in) / kAmxBlock;
  ParallelFor(int(GroupCount(out)), [&](int g) {
    uint16_t* tile = packed + g * blocks * kGroupTiles * kTileValues;
    for (int64_t kb = 0; kb < blocks; ++kb) {
      for (int t = 0; t < kGroupTiles; ++t, tile += kTileValues) {
        // Tile row p holds inputs 2p and 2p+1 of each of the 16 columns, side by side.
        for (int p = 0; p < kTileRows; ++p) {
          for (int n = 0; n < 16; ++n) {
            const int64_t j = int64_t(g) * kAmxGroup + t * 16 + n;
            for (int h = 0; h < 2; ++h) {
              const int64_t k = kb * kAmxBlock + 2 * p + h;
              tile[p * 32 + n * 2 + h] = j < out && k < in ? w[j * in + k] : uint16_t(0);
            }
          }
        }
      }
    }
  });
}

void MatMulNTAmxBf16(const float* x, int rows, int in, const uint16_t* packed, int out, float* y) {
#if defined(__x86_64__)
  const int64_t in_pad = PaddedIn(in);
  const int padded_rows = (rows + kTileRows - 1) / kTileRows * kTileRows;
  thread_local std::vector<uint16_t> xb;
  xb.resize(size_t(padded_rows * in_pad));
  RoundRows(x, rows, in, in_pad, padded_rows, xb.data());
  const uint16_t* rounded = xb.data();  // a task names this thread's buffer, not its own thread's
  const int64_t groups = GroupCount(out);
  // About 4 tasks per thread, so that a thread that starts late still finds work.
  if (int64_t(rows) * in * out < kMinParallelWork) return Groups(rounded, rows, in_pad, packed, out, 0, groups, y);
  const int64_t per_task = std::max<int64_t>(1, groups / (4 * ComputeThreads()));
  ParallelFor(int((groups + per_task - 1) / per_task), [&](int t) {
    const int64_t g0 = t * per_task;
    Groups(rounded, rows, in_pad, packed, out, g0, std::min(groups, g0 + per_task), y);
  });
#else
  STEADY_CHECK(false && "AMX is x86-64 only");
#endif
}

void MatMulNTAmxBf16Reference(const float* x, int rows, int in, const uint16_t* w, int out, float* y) {
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < out; ++j) {
      double s = 0;
      for (int k = 0; k < in; ++k) {
        s += double(Bf16ToFloat(FloatToBf16(x[int64_t(r) * in + k]))) * double(Bf16ToFloat(w[int64_t(j) * in + k]));
      }
      y[int64_t(r) * out + j] = float(s);
    }
  }
}

}  // namespace steady::cpu
