// Resuming a Generate stream that a replica's death cut (docs/deployment.md, "What happens
// when..."). No balancer can hide it: nginx has passed the client's stream on to the replica that
// died, and cannot resend a call it has begun answering. The client resends the same request (the
// same seed, and expected_position on a session) and passes on only the tokens past the ones it
// already has. A turn is committed only when it completes, so the next replica runs it again from
// the same state, and produces the same tokens. Where the cut turn had been committed (the replica
// died between its commit and its last message) the server answers the resend with the turn's
// stored outcome (Usage.replayed), taken the same way. Session turns are sent all_or_nothing, so a
// turn whose stream broke while its replica lived on (nginx died) is rolled back, not kept in part.
#ifndef STEADY_CLIENTS_LOADTEST_RESUME_H_
#define STEADY_CLIENTS_LOADTEST_RESUME_H_

#include <cstdint>
#include <string>
#include <vector>

#include <google/protobuf/repeated_field.h>
#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace steady::loadtest {

// Whether a failed attempt is a cut a resume absorbs: the replica or the balancer went away
// (UNAVAILABLE: nginx's 502 for a replica that died before answering, a refused or reset
// connection; INTERNAL RST_STREAM: a stream nginx cut; CANCELLED: a stopping server's). Not a
// refusal that carries retry-after (the session's holder is alive: the caller should wait).
bool Resumable(grpc::StatusCode code, const std::string& message, bool has_retry_after);

// The token ids of a resumed attempt: the first ones repeat those received before the cut and are
// dropped; the ones past them are new.
class ResumedPrefix {
 public:
  explicit ResumedPrefix(const std::vector<int32_t>& received) : received_(received) {}
  // How many of `ids` (their last ones) are new. A repeated id that differs from the one received
  // sets status(): the text would no longer be one generation's.
  int Take(const google::protobuf::RepeatedField<int32_t>& ids);
  const absl::Status& status() const { return status_; }

 private:
  const std::vector<int32_t>& received_;
  const size_t skip_ = received_.size();  // fixed at the attempt's start
  size_t seen_ = 0;                       // ids of this attempt so far
  absl::Status status_;
};

}  // namespace steady::loadtest

#endif  // STEADY_CLIENTS_LOADTEST_RESUME_H_
