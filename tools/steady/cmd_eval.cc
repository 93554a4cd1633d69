#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "model/generate.h"
#include "tools/steady/commands.h"

namespace steady {

namespace {

absl::Status RunEval(const Flags& flags) {
  auto data = flags.Require("data");
  auto max_tokens = flags.GetInt("max-tokens", 0, 0, int64_t(1) << 40);
  auto context = flags.GetInt("context", 0, 0, int64_t(1) << 40);
  if (absl::Status s = FirstError({data.status(), max_tokens.status(), context.status()}); !s.ok()) return s;
  std::ifstream in(*data, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(*data, ": cannot open"));
  std::stringstream text;
  text << in.rdbuf();

  auto model = LoadModelFromFlags(flags);
  if (!model.ok()) return model.status();
  auto tokenizer = LoadTokenizer(flags.Get("model"));
  if (!tokenizer.ok()) return tokenizer.status();
  auto ids = (*tokenizer)->Encode(text.str());
  if (!ids.ok()) return ids.status();
  if (*max_tokens > 0 && int64_t(ids->size()) > *max_tokens) ids->resize(*max_tokens);
  if (ids->size() < 2) return absl::InvalidArgumentError(absl::StrCat(*data, ": fewer than 2 tokens to evaluate"));

  // Token by token through the decode path (Forward with one-token segments = the recurrent step).
  // With --context N the session restarts every N tokens (a fresh state, BOS first).
  BackendOptions options;
  options.max_context = *context > 0 ? *context + 1 : int64_t(ids->size()) + 1;
  auto backend = BackendFromFlags(flags, *model, options);
  if (!backend.ok()) return backend.status();
  Backend& b = **backend;
  std::vector<float> logits;
  const int vocab = model->vocab_size();
  const int bos = model->config().bos_token_id;
  double nll = 0;
  int64_t scored = 0;
  size_t peak_bytes = 0;
  const auto start = std::chrono::steady_clock::now();
  for (size_t t = 0; t + 1 < ids->size(); ++t) {
    if (t == 0 || (*context > 0 && b.position(0) >= *context)) {
      b.Reset(0);
      if (bos >= 0) b.Forward({Segment{0, {bos}, false}}, &logits);
    }
    b.Forward({Segment{0, {(*ids)[t]}, false}}, &logits);
    double max_logit = logits[0];
    for (int i = 1; i < vocab; ++i) max_logit = std::max<double>(max_logit, logits[i]);
    double sum = 0;
    for (int i = 0; i < vocab; ++i) sum += std::exp(logits[i] - max_logit);
    nll += std::log(sum) + max_logit - logits[(*ids)[t + 1]];
    ++scored;
    peak_bytes = std::max(peak_bytes, size_t(b.BytesInUse(0)));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double ppl = std::exp(nll / scored);
  nlohmann::json report = {{"model", flags.Get("model")},
                           {"data", *data},
                           {"mechanism", model->config().layer_attention[0].mechanism},
                           {"attention", model->DescribeAttention()[0]},
                           {"tokens", scored},
                           {"nll_per_token", nll / scored},
                           {"perplexity", ppl},
                           {"state_bytes_per_session", model->StateFloats() * sizeof(float)},
                           {"peak_session_bytes", peak_bytes},
                           {"decode_tokens_per_second", scored / seconds},
                           {"device", b.Name()}};
  // A hybrid (layers with different mechanisms, the checkpoint's "layers" override): every layer's.
  const nlohmann::json layers = model->DescribeAttention();
  if (std::any_of(layers.begin(), layers.end(), [&](const nlohmann::json& l) { return l != layers[0]; })) {
    report["layers"] = layers;
  }
  if (flags.Has("json")) {
    std::printf("%s\n", report.dump(2).c_str());
  } else {
    std::printf("perplexity %.4f over %lld tokens (%s), state %zu bytes/session (peak %zu), %.1f tokens/s\n", ppl,
                static_cast<long long>(scored), report["mechanism"].get<std::string>().c_str(),
                model->StateFloats() * sizeof(float), peak_bytes, scored / seconds);
  }
  return absl::OkStatus();
}

}  // namespace

Command EvalCommand() {
  return {"eval", R"(usage: steady eval --model DIR|FILE.gguf --data FILE [--max-tokens N] [--context N] [--json] [--device D] [--threads N] [--cpu-weights auto|stored|f32|bf16|q8|q4|q4k]
                   [--cpu-gemm auto|simd|openblas|avx512vnni|avxvnni|avx2|armdot] [--cuda-weights bf16|f32] [--cuda-kv bf16|f32]
                   [--mechanism NAME [--order P] [--scale S] [--param key=value ...]]

Perplexity of a text file through the recurrent (decode) path, and state bytes per session;
sessions restart every --context tokens. --cpu-weights bf16|q8|q4|q4k measures the CPU backend with its
matrices in bf16, 8-bit or 4-bit blocks (q4k: with sub-block scales) (the perplexity delta against f32 is their quality cost;
docs/cpu.md; the default, auto, reads them as the checkpoint stores them, bf16 and a GGUF file's quantized blocks on the dot-product kernels,
f16 on the packed f16 kernel where bf16 takes AVX2's FMAs;
stored keeps every matrix on the widening kernels); --cpu-gemm simd (and openblas) keeps bf16
off AMX tiles and bf16, q8, q4, q4k and a GGUF file's quantized blocks off the dot-product kernels (which also round the activations to bf16/q8);
avx512vnni puts the int8 formats on VPDPBUSD where AMX-INT8 is there too, avxvnni and avx2 on that 256-bit path, armdot the int8 formats on SDOT where
SMMLA is there too (the same results as auto's); these four keep bf16 off AMX tiles (avx512vnni and armdot on VDPBF16PS or BFMMLA where
the CPU has it, else AVX2's FMAs; avxvnni and avx2 on AVX2's FMAs). On the GPU,
--cuda-weights f32 runs the fp32 reference path, --cuda-kv f32 keeps softmax's KV cache in fp32.
)",
          {.with_value = FlagUnion({{"model", "data", "max-tokens", "context"}, kMechanismFlags, kDeviceFlags, kCudaFlags}), .switches = {"json"}}, RunEval};
}

}  // namespace steady
