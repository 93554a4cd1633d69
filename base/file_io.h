// Whole-file reads and atomic writes: the one place that knows how to make a write durable.
#ifndef STEADY_BASE_FILE_IO_H_
#define STEADY_BASE_FILE_IO_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace steady {

// Writes `pieces` (concatenated) to `path` atomically: a temp file in the same directory, fsync,
// rename, fsync of the directory. On any error the temp file is removed and an existing file at
// `path` is untouched. Errors name the path and the failing step.
absl::Status WriteFileAtomic(const std::string& path, const std::vector<std::string_view>& pieces);
inline absl::Status WriteFileAtomic(const std::string& path, std::string_view data) {
  return WriteFileAtomic(path, std::vector<std::string_view>{data});
}

// The whole file; NOT_FOUND when it cannot be opened, DATA_LOSS on a read error.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

}  // namespace steady

#endif  // STEADY_BASE_FILE_IO_H_
