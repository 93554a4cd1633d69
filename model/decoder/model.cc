#include "model/decoder/model.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <set>

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

enum class WeightKind { kNorm, kBias, kMatrix, kEmbedding };

// One dense weight: its checkpoint name, shape and where it lives in the Model (a vector for norms
// and biases, a matrix for projections and the embedding).
struct WeightSlot {
  std::string name;
  std::vector<int64_t> shape;
  WeightKind kind;
  std::vector<float>* vec = nullptr;
  WeightMatrix* mat = nullptr;
};

// Visits every dense weight of the model with its checkpoint name and shape. One list serves
// loading, saving and random initialization, so the three cannot disagree. (The order is the
// random initialization's: a seed gives the weights it always gave.)
template <typename Fn>
void ForEachWeight(const ModelConfig& c, WeightMatrix& embed, std::vector<float>& final_norm, WeightMatrix& lm_head,
                   std::vector<LayerWeights>* layers, Fn fn) {
  const int64_t hidden = c.hidden_size, q_dim = int64_t(c.num_heads) * c.head_dim,
                kv_dim = int64_t(c.num_kv_heads) * c.head_dim, inter = c.intermediate_size;
  auto vec = [&](std::string name, int64_t n, WeightKind kind, std::vector<float>& v) {
    fn(WeightSlot{std::move(name), {n}, kind, &v, nullptr});
  };
  auto mat = [&](std::string name, int64_t rows, int64_t cols, WeightKind kind, WeightMatrix& m) {
    fn(WeightSlot{std::move(name), {rows, cols}, kind, nullptr, &m});
  };
  mat("model.embed_tokens.weight", c.vocab_size, hidden, WeightKind::kEmbedding, embed);
  for (int l = 0; l < c.num_layers; ++l) {
    LayerWeights& w = (*layers)[l];
    const std::string p = absl::StrCat("model.layers.", l, ".");
    vec(p + "input_layernorm.weight", hidden, WeightKind::kNorm, w.attn_norm);
    mat(p + "self_attn.q_proj.weight", q_dim, hidden, WeightKind::kMatrix, w.wq);
    mat(p + "self_attn.k_proj.weight", kv_dim, hidden, WeightKind::kMatrix, w.wk);
    mat(p + "self_attn.v_proj.weight", kv_dim, hidden, WeightKind::kMatrix, w.wv);
    mat(p + "self_attn.o_proj.weight", hidden, q_dim, WeightKind::kMatrix, w.wo);
    if (c.qk_norm) {
      vec(p + "self_attn.q_norm.weight", c.head_dim, WeightKind::kNorm, w.q_norm);
      vec(p + "self_attn.k_norm.weight", c.head_dim, WeightKind::kNorm, w.k_norm);
    }
    vec(p + "post_attention_layernorm.weight", hidden, WeightKind::kNorm, w.mlp_norm);
    mat(p + "mlp.gate_proj.weight", inter, hidden, WeightKind::kMatrix, w.w_gate);
    mat(p + "mlp.up_proj.weight", inter, hidden, WeightKind::kMatrix, w.w_up);
    mat(p + "mlp.down_proj.weight", hidden, inter, WeightKind::kMatrix, w.w_down);
    if (c.qkv_bias) {
      vec(p + "self_attn.q_proj.bias", q_dim, WeightKind::kBias, w.q_bias);
      vec(p + "self_attn.k_proj.bias", kv_dim, WeightKind::kBias, w.k_bias);
      vec(p + "self_attn.v_proj.bias", kv_dim, WeightKind::kBias, w.v_bias);
    }
    if (c.o_bias) vec(p + "self_attn.o_proj.bias", hidden, WeightKind::kBias, w.o_bias);
    if (c.mlp_bias) {
      vec(p + "mlp.gate_proj.bias", inter, WeightKind::kBias, w.gate_bias);
      vec(p + "mlp.up_proj.bias", inter, WeightKind::kBias, w.up_bias);
      vec(p + "mlp.down_proj.bias", hidden, WeightKind::kBias, w.down_bias);
    }
  }
  vec("model.norm.weight", hidden, WeightKind::kNorm, final_norm);
  if (!c.tie_word_embeddings) mat("lm_head.weight", c.vocab_size, hidden, WeightKind::kMatrix, lm_head);
}

std::string LayerPrefix(int layer) { return absl::StrCat("model.layers.", layer, ".self_attn."); }

