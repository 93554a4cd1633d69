#include "model/decoder/model.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/check.h"
#include "base/file_io.h"
#include "base/status.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"
#include "model/decoder/cpu_weights.h"
#include "model/decoder/state_pool.h"

namespace steady {
namespace {

enum class WeightKind { kNorm, kMatrix, kEmbedding };

// Visits every dense weight of the model with its checkpoint name and shape. One list serves
// loading, saving and random initialization, so the three cannot disagree.
template <typename ModelT, typename Fn>
void ForEachWeight(const ModelConfig& c, ModelT& embed, ModelT& final_norm, ModelT& lm_head,
                   std::vector<LayerWeights>* layers, Fn fn) {
  const int64_t hidden = c.hidden_size, q_dim = int64_t(c.num_heads) * c.head_dim,
                kv_dim = int64_t(c.num_kv_heads) * c.head_dim, inter = c.intermediate_size;
  fn("model.embed_tokens.weight", std::vector<int64_t>{c.vocab_size, hidden}, embed, WeightKind::kEmbedding);
  for (int l = 0; l < c.num_layers; ++l) {
    LayerWeights& w = (*layers)[l];
    const std::string p = absl::StrCat("model.layers.", l, ".");
    fn(p + "input_layernorm.weight", std::vector<int64_t>{hidden}, w.attn_norm, WeightKind::kNorm);
    fn(p + "self_attn.q_proj.weight", std::vector<int64_t>{q_dim, hidden}, w.wq, WeightKind::kMatrix);
    fn(p + "self_attn.k_proj.weight", std::vector<int64_t>{kv_dim, hidden}, w.wk, WeightKind::kMatrix);
    fn(p + "self_attn.v_proj.weight", std::vector<int64_t>{kv_dim, hidden}, w.wv, WeightKind::kMatrix);
    fn(p + "self_attn.o_proj.weight", std::vector<int64_t>{hidden, q_dim}, w.wo, WeightKind::kMatrix);
    if (c.qk_norm) {
      fn(p + "self_attn.q_norm.weight", std::vector<int64_t>{c.head_dim}, w.q_norm, WeightKind::kNorm);
      fn(p + "self_attn.k_norm.weight", std::vector<int64_t>{c.head_dim}, w.k_norm, WeightKind::kNorm);
    }
    fn(p + "post_attention_layernorm.weight", std::vector<int64_t>{hidden}, w.mlp_norm, WeightKind::kNorm);
    fn(p + "mlp.gate_proj.weight", std::vector<int64_t>{inter, hidden}, w.w_gate, WeightKind::kMatrix);
    fn(p + "mlp.up_proj.weight", std::vector<int64_t>{inter, hidden}, w.w_up, WeightKind::kMatrix);
    fn(p + "mlp.down_proj.weight", std::vector<int64_t>{hidden, inter}, w.w_down, WeightKind::kMatrix);
  }
  fn("model.norm.weight", std::vector<int64_t>{hidden}, final_norm, WeightKind::kNorm);
  if (!c.tie_word_embeddings) {
    fn("lm_head.weight", std::vector<int64_t>{c.vocab_size, hidden}, lm_head, WeightKind::kMatrix);
  }
}

std::string LayerPrefix(int layer) { return absl::StrCat("model.layers.", layer, ".self_attn."); }

}  // namespace

absl::StatusOr<Model> Model::FromConfig(ModelConfig config) {
  Model m;
  m.config_ = std::move(config);
  const ModelConfig& c = m.config_;
  m.layers_.resize(c.num_layers);
  const AttnShape shape{c.num_heads, c.num_kv_heads, c.head_dim, c.head_dim};
  for (int l = 0; l < c.num_layers; ++l) {
    auto a = ParseLayerAttention(c.layer_attention[l], shape);
    if (!a.ok()) {
      return WithContext(a.status(), absl::StrCat("layer ", l));
    }
    m.layers_[l].attention = *std::move(a);
  }
  if (c.rope_theta > 0) {
    for (int i = 0; i < c.head_dim / 2; ++i) {
      m.rope_inv_freq_.push_back(float(std::pow(c.rope_theta, -2.0 * i / c.head_dim)));
    }
  }
  return m;
}

absl::StatusOr<Model> Model::Load(const std::string& dir, const std::optional<MechanismOverride>& override) {
  const std::string config_path = (std::filesystem::path(dir) / "config.json").string();
  auto text = ReadWholeFile(config_path);
  if (!text.ok()) return text.status();
  auto config = ParseModelConfig(*text, config_path);
  if (!config.ok()) return config.status();
  if (override) OverrideMechanism(override->mechanism, override->params, &*config);
  auto model = FromConfig(*std::move(config));
  if (!model.ok()) return model.status();
  Model& m = *model;

  auto st = SafeTensors::Open((std::filesystem::path(dir) / "model.safetensors").string());
  if (!st.ok()) return st.status();
  std::set<std::string> used;
  absl::Status status;
  ForEachWeight(m.config_, m.embed_, m.final_norm_, m.lm_head_, &m.layers_,
                [&](const std::string& name, const std::vector<int64_t>& shape, std::vector<float>& out,
                    WeightKind) {
                  if (!status.ok()) return;
                  auto values = st->ReadFloat(name, shape);
                  if (!values.ok()) {
                    status = values.status();
                    return;
                  }
                  out = *std::move(values);
                  used.insert(name);
                });
  if (!status.ok()) return status;
  for (int l = 0; l < m.config_.num_layers; ++l) {
    const std::string prefix = LayerPrefix(l);
    if (absl::Status s = LoadAttentionTensors(*st, prefix, &m.layers_[l].attention); !s.ok()) {
      return WithContext(s, absl::StrCat(st->display_name(), ": layer ", l));
    }
    std::vector<TensorToWrite> expected;
    AppendAttentionTensors(m.layers_[l].attention, prefix, &expected);
    for (const TensorToWrite& t : expected) used.insert(t.name);
  }
  // Strict: a tensor the model does not use means the file and config disagree. Under a mechanism
  // override the other mechanism's tensors are expected leftovers.
  if (!override) {
    std::vector<std::string> unused;
    for (const TensorInfo& t : st->tensors()) {
      if (!used.count(t.name) && t.name.find("rotary_emb.inv_freq") == std::string::npos) unused.push_back(t.name);
    }
    if (!unused.empty()) {
      if (unused.size() > 5) unused.resize(5);
      return absl::InvalidArgumentError(absl::StrCat(
          st->display_name(), ": tensors not used by the model described in config.json (e.g. ",
          absl::StrJoin(unused, ", "), "); is config.json for this file?"));
    }
  }
  return model;
}

absl::StatusOr<Model> Model::Random(const ModelConfig& config, uint64_t seed) {
  auto model = FromConfig(config);
  if (!model.ok()) return model.status();
  Model& m = *model;
  std::mt19937_64 rng(seed);
  ForEachWeight(m.config_, m.embed_, m.final_norm_, m.lm_head_, &m.layers_,
                [&](const std::string&, const std::vector<int64_t>& shape, std::vector<float>& out,
                    WeightKind kind) {
                  const int64_t n = shape.size() == 1 ? shape[0] : shape[0] * shape[1];
                  out.resize(n);
                  if (kind == WeightKind::kNorm) {
                    std::uniform_real_distribution<float> u(0.8f, 1.2f);
                    for (float& x : out) x = u(rng);
                    return;
                  }
                  // Fan-in scaling keeps activations O(1) through the layers.
                  const double stddev = kind == WeightKind::kEmbedding ? 1.0 : 1.0 / std::sqrt(double(shape[1]));
                  std::normal_distribution<float> g(0.0f, float(stddev));
                  for (float& x : out) x = g(rng);
                });
  for (int l = 0; l < m.config_.num_layers; ++l) RandomInitAttentionTensors(seed * 1000003 + l, &m.layers_[l].attention);
  return model;
}

absl::Status Model::Save(const std::string& dir, DType dtype) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(dir, ": cannot create directory: ", ec.message()));
  std::vector<TensorToWrite> tensors;
  Model& self = const_cast<Model&>(*this);  // ForEachWeight is shared with Load; nothing is modified
  ForEachWeight(config_, self.embed_, self.final_norm_, self.lm_head_, &self.layers_,
                [&](const std::string& name, const std::vector<int64_t>& shape, std::vector<float>& w,
                    WeightKind) { tensors.push_back({name, dtype, shape, std::vector<double>(w.begin(), w.end())}); });
  for (int l = 0; l < config_.num_layers; ++l) AppendAttentionTensors(layers_[l].attention, LayerPrefix(l), &tensors);
  nlohmann::json cfg = config_.ToJson();
  if (absl::Status s = WriteSafeTensors((std::filesystem::path(dir) / "model.safetensors").string(), tensors,
                                        {{"format", "pt"}, {"steady_format_version", "1"}});
      !s.ok()) {
    return s;
  }
  return WriteFileAtomic((std::filesystem::path(dir) / "config.json").string(), cfg.dump(2) + "\n");
}

