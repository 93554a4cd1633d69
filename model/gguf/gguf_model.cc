#include "model/gguf/gguf_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/check.h"
#include "base/file_io.h"
#include "model/checkpoint/safetensors.h"
#include "model/gguf/dequantize.h"

namespace steady {
namespace {

constexpr const char* kArchitectures[] = {"llama", "qwen2", "qwen3"};
constexpr char kRopeFreqs[] = "rope_freqs.weight";

// Hugging Face's per-layer names (after "model.layers.N.") and llama.cpp's (after "blk.N.").
constexpr std::pair<const char*, const char*> kLayerNames[] = {
    {"input_layernorm", "attn_norm"},     {"self_attn.q_proj", "attn_q"},    {"self_attn.k_proj", "attn_k"},
    {"self_attn.v_proj", "attn_v"},       {"self_attn.o_proj", "attn_output"}, {"self_attn.q_norm", "attn_q_norm"},
    {"self_attn.k_norm", "attn_k_norm"},  {"post_attention_layernorm", "ffn_norm"}, {"mlp.gate_proj", "ffn_gate"},
    {"mlp.up_proj", "ffn_up"},            {"mlp.down_proj", "ffn_down"},
};

// "model.layers.3.mlp.up_proj.weight" -> "blk.3.ffn_up.weight"; "" for a name with no GGUF tensor.
std::string GgufName(const std::string& hf) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  const std::string prefix = "model.layers.";
  if (hf.compare(0, prefix.size(), prefix) != 0) return "";
  const size_t dot = hf.find('.', prefix.size());
  if (dot == std::string::npos) return "";
  const std::string layer = hf.substr(prefix.size(), dot - prefix.size());
  const std::string rest = hf.substr(dot + 1);
  for (const auto& [from, to] : kLayerNames) {
    for (const char* suffix : {".weight", ".bias"}) {
      if (rest == std::string(from) + suffix) return absl::StrCat("blk.", layer, ".", to, suffix);
    }
  }
  return "";
}

// Which heads a q or k tensor of llama holds (its rows are permuted per head), 0 for every other.
int PermutedHeads(const ModelConfig& c, const std::string& arch, std::string_view hf) {
  if (arch != "llama") return 0;
  if (hf.find("self_attn.q_proj.") != std::string_view::npos) return c.num_heads;
  if (hf.find("self_attn.k_proj.") != std::string_view::npos) return c.num_kv_heads;
  return 0;
}

// The file's row of Hugging Face row `r` for a tensor of `heads` heads of `rows / heads` rows each:
// llama.cpp stores pair i of a head's rotation as rows (2i, 2i+1), Hugging Face as (i, i + d/2).
int64_t SourceRow(int64_t r, int64_t rows, int heads) {
  if (heads == 0) return r;
  const int64_t d = rows / heads, head = r / d, within = r % d, half = d / 2;
  const int64_t pair = within % half, second = within / half;
  return head * d + 2 * pair + second;
}

std::string ShapeText(const std::vector<int64_t>& shape) { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }

class Mapper {
 public:
  Mapper(const GgufFile& file, const ModelConfig& config, std::string arch)
      : file_(file), config_(config), arch_(std::move(arch)) {}

  // The GGUF tensor for Hugging Face name `hf`, checked for its shape.
  absl::StatusOr<const GgufTensorInfo*> Find(const std::string& hf, const std::vector<int64_t>& shape) {
    const std::string name = GgufName(hf);
    const GgufTensorInfo* t = name.empty() ? nullptr : file_.FindTensor(name);
    if (t == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(file_.display_name(), ": tensor \"", name.empty() ? hf : name,
                                                     "\" is missing (", arch_, "'s ", hf, ", shape ",
                                                     ShapeText(shape), ")"));
    }
    if (t->Shape() != shape) {
      return absl::InvalidArgumentError(absl::StrCat(file_.display_name(), ": tensor \"", name, "\" has shape ",
                                                     ShapeText(t->Shape()), ", expected ", ShapeText(shape),
                                                     " (", arch_, "'s ", hf, ")"));
    }
    if (!CanDequantize(t->type)) {
      return absl::InvalidArgumentError(absl::StrCat(file_.display_name(), ": tensor \"", name, "\": type ",
                                                     GgmlTypeName(t->type), " is not supported (",
                                                     DequantizableTypeNames(), " are)"));
    }
    used_.insert(name);
    return t;
  }

