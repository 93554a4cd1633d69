// The CUDA backend (model/backend/backend.h): Model::Forward's computation on one device through the
// launchers of kernels/cuda/ops.h. Weights are converted to bf16 once at construction (norms and the
// embedding table stay fp32: the table is gathered, not multiplied); activations are fp32 between
// ops and bf16 at GEMM inputs, with fp32 accumulation (cuBLAS). BackendOptions::cuda_bf16 = false
// keeps everything fp32: the reference that pins the kernels to the CPU path at fp32 tolerances. Every slot's fixed state lives in one
// device slab in StatePool's layout; softmax layers keep a KV cache preallocated to max_context
// tokens per slot. Built only when nvcc is found (model/CMakeLists.txt); checked against the CPU backend by
// tests/model/backend/backend_test.cc on a machine with a GPU.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/ops.h"
#include "model/backend/backend.h"
#include "model/decoder/state_pool.h"

namespace steady {
namespace {

using cuda::bf16_bits;
using cuda::DeviceBuffer;

// A device copy of a host vector.
template <typename T>
DeviceBuffer UploadVector(const std::vector<T>& host, cudaStream_t stream) {
  DeviceBuffer d(host.size() * sizeof(T));
  cuda::CopyToDevice(d.data(), host.data(), d.bytes(), stream);
  return d;
}

// Host floats converted to bf16 on the device.
DeviceBuffer UploadBf16(const std::vector<float>& host, cudaStream_t stream) {
  DeviceBuffer staging = UploadVector(host, stream);
  DeviceBuffer d(host.size() * sizeof(bf16_bits));
  cuda::FloatToBf16(staging.as<float>(), int64_t(host.size()), d.as<bf16_bits>(), stream);
  cuda::SynchronizeStream(stream);
  return d;
}

// A step's attention batch: the model's geometry and its segment table on the device (`table`:
// slot, row_begin and count arrays of `segments` entries each; null for sizing only).
cuda::AttnBatch MakeBatch(const ModelConfig& c, const int32_t* table, int segments, int max_count) {
  cuda::AttnBatch b;
  b.slot = table;
  b.row_begin = table == nullptr ? nullptr : table + segments;
  b.count = table == nullptr ? nullptr : table + 2 * segments;
  b.segments = segments;
  b.max_count = max_count;
  b.heads = c.num_heads;
  b.kv_heads = c.num_kv_heads;
  b.head_dim = c.head_dim;
  b.value_dim = c.head_dim;
  return b;
}

std::vector<float> ToFloats(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

struct DeviceLayer {
  DeviceBuffer attn_norm, mlp_norm, q_norm, k_norm;              // fp32
  DeviceBuffer wq, wk, wv, wo, w_gate, w_up, w_down;             // bf16 (fp32 with cuda_bf16 off)
  // fp32 biases, empty where the architecture has none (Model's LayerWeights).
  DeviceBuffer q_bias, k_bias, v_bias, o_bias, gate_bias, up_bias, down_bias;
  // Mechanism tables (device arrays behind the pointers in the structs below).
  std::vector<DeviceBuffer> tables;
  cuda::LinearStateLayout state;  // pool pointer filled per step
  cuda::TaylorTables taylor;
  cuda::SlayTables slay;
  cuda::DarkTables dark;
  // sliced_relu / sliced_relu_bump (bucketed): score projections and histogram layout.
  bool sliced = false;
  cuda::SlicedProjector sliced_q, sliced_k;
  cuda::SlicedStateLayout sliced_state;  // pool pointer filled per step
  const float* bandwidth = nullptr;      // [heads], bump only
  int softmax_index = -1;  // index among softmax layers (KV cache), or -1
  float softmax_scale = 0;
};

struct StepLayout;

class CudaBackend : public Backend {
 public:
  CudaBackend(const Model& model, const BackendOptions& options) : Backend(model), options_(options) {}
  ~CudaBackend() override {
    blas_.reset();
    cuda::DestroyStream(stream_);
  }

  // Uploads weights and tables and allocates the pools; INVALID_ARGUMENT for what the kernels lack.
  absl::Status Init();

  std::string Name() const override { return absl::StrCat("cuda (", device_name_, ")"); }
  int slots() const override { return options_.slots; }
  int64_t position(int slot) const override { return positions_[slot]; }
  int64_t max_context() const override { return softmax_layers_ > 0 ? options_.max_context : -1; }
  void Reset(int slot) override {
    cuda::CopyToDevice(SlotPtr(slot), empty_slot_.data(), empty_slot_.size() * sizeof(float), stream_);
    positions_[slot] = 0;
  }
  void Forward(const std::vector<Segment>& segments, std::vector<float>* logits) override;
  void ForwardSample(const std::vector<Segment>& segments, const std::vector<DrawParams>& draws,
                     std::vector<int32_t>* ids) override;
  bool DrawsOnDevice() const override { return true; }
  void Synchronize() override { cuda::SynchronizeStream(stream_); }
  SlotState ReadSlot(int slot) override;
  void WriteSlot(int slot, const SlotState& state) override;
  void CopySlot(int from, int to) override {
    cuda::CopyOnDevice(SlotPtr(to), SlotPtr(from), slot_floats_ * sizeof(float), stream_);
    for (int i = 0; i < softmax_layers_; ++i) {
      cuda::CopyOnDevice(KvPtr(to, i), KvPtr(from, i), size_t(positions_[from] * kv_row_floats_) * kv_elem_bytes_,
                         stream_);
    }
    positions_[to] = positions_[from];
  }
  int64_t WeightBytes() const override { return weight_bytes_; }
  int64_t StateBytesPerSlot() const override { return int64_t(slot_floats_ * sizeof(float)); }
  int64_t BytesInUse(int slot) const override {
    return StateBytesPerSlot() + positions_[slot] * kv_row_floats_ * softmax_layers_ * kv_elem_bytes_;
  }
  double TimeAttention(int layer, int batch, int reps) override;
  double TimePrefillAttention(int layer, int64_t tokens, int reps) override;
  double CopyBandwidth(int64_t bytes) override {
    DeviceBuffer a(bytes), b(bytes);
    a.Fill(1);
    return 2.0 * double(bytes) / cuda::BestCopySeconds(b.data(), a.data(), size_t(bytes), 5, stream_);
  }

 private:
  static constexpr int kMaxGraphBatch = 512;
  static constexpr int kChunkedMin = 16;  // prefill segments of at least this many rows go chunked
  void FillStep(const StepLayout& layout, const std::vector<Segment>& segments, const std::vector<DrawParams>* draws,
                char* host) const;
  void ReserveRows(int rows, int out_rows);
  void EnqueueStep(const StepLayout& layout, const char* dmeta);
  void Step(const std::vector<Segment>& segments, const std::vector<DrawParams>* draws, std::vector<float>* logits,
            std::vector<int32_t>* ids);
  float* SlotPtr(int slot) const { return pool_.as<float>() + size_t(slot) * slot_floats_; }
  // The KV cache rows of `slot` in softmax layer `index` (CPU row layout, max_context rows).
  char* KvPtr(int slot, int index) const {
    return kv_cache_.as<char>() +
           (int64_t(slot) * softmax_layers_ + index) * options_.max_context * kv_row_floats_ * kv_elem_bytes_;
  }
  absl::Status InitLayer(int l, const LayerWeights& w, DeviceLayer* d);
  absl::Status InitSliced(const LayerAttention& a, const SlicedParams& p, DeviceLayer* d);
  // A prefill segment long enough for the chunked path: slot, first row, rows.
  struct LongSegment {
    int slot, row0, n;
  };
  void Attention(const DeviceLayer& d, cuda::AttnBatch batch, int rows, const int64_t* seg_positions,
                 const std::vector<LongSegment>& long_segments, const float* q, const float* k, const float* v,
                 float* y);
  // A GEMM's input: x itself (fp32 mode) or x rounded to bf16 into hb_.
  const void* GemmInput(const float* x, int64_t n) {
    if (!options_.cuda_bf16) return x;
    cuda::FloatToBf16(x, n, hb_.as<bf16_bits>(), stream_);
    return hb_.data();
  }
  void Linear(const void* x, int rows, int in, const DeviceBuffer& w, int out, float* y) {
    if (options_.cuda_bf16) {
      cuda::MatMulNTBf16(*blas_, static_cast<const bf16_bits*>(x), rows, in, w.as<bf16_bits>(), out, y);
    } else {
      cuda::MatMulNT(*blas_, static_cast<const float*>(x), rows, in, w.as<float>(), out, y);
    }
  }
  // y[r, :] += bias for the rows of a GEMM's output; nothing where the layer has no such bias.
  void AddBias(const DeviceBuffer& bias, int rows, int n, float* y) {
    if (bias.bytes() > 0) cuda::AddBiasRows(y, bias.as<float>(), rows, n, stream_);
  }
  // A matrix from the model's storage (a checkpoint's mapping): bf16 bytes go up as they are; other
  // types through fp32 on the host, one matrix at a time. The host pages are released after.
  DeviceBuffer UploadWeight(const WeightMatrix& host) {
    DeviceBuffer d;
    if (options_.cuda_bf16 && host.type() == WeightType::kBf16) {
      d = DeviceBuffer(size_t(host.Bytes()));
      cuda::CopyToDevice(d.data(), host.data(), d.bytes(), stream_);
      cuda::SynchronizeStream(stream_);
    } else {
      const std::vector<float> values = host.ToFloat();
      d = options_.cuda_bf16 ? UploadBf16(values, stream_) : UploadVector(values, stream_);
    }
    host.ReleasePages();
    return d;
  }

  const BackendOptions options_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<cuda::Blas> blas_;
  std::string device_name_;

  DeviceBuffer embed_;       // fp32 [vocab, hidden] (gathered)
  DeviceBuffer lm_head_;     // bf16 (or fp32) [vocab, hidden] (the embedding when tied)
  DeviceBuffer final_norm_;  // fp32
  DeviceBuffer inv_freq_;    // fp32 [head_dim / 2]
  std::vector<DeviceLayer> layers_;
  int64_t weight_bytes_ = 0;

  size_t slot_floats_ = 0;
  std::vector<size_t> layer_offset_;
  std::vector<float> empty_slot_;  // a fresh slot (InitState of every layer), StatePool layout
  DeviceBuffer pool_;              // [slots, slot_floats_]
  int softmax_layers_ = 0;
  int64_t kv_row_floats_ = 0;  // kv_heads * (head_dim + value_dim)
  int64_t kv_elem_bytes_ = 4;  // 2: a bf16 cache (BackendOptions::cuda_kv_bf16)
  DeviceBuffer kv_cache_;      // [slots, softmax layers, max_context, kv_row_floats_] elements
  std::vector<int64_t> positions_;

  // Per-step buffers, grown as needed.
  DeviceBuffer meta_;           // the step's metadata (StepLayout), uploaded from pinned_
  cuda::PinnedBuffer pinned_;   // its host copy
  DeviceBuffer ids_;            // int32 [out rows]: ForwardSample's draws
  DeviceBuffer chunk_scratch_;  // the chunked prefill's features and GEMM operands
  DeviceBuffer split_partial_;  // a split decode step's partials (softmax's context splits, linear's row strips)
  DeviceBuffer zq_, zk_, sliced_scratch_;  // sliced layers: fp64 scores [rows, heads | kv_heads], projection scratch
  DeviceBuffer x_, h_, hb_, q_, k_, v_, att_, proj_, gate_, up_, logits_in_, logits_;
  // Captured decode steps by (batch bucket, samples).
  struct GraphSlot {
    cuda::Graph graph;
    int eager_runs = 0;
  };
  std::map<std::pair<int, bool>, GraphSlot> graphs_;
};

absl::Status CudaBackend::InitLayer(int l, const LayerWeights& w, DeviceLayer* d) {
  const ModelConfig& c = model_.config();
  const LayerAttention& a = w.attention;
  const AttnShape& s = a.shape;
  auto unsupported = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("--device cuda: layer ", l, " (", a.mechanism, "): ", why,
                                                   "; use --device cpu"));
  };
  if (s.group() > cuda::kLinearMaxGroup) {
    return unsupported(absl::StrCat(s.group(), " query heads per kv head; the kernels take at most ",
                                    cuda::kLinearMaxGroup));
  }
  if (s.value_dim > cuda::kLinearMaxValueDim) {
    return unsupported(absl::StrCat("head_dim ", s.value_dim, " is above the kernels' ", cuda::kLinearMaxValueDim));
  }
  d->attn_norm = UploadVector(w.attn_norm, stream_);
  d->mlp_norm = UploadVector(w.mlp_norm, stream_);
  if (c.qk_norm) {
    d->q_norm = UploadVector(w.q_norm, stream_);
    d->k_norm = UploadVector(w.k_norm, stream_);
  }
  for (auto [src, dst] : {std::pair{&w.wq, &d->wq}, {&w.wk, &d->wk}, {&w.wv, &d->wv}, {&w.wo, &d->wo},
                          {&w.w_gate, &d->w_gate}, {&w.w_up, &d->w_up}, {&w.w_down, &d->w_down}}) {
    *dst = UploadWeight(*src);
    weight_bytes_ += int64_t(dst->bytes());
  }
  weight_bytes_ += int64_t(d->attn_norm.bytes() + d->mlp_norm.bytes() + d->q_norm.bytes() + d->k_norm.bytes());
  for (auto [src, dst] : {std::pair{&w.q_bias, &d->q_bias}, {&w.k_bias, &d->k_bias}, {&w.v_bias, &d->v_bias},
                          {&w.o_bias, &d->o_bias}, {&w.gate_bias, &d->gate_bias}, {&w.up_bias, &d->up_bias},
                          {&w.down_bias, &d->down_bias}}) {
    if (src->empty()) continue;
    *dst = UploadVector(*src, stream_);
    weight_bytes_ += int64_t(dst->bytes());
  }