absl::StatusOr<size_t> SessionStateFloats(const ModelConfig& config) {
  auto shape = Model::FromConfig(config);
  if (!shape.ok()) return shape.status();
  return shape->StateFloats();
}

int64_t KvCacheFloatsPerToken(const ModelConfig& c) {
  int64_t floats = 0;
  for (const AttentionConfig& a : c.layer_attention) {
    if (a.mechanism == "softmax") floats += int64_t(c.num_kv_heads) * 2 * c.head_dim;
  }
  return floats;
}

size_t Model::StateFloats() const {
  size_t total = 0;
  for (const LayerWeights& l : layers_) total += steady::StateFloats(l.attention);
  return total;
}

int64_t Model::ParameterCount() const {
  int64_t n = embed_.size() + final_norm_.size() + lm_head_.size();
  for (int l = 0; l < config_.num_layers; ++l) {
    const LayerWeights& w = layers_[l];
    n += w.attn_norm.size() + w.wq.size() + w.wk.size() + w.wv.size() + w.wo.size() + w.q_norm.size() +
         w.k_norm.size() + w.mlp_norm.size() + w.w_gate.size() + w.w_up.size() + w.w_down.size();
    std::vector<TensorToWrite> extra;
    AppendAttentionTensors(w.attention, "", &extra);
    for (const TensorToWrite& t : extra) n += t.values.size();
  }
  return n;
}