  absl::StatusOr<std::vector<float>> Vector(const std::string& hf, const std::vector<int64_t>& shape) {
    auto t = Find(hf, shape);
    if (!t.ok()) return t.status();
    auto values = file_.ReadFloat((*t)->name);
    if (!values.ok()) return values.status();
    if (absl::Status s = CheckFinite(**t, values->data(), int64_t(values->size()), 0); !s.ok()) return s;
    const int heads = PermutedHeads(config_, arch_, hf);
    if (heads == 0) return values;
    std::vector<float> out(values->size());
    for (int64_t r = 0; r < int64_t(out.size()); ++r) out[r] = (*values)[SourceRow(r, int64_t(out.size()), heads)];
    return out;
  }

  absl::StatusOr<WeightMatrix> Matrix(const std::string& hf, const std::vector<int64_t>& shape) {
    auto found = Find(hf, shape);
    if (!found.ok()) return found.status();
    const GgufTensorInfo& t = **found;
    const int64_t rows = shape[0], cols = shape[1];
    const int heads = PermutedHeads(config_, arch_, hf);
    GgmlTypeTraits traits;
    LookUpGgmlType(t.type, &traits);
    const int64_t row_bytes = cols / traits.block_elements * traits.block_bytes;
    const char* raw = file_.RawData(t).data();
    // Every value finite, checked on ggml's own dequantization a row at a time.
    std::vector<float> row(size_t(cols), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      Dequantize(t.type, raw + r * row_bytes, cols, row.data());
      if (absl::Status s = CheckFinite(t, row.data(), cols, r); !s.ok()) return s;
    }
    const GgmlType type = GgmlType(t.type);
    // A type held in the file's own bytes, a view of the mapped tensor where no rows are permuted.
    const std::optional<WeightType> held = HeldAs(type);
    STEADY_CHECK(held.has_value() && "every type Find takes is held");
    if (heads == 0 && WeightMatrix::MatchesAlignment(*held, raw)) {
      return WeightMatrix::View(*held, rows, cols, raw, file_.Owner(), file_.mapped());
    }
    // Otherwise a copy of the loader's own; the file's pages, read twice (the check and the copy), then
    // leave resident memory (they come back from the file if touched again).
    WeightMatrix copy = Copied(*held, raw, rows, cols, row_bytes, heads);
    if (file_.mapped()) DropMappedPages(raw, size_t(t.bytes));
    return copy;
  }

  // The types held in the file's own bytes: every type the loader takes (CanDequantize). F32, F16,
  // BF16, and Q8_0 as q8_0, Q4_0 as q4, Q4_1, Q5_0 and Q5_1 as q4_1, q5_0 and q5_1, Q4_K as q4k, Q5_K
  // as q5k, Q6_K as q6k, Q2_K as q2k, Q3_K as q3k, IQ4_NL and IQ4_XS as iq4_nl and iq4_xs (ggml's
  // blocks: kernels/cpu/matmul.h, q32.h, q4k.h, q5k.h, q6k.h, q2k.h, q3k_iq4.h).
  static std::optional<WeightType> HeldAs(GgmlType type) {
    switch (type) {
      case GgmlType::kF32: return WeightType::kF32;
      case GgmlType::kF16: return WeightType::kF16;
      case GgmlType::kBF16: return WeightType::kBf16;
      case GgmlType::kQ8_0: return WeightType::kQ8_0;
      case GgmlType::kQ4_0: return WeightType::kQ4;
      case GgmlType::kQ4_1: return WeightType::kQ4_1;
      case GgmlType::kQ5_0: return WeightType::kQ5_0;
      case GgmlType::kQ5_1: return WeightType::kQ5_1;
      case GgmlType::kQ4_K: return WeightType::kQ4K;
      case GgmlType::kQ5_K: return WeightType::kQ5K;
      case GgmlType::kQ6_K: return WeightType::kQ6K;
      case GgmlType::kQ2_K: return WeightType::kQ2K;
      case GgmlType::kQ3_K: return WeightType::kQ3K;
      case GgmlType::kIQ4_NL: return WeightType::kIq4Nl;
      case GgmlType::kIQ4_XS: return WeightType::kIq4Xs;
      default: return std::nullopt;
    }
  }