  cuda::LinearStateLayout& st = d->state;
  st.slot_floats = int64_t(slot_floats_);
  st.layer_offset = int64_t(layer_offset_[l]);
  const bool kahan = a.accumulation == Accumulation::kKahan;
  const int dv = s.value_dim;
  // The CPU layouts: taylor.h (rows [features, dv + 1], compensations after every head) and
  // feature_state.h ([S, z] then [S_comp, z_comp] per head; dark adds its running max after them).
  auto feature_state = [&](int m, bool extra) {
    const int64_t sums = int64_t(m) * (dv + 1);
    st.features = m;
    st.head_stride = (kahan ? 2 * sums : sums) + (extra ? 1 : 0);
    st.s_row = dv;
    st.z_off = int64_t(m) * dv;
    st.z_stride = 1;
    st.comp_off = kahan ? sums : -1;
    st.extra_off = extra ? st.head_stride - 1 : -1;
  };
  const cuda::AttnBatch shape = MakeBatch(c, nullptr, 0, 0);
  int scratch = 0;
  if (a.mechanism == "softmax") {
    d->softmax_index = softmax_layers_++;
    d->softmax_scale = float(std::get<SoftmaxParams>(a.params).scale);
    return absl::OkStatus();
  } else if (const auto* p = std::get_if<TaylorParams>(&a.params)) {
    if (p->order > cuda::kTaylorMaxOrder) return unsupported("order above 8");
    st.features = p->features;
    st.head_stride = int64_t(p->features) * (dv + 1);
    st.s_row = dv + 1;
    st.z_off = dv;
    st.z_stride = dv + 1;
    st.comp_off = kahan ? int64_t(s.kv_heads) * st.head_stride : -1;
    std::vector<int32_t> parent(p->features, 0), last(p->features, 0);
    std::vector<float> key_scale(p->features), query_scale(p->features);
    for (int deg = 0; deg < p->order; ++deg) {
      const TaylorMonomials& m = p->degrees[deg];
      d->taylor.degree_offset[deg] = m.offset;
      for (int r = 0; r < m.rows; ++r) {
        if (deg > 0) {
          parent[m.offset + r] = p->degrees[deg - 1].offset + m.parent[r];
          last[m.offset + r] = m.index[size_t(r) * deg + deg - 1];
        }
        key_scale[m.offset + r] = float(p->alpha[deg]);
        query_scale[m.offset + r] = float(m.multiplicity[r]);
      }
    }
    d->taylor.order = p->order;
    d->taylor.degree_offset[p->order] = p->features;
    d->tables.push_back(UploadVector(parent, stream_));
    d->taylor.parent = d->tables.back().as<int32_t>();
    d->tables.push_back(UploadVector(last, stream_));
    d->taylor.last_index = d->tables.back().as<int32_t>();
    d->tables.push_back(UploadVector(key_scale, stream_));
    d->taylor.key_scale = d->tables.back().as<float>();
    d->tables.push_back(UploadVector(query_scale, stream_));
    d->taylor.query_scale = d->tables.back().as<float>();
    scratch = cuda::TaylorScratchFloats(shape);
  } else if (const auto* p = std::get_if<SlayParams>(&a.params)) {
    feature_state(p->num_features(), false);
    cuda::SlayTables& t = d->slay;
    t.nodes = p->nodes;
    t.anchors = p->anchors;
    t.features = p->features;
    t.delta = float(p->delta);
    d->tables.push_back(UploadVector(p->anchor_dirs, stream_));
    t.anchor_dirs = d->tables.back().as<float>();
    d->tables.push_back(UploadVector(p->omega, stream_));
    t.omega = d->tables.back().as<float>();
    d->tables.push_back(UploadVector(ToFloats(p->node_s), stream_));
    t.node_s = d->tables.back().as<float>();
    d->tables.push_back(UploadVector(ToFloats(p->node_w), stream_));
    t.node_w = d->tables.back().as<float>();
    scratch = cuda::SlayScratchFloats(shape, t);
  } else if (const auto* p = std::get_if<DarkParams>(&a.params)) {
    feature_state(p->features, true);
    cuda::DarkTables& t = d->dark;
    t.features = p->features;
    t.rank = p->rank;
    t.scale = float(p->scale);
    t.delta = float(p->delta);
    d->tables.push_back(UploadVector(p->M, stream_));
    t.M = d->tables.back().as<float>();
    d->tables.push_back(UploadVector(p->W, stream_));
    t.W = d->tables.back().as<float>();
    scratch = cuda::DarkScratchFloats(shape, t);
  } else if (const auto* p = std::get_if<SlicedParams>(&a.params)) {
    if (p->decoder == SlicedDecoder::kExact) {
      return unsupported("decoder \"exact\" keeps every key in a growing tree; the CUDA kernels take the constant-size "
                         "decoder \"bucketed\"");
    }
    return InitSliced(a, *p, d);
  } else {
    return unsupported("no CUDA kernels for this mechanism yet");
  }
  for (const DeviceBuffer& t : d->tables) weight_bytes_ += int64_t(t.bytes());
  const size_t smem = cuda::LinearAttentionSharedBytes(shape, st.features, scratch);
  if (smem > cuda::MaxSharedBytesPerBlock()) {
    return unsupported(absl::StrCat(st.features, " feature rows per kv head need ", smem / 1024,
                                    " KiB of shared memory per block (the device allows ",
                                    cuda::MaxSharedBytesPerBlock() / 1024, " KiB); fewer features or a lower order fit"));
  }
  return absl::OkStatus();
}

// The score projections in fp64 (fp32 mode: the CPU's fp64 reference path; its fp32 path projects
// in fp32, within whose rounding these are) or fp32 (bf16 mode), the bandwidths, and the histograms' place in the pool.
absl::Status CudaBackend::InitSliced(const LayerAttention& a, const SlicedParams& p, DeviceLayer* d) {
  const AttnShape& s = a.shape;
  const bool fp64 = !options_.cuda_bf16;
  auto upload = [&](const std::vector<float>& host) -> const void* {
    d->tables.push_back(fp64 ? UploadVector(std::vector<double>(host.begin(), host.end()), stream_)
                             : UploadVector(host, stream_));
    weight_bytes_ += int64_t(d->tables.back().bytes());
    return d->tables.back().data();
  };
  auto projector = [&](const SlicedProjectionWeights& w, int groups) {
    cuda::SlicedProjector pr;
    pr.kind = p.projection == SlicedProjection::kMlp      ? cuda::SlicedProjector::kMlp
              : p.projection == SlicedProjection::kLinear ? cuda::SlicedProjector::kLinear
                                                          : cuda::SlicedProjector::kNone;
    pr.groups = groups;
    pr.width = groups * s.head_dim;
    pr.fp64 = fp64;
    if (pr.kind == cuda::SlicedProjector::kMlp) {
      pr.fc1_weight = upload(w.fc1_weight);
      pr.fc1_bias = upload(w.fc1_bias);
    }
    if (pr.kind != cuda::SlicedProjector::kNone) {
      pr.out_weight = upload(w.out_weight);
      pr.out_bias = upload(w.out_bias);
    }
    return pr;
  };
  d->sliced = true;
  d->sliced_q = projector(p.q, s.heads);
  d->sliced_k = projector(p.k, s.kv_heads);
  if (p.bump) {
    d->tables.push_back(UploadVector(p.bandwidth, stream_));
    weight_bytes_ += int64_t(d->tables.back().bytes());
    d->bandwidth = d->tables.back().as<float>();
  }
  cuda::SlicedStateLayout& st = d->sliced_state;
  st.slot_floats = d->state.slot_floats;
  st.layer_offset = d->state.layer_offset;
  st.bins = SlicedBinsLayout{p.bins, p.z_min, p.z_max, s.value_dim, a.accumulation == Accumulation::kKahan};
  STEADY_CHECK(st.bins.HeadFloats() * s.kv_heads == StateFloats(a));
  return absl::OkStatus();
}

absl::Status CudaBackend::Init() {
  const ModelConfig& c = model_.config();
  if (model_.rope().position_dependent() || model_.rope().attention_factor() != 1.0f) {
    return absl::InvalidArgumentError(absl::StrCat("--device cuda: rope_scaling \"", c.rope_scaling.type,
                                                   "\" (per-position frequencies or a q/k scale) has no CUDA "
                                                   "kernels yet; use --device cpu"));
  }
  stream_ = cuda::CreateStream();
  blas_ = std::make_unique<cuda::Blas>(stream_);
  device_name_ = cuda::DeviceName();
  // The fixed-state layout and a fresh slot, exactly as StatePool has them.
  {
    StatePool host(model_, 1);
    slot_floats_ = host.fixed_floats_per_slot();
    empty_slot_.assign(host.SlotData(0), host.SlotData(0) + slot_floats_);
    size_t offset = 0;
    for (int l = 0; l < c.num_layers; ++l) {
      layer_offset_.push_back(offset);
      offset += model_.LayerStateFloats(l);
    }
    STEADY_CHECK(offset == slot_floats_);
  }
  layers_.resize(c.num_layers);
  for (int l = 0; l < c.num_layers; ++l) {
    if (absl::Status s = InitLayer(l, model_.layers()[l], &layers_[l]); !s.ok()) return s;
  }
  embed_ = UploadVector(model_.embed().ToFloat(), stream_);
  lm_head_ = UploadWeight(model_.lm_head_matrix());
  final_norm_ = UploadVector(model_.final_norm(), stream_);
  weight_bytes_ += int64_t(lm_head_.bytes() + final_norm_.bytes());
  if (!model_.rope().empty()) {
    inv_freq_ = UploadVector(model_.rope().inv_freq(), stream_);
  }
  // One slot more than asked for: the scratch slot that padding rows of graph-replayed decode
  // steps write to (slot index options_.slots, never a session's).
  const size_t slots = size_t(options_.slots) + 1;
  pool_ = DeviceBuffer(slots * std::max<size_t>(slot_floats_, 1) * sizeof(float));
  kv_row_floats_ = int64_t(c.num_kv_heads) * 2 * c.head_dim;
  kv_elem_bytes_ = options_.cuda_bf16 && options_.cuda_kv_bf16 ? 2 : 4;
  const cuda::AttnBatch shape = MakeBatch(c, nullptr, 0, 0);
  split_partial_ = DeviceBuffer(size_t(std::max(cuda::SoftmaxPartialFloats(shape) * int64_t(sizeof(float)),
                                                cuda::LinearPartialBytes(shape))));
  if (softmax_layers_ > 0) {
    kv_cache_ = DeviceBuffer(slots * softmax_layers_ * size_t(options_.max_context) * size_t(kv_row_floats_) *
                             size_t(kv_elem_bytes_));
  }
  positions_.assign(slots, 0);
  for (int s = 0; s < int(slots); ++s) Reset(s);
  return absl::OkStatus();
}

SlotState CudaBackend::ReadSlot(int slot) {
  SlotState s;
  s.position = positions_[slot];
  s.fixed.resize(slot_floats_);
  cuda::CopyToHost(s.fixed.data(), SlotPtr(slot), s.fixed.size() * sizeof(float), stream_);
  for (const DeviceLayer& d : layers_) {
    s.growing.emplace_back();
    if (d.softmax_index < 0) continue;
    std::vector<float>& rows = s.growing.back();
    rows.resize(size_t(s.position * kv_row_floats_));
    if (kv_elem_bytes_ == 4) {
      cuda::CopyToHost(rows.data(), KvPtr(slot, d.softmax_index), rows.size() * sizeof(float), stream_);
    } else if (!rows.empty()) {  // bf16 rows widened on the device (exact)
      DeviceBuffer wide(rows.size() * sizeof(float));
      cuda::Bf16ToFloat(reinterpret_cast<const bf16_bits*>(KvPtr(slot, d.softmax_index)), int64_t(rows.size()),
                        wide.as<float>(), stream_);
      cuda::CopyToHost(rows.data(), wide.data(), wide.bytes(), stream_);
    }
  }
  return s;
}

void CudaBackend::WriteSlot(int slot, const SlotState& s) {
  STEADY_CHECK(s.fixed.size() == slot_floats_ && s.growing.size() == layers_.size());
  STEADY_CHECK(softmax_layers_ == 0 || s.position <= options_.max_context);
  cuda::CopyToDevice(SlotPtr(slot), s.fixed.data(), s.fixed.size() * sizeof(float), stream_);
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (layers_[l].softmax_index < 0) continue;
    const std::vector<float>& rows = s.growing[l];
    STEADY_CHECK(int64_t(rows.size()) == s.position * kv_row_floats_);
    if (kv_elem_bytes_ == 4) {
      cuda::CopyToDevice(KvPtr(slot, layers_[l].softmax_index), rows.data(), rows.size() * sizeof(float), stream_);
    } else if (!rows.empty()) {  // rounded to bf16 on the device, as the step's appends are
      DeviceBuffer wide = UploadVector(rows, stream_);
      cuda::FloatToBf16(wide.as<float>(), int64_t(rows.size()),
                        reinterpret_cast<bf16_bits*>(KvPtr(slot, layers_[l].softmax_index)), stream_);
      cuda::SynchronizeStream(stream_);  // before `wide` is freed
    }
  }
  positions_[slot] = s.position;
}

