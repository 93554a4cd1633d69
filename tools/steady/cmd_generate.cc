#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"
#include "base/status.h"
#include "base/file_io.h"
#include "model/constrain/token_bytes.h"
#include "model/generate.h"
#include "model/text/chat_format.h"
#include "tools/steady/commands.h"

namespace steady {

absl::StatusOr<Model> LoadModelFromFlags(const Flags& flags) {
  auto dir = flags.Require("model");
  if (!dir.ok()) return dir.status();
  auto override = MechanismOverrideFromFlags(flags);
  if (!override.ok()) return override.status();
  return LoadModel(*dir, *override);
}

namespace {

// --json-object, --json-schema FILE or --grammar FILE (at most one) compiled against the model's
// tokens; null without any.
absl::StatusOr<std::shared_ptr<const Constraint>> ConstraintFromFlags(const Flags& flags, const Model& model,
                                                                       const Tokenizer& tokenizer) {
  ConstraintSpec spec;
  int given = 0;
  if (flags.Has("json-object")) ++given;
  for (const char* flag : {"json-schema", "grammar"}) {
    if (!flags.Has(flag)) continue;
    ++given;
    auto text = ReadWholeFile(flags.Get(flag));
    if (!text.ok()) return WithContext(text.status(), absl::StrCat("--", flag));
    spec.kind = std::string(flag) == "grammar" ? ConstraintSpec::Kind::kGrammar : ConstraintSpec::Kind::kJsonSchema;
    spec.text = *std::move(text);
  }
  if (given == 0) return nullptr;
  if (given > 1) return absl::InvalidArgumentError("--json-object, --json-schema and --grammar: give one");
  const ModelConfig& config = model.config();
  auto vocab = MakeTokenVocabulary(tokenizer, model.vocab_size(),
                                   std::vector<int32_t>(config.eos_token_ids.begin(), config.eos_token_ids.end()));
  if (!vocab.ok()) return vocab.status();
  auto compiled = Constraint::Compile(spec, *std::move(vocab));
  if (!compiled.ok()) {
    return WithContext(compiled.status(), spec.kind == ConstraintSpec::Kind::kGrammar     ? "--grammar " + flags.Get("grammar")
                                          : spec.kind == ConstraintSpec::Kind::kJsonSchema ? "--json-schema " + flags.Get("json-schema")
                                                                                          : "--json-object");
  }
  return *compiled;
}

// "1,2,3" -> ids (each an integer; range-checked against the model later).
absl::StatusOr<std::vector<int32_t>> ParseIds(const std::string& text) {
  std::vector<int32_t> ids;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &id)) {
      return absl::InvalidArgumentError(absl::StrCat("--prompt-ids: \"", part, "\" is not an integer (expected 1,2,3)"));
    }
    ids.push_back(id);
  }
  return ids;
}

