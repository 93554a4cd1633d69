#include "model/decoder/cpu_weights.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "kernels/cpu/amx.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/parallel.h"
#include "model/decoder/model.h"

namespace steady {
namespace {

// Rows converted in parallel, in bands of about a million weights.
template <typename Fn>
void ByRowBands(int64_t rows, int64_t in, const Fn& convert_rows) {
  const int64_t band = std::max<int64_t>(1, (int64_t(1) << 20) / std::max<int64_t>(in, 1));
  cpu::ParallelFor(int((rows + band - 1) / band), [&](int b) {
    const int64_t r0 = int64_t(b) * band;
    convert_rows(r0, std::min(rows, r0 + band));
  });
}

ReducedMatrix Reduce(const std::vector<float>& w, int64_t in, CpuWeights precision, bool amx) {
  ReducedMatrix m;
  m.weights = int64_t(w.size());
  const int64_t rows = int64_t(w.size()) / in;
  if (precision == CpuWeights::kBf16) {
    m.bf16.resize(w.size());
    ByRowBands(rows, in, [&](int64_t r0, int64_t r1) {
      for (int64_t i = r0 * in; i < r1 * in; ++i) m.bf16[i] = cpu::FloatToBf16(w[i]);
    });
    if (amx) {  // the tile layout replaces the row-major copy
      m.amx_bf16.resize(size_t(cpu::AmxPackedSize(int(rows), int(in))));
      cpu::PackAmxBf16(m.bf16.data(), int(rows), int(in), m.amx_bf16.data());
      std::vector<uint16_t>().swap(m.bf16);
    }
    return m;
  }
  STEADY_CHECK(precision == CpuWeights::kQ8);
  const int64_t blocks = cpu::Q8BlocksPerRow(in);
  m.q8.resize(w.size());
  m.q8_scales.resize(rows * blocks);
  ByRowBands(rows, in, [&](int64_t r0, int64_t r1) {
    cpu::QuantizeQ8(w.data() + r0 * in, r1 - r0, int(in), m.q8.data() + r0 * in, m.q8_scales.data() + r0 * blocks);
  });
  return m;
}

}  // namespace

absl::StatusOr<CpuWeights> ParseCpuWeights(std::string_view name) {
  if (name == "f32") return CpuWeights::kF32;
  if (name == "bf16") return CpuWeights::kBf16;
  if (name == "q8") return CpuWeights::kQ8;
  return absl::InvalidArgumentError(
      absl::StrCat("--cpu-weights: expected f32, bf16 or q8, got \"", std::string(name), "\""));
}

absl::StatusOr<CpuGemm> ParseCpuGemm(std::string_view name) {
  if (name == "auto") return CpuGemm::kAuto;
  if (name == "simd") return CpuGemm::kSimd;
  if (name == "openblas") return CpuGemm::kOpenBlas;
  return absl::InvalidArgumentError(
      absl::StrCat("--cpu-gemm: expected auto, simd or openblas, got \"", std::string(name), "\""));
}

std::string CpuGemmName(CpuGemm g) {
  switch (g) {
    case CpuGemm::kAuto: return "auto";
    case CpuGemm::kSimd: return "simd";
    case CpuGemm::kOpenBlas: return "openblas";
  }
  return "?";
}

std::string CpuWeightsName(CpuWeights w) {
  switch (w) {
    case CpuWeights::kF32: return "f32";
    case CpuWeights::kBf16: return "bf16";
    case CpuWeights::kQ8: return "q8";
  }
  return "?";
}

int64_t ReducedMatrix::Bytes() const {
  return int64_t((bf16.size() + amx_bf16.size()) * sizeof(uint16_t) + q8.size() + q8_scales.size() * sizeof(float));
}

void MatMulReduced(const float* x, int rows, int in, const ReducedMatrix& m, int out, float* y) {
  if (!m.amx_bf16.empty()) {
    cpu::MatMulNTAmxBf16(x, rows, in, m.amx_bf16.data(), out, y);
  } else if (!m.bf16.empty()) {
    cpu::MatMulNTBf16(x, rows, in, m.bf16.data(), out, y);
  } else {
    cpu::MatMulNTQ8(x, rows, in, {m.q8.data(), m.q8_scales.data()}, out, y);
  }
}

CpuMatrices CpuMatrices::From(const Model& model, CpuWeights precision, bool amx) {
  STEADY_CHECK(!amx || (precision == CpuWeights::kBf16 && cpu::AmxAvailable()));
  const ModelConfig& c = model.config();
  const int64_t hidden = c.hidden_size, q_dim = int64_t(c.num_heads) * c.head_dim;
  CpuMatrices m;
  m.precision = precision;
  m.amx = amx;
  const auto reduce = [&](const std::vector<float>& w, int64_t in) { return Reduce(w, in, precision, amx); };
  for (const LayerWeights& w : model.layers()) {
    m.layers.push_back({reduce(w.wq, hidden), reduce(w.wk, hidden), reduce(w.wv, hidden), reduce(w.wo, q_dim),
                        reduce(w.w_gate, hidden), reduce(w.w_up, hidden), reduce(w.w_down, c.intermediate_size)});
  }
  m.lm_head = reduce(c.tie_word_embeddings ? model.embed() : model.lm_head(), hidden);
  return m;
}

int64_t CpuMatrices::Sum(int64_t (*of)(const ReducedMatrix&)) const {
  int64_t n = of(lm_head);
  for (const Layer& l : layers) {
    for (const ReducedMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) n += of(*w);
  }
  return n;
}

int64_t CpuMatrices::Bytes() const {
  return Sum([](const ReducedMatrix& w) { return w.Bytes(); });
}

int64_t CpuMatrices::Weights() const {
  return Sum([](const ReducedMatrix& w) { return w.weights; });
}

}  // namespace steady
