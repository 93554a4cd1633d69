// The dot-product GEMMs of matmul_dot.h, the part every CPU shares: which instruction path this CPU
// takes, the packed layouts (packing, q4's quantizer, the readers), the activations' rounding and
// quantization into per-thread scratch, and the plain double-precision references. The kernels
// themselves are per instruction set: matmul_dot512.cc (AVX-512), matmul_dot256.cc (AVX-VNNI, AVX2)
// and matmul_dot_arm.cc (AArch64 SDOT and BFDOT), each compiled only for its architecture.
#include "kernels/cpu/matmul_dot.h"

#if defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "base/check.h"
#include "kernels/cpu/amx.h"
#include "kernels/cpu/matmul_dot_tiles.h"
#include "kernels/cpu/parallel.h"

namespace steady::cpu {
namespace {

using dot::Groups;
using dot::kGroup;
using dot::kQ4KHead;
using dot::kQ4KRecord;
using dot::kQ4Record;
using dot::kQ6KBlockRecord;
using dot::kQ6KHead;
using dot::kQ6KRecord;
using dot::kQ8Record;
using dot::Scratch;

// fn(g) for every column group of an [out, in] matrix being packed, on the compute threads: each
// group's records are its own, so the packed bytes do not depend on the split (on one thread,
// packing made llama1b's q8 conversion at start about 2 s longer on 2 vCPUs; docs/cpu.md).
template <typename Fn>
void ForEachGroup(int64_t out, int64_t in, const Fn& fn) {
  constexpr int64_t kWeightsPerPiece = 16 * kElementGrain;  // a copy of some tens of microseconds
  const int64_t groups = Groups(out), per_group = std::max<int64_t>(1, kGroup * in);
  ParallelRange(groups, std::max<int64_t>(1, kWeightsPerPiece / per_group), [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) fn(g);
  });
}

#if defined(__x86_64__)
bool HasAvx512Base() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}
// Whether the CPU has AMX-INT8 (and AVX512_VNNI, for the fp32 step and the kernels of fewer rows).
bool AmxInt8Hardware() {
  static const bool ok = Int8PathAvailable(Int8Path::kAvx512Vnni) && AmxInt8Available();
  return ok;
}
#elif defined(__aarch64__)
// The kernel's hardware capability bits (what /proc/cpuinfo's Features line lists).
bool HasHwcap(unsigned long type, unsigned long bit) { return (getauxval(type) & bit) != 0; }
#endif

}  // namespace

bool Bf16PathAvailable(Bf16Path path) {
#if defined(__x86_64__)
  static const bool avx512_bf16 = HasAvx512Base() && __builtin_cpu_supports("avx512bf16");
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (path == Bf16Path::kAvx512Bf16) return avx512_bf16;
  if (path == Bf16Path::kAvx2) return avx2;
#elif defined(__aarch64__)
  static const bool bf16 = HasHwcap(AT_HWCAP2, HWCAP2_BF16);
  if (path == Bf16Path::kArmBf16) return bf16;
#endif
  return path == Bf16Path::kNone;
}

Bf16Path WidestBf16Path() {
  for (Bf16Path p : {Bf16Path::kAvx512Bf16, Bf16Path::kAvx2, Bf16Path::kArmBf16}) {
    if (Bf16PathAvailable(p)) return p;
  }
  return Bf16Path::kNone;
}

namespace {

std::atomic<Bf16Path>& Bf16PathSetting() {
  static std::atomic<Bf16Path> path{WidestBf16Path()};
  return path;
}

}  // namespace

void SetBf16Path(Bf16Path path) {
  STEADY_CHECK(Bf16PathAvailable(path));
  Bf16PathSetting().store(path, std::memory_order_relaxed);
}
Bf16Path CurrentBf16Path() { return Bf16PathSetting().load(std::memory_order_relaxed); }

const char* Bf16PathName(Bf16Path path) {
  static const std::string widening = std::string("widening fp32 (") + SimdTargetName() + ")";
  switch (path) {
    case Bf16Path::kAvx512Bf16: return "avx512_bf16 (VDPBF16PS)";
    case Bf16Path::kAvx2: return "avx2 (FMA on bf16 pairs)";
    case Bf16Path::kArmBf16: return "arm_bf16 (BFMMLA, BFDOT)";
    case Bf16Path::kNone: return widening.c_str();
  }
  return "?";
}

const char* Bf16PathExtension(Bf16Path path) {
  switch (path) {
    case Bf16Path::kAvx512Bf16: return "AVX512_BF16";
    case Bf16Path::kAvx2: return "AVX2";
    case Bf16Path::kArmBf16: return "BF16";
    case Bf16Path::kNone: return "";
  }
  return "?";
}

