// `steady attn`: one mechanism on a researcher's raw q/k/v tensors, in any of its three forms.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "tools/steady/commands.h"

namespace steady {
namespace {

// [H, T, d] <-> [T, H, d]
template <typename T>
std::vector<T> SwapHeadsAndTokens(const std::vector<double>& x, int64_t a, int64_t b, int64_t d) {
  std::vector<T> out(x.size());
  for (int64_t i = 0; i < a; ++i) {
    for (int64_t j = 0; j < b; ++j) {
      for (int64_t e = 0; e < d; ++e) out[(j * a + i) * d + e] = T(x[(i * b + j) * d + e]);
    }
  }
  return out;
}

template <typename T>
std::vector<double> Run(const LayerAttention& a, const std::string& form, int n, const std::vector<double>& q,
                        const std::vector<double>& k, const std::vector<double>& v) {
  const AttnShape& s = a.shape;
  const std::vector<T> tq = SwapHeadsAndTokens<T>(q, s.heads, n, s.head_dim);
  const std::vector<T> tk = SwapHeadsAndTokens<T>(k, s.kv_heads, n, s.head_dim);
  const std::vector<T> tv = SwapHeadsAndTokens<T>(v, s.kv_heads, n, s.value_dim);
  std::vector<T> y(size_t(n) * s.heads * s.value_dim);
  std::vector<T> fixed(StateFloats(a));
  std::vector<T> growing;
  StateView<T> st{fixed.data(), &growing};
  InitState<T>(a, st);
  if (form == "parallel") {
    AttentionParallel<T>(a, n, tq.data(), tk.data(), tv.data(), y.data());
  } else if (form == "chunked") {
    AttentionChunked<T>(a, n, tq.data(), tk.data(), tv.data(), st, y.data());
  } else {
    AttentionRecurrent<T>(a, n, tq.data(), tk.data(), tv.data(), st, y.data());
  }
  return SwapHeadsAndTokens<double>(std::vector<double>(y.begin(), y.end()), n, s.heads, s.value_dim);
}

// The dimensions a mechanism's tensors fix (tensor, axis -> param): read from the file, as a
// researcher expects, instead of asked for again with --param.
struct TensorDim {
  const char* mechanism;
  const char* tensor;
  size_t axis;
  const char* param;
};
constexpr TensorDim kTensorDims[] = {
    {"slay", "slay.anchors", 0, "anchors"},  // [anchors, dk]
    {"slay", "slay.omega", 0, "nodes"},      // [nodes, kv_heads, dk, features]
    {"slay", "slay.omega", 3, "features"},
    {"dark", "dark.M", 1, "rank"},           // [kv_heads, rank, dk]
    {"dark", "dark.G", 1, "features"},       // [kv_heads, features, rank]
    {"window_dark", "dark.M", 1, "rank"},    // and dark.gate [heads]
    {"window_dark", "dark.G", 1, "features"},
};

// Sets each dimension `mechanism`'s tensors in `st` fix in `params`; a param already given that
// disagrees is INVALID_ARGUMENT naming both. A missing or misshapen tensor is left for
// LoadAttentionTensors to name.
absl::Status ParamsFromTensors(const SafeTensors& st, const std::string& mechanism, nlohmann::json* params) {
  for (const TensorDim& d : kTensorDims) {
    const TensorInfo* t = st.Find(d.tensor);
    if (mechanism != d.mechanism || t == nullptr || t->shape.size() <= d.axis) continue;
    const int64_t n = t->shape[d.axis];
    if (!params->contains(d.param)) {
      (*params)[d.param] = n;
      continue;
    }
    const nlohmann::json& given = params->at(d.param);
    if (!given.is_number_integer() || given.get<int64_t>() != n) {
      return absl::InvalidArgumentError(absl::StrCat("--param ", d.param, "=", given.dump(), " disagrees with tensor ",
                                                     d.tensor, " [", absl::StrJoin(t->shape, ", "), "], which has ",
                                                     d.param, " ", n));
    }
  }
  return absl::OkStatus();
}

absl::Status RunAttn(const Flags& flags) {
  auto in_path = flags.Require("in");
  auto out_path = flags.Require("out");
  auto chunk = flags.GetInt("chunk-size", 64, 1, 1 << 16);
  auto override = MechanismOverrideFromFlags(flags);
  if (absl::Status s = FirstError({in_path.status(), out_path.status(), chunk.status(), override.status()}); !s.ok()) {
    return s;
  }
  if (!*override) return absl::InvalidArgumentError("missing required flag --mechanism");
  const std::string form = flags.Get("form", "recurrent");
  if (form != "recurrent" && form != "parallel" && form != "chunked") {
    return absl::InvalidArgumentError(absl::StrCat("--form: expected recurrent, parallel or chunked, got \"", form, "\""));
  }
  const std::string mechanism = (*override)->mechanism;
  const bool sliced = mechanism == "sliced_relu" || mechanism == "sliced_relu_bump";

  auto st = SafeTensors::Open(*in_path);
  if (!st.ok()) return st.status();
  const char* q_name = sliced ? "zq" : "q";
  const char* k_name = sliced ? "zk" : "k";
  for (const char* name : {q_name, k_name, "v"}) {
    if (!st->Find(name)) {
      return absl::InvalidArgumentError(absl::StrCat(*in_path, ": missing tensor \"", name, "\" (", mechanism,
                                                     sliced ? " takes zq, zk [H, T] and v [H, T, dv])"
                                                            : " takes q, k [H, T, dk] and v [H, T, dv])"));
    }
  }
  const TensorInfo& qi = *st->Find(q_name);
  const DType dtype = qi.dtype;
  if (dtype != DType::kF32 && dtype != DType::kF64) {
    return absl::InvalidArgumentError(absl::StrCat(*in_path, ": tensor \"", q_name, "\" is ", std::string(DTypeName(dtype)),
                                                   "; steady attn takes F32 or F64"));
  }
  const size_t want_rank = sliced ? 2 : 3;
  const TensorInfo& vi = *st->Find("v");
  if (qi.shape.size() != want_rank || vi.shape.size() != 3 || qi.shape[0] < 1 || qi.shape[1] < 1 ||
      vi.shape[0] != qi.shape[0] || vi.shape[1] != qi.shape[1] || vi.shape[2] < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        *in_path, ": shapes do not fit: ", q_name, " [", absl::StrJoin(qi.shape, ", "), "], v [",
        absl::StrJoin(vi.shape, ", "), "]; expected ", q_name, sliced ? " [H, T]" : " [H, T, dk]", " and v [H, T, dv]"));
  }
  if (qi.shape[1] > (1 << 24)) return absl::InvalidArgumentError(absl::StrCat(*in_path, ": T too large"));
  const int heads = int(qi.shape[0]), n = int(qi.shape[1]), dk = sliced ? 1 : int(qi.shape[2]), dv = int(vi.shape[2]);
  std::vector<int64_t> qk_shape = {heads, n};
  if (!sliced) qk_shape.push_back(dk);
  auto q = st->ReadDouble(q_name, qk_shape);
  auto k = st->ReadDouble(k_name, qk_shape);
  auto v = st->ReadDouble("v", {heads, n, dv});
  if (absl::Status s = FirstError({q.status(), k.status(), v.status()}); !s.ok()) return s;

