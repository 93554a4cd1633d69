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
// Every int8 format runs on the tiles from kAmxInt8MinRows rows, fewer rows on the VPDPBUSD kernels; the
// 4- to 6-bit ones are unpacked into a tile's 512 bytes per group and block (as VPDPBUSD's kernels
// unpack them into registers), and q6k's blocks split into its two sub-blocks of 16 (TileRoles).
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

constexpr int kAccumulators = 4;  // tiles 0-3: 16 rows x 16 int32 sums each
constexpr int kAmxRows = 16;      // rows per pass: the tiles' height

// The tiles of a format whose blocks of 32 inputs split into kSplit sub-blocks (1, or q6k's 2 of 16):
// kAccumulators / kSplit column groups a pass, group c's sums of sub-block h in tile c * kSplit + h;
// the rows' q_x of sub-block h in tile 4 + h (16 rows x 32 / kSplit bytes); the weights of group c's
// sub-block h (32 / kSplit / 4 rows of 16 columns x 4 bytes) in tile 5 + c % 3 for whole blocks, else
// 6 + h.
template <int kSplit>
struct TileRoles {
  static constexpr int kGroups = kAccumulators / kSplit;
  static constexpr int kRowBytes = kQ8Block / kSplit;
  static constexpr int Sums(int c, int h) { return c * kSplit + h; }
  static constexpr int Rows(int h) { return 4 + h; }
  static constexpr int Weights(int c, int h) { return kSplit == 1 ? 5 + c % 3 : 6 + h; }
  // Tiles 0-3 16 rows x 64 bytes, the rows' tiles 16 x kRowBytes, the weights' kRowBytes / 4 x 64.
  static TileConfig Config() {
    TileConfig config;
    for (int t = 0; t < kTiles; ++t) {
      const bool rows = t >= 4 && t < 4 + kSplit;
      config.rows[t] = uint8_t(t < kAccumulators || rows ? kAmxRows : kRowBytes / 4);
      config.bytes_per_row[t] = uint16_t(rows ? kRowBytes : 64);
    }
    return config;
  }
};