void CudaBackend::Attention(const DeviceLayer& d, cuda::AttnBatch batch, int rows, const int64_t* seg_positions,
                            const std::vector<LongSegment>& long_segments, const float* q, const float* k,
                            const float* v, float* y) {
  if (d.softmax_index >= 0) {
    cuda::KvCacheLayout kv;
    kv.cache = kv_cache_.data();
    kv.bf16 = kv_elem_bytes_ == 2;
    kv.capacity = options_.max_context;
    kv.slot_stride = int64_t(softmax_layers_) * kv.capacity * kv_row_floats_;
    kv.layer_offset = int64_t(d.softmax_index) * kv.capacity * kv_row_floats_;
    kv.partial = split_partial_.as<float>();
    kv.partial_floats = int64_t(split_partial_.bytes() / sizeof(float));
    cuda::SoftmaxAttention(batch, kv, seg_positions, d.softmax_scale, q, k, v, y, stream_);
    return;
  }
  if (d.sliced) {
    cuda::SlicedProjectScores(*blas_, d.sliced_q, q, rows, /*round_to_float=*/false, sliced_scratch_.data(),
                              zq_.as<double>());
    cuda::SlicedProjectScores(*blas_, d.sliced_k, k, rows, /*round_to_float=*/true, sliced_scratch_.data(),
                              zk_.as<double>());
    cuda::SlicedStateLayout st = d.sliced_state;
    st.pool = pool_.as<float>();
    cuda::SlicedAttention(batch, st, d.bandwidth, zq_.as<double>(), zk_.as<double>(), v, y, stream_);
    return;
  }
  cuda::LinearStateLayout st = d.state;
  st.pool = pool_.as<float>();
  st.partial = split_partial_.data();
  st.partial_bytes = int64_t(split_partial_.bytes());
  // Long prefill segments go through the chunked GEMM form; the fused kernel takes the rest (decode
  // rows, short segments) in the same step.
  const bool chunked = !long_segments.empty();
  if (chunked) {
    batch.chunked_min = kChunkedMin;
    const size_t floats = cuda::ChunkedPrefillScratchFloats(batch, st.features);
    if (chunk_scratch_.bytes() < floats * sizeof(float)) chunk_scratch_ = DeviceBuffer(floats * sizeof(float));
    const bool tf32 = options_.cuda_bf16;  // the serving precision; fp32 mode stays exact
    for (const LongSegment& seg : long_segments) {
      if (d.taylor.order > 0) {
        cuda::TaylorPrefillChunked(*blas_, batch, st, d.taylor, seg.slot, seg.row0, seg.n, tf32,
                                   chunk_scratch_.as<float>(), q, k, v, y, stream_);
      } else if (d.slay.nodes > 0) {
        cuda::SlayPrefillChunked(*blas_, batch, st, d.slay, seg.slot, seg.row0, seg.n, tf32,
                                 chunk_scratch_.as<float>(), q, k, v, y, stream_);
      } else {
        cuda::DarkPrefillChunked(*blas_, batch, st, d.dark, seg.slot, seg.row0, seg.n, tf32,
                                 chunk_scratch_.as<float>(), q, k, v, y, stream_);
      }
    }
  }
  if (d.taylor.order > 0) {
    cuda::TaylorAttention(batch, st, d.taylor, q, k, v, y, stream_);
  } else if (d.slay.nodes > 0) {
    cuda::SlayAttention(batch, st, d.slay, q, k, v, y, stream_);
  } else {
    cuda::DarkAttention(batch, st, d.dark, q, k, v, y, stream_);
  }
}

