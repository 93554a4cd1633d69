#include "server/store/session_store.h"

namespace steady {

absl::StatusOr<std::string> SessionStore::Head(const std::string& key, size_t bytes) const {
  absl::StatusOr<std::string> blob = Get(key);
  if (blob.ok() && blob->size() > bytes) blob->resize(bytes);
  return blob;
}

void SessionStore::CountWrites(const std::vector<BlobWrite>& writes, const std::vector<absl::Status>& statuses) {
  for (size_t i = 0; i < writes.size(); ++i) {
    if (statuses[i].ok()) {
      stats_.bytes_written += int64_t(writes[i].blob.size());
      ++stats_.blobs_written;
    } else {
      ++stats_.write_errors;
    }
  }
}

}  // namespace steady
