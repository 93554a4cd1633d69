#include "kernels/cpu/parallel.h"

#include <cblas.h>
#include <sched.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/check.h"

namespace steady::cpu {
namespace {

int CoresAvailable() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

// Workers wait for a generation number to move; a job is claimed task by task from an atomic
// counter. After a job a worker spins a little before sleeping: a decode step issues its GEMMs back
// to back, and a futex wake-up per GEMM would cost more than the small ones take.
class Pool {
 public:
  explicit Pool(int threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_.store(true);
      generation_.fetch_add(1);
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
  }
  int threads() const { return int(workers_.size()) + 1; }

  // The caller holds busy_.
  void Run(int tasks, const std::function<void(int)>& fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn_ = &fn;
      tasks_ = tasks;
      next_.store(0);
      pending_.store(int(workers_.size()));
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    Work();
    // Workers that have not finished claiming still touch fn_: wait for every one to check in.
    while (pending_.load(std::memory_order_acquire) > 0) Pause();
  }

  std::mutex busy_;  // one job at a time

 private:
  static void Pause() {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  void Work() {
    for (int t = next_.fetch_add(1); t < tasks_; t = next_.fetch_add(1)) (*fn_)(t);
  }
  void WorkerLoop() {
    uint64_t seen = 0;
    while (true) {
      uint64_t g = generation_.load(std::memory_order_acquire);
      for (int spin = 0; g == seen && spin < 4000; ++spin) {
        Pause();
        g = generation_.load(std::memory_order_acquire);
      }
      if (g == seen) {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return generation_.load() != seen; });
        g = generation_.load();
      }
      seen = g;
      if (stop_.load(std::memory_order_acquire)) return;
      Work();
      pending_.fetch_sub(1, std::memory_order_release);
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> generation_{0};  // moves once per job (and at shutdown)
  const std::function<void(int)>* fn_ = nullptr;
  int tasks_ = 0;
  std::atomic<int> next_{0};     // the next task to claim
  std::atomic<int> pending_{0};  // workers that have not finished the current job
};

std::mutex config_mu;
int configured = 0;           // guarded by config_mu; 0: every core
std::shared_ptr<Pool> pool;   // guarded by config_mu; built at first use
thread_local bool in_task = false;

std::shared_ptr<Pool> CurrentPool() {
  std::lock_guard<std::mutex> lock(config_mu);
  const int want = configured > 0 ? configured : CoresAvailable();
  if (!pool || pool->threads() != want) pool = std::make_shared<Pool>(want);
  return pool;
}

}  // namespace

void SetComputeThreads(int n) {
  STEADY_CHECK(n >= 0);
  std::lock_guard<std::mutex> lock(config_mu);
  configured = n;
  openblas_set_num_threads(n > 0 ? n : CoresAvailable());  // prefill's large GEMMs
}

int ComputeThreads() {
  std::lock_guard<std::mutex> lock(config_mu);
  return configured > 0 ? configured : CoresAvailable();
}

void ParallelFor(int tasks, const std::function<void(int)>& fn) {
  if (tasks <= 0) return;
  auto serial = [&] {
    for (int t = 0; t < tasks; ++t) fn(t);
  };
  if (tasks == 1 || in_task) return serial();
  std::shared_ptr<Pool> p = CurrentPool();
  std::unique_lock<std::mutex> busy(p->busy_, std::try_to_lock);
  if (p->threads() == 1 || !busy.owns_lock()) return serial();
  // A ParallelFor from inside a task (on any thread) finds in_task set and runs serially.
  p->Run(tasks, [&](int t) {
    in_task = true;
    fn(t);
    in_task = false;
  });
}

void ParallelRange(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  // Two pieces a thread, so that a thread that wakes late leaves its share to the others.
  const int64_t pieces = std::clamp<int64_t>(n / std::max<int64_t>(grain, 1), 1, 2 * ComputeThreads());
  if (pieces == 1) return fn(0, n);
  const int64_t size = (n + pieces - 1) / pieces;
  ParallelFor(int((n + size - 1) / size), [&](int t) { fn(t * size, std::min(n, (t + 1) * size)); });
}

}  // namespace steady::cpu
