// Runs an Automaton over bytes: the state is a set of stacks, each a top position and the return
// positions below it, shared through an arena of interned frames (so equal stacks are equal ids and
// a set of stacks is a small sorted vector). Every top in a set is a position some byte leaves.
#ifndef STEADY_MODEL_CONSTRAIN_PUSHDOWN_H_
#define STEADY_MODEL_CONSTRAIN_PUSHDOWN_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "model/constrain/automaton.h"

namespace steady {

inline constexpr int32_t kNoFrame = -1;

struct StackTop {
  int32_t pos;
  int32_t parent;  // the frame below (an arena index), or kNoFrame: this is the bottom rule
  bool operator==(const StackTop& o) const { return pos == o.pos && parent == o.parent; }
  bool operator<(const StackTop& o) const { return pos != o.pos ? pos < o.pos : parent < o.parent; }
};

class Pushdown {
 public:
  explicit Pushdown(const Automaton& a) : a_(a) {}

  // The stacks a rule's start leads to before any byte (calls expanded, nullable ends popped).
  // *ended: the bottom rule may end there.
  void Start(int32_t rule, std::vector<StackTop>* out, bool* ended);
  // The stacks after `byte`; *ended as above. `in` and `out` must differ.
  void Advance(const std::vector<StackTop>& in, uint8_t byte, std::vector<StackTop>* out, bool* ended);
  // Advance over several bytes; false once no stack is left (*ended tells whether the bottom rule
  // ended right after the last byte).
  bool AdvanceBytes(std::vector<StackTop>* tops, const uint8_t* bytes, size_t n, bool* ended);

  const Automaton& automaton() const { return a_; }
  size_t frames() const { return frames_.size(); }

 private:
  int32_t Intern(int32_t pos, int32_t parent);
  void Expand(StackTop t, std::vector<StackTop>* out, bool* ended);

  const Automaton& a_;
  std::vector<StackTop> frames_;  // interned return frames: (return position, frame below)
  absl::flat_hash_map<uint64_t, int32_t> frame_ids_;
  absl::flat_hash_set<uint64_t> seen_;  // scratch of Expand
  std::vector<StackTop> scratch_;
};

}  // namespace steady

#endif  // STEADY_MODEL_CONSTRAIN_PUSHDOWN_H_