  // A copy of the tensor's rows (llama's q/k un-permuted) in its own bytes, held as `held`.
  static WeightMatrix Copied(WeightType held, const char* raw, int64_t rows, int64_t cols, int64_t row_bytes, int heads) {
    auto buffer = std::make_shared<std::vector<float>>(size_t(rows * row_bytes + 3) / 4);
    char* out = reinterpret_cast<char*>(buffer->data());
    for (int64_t r = 0; r < rows; ++r) std::memcpy(out + r * row_bytes, raw + SourceRow(r, rows, heads) * row_bytes, size_t(row_bytes));
    return WeightMatrix::Owned(held, rows, cols, out, std::move(buffer));
  }

  // Tensors of the file that no weight asked for (rope_freqs is the config's).
  std::vector<std::string> Unused() const {
    std::vector<std::string> unused;
    for (const GgufTensorInfo& t : file_.tensors()) {
      if (!used_.count(t.name) && t.name != kRopeFreqs) unused.push_back(t.name);
    }
    return unused;
  }

 private:
  absl::Status CheckFinite(const GgufTensorInfo& t, const float* v, int64_t n, int64_t row) const {
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(v[i])) {
        return absl::InvalidArgumentError(absl::StrCat(file_.display_name(), ": tensor \"", t.name,
                                                       "\": non-finite value ", v[i], " at element ",
                                                       row * n + i));
      }
    }
    return absl::OkStatus();
  }

  const GgufFile& file_;
  const ModelConfig& config_;
  std::string arch_;
  std::set<std::string> used_;
};

absl::StatusOr<std::string> Architecture(const GgufFile& f) {
  auto arch = f.GetString("general.architecture");
  if (!arch.ok()) return arch.status();
  for (const char* a : kArchitectures) {
    if (*arch == a) return arch;
  }
  return absl::InvalidArgumentError(absl::StrCat(f.display_name(), ": general.architecture \"", *arch,
                                                 "\" is not one Steady computes (llama, qwen2, qwen3)"));
}

// A metadata value; `fallback` when the key is absent and there is one. The first error is kept in
// *status (the later lookups' are dropped), and 0 returned in its place.
template <typename T>
T KeyOr(const absl::StatusOr<T>& got, std::optional<T> fallback, absl::Status* status) {
  if (got.ok()) return *got;
  if (fallback && absl::IsNotFound(got.status())) return *fallback;
  if (status->ok()) *status = got.status();
  return T(0);
}

}  // namespace

