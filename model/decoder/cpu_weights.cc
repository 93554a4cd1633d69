#include "model/decoder/cpu_weights.h"

#include <set>
#include <string>

#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/check.h"
#include "kernels/cpu/amx.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_dot.h"
#include "kernels/cpu/parallel.h"
#include "model/decoder/model.h"

namespace steady {

absl::StatusOr<CpuWeights> ParseCpuWeights(std::string_view name) {
  if (name == "auto") return CpuWeights::kAuto;
  if (name == "stored") return CpuWeights::kStored;
  if (name == "f32") return CpuWeights::kF32;
  if (name == "bf16") return CpuWeights::kBf16;
  if (name == "q8") return CpuWeights::kQ8;
  if (name == "q4") return CpuWeights::kQ4;
  if (name == "q4k") return CpuWeights::kQ4K;
  return absl::InvalidArgumentError(
      absl::StrCat("--cpu-weights: expected auto, stored, f32, bf16, q8, q4 or q4k, got \"", std::string(name), "\""));
}

absl::StatusOr<CpuGemm> ParseCpuGemm(std::string_view name) {
  if (name == "auto") return CpuGemm::kAuto;
  if (name == "simd") return CpuGemm::kSimd;
  if (name == "openblas") return CpuGemm::kOpenBlas;
  if (name == "avx512vnni") return CpuGemm::kAvx512Vnni;
  if (name == "avxvnni") return CpuGemm::kAvxVnni;
  if (name == "avx2") return CpuGemm::kAvx2;
  if (name == "armdot") return CpuGemm::kArmDot;
  return absl::InvalidArgumentError(absl::StrCat("--cpu-gemm: expected auto, simd, openblas, avx512vnni, avxvnni, avx2 or armdot, got \"",
                                                 std::string(name), "\""));
}

bool UsesDotKernels(CpuGemm gemm) { return gemm != CpuGemm::kSimd && gemm != CpuGemm::kOpenBlas; }

bool UsesAmxTiles(CpuGemm gemm) { return gemm == CpuGemm::kAuto; }

cpu::Int8Path Int8PathFor(CpuGemm gemm) {
  if (gemm == CpuGemm::kAvx512Vnni) return cpu::Int8Path::kAvx512Vnni;
  if (gemm == CpuGemm::kAvxVnni) return cpu::Int8Path::kAvxVnni;
  if (gemm == CpuGemm::kAvx2) return cpu::Int8Path::kAvx2;
  if (gemm == CpuGemm::kArmDot) return cpu::Int8Path::kArmDot;
  return cpu::WidestInt8Path();
}

cpu::Bf16Path Bf16PathFor(CpuGemm gemm) {
  if (gemm == CpuGemm::kAvxVnni || gemm == CpuGemm::kAvx2) return cpu::Bf16Path::kAvx2;
  return cpu::WidestBf16Path();
}

absl::Status CpuGemmAvailable(CpuGemm gemm) {
  if (cpu::Int8PathAvailable(Int8PathFor(gemm))) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("--cpu-gemm ", CpuGemmName(gemm), ": this CPU lacks ",
                                                    cpu::Int8PathExtension(Int8PathFor(gemm))));
}

std::string CpuGemmName(CpuGemm g) {
  switch (g) {
    case CpuGemm::kAuto: return "auto";
    case CpuGemm::kSimd: return "simd";
    case CpuGemm::kOpenBlas: return "openblas";
    case CpuGemm::kAvx512Vnni: return "avx512vnni";
    case CpuGemm::kAvxVnni: return "avxvnni";
    case CpuGemm::kAvx2: return "avx2";
    case CpuGemm::kArmDot: return "armdot";
  }
  return "?";
}

std::string CpuWeightsName(CpuWeights w) {
  switch (w) {
    case CpuWeights::kAuto: return "auto";
    case CpuWeights::kStored: return "stored";
    case CpuWeights::kF32: return "f32";
    case CpuWeights::kBf16: return "bf16";
    case CpuWeights::kQ8: return "q8";
    case CpuWeights::kQ4: return "q4";
    case CpuWeights::kQ4K: return "q4k";
  }
  return "?";
}