// Where each part of a step's metadata lies in the one host-to-device upload: token ids i32
// [rows], then (8-aligned) positions i64 [rows], slot/row_begin/count i32 [segments] each, segment
// start positions i64 [segments], rows whose logits are wanted i32 [out_rows], and the draws
// (RowSampling [out_rows]) when the step samples.
struct StepLayout {
  int rows = 0, out_rows = 0, segments = 0, max_count = 0;
  bool sample = false;
  size_t ids_at = 0, pos_at = 0, seg_at = 0, segpos_at = 0, out_at = 0, draws_at = 0, bytes = 0;

  StepLayout(int rows, int out_rows, int segments, int max_count, bool sample)
      : rows(rows), out_rows(out_rows), segments(segments), max_count(max_count), sample(sample) {
    auto align8 = [](size_t n) { return (n + 7) / 8 * 8; };
    pos_at = align8(size_t(rows) * 4);
    seg_at = pos_at + size_t(rows) * 8;
    segpos_at = align8(seg_at + size_t(3) * segments * 4);
    out_at = segpos_at + size_t(segments) * 8;
    draws_at = align8(out_at + size_t(out_rows) * 4);
    bytes = draws_at + (sample ? size_t(out_rows) * sizeof(cuda::RowSampling) : 0);
  }
  template <typename T>
  T* At(char* base, size_t offset) const { return reinterpret_cast<T*>(base + offset); }
  template <typename T>
  const T* At(const char* base, size_t offset) const { return reinterpret_cast<const T*>(base + offset); }
};

