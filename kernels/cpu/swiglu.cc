// SwiGLU's elementwise step (ops.h SwiGlu) on SIMD lanes: silu(g) u = g / (1 + e^-g) u, the
// exponential by Highway's Exp (at most 1 ulp from e^x) instead of std::exp one element at a time,
// which with the division was 3.6% of a 16-session q8 decode step at llama1b's shape (docs/cpu.md).
// Every element goes through the lanes, a short tail through a padded vector, so an element's value
// does not depend on where ParallelRange splits the array (the thread count) or on its index.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/swiglu.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <cstdint>

HWY_BEFORE_NAMESPACE();
namespace steady::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class D, class V>
HWY_INLINE V SiluTimes(D d, V g, V u) {
  // e^-g overflows to infinity from -g > 88.7 (silu(g) is then -0, as with std::exp); Exp's
  // input is kept inside its valid range (up to 104) so that it gets there the same way.
  const V e = hn::Exp(d, hn::Min(hn::Neg(g), hn::Set(d, 104.0f)));
  return hn::Mul(hn::Div(g, hn::Add(hn::Set(d, 1.0f), e)), u);
}

void SwiGluLanes(const float* HWY_RESTRICT gate, const float* HWY_RESTRICT up, int64_t n, float* out) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = int64_t(hn::Lanes(d));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(SiluTimes(d, hn::LoadU(d, gate + i), hn::LoadU(d, up + i)), d, out + i);
  if (i < n) {
    HWY_ALIGN float g[hn::MaxLanes(d)] = {}, u[hn::MaxLanes(d)] = {}, o[hn::MaxLanes(d)];
    std::copy(gate + i, gate + n, g);
    std::copy(up + i, up + n, u);
    hn::Store(SiluTimes(d, hn::Load(d, g), hn::Load(d, u)), d, o);
    std::copy(o, o + (n - i), out + i);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace steady::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"

namespace steady::cpu {

HWY_EXPORT(SwiGluLanes);

void SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  ParallelRange(n, kElementGrain, [&](int64_t i0, int64_t i1) {
    HWY_DYNAMIC_DISPATCH(SwiGluLanes)(gate + i0, up + i0, i1 - i0, out + i0);
  });
}

}  // namespace steady::cpu
#endif  // HWY_ONCE
