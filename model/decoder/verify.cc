// Speculative verification's rollback (Segment::verify, Model::KeepVerified) and the draft model's
// (Model::MarkRollback, Model::RollBack). The simple exact design: from a mark on, every row of the
// slot is logged; each layer's state is copied when the layer first sees a logged row, just before
// its attention reads it (a KV cache only remembers its length: the rows Step appends are final);
// keeping a prefix of the logged rows restores the copies and replays the kept rows' attention
// through Steps from the q, k, v the step saved. A verify segment's attention is Steps too: the
// arithmetic of plain decoding's Step, token by token, on the same inputs in the same order (the
// state or the cache read once for the n rows where the mechanism can, model/mechanisms/attention.h),
// so the kept state is bit for bit what plain decoding leaves, Kahan compensations and bucketed or
// windowed states included, with no mechanism-specific code here. It costs a state copy per mark and, when rows are dropped, the kept rows'
// attention once more (never the projections or the MLP).
#include <algorithm>
#include <variant>

#include "base/check.h"
#include "model/decoder/model.h"
#include "model/decoder/state_pool.h"

namespace steady {
namespace {

// A layer whose whole state is an append-only KV cache (softmax): Step appends one row per token and
// never rewrites an older one, so cutting the cache back is the rollback.
bool AppendOnly(const LayerAttention& a) { return std::holds_alternative<SoftmaxParams>(a.params); }

VerifyLog* FindLog(ForwardWorkspace& ws, int slot) {
  auto it = std::find_if(ws.verify.begin(), ws.verify.end(), [&](const VerifyLog& l) { return l.slot == slot; });
  return it == ws.verify.end() ? nullptr : &*it;
}

}  // namespace

int Model::MarkRollback(StatePool& pool, ForwardWorkspace& ws, int slot) const {
  int free = -1;
  for (size_t i = 0; i < ws.verify.size(); ++i) {
    STEADY_CHECK(ws.verify[i].slot != slot);  // the slot's previous mark was settled (RollBack)
    if (ws.verify[i].slot < 0 && free < 0) free = int(i);
  }
  if (free < 0) {
    free = int(ws.verify.size());
    ws.verify.emplace_back();
  }
  VerifyLog& log = ws.verify[size_t(free)];
  const size_t layers = size_t(config_.num_layers);
  log.slot = slot;
  log.position = pool.position(slot);
  log.rows = 0;
  for (auto* per_layer : {&log.fixed, &log.growing, &log.q, &log.k, &log.v}) {
    per_layer->resize(layers);
    for (std::vector<float>& x : *per_layer) x.clear();  // capacity kept for the next mark
  }
  log.growing_size.assign(layers, 0);
  return free;
}

int Model::LogOf(ForwardWorkspace& ws, const Segment& s, StatePool& pool) const {
  if (s.verify) return MarkRollback(pool, ws, s.slot);
  VerifyLog* log = FindLog(ws, s.slot);
  return log == nullptr ? -1 : int(log - ws.verify.data());
}

void Model::RecordVerifyRows(VerifyLog& log, int layer, int n, const float* q, const float* k, const float* v,
                             StateView<float> state) const {
  if (log.q[layer].empty()) {  // the layer's first logged rows: its state at the mark, taken now
    log.growing_size[layer] = state.growing->size();
    if (!AppendOnly(layers_[layer].attention)) {
      log.fixed[layer].assign(state.fixed, state.fixed + LayerStateFloats(layer));
      log.growing[layer].assign(state.growing->begin(), state.growing->end());
    }
  }
  const size_t q_floats = size_t(n) * config_.num_heads * config_.head_dim,
               kv_floats = size_t(n) * config_.num_kv_heads * config_.head_dim;
  log.q[layer].insert(log.q[layer].end(), q, q + q_floats);
  log.k[layer].insert(log.k[layer].end(), k, k + kv_floats);
  log.v[layer].insert(log.v[layer].end(), v, v + kv_floats);
}

void Model::RollBack(StatePool& pool, ForwardWorkspace& ws, int slot, int keep) const {
  VerifyLog* found = FindLog(ws, slot);
  STEADY_CHECK(found != nullptr);
  VerifyLog& log = *found;
  STEADY_CHECK(keep >= 0 && keep <= log.rows);
  STEADY_CHECK(pool.position(slot) == log.position + log.rows);
  if (keep < log.rows) {
    ws.replay_y.resize(size_t(keep) * config_.num_heads * config_.head_dim);
    for (int l = 0; l < config_.num_layers; ++l) {
      const LayerAttention& a = layers_[l].attention;
      StateView<float> state = pool.View(slot, l);
      std::vector<float>& g = *state.growing;
      if (AppendOnly(a)) {
        const size_t row_floats = (g.size() - log.growing_size[l]) / size_t(log.rows);
        g.resize(log.growing_size[l] + size_t(keep) * row_floats);
        continue;
      }
      std::copy(log.fixed[l].begin(), log.fixed[l].end(), state.fixed);
      g.assign(log.growing[l].begin(), log.growing[l].end());
      if (keep > 0) {
        AttentionSteps<float>(a, keep, log.q[l].data(), log.k[l].data(), log.v[l].data(), state,
                                  ws.replay_y.data());
      }
    }
    pool.set_position(slot, log.position + keep);
  }
  log.slot = -1;
}

void Model::KeepVerified(StatePool& pool, ForwardWorkspace& ws, int slot, int keep) const {
  STEADY_CHECK(keep >= 1);
  RollBack(pool, ws, slot, keep);
}

}  // namespace steady
