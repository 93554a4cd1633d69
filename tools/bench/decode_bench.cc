// Decode step time per token vs context length, per mechanism, single session and batch 32, on the
// CPU backend (Google Benchmark). Results and method: docs/benchmarks.md.
//
// How a context of L tokens is set up (the step's cost depends only on what it reads and writes):
// - softmax: each layer's KV cache is filled with L random key/value rows (a real prefill of 1M
//   tokens is quadratic); after every timed step the cache is cut back to L so L stays fixed.
// - constant-state mechanisms: the session prefills 1,024 real tokens, then its position is set
//   to L. The state is the same fixed buffer whatever L is (tests/model/mechanisms/mechanisms_test.cc checks that it
//   does not grow over 100,000 tokens), so the step reads and writes the same bytes; RoPE sees L.
// Batch 32: the first session's state is forked into 32 slots.
#include <benchmark/benchmark.h>

#include <map>
#include <random>

#include "model/decoder/model.h"
#include "model/decoder/state_pool.h"
#include "model/generate.h"
#include "tools/bench/bench_setup.h"

namespace steady {
namespace {

void BM_DecodeStep(benchmark::State& state) {
  const int spec = int(state.range(0));
  const int64_t context = state.range(1);
  const int batch = int(state.range(2));
  const Model& m = GetModel(spec);
  const bool kv_cache = m.config().layer_attention[0].mechanism == "softmax";
  const double cache_bytes = double(context) * m.config().num_layers * m.config().num_kv_heads * 2 *
                             m.config().head_dim * sizeof(float) * batch;
  if (kv_cache && cache_bytes > 8e9) {
    state.SkipWithError("KV cache does not fit in this machine's memory budget (8 GB)");
    return;
  }
  StatePool pool(m, batch);
  FillContext(m, pool, context);
  for (int s = 1; s < batch; ++s) pool.Copy(0, s);
  std::vector<Segment> segs(batch);
  for (int s = 0; s < batch; ++s) segs[s] = {s, {int32_t(5 + s)}, false};
  ForwardWorkspace ws;
  std::vector<float> logits;
  for (auto _ : state) {
    m.Forward(segs, pool, ws, &logits);
    benchmark::DoNotOptimize(logits.data());
    if (kv_cache) {  // keep the context at L
      for (int s = 0; s < batch; ++s) {
        for (int l = 0; l < m.config().num_layers; ++l) {
          pool.Growing(s, l).resize(pool.Growing(s, l).size() - m.config().num_kv_heads * 2 * m.config().head_dim);
        }
        pool.set_position(s, context);
      }
    }
  }
  state.SetLabel(Specs()[spec].name);
  state.counters["s_per_token"] =
      benchmark::Counter(batch, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.counters["tokens_per_s"] = benchmark::Counter(batch, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["state_bytes_per_session"] = double(pool.BytesInUse(0));
}

void DecodeArgs(benchmark::internal::Benchmark* b) {
  for (int spec = 0; spec < int(Specs().size()); ++spec) {
    for (int64_t context : {int64_t(1) << 10, int64_t(1) << 15, int64_t(1) << 20}) {
      for (int batch : {1, 32}) b->Args({spec, context, batch});
    }
  }
}
BENCHMARK(BM_DecodeStep)->Apply(DecodeArgs)->ArgNames({"mech", "context", "batch"})->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace steady

BENCHMARK_MAIN();
