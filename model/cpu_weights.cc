#include "model/cpu_weights.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/parallel.h"
#include "model/model.h"

namespace steady {
namespace {

std::vector<uint16_t> ToBf16(const std::vector<float>& w) {
  std::vector<uint16_t> out(w.size());
  constexpr int64_t kBlock = int64_t(1) << 20;
  const int blocks = int((int64_t(w.size()) + kBlock - 1) / kBlock);
  cpu::ParallelFor(blocks, [&](int b) {
    const size_t end = std::min(w.size(), size_t(b + 1) * kBlock);
    for (size_t i = size_t(b) * kBlock; i < end; ++i) out[i] = cpu::FloatToBf16(w[i]);
  });
  return out;
}

}  // namespace

absl::StatusOr<CpuWeights> ParseCpuWeights(std::string_view name) {
  if (name == "f32") return CpuWeights::kF32;
  if (name == "bf16") return CpuWeights::kBf16;
  return absl::InvalidArgumentError(
      absl::StrCat("--cpu-weights: expected f32 or bf16, got \"", std::string(name), "\""));
}

Bf16Matrices Bf16Matrices::From(const Model& model) {
  Bf16Matrices m;
  for (const LayerWeights& w : model.layers()) {
    m.layers.push_back({ToBf16(w.wq), ToBf16(w.wk), ToBf16(w.wv), ToBf16(w.wo), ToBf16(w.w_gate), ToBf16(w.w_up),
                        ToBf16(w.w_down)});
  }
  m.lm_head = ToBf16(model.config().tie_word_embeddings ? model.embed() : model.lm_head());
  return m;
}

int64_t Bf16Matrices::Bytes() const {
  int64_t n = int64_t(lm_head.size());
  for (const Layer& l : layers) {
    for (const std::vector<uint16_t>* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) n += w->size();
  }
  return n * int64_t(sizeof(uint16_t));
}

}  // namespace steady
