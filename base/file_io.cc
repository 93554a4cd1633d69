#include "base/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace steady {
namespace {

bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
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

absl::Status WriteFileAtomic(const std::string& path, const std::vector<std::string_view>& pieces) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", tmp);
  auto fail = [&](const std::string& what, bool close_fd) {
    absl::Status s = ErrnoError(what, tmp);
    if (close_fd) ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  };
  for (std::string_view piece : pieces) {
    if (!WriteAll(fd, piece.data(), piece.size())) return fail("write failed", true);
  }
  if (::fsync(fd) != 0) return fail("fsync failed", true);
  if (::close(fd) != 0) return fail("close failed", false);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail(absl::StrCat("rename to ", path, " failed"), false);
  // Make the rename itself durable.
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return ErrnoError("written, but cannot open its directory to fsync it", path);
  const bool synced = ::fsync(dir_fd) == 0;
  ::close(dir_fd);
  if (!synced) return ErrnoError("written, but fsync of its directory failed", path);
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read failed"));
  return ss.str();
}

}  // namespace steady