// Writes the step's metadata into `host` (layout.bytes). Segments past segments.size() (up to
// layout.segments) are padding: one token 0 in the scratch slot `pad_slot` at position 0.
void CudaBackend::FillStep(const StepLayout& layout, const std::vector<Segment>& segments,
                           const std::vector<DrawParams>* draws, char* host) const {
  const int nseg = layout.segments;
  int32_t* ids = layout.At<int32_t>(host, layout.ids_at);
  int64_t* pos = layout.At<int64_t>(host, layout.pos_at);
  int32_t* seg_slot = layout.At<int32_t>(host, layout.seg_at);
  int32_t *seg_begin = seg_slot + nseg, *seg_count = seg_begin + nseg;
  int64_t* seg_pos = layout.At<int64_t>(host, layout.segpos_at);
  int32_t* out_idx = layout.At<int32_t>(host, layout.out_at);
  int row = 0, out = 0;
  const Segment pad_segment{options_.slots, {0}, false};
  for (int i = 0; i < nseg; ++i) {
    const bool pad = i >= int(segments.size());
    const Segment& s = pad ? pad_segment : segments[i];
    const int64_t start = pad ? 0 : positions_[s.slot];
    const int n = int(s.tokens.size());
    seg_slot[i] = s.slot;
    seg_begin[i] = row;
    seg_count[i] = n;
    seg_pos[i] = start;
    for (int t = 0; t < n; ++t) {
      ids[row + t] = s.tokens[t];
      pos[row + t] = start + t;
      if (s.all_logits || t == n - 1) out_idx[out++] = row + t;
    }
    row += n;
  }
  STEADY_CHECK(row == layout.rows && out == layout.out_rows);
  if (layout.sample) {
    auto* params = layout.At<DrawParams>(host, layout.draws_at);
    for (int r = 0; r < layout.out_rows; ++r) params[r] = r < int(draws->size()) ? (*draws)[r] : DrawParams{};
  }
}

