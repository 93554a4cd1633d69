// How far the sliced mechanisms' bucketed decoder (constant state) is from the exact decoder
// (growing state) on random token streams. Prints a markdown table for docs/mechanisms/sliced_relu.md.
//
//   sliced_error [--tokens 10000,100000] [--dv 8] [--seed 1]
//
// Streams use projection "none" (head_dim 1), so the scores are drawn directly: z^q and z^k from
// N(0, 1) (what the projections produce for unit inputs) or N(0, 3^2) (wider than the default bin
// range [-4, 4)); values v ~ N(0, 1) independent of z, or v = sin(2 z^k) + 0.1 N(0, 1) (values that
// depend on the score, so the outputs carry signal). Both decoders run in fp64, so the figures are the
// binning error alone; the error is the relative L2 norm over all outputs (and over the last 10% of
// tokens). Wide scores are also run with the bin range widened to [-12, 12) (z_min / z_max).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "base/flags.h"
#include "base/status.h"
#include "model/mechanisms/attention.h"

namespace steady {
namespace {

struct Stream {
  int n = 0, dv = 0;
  std::vector<double> zq, zk, v;
};

Stream MakeStream(int n, int dv, double z_std, bool signal, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> z(0.0, z_std), noise(0.0, 1.0);
  Stream s{n, dv, {}, {}, {}};
  for (int t = 0; t < n; ++t) {
    s.zq.push_back(z(rng));
    s.zk.push_back(z(rng));
    for (int d = 0; d < dv; ++d) {
      s.v.push_back(signal ? std::sin(2.0 * s.zk.back() + d) + 0.1 * noise(rng) : noise(rng));
    }
  }
  return s;
}

std::vector<double> RunDecoder(const std::string& mechanism, const nlohmann::json& params, const Stream& s) {
  const AttnShape shape{1, 1, 1, s.dv};
  auto a = ParseLayerAttention({mechanism, params}, shape);
  if (!a.ok()) {
    std::fprintf(stderr, "%s\n", a.status().ToString().c_str());
    std::exit(1);
  }
  if (mechanism == "sliced_relu_bump") std::get<SlicedParams>(a->params).bandwidth = {0.6932f};
  std::vector<double> fixed(StateFloats(*a)), growing;
  StateView<double> st{fixed.data(), &growing};
  InitState<double>(*a, st);
  std::vector<double> y(size_t(s.n) * s.dv);
  AttentionRecurrent<double>(*a, s.n, s.zq.data(), s.zk.data(), s.v.data(), st, y.data());
  return y;
}

double RelL2(const std::vector<double>& a, const std::vector<double>& ref, size_t from) {
  double num = 0, den = 0;
  for (size_t i = from; i < ref.size(); ++i) {
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

constexpr char kUsage[] = R"(usage: sliced_error [--tokens N[,N...]] [--dv D] [--seed S]

Relative L2 error of the bucketed sliced decoder against the exact one (fp64), per bin count, for
N keys (default 10000,100000) with value dimension D (default 8).
)";

int Main(int argc, char** argv) {
  const Flags flags = ParseFlagsOrExit(argc, argv, {.with_value = {"tokens", "dv", "seed"}}, kUsage);
  std::vector<int> tokens;
  for (const auto& item : absl::StrSplit(flags.Get("tokens", "10000,100000"), ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(item, &n) || n < 1) {
      ExitOnUsageError(argv[0], absl::InvalidArgumentError("--tokens: expected counts >= 1 separated by commas"), kUsage);
    }
    tokens.push_back(n);
  }
  auto dv_flag = flags.GetInt("dv", 8, 1, 4096);
  auto seed_flag = flags.GetUint("seed", 1);
  ExitOnUsageError(argv[0], FirstError({dv_flag.status(), seed_flag.status()}), kUsage);
  const int dv = int(*dv_flag);
  const uint64_t seed = *seed_flag;
  const int bins[] = {16, 64, 256};
  std::printf("dv = %d, seed = %llu; relative L2 error of the bucketed decoder vs the exact decoder, fp64"
              " (bump: b = 0.6932)\n\n", dv, (unsigned long long)seed);
  std::printf("| mechanism | z | v | tokens | bin range | keys outside | bins 16 | bins 64 | bins 256 |"
              " bins 64, last 10%% |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const char* mechanism : {"sliced_relu", "sliced_relu_bump"}) {
    for (double z_std : {1.0, 3.0}) {
      for (bool signal : {false, true}) {
        for (int n : tokens) {
          const Stream s = MakeStream(n, dv, z_std, signal, seed);
          const std::vector<double> exact =
              RunDecoder(mechanism, {{"projection", "none"}, {"decoder", "exact"}}, s);
          for (double range : z_std > 1 ? std::vector<double>{4, 12} : std::vector<double>{4}) {
            int outside = 0;
            for (double z : s.zk) outside += (z < -range || z >= range);
            std::printf("| %s | N(0,%g) | %s | %d | [-%g,%g) | %.2f%% |", mechanism, z_std * z_std,
                        signal ? "sin(2z)+noise" : "N(0,1)", n, range, range, 100.0 * outside / n);
            double last = 0;
            for (int b : bins) {
              const std::vector<double> y = RunDecoder(
                  mechanism,
                  {{"projection", "none"}, {"decoder", "bucketed"}, {"bins", b}, {"z_min", -range}, {"z_max", range}},
                  s);
              std::printf(" %.2e |", RelL2(y, exact, 0));
              if (b == 64) last = RelL2(y, exact, size_t(n - n / 10) * dv);
            }
            std::printf(" %.2e |\n", last);
            std::fflush(stdout);
          }
        }
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace steady

int main(int argc, char** argv) { return steady::Main(argc, argv); }
