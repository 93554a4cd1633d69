// tokenizer_speed: encode throughput of a model directory's tokenizer on one thread, the C++ half of
// tools/bench/tokenizer_bench.sh (which runs @huggingface/tokenizers on the same text beside it).
//
//   build/bin/tokenizer_speed --model DIR --text FILE [--rounds N]
//   -> {"bytes": ..., "ids": ..., "cold_mb_per_s": the first round, "mb_per_s": the best round, ...}
// The first round starts with an empty word cache (the first text a server encodes); later rounds
// find every word cached.
#include <chrono>
#include <cstdio>
#include <limits>

#include <nlohmann/json.hpp>

#include "base/file_io.h"
#include "base/flags.h"
#include "model/text/tokenizer.h"

int main(int argc, char** argv) {
  using steady::Flags;
  const std::string usage = "usage: tokenizer_speed --model DIR --text FILE [--rounds N]\n";
  Flags flags = steady::ParseFlagsOrExit(argc, argv, {.with_value = {"model", "text", "rounds"}, .switches = {}}, usage);
  auto rounds = flags.GetInt("rounds", 3, 1, 1000);
  auto dir = flags.Require("model");
  auto path = flags.Require("text");
  if (!rounds.ok() || !dir.ok() || !path.ok()) {
    steady::ExitOnUsageError(argv[0], !rounds.ok() ? rounds.status() : !dir.ok() ? dir.status() : path.status(), usage);
  }
  auto tokenizer = steady::Tokenizer::LoadFromDirectory(*dir);
  auto text = steady::ReadWholeFile(*path);
  if (!tokenizer.ok() || !text.ok()) {
    std::fprintf(stderr, "tokenizer_speed: %s\n",
                 std::string((!tokenizer.ok() ? tokenizer.status() : text.status()).message()).c_str());
    return 1;
  }
  double best = std::numeric_limits<double>::infinity(), first = 0;
  size_t ids = 0;
  for (int64_t r = 0; r < *rounds; ++r) {
    const auto start = std::chrono::steady_clock::now();
    auto encoded = (*tokenizer)->Encode(*text);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!encoded.ok()) {
      std::fprintf(stderr, "tokenizer_speed: %s\n", std::string(encoded.status().message()).c_str());
      return 1;
    }
    ids = encoded->size();
    best = std::min(best, seconds);
    if (r == 0) first = seconds;
  }
  const nlohmann::json out = {{"bytes", text->size()}, {"ids", ids}, {"seconds", best},
                              {"mb_per_s", double(text->size()) / 1e6 / best},
                              {"cold_mb_per_s", double(text->size()) / 1e6 / first}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
