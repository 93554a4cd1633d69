// The directory session store against its contract (server/store/session_store.h), with faults injected
// through its system calls: a full disk, a failed fsync, a crash that left temp files.
#include "server/store/directory_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/server/store/faulty_file_ops.h"
#include "tests/testutil.h"

namespace steady {
namespace {

using Faults = testing::FaultyFileOps;

std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::unique_ptr<DirectoryStore> OpenStore(const std::string& dir, const FileOps& ops = RealFileOps()) {
  auto store = DirectoryStore::Open(dir, ops);
  EXPECT_TRUE(store.ok()) << store.status();
  return *std::move(store);
}

TEST(DirectoryStoreTest, PutGetListDelete) {
  const std::string dir = testing::MakeTempDir("store_basic");
  auto store = OpenStore(dir + "/created");  // made when missing
  EXPECT_EQ(store->Get("a").status().code(), absl::StatusCode::kNotFound);
  const std::vector<absl::Status> put = store->Put({{"b", "second"}, {"a", std::string("fi\0rst", 6)}});
  ASSERT_EQ(put.size(), 2u);
  EXPECT_TRUE(put[0].ok() && put[1].ok()) << put[0] << put[1];
  EXPECT_EQ(*store->Get("a"), std::string("fi\0rst", 6));
  EXPECT_EQ(*store->List(), (std::vector<std::string>{"a", "b"}));
  ASSERT_TRUE(store->Put({{"a", "replaced"}})[0].ok());
  EXPECT_EQ(*store->Get("a"), "replaced");
  EXPECT_TRUE(store->Delete("a").ok());
  EXPECT_TRUE(store->Delete("a").ok()) << "deleting a missing key is OK";
  EXPECT_EQ(*store->List(), (std::vector<std::string>{"b"}));
  EXPECT_EQ(store->stats().blobs_written.load(), 3);
  EXPECT_EQ(store->stats().bytes_written.load(), 6 + 6 + 8);
  EXPECT_EQ(FilesIn(dir + "/created"), (std::vector<std::string>{"b.snap"}));
}

TEST(DirectoryStoreTest, OneGroupCommitFsyncsEachBlobAndTheDirectoryOnce) {
  Faults faults;
  auto store = OpenStore(testing::MakeTempDir("store_group"), faults.Ops());
  std::vector<BlobWrite> writes;
  for (int i = 0; i < 5; ++i) writes.push_back({"s" + std::to_string(i), std::string(1000, char('a' + i))});
  for (const absl::Status& s : store->Put(writes)) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(faults.fsyncs.load(), 5 + 1);
  std::string histogram;
  store->stats().sync_seconds.Render("h", &histogram);
  EXPECT_NE(histogram.find("h_count 6"), std::string::npos) << histogram;
}

TEST(DirectoryStoreTest, AFullDiskKeepsTheOldBlobAndLeavesNoTempFile) {
  Faults faults;
  const std::string dir = testing::MakeTempDir("store_full");
  auto store = OpenStore(dir, faults.Ops());
  ASSERT_TRUE(store->Put({{"a", "durable"}, {"b", "other"}})[0].ok());
  faults.disk_full = true;
  const std::vector<absl::Status> put = store->Put({{"a", "lost"}, {"c", "new"}});
  for (const absl::Status& s : put) {
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_NE(std::string(s.message()).find("No space left on device"), std::string::npos) << s;
  }
  EXPECT_EQ(*store->Get("a"), "durable");
  EXPECT_EQ(store->Get("c").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(FilesIn(dir), (std::vector<std::string>{"a.snap", "b.snap"}));
  EXPECT_EQ(store->stats().write_errors.load(), 2);
  faults.disk_full = false;  // space returns
  ASSERT_TRUE(store->Put({{"a", "again"}})[0].ok());
  EXPECT_EQ(*store->Get("a"), "again");
}

TEST(DirectoryStoreTest, AFailedFsyncIsNotDurable) {
  Faults faults;
  const std::string dir = testing::MakeTempDir("store_fsync");
  auto store = OpenStore(dir, faults.Ops());
  ASSERT_TRUE(store->Put({{"a", "durable"}})[0].ok());
  faults.fsync_fails = true;
  const absl::Status put = store->Put({{"a", "maybe"}})[0];
  EXPECT_EQ(put.code(), absl::StatusCode::kInternal) << put;
  EXPECT_NE(std::string(put.message()).find("fsync failed"), std::string::npos) << put;
  EXPECT_EQ(*store->Get("a"), "durable") << "a blob whose fsync failed must not replace the old one";
  EXPECT_EQ(FilesIn(dir), std::vector<std::string>{"a.snap"});
  // A delete whose directory fsync fails is reported too.
  EXPECT_FALSE(store->Delete("a").ok());
}

TEST(DirectoryStoreTest, OpeningRemovesWritesACrashInterrupted) {
  const std::string dir = testing::MakeTempDir("store_crash");
  {
    auto store = OpenStore(dir);
    ASSERT_TRUE(store->Put({{"a", "durable"}})[0].ok());
  }
  // What a kill -9 in the middle of a Put leaves: a temp file beside the key's blob.
  std::ofstream(dir + "/a.snap.tmp.4242.7") << "half a bl";
  std::ofstream(dir + "/b.snap.tmp.4242.8") << "";
  std::ofstream(dir + "/unrelated.txt") << "not ours";
  auto store = OpenStore(dir);
  EXPECT_EQ(store->stats().dropped_at_open.load(), 2);
  EXPECT_EQ(FilesIn(dir), (std::vector<std::string>{"a.snap", "unrelated.txt"}));
  EXPECT_EQ(*store->Get("a"), "durable");
  EXPECT_EQ(*store->List(), std::vector<std::string>{"a"});
}

TEST(DirectoryStoreTest, OpeningAFileIsRefused) {
  const std::string dir = testing::MakeTempDir("store_file");
  std::ofstream(dir + "/plain") << "x";
  auto store = DirectoryStore::Open(dir + "/plain");
  EXPECT_FALSE(store.ok());
}

}  // namespace
}  // namespace steady