// Grows the activation buffers for `rows` rows; a reallocation invalidates the captured graphs
// (they hold the old pointers).
void CudaBackend::ReserveRows(int rows, int out_rows) {
  const ModelConfig& c = model_.config();
  const size_t f = sizeof(float), r = size_t(rows);
  const int q_dim = c.num_heads * c.head_dim, kv_dim = c.num_kv_heads * c.head_dim;
  bool moved = false;
  auto grow = [&](DeviceBuffer& b, size_t bytes) {
    if (b.bytes() >= bytes) return;
    b = DeviceBuffer(bytes);
    moved = true;
  };
  grow(x_, r * c.hidden_size * f);
  grow(h_, r * c.hidden_size * f);
  grow(hb_, r * std::max({c.hidden_size, q_dim, c.intermediate_size}) * sizeof(bf16_bits));
  grow(q_, r * q_dim * f);
  grow(k_, r * kv_dim * f);
  grow(v_, r * kv_dim * f);
  grow(att_, r * q_dim * f);
  grow(proj_, r * c.hidden_size * f);
  grow(gate_, r * c.intermediate_size * f);
  grow(up_, r * c.intermediate_size * f);
  grow(logits_in_, size_t(out_rows) * c.hidden_size * f);
  grow(logits_, size_t(out_rows) * c.vocab_size * f);
  grow(ids_, size_t(out_rows) * sizeof(int32_t));
  for (const DeviceLayer& d : layers_) {  // sliced layers' scores and projection scratch
    if (!d.sliced) continue;
    grow(zq_, r * c.num_heads * sizeof(double));
    grow(zk_, r * c.num_kv_heads * sizeof(double));
    grow(sliced_scratch_, std::max(cuda::SlicedProjectScratchBytes(d.sliced_q, rows),
                                   cuda::SlicedProjectScratchBytes(d.sliced_k, rows)));
  }
  if (moved) graphs_.clear();
}

