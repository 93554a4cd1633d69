#include "server/engine/request_checks.h"

#include "absl/strings/str_cat.h"
#include "base/utf8.h"
#include "model/sampling/sampling.h"

namespace steady {

absl::Status CheckGenerateJob(const GenerateJob& job, const EngineOptions& options) {
  if (!job.session_id.empty()) {
    if (absl::Status s = CheckSessionId(job.session_id, "session_id"); !s.ok()) return s;
  }
  if (!IsValidUtf8(job.prompt)) return absl::InvalidArgumentError("prompt: not valid UTF-8");
  if (job.speculative == Speculation::kDraft && options.draft_model == nullptr) {
    return absl::InvalidArgumentError("speculation.mode: draft needs a server started with --draft-model");
  }
  if (job.draft_tokens && (*job.draft_tokens < 1 || *job.draft_tokens > kMaxDraftTokens)) {
    return absl::InvalidArgumentError(
        absl::StrCat("draft_tokens: must be in [1, ", kMaxDraftTokens, "], got ", *job.draft_tokens));
  }
  if (!job.prompt.empty() && !job.prompt_token_ids.empty()) {
    return absl::InvalidArgumentError("prompt and prompt_token_ids: give one, not both");
  }
  if (job.top_logprobs < -1 || job.top_logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_logprobs: must be in [0, ", kMaxTopLogprobs, "], got ", job.top_logprobs));
  }
  if (job.max_tokens < 0 || job.max_tokens > options.max_new_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens: must be in [0, ", options.max_new_tokens, "], got ", job.max_tokens));
  }
  if (absl::Status s = ValidateSamplingParams(job.sampling); !s.ok()) return s;
  if (job.sampling.logit_bias.size() > size_t(kMaxLogitBiasEntries)) {
    return absl::InvalidArgumentError(absl::StrCat("logit_bias: at most ", kMaxLogitBiasEntries, " tokens"));
  }
  if (job.n < 1 || job.n > kMaxChoices) {
    return absl::InvalidArgumentError(absl::StrCat("n: must be in [1, ", kMaxChoices, "], got ", job.n));
  }
  if (job.n > 1 && !job.session_id.empty()) {
    return absl::InvalidArgumentError("n: more than one choice needs an ephemeral session (no session_id)");
  }
  if (job.stop.size() > kMaxStopStrings) {
    return absl::InvalidArgumentError(absl::StrCat("stop: at most ", kMaxStopStrings, " strings, got ", job.stop.size()));
  }
  for (size_t i = 0; i < job.stop.size(); ++i) {
    const std::string& s = job.stop[i];
    if (s.empty() || s.size() > kMaxStopBytes || !IsValidUtf8(s)) {
      return absl::InvalidArgumentError(
          absl::StrCat("stop[", i, "]: must be 1..", kMaxStopBytes, " bytes of valid UTF-8"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckEngineOptions(const EngineOptions& o) {
  auto bad = [](const char* name, int64_t v, const char* want) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": must be ", want, ", got ", v));
  };
  if (o.state_memory_bytes < 0) return bad("state_memory_bytes", o.state_memory_bytes, ">= 0");
  if (o.max_queue < 1) return bad("max_queue", o.max_queue, ">= 1");
  if (o.max_batch < 1) return bad("max_batch", o.max_batch, ">= 1");
  if (o.speculative == Speculation::kDraft && o.draft_model == nullptr) {
    return absl::InvalidArgumentError("speculative: draft needs a draft model (--draft-model)");
  }
  if (o.prefill_budget < 1) return bad("prefill_budget", o.prefill_budget, ">= 1");
  if (o.max_prompt_tokens < 1) return bad("max_prompt_tokens", o.max_prompt_tokens, ">= 1");
  if (o.max_new_tokens < 0) return bad("max_new_tokens", o.max_new_tokens, ">= 0");
  if (o.max_sessions < 1) return bad("max_sessions", o.max_sessions, ">= 1");
  if (o.prefix_cache_bytes < 0) return bad("prefix_cache_bytes", o.prefix_cache_bytes, ">= 0");
  if (o.prefix_cache_interval < 1) return bad("prefix_cache_interval", o.prefix_cache_interval, ">= 1");
  return absl::OkStatus();
}

}  // namespace steady
