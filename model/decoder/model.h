// A Llama-style decoder (RMSNorm, optional RoPE with Hugging Face's scalings, GQA, SwiGLU, optional
// QK-norm and projection biases: Llama, Mistral, Qwen2, Qwen3) whose attention layers use any
// mechanism of model/mechanisms. The model is const after loading; every session's attention state
// lives in a StatePool slot passed to Forward. Its matrices are WeightMatrix views
// (model/decoder/weights.h): a loaded checkpoint's are its memory-mapped tensors, in their own
// precision.
#ifndef STEADY_MODEL_DECODER_MODEL_H_
#define STEADY_MODEL_DECODER_MODEL_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/checkpoint/config.h"
#include "model/checkpoint/safetensors.h"
#include "model/decoder/rope.h"
#include "model/decoder/weights.h"
#include "model/mechanisms/attention.h"

namespace steady {

struct LayerWeights {
  std::vector<float> attn_norm;        // [hidden]
  WeightMatrix wq;                     // [heads * head_dim, hidden]
  WeightMatrix wk;                     // [kv_heads * head_dim, hidden]
  WeightMatrix wv;                     // [kv_heads * head_dim, hidden]
  WeightMatrix wo;                     // [hidden, heads * head_dim]
  std::vector<float> q_norm, k_norm;   // [head_dim], only with qk_norm
  std::vector<float> mlp_norm;         // [hidden]
  WeightMatrix w_gate, w_up;           // [intermediate, hidden]
  WeightMatrix w_down;                 // [hidden, intermediate]
  // Biases, empty where the architecture has none (config qkv_bias, o_bias, mlp_bias).
  std::vector<float> q_bias, k_bias, v_bias, o_bias;   // [q_dim], [kv_dim], [kv_dim], [hidden]
  std::vector<float> gate_bias, up_bias, down_bias;    // [intermediate], [intermediate], [hidden]
  LayerAttention attention;
};

// A serving-time mechanism choice that replaces the checkpoint's (`--mechanism taylor --order 4`).
struct MechanismOverride {
  std::string mechanism;
  nlohmann::json params = nlohmann::json::object();
};

class StatePool;
struct CpuMatrices;

// A checkpoint's dense weights by their Hugging Face names and shapes (what Model::Load reads from
// safetensors), for the loaders of other formats (model/gguf/gguf_model.h): `vector` gives a norm or
// a bias in fp32, `matrix` a projection or the embedding table in the precision the loader chose.
// Each returns an error naming the tensor when it is missing or malformed.
struct WeightSource {
  std::function<absl::StatusOr<std::vector<float>>(const std::string& name, const std::vector<int64_t>& shape)> vector;
  std::function<absl::StatusOr<WeightMatrix>(const std::string& name, const std::vector<int64_t>& shape)> matrix;
};

// Fixed state floats per session for a configuration, without weights (for sizing and reports).
absl::StatusOr<size_t> SessionStateFloats(const ModelConfig& config);
// Floats a session's growing state adds per token (softmax layers' KV cache; 0 for constant state).
int64_t KvCacheFloatsPerToken(const ModelConfig& config);

// What keeping a prefix of a slot's rows since a mark needs (model/decoder/verify.cc): a verify
// segment (Segment::verify) marks its slot, as Model::MarkRollback does. Per layer, taken when the
// layer first sees a logged row: its state at the mark, and q, k, v of the logged rows as the
// attention saw them.
struct VerifyLog {
  int slot = -1;             // -1: unused entry
  int64_t position = 0;      // the slot's position at the mark
  int rows = 0;              // the slot's rows since the mark
  // Per layer: the fixed and growing state at the mark (a layer whose growing state is an
  // append-only KV cache keeps only its length in growing_size), and the rows' q, k, v.
  std::vector<std::vector<float>> fixed, growing;
  std::vector<size_t> growing_size;
  std::vector<std::vector<float>> q, k, v;
};

// Scratch buffers for Forward, reused across steps (resized, never shrunk).
struct ForwardWorkspace {
  std::vector<float> x, h, q, k, v, att, proj, gate, up, logits_in, rope_scratch;
  std::vector<int64_t> positions;
  std::vector<int> first_row, slots;  // per segment: its first row; the segments' slots (sorted)
  std::vector<VerifyLog> verify;      // per marked slot (verify segments), until RollBack / KeepVerified
  std::vector<float> replay_y;        // KeepVerified's discarded attention outputs
  std::vector<double> token_values;   // a layer's AttentionTokenValues for every row (sliced_relu's scores)
};

// One session's rows in a forward step: `tokens` appended to the state in `slot`.
struct Segment {
  int slot = 0;
  std::vector<int32_t> tokens;
  bool all_logits = false;  // logits for every row (eval) instead of the last one only
  // Speculative verification (docs/speculative.md): logits for every row, attention token by token
  // through each mechanism's decode Step (so row i's logits are bit for bit those plain decoding
  // gives after the same tokens), and the slot's state before the segment kept in the workspace so
  // that Model::KeepVerified can then keep only an accepted prefix of the tokens.
  bool verify = false;
};

class Model {
 public:
  // Loads config.json, generation_config.json when present, and the weights: model.safetensors or
  // the shards of model.safetensors.index.json, memory-mapped and kept in their precision (fp32,
  // bf16 or f16; F64 tensors become fp32). Every tensor's name, shape and finiteness is checked
  // before this returns; on any error nothing is kept. The tokenizer is loaded separately.
  static absl::StatusOr<Model> Load(const std::string& dir,
                                    const std::optional<MechanismOverride>& override = std::nullopt);
  // A model of `config` (overrides already applied) whose dense weights come from `source`, by the
  // names Load reads. Mechanisms' own trained tensors are not part of such a checkpoint: a mechanism
  // that needs them is refused as Load refuses a safetensors file without them.
  static absl::StatusOr<Model> FromWeights(ModelConfig config, const WeightSource& source);
  // Random weights of the given shape (tests, `steady init`, `steady bench`).
  static absl::StatusOr<Model> Random(const ModelConfig& config, uint64_t seed);
  // Writes config.json and model.safetensors (F32, F16 or BF16) into `dir` atomically per file.
  absl::Status Save(const std::string& dir, DType dtype = DType::kF32) const;

