#include "model/backend/backend.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/check.h"
#include "kernels/cpu/amx.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_dot.h"
#include "kernels/cpu/parallel.h"
#include "model/decoder/state_pool.h"
#include "model/sampling/sampling.h"

#ifdef STEADY_HAVE_CUDA
#include "kernels/cuda/device.h"
#endif

namespace steady {
namespace {

// Bytes of everything Forward reads per step besides the projection matrices and the LM head: the
// norms, biases and mechanism tensors, in fp32 (of the embedding table, rows are gathered only).
int64_t OtherWeightBytes(const Model& m) {
  int64_t matrix_bytes = 0, matrix_weights = 0;
  auto add = [&](const WeightMatrix& x) {
    matrix_bytes += x.Bytes();
    matrix_weights += x.Weights();
  };
  add(m.embed());
  add(m.lm_head());
  for (const LayerWeights& w : m.layers()) {
    for (const WeightMatrix* x : {&w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down}) add(*x);
  }
  const int64_t vector_floats = (m.WeightBytes() - matrix_bytes) / int64_t(sizeof(float));
  const int64_t mechanism_floats = m.ParameterCount() - matrix_weights - vector_floats;
  return (vector_floats + mechanism_floats) * int64_t(sizeof(float));
}

class CpuBackend : public Backend {
 public:
  CpuBackend(const Model& model, const BackendOptions& options) : Backend(model), pool_(model, options.slots) {
    // Process-wide, like the thread count: the last backend made decides.
    cpu::UseSmallRowKernel(options.cpu_gemm != CpuGemm::kOpenBlas);
    cpu::SetInt8Path(Int8PathFor(options.cpu_gemm));
    cpu::SetBf16Path(Bf16PathFor(options.cpu_gemm));
    // AMX takes bf16 matrices, converted ones or a checkpoint's own (packed: a copy either way).
    const CpuMatrices own = CpuMatrices::From(model, CpuWeights::kStored);
    const CpuWeights w = options.cpu_weights;
    const bool bf16 = w == CpuWeights::kBf16 || (w == CpuWeights::kAuto && own.TypeNames() == "bf16");
    const bool amx = bf16 && UsesAmxTiles(options.cpu_gemm) && cpu::AmxAvailable();
    // Elsewhere --cpu-weights bf16, q8, q4 and q4k go to the dot-product kernels where the CPU has them
    // (packed: a copy either way), and so do auto's bf16, q8, q4, q4k, q5k, q6k, q4_1, q5_0 and q5_1 matrices as stored
    // (a checkpoint's own bf16, a GGUF file's blocks: the same values; llama.cpp rounds the activations
    // for a quantized file as these kernels do). They round the activations, so under stored every
    // matrix keeps the widening kernels: the logits stay those of the checkpoint's own numbers,
    // exactly (what the comparisons with PyTorch and with llama.cpp's fp32 dequantization check). fp32
    // matrices keep them under auto too.
    const bool int8 = w == CpuWeights::kQ8 || w == CpuWeights::kQ4 || w == CpuWeights::kQ4K ||
                      (w == CpuWeights::kAuto && own.HasInt8Format());
    const bool bf16_dot = w == CpuWeights::kBf16 || (w == CpuWeights::kAuto && own.Has(WeightType::kBf16));
    // A checkpoint's own f16 matrices go to the f16 kernel (the activations stay fp32) where the CPU
    // backend runs it (cpu::F16DotAvailable: where bf16 takes AVX2's FMAs).
    const bool f16_dot = w == CpuWeights::kAuto && own.Has(WeightType::kF16);
    const bool dot = UsesDotKernels(options.cpu_gemm) && !amx &&
                     ((bf16_dot && cpu::Bf16DotAvailable()) || (int8 && cpu::Int8DotAvailable()) ||
                      (f16_dot && cpu::F16DotAvailable()));
    if (ConvertedType(w) || amx || dot) reduced_ = std::make_unique<CpuMatrices>(CpuMatrices::From(model, w, amx, dot));
    const CpuMatrices& read = reduced_ ? *reduced_ : own;
    types_ = read.TypeNames();
    kernels_ = read.Kernels();
    matrix_bytes_ = read.Bytes();
    // A mechanism's token matrices held in the copy's type are read there, not as fp32.
    if (reduced_) {
      for (const CpuMatrices::Layer& l : reduced_->layers) {
        for (const WeightMatrix& t : l.token) replaced_bytes_ += t.Weights() * int64_t(sizeof(float));
      }
    }
  }

