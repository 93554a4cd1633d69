#include "model/decoder/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace steady {
namespace {

// theta^(-2i/dim) for i in [0, dim/2), in double.
std::vector<double> Plain(double theta, int dim) {
  std::vector<double> f(size_t(dim / 2));
  for (int i = 0; i < dim / 2; ++i) f[size_t(i)] = std::pow(theta, -2.0 * i / dim);
  return f;
}

// Llama 3.1's bands: wavelengths above original/low_freq_factor are divided by `factor`, those below
// original/high_freq_factor kept, the ones between blended smoothly.
std::vector<double> Llama3(const RopeScaling& r, std::vector<double> f) {
  const double old = double(r.original_max_position_embeddings);
  const double low_wavelen = old / r.low_freq_factor, high_wavelen = old / r.high_freq_factor;
  for (double& x : f) {
    const double wavelen = 2 * std::numbers::pi / x;
    if (wavelen > low_wavelen) {
      x /= r.factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth = (old / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      x = (1 - smooth) * x / r.factor + smooth * x;
    }
  }
  return f;
}

// YaRN: interpolated (divided by factor) below the correction range of dimensions, extrapolated
// (kept) above it, a linear ramp between.
std::vector<double> Yarn(const RopeScaling& r, double theta, int dim) {
  auto correction_dim = [&](double rotations) {
    return dim * std::log(double(r.original_max_position_embeddings) / (rotations * 2 * std::numbers::pi)) /
           (2 * std::log(theta));
  };
  double low = correction_dim(r.beta_fast), high = correction_dim(r.beta_slow);
  if (r.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;  // as Hugging Face: no division by zero
  std::vector<double> f = Plain(theta, dim);
  for (int i = 0; i < dim / 2; ++i) {
    // The ramp is computed in fp32 in Hugging Face; the difference is below fp32's rounding of f.
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    const double extrapolation = 1 - ramp;
    f[size_t(i)] = f[size_t(i)] / r.factor * (1 - extrapolation) + f[size_t(i)] * extrapolation;
  }
  return f;
}

std::vector<float> ToFloat(const std::vector<double>& f) { return std::vector<float>(f.begin(), f.end()); }

}  // namespace

RopeFrequencies::RopeFrequencies(const ModelConfig& c) {
  if (c.rope_theta <= 0) return;
  const RopeScaling& r = c.rope_scaling;
  dim_ = c.head_dim;
  theta_ = c.rope_theta;
  std::vector<double> f = Plain(c.rope_theta, c.head_dim);
  if (r.type == "linear") {
    for (double& x : f) x /= r.factor;
  } else if (r.type == "llama3") {
    f = Llama3(r, std::move(f));
  } else if (r.type == "yarn") {
    f = Yarn(r, c.rope_theta, c.head_dim);
    attention_factor_ = float(r.attention_factor);
  } else if (r.type == "dynamic") {
    dynamic_ = true;
    factor_ = r.factor;
    original_ = r.original_max_position_embeddings;
  }
  if (r.freq_divisors.size() == f.size()) {
    for (size_t i = 0; i < f.size(); ++i) f[i] /= r.freq_divisors[i];
  }
  inv_freq_ = ToFloat(f);
}

const float* RopeFrequencies::At(int64_t position, std::vector<float>* scratch) const {
  const int64_t length = position + 1;  // the sequence that ends at this token
  if (!dynamic_ || length <= original_) return inv_freq_.data();
  const double base =
      theta_ * std::pow(factor_ * double(length) / double(original_) - (factor_ - 1), double(dim_) / (dim_ - 2));
  *scratch = ToFloat(Plain(base, dim_));
  return scratch->data();
}

}  // namespace steady
