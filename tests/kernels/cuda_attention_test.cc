// The attention kernels of kernels/cuda/attention.cu and the batched GEMM of the chunked prefill,
// called directly and checked against references built on kernels/cpu: the CPU's own state update
// and readout (kernels/cpu/state_update.h, as model/mechanisms/taylor.cc calls them) and softmax
// over a KV cache (kernels/cpu/kv_attention.h). They cover what the model-level tests
// (tests/model/backend/backend_test.cc) leave out: head_dim 64 and 128, group 8, more than 48 KB of
// shared memory per block, 4K+ contexts, a segment longer than a grid's 65,535 extent, a bf16 KV
// cache, and decode steps split over strips of state rows (with and without the split buffer).
//
// Taylor's features are products alone and the kernel rounds each product before its compensated
// add, exactly the CPU's operations: the state must equal the CPU's bit for bit, over thousands of
// tokens, and each output is within 2 ulps (both read the state in fp64, in another order; an fp32
// readout, as the kernel once had, is off by ~1e-7 of the largest output and fails).
//
// Tests named *Long* are the slow ones (long contexts): the sanitizer runs of scripts/gpu_session.sh
// leave them out.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/kv_attention.h"
#include "kernels/cpu/state_update.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/ops.h"
#include "tests/kernels/cuda_test_util.h"

