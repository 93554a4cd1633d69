// build/bin/steady: the engine without a server. Generate text, measure perplexity, run one
// attention mechanism on raw tensors, create random checkpoints, benchmark a backend.
#include <cstdio>
#include <cstring>
#include <string>

#include "tools/steady/commands.h"

namespace {

constexpr char kUsage[] = R"(usage: steady COMMAND [flags]

commands:
  generate --model DIR --prompt TEXT [--max-tokens N] [--temperature T] [--top-k K] [--top-p P]
           [--repetition-penalty R] [--seed S] [--stop STR ...] [--mechanism NAME [--order P]
           [--scale S] [--param key=value ...]] [--device cpu|cuda|auto]
      Streams generated text to stdout; usage figures to stderr. --device: where the forward pass
      runs (default auto: a CUDA GPU when this build has the backend and one is visible, else CPU).
  eval --model DIR --data FILE [--max-tokens N] [--context N] [--json] [--device D] [mechanism flags]
      Perplexity of a text file through the recurrent (decode) path, and state bytes per session.
  attn --mechanism NAME --in IN.safetensors --out OUT.safetensors [--form recurrent|parallel|chunked]
       [--order P] [--scale S] [--chunk-size C] [--param key=value ...]
      Runs one mechanism on raw tensors q, k [H, T, dk] and v [H, T, dv] (sliced mechanisms: zq, zk
      [H, T]) plus the mechanism's tensors (slay.anchors, slay.omega, dark.M, dark.G,
      sliced.bandwidth); writes y [H, T, dv] in the input's float type.
  init --out DIR [--config FILE | --preset tiny|llama1b] [--mechanism NAME ...] [--seed S]
       [--tokenizer FILE] [--dtype f32|f16|bf16]
      Writes a randomly initialised checkpoint (config.json, model.safetensors, tokenizer.model).
  info --model DIR | --preset tiny|llama1b | --config FILE  [mechanism flags]
      Prints the shape, mechanism, parameters and state bytes per session (and KV-cache bytes per
      token for softmax layers) as JSON; with --preset/--config, sizes only, no weights.
  bench (--preset tiny|llama1b | --config FILE | --model DIR) --batch B --context L [--device D]
        [--steps N] [--prefill-tokens N] [--prefill-chunk C] [--copy-bytes N] [--seed S] [--json]
        [mechanism flags]
      Synthetic decode and prefill through the --device backend on random weights of the shape (or
      the checkpoint). Copy bandwidth: Backend::CopyBandwidth of --copy-bytes buffers (default 256
      MiB; read + written bytes per second). Decode: B slots at position L (constant state: 256 real
      tokens, then the position set to L; a KV cache: L random rows in every slot, refused on the cpu
      backend above 4 GB; other growing state: L real tokens prefilled, refused on the cpu backend
      above 1e12 multiply-adds), 3 warm-up steps, then N timed steps (default 32) of one token per
      slot ending in a greedy draw, each timed through Synchronize(); tokens/s = B / median step
      time. --batch and --context take comma-separated lists: one report per pair on one model
      (with --json, one JSON object per line); the prefill figure comes with the first.
        bytes per step = weight bytes + sum over slots of (state read + state written)
          state read    = the slot's BytesInUse() before the step (fixed state + KV cache)
          state written = StateBytesPerSlot() + what the step appended (a KV row)
        so 2 x state bytes per slot for constant state; KV cache + one row for softmax. Bandwidth =
        bytes per step / median step time, also as a fraction of the copy bandwidth. Prefill: one slot,
        N tokens (default 2048; 0 skips) in chunks of C (default 512), after one untimed chunk.
)";

struct Command {
  const char* name;
  absl::Status (*run)(int, char**);
};

constexpr Command kCommands[] = {{"generate", steady::RunGenerate}, {"eval", steady::RunEval},
                                 {"attn", steady::RunAttn},         {"init", steady::RunInit},
                                 {"info", steady::RunInfo},         {"bench", steady::RunBench}};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "help")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (const Command& c : kCommands) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    const absl::Status s = c.run(argc - 2, argv + 2);
    if (!s.ok()) {
      std::fprintf(stderr, "steady %s: %s\n", c.name, std::string(s.message()).c_str());
      return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
    }
    return 0;
  }
  std::fprintf(stderr, "steady: unknown command \"%s\"\n\n%s", argv[1], kUsage);
  return 2;
}
