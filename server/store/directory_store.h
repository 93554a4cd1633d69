// The embedded session store: one file per key in a directory (--session-dir), `<key>.snap`,
// written as a temp file, fsync, rename, and one fsync of the directory per group commit.
#ifndef STEADY_SERVER_STORE_DIRECTORY_STORE_H_
#define STEADY_SERVER_STORE_DIRECTORY_STORE_H_

#include <memory>
#include <string>

#include "base/file_io.h"
#include "server/store/session_store.h"

namespace steady {

class DirectoryStore : public SessionStore {
 public:
  // Creates `dir` if needed and removes the temp files of writes a crash interrupted (counted in
  // stats().dropped_at_open, each named on stderr). `ops`: the system calls, replaced by tests.
  static absl::StatusOr<std::unique_ptr<DirectoryStore>> Open(const std::string& dir,
                                                              const FileOps& ops = RealFileOps());

  std::vector<absl::Status> Put(const std::vector<BlobWrite>& writes) override;
  absl::StatusOr<std::string> Get(const std::string& key) const override;
  absl::Status Delete(const std::string& key) override;
  absl::StatusOr<std::vector<std::string>> List() const override;
  std::string Describe() const override { return "directory " + dir_; }

  std::string PathOf(const std::string& key) const { return dir_ + "/" + key + kSuffix; }
  static constexpr char kSuffix[] = ".snap";

 private:
  DirectoryStore(std::string dir, const FileOps& ops);

  const std::string dir_;
  FileOps ops_;  // the caller's, with every fsync timed into stats().sync_seconds
};

}  // namespace steady

#endif  // STEADY_SERVER_STORE_DIRECTORY_STORE_H_
