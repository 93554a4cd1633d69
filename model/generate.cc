#include "model/generate.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "absl/strings/str_cat.h"
#include "model/speculate/ngram.h"

namespace steady {

std::vector<float> Prefill(Backend& backend, int slot, const std::vector<int32_t>& tokens, int chunk) {
  std::vector<float> logits;
  for (size_t begin = 0; begin < tokens.size(); begin += chunk) {
    const size_t end = std::min(tokens.size(), begin + size_t(chunk));
    Segment seg{slot, std::vector<int32_t>(tokens.begin() + begin, tokens.begin() + end), false};
    backend.Forward({seg}, &logits);
  }
  return logits;
}

absl::StatusOr<int> SampleNext(Sampler& sampler, ConstraintState* constraint, std::vector<uint64_t>* mask, float* logits,
                               int vocab, const std::vector<int32_t>& context) {
  if (!constraint) return sampler.Sample(logits, vocab, context);
  constraint->FillMask(mask);
  bool any = false;
  for (uint64_t w : *mask) any = any || w != 0;
  if (!any) {
    if (constraint->CanEnd()) return -1;  // complete, and the model has no end token to say so
    return absl::FailedPreconditionError(absl::StrCat(
        "response format: no token of the model's vocabulary continues the constrained text after ",
        constraint->tokens_taken(), " tokens"));
  }
  ApplyTokenMask(*mask, logits, vocab);
  const int token = sampler.Sample(logits, vocab, context);
  if (!constraint->Advance(token)) {
    return absl::InternalError(absl::StrCat("response format: sampled token ", token, " outside the mask"));
  }
  return token;
}

namespace {

// Prefills `prompt` (BOS already in front where wanted) and samples; `tokenizer` null: ids only.
absl::StatusOr<GenerateResult> Run(const Model& model, const Tokenizer* tokenizer, Backend& backend, int slot,
                                   const std::vector<int32_t>& prompt, const GenerateRequest& request,
                                   const std::function<void(std::string_view)>& on_text) {
  if (absl::Status s = ValidateSamplingParams(request.sampling); !s.ok()) return s;
  if (request.max_tokens < 0) return absl::InvalidArgumentError("max_tokens: must be >= 0");
  if (tokenizer == nullptr && !request.stop.empty()) {
    return absl::InvalidArgumentError("stop: stop strings need the model's tokenizer");
  }
  if (prompt.empty()) return absl::InvalidArgumentError("prompt: empty, and the model has no BOS token to start from");
  if (request.speculative == Speculation::kDraft && request.draft_model == nullptr) {
    return absl::InvalidArgumentError("speculation: draft needs a draft model (--draft-model)");
  }
  if (absl::Status s = CheckReach(backend, backend.position(slot) + int64_t(prompt.size()) + request.max_tokens);
      !s.ok()) {
    return s;
  }

  GenerateResult result;
  result.prompt_tokens = int(prompt.size());
  std::vector<float> logits = Prefill(backend, slot, prompt, std::max(1, request.prefill_chunk));
  if (request.want_prompt_logits) result.prompt_logits = logits;

  Sampler sampler(request.sampling);
  std::optional<ConstraintState> constraint;
  if (request.constraint) constraint.emplace(request.constraint);
  std::vector<uint64_t> mask;
  std::optional<TextStreamer> streamer;
  if (tokenizer != nullptr) streamer.emplace(*tokenizer, TextStreamer::Mode::kContinuation);  // after the prompt
  StopMatcher stops(request.stop);
  std::vector<int32_t> context = prompt;
  auto emit = [&](const std::string& text) {
    if (text.empty()) return;
    result.text += text;
    if (on_text) on_text(text);
  };
  // The loop samples one token a turn from `logits` row `row`. Plainly the state then takes the token
  // in a step of its own. Speculating, the step instead verifies the token followed by its drafts
  // (Segment::verify: one logits row per token, each what plain decoding would give): while a sampled
  // token equals the draft already after it in the state, the next turn samples from the next row
  // without a step; the first that differs (or the end) settles the verify, the state keeping exactly
  // the emitted tokens (KeepVerified). Sampling sees the same rows in the same order, so greedy and
  // seeded draws give plain decoding's tokens, and the emitted token's distribution is the target's
  // (for a deterministic draft, sampling and comparing is the speculative-sampling acceptance rule).
  const auto decode_start = std::chrono::steady_clock::now();
  const bool by_draft_model = request.speculative == Speculation::kDraft;
  const bool speculate = request.speculative != Speculation::kOff && request.draft_tokens > 0 && backend.Verifies();
  if (speculate && by_draft_model) request.draft_model->Reset(0);
  const int vocab = model.vocab_size();
  std::vector<int32_t> drafts;  // the verify step's tokens after its first; empty when not verifying
  int row = 0;
  bool verifying = false;
  auto settle = [&] {  // the state keeps the verified tokens emitted so far
    if (verifying) backend.KeepVerified(slot, row + 1);
    verifying = false;
  };
  result.finish_reason = "length";
  for (int i = 0; i < request.max_tokens; ++i) {
    auto next = SampleNext(sampler, constraint ? &*constraint : nullptr, &mask, logits.data() + size_t(row) * vocab,
                           vocab, context);
    if (!next.ok()) {
      settle();
      return next.status();
    }
    const int token = *next;
    // -1: the constraint's text is complete (it ends the turn even with ignore_eos).
    if (token < 0 || (!request.ignore_eos && model.config().IsEos(token))) {
      result.finish_reason = "stop";
      break;
    }
    result.tokens.push_back(token);
    context.push_back(token);
    if (streamer && token < tokenizer->vocab_size()) {
      auto piece = streamer->Add(token);
      if (!piece.ok()) {
        settle();
        return piece.status();
      }
      emit(stops.Add(*piece));
    }
    if (verifying && row < int(drafts.size()) && token == drafts[size_t(row)]) {
      // Already in the state, its logits computed: accepted.
      ++result.accepted;
      ++row;
      if (stops.stopped()) {
        result.finish_reason = "stop";
        break;
      }
      continue;
    }
    settle();
    // The sampled token enters the state even when it ends generation, so the session continues
    // exactly after the last token the client saw.
    const int remaining = request.max_tokens - i - 1;
    drafts.clear();
    if (speculate && remaining > 0 && !stops.stopped()) {
      const int k = std::min(request.draft_tokens, remaining);
      drafts = by_draft_model ? std::move(request.draft_model->Draft({{0, context, k}})[0]) : NgramDraft(context, k);
    }
    Segment seg{slot, {token}, false};
    if (!drafts.empty()) {
      seg.tokens.insert(seg.tokens.end(), drafts.begin(), drafts.end());
      seg.verify = true;
      verifying = true;
      result.drafted += int64_t(drafts.size());
    }
    backend.Forward({seg}, &logits);
    ++result.steps;
    row = 0;
    if (stops.stopped()) {
      result.finish_reason = "stop";
      break;
    }
  }
  settle();
  result.decode_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - decode_start).count();
  if (streamer && !stops.stopped()) {
    auto tail = streamer->Flush();
    if (!tail.ok()) return tail.status();
    emit(stops.Add(*tail));
    emit(stops.Flush());
  }
  return result;
}

}  // namespace