bool Bf16DotAvailable() { return CurrentBf16Path() != Bf16Path::kNone; }
const char* Bf16DotPath() { return Bf16PathName(CurrentBf16Path()); }
const char* Bf16DotExtension() { return Bf16PathExtension(CurrentBf16Path()); }
std::string CpuModelName() {
  static const std::string name = [] {
    std::ifstream in("/proc/cpuinfo");
    std::string line, model, family, number, implementer, part;
    // The first processor's block: every core of a server CPU is the same model.
    while (std::getline(in, line) && !line.empty()) {
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string key = line.substr(0, colon), value = line.substr(colon + 1);
      key.erase(key.find_last_not_of(" \t") + 1);
      value.erase(0, value.find_first_not_of(' '));
      if (key == "model name") model = value;
      if (key == "cpu family") family = value;
      if (key == "model") number = value;
      if (key == "CPU implementer") implementer = value;
      if (key == "CPU part") part = value;
    }
    if (!model.empty()) return family.empty() ? model : model + " (family " + family + ", model " + number + ")";
    if (!implementer.empty()) return "implementer " + implementer + ", part " + part;
    return std::string("unknown");
  }();
  return name;
}
bool Int8PathAvailable(Int8Path path) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  static const bool avx512_vnni = HasAvx512Base() && __builtin_cpu_supports("avx512vnni");
  switch (path) {
    case Int8Path::kAmxInt8: return AmxInt8Hardware() || (avx512_vnni && AmxInt8TileModel());
    case Int8Path::kAvx512Vnni: return avx512_vnni;
    case Int8Path::kAvxVnni: {
      static const bool ok = avx2 && __builtin_cpu_supports("avxvnni");
      return ok;
    }
    case Int8Path::kAvx2: return avx2;
    default: break;
  }
#elif defined(__aarch64__)
  static const bool dot = HasHwcap(AT_HWCAP, HWCAP_ASIMDDP);
  if (path == Int8Path::kArmDot) return dot;
  if (path == Int8Path::kArmI8mm) {
    static const bool ok = dot && HasHwcap(AT_HWCAP2, HWCAP2_I8MM);
    return ok;
  }
#endif
  return path == Int8Path::kNone;
}

Int8Path WidestInt8Path() {
#if defined(__x86_64__)
  if (AmxInt8Hardware()) return Int8Path::kAmxInt8;
#endif
  for (Int8Path p : {Int8Path::kAvx512Vnni, Int8Path::kAvxVnni, Int8Path::kAvx2, Int8Path::kArmI8mm, Int8Path::kArmDot}) {
    if (Int8PathAvailable(p)) return p;
  }
  return Int8Path::kNone;
}

namespace {

std::atomic<Int8Path>& Int8PathSetting() {
  static std::atomic<Int8Path> path{WidestInt8Path()};
  return path;
}

std::atomic<bool>& TileModelSetting() {
  static std::atomic<bool> on{false};
  return on;
}

}  // namespace

void SetAmxInt8TileModel(bool on) { TileModelSetting().store(on, std::memory_order_relaxed); }
bool AmxInt8TileModel() { return TileModelSetting().load(std::memory_order_relaxed); }

void SetInt8Path(Int8Path path) {
  STEADY_CHECK(Int8PathAvailable(path));
  Int8PathSetting().store(path, std::memory_order_relaxed);
}
Int8Path CurrentInt8Path() { return Int8PathSetting().load(std::memory_order_relaxed); }

const char* Int8PathName(Int8Path path) {
  static const std::string widening = std::string("widening fp32 (") + SimdTargetName() + ")";
  switch (path) {
    case Int8Path::kAmxInt8: return AmxInt8TileModel() ? "amx_int8 (TDPBSUD on the tile model)" : "amx_int8 (TDPBSUD)";
    case Int8Path::kAvx512Vnni: return "avx512_vnni (VPDPBUSD)";
    case Int8Path::kAvxVnni: return "avx_vnni (VPDPBUSD ymm)";
    case Int8Path::kAvx2: return "avx2 (VPMADDUBSW)";
    case Int8Path::kArmI8mm: return "arm_i8mm (SMMLA)";
    case Int8Path::kArmDot: return "arm_dotprod (SDOT)";
    case Int8Path::kNone: return widening.c_str();
  }
  return "?";
}

