// Single-session text generation on top of Model::Forward: prompt prefill in chunks, then decode
// with sampling, streamed text and stop strings. Used by `steady generate`; the server's engine
// batches many sessions with the same pieces (Sampler, TextStreamer, StopMatcher).
#ifndef STEADY_MODEL_GENERATE_H_
#define STEADY_MODEL_GENERATE_H_

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/backend/backend.h"
#include "model/constrain/constraint.h"
#include "model/decoder/model.h"
#include "model/decoder/state_pool.h"
#include "model/sampling/sampling.h"
#include "model/speculate/draft_model.h"
#include "model/text/tokenizer.h"

namespace steady {

// Speculative decoding (docs/speculative.md): kNgram drafts by prompt lookup (model/speculate/ngram.h),
// kDraft with a draft model (model/speculate/draft_model.h), and verifies the drafts in one step; the
// tokens are those plain decoding gives (greedy or with a seed).
enum class Speculation { kOff, kNgram, kDraft };
inline constexpr int kMaxDraftTokens = 32;  // verify rows of one session per step

struct GenerateRequest {
  std::string prompt;
  int max_tokens = 64;
  SamplingParams sampling;
  std::vector<std::string> stop;
  bool add_bos = true;      // prepend the model's BOS when the slot is empty
  int prefill_chunk = 512;  // tokens per prefill Forward call
  // The generated text is held to this (model/constrain/constraint.h); null: free text.
  std::shared_ptr<const Constraint> constraint;
  bool want_prompt_logits = false;
  bool ignore_eos = false;  // generate max_tokens tokens whatever they are (checks, benchmarks)
  // Speculation: up to draft_tokens drafted tokens verified per step. Off on a backend without
  // verify segments (Backend::Verifies).
  Speculation speculative = Speculation::kOff;
  int draft_tokens = 4;
  // kDraft: the draft model; its lane 0 follows this generation's tokens (reset at its start).
  DraftModel* draft_model = nullptr;
};

struct GenerateResult {
  std::string text;
  std::vector<int32_t> tokens;     // generated ids
  std::string finish_reason;       // "length", "stop" (eos or a stop string)
  int prompt_tokens = 0;
  // With want_prompt_logits: the logits after the prompt (those the first generated token is drawn
  // from), before any sampling transform.
  std::vector<float> prompt_logits;
  // Speculation: tokens drafted and verified, those of them accepted (generated without a step of
  // their own), and the forward steps the generated tokens took.
  int64_t drafted = 0, accepted = 0, steps = 0;
  double decode_seconds = 0;  // from the prompt's logits to the last token's step
};

// Appends the prompt to the session in `slot` and generates. `on_text` receives text as it becomes
// final (never part of a stop string).
absl::StatusOr<GenerateResult> GenerateText(const Model& model, const Tokenizer& tokenizer, Backend& backend,
                                            int slot, const GenerateRequest& request,
                                            const std::function<void(std::string_view)>& on_text = nullptr);

// The next token: `constraint`'s mask (when set) applied to `logits` ([vocab], modified), then
// `sampler`; the constraint advances past it. -1 when the constraint allows no token: OK when its
// text is complete (generation ends with "stop"), else FAILED_PRECONDITION (the vocabulary cannot
// continue it). `mask` is scratch.
absl::StatusOr<int> SampleNext(Sampler& sampler, ConstraintState* constraint, std::vector<uint64_t>* mask, float* logits,
                               int vocab, const std::vector<int32_t>& context);

// The same loop from token ids (`steady generate --prompt-ids`): each id must be below the model's
// vocab_size; BOS goes in front on an empty session unless the ids begin with it (as the server
// does with prompt_token_ids). `tokenizer` may be null: then no text is produced and stop strings
// are refused.
absl::StatusOr<GenerateResult> GenerateFromIds(const Model& model, const Tokenizer* tokenizer, Backend& backend,
                                               int slot, const std::vector<int32_t>& ids,
                                               const GenerateRequest& request,
                                               const std::function<void(std::string_view)>& on_text = nullptr);

// Feeds `tokens` into the session in chunks; returns the logits after the last token.
std::vector<float> Prefill(Backend& backend, int slot, const std::vector<int32_t>& tokens, int chunk);

}  // namespace steady

#endif  // STEADY_MODEL_GENERATE_H_
