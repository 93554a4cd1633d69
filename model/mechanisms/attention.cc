#include "model/mechanisms/attention.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/check.h"
#include "base/status.h"
#include "model/mechanisms/params_util.h"

namespace steady {

const std::vector<std::string>& MechanismNames() {
  static const std::vector<std::string> names = {"softmax",          "taylor",         "slay",       "dark", "sliced_relu",
                                                 "sliced_relu_bump", "sliding_window", "window_dark"};
  return names;
}

namespace {

absl::StatusOr<MechanismParams> DefaultParams(const std::string& name) {
  if (name == "softmax") return SoftmaxParams{};
  if (name == "taylor") return TaylorParams{};
  if (name == "slay") return SlayParams{};
  if (name == "dark") return DarkParams{};
  if (name == "sliced_relu") return SlicedParams{};
  if (name == "sliding_window") return SlidingWindowParams{};
  if (name == "window_dark") return WindowDarkParams{};
  if (name == "sliced_relu_bump") {
    SlicedParams p;
    p.bump = true;
    return p;
  }
  return absl::InvalidArgumentError(absl::StrCat("attention.mechanism: unknown mechanism \"", name,
                                                 "\" (expected one of ",
                                                 absl::StrJoin(MechanismNames(), ", "), ")"));
}

}  // namespace

absl::StatusOr<LayerAttention> ParseLayerAttention(const AttentionConfig& config, const AttnShape& shape) {
  LayerAttention a;
  a.shape = shape;
  a.mechanism = config.mechanism;
  auto params = DefaultParams(config.mechanism);
  if (!params.ok()) return params.status();
  a.params = *std::move(params);
  const nlohmann::json& j = config.params;
  if (j.contains("accumulation")) {
    const nlohmann::json& v = j.at("accumulation");
    if (v == "kahan") {
      a.accumulation = Accumulation::kKahan;
    } else if (v == "plain") {
      a.accumulation = Accumulation::kPlain;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("attention.accumulation: expected \"kahan\" or \"plain\", got ", v.dump()));
    }
  }
  if (absl::Status s = GetInt(j, "chunk_size", a.chunk_size, 1, 1 << 16, &a.chunk_size); !s.ok()) return s;
  absl::Status s = std::visit([&](auto& p) { return ParseParams(j, shape, &p); }, a.params);
  if (!s.ok() && !absl::StartsWith(s.message(), config.mechanism + ":")) {
    return WithContext(s, config.mechanism);
  }
  if (!s.ok()) return s;
  // Every key must mean something: Describe lists the mechanism's parameters, so a key that is
  // neither there nor common is a typo ("feature": 64) that would otherwise be ignored.
  const nlohmann::json known = std::visit([](const auto& p) { return Describe(p); }, a.params);
  for (const auto& [key, value] : j.items()) {
    if (key != "accumulation" && key != "chunk_size" && !known.contains(key)) {
      std::vector<std::string> names = {"accumulation", "chunk_size"};
      for (const auto& [k, v] : known.items()) names.push_back(k);
      return absl::InvalidArgumentError(absl::StrCat(config.mechanism, ": attention.", key,
                                                     ": unknown key (accepted: ", absl::StrJoin(names, ", "), ")"));
    }
  }
  return a;
}

absl::Status LoadAttentionTensors(const SafeTensors& st, const std::string& prefix, LayerAttention* a) {
  return std::visit([&](auto& p) { return LoadTensors(st, prefix, a->shape, &p); }, a->params);
}

void RandomInitAttentionTensors(uint64_t seed, LayerAttention* a) {
  std::visit([&](auto& p) { RandomInitTensors(seed, a->shape, &p); }, a->params);
}

void AppendAttentionTensors(const LayerAttention& a, const std::string& prefix,
                            std::vector<TensorToWrite>* out) {
  std::visit([&](const auto& p) { AppendTensors(p, prefix, a.shape, out); }, a.params);
}

nlohmann::json DescribeAttention(const LayerAttention& a) {
  nlohmann::json j = std::visit([](const auto& p) { return Describe(p); }, a.params);
  j["mechanism"] = a.mechanism;
  j["accumulation"] = a.accumulation == Accumulation::kKahan ? "kahan" : "plain";
  j["chunk_size"] = a.chunk_size;
  return j;
}

size_t StateFloats(const LayerAttention& a) {
  return std::visit([&](const auto& p) { return StateFloats(a, p); }, a.params);
}

template <typename T>
void InitState(const LayerAttention& a, StateView<T> st) {
  std::visit([&](const auto& p) { InitState<T>(a, p, st); }, a.params);
}