const char* Int8PathExtension(Int8Path path) {
  switch (path) {
    case Int8Path::kAmxInt8: return "AMX_INT8";
    case Int8Path::kAvx512Vnni: return "AVX512_VNNI";
    case Int8Path::kAvxVnni: return "AVX_VNNI";
    case Int8Path::kAvx2: return "AVX2";
    case Int8Path::kArmI8mm: return "I8MM";
    case Int8Path::kArmDot: return "DOTPROD";
    case Int8Path::kNone: return "";
  }
  return "?";
}

bool Int8DotAvailable() { return CurrentInt8Path() != Int8Path::kNone; }
const char* Int8DotPath() { return Int8PathName(CurrentInt8Path()); }

int64_t Bf16DotPackedSize(int64_t out, int64_t in) { return Groups(out) * ((in + 1) / 2) * 32; }

void PackBf16Dot(const uint16_t* w, int64_t out, int64_t in, uint16_t* packed) {
  const int64_t pairs = (in + 1) / 2;
  ForEachGroup(out, in, [&](int64_t g) {
    for (int64_t p = 0; p < pairs; ++p) {
      uint16_t* v = packed + (g * pairs + p) * 32;
      for (int c = 0; c < kGroup; ++c) {
        const int64_t j = g * kGroup + c;
        for (int e = 0; e < 2; ++e) {
          const int64_t k = 2 * p + e;
          v[2 * c + e] = j < out && k < in ? w[j * in + k] : uint16_t(0);
        }
      }
    }
  });
}

// AVX2 + FMA + F16C: the int8 kernels' AVX2 path asks for the same.
bool F16DotRunsOn(Bf16Path path) { return path == Bf16Path::kAvx2 && Int8PathAvailable(Int8Path::kAvx2); }
const char* F16DotPathName(Bf16Path path) {
  return F16DotRunsOn(path) ? "avx2 (F16C + FMA on packed f16)" : Bf16PathName(Bf16Path::kNone);
}
bool F16DotAvailable() { return F16DotRunsOn(CurrentBf16Path()); }
const char* F16DotPath() { return F16DotPathName(CurrentBf16Path()); }
const char* F16DotExtension() { return F16DotAvailable() ? "F16C" : ""; }

int64_t F16DotPackedSize(int64_t out, int64_t in) { return Groups(out) * in * kGroup; }

void PackF16Dot(const uint16_t* w, int64_t out, int64_t in, uint16_t* packed) {
  ForEachGroup(out, in, [&](int64_t g) {
    for (int64_t k = 0; k < in; ++k) {
      uint16_t* v = packed + (g * in + k) * kGroup;
      for (int c = 0; c < kGroup; ++c) {
        const int64_t j = g * kGroup + c;
        v[c] = j < out ? w[j * in + k] : uint16_t(0);
      }
    }
  });
}

int64_t Q8DotPackedSize(int64_t out, int64_t in) { return Groups(out) * Q8BlocksPerRow(in) * kQ8Record; }

void PackQ8Dot(Q8Weights w, int64_t out, int64_t in, uint8_t* packed) {
  const int64_t blocks = Q8BlocksPerRow(in);
  ForEachGroup(out, in, [&](int64_t g) {
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* rec = packed + (g * blocks + b) * kQ8Record;
      float scales[kGroup];
      for (int c = 0; c < kGroup; ++c) {
        const int64_t j = g * kGroup + c;
        scales[c] = j < out ? w.scales[j * blocks + b] : 0.0f;
        for (int i = 0; i < kQ8Block; ++i) {
          const int64_t k = b * kQ8Block + i;
          const int value = j < out && k < in ? w.q[j * in + k] : 0;
          rec[(i / 4) * 64 + c * 4 + i % 4] = uint8_t(value + 128);
        }
      }
      std::memcpy(rec + 512, scales, sizeof(scales));
    }
  });
}

void MatMulNTBf16Dots(const float* x, int rows, int in, const DotProduct* products, int count) {
  switch (CurrentBf16Path()) {
#if defined(__x86_64__)
    case Bf16Path::kAvx512Bf16: return dot::MatMulNTBf16Dots512(x, rows, in, products, count);
    case Bf16Path::kAvx2: return dot::MatMulNTBf16DotsAvx2(x, rows, in, products, count);
#elif defined(__aarch64__)
    case Bf16Path::kArmBf16: return dot::MatMulNTBf16DotsArm(x, rows, in, products, count);
#endif
    default: break;
  }
  STEADY_CHECK(false && "no bf16 dot-product kernel on this path");
}

void MatMulNTBf16Dot(const float* x, int rows, int in, const uint16_t* packed, int out, float* y) {
  const DotProduct product{packed, out, y};
  MatMulNTBf16Dots(x, rows, in, &product, 1);
}

