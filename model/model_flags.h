// The model layer's command-line flags, shared by every binary that loads a model (steady,
// steady-server, the measurement tools): mechanism overrides, sampling and --device, each turned
// into model/'s own options type here, once.
#ifndef STEADY_MODEL_MODEL_FLAGS_H_
#define STEADY_MODEL_MODEL_FLAGS_H_

#include <memory>
#include <optional>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "base/flags.h"
#include "model/backend/backend.h"
#include "model/decoder/model.h"
#include "model/generate.h"
#include "model/sampling/sampling.h"

namespace steady {

extern const std::set<std::string> kMechanismFlags;  // --mechanism --order --param --scale
// --mechanism NAME [--order P] [--scale S] [--param key=value ...] -> an override (nullopt if absent).
absl::StatusOr<std::optional<MechanismOverride>> MechanismOverrideFromFlags(const Flags& flags);
extern const std::set<std::string> kSamplingFlags;  // --temperature --top-k --top-p --repetition-penalty --seed
absl::StatusOr<SamplingParams> SamplingFromFlags(const Flags& flags);
// `sampling` with generation_config.json's defaults (ModelConfig::generation) for each of
// --temperature, --top-k, --top-p and --repetition-penalty the flags leave out.
SamplingParams WithGenerationDefaults(const Flags& flags, const GenerationDefaults& defaults, SamplingParams sampling);
// --speculative off|ngram|draft (default off), --draft-tokens K, --draft-model DIR
extern const std::set<std::string> kSpeculationFlags;
// --speculative and --draft-tokens (1..kMaxDraftTokens, default 4) into `mode` and `draft_tokens`;
// draft needs --draft-model, which needs draft.
absl::Status SpeculationFromFlags(const Flags& flags, Speculation* mode, int* draft_tokens);
// --speculative draft: the checkpoint --draft-model names, its tokenizer checked against the
// target's (CheckSameTokenizer: FAILED_PRECONDITION naming the difference). Null without the flag.
absl::StatusOr<std::unique_ptr<Model>> LoadDraftModelFromFlags(const Flags& flags, const Tokenizer& target_tokenizer);
extern const std::set<std::string> kDeviceFlags;  // --device cpu|cuda|auto (default auto), --threads N (0: all cores),
                                                  // --cpu-weights auto|stored|f32|bf16|q8|q4|q4k, --cpu-gemm
// --threads, --cpu-weights and --cpu-gemm into `options` (the CPU backend's; the other fields are
// left alone); a --cpu-gemm path this CPU lacks (avx512vnni, avxvnni, avx2, armdot) is an error naming the extension.
absl::Status CpuOptionsFromFlags(const Flags& flags, BackendOptions* options);
extern const std::set<std::string> kCudaFlags;  // --cuda-weights bf16|f32, --cuda-kv bf16|f32 (default bf16 both)
// --cuda-weights f32 (cuda_bf16 off: fp32 weights and GEMMs, the reference precision) and --cuda-kv f32
// (an fp32 softmax KV cache) into `options`; absent flags leave the defaults.
absl::Status CudaOptionsFromFlags(const Flags& flags, BackendOptions* options);
// The backend --device names for `model` (model/backend/backend.h), with the CPU flags (and the CUDA
// flags, where the command takes them) applied to `options`.
absl::StatusOr<std::unique_ptr<Backend>> BackendFromFlags(const Flags& flags, const Model& model,
                                                          const BackendOptions& options = {});

}  // namespace steady

#endif  // STEADY_MODEL_MODEL_FLAGS_H_
