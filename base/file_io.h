// Whole-file reads and durable writes: the one place that knows how to make a write durable.
#ifndef STEADY_BASE_FILE_IO_H_
#define STEADY_BASE_FILE_IO_H_

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace steady {

// The system calls a durable write makes. Tests replace them to inject faults (a full disk, a failed
// fsync); everything else uses the default, the real calls.
struct FileOps {
  std::function<ssize_t(int fd, const void* data, size_t size)> write;  // as ::write
  std::function<int(int fd)> fsync;                                     // as ::fsync
};
const FileOps& RealFileOps();

// Creates (or truncates) `path`, writes `pieces` (concatenated) and fsyncs it. On any error the
// file is removed. Errors name the path and the failing step: RESOURCE_EXHAUSTED for a full disk
// (ENOSPC, EDQUOT), INTERNAL for other I/O errors.
absl::Status WriteFileSynced(const std::string& path, const std::vector<std::string_view>& pieces,
                             const FileOps& ops = RealFileOps());
// fsync of the directory that holds `path`: makes a rename or an unlink of `path` durable.
absl::Status SyncParentDirectory(const std::string& path, const FileOps& ops = RealFileOps());
// A temp file's name beside `path`: "<path>.tmp.<pid>.<n>", unique within the process.
std::string TempPathFor(const std::string& path);

// Writes `pieces` (concatenated) to `path` atomically and durably: a temp file in the same directory
// (WriteFileSynced), rename, fsync of the directory. On an error before the rename the temp file is
// removed and an existing file at `path` is untouched.
absl::Status WriteFileAtomic(const std::string& path, const std::vector<std::string_view>& pieces,
                             const FileOps& ops = RealFileOps());
inline absl::Status WriteFileAtomic(const std::string& path, std::string_view data) {
  return WriteFileAtomic(path, std::vector<std::string_view>{data});
}

// The whole file; NOT_FOUND when it cannot be opened, DATA_LOSS on a read error.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

// A regular file mapped read-only and private: the pages are the page cache's, shared with other
// processes mapping the same file. `bytes` stays valid while `storage` (which unmaps) lives; an empty
// file has no mapping. Errors name the path: cannot open, cannot stat, not a regular file, cannot map.
struct MappedFile {
  std::shared_ptr<const void> storage;
  std::string_view bytes;
};
absl::StatusOr<MappedFile> MapFileReadOnly(const std::string& path);
// Tells the kernel that the whole pages inside [data, data + bytes) of such a mapping will not be
// read soon (after a copy was made of them): they leave the process's resident memory and come back
// from the file if touched again (MADV_DONTNEED; pages the range only shares with its neighbours
// stay). Only for a read-only file mapping: on memory of the process's own it would zero the pages.
void DropMappedPages(const void* data, size_t bytes);

}  // namespace steady

#endif  // STEADY_BASE_FILE_IO_H_