void MatMulNTF16Dots(const float* x, int rows, int in, const DotProduct* products, int count) {
  STEADY_CHECK(F16DotAvailable() && "no f16 kernel on this path");
#if defined(__x86_64__)
  dot::MatMulNTF16DotsAvx2(x, rows, in, products, count);
#endif
}

void MatMulNTF16Dot(const float* x, int rows, int in, const uint16_t* packed, int out, float* y) {
  const DotProduct product{packed, out, y};
  MatMulNTF16Dots(x, rows, in, &product, 1);
}

namespace dot {

// Inputs of x a piece of QuantizeRows or RoundRows gets at least (ParallelRange).
constexpr int64_t kQuantizeGrain = 8192;

Q8Rows QuantizeRows(const float* x, int rows, int in, QuantizeRowFn quantize) {
  thread_local std::vector<int8_t> scratch_q;
  thread_local std::vector<float> scratch_scales;
  thread_local std::vector<int32_t> scratch_sums;
  const int64_t blocks = Q8BlocksPerRow(in), xs = blocks * kQ8Block;
  int8_t* q = Scratch(scratch_q, size_t(rows * xs));
  float* scales = Scratch(scratch_scales, size_t(rows * blocks));
  int32_t* sums = Scratch(scratch_sums, size_t(rows * blocks));
  // Rows side by side on the compute threads, into this thread's scratch.
  ParallelRange(rows, std::max<int64_t>(1, kQuantizeGrain / xs), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) quantize(x + r * in, in, q + r * xs, scales + r * blocks, sums + r * blocks);
  });
  return {q, scales, sums, blocks};
}

Q8Rows WithHalfSums(Q8Rows x, int rows) {
  thread_local std::vector<int32_t> scratch;
  int32_t* half = Scratch(scratch, size_t(rows * x.blocks * 2));
  for (int64_t i = 0; i < rows * x.blocks * 2; ++i) {
    int32_t sum = 0;
    for (int k = 0; k < 16; ++k) sum += x.x[i * 16 + k];
    half[i] = sum;
  }
  x.xhalf = half;
  return x;
}

void QuantizeRowScalar(const float* x, int64_t in, int8_t* q, float* scales, int32_t* sums) {
  const int64_t blocks = Q8BlocksPerRow(in);
  QuantizeQ8(x, 1, int(in), q, scales);
  std::fill(q + in, q + blocks * kQ8Block, int8_t(0));
  for (int64_t b = 0; b < blocks; ++b) {
    int32_t sum = 0;
    for (int i = 0; i < kQ8Block; ++i) sum += q[b * kQ8Block + i];
    sums[b] = sum;
  }
}

Bf16Rows RoundRows(const float* x, int rows, int in, RoundRowFn round) {
  thread_local std::vector<uint32_t> scratch;
  const int64_t pairs = (in + 1) / 2;
  uint32_t* xb = Scratch(scratch, size_t(rows * pairs));
  ParallelRange(rows, std::max<int64_t>(1, kQuantizeGrain / in), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      uint16_t* row = reinterpret_cast<uint16_t*>(xb + r * pairs);
      round(x + r * in, in, row);
      if (in % 2 != 0) row[in] = 0;
    }
  });
  return {xb, pairs};
}

const float* RoundRowsToFloats(const float* x, int rows, int in, RoundFloatsFn round) {
  thread_local std::vector<float> scratch;
  const int64_t width = (int64_t(in) + 1) / 2 * 2;
  float* xf = Scratch(scratch, size_t(rows * width));
  ParallelRange(rows, std::max<int64_t>(1, kQuantizeGrain / in), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      round(x + r * in, in, xf + r * width);
      if (in % 2 != 0) xf[r * width + in] = 0.0f;
    }
  });
  return xf;
}

void RoundRowScalar(const float* x, int64_t n, uint16_t* out) {
  for (int64_t k = 0; k < n; ++k) out[k] = FloatToBf16(x[k]);
}

}  // namespace dot

namespace {

// The current path's kernels (only where Int8DotAvailable()).
const dot::Int8Kernels& CurrentInt8Kernels() {
  switch (CurrentInt8Path()) {
#if defined(__x86_64__)
    case Int8Path::kAmxInt8: return AmxInt8TileModel() ? dot::kAmxInt8ModelKernels : dot::kAmxInt8Kernels;
    case Int8Path::kAvx512Vnni: return dot::kAvx512VnniKernels;
    case Int8Path::kAvxVnni: return dot::kAvxVnniKernels;
    case Int8Path::kAvx2: return dot::kAvx2Kernels;
#elif defined(__aarch64__)
    case Int8Path::kArmI8mm: return dot::kArmI8mmKernels;
    case Int8Path::kArmDot: return dot::kArmDotKernels;
#endif
    default: break;
  }
  STEADY_CHECK(false && "an int8 kernel called where the CPU has none");
  std::abort();
}

}  // namespace