std::vector<std::pair<std::string, std::string>> CpuGemmPaths(CpuGemm gemm, CpuWeights weights) {
  const std::string widening = absl::StrCat("widening fp32 (", cpu::SimdTargetName(), ")");
  const bool fast = UsesDotKernels(gemm) && weights != CpuWeights::kStored;
  const cpu::Int8Path int8 = Int8PathFor(gemm);
  const cpu::Bf16Path bf16_path = Bf16PathFor(gemm);
  std::string bf16 = widening, q8 = widening;
  if (fast && UsesAmxTiles(gemm) && cpu::AmxAvailable()) {
    // The backend puts bf16 on the tiles for --cpu-weights bf16 and for a checkpoint that is bf16
    // throughout; a checkpoint's bf16 matrices beside others take the bf16 kernel (VDPBF16PS, AVX2).
    bf16 = "amx_bf16 (TDPBF16PS)";
    if (weights == CpuWeights::kAuto) absl::StrAppend(&bf16, " where every matrix is bf16, else ", cpu::Bf16PathName(bf16_path));
  } else if (fast && bf16_path != cpu::Bf16Path::kNone) {
    bf16 = cpu::Bf16PathName(bf16_path);
  }
  const bool int8_kernels = fast && int8 != cpu::Int8Path::kNone;
  if (int8_kernels) {
    q8 = cpu::Int8PathName(int8);
    if (int8 == cpu::Int8Path::kAmxInt8) {
      absl::StrAppend(&q8, " from ", cpu::kAmxInt8MinRows, " rows, ", cpu::Int8PathName(cpu::Int8Path::kAvx512Vnni),
                      " below");
    }
  }
  const std::string f32 = gemm == CpuGemm::kOpenBlas
                              ? "OpenBLAS sgemm"
                              : absl::StrCat("fp32 FMA (", cpu::SimdTargetName(), ") to ", cpu::kSmallRowsMax,
                                             " rows, OpenBLAS sgemm above");
  // f16 matrices (a checkpoint's own) take the f16 kernel where the bf16 ones take AVX2's FMAs.
  const std::string f16 = fast ? cpu::F16DotPathName(bf16_path) : widening;
  // A GGUF file's Q3_K, IQ4_NL and IQ4_XS matrices are packed for the int8 kernels as q6k and q8 (the
  // same values): kernels/cpu/q3k_iq4.h. Q2_K has the widening kernel only (kernels/cpu/q2k.h).
  const std::string q3k = int8_kernels ? q8 + " as q6k" : widening, iq4 = int8_kernels ? q8 + " as q8" : widening;
  return {{"f32", f32},   {"bf16", bf16}, {"f16", f16},   {"q8", q8},         {"q8_0", q8},       {"q4", q8},
          {"q4k", q8},    {"q5k", q8},    {"q6k", q8},    {"q4_1", q8},       {"q5_0", q8},       {"q5_1", q8},
          {"q3k", q3k},   {"iq4_nl", iq4}, {"iq4_xs", iq4}, {"q2k", widening}};
}

std::string CpuKernelsSummary(CpuGemm gemm, CpuWeights weights) {
  std::vector<std::string> paths;
  for (const auto& [format, path] : CpuGemmPaths(gemm, weights)) paths.push_back(absl::StrCat(format, ": ", path));
  return absl::StrCat(cpu::CpuModelName(), ", ", cpu::ComputeThreads(), " threads, ", cpu::SimdTargetName(), ", --cpu-gemm ", CpuGemmName(gemm),
                      ", --cpu-weights ", CpuWeightsName(weights), "; ", absl::StrJoin(paths, "; "));
}

std::optional<WeightType> ConvertedType(CpuWeights precision) {
  switch (precision) {
    case CpuWeights::kAuto:
    case CpuWeights::kStored: return std::nullopt;
    case CpuWeights::kF32: return WeightType::kF32;
    case CpuWeights::kBf16: return WeightType::kBf16;
    case CpuWeights::kQ8: return WeightType::kQ8;
    case CpuWeights::kQ4: return WeightType::kQ4;
    case CpuWeights::kQ4K: return WeightType::kQ4K;
  }
  return std::nullopt;
}

std::optional<WeightType> TokenMatrixType(CpuWeights precision) {
  switch (precision) {
    case CpuWeights::kAuto:
    case CpuWeights::kStored:
    case CpuWeights::kF32: return std::nullopt;
    case CpuWeights::kBf16: return WeightType::kBf16;
    case CpuWeights::kQ8:
    case CpuWeights::kQ4:
    case CpuWeights::kQ4K: return WeightType::kQ8;
  }
  return std::nullopt;
}