  const ModelConfig& config() const { return config_; }
  const std::vector<LayerWeights>& layers() const { return layers_; }
  const WeightMatrix& embed() const { return embed_; }                  // [vocab, hidden]
  const std::vector<float>& final_norm() const { return final_norm_; }  // [hidden]
  const WeightMatrix& lm_head() const { return lm_head_; }              // [vocab, hidden]; empty if tied
  // The matrix the LM head multiplies by: lm_head, or the embedding table when they are tied.
  const WeightMatrix& lm_head_matrix() const { return config_.tie_word_embeddings ? embed_ : lm_head_; }
  const RopeFrequencies& rope() const { return rope_; }
  // Bytes of the checkpoint's weights as the model holds them (matrices in their precision, the
  // fp32 vectors), the figure resident memory is measured against.
  int64_t WeightBytes() const;
  // Every dense weight as fp32 values, in a fixed order: the embedding, final norm and LM head
  // (empty when tied), then per layer its norms, q/k/v/o, QK-norms, MLP norm, gate, up, down and,
  // where present, its biases; `layer_done(l)` after layer l's. The matrices are converted a
  // matrix at a time (the snapshot fingerprint hashes them).
  void VisitWeightValues(const std::function<void(const float* values, size_t n)>& tensor,
                         const std::function<void(int layer)>& layer_done) const;
  int vocab_size() const { return config_.vocab_size; }
  // Fixed state floats per session and per layer (the slot size of a StatePool).
  size_t StateFloats() const;
  size_t LayerStateFloats(int layer) const { return steady::StateFloats(layers_[layer].attention); }
  // Number of parameters (weights and mechanism tensors).
  int64_t ParameterCount() const;
  // The attention description for GetModelInfo / `steady eval --json`.
  nlohmann::json DescribeAttention() const;

  // Runs every segment's tokens through the model in one step: projections and MLP as GEMMs over all
  // rows (weights read once per step), attention per segment against its slot's state (prefill
  // chunks for segments of more than one token, the recurrent step for one). Advances each slot's
  // position. Writes logits [rows_out, vocab] where rows_out counts one row per segment, or every
  // row for segments with all_logits, in segment order. With `reduced` (model/decoder/cpu_weights.h)
  // the projections and the LM head read its matrices instead of the model's own.
  void Forward(const std::vector<Segment>& segments, StatePool& pool, ForwardWorkspace& ws,
               std::vector<float>* logits, const CpuMatrices* reduced = nullptr) const;
  // After a Forward with a verify segment of `slot` (n tokens): the slot keeps only the first `keep`
  // of them (1 <= keep <= n), its state then bit for bit the state n plain decode steps of those
  // tokens leave: a KV cache is cut back; any other state is restored from before the segment and
  // the kept rows' attention updates replayed through Step from their saved q, k, v (no projection
  // is recomputed). keep == n costs nothing. Every verify segment must be settled by this before the
  // slot's next Forward.
  void KeepVerified(StatePool& pool, ForwardWorkspace& ws, int slot, int keep) const;
  // A rollback point for `slot` at its position now (the draft model's drafting,
  // model/speculate/draft_model.h): the rows of the slot's Forwards until RollBack are logged.
  // Then RollBack(slot, keep) (0 <= keep <= rows since the mark) leaves the slot holding only the
  // first `keep` of them: a KV cache is cut back (nothing copied); any other layer's state, copied at
  // the mark's first Forward, is restored and the kept rows replayed through Step, which is plain
  // decoding's state bit for bit where those rows went through Step (one-token segments, verify
  // segments). Every mark must be settled by RollBack before the slot is marked again, reset or
  // written; KeepVerified is RollBack for a verify segment's mark. Returns the log's index.
  int MarkRollback(StatePool& pool, ForwardWorkspace& ws, int slot) const;
  void RollBack(StatePool& pool, ForwardWorkspace& ws, int slot, int keep) const;

 private:
  friend absl::StatusOr<size_t> SessionStateFloats(const ModelConfig& config);
  // RoPE (with its scaling) on the step's q and k rows, in place.
  void ApplyRope(int rows, ForwardWorkspace& ws) const;
  // verify.cc: the log (its index in ws.verify) a segment's rows go to: a verify segment's new mark,
  // its slot's open mark, or -1. RecordVerifyRows logs one layer's n rows (and, at the layer's first,
  // its state).
  int LogOf(ForwardWorkspace& ws, const Segment& s, StatePool& pool) const;
  void RecordVerifyRows(VerifyLog& log, int layer, int n, const float* q, const float* k, const float* v,
                        StateView<float> state) const;
  // Geometry and mechanisms without weights.
  static absl::StatusOr<Model> FromConfig(ModelConfig config);

  ModelConfig config_;
  WeightMatrix embed_;             // [vocab, hidden]
  std::vector<LayerWeights> layers_;
  std::vector<float> final_norm_;  // [hidden]
  WeightMatrix lm_head_;           // [vocab, hidden]; empty when tied to embed_
  RopeFrequencies rope_;
};

}  // namespace steady

#endif  // STEADY_MODEL_DECODER_MODEL_H_
