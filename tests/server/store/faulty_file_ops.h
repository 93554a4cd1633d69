// The store's system calls (base/file_io.h FileOps) with switches that make them fail the way a full
// disk (ENOSPC) or a dying disk (EIO on fsync) does; counts fsyncs.
#ifndef STEADY_TESTS_SERVER_STORE_FAULTY_FILE_OPS_H_
#define STEADY_TESTS_SERVER_STORE_FAULTY_FILE_OPS_H_

#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "base/file_io.h"

namespace steady::testing {

struct FaultyFileOps {
  std::atomic<bool> disk_full{false};
  std::atomic<bool> fsync_fails{false};
  std::atomic<int> fsyncs{0};

  // Valid while this object lives.
  FileOps Ops() {
    return {[this](int fd, const void* data, size_t size) -> ssize_t {
              if (disk_full) {
                errno = ENOSPC;
                return -1;
              }
              return ::write(fd, data, size);
            },
            [this](int fd) {
              ++fsyncs;
              if (fsync_fails) {
                errno = EIO;
                return -1;
              }
              return ::fsync(fd);
            }};
  }
};

}  // namespace steady::testing

#endif  // STEADY_TESTS_SERVER_STORE_FAULTY_FILE_OPS_H_