  // "cpu", or e.g. "cpu (bf16 weights on AVX512_BF16)": the weights' types and the CPU extensions
  // their GEMMs run on where that is not the widening kernel (steady bench, the server's log).
  std::string Name() const override {
    if (types_ == "f32") return "cpu";
    return "cpu (" + types_ + " weights" + (kernels_.empty() ? "" : " on " + kernels_) + ")";
  }
  int slots() const override { return pool_.slots(); }
  int64_t position(int slot) const override { return pool_.position(slot); }
  void Reset(int slot) override {
    pool_.Reset(slot);
    for (int l = 0; l < model_.config().num_layers; ++l) std::vector<float>().swap(pool_.Growing(slot, l));
  }
  void Forward(const std::vector<Segment>& segments, std::vector<float>* logits) override {
    model_.Forward(segments, pool_, ws_, logits != nullptr ? logits : &scratch_logits_, reduced_.get());
  }
  bool Verifies() const override { return true; }
  void KeepVerified(int slot, int keep) override { model_.KeepVerified(pool_, ws_, slot, keep); }
  void MarkRollback(int slot) override { model_.MarkRollback(pool_, ws_, slot); }
  void RollBack(int slot, int keep) override { model_.RollBack(pool_, ws_, slot, keep); }
  SlotState ReadSlot(int slot) override {
    SlotState s;
    s.position = pool_.position(slot);
    s.fixed.assign(pool_.SlotData(slot), pool_.SlotData(slot) + pool_.fixed_floats_per_slot());
    for (int l = 0; l < model_.config().num_layers; ++l) s.growing.push_back(pool_.Growing(slot, l));
    return s;
  }
  void WriteSlot(int slot, const SlotState& s) override {
    STEADY_CHECK(s.fixed.size() == pool_.fixed_floats_per_slot());
    STEADY_CHECK(int(s.growing.size()) == model_.config().num_layers);
    std::copy(s.fixed.begin(), s.fixed.end(), pool_.SlotData(slot));
    for (int l = 0; l < model_.config().num_layers; ++l) pool_.Growing(slot, l) = s.growing[l];
    pool_.set_position(slot, s.position);
  }
  void CopySlot(int from, int to) override { pool_.Copy(from, to); }
  double TimeAttention(int layer, int batch, int reps) override {
    const LayerAttention& a = model_.layers()[layer].attention;
    const AttnShape& s = a.shape;
    std::mt19937_64 rng(layer * 7919 + batch);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> q(size_t(s.heads) * s.head_dim), k(size_t(s.kv_heads) * s.head_dim),
        v(size_t(s.kv_heads) * s.value_dim), y(size_t(s.heads) * s.value_dim);
    for (std::vector<float>* x : {&q, &k, &v}) {
      for (float& e : *x) e = g(rng);
    }
    std::vector<double> times;
    for (int rep = 0; rep <= reps; ++rep) {
      const auto start = std::chrono::steady_clock::now();
      for (int slot = 0; slot < batch; ++slot) {
        AttentionForward<float>(a, 1, q.data(), k.data(), v.data(), pool_.View(slot, layer), y.data());
      }
      if (rep > 0) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  }
  int64_t WeightBytes() const override { return matrix_bytes_ + OtherWeightBytes(model_) - replaced_bytes_; }
  void ReleaseCopiedPages() override {
    if (!reduced_) return;
    // A matrix whose copy has another type is not read from the mapping again.
    auto release = [](const WeightMatrix& source, const WeightMatrix& copy) {
      if (copy.type() != source.type()) source.ReleasePages();
    };
    for (size_t l = 0; l < reduced_->layers.size(); ++l) {
      const LayerWeights& s = model_.layers()[l];
      const CpuMatrices::Layer& c = reduced_->layers[l];
      release(s.wq, c.wq), release(s.wk, c.wk), release(s.wv, c.wv), release(s.wo, c.wo);
      release(s.w_gate, c.w_gate), release(s.w_up, c.w_up), release(s.w_down, c.w_down);
    }
    release(model_.lm_head_matrix(), reduced_->lm_head);
  }
  int64_t StateBytesPerSlot() const override { return int64_t(pool_.FixedBytesPerSlot()); }
  int64_t BytesInUse(int slot) const override { return int64_t(pool_.BytesInUse(slot)); }
  double CopyBandwidth(int64_t bytes) override {
    std::vector<char> a(bytes, 1), b(bytes, 0);
    double best = 0;
    for (int rep = 0; rep < 5; ++rep) {
      const auto start = std::chrono::steady_clock::now();
      std::memcpy(b.data(), a.data(), a.size());
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      // Read once and written once: 2 * bytes move per copy, the same accounting as decode steps.
      best = std::max(best, 2.0 * double(bytes) / std::max(s, 1e-9));
      if (bytes > rep + 1) a[rep] = b[rep + 1];  // keep the copies observable
    }
    return best;
  }

 private:
  StatePool pool_;
  ForwardWorkspace ws_;
  std::vector<float> scratch_logits_;
  std::unique_ptr<CpuMatrices> reduced_;  // null: the model's own matrices
  std::string types_;                     // the types of the matrices read ("f32", "bf16", ...)
  std::string kernels_;                   // CpuMatrices::Kernels(): "AMX", "AVX512_BF16", ... or ""
  int64_t matrix_bytes_ = 0;              // their bytes
  int64_t replaced_bytes_ = 0;            // fp32 bytes of the mechanisms' token matrices the copy replaces
};

}  // namespace

int64_t Backend::LayerStateBytes(int layer) const {
  return int64_t(model_.LayerStateFloats(layer) * sizeof(float));
}

void Backend::KeepVerified(int, int) { STEADY_CHECK(false && "this backend takes no verify segments"); }
void Backend::MarkRollback(int) { STEADY_CHECK(false && "this backend takes no verify segments"); }
void Backend::RollBack(int, int) { STEADY_CHECK(false && "this backend takes no verify segments"); }

void Backend::ForwardSample(const std::vector<Segment>& segments, const std::vector<DrawParams>& draws,
                            std::vector<int32_t>* ids) {
  std::vector<float> logits;
  Forward(segments, &logits);
  const int vocab = int(logits.size() / std::max<size_t>(draws.size(), 1));
  STEADY_CHECK(size_t(vocab) * draws.size() == logits.size());
  ids->resize(draws.size());
  for (size_t r = 0; r < draws.size(); ++r) {
    const DrawParams& d = draws[r];
    // splitmix64 of the counter keys the row's generator.
    uint64_t z = d.counter + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    Sampler sampler(SamplingParams{d.temperature, d.top_k, d.top_p, 1.0f, d.seed ^ z ^ (z >> 31)});
    (*ids)[r] = sampler.Sample(logits.data() + r * vocab, vocab, {});
  }
}

bool CudaBackendBuilt() {
#ifdef STEADY_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

bool CudaDevicePresent() {
#ifdef STEADY_HAVE_CUDA
  return cuda::CudaDeviceAvailable();
#else
  return false;
#endif
}

std::unique_ptr<Backend> MakeCpuBackend(const Model& model, const BackendOptions& options) {
  return std::make_unique<CpuBackend>(model, options);
}

#ifndef STEADY_HAVE_CUDA
absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(const Model&, const BackendOptions&) {
  return CheckDevice("cuda");  // this build has no CUDA backend: the error that says so
}
#endif

absl::Status CheckReach(const Backend& backend, int64_t tokens) {
  const int64_t cap = backend.max_context();
  if (cap < 0 || tokens <= cap) return absl::OkStatus();
  return absl::OutOfRangeError(absl::StrCat("the session would reach ", tokens, " tokens, past the ", cap,
                                            " tokens of KV cache this backend holds per session"));
}

absl::Status CheckDevice(std::string_view device) {
  if (device == "cpu" || device == "auto") return absl::OkStatus();
  if (device != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat("--device: expected cpu, cuda or auto, got \"", std::string(device), "\""));
  }
  if (!CudaBackendBuilt()) {
    return absl::FailedPreconditionError(
        "--device cuda: this build has no CUDA backend (nvcc was not found when CMake configured it; "
        "reconfigure with -DENABLE_CUDA=ON on a machine with the CUDA toolkit)");
  }
  if (!CudaDevicePresent()) {
    return absl::FailedPreconditionError(
        "--device cuda: no CUDA device is visible (no driver, no GPU, or CUDA_VISIBLE_DEVICES hides "
        "it); use --device cpu or auto");
  }
  return absl::OkStatus();
}

bool DeviceIsCpu(std::string_view device) { return device == "cpu" || (device == "auto" && !CudaDevicePresent()); }

namespace {

// /proc/meminfo's MemAvailable in bytes (what Linux can hand out without swapping, reclaimable cache
// included), or nothing where it cannot be read.
std::optional<int64_t> AvailableMemoryBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  while (meminfo >> key >> kib) {
    std::getline(meminfo, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return std::nullopt;
}

// e.g. "2.11 MB", "3.19 GB", "2.21 TB".
std::string ByteSize(double bytes) {
  if (bytes < 1e9) return absl::StrFormat("%.2f MB", bytes / 1e6);
  if (bytes < 1e12) return absl::StrFormat("%.2f GB", bytes / 1e9);
  return absl::StrFormat("%.2f TB", bytes / 1e12);
}

}  // namespace

absl::Status CheckCpuStateMemory(const Model& model, int slots) {
  const double per_slot = double(model.StateFloats()) * sizeof(float), total = per_slot * slots;
  const std::optional<int64_t> available = AvailableMemoryBytes();
  if (!available || total <= double(*available)) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "backend: ", slots, " session slots of ", ByteSize(per_slot), " of state each (", ByteSize(total),
      " in all) need more memory than this machine has available (", ByteSize(double(*available)),
      "): fewer slots (--batch, --state-memory) or a smaller state (a lower --order, fewer features)"));
}

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const Model& model, std::string_view device,
                                                     const BackendOptions& options) {
  if (options.slots < 1) return absl::InvalidArgumentError("backend: slots must be >= 1");
  if (options.cpu_threads < 0) return absl::InvalidArgumentError("backend: cpu_threads must be >= 0");
  if (absl::Status s = CheckDevice(device); !s.ok()) return s;
  cpu::SetComputeThreads(options.cpu_threads);
  if (device == "cuda") return MakeCudaBackend(model, options);
  if (!DeviceIsCpu(device)) {  // auto with a GPU
    auto cuda = MakeCudaBackend(model, options);
    // A mechanism without CUDA kernels runs on the CPU (Name() says which backend was taken).
    if (cuda.ok() || cuda.status().code() != absl::StatusCode::kInvalidArgument) return cuda;
  }
  if (absl::Status s = CheckCpuStateMemory(model, options.slots); !s.ok()) return s;
  return MakeCpuBackend(model, options);
}

}  // namespace steady
