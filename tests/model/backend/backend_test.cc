// The backends of model/backend/backend.h: --device parsing, the CPU backend (Model::Forward over a
// StatePool), and the CUDA backend against the CPU one. The CUDA cases need a GPU: without one they
// report SKIPPED (scripts/gpu_check.sh treats a skip as a failure on a GPU machine).
#include "model/backend/backend.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <utility>

#include "model/decoder/state_pool.h"
#include "model/mechanisms/attention.h"
#include "tests/model/backend/cuda_compare.h"
#include "tests/testutil.h"

#if STEADY_HAVE_CUDA
#include "kernels/cuda/device.h"
#include "kernels/cuda/ops.h"
#endif

namespace steady {
namespace {

using testing::MaxRelError;
using testing::RelL2Error;
using testing::TestSeed;
using testing::TinyModel;

TEST(BackendTest, DeviceNamesAreCheckedAndAutoRunsWhereItCan) {
  const Model m = TinyModel("taylor", {{"order", 3}}, 1);
  auto bad = MakeBackend(m, "gpu");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("expected cpu, cuda or auto"), std::string::npos) << bad.status();

  BackendOptions none;
  none.slots = 0;
  EXPECT_EQ(MakeBackend(m, "cpu", none).status().code(), absl::StatusCode::kInvalidArgument);

  auto cpu = MakeBackend(m, "cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ((*cpu)->Name(), "cpu");

  auto automatic = MakeBackend(m, "auto");
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_EQ((*automatic)->Name().rfind("cuda", 0) == 0, CudaDevicePresent()) << (*automatic)->Name();

  auto cuda = MakeBackend(m, "cuda");
  EXPECT_EQ(cuda.ok(), CudaDevicePresent()) << cuda.status();
  if (!cuda.ok()) {
    EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(cuda.status().message().find("--device cuda"), std::string::npos) << cuda.status();
  }
}

// Slots whose states pass the memory available are refused naming the sizes, before anything is
// allocated (a billion slots of a tiny model's state: terabytes); a few slots are not.
TEST(BackendTest, CpuSlotsBeyondTheMemoryAreRefused) {
  const Model m = TinyModel("taylor", {{"order", 3}}, 1);
  BackendOptions huge;
  huge.slots = 1 << 30;
  for (const char* device : {"cpu", "auto"}) {
    if (std::string(device) == "auto" && CudaDevicePresent()) continue;  // auto takes the GPU there
    auto refused = MakeBackend(m, device, huge);
    ASSERT_FALSE(refused.ok()) << device;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
    for (const char* needle : {"1073741824 session slots of", "need more memory than this machine has available"}) {
      EXPECT_NE(refused.status().message().find(needle), std::string::npos) << refused.status();
    }
  }
  BackendOptions few;
  few.slots = 4;
  EXPECT_TRUE(MakeBackend(m, "cpu", few).ok());
}

TEST(BackendTest, CpuBackendIsModelForward) {
  const Model m = TinyModel("slay", {}, TestSeed());
  std::mt19937_64 rng(TestSeed());
  StatePool pool(m, 2);
  ForwardWorkspace ws;
  std::unique_ptr<Backend> cpu = MakeCpuBackend(m, {.slots = 2});
  const std::vector<Segment> step = {{0, RandomTokens(9, rng), true}, {1, RandomTokens(1, rng), false}};
  std::vector<float> want, got;
  m.Forward(step, pool, ws, &want);
  cpu->Forward(step, &got);
  EXPECT_EQ(got, want);
  EXPECT_EQ(cpu->position(0), 9);
  EXPECT_EQ(cpu->ReadSlot(1).fixed,
            std::vector<float>(pool.SlotData(1), pool.SlotData(1) + pool.fixed_floats_per_slot()));
  EXPECT_EQ(cpu->StateBytesPerSlot(), int64_t(pool.FixedBytesPerSlot()));
}

// A slot copied with ReadSlot / WriteSlot (fixed state and KV cache) continues exactly as the
// original, on every backend this machine has.
void ExpectWriteSlotContinuesTheSession(Backend& b, uint64_t seed) {
  std::mt19937_64 rng(seed);
  b.Forward({{0, RandomTokens(20, rng), false}}, nullptr);
  b.WriteSlot(1, b.ReadSlot(0));
  EXPECT_EQ(b.position(1), 20);
  std::vector<float> x, y;
  const int32_t next = RandomTokens(1, rng)[0];
  b.Forward({{0, {next}, false}}, &x);
  b.Forward({{1, {next}, false}}, &y);
  EXPECT_EQ(x, y);
  b.Reset(1);
  EXPECT_EQ(b.position(1), 0);
  EXPECT_EQ(b.BytesInUse(1), b.StateBytesPerSlot());
}

TEST(BackendTest, WriteSlotContinuesTheSession) {
  // sliding_window (a ring that has wrapped by token 20) has no CUDA kernels: cpu only.
  for (const auto& [mechanism, params] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"dark", {}}, {"softmax", {}}, {"sliding_window", {{"window", 6}}}}) {
    SCOPED_TRACE(mechanism);
    const Model m = TinyModel(mechanism, params, TestSeed());
    for (const char* device : {"cpu", "cuda"}) {
      if (std::string(device) == "cuda" && (!CudaDevicePresent() || mechanism == "sliding_window")) continue;
      auto b = MakeBackend(m, device, {.slots = 2, .max_context = 64});
      ASSERT_TRUE(b.ok()) << b.status();
      ExpectWriteSlotContinuesTheSession(**b, TestSeed() + 1);
    }
  }
}

