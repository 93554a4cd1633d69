// GenerateRequest's sampling fields -> the job's: presence decides between the request's value and
// the checkpoint's generation_config.json default (docs/api.md, "Sampling").
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/rpc/service.h"

namespace steady {

absl::Status SamplingFromRequest(const v1::GenerateRequest& r, const GenerationDefaults& defaults,
                                 int64_t max_new_tokens, GenerateJob* job) {
  // Each field: the request's value when set (checked), else the checkpoint's (checked at load),
  // else the server's default (SamplingParams' and max_tokens 0).
  if (r.has_max_tokens()) {
    if (r.max_tokens() < 0 || r.max_tokens() > max_new_tokens) {
      return absl::InvalidArgumentError(
          absl::StrCat("max_tokens: must be in [0, ", max_new_tokens, "], got ", r.max_tokens()));
    }
    job->max_tokens = r.max_tokens();
  } else if (defaults.max_new_tokens) {
    // A default the caller did not choose is held to the server's limit rather than refused.
    job->max_tokens = std::min(*defaults.max_new_tokens, max_new_tokens);
  }
  SamplingParams& p = job->sampling;
  if (r.has_temperature()) {
    if (!std::isfinite(r.temperature()) || r.temperature() < 0 || r.temperature() > 100) {
      return absl::InvalidArgumentError(absl::StrCat("temperature: must be in [0, 100], got ", r.temperature()));
    }
    p.temperature = r.temperature();
  } else if (defaults.temperature) {
    p.temperature = *defaults.temperature;
  }
  if (r.has_top_k()) {
    if (r.top_k() < 0) return absl::InvalidArgumentError(absl::StrCat("top_k: must be >= 0, got ", r.top_k()));
    p.top_k = r.top_k();
  } else if (defaults.top_k) {
    p.top_k = *defaults.top_k;
  }
  // top_p and repetition_penalty have no meaningful 0: a 0 that is sent turns the filter off,
  // overriding the checkpoint's default.
  if (r.has_top_p()) {
    if (!std::isfinite(r.top_p()) || r.top_p() < 0 || r.top_p() > 1) {
      return absl::InvalidArgumentError(absl::StrCat("top_p: must be in [0, 1] (0: off), got ", r.top_p()));
    }
    p.top_p = r.top_p() == 0 ? 1.0f : r.top_p();
  } else if (defaults.top_p) {
    p.top_p = *defaults.top_p;
  }
  if (r.has_repetition_penalty()) {
    if (!std::isfinite(r.repetition_penalty()) || r.repetition_penalty() < 0 || r.repetition_penalty() > 100) {
      return absl::InvalidArgumentError(
          absl::StrCat("repetition_penalty: must be in [0, 100] (0: off), got ", r.repetition_penalty()));
    }
    p.repetition_penalty = r.repetition_penalty() == 0 ? 1.0f : r.repetition_penalty();
  } else if (defaults.repetition_penalty) {
    p.repetition_penalty = *defaults.repetition_penalty;
  }
  return absl::OkStatus();
}

void ToProto(const GenerateJob& job, v1::Sampling* out) {
  out->set_max_tokens(job.max_tokens);
  out->set_temperature(job.sampling.temperature);
  out->set_top_k(job.sampling.top_k);
  out->set_top_p(job.sampling.top_p);
  out->set_repetition_penalty(job.sampling.repetition_penalty);
}

std::string GenerationDefaultsJson(const GenerationDefaults& defaults) {
  // The float as the JSON file wrote it (0.7, not 0.699999988): 7 significant digits.
  auto decimal = [](float v) { return std::strtod(absl::StrFormat("%.7g", v).c_str(), nullptr); };
  nlohmann::json j = nlohmann::json::object();
  if (defaults.max_new_tokens) j["max_tokens"] = *defaults.max_new_tokens;
  if (defaults.temperature) j["temperature"] = decimal(*defaults.temperature);
  if (defaults.top_k) j["top_k"] = *defaults.top_k;
  if (defaults.top_p) j["top_p"] = decimal(*defaults.top_p);
  if (defaults.repetition_penalty) j["repetition_penalty"] = decimal(*defaults.repetition_penalty);
  return j.dump();
}

}  // namespace steady