// The instructions, for AmxTiles' tile numbers (GCC's tile intrinsics take the number as a literal,
// so each operation is a switch over the tiles the kernel uses; inlined, with a constant tile).
struct AmxTiles {
  // Not inlined, as a second guard: the caller must have the whole configuration in memory.
  __attribute__((noinline)) STEADY_AMX_INT8_TARGET static void LoadConfig(const TileConfig& config) {
    LoadTileConfig(config);
  }
  STEADY_AMX_INT8_TARGET static void Release() { _tile_release(); }
  // GCC's TILELOADD asm names no memory as read: the barrier keeps the stores of what it loads (the
  // start tile, unpacked weights) before it.
  STEADY_AMX_INT8_TARGET static inline void Load(int t, const void* base, int64_t stride) {
    asm volatile("" : : : "memory");
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
  // Only the triples TileRoles uses: whole blocks (accumulator c, rows 4, weights 5 + c % 3) and
  // halves (accumulator 2c + h, rows 4 + h, weights 6 + h).
  STEADY_AMX_INT8_TARGET static inline void DotSignedUnsigned(int c, int a, int b) {
    switch (c * 64 + a * 8 + b) {
      case 0 * 64 + 4 * 8 + 5: _tile_dpbsud(0, 4, 5); break;
      case 1 * 64 + 4 * 8 + 6: _tile_dpbsud(1, 4, 6); break;
      case 2 * 64 + 4 * 8 + 7: _tile_dpbsud(2, 4, 7); break;
      case 3 * 64 + 4 * 8 + 5: _tile_dpbsud(3, 4, 5); break;
      case 0 * 64 + 4 * 8 + 6: _tile_dpbsud(0, 4, 6); break;
      case 1 * 64 + 5 * 8 + 7: _tile_dpbsud(1, 5, 7); break;
      case 2 * 64 + 4 * 8 + 6: _tile_dpbsud(2, 4, 6); break;
      case 3 * 64 + 5 * 8 + 7: _tile_dpbsud(3, 5, 7); break;
      default: __builtin_trap();
    }
  }
};

// The fp32 sums acc[rr] (rows rr < m, kAccumulators * 16 floats apart) += each row's int32 sums of
// block b times ws * scale_x, then with kMin + mins * (scale_x * the block's sum of q_x): the VPDPBUSD
// kernels' per-lane arithmetic (matmul_dot512.cc Q8Op, Block32Op).
template <bool kMin>
STEADY_DOT_TARGET inline void BlockStep(const Q8Rows& x, int r0, int m, int64_t b, __m512 ws, __m512 mins,
                                        const int32_t (*sums)[16], float* acc) {
  for (int rr = 0; rr < m; ++rr) {
    float* a = acc + rr * kAccumulators * kGroup;
    const int64_t i = (r0 + rr) * x.blocks + b;
    __m512 sum = ScaleOne(_mm512_load_si512(sums[rr]), ws, x.xscale[i], _mm512_load_ps(a));
    if constexpr (kMin) sum = _mm512_fmadd_ps(mins, _mm512_set1_ps(x.xscale[i] * float(x.xsum[i])), sum);
    _mm512_store_ps(a, sum);
  }
}

// The formats, as the kernel reads a group's packed weights (`group`, its records for every step of
// the input; Steps of them for x's blocks): kSplit sub-blocks a block of 32 inputs, where block b's
// weights are as 8 rows of 16 columns x 4 bytes (Weights, which may unpack into `tile`, 512 bytes;
// sub-block h's rows from h * 256 / kSplit bytes on), what a sub-block's sums start at (-kOffset *
// its sum of q_x) and its fp32 step (Step, for rows r0 .. r0 + m - 1).
struct Q8Format {
  static constexpr int64_t kRecord = kQ8Record;
  static constexpr int32_t kOffset = 128;
  static constexpr int kSplit = 1;
  static int64_t Steps(int64_t blocks) { return blocks; }
  STEADY_DOT_TARGET static const uint8_t* Weights(const uint8_t* group, int64_t b, uint8_t*) { return group + b * kRecord; }
  STEADY_DOT_TARGET static void Step(const uint8_t* group, int64_t b, int, const Q8Rows& x, int r0, int m,
                                     const int32_t (*sums)[16], float* acc) {
    const __m512 ws = _mm512_loadu_ps(reinterpret_cast<const float*>(group + b * kRecord + 512));
    BlockStep<false>(x, r0, m, b, ws, ws, sums, acc);
  }
};

// Vector v of a 4-bit block (with kFifth its fifth bits, 64 bytes after v = 3's vector) unpacked to
// a byte per input: its low nibbles are inputs 4v..4v+3, its high ones 16 + 4v.., tile rows v and v + 4.
template <bool kFifth>
STEADY_DOT_TARGET inline const uint8_t* UnpackNibbles(const uint8_t* nibbles, uint8_t* tile) {
  const __m512i low = _mm512_set1_epi8(0x0f);
  for (int v = 0; v < 4; ++v) {
    const __m512i raw = _mm512_loadu_si512(nibbles + v * 64);
    _mm512_store_si512(tile + v * 64, Nibbles<kFifth>(raw, low, nibbles + 256, 2 * v));
    _mm512_store_si512(tile + (v + 4) * 64, Nibbles<kFifth>(_mm512_srli_epi16(raw, 4), low, nibbles + 256, 2 * v + 1));
  }
  return tile;
}

// q4 and q32's types: Block32Op's records (matmul_dot512.cc), the nibbles unpacked.
template <bool kFifth, bool kMin, int kOffsetValue>
struct Block32Format {
  static constexpr int64_t kRecord = Block32Record(kFifth, kMin), kScalesAt = Block32Scales(kFifth);
  static constexpr int32_t kOffset = kOffsetValue;
  static constexpr int kSplit = 1;
  static int64_t Steps(int64_t blocks) { return blocks; }
  STEADY_DOT_TARGET static const uint8_t* Weights(const uint8_t* group, int64_t b, uint8_t* tile) {
    return UnpackNibbles<kFifth>(group + b * kRecord, tile);
  }
  STEADY_DOT_TARGET static void Step(const uint8_t* group, int64_t b, int, const Q8Rows& x, int r0, int m,
                                     const int32_t (*sums)[16], float* acc) {
    const uint8_t* scales = group + b * kRecord + kScalesAt;
    const __m512 ws = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales)));
    const __m512 mins = kMin ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + 32))) : ws;
    BlockStep<kMin>(x, r0, m, b, ws, mins, sums, acc);
  }
};