absl::Status RunGenerate(const Flags& flags) {
  GenerateRequest request;
  const bool by_ids = flags.Has("prompt-ids"), json = flags.Has("json");
  if (by_ids == flags.Has("prompt")) return absl::InvalidArgumentError("give --prompt TEXT or --prompt-ids 1,2,3");
  if (by_ids && (flags.Has("chat") || flags.Has("system"))) {
    return absl::InvalidArgumentError("--chat and --system render text; they do not go with --prompt-ids");
  }
  if (flags.Has("logits") && !json) return absl::InvalidArgumentError("--logits needs --json");
  auto max_tokens = flags.GetInt("max-tokens", 64, 0, 1 << 24);
  auto sampling = SamplingFromFlags(flags);
  if (absl::Status s = FirstError({max_tokens.status(), sampling.status()}); !s.ok()) return s;
  std::vector<int32_t> ids;
  if (by_ids) {
    auto parsed = ParseIds(flags.Get("prompt-ids"));
    if (!parsed.ok()) return parsed.status();
    ids = *std::move(parsed);
  }
  request.prompt = flags.Get("prompt");
  request.max_tokens = int(*max_tokens);
  request.stop = flags.GetAll("stop");
  request.want_prompt_logits = flags.Has("logits");
  request.ignore_eos = flags.Has("ignore-eos");
  if (absl::Status s = SpeculationFromFlags(flags, &request.speculative, &request.draft_tokens); !s.ok()) return s;

  auto model = LoadModelFromFlags(flags);
  if (!model.ok()) return model.status();
  // generation_config.json's defaults for what the flags leave unset.
  request.sampling = WithGenerationDefaults(flags, model->config().generation, *sampling);
  if (!flags.Has("max-tokens") && model->config().generation.max_new_tokens) {
    request.max_tokens = int(std::min<int64_t>(*model->config().generation.max_new_tokens, 1 << 24));
  }
  if (flags.Has("chat") || flags.Has("system")) {
    // The prompt is a user message (after --system's), rendered with the model's chat template as
    // steady-server renders GenerateRequest.messages.
    auto chat = LoadChatFormatFor(flags.Get("model"), &model->config().chat_template);
    if (!chat.ok()) return chat.status();
    ChatInput input;
    if (flags.Has("system")) input.messages.push_back({{"role", "system"}, {"content", flags.Get("system")}});
    input.messages.push_back({{"role", "user"}, {"content", request.prompt}});
    auto rendered = (*chat)->Render(input);
    if (!rendered.ok()) return rendered.status();
    request.prompt = *std::move(rendered);
    request.stop.insert(request.stop.end(), (*chat)->stop().begin(), (*chat)->stop().end());
  }
  // With --prompt-ids the tokenizer is optional (random test checkpoints have none): no text then.
  std::unique_ptr<Tokenizer> tokenizer;
  const std::filesystem::path dir(flags.Get("model"));
  if (!by_ids || HasTokenizer(dir.string())) {
    auto loaded = LoadTokenizer(dir.string());
    if (!loaded.ok()) return loaded.status();
    tokenizer = *std::move(loaded);
  }
  if (tokenizer) {
    auto constraint = ConstraintFromFlags(flags, *model, *tokenizer);
    if (!constraint.ok()) return constraint.status();
    request.constraint = *std::move(constraint);
  } else if (flags.Has("json-object") || flags.Has("json-schema") || flags.Has("grammar")) {
    return absl::FailedPreconditionError(absl::StrCat(dir.string(), ": constrained decoding needs the model's tokenizer"));
  }
  // A KV cache preallocated on a GPU must hold the prompt (at most 2 tokens per byte, plus BOS) and
  // the generated tokens.
  BackendOptions options;
  options.max_context = std::max<int64_t>(
      4096, (by_ids ? int64_t(ids.size()) : 2 * int64_t(request.prompt.size())) + request.max_tokens + 2);
  auto backend = BackendFromFlags(flags, *model, options);
  if (!backend.ok()) return backend.status();
  // --speculative draft: the draft model on a CPU backend of its own, one lane.
  std::unique_ptr<Model> draft_checkpoint;
  std::unique_ptr<DraftModel> draft;
  if (request.speculative == Speculation::kDraft) {
    if (!tokenizer) return absl::FailedPreconditionError("--speculative draft: the target needs a tokenizer to compare");
    auto loaded = LoadDraftModelFromFlags(flags, *tokenizer);
    if (!loaded.ok()) return loaded.status();
    draft_checkpoint = *std::move(loaded);
    BackendOptions draft_options;
    if (absl::Status s = CpuOptionsFromFlags(flags, &draft_options); !s.ok()) return s;
    draft = std::make_unique<DraftModel>(*draft_checkpoint, 1, model->vocab_size(), draft_options);
    request.draft_model = draft.get();
  }
  const auto start = std::chrono::steady_clock::now();
  auto stream = [json](std::string_view text) {
    if (json) return;
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  };
  auto result = by_ids ? GenerateFromIds(*model, tokenizer.get(), **backend, 0, ids, request, stream)
                       : GenerateText(*model, *tokenizer, **backend, 0, request, stream);
  if (!result.ok()) return result.status();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (json) {
    nlohmann::json out = {{"ids", result->tokens},
                          {"text", tokenizer ? nlohmann::json(result->text) : nlohmann::json()},
                          {"finish_reason", result->finish_reason},
                          {"prompt_tokens", result->prompt_tokens}};
    if (request.want_prompt_logits) out["logits"] = result->prompt_logits;
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("\n");
  }
  std::fprintf(stderr, "[%d prompt tokens, %zu generated, finish: %s, %.1f tokens/s, state %lld bytes/session, %s]\n",
               result->prompt_tokens, result->tokens.size(), result->finish_reason.c_str(),
               (result->prompt_tokens + result->tokens.size()) / seconds,
               static_cast<long long>((*backend)->BytesInUse(0)), (*backend)->Name().c_str());
  if (request.speculative != Speculation::kOff) {
    // Decode figures: tokens after the first over the decode time (the first comes from the prompt's logits).
    std::fprintf(stderr, "[speculative %s: %lld drafted, %lld accepted (%.0f%%), %lld steps for %zu tokens, decode %.1f tokens/s%s]\n",
                 request.speculative == Speculation::kDraft ? "draft" : "ngram",
                 static_cast<long long>(result->drafted), static_cast<long long>(result->accepted),
                 result->drafted > 0 ? 100.0 * double(result->accepted) / double(result->drafted) : 0.0,
                 static_cast<long long>(result->steps), result->tokens.size(),
                 double(result->tokens.size()) / std::max(result->decode_seconds, 1e-9),
                 (*backend)->Verifies() ? "" : "; this backend cannot verify: decoded plainly");
  } else {
    std::fprintf(stderr, "[decode %.1f tokens/s]\n", double(result->tokens.size()) / std::max(result->decode_seconds, 1e-9));
  }
  return absl::OkStatus();
}

}  // namespace

