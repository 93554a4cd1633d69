// CUDA compute over plain device buffers and shapes: the same ops and layouts as kernels/cpu/ops.h
// (row-major throughout). Every pointer is a device pointer; every op is enqueued on `stream` and
// returns without synchronizing. Plain C++ header: callers need no CUDA headers. Model code calls
// these launchers and never writes <<< >>>.
#ifndef STEADY_KERNELS_CUDA_OPS_H_
#define STEADY_KERNELS_CUDA_OPS_H_

#include <cstddef>
#include <cstdint>

#include "kernels/sliced_bins_math.h"

struct CUstream_st;
typedef CUstream_st* cudaStream_t;  // the same declaration as cuda_runtime_api.h

namespace steady::cuda {

// bf16 values are passed as their raw 16-bit patterns (the top half of an fp32), so callers need no
// CUDA headers; conversion rounds to nearest even.
using bf16_bits = uint16_t;

// --- elementwise.cu ---------------------------------------------------------------------------

// out[r, :] = x[r, :] / rms(x[r, :]) * weight; rms = sqrt(mean(x^2) + eps); fp32 accumulation, one
// block per row. out may alias x.
void RmsNorm(const float* x, const float* weight, int rows, int dim, float eps, float* out,
             cudaStream_t stream);
// The same with bf16 activations (input and output), fp32 weight and fp32 accumulation.
void RmsNormBf16(const bf16_bits* x, const float* weight, int rows, int dim, float eps, bf16_bits* out,
                 cudaStream_t stream);

// Rotary embedding, Hugging Face Llama layout (rotate_half: pairs (i, i + dim/2)), in place.
// x [rows, heads, dim]; positions[rows]; inv_freq[dim/2]. The angle position * inv_freq is formed
// and reduced mod 2*pi in fp64 (positions reach 1e6+, where an fp32 product has lost the phase),
// then sin/cos are taken in fp32: results stay within a few fp32 ulps of the CPU reference, which
// uses fp64 for the angle too.
void Rope(float* x, int rows, int heads, int dim, const int64_t* positions, const float* inv_freq,
          cudaStream_t stream);

// out[i] = silu(gate[i]) * up[i].
void SwiGlu(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream);

// x[i] += y[i].
void AddInPlace(float* x, const float* y, int64_t n, cudaStream_t stream);
// y[r, i] += bias[i] for r < rows, i < n: a projection's bias after its GEMM (Qwen2's q, k and v;
// Llama's with attention_bias or mlp_bias), as the CPU adds it.
void AddBiasRows(float* y, const float* bias, int rows, int n, cudaStream_t stream);

// out[r, :] = table[ids[r], :]; table [vocab, dim]. ids must lie in [0, vocab) (checked by the
// caller on the host, as on the CPU path).
void GatherRows(const float* table, int dim, const int32_t* ids, int rows, float* out,
                cudaStream_t stream);

// Conversions between fp32 and bf16 (round to nearest even).
void FloatToBf16(const float* x, int64_t n, bf16_bits* out, cudaStream_t stream);
void Bf16ToFloat(const bf16_bits* x, int64_t n, float* out, cudaStream_t stream);

// --- gemm.cu ----------------------------------------------------------------------------------

// A cuBLAS handle bound to one stream: one per stream, never shared across threads. Move-only.
class Blas {
 public:
  explicit Blas(cudaStream_t stream);
  ~Blas();
  Blas(Blas&& o) noexcept;
  Blas& operator=(Blas&& o) noexcept;
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  cudaStream_t stream() const { return stream_; }
  void* handle() const { return handle_; }  // a cublasHandle_t