CpuMatrices CpuMatrices::From(const Model& model, CpuWeights precision, bool amx, bool dot) {
  STEADY_CHECK(!amx || cpu::AmxAvailable());
  CpuMatrices m;
  m.precision = precision;
  m.amx = amx;
  // `w` in `to`, packed for the kernel this CPU runs it on.
  const auto convert_to = [&](const WeightMatrix& w, WeightType to) {
    if (amx && to == WeightType::kBf16) to = WeightType::kAmxBf16;
    if (dot && to == WeightType::kBf16 && cpu::Bf16DotAvailable()) to = WeightType::kDotBf16;
    if (dot && to == WeightType::kF16 && cpu::F16DotAvailable()) to = WeightType::kDotF16;
    if (dot && cpu::Int8DotAvailable()) to = Int8PackedType(to).value_or(to);
    WeightMatrix out = w.ConvertTo(to);
    // The checkpoint's mapped pages are not read again (an embedding's rows still are, one at a
    // time, and come back from the page cache).
    if (to != w.type()) w.ReleasePages();
    return out;
  };
  const auto convert = [&](const WeightMatrix& w) { return convert_to(w, ConvertedType(precision).value_or(w.type())); };
  const std::optional<WeightType> token_type = TokenMatrixType(precision);
  for (const LayerWeights& w : model.layers()) {
    m.layers.push_back({convert(w.wq), convert(w.wk), convert(w.wv), convert(w.wo), convert(w.w_gate),
                        convert(w.w_up), convert(w.w_down), {}});
    if (!token_type) continue;
    // The mechanism keeps its fp32 vectors (the fp64 path and checkpoint saving read them): a matrix
    // of its own over them, whose pages are never released.
    for (const TokenMatrix& t : AttentionTokenMatrices(w.attention)) {
      const WeightMatrix fp32 = WeightMatrix::Owned(WeightType::kF32, t.out, t.in, t.w, nullptr);
      m.layers.back().token.push_back(convert_to(fp32, *token_type));
    }
  }
  m.lm_head = convert(model.lm_head_matrix());
  return m;
}

template <typename Fn>
void CpuMatrices::ForEach(const Fn& fn) const {
  fn(lm_head);
  for (const Layer& l : layers) {
    for (const WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) fn(*w);
    for (const WeightMatrix& w : l.token) fn(w);
  }
}

int64_t CpuMatrices::Bytes() const {
  int64_t n = 0;
  ForEach([&](const WeightMatrix& w) { n += w.Bytes(); });
  return n;
}

int64_t CpuMatrices::Weights() const {
  int64_t n = 0;
  ForEach([&](const WeightMatrix& w) { n += w.Weights(); });
  return n;
}

std::string CpuMatrices::TypeNames() const {
  std::set<std::string> names;
  ForEach([&](const WeightMatrix& w) {  // a packed form by its format's name: "dot-q4k" as "q4k"
    absl::string_view name = WeightTypeName(w.type());
    if (!absl::ConsumePrefix(&name, "dot-")) absl::ConsumePrefix(&name, "amx-");
    names.insert(std::string(name));
  });
  return absl::StrJoin(names, " and ");
}

bool CpuMatrices::Has(WeightType type) const {
  bool any = false;
  ForEach([&](const WeightMatrix& w) { any = any || w.type() == type; });
  return any;
}

bool CpuMatrices::HasInt8Format() const {
  bool any = false;
  ForEach([&](const WeightMatrix& w) { any = any || Int8PackedType(w.type()).has_value(); });
  return any;
}

std::string CpuMatrices::Kernels() const {
  std::set<std::string> names;
  ForEach([&](const WeightMatrix& w) {
    if (w.type() == WeightType::kAmxBf16) names.insert("AMX");
    if (w.type() == WeightType::kDotBf16) names.insert(cpu::Bf16DotExtension());
    if (w.type() == WeightType::kDotF16) names.insert(cpu::F16DotExtension());
    if (IsInt8Packed(w.type())) names.insert(cpu::Int8PathExtension(cpu::CurrentInt8Path()));
  });
  return absl::StrJoin(names, " and ");
}

}  // namespace steady
