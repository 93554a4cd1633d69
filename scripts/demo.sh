#!/usr/bin/env bash
# The demo: installs what is missing, builds, and streams a generation from the default model.
# Until the trained checkpoints land in models/, the default model is a randomly initialised
# tiny checkpoint (the output is noise, but every stage of the engine runs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
model=${STEADY_DEMO_MODEL:-models/tiny-softmax}
if [ ! -f "$model/model.safetensors" ]; then
  model=build/demo-model
  ./build/bin/steady init --out "$model" --preset tiny --tokenizer tests/data/tokenizer/tokenizer.model --seed 1
fi
echo "== steady generate --model $model (softmax)"
./build/bin/steady generate --model "$model" --prompt "This License applies to" --max-tokens 48 \
  --temperature 0.8 --top-p 0.95 --seed 1
echo "== the same weights served with constant-size Taylor state"
./build/bin/steady generate --model "$model" --mechanism taylor --order 4 --prompt "This License applies to" \
  --max-tokens 48 --temperature 0.8 --top-p 0.95 --seed 1
