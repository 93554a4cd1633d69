#include "server/session_store.h"

namespace steady {

absl::StatusOr<std::string> SessionStore::Head(const std::string& key, size_t bytes) const {
  absl::StatusOr<std::string> blob = Get(key);
  if (blob.ok() && blob->size() > bytes) blob->resize(bytes);
  return blob;
}

}  // namespace steady