  nlohmann::json params = (*override)->params;
  params["chunk_size"] = *chunk;
  if (sliced) params["projection"] = "none";
  if (absl::Status s = ParamsFromTensors(*st, mechanism, &params); !s.ok()) return WithContext(s, *in_path);
  auto a = ParseLayerAttention({mechanism, params}, AttnShape{heads, heads, dk, dv});
  if (!a.ok()) return a.status();
  if (absl::Status s = LoadAttentionTensors(*st, "", &*a); !s.ok()) {
    return WithContext(s, *in_path);
  }
  const std::vector<double> y = dtype == DType::kF64 ? Run<double>(*a, form, n, *q, *k, *v)
                                                     : Run<float>(*a, form, n, *q, *k, *v);
  return WriteSafeTensors(*out_path, {TensorToWrite{"y", dtype, {heads, n, dv}, y}},
                          {{"mechanism", mechanism}, {"form", form}});
}

}  // namespace

Command AttnCommand() {
  return {"attn", R"(usage: steady attn --mechanism NAME --in IN.safetensors --out OUT.safetensors
                   [--form recurrent|parallel|chunked] [--chunk-size C] [--order P] [--scale S]
                   [--param key=value ...]

Runs one mechanism on raw tensors q, k [H, T, dk] and v [H, T, dv] (sliced mechanisms: zq, zk
[H, T]) plus the mechanism's tensors (slay.anchors [anchors, dk], slay.omega [nodes, H, dk,
features], dark.M [H, rank, dk], dark.G [H, features, rank], window_dark's dark.M, dark.G and
dark.gate [H], sliced.bandwidth); writes y [H, T, dv]
in the input's float type. The dimensions those tensors have (slay's anchors, nodes and features;
dark's rank and features) are read from them; a --param that disagrees is an error naming both.
)",
          {.with_value = FlagUnion({{"in", "out", "form", "chunk-size"}, kMechanismFlags}), .switches = {}}, RunAttn};
}

}  // namespace steady
