#include "clients/loadtest/resume.h"

#include "absl/strings/str_cat.h"

namespace steady::loadtest {

bool Resumable(grpc::StatusCode code, const std::string& message, bool has_retry_after) {
  if (has_retry_after) return false;
  return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::CANCELLED ||
         (code == grpc::StatusCode::INTERNAL && message.find("RST_STREAM") != std::string::npos);
}

int ResumedPrefix::Take(const google::protobuf::RepeatedField<int32_t>& ids) {
  int fresh = 0;
  for (int32_t id : ids) {
    if (seen_ >= skip_) {
      ++fresh;
    } else if (status_.ok() && id != received_[seen_]) {
      status_ = absl::DataLossError(absl::StrCat("a resumed stream's token ", seen_, " is ", id, ", not ", received_[seen_],
                                                 " as before the cut: the server is not deterministic"));
    }
    ++seen_;
  }
  return status_.ok() ? fresh : 0;
}

}  // namespace steady::loadtest
