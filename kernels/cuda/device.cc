#include "kernels/cuda/device.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "base/check.h"
#include "kernels/cuda/cuda_check.h"

namespace steady::cuda {

bool CudaDeviceAvailable() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return false;
  }
  return count > 0;
}

namespace {

std::atomic<bool>& SyncChecksFlag() {
  static std::atomic<bool> on = [] {
    const char* env = std::getenv("STEADY_CUDA_SYNC_CHECK");
    return env != nullptr && std::strcmp(env, "1") == 0;
  }();
  return on;
}

}  // namespace

void SetSyncLaunchChecks(bool on) { SyncChecksFlag() = on; }
bool SyncLaunchChecks() { return SyncChecksFlag(); }

void CheckLaunch(const char* kernel, cudaStream_t stream, const char* file, int line) {
  cudaError_t err = cudaGetLastError();
  const char* when = "at launch";
  if (err == cudaSuccess && SyncLaunchChecks()) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    err = cudaStreamIsCapturing(stream, &capture);
    if (err == cudaSuccess && capture == cudaStreamCaptureStatusNone) {
      err = cudaStreamSynchronize(stream);
      when = "while it ran (synchronous launch check)";
    }
  }
  if (err != cudaSuccess) {
    std::fprintf(stderr, "%s:%d: CUDA error %s (%s) in kernel %s, %s\n", file, line, cudaGetErrorName(err),
                 cudaGetErrorString(err), kernel, when);
    std::abort();
  }
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) STEADY_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
}

DeviceBuffer::~DeviceBuffer() { Release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    Release();
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::Release() {
  if (ptr_ != nullptr) STEADY_CUDA_CHECK(cudaFree(ptr_));
  ptr_ = nullptr;
  bytes_ = 0;
}

// The legacy default stream does not order with CreateStream's non-blocking streams, and a
// host-to-device cudaMemcpy from pageable memory (or a cudaMemset) may return before the device
// has the data: hence the device-wide synchronizations around these copies.
void DeviceBuffer::CopyFromHost(const void* src, size_t bytes) {
  STEADY_CHECK(bytes <= bytes_);
  if (bytes == 0) return;
  STEADY_CUDA_CHECK(cudaDeviceSynchronize());
  STEADY_CUDA_CHECK(cudaMemcpy(ptr_, src, bytes, cudaMemcpyHostToDevice));
  STEADY_CUDA_CHECK(cudaDeviceSynchronize());
}

void DeviceBuffer::CopyToHost(void* dst, size_t bytes) const {
  STEADY_CHECK(bytes <= bytes_);
  if (bytes == 0) return;
  STEADY_CUDA_CHECK(cudaDeviceSynchronize());
  STEADY_CUDA_CHECK(cudaMemcpy(dst, ptr_, bytes, cudaMemcpyDeviceToHost));
}

void DeviceBuffer::Fill(int value) {
  if (bytes_ == 0) return;
  STEADY_CUDA_CHECK(cudaDeviceSynchronize());
  STEADY_CUDA_CHECK(cudaMemset(ptr_, value, bytes_));
  STEADY_CUDA_CHECK(cudaDeviceSynchronize());
}

cudaStream_t CreateStream() {
  cudaStream_t s = nullptr;
  STEADY_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

void DestroyStream(cudaStream_t s) {
  if (s != nullptr) STEADY_CUDA_CHECK(cudaStreamDestroy(s));
}

void SynchronizeStream(cudaStream_t s) { STEADY_CUDA_CHECK(cudaStreamSynchronize(s)); }

void CopyToDevice(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  STEADY_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
  STEADY_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void CopyToHost(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  STEADY_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream));
  STEADY_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void CopyOnDevice(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes > 0) STEADY_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
}

double BestCopySeconds(void* dst, const void* src, size_t bytes, int reps, cudaStream_t stream) {
  cudaEvent_t start, stop;
  STEADY_CUDA_CHECK(cudaEventCreate(&start));
  STEADY_CUDA_CHECK(cudaEventCreate(&stop));
  CopyOnDevice(dst, src, bytes, stream);  // warm-up
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    STEADY_CUDA_CHECK(cudaEventRecord(start, stream));
    CopyOnDevice(dst, src, bytes, stream);
    STEADY_CUDA_CHECK(cudaEventRecord(stop, stream));
    STEADY_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    STEADY_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    best = std::min(best, double(ms) / 1e3);
  }
  STEADY_CUDA_CHECK(cudaEventDestroy(start));
  STEADY_CUDA_CHECK(cudaEventDestroy(stop));
  return best;
}

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) STEADY_CUDA_CHECK(cudaHostAlloc(&ptr_, bytes, cudaHostAllocDefault));
}

PinnedBuffer::~PinnedBuffer() {
  if (ptr_ != nullptr) STEADY_CUDA_CHECK(cudaFreeHost(ptr_));
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_ != nullptr) STEADY_CUDA_CHECK(cudaFreeHost(ptr_));
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void CopyToDeviceAsync(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes > 0) STEADY_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
}

Graph::~Graph() {
  if (exec_ != nullptr) STEADY_CUDA_CHECK(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_)));
}

Graph::Graph(Graph&& o) noexcept : exec_(std::exchange(o.exec_, nullptr)) {}

Graph& Graph::operator=(Graph&& o) noexcept {
  if (this != &o) {
    if (exec_ != nullptr) STEADY_CUDA_CHECK(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_)));
    exec_ = std::exchange(o.exec_, nullptr);
  }
  return *this;
}

Graph Graph::Capture(cudaStream_t stream, const std::function<void()>& enqueue) {
  cudaGraph_t graph = nullptr;
  STEADY_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  enqueue();
  STEADY_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  STEADY_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  STEADY_CUDA_CHECK(cudaGraphDestroy(graph));
  Graph g;
  g.exec_ = exec;
  return g;
}

void Graph::Launch(cudaStream_t stream) const {
  STEADY_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), stream));
}

double MedianSeconds(const std::function<void()>& fn, int reps, cudaStream_t stream) {
  cudaEvent_t start, stop;
  STEADY_CUDA_CHECK(cudaEventCreate(&start));
  STEADY_CUDA_CHECK(cudaEventCreate(&stop));
  fn();  // warm-up
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    STEADY_CUDA_CHECK(cudaEventRecord(start, stream));
    fn();
    STEADY_CUDA_CHECK(cudaEventRecord(stop, stream));
    STEADY_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    STEADY_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(double(ms) / 1e3);
  }
  STEADY_CUDA_CHECK(cudaEventDestroy(start));
  STEADY_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

std::string DeviceName() {
  int device = 0;
  STEADY_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  STEADY_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

}  // namespace steady::cuda
