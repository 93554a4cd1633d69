// `steady logits`: the logits of every position of a prompt given as token ids, through a backend:
// the check of a checkpoint against another implementation (tools/bench/hf_compare.py compares them
// with Hugging Face transformers on the same weights) needs no tokenizer and no sampling.
#include <cstdio>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status.h"
#include "tools/steady/commands.h"

namespace steady {
namespace {

absl::StatusOr<std::vector<int32_t>> ParseIds(const std::string& text, int vocab) {
  std::vector<int32_t> ids;
  for (const std::string& part : std::vector<std::string>(absl::StrSplit(text, ','))) {
    int64_t id = 0;
    if (!absl::SimpleAtoi(part, &id) || id < 0 || id >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("--ids: \"", part, "\" is not a token id of this model (0 to ", vocab - 1, ")"));
    }
    ids.push_back(int32_t(id));
  }
  return ids;
}

absl::Status RunLogits(const Flags& flags) {
  auto ids_flag = flags.Require("ids");
  if (!ids_flag.ok()) return ids_flag.status();
  auto model = LoadModelFromFlags(flags);
  if (!model.ok()) return model.status();
  auto ids = ParseIds(*ids_flag, model->vocab_size());
  if (!ids.ok()) return ids.status();
  BackendOptions options;
  options.max_context = std::max<int64_t>(4096, int64_t(ids->size()) + 1);
  auto backend = BackendFromFlags(flags, *model, options);
  if (!backend.ok()) return backend.status();
  std::vector<float> logits;
  (*backend)->Forward({{0, *ids, /*all_logits=*/true}}, &logits);
  const int vocab = model->vocab_size();
  nlohmann::json report = {{"tokens", ids->size()}, {"vocab", vocab}, {"device", (*backend)->Name()}};
  nlohmann::json argmax = nlohmann::json::array();
  for (size_t t = 0; t < ids->size(); ++t) {
    const float* row = logits.data() + t * vocab;
    argmax.push_back(std::max_element(row, row + vocab) - row);
  }
  report["argmax"] = argmax;
  if (flags.Has("out")) {
    const std::string path = flags.Get("out");
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(logits.data()), std::streamsize(logits.size() * sizeof(float)));
    f.close();
    if (!f) return absl::InternalError(absl::StrCat("--out ", path, ": cannot write the logits"));
    report["out"] = path;
  } else {
    nlohmann::json rows = nlohmann::json::array();
    for (size_t t = 0; t < ids->size(); ++t) {
      rows.push_back(std::vector<float>(logits.begin() + t * vocab, logits.begin() + (t + 1) * vocab));
    }
    report["logits"] = rows;
  }
  std::printf("%s\n", report.dump().c_str());
  return absl::OkStatus();
}

}  // namespace

Command LogitsCommand() {
  return {"logits", R"(usage: steady logits --model DIR|FILE.gguf --ids I[,I...] [--out FILE] [--device D] [--threads N]
                     [--cpu-weights auto|stored|f32|bf16|q8|q4|q4k] [--cpu-gemm auto|simd|openblas|avx512vnni|avxvnni|avx2|armdot] [--cuda-weights bf16|f32]
                     [--cuda-kv bf16|f32] [--mechanism NAME [--order P] [--scale S] [--param key=value ...]]

Runs the token ids as one prompt through the --device backend (no tokenizer) and prints one JSON
line: tokens, vocab, device and argmax (each position's greedy next token). --out FILE writes every
position's logits there as float32, little-endian, [tokens, vocab]; without it the JSON holds them
as "logits". For checks against other implementations (tools/bench/hf_compare.py).
)",
          {.with_value = FlagUnion({{"model", "ids", "out"}, kMechanismFlags, kDeviceFlags, kCudaFlags})},
          RunLogits};
}

}  // namespace steady