// A checkpoint tensor as a matrix: its bytes in place where the type allows (fp32, bf16, f16,
// aligned to the element size), else converted.
WeightMatrix MatrixFromTensor(const SafeTensors& st, const TensorInfo& t) {
  const std::string_view raw = st.RawData(t);
  const int64_t rows = t.shape[0], cols = t.shape[1];
  const WeightType type = t.dtype == DType::kBF16 ? WeightType::kBf16
                          : t.dtype == DType::kF16 ? WeightType::kF16
                                                   : WeightType::kF32;
  if (t.dtype != DType::kF64 && WeightMatrix::MatchesAlignment(type, raw.data())) {
    return WeightMatrix::View(type, rows, cols, raw.data(), st.Owner(), st.Mapped(t));
  }
  // F64, or bytes not aligned to their type (a writer that packed mixed dtypes unaligned): fp32
  // values (exact for the 16-bit types; bf16 goes back to bf16 exactly).
  auto values = st.ReadFloat(t.name, t.shape, /*allow_nonfinite=*/true);
  STEADY_CHECK(values.ok());
  WeightMatrix m = WeightMatrix::FromFloats(*std::move(values), rows, cols);
  return type == WeightType::kBf16 ? m.ConvertTo(WeightType::kBf16) : m;
}

// y[rows, n] += bias[n] on every row (no-op for an absent bias).
void AddBias(float* y, int rows, const std::vector<float>& bias) {
  if (bias.empty()) return;
  const int64_t n = int64_t(bias.size());
  for (int r = 0; r < rows; ++r) cpu::AddInPlace(y + r * n, bias.data(), n);
}

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
  m.rope_ = RopeFrequencies(c);
  return m;
}