// q4k and q5k: KQuantOp's records (matmul_dot512.cc), a super-block of 8 sub-blocks of 32 (one q8_0
// block of x each) a step, the sub-block's nibbles unpacked; the sums start at 0 (q is unsigned) and
// the fp32 step is KQuantOp's (KQuantOne): acc += sum * (d * sc * scale_x), then - (dmin * m) *
// (scale_x * the sub-block's sum of q_x).
template <bool kFifth>
struct KQuantFormat {
  static constexpr int64_t kRecord = KQuantRecord(kFifth), kSubRecord = KQuantSubRecord(kFifth);
  static constexpr int32_t kOffset = 0;
  static constexpr int kSplit = 1;
  static int64_t Steps(int64_t blocks) { return (blocks + 7) / 8; }
  STEADY_DOT_TARGET static const uint8_t* Weights(const uint8_t* group, int64_t b, uint8_t* tile) {
    return UnpackNibbles<kFifth>(group + (b / 8) * kRecord + kQ4KHead + (b % 8) * kSubRecord, tile);
  }
  STEADY_DOT_TARGET static void Step(const uint8_t* group, int64_t b, int, const Q8Rows& x, int r0, int m,
                                     const int32_t (*sums)[16], float* acc) {
    __m512 scale, min;
    KQuantScales(group + (b / 8) * kRecord, b % 8, scale, min);
    for (int rr = 0; rr < m; ++rr) {
      float* a = acc + rr * kAccumulators * kGroup;
      const int64_t i = (r0 + rr) * x.blocks + b;
      _mm512_store_ps(a, KQuantOne(_mm512_load_si512(sums[rr]), scale, min, x.xscale[i], x.xsum[i], _mm512_load_ps(a)));
    }
  }
};

// q6k: Q6KOp's records (matmul_dot512.cc), a super-block a step; each block of 32 unpacked (its
// nibble vector u / 2, low or high nibbles, joined to its two high bits: Q6KFour) into 8 rows of 4
// inputs, the two sub-blocks of 16 halves of it; each sub-block's sums start at -32 * its sum of q_x
// (q is 0..63 for q - 32) and its fp32 step is Q6KOp's: acc += sum * (d * sc * scale_x).
struct Q6KFormat {
  static constexpr int64_t kRecord = kQ6KRecord;
  static constexpr int32_t kOffset = 32;
  static constexpr int kSplit = 2;
  static int64_t Steps(int64_t blocks) { return (blocks + 7) / 8; }
  STEADY_DOT_TARGET static const uint8_t* Weights(const uint8_t* group, int64_t b, uint8_t* tile) {
    const uint8_t* block = group + (b / 8) * kRecord + kQ6KHead + (b % 8) * kQ6KBlockRecord;
    const __m512i low = _mm512_set1_epi8(0x0f);
    for (int u = 0; u < 8; ++u) _mm512_store_si512(tile + u * 64, Q6KFour(block, u, low));
    return tile;
  }
  STEADY_DOT_TARGET static void Step(const uint8_t* group, int64_t b, int h, const Q8Rows& x, int r0, int m,
                                     const int32_t (*sums)[16], float* acc) {
    const __m512 scale = Q6KScale(group + (b / 8) * kRecord, 2 * (b % 8) + h);
    BlockStep<false>(x, r0, m, b, scale, scale, sums, acc);
  }
};