// Queues the whole step on stream_, reading its metadata from device memory at `dmeta`.
void CudaBackend::EnqueueStep(const StepLayout& layout, const char* dmeta) {
  const ModelConfig& c = model_.config();
  const int hidden = c.hidden_size, hd = c.head_dim, q_dim = c.num_heads * hd, kv_dim = c.num_kv_heads * hd,
            inter = c.intermediate_size, rows = layout.rows, out_rows = layout.out_rows;
  const int32_t* d_ids = layout.At<int32_t>(dmeta, layout.ids_at);
  const int64_t* d_pos = layout.At<int64_t>(dmeta, layout.pos_at);
  const int64_t* d_seg_pos = layout.At<int64_t>(dmeta, layout.segpos_at);
  const cuda::AttnBatch batch =
      MakeBatch(c, layout.At<int32_t>(dmeta, layout.seg_at), layout.segments, layout.max_count);
  float *x = x_.as<float>(), *h = h_.as<float>(), *q = q_.as<float>(), *k = k_.as<float>(), *v = v_.as<float>(),
        *att = att_.as<float>(), *proj = proj_.as<float>(), *gate = gate_.as<float>(), *up = up_.as<float>();
  const float eps = float(c.rms_norm_eps);
  // Prefill segments for the chunked path, read from the host copy of the metadata (never in a
  // graph: graphs hold one-token segments only).
  std::vector<LongSegment> long_segments;
  if (options_.cuda_chunked_prefill && layout.max_count >= kChunkedMin) {
    const int32_t* slot = layout.At<int32_t>(pinned_.data(), layout.seg_at);
    for (int i = 0; i < layout.segments; ++i) {
      const int n = slot[2 * layout.segments + i];
      if (n >= kChunkedMin) long_segments.push_back({slot[i], slot[layout.segments + i], n});
    }
  }

  cuda::GatherRows(embed_.as<float>(), hidden, d_ids, rows, x, stream_);
  for (int l = 0; l < c.num_layers; ++l) {
    const DeviceLayer& d = layers_[l];
    cuda::RmsNorm(x, d.attn_norm.as<float>(), rows, hidden, eps, h, stream_);
    const void* in = GemmInput(h, int64_t(rows) * hidden);
    Linear(in, rows, hidden, d.wq, q_dim, q);
    Linear(in, rows, hidden, d.wk, kv_dim, k);
    Linear(in, rows, hidden, d.wv, kv_dim, v);
    AddBias(d.q_bias, rows, q_dim, q);
    AddBias(d.k_bias, rows, kv_dim, k);
    AddBias(d.v_bias, rows, kv_dim, v);
    if (c.qk_norm) {
      cuda::RmsNorm(q, d.q_norm.as<float>(), rows * c.num_heads, hd, eps, q, stream_);
      cuda::RmsNorm(k, d.k_norm.as<float>(), rows * c.num_kv_heads, hd, eps, k, stream_);
    }
    if (inv_freq_.bytes() > 0) {
      cuda::Rope(q, rows, c.num_heads, hd, d_pos, inv_freq_.as<float>(), stream_);
      cuda::Rope(k, rows, c.num_kv_heads, hd, d_pos, inv_freq_.as<float>(), stream_);
    }
    Attention(d, batch, rows, d_seg_pos, long_segments, q, k, v, att);
    Linear(GemmInput(att, int64_t(rows) * q_dim), rows, q_dim, d.wo, hidden, proj);
    AddBias(d.o_bias, rows, hidden, proj);
    cuda::AddInPlace(x, proj, int64_t(rows) * hidden, stream_);
    cuda::RmsNorm(x, d.mlp_norm.as<float>(), rows, hidden, eps, h, stream_);
    in = GemmInput(h, int64_t(rows) * hidden);
    Linear(in, rows, hidden, d.w_gate, inter, gate);
    Linear(in, rows, hidden, d.w_up, inter, up);
    AddBias(d.gate_bias, rows, inter, gate);
    AddBias(d.up_bias, rows, inter, up);
    cuda::SwiGlu(gate, up, int64_t(rows) * inter, gate, stream_);
    Linear(GemmInput(gate, int64_t(rows) * inter), rows, inter, d.w_down, hidden, proj);
    AddBias(d.down_bias, rows, hidden, proj);
    cuda::AddInPlace(x, proj, int64_t(rows) * hidden, stream_);
  }
  // Final norm and LM head on the rows whose logits are wanted.
  float* sel = logits_in_.as<float>();
  cuda::GatherRows(x, hidden, layout.At<int32_t>(dmeta, layout.out_at), out_rows, sel, stream_);
  cuda::RmsNorm(sel, final_norm_.as<float>(), out_rows, hidden, eps, sel, stream_);
  Linear(GemmInput(sel, int64_t(out_rows) * hidden), out_rows, hidden, lm_head_, c.vocab_size, logits_.as<float>());
  if (layout.sample) {
    cuda::SampleRows(logits_.as<float>(), out_rows, c.vocab_size, layout.At<cuda::RowSampling>(dmeta, layout.draws_at),
                     ids_.as<int32_t>(), stream_);
  }
}

void CudaBackend::Step(const std::vector<Segment>& segments, const std::vector<DrawParams>* draws,
                       std::vector<float>* logits, std::vector<int32_t>* ids) {
  const ModelConfig& c = model_.config();
  int rows = 0, out_rows = 0, max_count = 0;
  // One segment per slot: the kernels update a slot's state from one block (or strip) per segment,
  // so two segments of a slot in one step would race.
  std::vector<bool> seen(options_.slots, false);
  for (const Segment& s : segments) {
    STEADY_CHECK(!s.tokens.empty() && s.slot >= 0 && s.slot < options_.slots);
    STEADY_CHECK(!s.verify);  // no verify segments here yet (Backend::Verifies)
    STEADY_CHECK(!seen[s.slot]);  // a slot in two segments of one step
    seen[s.slot] = true;
    STEADY_CHECK(softmax_layers_ == 0 || positions_[s.slot] + int64_t(s.tokens.size()) <= options_.max_context);
    for (int32_t t : s.tokens) STEADY_CHECK(t >= 0 && t < c.vocab_size);
    rows += int(s.tokens.size());
    out_rows += s.all_logits ? int(s.tokens.size()) : 1;
    max_count = std::max(max_count, int(s.tokens.size()));
  }
  const int nseg = int(segments.size());
  STEADY_CHECK(draws == nullptr || int(draws->size()) == out_rows);
  // Decode steps (one token per segment) run as CUDA graphs at power-of-two batch buckets, padded
  // with one-token segments in the scratch slot; anything else runs as queued launches.
  const bool graph = options_.cuda_graphs && max_count == 1 && nseg <= kMaxGraphBatch;
  int bucket = 1;
  while (graph && bucket < nseg) bucket *= 2;
  const StepLayout layout = graph ? StepLayout(bucket, bucket, bucket, 1, draws != nullptr)
                                  : StepLayout(rows, out_rows, nseg, max_count, draws != nullptr);
  ReserveRows(layout.rows, layout.out_rows);
  if (meta_.bytes() < layout.bytes) {
    meta_ = DeviceBuffer(std::max(layout.bytes, meta_.bytes() * 2));
    graphs_.clear();
  }
  if (pinned_.bytes() < layout.bytes) {
    cuda::SynchronizeStream(stream_);  // a replay may still read the old buffer
    pinned_ = cuda::PinnedBuffer(std::max(layout.bytes, pinned_.bytes() * 2));
    graphs_.clear();
  }
  FillStep(layout, segments, draws, pinned_.data());
  if (!graph) {
    cuda::CopyToDeviceAsync(meta_.data(), pinned_.data(), layout.bytes, stream_);
    EnqueueStep(layout, meta_.as<char>());
  } else {
    GraphSlot& g = graphs_[{bucket, layout.sample}];
    if (g.graph.empty() && g.eager_runs >= 1) {
      // Captured on a bucket's second use: the first ran eagerly and set up what capture cannot
      // (kernel attributes, cuBLAS's first-call work).
      g.graph = cuda::Graph::Capture(stream_, [&] {
        cuda::CopyToDeviceAsync(meta_.data(), pinned_.data(), layout.bytes, stream_);
        EnqueueStep(layout, meta_.as<char>());
      });
    }
    if (g.graph.empty()) {
      ++g.eager_runs;
      cuda::CopyToDeviceAsync(meta_.data(), pinned_.data(), layout.bytes, stream_);
      EnqueueStep(layout, meta_.as<char>());
    } else {
      g.graph.Launch(stream_);
    }
  }
  for (const Segment& s : segments) positions_[s.slot] += int64_t(s.tokens.size());
  if (logits != nullptr) {
    logits->resize(size_t(out_rows) * c.vocab_size);
    cuda::CopyToHost(logits->data(), logits_.data(), logits->size() * sizeof(float), stream_);
  }
  if (ids != nullptr) {
    ids->resize(out_rows);
    cuda::CopyToHost(ids->data(), ids_.data(), size_t(out_rows) * sizeof(int32_t), stream_);
  }
  // pinned_ is rewritten by the next step: wait until this one has read it.
  if (logits == nullptr && ids == nullptr) cuda::SynchronizeStream(stream_);
}