namespace steady::cuda {
namespace {

using Steps = std::vector<std::vector<std::pair<int, int>>>;  // per step: (slot, tokens) per segment

// Elements whose bits differ.
size_t DifferingBits(const std::vector<float>& a, const std::vector<float>& b) {
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

// A step's segment table on the device (slot[], row_begin[], count[]) and its AttnBatch.
struct StepTable {
  DeviceBuffer table;
  AttnBatch batch;
  int rows = 0;
};

StepTable MakeStep(const std::vector<std::pair<int, int>>& segments, int heads, int kv_heads, int head_dim) {
  std::vector<int32_t> t;
  int rows = 0, max_count = 0;
  for (const auto& [slot, n] : segments) t.push_back(slot);
  for (const auto& [slot, n] : segments) {
    t.push_back(rows);
    rows += n;
    max_count = std::max(max_count, n);
  }
  for (const auto& [slot, n] : segments) t.push_back(n);
  StepTable s;
  s.table = Upload(t);
  s.rows = rows;
  const int nseg = int(segments.size());
  s.batch.slot = s.table.as<int32_t>();
  s.batch.row_begin = s.batch.slot + nseg;
  s.batch.count = s.batch.slot + 2 * nseg;
  s.batch.segments = nseg;
  s.batch.max_count = max_count;
  s.batch.heads = heads;
  s.batch.kv_heads = kv_heads;
  s.batch.head_dim = head_dim;
  s.batch.value_dim = head_dim;
  return s;
}

// --- taylor -------------------------------------------------------------------------------------

// Taylor's monomial tables, built as model/mechanisms/taylor.h does (this binary links no model
// code): row 0 is the constant; each row of degree p >= 1 extends a row of degree p - 1 by an index
// at least its last; keys are weighted by alpha_p = scale^p / p!, queries by the multiplicity.
struct TaylorHost {
  int dk = 0, order = 0, m = 0;
  TaylorTables tables;
  std::vector<int32_t> parent, last;
  std::vector<float> key_scale, query_scale;
  DeviceBuffer d_parent, d_last, d_key, d_query;
};

double Factorial(int n) { return n <= 1 ? 1.0 : n * Factorial(n - 1); }

void BuildTaylor(int dk, int order, double scale, TaylorHost* t) {
  t->dk = dk;
  t->order = order;
  std::vector<std::vector<int>> rows = {{}};
  t->parent = {0};
  t->last = {0};
  t->key_scale = {1.0f};
  t->query_scale = {1.0f};
  int begin = 0, end = 1;
  for (int p = 1; p < order; ++p) {
    t->tables.degree_offset[p] = int(rows.size());
    for (int r = begin; r < end; ++r) {
      for (int i = rows[r].empty() ? 0 : rows[r].back(); i < dk; ++i) {
        std::vector<int> mono = rows[r];
        mono.push_back(i);
        double multiplicity = Factorial(p);
        for (size_t a = 0; a < mono.size();) {
          size_t b = a;
          while (b < mono.size() && mono[b] == mono[a]) ++b;
          multiplicity /= Factorial(int(b - a));
          a = b;
        }
        rows.push_back(mono);
        t->parent.push_back(r);
        t->last.push_back(i);
        t->query_scale.push_back(float(multiplicity));
        t->key_scale.push_back(float(std::pow(scale, p) / Factorial(p)));
      }
    }
    begin = end;
    end = int(rows.size());
  }
  t->m = int(rows.size());
  t->tables.order = order;
  t->tables.degree_offset[order] = t->m;
  t->d_parent = Upload(t->parent);
  t->d_last = Upload(t->last);
  t->d_key = Upload(t->key_scale);
  t->d_query = Upload(t->query_scale);
  t->tables.parent = t->d_parent.as<int32_t>();
  t->tables.last_index = t->d_last.as<int32_t>();
  t->tables.key_scale = t->d_key.as<float>();
  t->tables.query_scale = t->d_query.as<float>();
}

// The features in fp32, in the kernel's order: each row its parent times one coordinate, then the
// weights.
std::vector<float> TaylorFeatures(const TaylorHost& t, const float* x, const std::vector<float>& weight) {
  std::vector<float> f(t.m);
  f[0] = 1.0f;
  for (int r = 1; r < t.m; ++r) f[r] = f[t.parent[r]] * x[t.last[r]];
  for (int r = 0; r < t.m; ++r) f[r] *= weight[r];
  return f;
}

// One token of one kv head, as model/mechanisms/taylor.cc's Step: the key added to the state with the
// CPU's kernels, then (when `y`) each query head's readout in fp64. sums/comps: [m, dv + 1].
void TaylorToken(const TaylorHost& t, int group, const float* k, const float* q, const float* v, float* sums,
                 float* comps, float* y) {
  const int dv = t.dk, w = dv + 1;
  const std::vector<float> fk = TaylorFeatures(t, k, t.key_scale);
  for (int r = 0; r < t.m; ++r) {
    float* row = sums + size_t(r) * w;
    if (comps != nullptr) {
      float* comp = comps + size_t(r) * w;
      cpu::KahanAxpy(fk[r], v, row, comp, dv);
      KahanAdd(row[dv], comp[dv], fk[r]);
    } else {
      cpu::Axpy(fk[r], v, row, dv);
      row[dv] += fk[r];
    }
  }
  if (y == nullptr) return;
  std::vector<float> gq(size_t(group) * t.m);
  for (int i = 0; i < group; ++i) {
    const std::vector<float> f = TaylorFeatures(t, q + size_t(i) * t.dk, t.query_scale);
    std::copy(f.begin(), f.end(), gq.begin() + size_t(i) * t.m);
  }
  std::vector<double> acc(size_t(group) * w, 0.0);
  for (int r = 0; r < t.m; ++r) {
    cpu::ReadRowGroup(gq.data() + r, t.m, group, sums + size_t(r) * w, comps ? comps + size_t(r) * w : nullptr,
                      acc.data(), w);
  }
  for (int i = 0; i < group; ++i) {
    const double den = acc[size_t(i) * w + dv];
    const double guarded = std::fabs(den) >= 1e-30 ? den : (den < 0 ? -1e-30 : 1e-30);
    for (int e = 0; e < dv; ++e) y[size_t(i) * dv + e] = float(acc[size_t(i) * w + e] / guarded);
  }
}

struct TaylorCase {
  const char* name;
  int head_dim, heads, kv_heads, order;
  bool kahan;
};
void PrintTo(const TaylorCase& c, std::ostream* os) { *os << c.name; }

struct SoftmaxCase {
  const char* name;
  int head_dim, heads, kv_heads;
  bool bf16;
};
void PrintTo(const SoftmaxCase& c, std::ostream* os) { *os << c.name; }

class CudaAttention : public CudaOpsTest {
 protected:
  void RunSoftmax(const SoftmaxCase& c, int prefill, int decode, const std::function<bool(int, int)>& check);
  // Runs `steps` through TaylorAttention twice (with the split buffer, and without: every decode
  // step of few segments splits over strips of rows in the first) and through the CPU reference;
  // outputs within 2 ulps at the rows `check` selects (all by default), states bit for bit at the end.
  void RunTaylor(const TaylorCase& c, const Steps& steps, const std::function<bool(int, int, int)>& check = nullptr) {
    const int dk = c.head_dim, dv = dk, group = c.heads / c.kv_heads, slots = 3;
    TaylorHost t;
    BuildTaylor(dk, c.order, 1.0 / std::sqrt(double(dk)), &t);
    const int w = dv + 1;
    const int64_t head_floats = int64_t(t.m) * w, slot_floats = (c.kahan ? 2 : 1) * c.kv_heads * head_floats;
    LinearStateLayout st;
    st.slot_floats = slot_floats;
    st.features = t.m;
    st.head_stride = head_floats;
    st.s_row = w;
    st.z_off = dv;
    st.z_stride = w;
    st.comp_off = c.kahan ? c.kv_heads * head_floats : -1;
    AttnBatch shape;
    shape.heads = c.heads;
    shape.kv_heads = c.kv_heads;
    shape.head_dim = dk;
    shape.value_dim = dv;
    const size_t smem = LinearAttentionSharedBytes(shape, t.m, TaylorScratchFloats(shape));
    std::printf("%s: %d features, %zu bytes of shared memory per block (device allows %zu)\n", c.name, t.m, smem,
                MaxSharedBytesPerBlock());
    ASSERT_LE(smem, MaxSharedBytesPerBlock());
    std::vector<float> host(size_t(slots) * slot_floats, 0.0f);
    DeviceBuffer split_pool = Upload(host), whole_pool = Upload(host), partial(size_t(LinearPartialBytes(shape)));
    for (const auto& step : steps) {
      const StepTable s = MakeStep(step, c.heads, c.kv_heads, dk);
      const auto q = Randn(size_t(s.rows) * c.heads * dk), k = Randn(size_t(s.rows) * c.kv_heads * dk),
                 v = Randn(size_t(s.rows) * c.kv_heads * dv);
      std::vector<float> want(size_t(s.rows) * c.heads * dv, 0.0f);
      std::vector<char> checked(s.rows, 0);
      int row = 0;
      for (const auto& [slot, n] : step) {
        for (int tok = 0; tok < n; ++tok, ++row) {
          checked[row] = check == nullptr || check(slot, tok, n);
          for (int g = 0; g < c.kv_heads; ++g) {
            float* sums = host.data() + size_t(slot) * slot_floats + g * head_floats;
            TaylorToken(t, group, k.data() + (size_t(row) * c.kv_heads + g) * dk,
                        q.data() + (size_t(row) * c.heads + size_t(g) * group) * dk,
                        v.data() + (size_t(row) * c.kv_heads + g) * dv, sums,
                        c.kahan ? sums + c.kv_heads * head_floats : nullptr,
                        checked[row] ? want.data() + (size_t(row) * c.heads + size_t(g) * group) * dv : nullptr);
          }
        }
      }
      DeviceBuffer dq = Upload(q), dk_ = Upload(k), dv_ = Upload(v);
      for (const bool split : {true, false}) {
        LinearStateLayout layout = st;
        layout.pool = (split ? split_pool : whole_pool).as<float>();
        layout.partial = split ? partial.data() : nullptr;
        layout.partial_bytes = split ? int64_t(partial.bytes()) : 0;
        DeviceBuffer dy = Poisoned<float>(want.size());
        TaylorAttention(s.batch, layout, t.tables, dq.as<float>(), dk_.as<float>(), dv_.as<float>(), dy.as<float>(),
                        stream_);
        Sync();
        std::vector<float> got = Download<float>(dy, want.size()), ref = want;
        for (int r = 0; r < s.rows; ++r) {
          if (checked[r]) continue;
          std::fill(got.begin() + size_t(r) * c.heads * dv, got.begin() + size_t(r + 1) * c.heads * dv, 0.0f);
          std::fill(ref.begin() + size_t(r) * c.heads * dv, ref.begin() + size_t(r + 1) * c.heads * dv, 0.0f);
        }
        ExpectClose(got, ref, [](size_t, float r) { return 2.4e-7 * std::fabs(double(r)) + 1e-37; },
                    split ? "taylor output (split decode)" : "taylor output");
      }
    }
    for (const DeviceBuffer* pool : {&split_pool, &whole_pool}) {
      const std::vector<float> got = Download<float>(*pool, host.size());
      EXPECT_EQ(DifferingBits(got, host), 0u) << "state floats differing from the CPU's, of " << host.size()
                                              << (pool == &split_pool ? " (split decode)" : "");
    }
  }
};

class CudaTaylorShapes : public CudaAttention, public ::testing::WithParamInterface<TaylorCase> {};

// A prompt, a one-token and a short segment in one step (the scan), then decode steps of the three
// slots together and of one alone (split over strips of rows where the state has enough).
TEST_P(CudaTaylorShapes, MatchesTheCpuStateBitForBit) {
  RunTaylor(GetParam(), {{{0, 37}, {1, 1}, {2, 5}},
                         {{2, 1}, {0, 1}, {1, 1}},
                         {{1, 1}, {2, 1}, {0, 1}},
                         {{1, 1}},
                         {{1, 1}},
                         {{0, 1}}});
}

INSTANTIATE_TEST_SUITE_P(
    CudaAttention, CudaTaylorShapes,
    ::testing::Values(TaylorCase{"hd64_group4_order3", 64, 8, 2, 3, true},  // 60 KB of shared memory: the opt-in
                      TaylorCase{"hd64_group8_order2", 64, 16, 2, 2, true},
                      TaylorCase{"hd128_group8_order2", 128, 8, 1, 2, true},  // 129 columns, 8 queries
                      TaylorCase{"hd128_group4_order2_plain", 128, 8, 2, 2, false},
                      TaylorCase{"hd16_group2_order4", 16, 4, 2, 4, true},
                      TaylorCase{"hd32_group8_order3_plain", 32, 8, 1, 3, false}),
    [](const ::testing::TestParamInfo<TaylorCase>& i) { return std::string(i.param.name); });

// 4,096 tokens of prompt and 64 decode steps at the llama1b head shape (taylor P=3: 2,145 feature
// rows, the decode steps split into strips): the state stays the CPU's bit for bit and the outputs
// within 2 ulps, so nothing drifts with the context. Outputs checked every 256th prompt token and at
// every decode step (the reference's readout is the slow part).
TEST_F(CudaAttention, TaylorLongContextStaysTheCpus) {
  Steps steps = {{{0, 4096}}};
  for (int s = 0; s < 64; ++s) steps.push_back({{0, 1}});
  RunTaylor(TaylorCase{"hd64_group4_order3_long", 64, 8, 2, 3, true}, steps,
            [](int, int tok, int n) { return n == 1 || tok % 256 == 255; });
}

// --- softmax ------------------------------------------------------------------------------------

// Two slots: a prompt of `prefill` tokens in slot 0 beside 3 in slot 1, then `decode` steps of both
// (split over the context). Outputs against cpu::AttendKvCache over the same cache rows (bf16-rounded
// for a bf16 cache) at the rows `check` selects; the cache's rows bit for bit.
void CudaAttention::RunSoftmax(const SoftmaxCase& c, int prefill, int decode,
                               const std::function<bool(int, int)>& check) {
  const int dk = c.head_dim, dv = dk, group = c.heads / c.kv_heads, width = dk + dv;
  const int64_t capacity = prefill + decode + 4, slot_stride = capacity * c.kv_heads * width;
  const float scale = float(1.0 / std::sqrt(double(dk)));
  std::vector<std::vector<float>> rows(2);  // each slot's cache rows as the CPU keeps them
  DeviceBuffer cache((c.bf16 ? 2 : 4) * size_t(2 * slot_stride));
  AttnBatch shape;
  shape.heads = c.heads;
  shape.kv_heads = c.kv_heads;
  shape.head_dim = dk;
  shape.value_dim = dv;
  DeviceBuffer partial(size_t(SoftmaxPartialFloats(shape)) * sizeof(float));
  KvCacheLayout kv;
  kv.cache = cache.data();
  kv.bf16 = c.bf16;
  kv.slot_stride = slot_stride;
  kv.capacity = capacity;
  kv.partial = partial.as<float>();
  kv.partial_floats = SoftmaxPartialFloats(shape);
  Steps steps = {{{0, prefill}, {1, 3}}};
  for (int s = 0; s < decode; ++s) steps.push_back({{1, 1}, {0, 1}});
  for (const auto& step : steps) {
    const StepTable s = MakeStep(step, c.heads, c.kv_heads, dk);
    const auto q = Randn(size_t(s.rows) * c.heads * dk), k = Randn(size_t(s.rows) * c.kv_heads * dk),
               v = Randn(size_t(s.rows) * c.kv_heads * dv);
    std::vector<int64_t> positions;
    for (const auto& [slot, n] : step) positions.push_back(int64_t(rows[slot].size() / (c.kv_heads * width)));
    std::vector<float> want(size_t(s.rows) * c.heads * dv, 0.0f);
    std::vector<char> checked(s.rows, 0);
    int row = 0;
    for (const auto& [slot, n] : step) {
      for (int tok = 0; tok < n; ++tok, ++row) {
        for (int g = 0; g < c.kv_heads; ++g) {
          for (int e = 0; e < width; ++e) {
            float x = e < dk ? k[(size_t(row) * c.kv_heads + g) * dk + e] : v[(size_t(row) * c.kv_heads + g) * dv + e - dk];
            rows[slot].push_back(c.bf16 ? FromBf16(ToBf16(x)) : x);
          }
        }
        checked[row] = check(tok, n);
        if (checked[row]) {
          cpu::AttendKvCache(c.kv_heads, group, dk, dv, scale, q.data() + size_t(row) * c.heads * dk, rows[slot].data(),
                             int64_t(rows[slot].size() / (c.kv_heads * width)), want.data() + size_t(row) * c.heads * dv);
        }
      }
    }
    DeviceBuffer dq = Upload(q), dk_ = Upload(k), dv_ = Upload(v), dpos = Upload(positions),
                 dy = Poisoned<float>(want.size());
    SoftmaxAttention(s.batch, kv, dpos.as<int64_t>(), scale, dq.as<float>(), dk_.as<float>(), dv_.as<float>(),
                     dy.as<float>(), stream_);
    Sync();
    const std::vector<float> got = Download<float>(dy, want.size());
    size_t bad = 0;
    for (int r = 0; r < s.rows; ++r) {
      if (!checked[r]) continue;
      const float* gr = got.data() + size_t(r) * c.heads * dv;
      const float* wr = want.data() + size_t(r) * c.heads * dv;
      double top = 0;
      for (int i = 0; i < c.heads * dv; ++i) top = std::max(top, std::fabs(double(wr[i])));
      for (int i = 0; i < c.heads * dv; ++i) {
        const double d = std::fabs(double(gr[i]) - double(wr[i]));
        if (!std::isfinite(gr[i]) || !(d <= 2e-5 * top + 2e-6)) {
          if (++bad <= 5) ADD_FAILURE() << "row " << r << "[" << i << "]: got " << gr[i] << " want " << wr[i];
        }
      }
    }
    EXPECT_EQ(bad, 0u) << c.name << ": softmax outputs off or unwritten";
  }
  // The cache holds exactly the rows the CPU keeps (bf16: rounded to nearest even on both sides).
  for (int slot = 0; slot < 2; ++slot) {
    std::vector<float> got(rows[slot].size());
    if (c.bf16) {
      std::vector<uint16_t> bits(2 * slot_stride);
      cache.CopyToHost(bits.data(), bits.size() * 2);
      for (size_t i = 0; i < got.size(); ++i) got[i] = FromBf16(bits[size_t(slot) * slot_stride + i]);
    } else {
      std::vector<float> all(2 * slot_stride);
      cache.CopyToHost(all.data(), all.size() * 4);
      std::copy(all.begin() + size_t(slot) * slot_stride, all.begin() + size_t(slot) * slot_stride + got.size(), got.begin());
    }
    EXPECT_EQ(DifferingBits(got, rows[slot]), 0u) << "cache floats of slot " << slot << " differing, of " << got.size();
  }
}

class CudaSoftmaxShapes : public CudaAttention, public ::testing::WithParamInterface<SoftmaxCase> {};

TEST_P(CudaSoftmaxShapes, MatchesTheCpuKvAttention) {
  RunSoftmax(GetParam(), 300, 5, [](int, int) { return true; });
}

INSTANTIATE_TEST_SUITE_P(CudaAttention, CudaSoftmaxShapes,
                         ::testing::Values(SoftmaxCase{"hd64_group4", 64, 8, 2, false},
                                           SoftmaxCase{"hd64_group4_bf16", 64, 8, 2, true},
                                           SoftmaxCase{"hd128_group8", 128, 16, 2, false},
                                           SoftmaxCase{"hd128_group8_bf16", 128, 8, 1, true}),
                         [](const ::testing::TestParamInfo<SoftmaxCase>& i) { return std::string(i.param.name); });

// 4,100 tokens of prompt (one block per token over its prefix), then decode steps split over the
// context: rows checked every 97th token, the prompt's last and every decode row.
TEST_F(CudaAttention, SoftmaxLongContext) {
  RunSoftmax(SoftmaxCase{"hd64_group4_bf16_long", 64, 8, 2, true}, 4100, 4,
             [](int tok, int n) { return n < 4 || tok % 97 == 0 || tok >= n - 2; });
}

// A prompt of 70,000 tokens in one segment: past the 65,535 blocks a grid's y and z extents allow,
// so the append and attend kernels stride; rows on both sides of the boundary checked.
TEST_F(CudaAttention, SoftmaxLongSegmentPastTheGridLimit) {
  RunSoftmax(SoftmaxCase{"hd16_group2_long_segment", 16, 2, 1, false}, 70000, 1, [](int tok, int n) {
    return n < 4 || tok < 2 || (tok >= 65533 && tok <= 65537) || tok >= n - 2;
  });
}

// --- the batched GEMM (chunked prefill) ----------------------------------------------------------

// Row-major C = op(A) op(B) + beta C over 3 strided batches, every transpose combination, fp32 and
// TF32, against a plain fp64 loop: |d| <= rel * sum_k |a b| + 1e-6 * |beta c| + 1e-6, rel 1e-5 in
// fp32 and 3e-3 with TF32 inputs (10-bit mantissas).
TEST_F(CudaOpsTest, GemmBatchedMatchesAPlainReference) {
  Blas blas(stream_);
  const int m = 37, n = 65, k = 129, batch = 3;
  for (const bool tf32 : {false, true}) {
    for (const bool ta : {false, true}) {
      for (const bool tb : {false, true}) {
        for (const float beta : {0.0f, 1.0f}) {
          SCOPED_TRACE(testing::Message() << "tf32 " << tf32 << " trans_a " << ta << " trans_b " << tb << " beta " << beta);
          const int64_t sa = int64_t(m) * k + 5, sb = int64_t(k) * n + 3, sc = int64_t(m) * n + 7;  // padded strides
          const auto a = Randn(size_t(sa) * batch), b = Randn(size_t(sb) * batch), c0 = Randn(size_t(sc) * batch);
          std::vector<float> want(c0.size(), 0.0f);
          std::vector<double> bound(c0.size(), 0.0);
          for (int p = 0; p < batch; ++p) {
            for (int i = 0; i < m; ++i) {
              for (int j = 0; j < n; ++j) {
                double acc = 0, mag = 0;
                for (int l = 0; l < k; ++l) {
                  const double x = a[p * sa + (ta ? size_t(l) * m + i : size_t(i) * k + l)];
                  const double y = b[p * sb + (tb ? size_t(j) * k + l : size_t(l) * n + j)];
                  acc += x * y;
                  mag += std::fabs(x * y);
                }
                const size_t at = p * sc + size_t(i) * n + j;
                want[at] = float(acc + beta * c0[at]);
                bound[at] = (tf32 ? 3e-3 : 1e-5) * mag + 1e-6 * std::fabs(beta * c0[at]) + 1e-6;
              }
            }
          }
          DeviceBuffer da = Upload(a), db = Upload(b), dc = Upload(c0);
          GemmBatched(blas, ta, tb, m, n, k, da.as<float>(), sa, db.as<float>(), sb, beta, dc.as<float>(), sc, batch,
                      tf32);
          Sync();
          std::vector<float> got = Download<float>(dc, c0.size());
          for (int p = 0; p < batch; ++p) {  // the padding between batches stays untouched
            for (int64_t i = int64_t(m) * n; i < sc; ++i) want[p * sc + i] = c0[p * sc + i], bound[p * sc + i] = 0;
          }
          ExpectClose(got, want, [&](size_t i, float) { return bound[i]; }, "gemm batched");
        }
      }
    }
  }
}

}  // namespace
}  // namespace steady::cuda
