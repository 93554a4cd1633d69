// Field checks for engine requests: every bad field is INVALID_ARGUMENT naming the field.
#ifndef STEADY_SERVER_ENGINE_REQUEST_CHECKS_H_
#define STEADY_SERVER_ENGINE_REQUEST_CHECKS_H_

#include <string_view>

#include "absl/status/status.h"
#include "base/utf8.h"  // IsValidUtf8
#include "server/engine/engine.h"
#include "server/store/session_id.h"  // CheckSessionId: the engine checks ids as the store keys them

namespace steady {

inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxStopBytes = 256;

// Everything that needs neither the tokenizer nor the session table: session_id (when set),
// prompt (UTF-8), max_tokens, sampling, stop.
absl::Status CheckGenerateJob(const GenerateJob& job, const EngineOptions& options);
// The engine's own options (Engine::Start).
absl::Status CheckEngineOptions(const EngineOptions& options);

}  // namespace steady

#endif  // STEADY_SERVER_ENGINE_REQUEST_CHECKS_H_