absl::StatusOr<GenerateResult> GenerateText(const Model& model, const Tokenizer& tokenizer, Backend& backend,
                                            int slot, const GenerateRequest& request,
                                            const std::function<void(std::string_view)>& on_text) {
  if (tokenizer.vocab_size() > model.vocab_size()) {
    return absl::FailedPreconditionError(absl::StrCat("tokenizer has ", tokenizer.vocab_size(),
                                                      " pieces but the model only ", model.vocab_size()));
  }
  auto encoded = tokenizer.Encode(request.prompt);
  if (!encoded.ok()) return encoded.status();
  std::vector<int32_t> prompt;
  if (request.add_bos && backend.position(slot) == 0 && model.config().bos_token_id >= 0 && tokenizer.prepends_bos() &&
      (encoded->empty() || (*encoded)[0] != model.config().bos_token_id)) {
    prompt.push_back(model.config().bos_token_id);
  }
  prompt.insert(prompt.end(), encoded->begin(), encoded->end());
  return Run(model, &tokenizer, backend, slot, prompt, request, on_text);
}

absl::StatusOr<GenerateResult> GenerateFromIds(const Model& model, const Tokenizer* tokenizer, Backend& backend,
                                               int slot, const std::vector<int32_t>& ids,
                                               const GenerateRequest& request,
                                               const std::function<void(std::string_view)>& on_text) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= model.vocab_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("prompt ids: [", i, "] = ", ids[i], " is not in [0, ", model.vocab_size(), ")"));
    }
  }
  if (tokenizer != nullptr && tokenizer->vocab_size() > model.vocab_size()) {
    return absl::FailedPreconditionError(absl::StrCat("tokenizer has ", tokenizer->vocab_size(),
                                                      " pieces but the model only ", model.vocab_size()));
  }
  std::vector<int32_t> prompt;
  const int bos = model.config().bos_token_id;
  if (request.add_bos && backend.position(slot) == 0 && bos >= 0 && (ids.empty() || ids[0] != bos)) {
    prompt.push_back(bos);
  }
  prompt.insert(prompt.end(), ids.begin(), ids.end());
  return Run(model, tokenizer, backend, slot, prompt, request, on_text);
}

}  // namespace steady
