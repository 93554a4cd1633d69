// libFuzzer target for GenerateRequest validation (docs/security.md, "Fuzzing"): serialized bytes, as
// gRPC hands them to the server, parsed into steady.v1.GenerateRequest and checked by JobFromRequest
// (server/rpc/service.h) with the default limits and chat template. Any input must give a clean error
// or a job whose fields are within the limits.
//
// Build and run: tools/fuzz/run.sh generate_request_fuzz [SECONDS] (docs/fuzzing.md).
#include <cmath>
#include <cstdint>

#include <google/protobuf/stubs/logging.h>

#include "base/check.h"
#include "model/text/chat_format.h"
#include "server/engine/engine.h"
#include "server/rpc/service.h"
#include "steady/v1/inference.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  steady::v1::GenerateRequest request;
  {
    // Refusing invalid UTF-8 in a string field is right; logging each refusal would flood the run.
    google::protobuf::LogSilencer quiet;
    if (!request.ParseFromArray(data, int(size))) return 0;
  }
  static const steady::EngineOptions engine;
  static const steady::ServiceOptions options;
  static const std::unique_ptr<steady::ChatFormat> chat = steady::MakeSmallChatFormat(steady::ChatTemplate(), "fuzz");
  auto job = steady::JobFromRequest(request, engine, options, *chat, steady::GenerationDefaults());
  if (!job.ok()) {
    STEADY_CHECK(!job.status().message().empty());  // an error names what it refuses
    return 0;
  }
  STEADY_CHECK(job->max_tokens >= 0 && job->max_tokens <= engine.max_new_tokens);
  STEADY_CHECK(std::isfinite(job->sampling.temperature) && job->sampling.temperature >= 0);
  STEADY_CHECK(job->sampling.top_p > 0 && job->sampling.top_p <= 1);
  STEADY_CHECK(job->sampling.repetition_penalty > 0);
  STEADY_CHECK(job->top_logprobs >= -1 && job->top_logprobs <= steady::kMaxTopLogprobs);
  STEADY_CHECK(int64_t(job->stop.size()) <= options.max_stop_strings + int64_t(chat->stop().size()));
  for (size_t bytes : job->cache_at_bytes) STEADY_CHECK(bytes <= job->prompt.size());
  return 0;
}