void MatMulNTQ8Dots(const float* x, int rows, int in, const DotProduct* products, int count) {
  CurrentInt8Kernels().q8(x, rows, in, products, count);
}
void MatMulNTQ4Dots(const float* x, int rows, int in, const DotProduct* products, int count) {
  CurrentInt8Kernels().q4(x, rows, in, products, count);
}
void MatMulNTQ4KDots(const float* x, int rows, int in, const DotProduct* products, int count) {
  CurrentInt8Kernels().q4k(x, rows, in, products, count);
}
void MatMulNTQ5KDots(const float* x, int rows, int in, const DotProduct* products, int count) {
  CurrentInt8Kernels().q5k(x, rows, in, products, count);
}

void MatMulNTQ6KDots(const float* x, int rows, int in, const DotProduct* products, int count) {
  CurrentInt8Kernels().q6k(x, rows, in, products, count);
}
void MatMulNTQ4_1Dots(const float* x, int rows, int in, const DotProduct* products, int count) {
  CurrentInt8Kernels().q4_1(x, rows, in, products, count);
}
void MatMulNTQ5_0Dots(const float* x, int rows, int in, const DotProduct* products, int count) {
  CurrentInt8Kernels().q5_0(x, rows, in, products, count);
}
void MatMulNTQ5_1Dots(const float* x, int rows, int in, const DotProduct* products, int count) {
  CurrentInt8Kernels().q5_1(x, rows, in, products, count);
}

void MatMulNTQ32Dots(Q32Type type, const float* x, int rows, int in, const DotProduct* products, int count) {
  switch (type) {
    case Q32Type::kQ4_1: return MatMulNTQ4_1Dots(x, rows, in, products, count);
    case Q32Type::kQ5_0: return MatMulNTQ5_0Dots(x, rows, in, products, count);
    case Q32Type::kQ5_1: return MatMulNTQ5_1Dots(x, rows, in, products, count);
  }
}
void MatMulNTQ32Dot(Q32Type type, const float* x, int rows, int in, const uint8_t* packed, int out, float* y) {
  const DotProduct product{packed, out, y};
  MatMulNTQ32Dots(type, x, rows, in, &product, 1);
}

void MatMulNTQ8Dot(const float* x, int rows, int in, const uint8_t* packed, int out, float* y) {
  const DotProduct product{packed, out, y};
  MatMulNTQ8Dots(x, rows, in, &product, 1);
}
void MatMulNTQ4Dot(const float* x, int rows, int in, const uint8_t* packed, int out, float* y) {
  const DotProduct product{packed, out, y};
  MatMulNTQ4Dots(x, rows, in, &product, 1);
}
void MatMulNTQ4KDot(const float* x, int rows, int in, const uint8_t* packed, int out, float* y) {
  const DotProduct product{packed, out, y};
  MatMulNTQ4KDots(x, rows, in, &product, 1);
}
void MatMulNTQ5KDot(const float* x, int rows, int in, const uint8_t* packed, int out, float* y) {
  const DotProduct product{packed, out, y};
  MatMulNTQ5KDots(x, rows, in, &product, 1);
}

void MatMulNTQ6KDot(const float* x, int rows, int in, const uint8_t* packed, int out, float* y) {
  const DotProduct product{packed, out, y};
  MatMulNTQ6KDots(x, rows, in, &product, 1);
}

int64_t Q6KDotPackedSize(int64_t out, int64_t in) { return Groups(out) * Q6KBlocksPerRow(in) * kQ6KRecord; }