 private:
  static constexpr size_t kWorkspaceBytes = size_t(32) << 20;
  void Release();
  void* handle_ = nullptr;
  void* workspace_ = nullptr;  // cuBLAS workspace (device memory)
  cudaStream_t stream_ = nullptr;
};

// y[rows, out] = x[rows, in] * w[out, in]^T (w in the PyTorch Linear layout), fp32 throughout
// (cublasSgemm, no TF32).
void MatMulNT(Blas& blas, const float* x, int rows, int in, const float* w, int out, float* y);
// The same in fp64 (cublasDgemm): the sliced mechanisms' score projections at reference precision.
void MatMulNT(Blas& blas, const double* x, int rows, int in, const double* w, int out, double* y);
// The same with bf16 x and w, fp32 y and fp32 accumulation (cublasGemmEx, tensor cores).
void MatMulNTBf16(Blas& blas, const bf16_bits* x, int rows, int in, const bf16_bits* w, int out,
                  float* y);

// Row-major C[m, n] = op(A)[m, k] op(B)[k, n] + beta C, `batch` times (strides in elements between
// consecutive A, B and C); op transposes when trans_*. fp32 storage; tf32: tensor cores with TF32
// inputs (about 1e-3 relative), else fp32 arithmetic.
void GemmBatched(Blas& blas, bool trans_a, bool trans_b, int m, int n, int k, const float* a, int64_t stride_a,
                 const float* b, int64_t stride_b, float beta, float* c, int64_t stride_c, int batch, bool tf32);

// --- attention.cu -----------------------------------------------------------------------------
// Attention over a batch of segments against per-slot state in device memory. Segment s covers
// rows [row_begin[s], row_begin[s] + count[s]) of q [rows, heads, head_dim], k and v [rows,
// kv_heads, dim] and y [rows, heads, value_dim], and continues the state of slot slot[s]; a step's
// segments name distinct slots (the caller checks). A decode step is B one-row segments in any mix of
// slots: one launch per layer. Segments of several rows (prefill) are scanned token by token through
// the same per-token update (exact, not the chunked tensor-core form). Segments may be of any length:
// only softmax's grids have a token dimension, and they stride over it.

struct AttnBatch {
  const int32_t* slot;       // [segments], device
  const int32_t* row_begin;  // [segments], device
  const int32_t* count;      // [segments], device
  int segments = 0;
  int max_count = 0;         // max over count[] (host-side copy, for the launch grid)
  int chunked_min = 0;       // > 0: the fused linear-state kernel skips segments of at least this
                             // many rows (they go through the chunked prefill below)
  int heads = 0, kv_heads = 0, head_dim = 0, value_dim = 0;
};

// Where one layer's fixed linear-attention state lies in the pool, in model/decoder/state_pool.h's layout:
// kv head g of slot s starts at pool + s * slot_floats + layer_offset + g * head_stride, its
// feature sums S[r][d] at + r * s_row + d, z[r] at + z_off + r * z_stride, the Kahan compensations
// (same sub-layout) at + comp_off (comp_off < 0: plain sums), and one extra float at + extra_off
// (dark's running max of key logits; extra_off < 0: none).
struct LinearStateLayout {
  float* pool = nullptr;
  int64_t slot_floats = 0, layer_offset = 0;
  int features = 0;
  int64_t head_stride = 0, s_row = 0, z_off = 0, z_stride = 0, comp_off = -1, extra_off = -1;
  // Device scratch for a decode step split over strips of state rows (partial readouts, merged by a
  // second kernel): with few (segment, kv head) pairs, e.g. batch 1, one block per pair would leave
  // most of the GPU idle. LinearPartialBytes(shape) lets every step split as far as it wants; null:
  // never split.
  void* partial = nullptr;
  int64_t partial_bytes = 0;
};
int64_t LinearPartialBytes(const AttnBatch& shape);

// taylor: the monomial tables of model/mechanisms/taylor.h flattened over every degree. Row r of
// degree p >= 1 is parent[r] (a row of degree p - 1, global index) times x[last_index[r]]; row 0
// is the constant 1. Keys are weighted by key_scale[r] = alpha_p, queries by query_scale[r] (the
// monomial's multiplicity). Device arrays of `features` entries.
constexpr int kTaylorMaxOrder = 8;
struct TaylorTables {
  int order = 0;
  int degree_offset[kTaylorMaxOrder + 1] = {};  // rows of degree p: [degree_offset[p], degree_offset[p+1])
  const int32_t* parent = nullptr;
  const int32_t* last_index = nullptr;
  const float* key_scale = nullptr;
  const float* query_scale = nullptr;
};

// slay (model/mechanisms/slay.h): psi[r, a, i] = poly_a(u) * prf_{r,i}(u). Device arrays.
struct SlayTables {
  int nodes = 0, anchors = 0, features = 0;  // R, P, M
  float delta = 0;
  const float* anchor_dirs = nullptr;  // [P, head_dim]
  const float* omega = nullptr;        // [R, kv_heads, head_dim, M]
  const float* node_s = nullptr;       // [R]
  const float* node_w = nullptr;       // [R]
};

// dark / performer (model/mechanisms/dark.h): logits l_f = sqrt(scale) w_f.x - scale |M x|^2 / 2.
struct DarkTables {
  int features = 0, rank = 0;
  float scale = 0, delta = 0;
  const float* M = nullptr;  // [kv_heads, rank, head_dim]
  const float* W = nullptr;  // [kv_heads, features, head_dim]
};

// Largest group (heads / kv_heads) and value_dim the linear-state kernels take.
constexpr int kLinearMaxGroup = 8;
constexpr int kLinearMaxValueDim = 159;
// Dynamic shared memory one block of the linear-state kernels needs (features of the key and of
// the group's queries, plus the reduction buffer); compare with MaxSharedBytesPerBlock().
size_t LinearAttentionSharedBytes(const AttnBatch& b, int features, int scratch_floats);
// The per-block opt-in shared memory limit of the current device.
size_t MaxSharedBytesPerBlock();

// Scratch floats per block the taylor kernel needs beside the features: the vectors, and room for
// its readout partials in fp64 (it sums in fp64 as the CPU does).
int TaylorScratchFloats(const AttnBatch& b);

void TaylorAttention(const AttnBatch& b, const LinearStateLayout& st, const TaylorTables& t,
                     const float* q, const float* k, const float* v, float* y, cudaStream_t stream);
void SlayAttention(const AttnBatch& b, const LinearStateLayout& st, const SlayTables& t,
                   const float* q, const float* k, const float* v, float* y, cudaStream_t stream);
void DarkAttention(const AttnBatch& b, const LinearStateLayout& st, const DarkTables& t,
                   const float* q, const float* k, const float* v, float* y, cudaStream_t stream);
// Scratch floats per block the slay and dark kernels need beside the features (for
// LinearAttentionSharedBytes).
int SlayScratchFloats(const AttnBatch& b, const SlayTables& t);
int DarkScratchFloats(const AttnBatch& b, const DarkTables& t);

// Chunked prefill of one segment (rows [row0, row0 + n) of q/k/v/y, continuing slot `slot`) for
// taylor, slay or dark (below), in chunks of kPrefillChunk tokens. Per chunk, batched over the kv heads: the
// features phi(K), phi(Q) and [V 1] into `scratch`, the carried state S (+ compensation) gathered
// dense, then as GEMMs Num = phi(Q) S + mask(phi(Q) phi(K)^T) [V 1] (y = Num[:dv] / Num[dv] with the
// mechanism's guard) and dS = phi(K)^T [V 1], Kahan-added to the state. The same function as the
// token-by-token scan (the features reproduce the kernel exactly). tf32: the GEMMs on tensor cores.
constexpr int kPrefillChunk = 128;
size_t ChunkedPrefillScratchFloats(const AttnBatch& shape, int features);
void TaylorPrefillChunked(Blas& blas, const AttnBatch& shape, const LinearStateLayout& st, const TaylorTables& t,
                          int slot, int row0, int n, bool tf32, float* scratch, const float* q, const float* k,
                          const float* v, float* y, cudaStream_t stream);
void SlayPrefillChunked(Blas& blas, const AttnBatch& shape, const LinearStateLayout& st, const SlayTables& t,
                        int slot, int row0, int n, bool tf32, float* scratch, const float* q, const float* k,
                        const float* v, float* y, cudaStream_t stream);
// dark: the same with the running max of key logits. Each chunk's keys get the CPU Chunked's
// references (c_j, the running max after key j): A's entries are weighted by exp(c_j - c_t), the
// carried term by exp(c carried - c_t), the state is rescaled once to the chunk's final max and
// each key added with exp(c_j - c_end); the guard sees the canonical denominator.
void DarkPrefillChunked(Blas& blas, const AttnBatch& shape, const LinearStateLayout& st, const DarkTables& t,
                        int slot, int row0, int n, bool tf32, float* scratch, const float* q, const float* k,
                        const float* v, float* y, cudaStream_t stream);

// softmax with a KV cache preallocated per slot: rows [capacity, kv_heads, head_dim + value_dim]
// for slot s and this layer at cache + s * slot_stride + layer_offset elements (the CPU cache's row
// layout), in fp32 or bf16 (`bf16`: half the bytes a decode step reads, as serving stacks keep it;
// keys and values are rounded to bf16 when appended, the arithmetic stays fp32).
// positions[s] is the slot's length before the segment; the caller keeps position + count <=
// capacity. Appends the segment's keys and values, then attends causally.
// Decode steps split each session's context over several blocks (flash-decoding) when `partial`
// has room for the split results: segments * kv_heads * splits * group * (value_dim + 2) floats.
struct KvCacheLayout {
  void* cache = nullptr;  // float or bf16 elements
  bool bf16 = false;
  int64_t slot_stride = 0, layer_offset = 0, capacity = 0;
  float* partial = nullptr;
  int64_t partial_floats = 0;
};
// Floats of KvCacheLayout::partial that let every decode step split as far as it wants.
int64_t SoftmaxPartialFloats(const AttnBatch& shape);
void SoftmaxAttention(const AttnBatch& b, const KvCacheLayout& kv, const int64_t* positions, float scale,
                      const float* q, const float* k, const float* v, float* y, cudaStream_t stream);

// --- sliced.cu --------------------------------------------------------------------------------
// sliced_relu and sliced_relu_bump with the bucketed decoder (model/mechanisms/sliced_relu.h,
// sliced_bins.h). A token's heads are first projected to one score per head (queries) and per kv
// head (keys); the attention then keeps, per kv head, a histogram of the keys' moments over z.

// One side's score projection: queries (groups = heads) or keys (groups = kv_heads), input width =
// groups * head_dim. Weights are device arrays in fp64 when `fp64` (the reference precision the
// tests pin the kernel with) or fp32 (serving), in the PyTorch Linear layout.
struct SlicedProjector {
  enum Kind { kMlp, kLinear, kNone } kind = kMlp;  // mlp: Linear + GELU (erf) + Linear; none: z = x
  int groups = 0, width = 0;
  bool fp64 = false;
  const void* fc1_weight = nullptr;  // [width, width] (mlp)
  const void* fc1_bias = nullptr;    // [width] (mlp)
  const void* out_weight = nullptr;  // [groups, width] (mlp, linear)
  const void* out_bias = nullptr;    // [groups] (mlp, linear)
};
// Device scratch SlicedProjectScores needs for `rows` tokens.
size_t SlicedProjectScratchBytes(const SlicedProjector& p, int rows);
// z [rows, groups] = the scores of x [rows, width], in fp64; round_to_float rounds them to fp32
// values (keys: the CPU path rounds key scores to the state's type). Enqueued on blas.stream().
void SlicedProjectScores(Blas& blas, const SlicedProjector& p, const float* x, int rows, bool round_to_float,
                         void* scratch, double* z);

// Where one layer's histograms lie in the pool (StatePool's layout): kv head g of slot s at
// pool + s * slot_floats + layer_offset + g * bins.HeadFloats().
struct SlicedStateLayout {
  float* pool = nullptr;
  int64_t slot_floats = 0, layer_offset = 0;
  SlicedBinsLayout bins;
};
// One block per (segment, kv head), scanning the segment token by token as the CPU's Step does:
// insert the key (zk [rows, kv_heads]) into its bin, then one pass over the bins in z order reads
// every query point of the group (zq [rows, heads]) with the shared arithmetic of
// kernels/sliced_bins_math.h, in fp64. bandwidth [heads] (device): the bump kernel; null: the
// centered ReLU kernel.
void SlicedAttention(const AttnBatch& b, const SlicedStateLayout& st, const float* bandwidth, const double* zq,
                     const double* zk, const float* v, float* y, cudaStream_t stream);

// --- sampling.cu ------------------------------------------------------------------------------
// One row's sampling parameters (model/sampling/sampling.h's SamplingParams without the repetition
// penalty). counter distinguishes the draws of one seed (e.g. the session's position).
struct RowSampling {
  float temperature = 0;  // 0: greedy (first maximum)
  int top_k = 0;          // 0: off
  float top_p = 1;        // 1: off
  uint64_t seed = 0;
  uint64_t counter = 0;
};
// ids[r] = a token drawn from logits [rows, vocab] row r under params[r] (device arrays).
void SampleRows(const float* logits, int rows, int vocab, const RowSampling* params, int32_t* ids,
                cudaStream_t stream);

}  // namespace steady::cuda

#endif  // STEADY_KERNELS_CUDA_OPS_H_
