// Where a model's forward steps run. The CPU backend is Model::Forward over a host StatePool (the
// reference); the CUDA backend (model/backend/backend_cuda.cc, built when nvcc is found) holds the weights
// in bf16 and every slot's state in device memory, in the same per-slot layout as StatePool's fixed
// part, so a slot's floats can move between the two unchanged (ReadSlot / WriteSlot).
// Tools pick one with --device cpu|cuda|auto (MakeBackend).
#ifndef STEADY_MODEL_BACKEND_BACKEND_H_
#define STEADY_MODEL_BACKEND_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/ops.h"
#include "model/decoder/cpu_weights.h"
#include "model/decoder/model.h"

namespace steady {

struct BackendOptions {
  int slots = 1;
  // CPU: threads for the kernels (kernels/cpu/parallel.h, process-wide), counting the engine's own;
  // 0: every core the process may use.
  int cpu_threads = 0;
  // CPU: the projection matrices as the model stores them (auto: bf16 and quantized ones on the
  // dot-product kernels; stored: every one on the widening kernels), or converted to fp32 (the
  // reference), bf16, q8, q4 or q4k (model/decoder/cpu_weights.h). The CUDA backend holds bf16
  // weights whatever this says (cuda_bf16).
  CpuWeights cpu_weights = CpuWeights::kAuto;
  // CPU: which GEMM kernels (AMX for bf16 where the CPU has it by default; model/decoder/cpu_weights.h).
  CpuGemm cpu_gemm = CpuGemm::kAuto;
  // Tokens of context a slot can hold where the state grows (softmax's KV cache): the CUDA backend
  // preallocates this much per slot and layer; the CPU backend grows without a bound.
  int64_t max_context = 4096;
  // CUDA: weights in bf16 and GEMM inputs rounded to bf16 (fp32 accumulation), or everything fp32
  // (cublasSgemm, no TF32): the plain reference the bf16 path and the kernels are tested against.
  bool cuda_bf16 = true;
  // CUDA: decode steps (one token per segment, up to 512 segments) replayed as CUDA graphs, one per
  // power-of-two batch bucket, padded with rows in a scratch slot.
  bool cuda_graphs = true;
  // CUDA: prefill segments of 16+ tokens of taylor and slay layers in the chunked GEMM form (else
  // token by token through the decode kernel, the reference it is tested against).
  bool cuda_chunked_prefill = true;
  // CUDA: softmax's KV cache in bf16 (half the bytes a decode step reads, as serving stacks keep it;
  // keys and values rounded to bf16 when cached, attention arithmetic in fp32), or fp32. Only with
  // cuda_bf16: the fp32 reference keeps an fp32 cache.
  bool cuda_kv_bf16 = true;
};

// A slot's whole state outside a backend: every layer's fixed state (StatePool's layout), each
// layer's growing state (softmax: the KV cache rows [position, kv_heads, head_dim + value_dim], as
// StatePool::Growing holds them; empty for constant-state layers) and the position.
struct SlotState {
  int64_t position = 0;
  std::vector<float> fixed;
  std::vector<std::vector<float>> growing;  // [layers]
};

// How one output row's token is drawn by Backend::ForwardSample: model/sampling/sampling.h's SamplingParams
// without the repetition penalty, plus a counter (e.g. the session's position) that makes each draw
// of one seed distinct and reproducible. The device kernel's own struct (plain C++).
using DrawParams = cuda::RowSampling;

class Backend {
 public:
  explicit Backend(const Model& model) : model_(model) {}
  virtual ~Backend() = default;

  // "cpu" or "cuda (device name)".
  virtual std::string Name() const = 0;
  virtual int slots() const = 0;
  // Tokens absorbed into the slot's state.
  virtual int64_t position(int slot) const = 0;
  // Most tokens a slot can hold (BackendOptions::max_context where a layer keeps a KV cache in
  // preallocated memory), or -1: no bound. Callers check before Forward, which aborts past it.
  virtual int64_t max_context() const { return -1; }
  // Empties a slot (every layer's InitState, position 0).
  virtual void Reset(int slot) = 0;
  // Model::Forward's contract: every segment's tokens in one step, logits [rows_out, vocab] in
  // segment order. `logits` may be null (benchmarks: compute without copying logits back).
  virtual void Forward(const std::vector<Segment>& segments, std::vector<float>* logits) = 0;
  // Forward, then one token per output row drawn under draws[row] (one entry per logits row).
  // The CUDA backend draws on the device (kernels/cuda/sampling.cu), so only the ids come back;
  // the CPU draws with model/sampling/sampling.h's Sampler seeded from (seed, counter). Greedy rows agree
  // between the two; random draws use different generators.
  virtual void ForwardSample(const std::vector<Segment>& segments, const std::vector<DrawParams>& draws,
                             std::vector<int32_t>* ids);
  // Speculative verification (Segment::verify): whether Forward takes verify segments, and after
  // one, Model::KeepVerified's contract: the slot keeps only the first `keep` of its tokens, its
  // state bit for bit the one plain decoding of them leaves. The CPU backend does; the CUDA
  // backend does not yet (callers decode plainly there).
  virtual bool Verifies() const { return false; }
  virtual void KeepVerified(int slot, int keep);
  // Where Verifies(): Model::MarkRollback / Model::RollBack's contract. From MarkRollback(slot) on,
  // the slot's rows are logged; RollBack(slot, keep) keeps the first `keep` of them (0 <= keep <=
  // rows since the mark): a KV cache is cut back, any other state restored and the kept rows
  // replayed. The draft model drafts in its lanes' own slots with these (model/speculate).
  virtual void MarkRollback(int slot);
  virtual void RollBack(int slot, int keep);
  // Whether ForwardSample draws where the logits are (true: only ids cross to the host, so callers
  // prefer it to Forward + host sampling).
  virtual bool DrawsOnDevice() const { return false; }
  // Waits for queued work (for timing). A no-op on the CPU.
  virtual void Synchronize() {}

