// CUDA device discovery and a RAII device buffer. Plain C++: no CUDA headers needed by callers.
#ifndef STEADY_KERNELS_CUDA_DEVICE_H_
#define STEADY_KERNELS_CUDA_DEVICE_H_

#include <cstddef>
#include <functional>
#include <string>

struct CUstream_st;
typedef CUstream_st* cudaStream_t;  // the same declaration as cuda_runtime_api.h

namespace steady::cuda {

// True when a CUDA driver is present and reports at least one device. Never aborts: no driver, no
// device or an insufficient driver all read as false (the error is cleared).
bool CudaDeviceAvailable();

// Synchronous launch checks (kernels/cuda/cuda_check.h, STEADY_CUDA_CHECK_LAUNCH): after every kernel
// launch outside a graph capture, wait for the stream and abort naming the kernel if it faulted.
// Off by default (a serving step would lose its overlap); on when the environment has
// STEADY_CUDA_SYNC_CHECK=1, and the GPU tests turn it on. Process-wide.
void SetSyncLaunchChecks(bool on);
bool SyncLaunchChecks();

// Owns `bytes` of device memory (cudaMalloc / cudaFree). Move-only. Copies are synchronous and
// checked (abort with file:line on failure).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }

  // Host <-> device copies of `bytes` (at most bytes()), starting at the buffer's start. These and
  // Fill synchronize the whole device before and after (never inside a graph capture): for tests
  // and setup, ordered with every stream's work.
  void CopyFromHost(const void* src, size_t bytes);
  void CopyToHost(void* dst, size_t bytes) const;
  // Sets every byte to `value` (e.g. 0xFF poisons fp32 and bf16 with NaN).
  void Fill(int value);

 private:
  void Release();
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Stream helpers for callers without CUDA headers.
cudaStream_t CreateStream();
void DestroyStream(cudaStream_t s);
void SynchronizeStream(cudaStream_t s);

// Copies ordered on `stream` after the work queued there; they return when the copy is done (the
// stream is synchronized), so `src`/`dst` host memory may be reused at once. (DeviceBuffer's own
// copies use the legacy default stream, which does not order with the non-blocking streams of
// CreateStream.)
void CopyToDevice(void* dst, const void* src, size_t bytes, cudaStream_t stream);
void CopyToHost(void* dst, const void* src, size_t bytes, cudaStream_t stream);
// Device-to-device, queued on `stream` (asynchronous).
void CopyOnDevice(void* dst, const void* src, size_t bytes, cudaStream_t stream);
// Best time in seconds of `reps` device-to-device copies of `bytes`, timed with CUDA events.
double BestCopySeconds(void* dst, const void* src, size_t bytes, int reps, cudaStream_t stream);
// Host memory the device copies from asynchronously (cudaHostAlloc): what a memcpy inside a CUDA
// graph reads. Move-only.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& o) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  char* data() const { return static_cast<char*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Queues a host-to-device copy on `stream` without waiting (src must stay valid until the stream
// reaches it: pinned memory for graphs).
void CopyToDeviceAsync(void* dst, const void* src, size_t bytes, cudaStream_t stream);

// The work `enqueue` queues on a stream, captured once and replayed with one launch (CUDA graphs):
// no per-kernel launch cost. Replays see the same pointers and launch shapes as the capture.
class Graph {
 public:
  Graph() = default;
  ~Graph();
  Graph(Graph&& o) noexcept;
  Graph& operator=(Graph&& o) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  // Captures (nothing runs) and instantiates.
  static Graph Capture(cudaStream_t stream, const std::function<void()>& enqueue);
  void Launch(cudaStream_t stream) const;
  bool empty() const { return exec_ == nullptr; }

 private:
  void* exec_ = nullptr;  // cudaGraphExec_t
};

// Median seconds of `fn` (which enqueues work on `stream`) over `reps` runs after one warm-up,
// each timed with CUDA events.
double MedianSeconds(const std::function<void()>& fn, int reps, cudaStream_t stream);
// The current device's name ("NVIDIA H100 80GB HBM3").
std::string DeviceName();

}  // namespace steady::cuda

#endif  // STEADY_KERNELS_CUDA_DEVICE_H_