template <typename T>
void AttentionRecurrent(const LayerAttention& a, int n, const T* q, const T* k, const T* v,
                        StateView<T> st, T* y) {
  const AttnShape& s = a.shape;
  std::visit(
      [&](const auto& p) {
        for (int t = 0; t < n; ++t) {
          Step<T>(a, p, q + int64_t(t) * s.heads * s.head_dim, k + int64_t(t) * s.kv_heads * s.head_dim,
                  v + int64_t(t) * s.kv_heads * s.value_dim, st, y + int64_t(t) * s.heads * s.value_dim);
        }
      },
      a.params);
}

int AttentionTokenValueCount(const LayerAttention& a) {
  return std::holds_alternative<SlicedParams>(a.params) ? SlicedScoresPerToken(a.shape) : 0;
}

std::vector<TokenMatrix> AttentionTokenMatrices(const LayerAttention& a) {
  const auto* sliced = std::get_if<SlicedParams>(&a.params);
  return sliced != nullptr ? SlicedTokenMatrices(*sliced, a.shape) : std::vector<TokenMatrix>{};
}

template <typename T>
void AttentionTokenValues(const LayerAttention& a, int n, const T* q, const T* k, double* values,
                          const TokenMatrixProduct* product) {
  STEADY_CHECK(AttentionTokenValueCount(a) > 0);
  SlicedTokenScores<T>(a, std::get<SlicedParams>(a.params), n, q, k, values, product);
}

// Whether the mechanism goes on from token values given by the caller (those that have them).
template <typename T>
bool FromTokenValues(const LayerAttention& a, int n, const double* token_values, const T* v, StateView<T> st,
                     T* y) {
  if (token_values == nullptr) return false;
  const auto* sliced = std::get_if<SlicedParams>(&a.params);
  STEADY_CHECK(sliced != nullptr);  // only a mechanism with AttentionTokenValueCount > 0 is given any
  SlicedStepsGiven<T>(a, *sliced, n, token_values, v, st, y);
  return true;
}

template <typename T>
void AttentionSteps(const LayerAttention& a, int n, const T* q, const T* k, const T* v, StateView<T> st, T* y,
                    const double* token_values) {
  if (FromTokenValues(a, n, token_values, v, st, y)) return;
  std::visit([&](const auto& p) { Steps<T>(a, p, n, q, k, v, st, y); }, a.params);
}

template <typename T>
void AttentionChunked(const LayerAttention& a, int n, const T* q, const T* k, const T* v,
                      StateView<T> st, T* y) {
  std::visit([&](const auto& p) { Chunked<T>(a, p, n, q, k, v, st, y); }, a.params);
}

template <typename T>
void AttentionForward(const LayerAttention& a, int n, const T* q, const T* k, const T* v,
                      StateView<T> st, T* y, const double* token_values) {
  // sliced_relu's Chunked is Steps a chunk at a time (the same bits as Steps of all n).
  if (FromTokenValues(a, n, token_values, v, st, y)) return;
  if (n == 1) {
    AttentionRecurrent(a, n, q, k, v, st, y);
  } else {
    AttentionChunked(a, n, q, k, v, st, y);
  }
}

template <typename T>
void AttentionParallel(const LayerAttention& a, int n, const T* q, const T* k, const T* v, T* y) {
  std::visit([&](const auto& p) { Parallel<T>(a, p, n, q, k, v, y); }, a.params);
}

#define STEADY_INSTANTIATE(T)                                                                     \
  template void InitState<T>(const LayerAttention&, StateView<T>);                               \
  template void AttentionTokenValues<T>(const LayerAttention&, int, const T*, const T*, double*,  \
                                        const TokenMatrixProduct*);                              \
  template void AttentionForward<T>(const LayerAttention&, int, const T*, const T*, const T*,    \
                                    StateView<T>, T*, const double*);                            \
  template void AttentionRecurrent<T>(const LayerAttention&, int, const T*, const T*, const T*,  \
                                      StateView<T>, T*);                                         \
  template void AttentionSteps<T>(const LayerAttention&, int, const T*, const T*, const T*,      \
                                  StateView<T>, T*, const double*);                              \
  template void AttentionChunked<T>(const LayerAttention&, int, const T*, const T*, const T*,    \
                                    StateView<T>, T*);                                           \
  template void AttentionParallel<T>(const LayerAttention&, int, const T*, const T*, const T*, T*);
STEADY_INSTANTIATE(float)
STEADY_INSTANTIATE(double)
#undef STEADY_INSTANTIATE

}  // namespace steady