void PackQ6KDot(Q6KWeights w, int64_t out, int64_t in, uint8_t* packed) {
  const int64_t blocks = Q6KBlocksPerRow(in);
  ForEachGroup(out, in, [&](int64_t g) {
    std::memset(packed + g * blocks * kQ6KRecord, 0, size_t(blocks * kQ6KRecord));
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* rec = packed + (g * blocks + b) * kQ6KRecord;
      for (int c = 0; c < kGroup && g * kGroup + c < out; ++c) {
        const uint8_t* block = w.blocks + ((g * kGroup + c) * blocks + b) * kQ6KBlockBytes;
        std::memcpy(rec + 2 * c, block + 208, 2);
        for (int sub = 0; sub < 16; ++sub) rec[32 + 16 * sub + c] = block[192 + sub];
        for (int k = 0; k < kQ6KBlock; ++k) {
          // Input k is input i of q8_0 block xb, in its group of 4 u (0..7) at place i % 4.
          const int xb = k / 32, i = k % 32, u = i / 4;
          uint8_t* r = rec + kQ6KHead + xb * kQ6KBlockRecord;
          const int at = c * 4 + i % 4;
          const int q = Q6KBlockQ(block, k);
          r[(u / 2) * 64 + at] |= uint8_t((q & 15) << (4 * (u % 2)));
          r[256 + (u / 4) * 64 + at] |= uint8_t((q >> 4) << (2 * (u % 4)));
        }
      }
    }
  });
}

namespace {

// Column c's 32 q (0..15, or 0..31 with `fifth`) of a block or sub-block into the 4 nibble vectors at
// `vectors` (byte i holds inputs i, low nibble, and 16 + i, high, as q4's) and, with `fifth`, their
// fifth bits into the vector after them (bits 2v and 2v + 1 at the nibble byte's place), which the
// record was zeroed for.
void PackNibbles(const int (&q)[32], int c, bool fifth, uint8_t* vectors) {
  for (int i = 0; i < 16; ++i) {
    const int lo = q[i], hi = q[16 + i], v = i / 4, at = c * 4 + i % 4;
    vectors[v * 64 + at] = uint8_t((lo & 15) | ((hi & 15) << 4));
    if (fifth) vectors[4 * 64 + at] |= uint8_t(((lo >> 4) << (2 * v)) | ((hi >> 4) << (2 * v + 1)));
  }
}

// q4k's and q5k's blocks (the same d, dmin and 6-bit numbers first; q_at reads q, up to 15 or 31)
// into the packed records of KQuantRecord(kFifth), a column group at a time (template arguments, so
// that the reader is inlined: packing runs at load over every weight).
template <bool kFifth, int64_t kBlockBytes, int (*kQAt)(const uint8_t*, int)>
void PackKQuantDot(const uint8_t* blocks, int64_t out, int64_t in, uint8_t* packed) {
  constexpr int64_t record = dot::KQuantRecord(kFifth), sub_record = dot::KQuantSubRecord(kFifth);
  const int64_t supers = Q4KBlocksPerRow(in);
  ForEachGroup(out, in, [&](int64_t g) {
    std::memset(packed + g * supers * record, 0, size_t(supers * record));
    for (int64_t b = 0; b < supers; ++b) {
      uint8_t* rec = packed + (g * supers + b) * record;
      for (int c = 0; c < kGroup && g * kGroup + c < out; ++c) {
        const uint8_t* block = blocks + ((g * kGroup + c) * supers + b) * kBlockBytes;
        const Q4KScales s = Q4KBlockScales(block);
        std::memcpy(rec + 2 * c, &s.d, 2);
        std::memcpy(rec + 32 + 2 * c, &s.dmin, 2);
        for (int sub = 0; sub < 8; ++sub) {
          rec[64 + 16 * sub + c] = s.sc[sub];
          rec[192 + 16 * sub + c] = s.m[sub];
          int q[32];
          for (int i = 0; i < 32; ++i) q[i] = kQAt(block, 32 * sub + i);
          PackNibbles(q, c, kFifth, rec + kQ4KHead + sub * sub_record);
        }
      }
    }
  });
}

}  // namespace

int64_t Q4KDotPackedSize(int64_t out, int64_t in) { return Groups(out) * Q4KBlocksPerRow(in) * kQ4KRecord; }

void PackQ4KDot(Q4KWeights w, int64_t out, int64_t in, uint8_t* packed) {
  PackKQuantDot</*kFifth=*/false, kQ4KBlockBytes, Q4KBlockQ>(w.blocks, out, in, packed);
}

int64_t Q5KDotPackedSize(int64_t out, int64_t in) { return Groups(out) * Q5KBlocksPerRow(in) * dot::kQ5KRecord; }

void PackQ5KDot(Q5KWeights w, int64_t out, int64_t in, uint8_t* packed) {
  PackKQuantDot</*kFifth=*/true, kQ5KBlockBytes, Q5KBlockQ>(w.blocks, out, in, packed);
}

void Q8_0ToQ8(Q8_0Weights w, int64_t in, int64_t r0, int64_t r1, int8_t* q, float* scales) {
  const int64_t blocks = Q8BlocksPerRow(in);
  for (int64_t j = r0; j < r1; ++j) {
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* block = w.blocks + (j * blocks + b) * kQ8_0BlockBytes;
      scales[(j - r0) * blocks + b] = F16At(block);
      const int64_t n = std::min<int64_t>(kQ8Block, in - b * kQ8Block);
      std::memcpy(q + (j - r0) * in + b * kQ8Block, block + 2, size_t(n));
    }
  }
}

