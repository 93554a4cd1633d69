// A process-wide pool of compute threads for the CPU kernels. Work is split so that every output
// element is computed by the same arithmetic whatever the thread count: results are bit-identical
// with 1 thread or many (tests/kernels/cpu_kernels_test.cc checks it).
#ifndef STEADY_KERNELS_CPU_PARALLEL_H_
#define STEADY_KERNELS_CPU_PARALLEL_H_

#include <cstdint>
#include <functional>

namespace steady::cpu {

// How many threads the CPU kernels use, counting the caller's: n >= 1, or 0 for every core the
// process may run on (the default). Takes effect at the next ParallelFor; OpenBLAS (prefill's large
// GEMMs) is set to the same count.
void SetComputeThreads(int n);
int ComputeThreads();

// Below about this many multiply-adds (a few microseconds) a kernel's call costs more to hand to the
// pool than it saves: the kernels run such calls on the calling thread alone.
inline constexpr int64_t kMinParallelWork = int64_t(1) << 16;

// Runs fn(task) for every task in [0, tasks) and returns when all are done; the calling thread takes
// tasks too. Tasks must be independent. A call made while the pool is busy (another thread's call,
// or a call from inside a task) runs its tasks on the calling thread alone.
void ParallelFor(int tasks, const std::function<void(int)>& fn);

// fn(begin, end) over [0, n) in pieces of at least `grain` items, through ParallelFor where there are
// two pieces or more: for work whose every item (an element, a row) is computed on its own, so that
// every split gives the same results. A decode step's elementwise and per-row work (norms, SwiGLU,
// the activations' quantization) otherwise runs on the calling thread while the others wait.
void ParallelRange(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);
// The grain of the step's elementwise and per-row loops (elements; a row counts its length): some
// microseconds of them, against a few for handing a piece to the pool.
inline constexpr int64_t kElementGrain = 4096;

}  // namespace steady::cpu

#endif  // STEADY_KERNELS_CPU_PARALLEL_H_