absl::StatusOr<ModelConfig> GgufModelConfig(const GgufFile& f) {
  auto arch = Architecture(f);
  if (!arch.ok()) return arch.status();
  const std::string& a = *arch;
  const std::string& file = f.display_name();
  absl::Status status;
  auto uint = [&](const std::string& key, std::optional<uint64_t> fallback = std::nullopt) {
    return KeyOr<uint64_t>(f.GetUint(a + "." + key), fallback, &status);
  };
  auto real = [&](const std::string& key, std::optional<double> fallback = std::nullopt) {
    return KeyOr<double>(f.GetFloat(a + "." + key), fallback, &status);
  };
  const uint64_t hidden = uint("embedding_length"), heads = uint("attention.head_count");
  nlohmann::json j = {{"model_type", a},
                      {"hidden_size", hidden},
                      {"num_hidden_layers", uint("block_count")},
                      {"intermediate_size", uint("feed_forward_length")},
                      {"num_attention_heads", heads},
                      {"num_key_value_heads", uint("attention.head_count_kv", heads)},
                      {"rms_norm_eps", real("attention.layer_norm_rms_epsilon")},
                      {"rope_theta", real("rope.freq_base", 10000.0)}};
  if (const uint64_t context = uint("context_length", 0); context > 0) j["max_position_embeddings"] = context;
  if (!status.ok()) return status;
  if (heads == 0) return absl::InvalidArgumentError(absl::StrCat(file, ": ", a, ".attention.head_count is 0"));
  const uint64_t head_dim = uint("attention.key_length", hidden / heads);
  const uint64_t value_dim = uint("attention.value_length", head_dim);
  const uint64_t rope_dim = uint("rope.dimension_count", head_dim);
  if (!status.ok()) return status;
  if (value_dim != head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", a, ".attention.value_length ", value_dim,
                                                   " differs from the key length ", head_dim, " (not supported)"));
  }
  if (rope_dim != head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", a, ".rope.dimension_count ", rope_dim,
                                                   " is not the head dimension ", head_dim,
                                                   " (partial rotary embeddings are not supported)"));
  }
  j["head_dim"] = head_dim;
  const GgufTensorInfo* embed = f.FindTensor("token_embd.weight");
  if (embed == nullptr || embed->dims.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": tensor \"token_embd.weight\" is missing or not a matrix"));
  }
  j["vocab_size"] = embed->dims[1];
  j["tie_word_embeddings"] = f.FindTensor("output.weight") == nullptr;
  // Biases: qwen2 always has q/k/v ones; llama and qwen3 have them (and o's) when the file does.
  if (a != "qwen2") j["attention_bias"] = f.FindTensor("blk.0.attn_q.bias") != nullptr;
  if (auto type = f.GetString(a + ".rope.scaling.type"); type.ok() && *type != "none") {
    if (*type != "linear") {
      return absl::InvalidArgumentError(absl::StrCat(file, ": ", a, ".rope.scaling.type \"", *type,
                                                     "\" is not supported (none, linear; llama3 as rope_freqs)"));
    }
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", real("rope.scaling.factor")}};
    if (!status.ok()) return status;
  } else if (!type.ok() && !absl::IsNotFound(type.status())) {
    return type.status();
  }
  std::vector<uint64_t> eos;
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    auto id = f.GetUint(key);
    if (id.ok() && std::find(eos.begin(), eos.end(), *id) == eos.end()) eos.push_back(*id);
    if (!id.ok() && !absl::IsNotFound(id.status())) return id.status();
  }
  if (!eos.empty()) j["eos_token_id"] = eos;
  if (auto bos = f.GetUint("tokenizer.ggml.bos_token_id"); bos.ok()) {
    j["bos_token_id"] = *bos;
  } else if (!absl::IsNotFound(bos.status())) {
    return bos.status();
  }
  auto config = ParseModelConfig(j.dump(), file + " (its metadata as config.json)");
  if (!config.ok()) return config.status();
  if (const GgufTensorInfo* freqs = f.FindTensor(kRopeFreqs); freqs != nullptr) {
    if (freqs->Shape() != std::vector<int64_t>{int64_t(head_dim / 2)}) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": tensor \"", kRopeFreqs, "\" has shape ",
                                                     ShapeText(freqs->Shape()), ", expected [", head_dim / 2, "]"));
    }
    auto divisors = f.ReadFloat(kRopeFreqs);
    if (!divisors.ok()) return divisors.status();
    for (float d : *divisors) {
      if (!(d > 0) || !std::isfinite(d)) {
        return absl::InvalidArgumentError(absl::StrCat(file, ": tensor \"", kRopeFreqs, "\": divisor ", d,
                                                       " is not a positive number"));
      }
    }
    config->rope_scaling.freq_divisors.assign(divisors->begin(), divisors->end());
  }
  return config;
}

absl::StatusOr<Model> LoadGgufModel(const GgufFile& file, const std::optional<MechanismOverride>& override) {
  auto config = GgufModelConfig(file);
  if (!config.ok()) return config.status();
  if (override) OverrideMechanism(override->mechanism, override->params, &*config);
  Mapper mapper(file, *config, config->model_type);
  WeightSource source;
  source.vector = [&](const std::string& name, const std::vector<int64_t>& shape) { return mapper.Vector(name, shape); };
  source.matrix = [&](const std::string& name, const std::vector<int64_t>& shape) { return mapper.Matrix(name, shape); };
  auto model = Model::FromWeights(*config, source);
  if (!model.ok()) return model.status();
  std::vector<std::string> unused = mapper.Unused();
  if (!unused.empty()) {
    if (unused.size() > 5) unused.resize(5);
    return absl::InvalidArgumentError(absl::StrCat(file.display_name(), ": tensors the ", config->model_type,
                                                   " architecture does not use (e.g. ", absl::StrJoin(unused, ", "),
                                                   ")"));
  }
  return model;
}

}  // namespace steady
