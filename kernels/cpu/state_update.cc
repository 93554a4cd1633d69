#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/state_update.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/host_device.h"

HWY_BEFORE_NAMESPACE();
namespace steady::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void KahanAxpyLanes(float x, const float* HWY_RESTRICT v, float* HWY_RESTRICT row, float* HWY_RESTRICT comp, int n) {
  const hn::ScalableTag<float> d;
  const int lanes = int(hn::Lanes(d));
  const auto xv = hn::Set(d, x);
  int i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto p = hn::Mul(xv, hn::LoadU(d, v + i));
    const auto sum = hn::LoadU(d, row + i);
    auto c = hn::LoadU(d, comp + i);
    const auto t = hn::Add(sum, p);
    // KahanAdd: the lost part of the larger operand's sum with the smaller.
    const auto big = hn::Ge(hn::Abs(sum), hn::Abs(p));
    c = hn::Add(c, hn::IfThenElse(big, hn::Add(hn::Sub(sum, t), p), hn::Add(hn::Sub(p, t), sum)));
    const auto s = hn::Add(t, c);
    c = hn::Sub(c, hn::Sub(s, t));
    hn::StoreU(s, d, row + i);
    hn::StoreU(c, d, comp + i);
  }
  for (; i < n; ++i) KahanAdd(row[i], comp[i], x * v[i]);
}

void AxpyLanes(float x, const float* HWY_RESTRICT v, float* HWY_RESTRICT row, int n) {
  const hn::ScalableTag<float> d;
  const int lanes = int(hn::Lanes(d));
  const auto xv = hn::Set(d, x);
  int i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(hn::Add(hn::LoadU(d, row + i), hn::Mul(xv, hn::LoadU(d, v + i))), d, row + i);
  }
  for (; i < n; ++i) row[i] += x * v[i];
}

}  // namespace HWY_NAMESPACE
}  // namespace steady::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/cpu/state_update.h"

namespace steady::cpu {

HWY_EXPORT(KahanAxpyLanes);
HWY_EXPORT(AxpyLanes);

void KahanAxpy(float x, const float* v, float* row, float* comp, int n) {
  HWY_DYNAMIC_DISPATCH(KahanAxpyLanes)(x, v, row, comp, n);
}

void Axpy(float x, const float* v, float* row, int n) { HWY_DYNAMIC_DISPATCH(AxpyLanes)(x, v, row, n); }


}  // namespace steady::cpu
#endif  // HWY_ONCE
