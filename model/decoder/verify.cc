// Speculative verification's rollback (Segment::verify, Model::KeepVerified). The simple exact
// design: before a verify segment the slot's state is copied (a KV cache only remembers its length:
// the rows Step appends are final), and keeping a prefix restores the copy and replays the kept
// rows' attention through Step from the q, k, v the step saved. Step is the arithmetic plain
// decoding runs, on the same inputs in the same order, so the kept state is bit for bit what plain
// decoding leaves, Kahan compensations and bucketed or windowed states included, for every mechanism
// without one line of mechanism-specific code. It costs a state copy per verify and, when a draft
// is rejected, the kept rows' attention once more (never the projections or the MLP).
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

}  // namespace

int Model::BeginVerify(StatePool& pool, ForwardWorkspace& ws, int slot, int rows) const {
  int free = -1;
  for (size_t i = 0; i < ws.verify.size(); ++i) {
    STEADY_CHECK(ws.verify[i].slot != slot);  // the slot's previous verify was settled (KeepVerified)
    if (ws.verify[i].slot < 0 && free < 0) free = int(i);
  }
  if (free < 0) {
    free = int(ws.verify.size());
    ws.verify.emplace_back();
  }
  VerifyLog& log = ws.verify[size_t(free)];
  const int layers = config_.num_layers;
  log.slot = slot;
  log.position = pool.position(slot);
  log.rows = rows;
  log.fixed.assign(pool.SlotData(slot), pool.SlotData(slot) + pool.fixed_floats_per_slot());
  log.growing.resize(layers);
  log.growing_size.resize(layers);
  log.q.resize(layers);
  log.k.resize(layers);
  log.v.resize(layers);
  for (int l = 0; l < layers; ++l) {
    const std::vector<float>& g = pool.Growing(slot, l);
    log.growing_size[l] = g.size();
    if (AppendOnly(layers_[l].attention)) {
      log.growing[l].clear();
    } else {
      log.growing[l].assign(g.begin(), g.end());
    }
  }
  return free;
}

void Model::RecordVerifyRows(VerifyLog& log, int layer, const float* q, const float* k, const float* v) const {
  const size_t q_floats = size_t(log.rows) * config_.num_heads * config_.head_dim,
               kv_floats = size_t(log.rows) * config_.num_kv_heads * config_.head_dim;
  log.q[layer].assign(q, q + q_floats);
  log.k[layer].assign(k, k + kv_floats);
  log.v[layer].assign(v, v + kv_floats);
}

void Model::KeepVerified(StatePool& pool, ForwardWorkspace& ws, int slot, int keep) const {
  auto it = std::find_if(ws.verify.begin(), ws.verify.end(), [&](const VerifyLog& l) { return l.slot == slot; });
  STEADY_CHECK(it != ws.verify.end());
  VerifyLog& log = *it;
  STEADY_CHECK(keep >= 1 && keep <= log.rows);
  STEADY_CHECK(pool.position(slot) == log.position + log.rows);
  if (keep < log.rows) {
    std::copy(log.fixed.begin(), log.fixed.end(), pool.SlotData(slot));
    ws.replay_y.resize(size_t(keep) * config_.num_heads * config_.head_dim);
    for (int l = 0; l < config_.num_layers; ++l) {
      const LayerAttention& a = layers_[l].attention;
      std::vector<float>& g = pool.Growing(slot, l);
      if (AppendOnly(a)) {
        const size_t row_floats = (g.size() - log.growing_size[l]) / size_t(log.rows);
        g.resize(log.growing_size[l] + size_t(keep) * row_floats);
        continue;
      }
      g.assign(log.growing[l].begin(), log.growing[l].end());
      AttentionRecurrent<float>(a, keep, log.q[l].data(), log.k[l].data(), log.v[l].data(), pool.View(slot, l),
                                ws.replay_y.data());
    }
    pool.set_position(slot, log.position + keep);
  }
  log.slot = -1;
}

}  // namespace steady