nlohmann::json Model::DescribeAttention() const {
  nlohmann::json layers = nlohmann::json::array();
  for (const LayerWeights& l : layers_) layers.push_back(steady::DescribeAttention(l.attention));
  return layers;
}

void Model::Forward(const std::vector<Segment>& segments, StatePool& pool, ForwardWorkspace& ws,
                    std::vector<float>* logits, const CpuMatrices* reduced) const {
  const ModelConfig& c = config_;
  const int hidden = c.hidden_size, hd = c.head_dim, q_dim = c.num_heads * hd, kv_dim = c.num_kv_heads * hd,
            inter = c.intermediate_size;
  int rows = 0, out_rows = 0;
  ws.first_row.clear();
  ws.slots.clear();
  for (const Segment& s : segments) {
    STEADY_CHECK(!s.tokens.empty());
    ws.first_row.push_back(rows);
    ws.slots.push_back(s.slot);
    rows += int(s.tokens.size());
    out_rows += s.all_logits ? int(s.tokens.size()) : 1;
  }
  ws.x.resize(size_t(rows) * hidden);
  ws.h.resize(size_t(rows) * hidden);
  ws.q.resize(size_t(rows) * q_dim);
  ws.k.resize(size_t(rows) * kv_dim);
  ws.v.resize(size_t(rows) * kv_dim);
  ws.att.resize(size_t(rows) * q_dim);
  ws.proj.resize(size_t(rows) * hidden);
  ws.gate.resize(size_t(rows) * inter);
  ws.up.resize(size_t(rows) * inter);
  ws.positions.resize(rows);

  std::vector<int32_t> ids;
  ids.reserve(rows);
  for (const Segment& s : segments) {
    for (size_t i = 0; i < s.tokens.size(); ++i) {
      STEADY_CHECK(s.tokens[i] >= 0 && s.tokens[i] < c.vocab_size);
      ws.positions[ids.size()] = pool.position(s.slot) + int64_t(i);
      ids.push_back(s.tokens[i]);
    }
  }
  cpu::GatherRows(embed_.data(), hidden, ids.data(), rows, ws.x.data());
  // Each segment's attention reads and writes only its own slot and its own rows, so segments run
  // on the compute threads side by side (the same arithmetic as one after another: bit-identical);
  // two segments of one slot would share a state and run in order instead.
  std::sort(ws.slots.begin(), ws.slots.end());
  const bool distinct_slots = std::adjacent_find(ws.slots.begin(), ws.slots.end()) == ws.slots.end();

  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& w = layers_[l];
    const CpuMatrices::Layer* wr = reduced != nullptr ? &reduced->layers[l] : nullptr;
    // y[rows, out] = x[rows, in] W^T from the caller's reduced copy of W when there is one.
    auto project = [&](const float* x, int in, const std::vector<float>& w32, const ReducedMatrix* reduced_w, int out,
                       float* y) {
      if (reduced_w != nullptr) {
        MatMulReduced(x, rows, in, *reduced_w, out, y);
      } else {
        cpu::MatMulNT(x, rows, in, w32.data(), out, y);
      }
    };
    // Attention block.
    cpu::RmsNorm(ws.x.data(), w.attn_norm.data(), rows, hidden, float(c.rms_norm_eps), ws.h.data());
    project(ws.h.data(), hidden, w.wq, wr ? &wr->wq : nullptr, q_dim, ws.q.data());
    project(ws.h.data(), hidden, w.wk, wr ? &wr->wk : nullptr, kv_dim, ws.k.data());
    project(ws.h.data(), hidden, w.wv, wr ? &wr->wv : nullptr, kv_dim, ws.v.data());
    if (c.qk_norm) {
      cpu::RmsNorm(ws.q.data(), w.q_norm.data(), rows * c.num_heads, hd, float(c.rms_norm_eps), ws.q.data());
      cpu::RmsNorm(ws.k.data(), w.k_norm.data(), rows * c.num_kv_heads, hd, float(c.rms_norm_eps), ws.k.data());
    }
    if (!rope_inv_freq_.empty()) {
      cpu::Rope(ws.q.data(), rows, c.num_heads, hd, ws.positions.data(), rope_inv_freq_.data());
      cpu::Rope(ws.k.data(), rows, c.num_kv_heads, hd, ws.positions.data(), rope_inv_freq_.data());
    }
    auto attend = [&](size_t i) {
      const Segment& s = segments[i];
      const size_t row = size_t(ws.first_row[i]);
      AttentionForward<float>(w.attention, int(s.tokens.size()), ws.q.data() + row * q_dim,
                              ws.k.data() + row * kv_dim, ws.v.data() + row * kv_dim, pool.View(s.slot, l),
                              ws.att.data() + row * q_dim);
    };
    if (distinct_slots) {
      cpu::ParallelFor(int(segments.size()), [&](int i) { attend(size_t(i)); });
    } else {
      for (size_t i = 0; i < segments.size(); ++i) attend(i);
    }
    project(ws.att.data(), q_dim, w.wo, wr ? &wr->wo : nullptr, hidden, ws.proj.data());
    cpu::AddInPlace(ws.x.data(), ws.proj.data(), int64_t(rows) * hidden);
    // MLP block.
    cpu::RmsNorm(ws.x.data(), w.mlp_norm.data(), rows, hidden, float(c.rms_norm_eps), ws.h.data());
    project(ws.h.data(), hidden, w.w_gate, wr ? &wr->w_gate : nullptr, inter, ws.gate.data());
    project(ws.h.data(), hidden, w.w_up, wr ? &wr->w_up : nullptr, inter, ws.up.data());
    cpu::SwiGlu(ws.gate.data(), ws.up.data(), int64_t(rows) * inter, ws.gate.data());
    project(ws.gate.data(), inter, w.w_down, wr ? &wr->w_down : nullptr, hidden, ws.proj.data());
    cpu::AddInPlace(ws.x.data(), ws.proj.data(), int64_t(rows) * hidden);
  }

  // Final norm and LM head on the rows that need logits only.
  ws.logits_in.resize(size_t(out_rows) * hidden);
  int row = 0, out = 0;
  for (const Segment& s : segments) {
    const int n = int(s.tokens.size());
    const int first = s.all_logits ? row : row + n - 1;
    const int count = s.all_logits ? n : 1;
    cpu::RmsNorm(ws.x.data() + size_t(first) * hidden, final_norm_.data(), count, hidden, float(c.rms_norm_eps),
                 ws.logits_in.data() + size_t(out) * hidden);
    out += count;
    row += n;
    pool.set_position(s.slot, pool.position(s.slot) + n);
  }
  logits->resize(size_t(out_rows) * c.vocab_size);
  const std::vector<float>& head = c.tie_word_embeddings ? embed_ : lm_head_;
  if (reduced != nullptr) {
    MatMulReduced(ws.logits_in.data(), out_rows, hidden, reduced->lm_head, c.vocab_size, logits->data());
  } else {
    cpu::MatMulNT(ws.logits_in.data(), out_rows, hidden, head.data(), c.vocab_size, logits->data());
  }
}

}  // namespace steady
