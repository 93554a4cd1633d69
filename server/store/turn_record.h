// The outcome of a session's last turn, kept with the state it led to (in the slot's session, and in
// the snapshot: docs/session-snapshot.md), so that a resend of that turn (the same request, with
// expected_position at the position the turn started from) is answered with it instead of being
// refused: turns are idempotent (docs/deployment.md, "Resuming a cut stream"). Plain data.
#ifndef STEADY_SERVER_STORE_TURN_RECORD_H_
#define STEADY_SERVER_STORE_TURN_RECORD_H_

#include <cstdint>
#include <string>
#include <vector>

namespace steady {

struct TurnRecord {
  uint64_t request_fingerprint = 0;  // the hash of what determines the output (server/rpc); 0: none
  int64_t start_position = 0;        // the session's position before the turn
  std::vector<int32_t> token_ids;    // every id streamed
  std::string text;                  // every text streamed, concatenated
  std::string finish_reason;
  // The turn's usage (the engine's Usage); session_position is the position after the turn.
  int64_t prompt_tokens = 0, completion_tokens = 0, session_position = 0, cached_tokens = 0;
  int64_t drafted_tokens = 0, accepted_tokens = 0;
  bool operator==(const TurnRecord&) const = default;
};

}  // namespace steady

#endif  // STEADY_SERVER_STORE_TURN_RECORD_H_
