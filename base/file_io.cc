#include "base/file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace steady {
namespace {

bool WriteAll(const FileOps& ops, int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ops.write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    size -= size_t(n);
  }
  return true;
}

}  // namespace

const FileOps& RealFileOps() {
  static const FileOps ops{[](int fd, const void* data, size_t size) { return ::write(fd, data, size); },
                           [](int fd) { return ::fsync(fd); }};
  return ops;
}

std::string TempPathFor(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return absl::StrCat(path, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
}

absl::Status WriteFileSynced(const std::string& path, const std::vector<std::string_view>& pieces,
                             const FileOps& ops) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", path);
  auto fail = [&](const std::string& what, bool close_fd) {
    absl::Status s = ErrnoError(what, path);
    if (close_fd) ::close(fd);
    ::unlink(path.c_str());
    return s;
  };
  for (std::string_view piece : pieces) {
    if (!WriteAll(ops, fd, piece.data(), piece.size())) return fail("write failed", true);
  }
  if (ops.fsync(fd) != 0) return fail("fsync failed", true);
  if (::close(fd) != 0) return fail("close failed", false);
  return absl::OkStatus();
}

absl::Status SyncParentDirectory(const std::string& path, const FileOps& ops) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return ErrnoError("cannot open its directory to fsync it", path);
  const bool synced = ops.fsync(dir_fd) == 0;
  absl::Status s = synced ? absl::OkStatus() : ErrnoError("fsync of its directory failed", path);
  ::close(dir_fd);
  return s;
}

absl::Status WriteFileAtomic(const std::string& path, const std::vector<std::string_view>& pieces,
                             const FileOps& ops) {
  const std::string tmp = TempPathFor(path);
  if (absl::Status s = WriteFileSynced(tmp, pieces, ops); !s.ok()) return s;
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    absl::Status s = ErrnoError(absl::StrCat("rename to ", path, " failed"), tmp);
    ::unlink(tmp.c_str());
    return s;
  }
  // Make the rename itself durable.
  return WithContext(SyncParentDirectory(path, ops), "written, but not durable");
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read failed"));
  return ss.str();
}

absl::StatusOr<MappedFile> MapFileReadOnly(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot open", path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    absl::Status s = ErrnoError("cannot stat", path);
    ::close(fd);
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  MappedFile file;
  if (st.st_size > 0) {
    const size_t length = size_t(st.st_size);
    void* map = ::mmap(nullptr, length, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      absl::Status s = ErrnoError("cannot map", path);
      ::close(fd);
      return s;
    }
    file.storage = std::shared_ptr<const void>(map, [length](const void* p) { ::munmap(const_cast<void*>(p), length); });
    file.bytes = std::string_view(static_cast<const char*>(map), length);
  }
  ::close(fd);  // the mapping stays valid
  return file;
}

void DropMappedPages(const void* data, size_t bytes) {
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) / page * page;
  // On a private read-only file mapping this drops clean pages; nothing is lost.
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace steady