// --- CUDA against CPU --------------------------------------------------------------------------

struct CudaCase {
  std::string name;
  std::string mechanism;
  nlohmann::json params;
  nlohmann::json patch;  // shape changes (config.json keys)
  // Whether the bf16 test compares states. A sliced histogram is not continuous in the scores: bf16
  // rounding moves keys across bin edges (their readout stays continuous while a bin holds at most
  // two distinct keys), so those cases compare logits only in bf16 and everything in fp32. (In
  // fp32 a key lands within rounding of a bin edge about once in a thousand runs of a case: a
  // state error near 0.1 with close logits is that, and CudaSlicedKernel, which feeds the kernel
  // the CPU's own scores, is the exact check.)
  bool bf16_state = true;
};

void PrintTo(const CudaCase& c, std::ostream* os) { *os << c.name; }

class CudaBackendTest : public ::testing::TestWithParam<CudaCase> {
 protected:
  void SetUp() override {
    if (!CudaDevicePresent()) GTEST_SKIP() << "no CUDA device (CudaBackendBuilt=" << CudaBackendBuilt() << ")";
  }
};

// fp32 weights and GEMMs: the kernels must reproduce the CPU path to fp32 rounding (summation
// order differs: cuBLAS vs OpenBLAS, warp-parallel readouts vs sequential loops).
TEST_P(CudaBackendTest, Fp32MatchesTheCpuBackend) {
  const CudaCase& c = GetParam();
  const Model m = TinyModel(c.mechanism, c.params, TestSeed(), c.patch);
  const Divergence d = Compare(m, /*bf16=*/false, TestSeed() + 7);
  EXPECT_LT(d.logits, 1e-4);
  EXPECT_LT(d.state, 1e-4);
}