// y's columns of groups [g0, g1) of one product: per TileRoles::kGroups groups and pass of 16 rows,
// every block of x through the tiles and then the fp32 step. x.x has whole passes of rows (zero
// padded).
template <class Tiles, class Format>
STEADY_AMX_INT8_TARGET void Groups(const Q8Rows& x, int rows, const uint8_t* packed, int64_t out, int64_t g0,
                                   int64_t g1, float* y) {
  using Roles = TileRoles<Format::kSplit>;
  constexpr int kSplit = Format::kSplit;
  const int64_t blocks = x.blocks, group_bytes = Format::Steps(blocks) * Format::kRecord;
  alignas(64) int32_t start[kSplit][kAmxRows][16];
  alignas(64) int32_t sums[kAccumulators][kAmxRows][16];
  alignas(64) uint8_t unpacked[Roles::kGroups][512];
  alignas(64) float acc[kAmxRows][kAccumulators * kGroup];
  Tiles::LoadConfig(Roles::Config());
  for (int64_t g = g0; g < g1; g += Roles::kGroups) {
    const int groups = int(std::min<int64_t>(Roles::kGroups, g1 - g));
    const uint8_t* w = packed + g * group_bytes;  // group g + c's weights: c * group_bytes on
    for (int r0 = 0; r0 < rows; r0 += kAmxRows) {
      const int m = std::min(kAmxRows, rows - r0);
      std::memset(acc, 0, sizeof(acc));
      for (int64_t b = 0; b < blocks; ++b) {
        for (int h = 0; h < kSplit; ++h) {
          for (int rr = 0; rr < kAmxRows; ++rr) {
            const int32_t xsum = rr >= m ? 0 : kSplit == 1 ? x.xsum[(r0 + rr) * blocks + b] : x.HalfSum(r0 + rr, b, h);
            _mm512_store_si512(start[h][rr], _mm512_set1_epi32(-Format::kOffset * xsum));
          }
          Tiles::Load(Roles::Rows(h), x.x + (r0 * blocks + b) * kQ8Block + h * Roles::kRowBytes, blocks * kQ8Block);
        }
        for (int c = 0; c < groups; ++c) {
          const uint8_t* weights = Format::Weights(w + c * group_bytes, b, unpacked[c]);
          for (int h = 0; h < kSplit; ++h) {
            Tiles::Load(Roles::Sums(c, h), start[h], sizeof(start[h][0]));
            Tiles::Load(Roles::Weights(c, h), weights + h * 512 / kSplit, 64);
            Tiles::DotSignedUnsigned(Roles::Sums(c, h), Roles::Rows(h), Roles::Weights(c, h));
          }
        }
        for (int t = 0; t < groups * kSplit; ++t) Tiles::Store(t, sums[t], sizeof(sums[t][0]));
        for (int c = 0; c < groups; ++c) {
          for (int h = 0; h < kSplit; ++h) {
            Format::Step(w + c * group_bytes, b, h, x, r0, m, sums[Roles::Sums(c, h)], &acc[0][c * kGroup]);
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
  if constexpr (Format::kSplit == 2) xq = WithHalfSums(xq, rows);
  thread_local std::vector<int8_t> scratch;
  const int64_t bytes = xq.blocks * kQ8Block, padded = (rows + kAmxRows - 1) / kAmxRows * kAmxRows;
  int8_t* q = Scratch(scratch, size_t(padded * bytes));
  std::memcpy(q, xq.x, size_t(rows * bytes));
  std::memset(q + rows * bytes, 0, size_t((padded - rows) * bytes));
  xq.x = q;
  SplitGroups(TileRoles<Format::kSplit>::kGroups, rows, in, products, count, [&](int i, int64_t g0, int64_t g1) {
    const DotProduct& p = products[i];
    Groups<Tiles, Format>(xq, rows, static_cast<const uint8_t*>(p.packed), p.out, g0, g1, p.y);
  });
}

// On the tiles from kAmxInt8MinRows rows (on the model at every row count, so that the tests reach the
// tiles' code with 1-3 rows too), else the VPDPBUSD kernel `vnni` names.
template <class Tiles, class Format, Int8Kernel Int8Kernels::*vnni>
void Kernel(const float* x, int rows, int in, const DotProduct* products, int count) {
  if (rows < kAmxInt8MinRows && std::is_same_v<Tiles, AmxTiles>) return (kAvx512VnniKernels.*vnni)(x, rows, in, products, count);
  OnTiles<Tiles, Format>(x, rows, in, products, count);
}

template <class Tiles>
constexpr Int8Kernels kTileKernels = {
    Kernel<Tiles, Q8Format, &Int8Kernels::q8>,
    Kernel<Tiles, Block32Format<false, false, 8>, &Int8Kernels::q4>,
    Kernel<Tiles, KQuantFormat<false>, &Int8Kernels::q4k>,
    Kernel<Tiles, KQuantFormat<true>, &Int8Kernels::q5k>,
    Kernel<Tiles, Q6KFormat, &Int8Kernels::q6k>,
    Kernel<Tiles, Block32Format<false, true, 0>, &Int8Kernels::q4_1>,
    Kernel<Tiles, Block32Format<true, false, 16>, &Int8Kernels::q5_0>,
    Kernel<Tiles, Block32Format<true, true, 0>, &Int8Kernels::q5_1>,
};

}  // namespace

const Int8Kernels kAmxInt8Kernels = kTileKernels<AmxTiles>;
const Int8Kernels kAmxInt8ModelKernels = kTileKernels<AmxTileModel>;

}  // namespace steady::cpu::dot

#endif  // __x86_64__