void CudaBackend::Forward(const std::vector<Segment>& segments, std::vector<float>* logits) {
  Step(segments, nullptr, logits, nullptr);
}

void CudaBackend::ForwardSample(const std::vector<Segment>& segments, const std::vector<DrawParams>& draws,
                                std::vector<int32_t>* ids) {
  Step(segments, &draws, nullptr, ids);
}

// n values in [-2, 2) on the device (xorshift: cheap for the hundreds of millions a long prompt
// needs, and not zeros, which can time faster than real data).
DeviceBuffer RandomRows(size_t n, uint64_t seed, cudaStream_t stream) {
  std::vector<float> x(n);
  uint64_t r = seed * 0x9e3779b97f4a7c15ull + 1;
  for (float& e : x) {
    r ^= r << 13;
    r ^= r >> 7;
    r ^= r << 17;
    e = float(int64_t(r >> 40) - (int64_t(1) << 23)) * (2.0f / float(1 << 23));
  }
  return UploadVector(x, stream);
}

double CudaBackend::TimeAttention(int layer, int batch, int reps) {
  const ModelConfig& c = model_.config();
  STEADY_CHECK(batch >= 1 && batch <= options_.slots && reps >= 1);
  const int hd = c.head_dim;
  ReserveRows(batch, batch);  // the sliced layers' score buffers
  const uint64_t seed = uint64_t(layer) * 7919 + batch;
  DeviceBuffer q = RandomRows(size_t(batch) * c.num_heads * hd, seed, stream_),
               k = RandomRows(size_t(batch) * c.num_kv_heads * hd, seed + 1, stream_),
               v = RandomRows(size_t(batch) * c.num_kv_heads * hd, seed + 2, stream_),
               y(size_t(batch) * c.num_heads * hd * sizeof(float));
  // The segment table: slot s, row s, one token, at the slot's position (rows are rewritten in place).
  std::vector<int32_t> table(3 * size_t(batch));
  std::vector<int64_t> seg_pos(batch);
  for (int s = 0; s < batch; ++s) {
    table[s] = s;
    table[batch + s] = s;
    table[2 * batch + s] = 1;
    seg_pos[s] = std::min<int64_t>(positions_[s], options_.max_context - 1);
  }
  DeviceBuffer dtable = UploadVector(table, stream_), dpos = UploadVector(seg_pos, stream_);
  const cuda::AttnBatch b = MakeBatch(c, dtable.as<int32_t>(), batch, 1);
  return cuda::MedianSeconds(
      [&] {
        Attention(layers_[layer], b, batch, dpos.as<int64_t>(), {}, q.as<float>(), k.as<float>(), v.as<float>(),
                  y.as<float>());
      },
      reps, stream_);
}

double CudaBackend::TimePrefillAttention(int layer, int64_t tokens, int reps) {
  const ModelConfig& c = model_.config();
  STEADY_CHECK(tokens >= 1 && tokens <= (int64_t(1) << 30) && reps >= 1);
  STEADY_CHECK(softmax_layers_ == 0 || tokens <= options_.max_context);
  const int n = int(tokens), hd = c.head_dim;
  const DeviceLayer& d = layers_[layer];
  // A sliced layer's score buffers (every activation buffer grows with them: gigabytes at 128K rows).
  if (d.sliced) ReserveRows(n, 1);
  const uint64_t seed = uint64_t(layer) * 7919 + uint64_t(n);
  DeviceBuffer q = RandomRows(size_t(n) * c.num_heads * hd, seed, stream_),
               k = RandomRows(size_t(n) * c.num_kv_heads * hd, seed + 1, stream_),
               v = RandomRows(size_t(n) * c.num_kv_heads * hd, seed + 2, stream_),
               y(size_t(n) * c.num_heads * hd * sizeof(float));
  DeviceBuffer dtable = UploadVector(std::vector<int32_t>{0, 0, n}, stream_),
               dpos = UploadVector(std::vector<int64_t>{0}, stream_);
  const cuda::AttnBatch b = MakeBatch(c, dtable.as<int32_t>(), 1, n);
  const bool linear = d.softmax_index < 0 && !d.sliced;
  std::vector<LongSegment> long_segments;
  if (linear && options_.cuda_chunked_prefill && n >= kChunkedMin) long_segments.push_back({0, 0, n});
  return cuda::MedianSeconds(
      [&] {
        Attention(d, b, n, dpos.as<int64_t>(), long_segments, q.as<float>(), k.as<float>(), v.as<float>(),
                  y.as<float>());
      },
      reps, stream_);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(const Model& model, const BackendOptions& options) {
  if (!cuda::CudaDeviceAvailable()) {
    return absl::FailedPreconditionError("--device cuda: no CUDA device is visible");
  }
  auto backend = std::make_unique<CudaBackend>(model, options);
  if (absl::Status s = backend->Init(); !s.ok()) return s;
  return backend;
}

}  // namespace steady