Command GenerateCommand() {
  return {"generate", R"(usage: steady generate --model DIR|FILE.gguf (--prompt TEXT [--chat [--system TEXT]] | --prompt-ids 1,2,3)
                       [--json [--logits]] [--max-tokens N] [--ignore-eos]
                       [--temperature T] [--top-k K] [--top-p P] [--repetition-penalty R] [--seed S] [--stop STR ...]
                       [--json-object | --json-schema FILE | --grammar FILE]
                       [--speculative off|ngram|draft [--draft-model DIR] [--draft-tokens K]]
                       [--mechanism NAME [--order P] [--scale S] [--param key=value ...]]
                       [--device cpu|cuda|auto] [--threads N] [--cpu-weights auto|stored|f32|bf16|q8|q4|q4k] [--cpu-gemm auto|simd|openblas|avx512vnni|avxvnni|avx2|armdot]

Streams generated text to stdout; usage figures to stderr. --prompt-ids: the prompt as token ids
(BOS is put in front unless they begin with it), no tokenizer needed; --json: instead of the text
stream, one JSON line {"ids": generated ids, "text": their text (null without a tokenizer),
"finish_reason", "prompt_tokens"}, with --logits also "logits": the logits after the prompt.
--ignore-eos: end-of-sequence ids do not stop generation (--max-tokens tokens always).
Sampling flags left out take generation_config.json's values where the checkpoint has one
(--max-tokens: its max_new_tokens, else 64). --device: where the forward pass runs
(default auto: a CUDA GPU when this build has the backend and one is visible, else the CPU);
--threads: the CPU backend's threads (default 0: every core); --cpu-weights: its matrices as the checkpoint stores them
(auto, the default: fp32, bf16 or f16, memory-mapped; bf16 and a GGUF file's quantized blocks on the dot-product kernels,
f16 on the packed f16 kernel where bf16 takes AVX2's FMAs;
stored: every matrix on the widening kernels, fp32 arithmetic), or converted to f32, bf16, q8 (8-bit blocks) q4 (4-bit blocks) or q4k (4-bit with sub-block scales);
--cpu-gemm: auto (bf16 on AMX tiles, else VDPBF16PS, else AVX2's FMAs, on Arm BFMMLA/BFDOT; q8, q4, q4k and a GGUF file's quantized blocks on int8 dot products: AMX-INT8 tiles, else AVX512_VNNI,
else AVX-VNNI, else AVX2, on Arm SMMLA, else SDOT; where the CPU has them), avx512vnni (as auto, the int8 formats on VPDPBUSD where the CPU has AMX-INT8 too), avxvnni or avx2 (as auto, the int8 formats on that 256-bit path: the same
results), armdot (as auto, the int8 formats on SDOT where the CPU has SMMLA too), these four with bf16 off AMX tiles (avx512vnni and armdot on VDPBF16PS or BFMMLA where the CPU has it, else AVX2's FMAs; avxvnni and avx2 on AVX2's FMAs), simd (the widening kernels only) or openblas (every fp32 GEMM in OpenBLAS, as simd otherwise) (docs/cpu.md).
--mechanism serves the checkpoint's weights with another attention mechanism. --chat: the prompt is a
user message (after the --system message), rendered with the model's chat template as steady-server
renders chat: the Jinja template of a Hugging Face directory (chat_template.jinja or
tokenizer_config.json's), else config.json's "chat_template" or the default (docs/checkpoint-format.md),
whose stop strings are added.
--json-object, --json-schema FILE, --grammar FILE: constrained decoding (docs/api.md, "Structured
output"): the text is a JSON object, an instance of the JSON Schema in FILE, or in the language of
the GBNF grammar in FILE (llama.cpp's format); generation ends when it is complete.
--speculative ngram: speculative decoding with prompt-lookup drafts (docs/speculative.md): up to
--draft-tokens K (default 4, at most 32) tokens that followed the latest earlier occurrence of the
text's last tokens are verified in one step; the tokens are those plain decoding gives (greedy, or
with --seed), faster where the output repeats the prompt. --speculative draft --draft-model DIR: the
drafts are the greedy tokens of a smaller checkpoint with the same tokenizer (refused otherwise),
run on the CPU beside the target. CPU backend only (elsewhere: plain).
)",
          {.with_value = FlagUnion({{"model", "prompt", "prompt-ids", "max-tokens", "stop", "system", "json-schema", "grammar"},
                                    kMechanismFlags, kSamplingFlags, kDeviceFlags, kSpeculationFlags}),
           .switches = {"chat", "json", "logits", "ignore-eos", "json-object"}},
          RunGenerate};
}

}  // namespace steady
