// The session store's write path (server/store/directory_store.h), Google Benchmark: what turn durability
// pays per group commit on this machine's disk, and what a token journal would pay instead.
//
//   BM_StorePut/BYTES        one snapshot of BYTES per commit: temp file, write, fsync, rename,
//                            directory fsync (the write-through design; docs/durability.md)
//   BM_StorePutGroup/N       N snapshots of 333 KB in one commit (N turns finishing in one step)
//   BM_JournalAppend/BYTES   an append of BYTES to one open file and fdatasync: the commit of a
//                            write-ahead journal of token ids (the alternative design)
// Sizes: 37 KB (tiny taylor P=2), 333 KB (the demo's taylor P=3), 4.3 MB and 17 MB (a llama1b-shaped
// taylor P=2 and slay session, `steady info --preset llama1b`). The directory is $TMPDIR.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "server/store/directory_store.h"

namespace steady {
namespace {

std::string BenchDir(const std::string& name) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/steady_store_bench_" + std::to_string(::getpid()) + "_" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

void BM_StorePut(benchmark::State& state) {
  const std::string dir = BenchDir("put");
  auto store = DirectoryStore::Open(dir);
  if (!store.ok()) return state.SkipWithError(std::string(store.status().message()).c_str());
  const std::string blob(size_t(state.range(0)), 'x');
  for (auto _ : state) {
    if (!(*store)->Put({{"session", blob}})[0].ok()) return state.SkipWithError("put failed");
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * state.range(0));
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_StorePut)->Arg(37000)->Arg(332928)->Arg(4326400)->Arg(17039360)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_StorePutGroup(benchmark::State& state) {
  const std::string dir = BenchDir("group");
  auto store = DirectoryStore::Open(dir);
  if (!store.ok()) return state.SkipWithError(std::string(store.status().message()).c_str());
  std::vector<BlobWrite> writes;
  for (int i = 0; i < state.range(0); ++i) writes.push_back({"s" + std::to_string(i), std::string(332928, 'x')});
  for (auto _ : state) {
    for (const absl::Status& s : (*store)->Put(writes)) {
      if (!s.ok()) return state.SkipWithError("put failed");
    }
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * state.range(0));
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_StorePutGroup)->Arg(1)->Arg(8)->Arg(32)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_JournalAppend(benchmark::State& state) {
  const std::string dir = BenchDir("journal");
  std::filesystem::create_directories(dir);
  const int fd = ::open((dir + "/journal").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return state.SkipWithError("cannot create the journal");
  const std::string record(size_t(state.range(0)), 'x');
  for (auto _ : state) {
    if (::write(fd, record.data(), record.size()) != ssize_t(record.size()) || ::fdatasync(fd) != 0) {
      return state.SkipWithError("append failed");
    }
  }
  ::close(fd);
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_JournalAppend)->Arg(352)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace steady

BENCHMARK_MAIN();