// bf16 weights and GEMM inputs: the serving configuration, within bf16 rounding of the CPU path.
TEST_P(CudaBackendTest, Bf16StaysCloseToTheCpuBackend) {
  const CudaCase& c = GetParam();
  const Model m = TinyModel(c.mechanism, c.params, TestSeed(), c.patch);
  const Divergence d = Compare(m, /*bf16=*/true, TestSeed() + 7);
  EXPECT_LT(d.logits, 3e-2);
  if (c.bf16_state) {
    EXPECT_LT(d.state, 3e-2);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Mechanisms, CudaBackendTest,
    ::testing::Values(CudaCase{"softmax", "softmax", nlohmann::json::object(), nlohmann::json::object()},
                      CudaCase{"softmax_wide", "softmax", nlohmann::json::object(), kWide},
                      CudaCase{"taylor2", "taylor", {{"order", 2}}, nlohmann::json::object()},
                      CudaCase{"taylor3", "taylor", {{"order", 3}}, nlohmann::json::object()},
                      CudaCase{"taylor3_plain", "taylor", {{"order", 3}, {"accumulation", "plain"}}, nlohmann::json::object()},
                      CudaCase{"taylor3_wide", "taylor", {{"order", 3}}, kWide},
                      CudaCase{"taylor4", "taylor", {{"order", 4}}, nlohmann::json::object()},
                      CudaCase{"slay", "slay", nlohmann::json::object(), nlohmann::json::object()},
                      CudaCase{"slay_wide_plain", "slay", {{"accumulation", "plain"}}, kWide},
                      CudaCase{"dark", "dark", nlohmann::json::object(), nlohmann::json::object()},
                      CudaCase{"dark_wide", "dark", {{"features", 128}}, kWide},
                      CudaCase{"sliced_relu", "sliced_relu", nlohmann::json::object(), nlohmann::json::object(), false},
                      CudaCase{"sliced_relu_wide_plain", "sliced_relu", {{"accumulation", "plain"}}, kWide, false},
                      // 4 bins over [-1, 1): most keys share a bin or a tail, so the two-point
                      // interpolation and the tails' edges (lowest/highest seen) carry the readout.
                      CudaCase{"sliced_relu_few_bins", "sliced_relu", {{"bins", 4}, {"z_min", -1.0}, {"z_max", 1.0}},
                               nlohmann::json::object(), false},
                      CudaCase{"sliced_bump", "sliced_relu_bump", nlohmann::json::object(), nlohmann::json::object(),
                               false},
                      CudaCase{"sliced_bump_wide_mlp", "sliced_relu_bump", {{"projection", "mlp"}, {"bins", 16}}, kWide,
                               false},
                      // Real checkpoints' head shapes: the 8-query accumulators, 3 and 5 column strips,
                      // taylor P=3 at head_dim 64 over 100 KB of shared memory per block.
                      CudaCase{"softmax_hd64_group8", "softmax", nlohmann::json::object(), kHd64Group8},
                      CudaCase{"taylor2_hd64_group8", "taylor", {{"order", 2}}, kHd64Group8},
                      CudaCase{"taylor3_hd64_group8", "taylor", {{"order", 3}}, kHd64Group8},
                      CudaCase{"dark_hd64_group8", "dark", nlohmann::json::object(), kHd64Group8},
                      CudaCase{"slay_hd64_group8", "slay", nlohmann::json::object(), kHd64Group8},
                      CudaCase{"softmax_hd128", "softmax", nlohmann::json::object(), kHd128},
                      CudaCase{"taylor2_hd128", "taylor", {{"order", 2}, {"accumulation", "plain"}}, kHd128},
                      CudaCase{"dark_hd128_group8", "dark", nlohmann::json::object(), kHd128Group8},
                      CudaCase{"taylor2_hd128_group8", "taylor", {{"order", 2}}, kHd128Group8}),
    [](const ::testing::TestParamInfo<CudaCase>& i) { return i.param.name; });

// The exact sliced decoder keeps a growing tree per kv head: no kernels, so the GPU refuses it.
TEST(CudaBackendErrors, MechanismsWithoutKernelsAreRefusedAndAutoUsesTheCpu) {
  if (!CudaDevicePresent()) GTEST_SKIP() << "no CUDA device";
  const Model m = TinyModel("sliced_relu", {{"decoder", "exact"}}, 3);
  auto gpu = MakeBackend(m, "cuda");
  ASSERT_FALSE(gpu.ok());
  EXPECT_EQ(gpu.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(gpu.status().message().find("layer 0 (sliced_relu)"), std::string::npos) << gpu.status();
  EXPECT_NE(gpu.status().message().find("bucketed"), std::string::npos) << gpu.status();
  auto automatic = MakeBackend(m, "auto");
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_EQ((*automatic)->Name(), "cpu");
  // Sliding-window attention has no CUDA kernels: a hybrid with one window layer is refused naming it.
  const Model hybrid = TinyModel("taylor", {{"order", 2}}, 3,
                                 {{"attention", {{"layers", {{"1", {{"mechanism", "sliding_window"}, {"window", 8}}}}}}}});
  auto window = MakeBackend(hybrid, "cuda");
  ASSERT_FALSE(window.ok());
  EXPECT_EQ(window.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(window.status().message().find("layer 1 (sliding_window)"), std::string::npos) << window.status();
  auto window_auto = MakeBackend(hybrid, "auto");
  ASSERT_TRUE(window_auto.ok()) << window_auto.status();
  EXPECT_EQ((*window_auto)->Name(), "cpu");
}

// 8 sessions decoded alone and together in one batch give the same logits, within a tolerance:
// cuBLAS does not promise the same bits for 1 and 8 rows (it may pick another kernel or split),
// only the same products summed in another order. The batched run is fed the tokens the sessions
// chose alone (so that a near tie cannot send them down different paths), in the serving precision
// (bf16 weights and GEMM inputs, fp32 accumulation) and in fp32.
TEST(CudaBackendBatching, LogitsDoNotDependOnTheBatch) {
  if (!CudaDevicePresent()) GTEST_SKIP() << "no CUDA device";
  const Model m = TinyModel("taylor", {{"order", 3}}, TestSeed(), kWide);
  std::mt19937_64 rng(TestSeed() + 3);
  constexpr int kPrompts = 8, kNew = 16;
  const size_t vocab = size_t(m.vocab_size());
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < kPrompts; ++i) prompts.push_back(RandomTokens(5 + 3 * i, rng));
  for (const bool bf16 : {true, false}) {
    SCOPED_TRACE(bf16 ? "bf16" : "fp32");
    BackendOptions o;
    o.slots = kPrompts;
    o.cuda_bf16 = bf16;
    auto gpu = MakeCudaBackend(m, o);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    Backend& b = **gpu;
    // alone[i][t]: session i's logits after its prompt (t = 0) and after each forced token.
    std::vector<std::vector<std::vector<float>>> alone(kPrompts);
    std::vector<std::vector<int32_t>> tokens(kPrompts);
    std::vector<float> logits;
    for (int i = 0; i < kPrompts; ++i) {
      b.Forward({{i, prompts[i], false}}, &logits);
      for (int t = 0; t <= kNew; ++t) {
        alone[i].push_back(logits);
        if (t == kNew) break;
        tokens[i].push_back(int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin()));
        b.Forward({{i, {tokens[i].back()}, false}}, &logits);
      }
      b.Reset(i);
    }
    std::vector<Segment> step;
    for (int i = 0; i < kPrompts; ++i) step.push_back({i, prompts[i], false});
    double worst = 0;
    for (int t = 0; t <= kNew; ++t) {
      b.Forward(step, &logits);
      for (int i = 0; i < kPrompts; ++i) {
        const std::vector<float> row(logits.begin() + i * vocab, logits.begin() + (i + 1) * vocab);
        worst = std::max(worst, MaxRelError(D(row), D(alone[i][t])));
      }
      if (t == kNew) break;
      step.clear();
      for (int i = 0; i < kPrompts; ++i) step.push_back({i, {tokens[i][t]}, false});
    }
    std::printf("%s: largest logit difference, batched vs alone: %.2e of the largest logit\n", bf16 ? "bf16" : "fp32",
                worst);
    EXPECT_LT(worst, bf16 ? 1e-2 : 1e-4);
  }
}

// Decode steps replayed as CUDA graphs (padded to power-of-two buckets with rows in the scratch
// slot) compute what the same steps compute launched one by one: logits, greedy draws and states,
// across bucket changes (3 slots -> bucket 4, 5 -> 8, 1 -> 1) and a prefill step in between.
TEST(CudaBackendGraphs, GraphReplaysMatchEagerSteps) {
  if (!CudaDevicePresent()) GTEST_SKIP() << "no CUDA device";
  for (const char* mechanism : {"taylor", "softmax"}) {
    SCOPED_TRACE(mechanism);
    const nlohmann::json params = std::string(mechanism) == "taylor" ? nlohmann::json{{"order", 3}} : nlohmann::json::object();
    const Model m = TinyModel(mechanism, params, TestSeed(), kWide);
    BackendOptions o;
    o.slots = 6;
    o.max_context = 128;
    o.cuda_bf16 = false;
    auto eager = MakeCudaBackend(m, [&] { BackendOptions e = o; e.cuda_graphs = false; return e; }());
    auto graphs = MakeCudaBackend(m, o);
    ASSERT_TRUE(eager.ok() && graphs.ok());
    std::mt19937_64 rng(TestSeed() + 11);
    auto both = [&](const std::vector<Segment>& step, bool sample) {
      if (sample) {
        std::vector<DrawParams> draws(step.size());
        std::vector<int32_t> a, b;
        (*eager)->ForwardSample(step, draws, &a);
        (*graphs)->ForwardSample(step, draws, &b);
        EXPECT_EQ(a, b);
      } else {
        std::vector<float> a, b;
        (*eager)->Forward(step, &a);
        (*graphs)->Forward(step, &b);
        EXPECT_LT(MaxRelError(D(b), D(a)), 1e-5);
      }
    };
    both({{0, RandomTokens(9, rng), false}, {1, RandomTokens(4, rng), false}, {2, RandomTokens(6, rng), false}}, false);
    for (int n : {3, 3, 3, 5, 5, 5, 1, 1, 1, 3}) {
      for (int round = 0; round < 2; ++round) {
        std::vector<Segment> step;
        for (int s = 0; s < n; ++s) step.push_back({s, RandomTokens(1, rng), false});
        both(step, round == 1);
      }
      if (n == 5) both({{5, RandomTokens(7, rng), false}}, false);  // a prefill between decode steps
    }
    for (int s = 0; s < 6; ++s) {
      EXPECT_EQ((*graphs)->position(s), (*eager)->position(s));
      const SlotState a = (*eager)->ReadSlot(s), b = (*graphs)->ReadSlot(s);
      if (!a.fixed.empty()) {
        EXPECT_LT(RelL2Error(D(b.fixed), D(a.fixed)), 1e-5);
      }
    }
  }
}

// The chunked GEMM prefill (taylor, slay, dark) computes what the token-by-token scan computes: long
// segments that cross chunk boundaries beside a short one and a decode row in the same step, then
// decode steps on the states it left.
TEST(CudaBackendPrefill, ChunkedPrefillMatchesTheTokenScan) {
  if (!CudaDevicePresent()) GTEST_SKIP() << "no CUDA device";
  const std::vector<std::pair<std::string, nlohmann::json>> cases = {
      {"taylor", {{"order", 2}}}, {"taylor", {{"order", 3}, {"accumulation", "plain"}}}, {"slay", nlohmann::json::object()},
      {"dark", nlohmann::json::object()}, {"dark", {{"accumulation", "plain"}, {"features", 96}}}};
  for (const auto& [mechanism, params] : cases) {
    SCOPED_TRACE(mechanism + " " + params.dump());
    const Model m = TinyModel(mechanism, params, TestSeed(), kWide);
    BackendOptions o;
    o.slots = 4;
    o.max_context = 512;
    o.cuda_bf16 = false;
    o.cuda_graphs = false;
    auto chunked = MakeCudaBackend(m, o);
    o.cuda_chunked_prefill = false;
    auto scan = MakeCudaBackend(m, o);
    ASSERT_TRUE(chunked.ok() && scan.ok());
    std::mt19937_64 rng(TestSeed() + 17);
    std::vector<std::vector<Segment>> steps = {{{0, RandomTokens(300, rng), true},
                                                {1, RandomTokens(130, rng), false},
                                                {2, RandomTokens(16, rng), false},
                                                {3, RandomTokens(1, rng), false}}};
    for (int t = 0; t < 3; ++t) {
      steps.push_back({});
      for (int s = 0; s < 4; ++s) steps.back().push_back({s, RandomTokens(1, rng), false});
    }
    // A long prefill continuing a slot that has decoded (dark: a finite carried running max).
    steps.push_back({{3, RandomTokens(150, rng), true}, {0, RandomTokens(1, rng), false}});
    steps.push_back({{3, RandomTokens(1, rng), false}, {1, RandomTokens(1, rng), false}});
    for (const std::vector<Segment>& step : steps) {
      std::vector<float> a, b;
      (*scan)->Forward(step, &a);
      (*chunked)->Forward(step, &b);
      EXPECT_LT(MaxRelError(D(b), D(a)), 1e-5);
    }
    for (int s = 0; s < 4; ++s) {
      const SlotState a = (*scan)->ReadSlot(s), b = (*chunked)->ReadSlot(s);
      EXPECT_LT(RelL2Error(D(b.fixed), D(a.fixed)), 1e-5) << "slot " << s;
    }
  }
}

// Softmax decode splits a long context over many blocks and merges their partials: against the
// CPU at 500 and 200 cached tokens (so each split holds several rows, some none at the start).
TEST(CudaBackendSoftmax, SplitContextDecodeMatchesTheCpu) {
  if (!CudaDevicePresent()) GTEST_SKIP() << "no CUDA device";
  const Model m = TinyModel("softmax", nlohmann::json::object(), TestSeed(), kWide);
  BackendOptions o;
  o.slots = 2;
  o.max_context = 600;
  o.cuda_bf16 = false;
  std::mt19937_64 rng(TestSeed() + 23);
  std::vector<std::vector<Segment>> steps = {{{0, RandomTokens(500, rng), false}, {1, RandomTokens(200, rng), false}}};
  for (int t = 0; t < 4; ++t) steps.push_back({{0, RandomTokens(1, rng), false}, {1, RandomTokens(1, rng), false}});
  const Divergence d = Compare(m, o, steps);
  EXPECT_LT(d.logits, 1e-4);
  EXPECT_LT(d.state, 1e-4);
}

#if STEADY_HAVE_CUDA
std::vector<float> Download(const cuda::DeviceBuffer& b, size_t n) {
  std::vector<float> out(n);
  b.CopyToHost(out.data(), n * sizeof(float));
  return out;
}

// Elements whose bits differ (NaN equals NaN only bit for bit).
int DifferingBits(const std::vector<float>& a, const std::vector<float>& b) {
  int n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

// The sliced kernel alone against the CPU's Step on the same scores (projection "none": q and k are
// the scores, so no GEMM or GELU stands between them): the kernel runs the CPU's arithmetic
// (kernels/sliced_bins_math.h) without FMA contraction, so states and outputs agree bit for bit.
// Three slots: a prompt, a one-token segment and a short segment, then decode steps of all three.
TEST(CudaSlicedKernel, MatchesTheCpuStepBitForBit) {
  if (!CudaDevicePresent()) GTEST_SKIP() << "no CUDA device";
  const AttnShape shape{/*heads=*/8, /*kv_heads=*/2, /*head_dim=*/1, /*value_dim=*/40};
  const std::vector<std::pair<std::string, nlohmann::json>> cases = {
      {"sliced_relu", nlohmann::json::object()},
      {"sliced_relu", {{"accumulation", "plain"}, {"bins", 4}, {"z_min", -1.0}, {"z_max", 1.0}}},
      {"sliced_relu_bump", {{"bins", 16}}}};
  std::mt19937_64 rng(TestSeed() + 29);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  cudaStream_t stream = cuda::CreateStream();
  for (auto [mechanism, params] : cases) {
    SCOPED_TRACE(mechanism + " " + params.dump());
    params["projection"] = "none";
    auto a = ParseLayerAttention({mechanism, params}, shape);
    ASSERT_TRUE(a.ok()) << a.status();
    RandomInitAttentionTensors(TestSeed(), &*a);  // the bump's bandwidths
    const SlicedParams& p = std::get<SlicedParams>(a->params);
    const int slots = 3, dv = shape.value_dim;
    const size_t slot_floats = StateFloats(*a);
    std::vector<float> cpu_state(slots * slot_floats);
    for (int s = 0; s < slots; ++s) InitState<float>(*a, {cpu_state.data() + s * slot_floats, nullptr});
    cuda::DeviceBuffer pool(cpu_state.size() * sizeof(float)), bandwidth;
    pool.CopyFromHost(cpu_state.data(), pool.bytes());
    if (p.bump) {
      bandwidth = cuda::DeviceBuffer(p.bandwidth.size() * sizeof(float));
      bandwidth.CopyFromHost(p.bandwidth.data(), bandwidth.bytes());
    }
    cuda::SlicedStateLayout layout;
    layout.pool = pool.as<float>();
    layout.slot_floats = int64_t(slot_floats);
    layout.bins = SlicedBinsLayout{p.bins, p.z_min, p.z_max, dv, a->accumulation == Accumulation::kKahan};

    std::vector<std::vector<std::pair<int, int>>> steps = {{{0, 45}, {1, 1}, {2, 6}}};  // (slot, tokens)
    for (int t = 0; t < 5; ++t) steps.push_back({{2, 1}, {0, 1}, {1, 1}});
    for (const auto& step : steps) {
      int rows = 0;
      for (const auto& [slot, n] : step) rows += n;
      std::vector<float> zq(size_t(rows) * shape.heads), zk(size_t(rows) * shape.kv_heads),
          v(size_t(rows) * shape.kv_heads * dv), want(size_t(rows) * shape.heads * dv);
      for (auto* x : {&zq, &zk, &v}) {
        for (float& e : *x) e = normal(rng);
      }
      std::vector<int32_t> table;  // slot[], row_begin[], count[]
      int row = 0, max_count = 0;
      for (const auto& [slot, n] : step) {
        AttentionRecurrent<float>(*a, n, zq.data() + size_t(row) * shape.heads, zk.data() + size_t(row) * shape.kv_heads,
                                  v.data() + size_t(row) * shape.kv_heads * dv, {cpu_state.data() + slot * slot_floats, nullptr},
                                  want.data() + size_t(row) * shape.heads * dv);
        table.push_back(slot);
        row += n;
        max_count = std::max(max_count, n);
      }
      row = 0;
      for (const auto& step_segment : step) table.push_back(std::exchange(row, row + step_segment.second));
      for (const auto& step_segment : step) table.push_back(step_segment.second);
      auto upload = [&](const auto& host) {
        cuda::DeviceBuffer d(host.size() * sizeof(host[0]));
        d.CopyFromHost(host.data(), d.bytes());
        return d;
      };
      const std::vector<double> zq64(zq.begin(), zq.end()), zk64(zk.begin(), zk.end());
      cuda::DeviceBuffer dtable = upload(table), dzq = upload(zq64), dzk = upload(zk64), dv_ = upload(v),
                         dy(want.size() * sizeof(float));
      dy.Fill(0xff);  // NaN until written
      cuda::AttnBatch b;
      const int nseg = int(step.size());
      b.slot = dtable.as<int32_t>();
      b.row_begin = b.slot + nseg;
      b.count = b.slot + 2 * nseg;
      b.segments = nseg;
      b.max_count = max_count;
      b.heads = shape.heads;
      b.kv_heads = shape.kv_heads;
      b.head_dim = 1;
      b.value_dim = dv;
      cuda::SlicedAttention(b, layout, p.bump ? bandwidth.as<float>() : nullptr, dzq.as<double>(), dzk.as<double>(),
                            dv_.as<float>(), dy.as<float>(), stream);
      cuda::SynchronizeStream(stream);
      const std::vector<float> got = Download(dy, want.size());
      EXPECT_EQ(DifferingBits(got, want), 0) << "outputs differing from the CPU's, of " << got.size()
                                             << "; max relative error " << MaxRelError(D(got), D(want));
    }
    const std::vector<float> got_state = Download(pool, cpu_state.size());
    EXPECT_EQ(DifferingBits(got_state, cpu_state), 0) << "state floats differing from the CPU's, of " << got_state.size()
                                                      << "; relative L2 error " << RelL2Error(D(got_state), D(cpu_state));
  }
  cuda::DestroyStream(stream);
}
#endif  // STEADY_HAVE_CUDA

}  // namespace
}  // namespace steady
