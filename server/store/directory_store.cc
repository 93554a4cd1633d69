#include "server/store/directory_store.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace steady {

DirectoryStore::DirectoryStore(std::string dir, const FileOps& ops) : dir_(std::move(dir)), ops_(ops) {
  ops_.fsync = [this, fsync = ops.fsync](int fd) {
    const auto start = std::chrono::steady_clock::now();
    const int rc = fsync(fd);
    stats_.sync_seconds.Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return rc;
  };
}

absl::StatusOr<std::unique_ptr<DirectoryStore>> DirectoryStore::Open(const std::string& dir, const FileOps& ops) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool created = fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("session directory ", dir, ": cannot create it: ", ec.message()));
  // A new directory's own entry must survive a power loss too.
  if (created) {
    fs::path path = fs::path(dir).lexically_normal();
    if (!path.has_filename()) path = path.parent_path();  // "a/b/" names b
    if (absl::Status st = SyncParentDirectory(path.string(), ops); !st.ok()) return st;
  }
  if (!fs::is_directory(dir, ec)) return absl::InvalidArgumentError(absl::StrCat("session directory ", dir, ": not a directory"));
  std::unique_ptr<DirectoryStore> store(new DirectoryStore(dir, ops));
  // A temp file is a write that never reached its rename: the key still holds its previous blob.
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.find(std::string(kSuffix) + ".tmp.") == std::string::npos) continue;
    std::fprintf(stderr, "steady: %s: removing %s, a write a crash interrupted (the session keeps its previous state)\n",
                 dir.c_str(), name.c_str());
    fs::remove(e.path(), ec);
    ++store->stats_.dropped_at_open;
  }
  if (ec) return absl::InternalError(absl::StrCat("session directory ", dir, ": cannot list it: ", ec.message()));
  return store;
}

std::vector<absl::Status> DirectoryStore::Put(const std::vector<BlobWrite>& writes) {
  std::vector<absl::Status> statuses(writes.size());
  std::vector<std::string> temps(writes.size());
  // Every blob to a synced temp file first; only those that made it are renamed into place.
  for (size_t i = 0; i < writes.size(); ++i) {
    temps[i] = TempPathFor(PathOf(writes[i].key));
    statuses[i] = WriteFileSynced(temps[i], {writes[i].blob}, ops_);
  }
  bool renamed = false;
  for (size_t i = 0; i < writes.size(); ++i) {
    if (!statuses[i].ok()) continue;
    if (::rename(temps[i].c_str(), PathOf(writes[i].key).c_str()) != 0) {
      statuses[i] = ErrnoError(absl::StrCat("rename to ", PathOf(writes[i].key), " failed"), temps[i]);
      ::unlink(temps[i].c_str());
      continue;
    }
    renamed = true;
  }
  // One fsync of the directory makes every rename durable.
  if (renamed) {
    const absl::Status dir_synced = SyncParentDirectory(PathOf(writes[0].key), ops_);
    for (absl::Status& s : statuses) {
      if (s.ok() && !dir_synced.ok()) s = WithContext(dir_synced, "written, but not durable");
    }
  }
  CountWrites(writes, statuses);
  return statuses;
}

absl::StatusOr<std::string> DirectoryStore::Get(const std::string& key) const { return ReadWholeFile(PathOf(key)); }

absl::Status DirectoryStore::Delete(const std::string& key) {
  const std::string path = PathOf(key);
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoError("cannot delete", path);
  }
  return SyncParentDirectory(path, ops_);
}

absl::StatusOr<std::vector<std::string>> DirectoryStore::List() const {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::string> keys;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (absl::EndsWith(name, kSuffix)) keys.push_back(name.substr(0, name.size() - std::string(kSuffix).size()));
  }
  if (ec) return absl::InternalError(absl::StrCat("session directory ", dir_, ": cannot list it: ", ec.message()));
  std::sort(keys.begin(), keys.end());
  return keys;
}

}  // namespace steady
