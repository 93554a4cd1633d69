#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "base/file_io.h"
#include "model/constrain/token_bytes.h"
#include "model/generate.h"
#include "model/text/chat_template.h"
#include "tools/steady/commands.h"

namespace steady {

absl::StatusOr<Model> LoadModelFromFlags(const Flags& flags) {
  auto dir = flags.Require("model");
  if (!dir.ok()) return dir.status();
  auto override = MechanismOverrideFromFlags(flags);
  if (!override.ok()) return override.status();
  return Model::Load(*dir, *override);
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

absl::Status RunGenerate(const Flags& flags) {
  GenerateRequest request;
  auto prompt = flags.Require("prompt");
  auto max_tokens = flags.GetInt("max-tokens", 64, 0, 1 << 24);
  auto sampling = SamplingFromFlags(flags);
  if (absl::Status s = FirstError({prompt.status(), max_tokens.status(), sampling.status()}); !s.ok()) return s;
  request.prompt = *prompt;
  request.max_tokens = int(*max_tokens);
  request.sampling = *sampling;
  request.stop = flags.GetAll("stop");

  auto model = LoadModelFromFlags(flags);
  if (!model.ok()) return model.status();
  if (flags.Has("chat") || flags.Has("system")) {
    // The prompt is a user message (after --system's), rendered with the model's chat template as
    // steady-server renders GenerateRequest.messages.
    const ChatTemplate& chat = model->config().chat_template;
    std::vector<ChatMessage> messages;
    if (flags.Has("system")) messages.push_back({"system", flags.Get("system")});
    messages.push_back({"user", *prompt});
    auto rendered = RenderChat(chat, messages, /*add_generation_prompt=*/true);
    if (!rendered.ok()) return rendered.status();
    request.prompt = *std::move(rendered);
    request.stop.insert(request.stop.end(), chat.stop.begin(), chat.stop.end());
  }
  auto tokenizer = Tokenizer::LoadFromDirectory(flags.Get("model"));
  if (!tokenizer.ok()) return tokenizer.status();
  auto constraint = ConstraintFromFlags(flags, *model, **tokenizer);
  if (!constraint.ok()) return constraint.status();
  request.constraint = *std::move(constraint);
  // A KV cache preallocated on a GPU must hold the prompt (at most 2 tokens per byte, plus BOS) and
  // the generated tokens.
  BackendOptions options;
  options.max_context = std::max<int64_t>(4096, 2 * int64_t(request.prompt.size()) + request.max_tokens + 2);
  auto backend = BackendFromFlags(flags, *model, options);
  if (!backend.ok()) return backend.status();
  const auto start = std::chrono::steady_clock::now();
  auto result = GenerateText(*model, **tokenizer, **backend, 0, request, [](std::string_view text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  });
  if (!result.ok()) return result.status();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("\n");
  std::fprintf(stderr, "[%d prompt tokens, %zu generated, finish: %s, %.1f tokens/s, state %lld bytes/session, %s]\n",
               result->prompt_tokens, result->tokens.size(), result->finish_reason.c_str(),
               (result->prompt_tokens + result->tokens.size()) / seconds,
               static_cast<long long>((*backend)->BytesInUse(0)), (*backend)->Name().c_str());
  return absl::OkStatus();
}

}  // namespace

Command GenerateCommand() {
  return {"generate", R"(usage: steady generate --model DIR --prompt TEXT [--chat [--system TEXT]] [--max-tokens N]
                       [--temperature T] [--top-k K] [--top-p P] [--repetition-penalty R] [--seed S] [--stop STR ...]
                       [--json-object | --json-schema FILE | --grammar FILE]
                       [--mechanism NAME [--order P] [--scale S] [--param key=value ...]]
                       [--device cpu|cuda|auto] [--threads N] [--cpu-weights f32|bf16|q8] [--cpu-gemm auto|simd|openblas]

Streams generated text to stdout; usage figures to stderr. --device: where the forward pass runs
(default auto: a CUDA GPU when this build has the backend and one is visible, else the CPU);
--threads: the CPU backend's threads (default 0: every core); --cpu-weights bf16|q8: its matrices in bf16 or 8-bit blocks;
--cpu-gemm: auto (bf16 on AMX tiles where the CPU has them), simd (never AMX) or openblas (docs/cpu.md).
--mechanism serves the checkpoint's weights with another attention mechanism. --chat: the prompt is a
user message (after the --system message), rendered with the model's chat template (config.json's
"chat_template", or the default: docs/checkpoint-format.md), whose stop strings are added.
--json-object, --json-schema FILE, --grammar FILE: constrained decoding (docs/api.md, "Structured
output"): the text is a JSON object, an instance of the JSON Schema in FILE, or in the language of
the GBNF grammar in FILE (llama.cpp's format); generation ends when it is complete.
)",
          {.with_value = FlagUnion({{"model", "prompt", "max-tokens", "stop", "system", "json-schema", "grammar"}, kMechanismFlags, kSamplingFlags,
                                    kDeviceFlags}),
           .switches = {"chat", "json-object"}},
          RunGenerate};
}

}  // namespace steady