  // Copies a slot's state out / in (snapshots, fork, offload). WriteSlot takes a state of this
  // model's shape whose growing part fits max_context (the caller checks).
  virtual SlotState ReadSlot(int slot) = 0;
  virtual void WriteSlot(int slot, const SlotState& state) = 0;
  // Slot `to` becomes a copy of slot `from` (fork), without leaving the backend's memory.
  virtual void CopySlot(int from, int to) = 0;

  // Bytes of weights one forward step reads (each weight once, in the backend's storage type).
  virtual int64_t WeightBytes() const = 0;
  const Model& model() const { return model_; }
  // Bytes of one slot's fixed state in the backend's storage.
  virtual int64_t StateBytesPerSlot() const = 0;
  // Bytes the slot's state holds now: the fixed part plus what grows with its context (KV cache).
  virtual int64_t BytesInUse(int slot) const = 0;
  // Median seconds of layer `layer`'s attention alone for a decode step of slots [0, batch) (one
  // random query/key/value row each; the slots' states absorb them), over `reps` calls after a
  // warm-up: the fused state-update kernel's time on the CUDA backend, the mechanism's Step on the
  // CPU. Bytes it moves: each slot's layer state read and written (LayerStateBytes), plus for a KV
  // cache the rows read.
  virtual double TimeAttention(int layer, int batch, int reps) = 0;
  int64_t LayerStateBytes(int layer) const;
  // Median seconds of layer `layer`'s attention alone over one prompt of `tokens` random rows in slot
  // 0 (one segment: the chunked prefill of a linear-state layer, the KV append and causal attention
  // of a softmax layer), over `reps` calls after a warm-up. The slot's state absorbs the rows (a
  // softmax cache is rewritten from position 0 each call, so `tokens` must fit max_context).
  // Negative where a backend does not measure it (the CPU: its prefill is the whole Forward).
  virtual double TimePrefillAttention(int layer, int64_t tokens, int reps) { return -1; }

  // Bytes/s of a plain copy between two buffers of `bytes` each in the backend's memory (best of a
  // few repetitions), counting bytes read plus bytes written (2 * bytes per copy), as the decode
  // figures count state: the bandwidth baseline they are compared against.
  virtual double CopyBandwidth(int64_t bytes) = 0;
  // Gives back the pages of the checkpoint's mapping that this backend keeps a copy of (matrices
  // converted with --cpu-weights), which passes over the model's own weights after the backend was
  // made (the engine's fingerprint and shape measurement) fault in again. Any time, any number of
  // times: a page read later comes back from the page cache.
  virtual void ReleaseCopiedPages() {}

 protected:
  const Model& model_;
};

// OUT_OF_RANGE when a session would reach `tokens` tokens, past the KV cache the backend holds per
// slot (max_context); OK where nothing bounds it.
absl::Status CheckReach(const Backend& backend, int64_t tokens);

// Whether this build has the CUDA backend, and whether a CUDA device is visible now.
bool CudaBackendBuilt();
bool CudaDevicePresent();

// OK when `device` names a backend this machine can run: "cpu", "auto", or "cuda" with the CUDA
// backend built and a GPU visible; otherwise the error MakeBackend would give.
absl::Status CheckDevice(std::string_view device);

// Whether `device` takes the CPU backend whatever the model: "cpu", or "auto" where no CUDA device is
// visible (auto with one takes the CPU only for a model the CUDA backend cannot run).
bool DeviceIsCpu(std::string_view device);

// The CPU backend's state pool takes every slot's fixed state at once (zero-filled: each page
// touched). Where `slots` states pass the memory available (/proc/meminfo's MemAvailable),
// RESOURCE_EXHAUSTED naming the sizes, instead of std::bad_alloc or the OOM killer later; MakeBackend
// checks it for every CPU backend, steady bench for its largest batch before the first where
// DeviceIsCpu.
absl::Status CheckCpuStateMemory(const Model& model, int slots);

// "cpu", "cuda" or "auto" (cuda when built and a device is visible, else cpu). "cuda" without a
// build or a device, or for a model with a mechanism the CUDA backend lacks, is an error naming why;
// so is a CPU backend whose slots' states would pass the memory available (RESOURCE_EXHAUSTED).
absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const Model& model, std::string_view device,
                                                     const BackendOptions& options = {});

// Per backend (model/backend/backend.cc, model/backend/backend_cuda.cc).
std::unique_ptr<Backend> MakeCpuBackend(const Model& model, const BackendOptions& options);
// INVALID_ARGUMENT naming the layer and mechanism when a layer has no CUDA kernels.
absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(const Model& model, const BackendOptions& options);

}  // namespace steady

#endif  // STEADY_MODEL_BACKEND_BACKEND_H_