void DequantizeQ8_0(Q8_0Weights w, int64_t in, int64_t r0, int64_t r1, float* out) {
  const int64_t blocks = Q8BlocksPerRow(in);
  for (int64_t j = r0; j < r1; ++j) {
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* block = w.blocks + (j * blocks + b) * kQ8_0BlockBytes;
      const float d = F16At(block);
      for (int64_t i = 0; i < kQ8Block && b * kQ8Block + i < in; ++i) {
        out[(j - r0) * in + b * kQ8Block + i] = float(int8_t(block[2 + i])) * d;
      }
    }
  }
}

int64_t Q4DotPackedSize(int64_t out, int64_t in) { return Groups(out) * Q8BlocksPerRow(in) * kQ4Record; }

void QuantizeQ4(const float* w, int64_t rows, int64_t in, uint8_t* out) {
  const int64_t blocks = Q8BlocksPerRow(in);
  for (int64_t j = 0; j < rows; ++j) {
    for (int64_t b = 0; b < blocks; ++b) {
      float v[kQ8Block] = {};
      for (int i = 0; i < kQ8Block && b * kQ8Block + i < in; ++i) v[i] = w[j * in + b * kQ8Block + i];
      float amax = 0.0f, m = 0.0f;  // llama.cpp's quantize_row_q4_0_ref
      for (float e : v) {
        if (amax < std::fabs(e)) {
          amax = std::fabs(e);
          m = e;
        }
      }
      const float d = m / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
      uint8_t* block = out + (j * blocks + b) * kQ4_0BlockBytes;
      const uint16_t half = FloatToF16(d);
      std::memcpy(block, &half, 2);
      uint8_t nib[kQ8Block];
      for (int i = 0; i < kQ8Block; ++i) nib[i] = uint8_t(std::min(15, int(v[i] * id + 8.5f)));
      for (int i = 0; i < 16; ++i) block[2 + i] = uint8_t(nib[i] | (nib[i + 16] << 4));
    }
  }
}

float Q4WeightValue(Q4Weights w, int64_t in, int64_t j, int64_t k) {
  const int64_t blocks = Q8BlocksPerRow(in), b = k / kQ8Block, i = k % kQ8Block;
  const uint8_t* block = w.blocks + (j * blocks + b) * kQ4_0BlockBytes;
  const uint8_t byte = block[2 + (i & 15)];
  return float(int(i < 16 ? byte & 15 : byte >> 4) - 8) * F16At(block);
}

void DequantizeQ4(Q4Weights w, int64_t in, int64_t r0, int64_t r1, float* out) {
  // Q4WeightValue's arithmetic, the scale widened once a block.
  const int64_t blocks = Q8BlocksPerRow(in);
  for (int64_t j = r0; j < r1; ++j) {
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* block = w.blocks + (j * blocks + b) * kQ4_0BlockBytes;
      const float d = F16At(block);
      for (int64_t i = 0; i < kQ8Block && b * kQ8Block + i < in; ++i) {
        const uint8_t byte = block[2 + (i & 15)];
        out[(j - r0) * in + b * kQ8Block + i] = float(int(i < 16 ? byte & 15 : byte >> 4) - 8) * d;
      }
    }
  }
}

void PackQ4Dot(Q4Weights w, int64_t out, int64_t in, uint8_t* packed) {
  const int64_t blocks = Q8BlocksPerRow(in);
  ForEachGroup(out, in, [&](int64_t g) {
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* rec = packed + (g * blocks + b) * kQ4Record;
      uint16_t scales[kGroup] = {};
      for (int c = 0; c < kGroup; ++c) {
        const int64_t j = g * kGroup + c;
        const uint8_t* block = j < out ? w.blocks + (j * blocks + b) * kQ4_0BlockBytes : nullptr;
        if (block) std::memcpy(&scales[c], block, 2);
        const uint8_t* bytes = block ? block + 2 : nullptr;
        // A missing column's bytes: 0x88, q = 8, the weight 0 (its scale is 0 too).
        for (int i = 0; i < 16; ++i) rec[(i / 4) * 64 + c * 4 + i % 4] = bytes ? bytes[i] : uint8_t(0x88);
      }
      std::memcpy(rec + 256, scales, sizeof(scales));
    }
  });
}