absl::StatusOr<Model> Model::Load(const std::string& dir, const std::optional<MechanismOverride>& override) {
  const std::filesystem::path root(dir);
  const std::string config_path = (root / "config.json").string();
  auto text = ReadWholeFile(config_path);
  if (!text.ok()) return text.status();
  auto config = ParseModelConfig(*text, config_path);
  if (!config.ok()) return config.status();
  const std::string generation_path = (root / "generation_config.json").string();
  std::error_code ec;
  if (std::filesystem::exists(generation_path, ec)) {
    auto generation = ReadWholeFile(generation_path);
    if (!generation.ok()) return generation.status();
    if (absl::Status s = ParseGenerationConfig(*generation, generation_path, &*config); !s.ok()) return s;
  }
  if (override) OverrideMechanism(override->mechanism, override->params, &*config);
  auto model = FromConfig(*std::move(config));
  if (!model.ok()) return model.status();
  Model& m = *model;

  auto st = SafeTensors::OpenDirectory(dir);
  if (!st.ok()) return st.status();
  std::set<std::string> used;
  absl::Status status;
  ForEachWeight(m.config_, m.embed_, m.final_norm_, m.lm_head_, &m.layers_, [&](const WeightSlot& w) {
    if (!status.ok()) return;
    used.insert(w.name);
    if (w.vec != nullptr) {
      auto values = st->ReadFloat(w.name, w.shape);
      if (values.ok()) *w.vec = *std::move(values);
      status = values.status();
      return;
    }
    // Checked in place (present, a float dtype, the shape, finite values), then viewed, not copied.
    auto tensor = st->CheckedTensor(w.name, w.shape);
    if (tensor.ok()) *w.mat = MatrixFromTensor(*st, **tensor);
    status = tensor.status();
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

absl::StatusOr<Model> Model::FromWeights(ModelConfig config, const WeightSource& source) {
  auto model = FromConfig(std::move(config));
  if (!model.ok()) return model.status();
  Model& m = *model;
  absl::Status status;
  ForEachWeight(m.config_, m.embed_, m.final_norm_, m.lm_head_, &m.layers_, [&](const WeightSlot& w) {
    if (!status.ok()) return;
    if (w.vec != nullptr) {
      auto values = source.vector(w.name, w.shape);
      if (values.ok()) *w.vec = *std::move(values);
      status = values.status();
      return;
    }
    auto matrix = source.matrix(w.name, w.shape);
    if (matrix.ok()) *w.mat = *std::move(matrix);
    status = matrix.status();
  });
  if (!status.ok()) return status;
  // The mechanisms read their tensors from an empty set: those that need trained ones say so.
  static const SafeTensors* const kNone =
      new SafeTensors(*SafeTensors::Parse(std::string("\x02\0\0\0\0\0\0\0{}", 10), "(no mechanism tensors)"));
  for (int l = 0; l < m.config_.num_layers; ++l) {
    if (absl::Status s = LoadAttentionTensors(*kNone, LayerPrefix(l), &m.layers_[l].attention); !s.ok()) {
      return WithContext(s, absl::StrCat("layer ", l));
    }
  }
  return model;
}

absl::StatusOr<Model> Model::Random(const ModelConfig& config, uint64_t seed) {
  auto model = FromConfig(config);
  if (!model.ok()) return model.status();
  Model& m = *model;
  std::mt19937_64 rng(seed);
  ForEachWeight(m.config_, m.embed_, m.final_norm_, m.lm_head_, &m.layers_, [&](const WeightSlot& w) {
    const int64_t n = w.shape.size() == 1 ? w.shape[0] : w.shape[0] * w.shape[1];
    std::vector<float> out(static_cast<size_t>(n));
    if (w.vec != nullptr) {
      const bool norm = w.kind == WeightKind::kNorm;
      std::uniform_real_distribution<float> u(norm ? 0.8f : -0.2f, norm ? 1.2f : 0.2f);
      for (float& x : out) x = u(rng);
      *w.vec = std::move(out);
      return;
    }
    // Fan-in scaling keeps activations O(1) through the layers.
    const double stddev = w.kind == WeightKind::kEmbedding ? 1.0 : 1.0 / std::sqrt(double(w.shape[1]));
    std::normal_distribution<float> g(0.0f, float(stddev));
    for (float& x : out) x = g(rng);
    *w.mat = WeightMatrix::FromFloats(std::move(out), w.shape[0], w.shape[1]);
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
  ForEachWeight(config_, self.embed_, self.final_norm_, self.lm_head_, &self.layers_, [&](const WeightSlot& w) {
    const std::vector<float> values = w.vec != nullptr ? *w.vec : w.mat->ToFloat();
    tensors.push_back({w.name, dtype, w.shape, std::vector<double>(values.begin(), values.end())});
  });
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
  int64_t n = 0;
  Model& self = const_cast<Model&>(*this);  // ForEachWeight is shared with Load; nothing is modified
  ForEachWeight(config_, self.embed_, self.final_norm_, self.lm_head_, &self.layers_, [&](const WeightSlot& w) {
    n += w.vec != nullptr ? int64_t(w.vec->size()) : w.mat->Weights();
  });
  for (const LayerWeights& w : layers_) {
    std::vector<TensorToWrite> extra;
    AppendAttentionTensors(w.attention, "", &extra);
    for (const TensorToWrite& t : extra) n += t.values.size();
  }
  return n;
}

int64_t Model::WeightBytes() const {
  int64_t n = 0;
  Model& self = const_cast<Model&>(*this);
  ForEachWeight(config_, self.embed_, self.final_norm_, self.lm_head_, &self.layers_, [&](const WeightSlot& w) {
    n += w.vec != nullptr ? int64_t(w.vec->size() * sizeof(float)) : w.mat->Bytes();
  });
  return n;
}

void Model::VisitWeightValues(const std::function<void(const float*, size_t)>& tensor,
                              const std::function<void(int)>& layer_done) const {
  // The order (and the empty tensors: an absent LM head or QK-norm) the fingerprint has always
  // hashed, so that snapshots written before the weights were mapped still match.
  auto vec = [&](const std::vector<float>& v) { tensor(v.data(), v.size()); };
  auto mat = [&](const WeightMatrix& w) {
    if (w.type() == WeightType::kF32 || w.empty()) return tensor(w.as<float>(), size_t(w.Weights()));
    const std::vector<float> values = w.ToFloat();
    tensor(values.data(), values.size());
  };
  mat(embed_);
  vec(final_norm_);
  mat(lm_head_);
  for (int l = 0; l < config_.num_layers; ++l) {
    const LayerWeights& w = layers_[l];
    vec(w.attn_norm);
    for (const WeightMatrix* m : {&w.wq, &w.wk, &w.wv, &w.wo}) mat(*m);
    vec(w.q_norm);
    vec(w.k_norm);
    vec(w.mlp_norm);
    for (const WeightMatrix* m : {&w.w_gate, &w.w_up, &w.w_down}) mat(*m);
    for (const std::vector<float>* b : {&w.q_bias, &w.k_bias, &w.v_bias, &w.o_bias, &w.gate_bias, &w.up_bias,
                                        &w.down_bias}) {
      if (!b->empty()) vec(*b);
    }
    layer_done(l);
  }
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
    out_rows += s.all_logits || s.verify ? int(s.tokens.size()) : 1;
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
  GatherRows(embed_, ids.data(), rows, ws.x.data());
  // Each segment's attention reads and writes only its own slot and its own rows, so segments run
  // on the compute threads side by side (the same arithmetic as one after another: bit-identical);
  // two segments of one slot would share a state and run in order instead.
  std::sort(ws.slots.begin(), ws.slots.end());
  const bool distinct_slots = std::adjacent_find(ws.slots.begin(), ws.slots.end()) == ws.slots.end();
  // Verify segments and marked slots (Model::MarkRollback): their rows are logged for KeepVerified
  // and RollBack (indices into ws.verify, which does not grow during the layers).
  std::vector<int> verify_log(segments.size(), -1);
  for (size_t i = 0; i < segments.size(); ++i) {
    verify_log[i] = LogOf(ws, segments[i], pool);
    if (verify_log[i] < 0) continue;
    STEADY_CHECK(distinct_slots);  // a logged segment is its slot's only one in the step
    ws.verify[size_t(verify_log[i])].rows += int(segments[i].tokens.size());
  }

  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& w = layers_[l];
    const CpuMatrices::Layer* wr = reduced != nullptr ? &reduced->layers[l] : nullptr;
    // y[rows, out] = x[rows, in] W^T (+ bias), W the caller's copy when there is one.
    using Layer = CpuMatrices::Layer;
    auto pick = [&](const WeightMatrix& own, const WeightMatrix Layer::*theirs) { return wr != nullptr ? &(wr->*theirs) : &own; };
    auto project = [&](const float* x, const WeightMatrix& own, const WeightMatrix Layer::*theirs,
                       const std::vector<float>& bias, float* y) {
      MatMul(x, rows, *pick(own, theirs), y);
      AddBias(y, rows, bias);
    };
    // Attention block: q, k and v in one call (MatMuls: x quantized once, one wait for the threads).
    cpu::RmsNorm(ws.x.data(), w.attn_norm.data(), rows, hidden, float(c.rms_norm_eps), ws.h.data());
    const MatrixProduct qkv[] = {{pick(w.wq, &Layer::wq), ws.q.data()},
                                 {pick(w.wk, &Layer::wk), ws.k.data()},
                                 {pick(w.wv, &Layer::wv), ws.v.data()}};
    MatMuls(ws.h.data(), rows, qkv);
    AddBias(ws.q.data(), rows, w.q_bias);
    AddBias(ws.k.data(), rows, w.k_bias);
    AddBias(ws.v.data(), rows, w.v_bias);
    if (c.qk_norm) {
      cpu::RmsNorm(ws.q.data(), w.q_norm.data(), rows * c.num_heads, hd, float(c.rms_norm_eps), ws.q.data());
      cpu::RmsNorm(ws.k.data(), w.k_norm.data(), rows * c.num_kv_heads, hd, float(c.rms_norm_eps), ws.k.data());
    }
    ApplyRope(rows, ws);
    // Values the mechanism takes from q and k alone (sliced_relu's scores): every row's in one call,
    // its projection weights read once for the step instead of once a session.
    // Their matrices are the caller's copies when it holds them (CpuMatrices::Layer::token).
    const int values = AttentionTokenValueCount(w.attention);
    if (values > 0) {
      ws.token_values.resize(size_t(rows) * values);
      const TokenMatrixProduct product = [&](int i, const float* x, int n, float* y) { MatMul(x, n, wr->token[size_t(i)], y); };
      const bool theirs = wr != nullptr && !wr->token.empty();
      AttentionTokenValues<float>(w.attention, rows, ws.q.data(), ws.k.data(), ws.token_values.data(),
                                  theirs ? &product : nullptr);
    }
    auto attend = [&](size_t i) {
      const Segment& s = segments[i];
      const size_t row = size_t(ws.first_row[i]);
      const float *q = ws.q.data() + row * q_dim, *k = ws.k.data() + row * kv_dim, *v = ws.v.data() + row * kv_dim;
      const int n = int(s.tokens.size());
      if (verify_log[i] >= 0) RecordVerifyRows(ws.verify[size_t(verify_log[i])], l, n, q, k, v, pool.View(s.slot, l));
      // A verify segment's rows go through Steps, plain decoding's arithmetic (verify.cc); so does a
      // lone session's decode row, whose kv heads Steps spreads over the compute threads (Step's
      // bits; beside other sessions the segments already share the threads, and Step costs less).
      const bool steps = s.verify || (n == 1 && segments.size() == 1);
      const double* tv = values > 0 ? ws.token_values.data() + row * values : nullptr;
      float* y = ws.att.data() + row * q_dim;
      if (steps) return AttentionSteps<float>(w.attention, n, q, k, v, pool.View(s.slot, l), y, tv);
      AttentionForward<float>(w.attention, n, q, k, v, pool.View(s.slot, l), y, tv);
    };
    if (distinct_slots) {
      cpu::ParallelFor(int(segments.size()), [&](int i) { attend(size_t(i)); });
    } else {
      for (size_t i = 0; i < segments.size(); ++i) attend(i);
    }
    project(ws.att.data(), w.wo, &Layer::wo, w.o_bias, ws.proj.data());
    cpu::AddInPlace(ws.x.data(), ws.proj.data(), int64_t(rows) * hidden);
    // MLP block.
    cpu::RmsNorm(ws.x.data(), w.mlp_norm.data(), rows, hidden, float(c.rms_norm_eps), ws.h.data());
    const MatrixProduct gate_up[] = {{pick(w.w_gate, &Layer::w_gate), ws.gate.data()},
                                     {pick(w.w_up, &Layer::w_up), ws.up.data()}};
    MatMuls(ws.h.data(), rows, gate_up);
    AddBias(ws.gate.data(), rows, w.gate_bias);
    AddBias(ws.up.data(), rows, w.up_bias);
    cpu::SwiGlu(ws.gate.data(), ws.up.data(), int64_t(rows) * inter, ws.gate.data());
    project(ws.gate.data(), w.w_down, &Layer::w_down, w.down_bias, ws.proj.data());
    cpu::AddInPlace(ws.x.data(), ws.proj.data(), int64_t(rows) * hidden);
  }

  // Final norm and LM head on the rows that need logits only.
  ws.logits_in.resize(size_t(out_rows) * hidden);
  int row = 0, out = 0;
  for (const Segment& s : segments) {
    const int n = int(s.tokens.size());
    const bool all = s.all_logits || s.verify;
    const int first = all ? row : row + n - 1;
    const int count = all ? n : 1;
    cpu::RmsNorm(ws.x.data() + size_t(first) * hidden, final_norm_.data(), count, hidden, float(c.rms_norm_eps),
                 ws.logits_in.data() + size_t(out) * hidden);
    out += count;
    row += n;
    pool.set_position(s.slot, pool.position(s.slot) + n);
  }
  logits->resize(size_t(out_rows) * c.vocab_size);
  MatMul(ws.logits_in.data(), out_rows, reduced != nullptr ? reduced->lm_head : lm_head_matrix(), logits->data());
}

void Model::ApplyRope(int rows, ForwardWorkspace& ws) const {
  if (rope_.empty()) return;
  const ModelConfig& c = config_;
  if (!rope_.position_dependent()) {
    cpu::Rope(ws.q.data(), rows, c.num_heads, c.head_dim, ws.positions.data(), rope_.inv_freq().data());
    cpu::Rope(ws.k.data(), rows, c.num_kv_heads, c.head_dim, ws.positions.data(), rope_.inv_freq().data());
  } else {
    for (int r = 0; r < rows; ++r) {  // dynamic NTK: each row its own frequencies
      const float* f = rope_.At(ws.positions[r], &ws.rope_scratch);
      cpu::Rope(ws.q.data() + int64_t(r) * c.num_heads * c.head_dim, 1, c.num_heads, c.head_dim, &ws.positions[r], f);
      cpu::Rope(ws.k.data() + int64_t(r) * c.num_kv_heads * c.head_dim, 1, c.num_kv_heads, c.head_dim,
                &ws.positions[r], f);
    }
  }
  if (rope_.attention_factor() != 1.0f) {  // yarn: cos and sin scaled, so q and k are
    const float a = rope_.attention_factor();
    for (int64_t i = 0; i < int64_t(rows) * c.num_heads * c.head_dim; ++i) ws.q[size_t(i)] *= a;
    for (int64_t i = 0; i < int64_t(rows) * c.num_kv_heads * c.head_dim; ++i) ws.k[size_t(i)] *= a;
  }
}

}  // namespace steady
