#include "model/cpu_weights.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/parallel.h"
#include "model/model.h"

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

ReducedMatrix Reduce(const std::vector<float>& w, int64_t in, CpuWeights precision) {
  ReducedMatrix m;
  const int64_t rows = int64_t(w.size()) / in;
  if (precision == CpuWeights::kBf16) {
    m.bf16.resize(w.size());
    ByRowBands(rows, in, [&](int64_t r0, int64_t r1) {
      for (int64_t i = r0 * in; i < r1 * in; ++i) m.bf16[i] = cpu::FloatToBf16(w[i]);
    });
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

std::string CpuWeightsName(CpuWeights w) {
  switch (w) {
    case CpuWeights::kF32: return "f32";
    case CpuWeights::kBf16: return "bf16";
    case CpuWeights::kQ8: return "q8";
  }
  return "?";
}

int64_t ReducedMatrix::Bytes() const {
  return int64_t(bf16.size() * sizeof(uint16_t) + q8.size() + q8_scales.size() * sizeof(float));
}

void MatMulReduced(const float* x, int rows, int in, const ReducedMatrix& m, int out, float* y) {
  if (!m.bf16.empty()) {
    cpu::MatMulNTBf16(x, rows, in, m.bf16.data(), out, y);
  } else {
    cpu::MatMulNTQ8(x, rows, in, {m.q8.data(), m.q8_scales.data()}, out, y);
  }
}

CpuMatrices CpuMatrices::From(const Model& model, CpuWeights precision) {
  const ModelConfig& c = model.config();
  const int64_t hidden = c.hidden_size, q_dim = int64_t(c.num_heads) * c.head_dim;
  CpuMatrices m;
  m.precision = precision;
  for (const LayerWeights& w : model.layers()) {
    m.layers.push_back({Reduce(w.wq, hidden, precision), Reduce(w.wk, hidden, precision),
                        Reduce(w.wv, hidden, precision), Reduce(w.wo, q_dim, precision),
                        Reduce(w.w_gate, hidden, precision), Reduce(w.w_up, hidden, precision),
                        Reduce(w.w_down, c.intermediate_size, precision)});
  }
  m.lm_head = Reduce(c.tie_word_embeddings ? model.embed() : model.lm_head(), hidden, precision);
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
  return Sum([](const ReducedMatrix& w) { return int64_t(w.bf16.size() + w.q8.size()); });
}

}  // namespace steady