int64_t Q32DotPackedSize(Q32Type type, int64_t out, int64_t in) {
  const Q32Format f = Q32FormatOf(type);
  return Groups(out) * Q8BlocksPerRow(in) * dot::Block32Record(f.fifth, f.min);
}

void PackQ32Dot(Q32Weights w, int64_t out, int64_t in, uint8_t* packed) {
  const Q32Format f = Q32FormatOf(w.type);
  const int64_t blocks = Q8BlocksPerRow(in), record = dot::Block32Record(f.fifth, f.min), scales = dot::Block32Scales(f.fifth);
  ForEachGroup(out, in, [&](int64_t g) {
    std::memset(packed + g * blocks * record, 0, size_t(blocks * record));  // missing columns: d = m = 0
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* rec = packed + (g * blocks + b) * record;
      for (int c = 0; c < kGroup && g * kGroup + c < out; ++c) {
        const uint8_t* block = w.blocks + ((g * kGroup + c) * blocks + b) * f.bytes;
        std::memcpy(rec + scales + 2 * c, block, 2);
        if (f.min) std::memcpy(rec + scales + 32 + 2 * c, block + 2, 2);
        int q[32];
        for (int i = 0; i < 32; ++i) q[i] = Q32BlockQ(w.type, block, i);
        PackNibbles(q, c, f.fifth, rec);
      }
    }
  });
}

void QuantizePackQ4Dot(const float* w, int64_t out, int64_t in, uint8_t* packed) {
  std::vector<uint8_t> rows(size_t(Q4Bytes(out, in)));
  QuantizeQ4(w, out, in, rows.data());
  PackQ4Dot({rows.data()}, out, in, packed);
}

void DequantizeQ4Dot(const uint8_t* packed, int64_t out, int64_t in, int64_t r0, int64_t r1, float* w) {
  (void)out;
  const int64_t blocks = Q8BlocksPerRow(in);
  for (int64_t j = r0; j < r1; ++j) {
    const int64_t g = j / kGroup, c = j % kGroup;
    for (int64_t k = 0; k < in; ++k) {
      const int64_t b = k / kQ8Block, i = k % kQ8Block;
      const uint8_t* rec = packed + (g * blocks + b) * kQ4Record;
      uint16_t d;
      std::memcpy(&d, rec + 256 + 2 * c, 2);
      const uint8_t byte = rec[((i % 16) / 4) * 64 + c * 4 + i % 4];
      const int q = i < 16 ? byte & 15 : byte >> 4;
      w[(j - r0) * in + k] = float(q - 8) * F16ToFloat(d);
    }
  }
}

void MatMulNTBf16DotReference(const float* x, int rows, int in, const uint16_t* w, int out, float* y) {
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < out; ++j) {
      double s = 0;
      for (int k = 0; k < in; ++k) {
        s += double(Bf16ToFloat(FloatToBf16(x[int64_t(r) * in + k]))) * Bf16ToFloat(w[int64_t(j) * in + k]);
      }
      y[int64_t(r) * out + j] = float(s);
    }
  }
}

namespace {

// y[r, j] = sum over k of the dequantized q8(x)[r, k] * weight(j, k), in double.
template <typename WeightAt>
void Q8ActivationsProduct(const float* x, int rows, int in, int out, float* y, const WeightAt& weight) {
  const int64_t blocks = Q8BlocksPerRow(in);
  std::vector<int8_t> xq(static_cast<size_t>(in));
  std::vector<float> xd(static_cast<size_t>(blocks));
  for (int r = 0; r < rows; ++r) {
    QuantizeQ8(x + int64_t(r) * in, 1, in, xq.data(), xd.data());
    for (int j = 0; j < out; ++j) {
      double s = 0;
      for (int k = 0; k < in; ++k) s += double(xq[size_t(k)]) * xd[size_t(k / kQ8Block)] * weight(j, k);
      y[int64_t(r) * out + j] = float(s);
    }
  }
}

}  // namespace

void MatMulNTQ8DotReference(const float* x, int rows, int in, Q8Weights w, int out, float* y) {
  const int64_t blocks = Q8BlocksPerRow(in);
  Q8ActivationsProduct(x, rows, in, out, y, [&](int64_t j, int64_t k) {
    return double(w.q[j * in + k]) * w.scales[j * blocks + k / kQ8Block];
  });
}

void MatMulNTQ8ActivationsReference(const float* x, int rows, int in, const float* w, int out, float* y) {
  Q8ActivationsProduct(x, rows, in, out, y, [&](int64_t j, int64_t k) { return double(w[j * in + k]); });
}

}  // namespace steady::cpu
