#!/usr/bin/env bash
# The AMX-INT8 kernel's instructions as compiled (kernels/cpu/matmul_dot_amx.cc), read from the
# disassembly: what its tests on the tile model cannot see, since they never run these instructions
# (docs/cpu.md, "int8 on AMX tiles"). For each format's Groups<AmxTiles, ...>:
#  - every TDPBSUD has q_x's tile as its signed source and a weight tile as its unsigned one, into an
#    accumulator, exactly the triples TileRoles gives (tiles 4 / 5-7 for whole blocks, 4-5 / 6-7 for
#    q6k's halves): a swapped operand would multiply unsigned activations by signed weights;
#  - no LDTILECFG inlined into it: the configuration goes through the out-of-line
#    AmxTiles::LoadConfig, whose LDTILECFG reads the whole operand it is given (GCC 12's
#    _tile_loadconfig, inlined, let the compiler drop the stores of the tiles' shapes).
# Skipped (77) off x86-64 or without objdump. Usage: amx_codegen.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
source "$(dirname "$0")/lib.bash"

if [ "$(uname -m)" != x86_64 ] || ! command -v objdump > /dev/null; then
  echo "skipped: needs x86-64 and objdump"
  exit 77
fi
objdump -d -C --no-show-raw-insn "$bin/cpu_dot_test" > "$tmp/dis" || fail "objdump of cpu_dot_test"

/usr/bin/python3 - "$tmp/dis" > "$tmp/checks" <<'PY' || true
import collections, re, sys
insns = collections.defaultdict(list)  # function -> [(mnemonic, operands)]
fn = None
for line in open(sys.argv[1]):
    m = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
    if m:
        fn = m.group(1)
        continue
    m = re.match(r"^\s+[0-9a-f]+:\s+(tdpbsud|ldtilecfg)\s+(\S+)", line)
    if m and fn:
        insns[fn].append((m.group(1), m.group(2)))

def triples(rows, weights):  # AT&T order: src2 (unsigned weights), src1 (signed q_x), destination
    return {f"%tmm{w},%tmm{r},%tmm{c}" for c, r, w in zip(range(4), rows, weights)}
whole = triples([4, 4, 4, 4], [5, 6, 7, 5])
halves = triples([4, 5, 4, 5], [6, 7, 6, 7])
formats = {"Q8Format": whole, "Block32Format<false, false, 8>": whole, "Block32Format<false, true, 0>": whole,
           "Block32Format<true, false, 16>": whole, "Block32Format<true, true, 0>": whole,
           "KQuantFormat<false>": whole, "KQuantFormat<true>": whole, "Q6KFormat": halves}
for name, want in formats.items():
    fns = [f for f in insns if "Groups<" in f and "AmxTiles" in f and name + ">" in f.replace(" >", ">")]
    if len(fns) != 1:
        print(f"FAIL one Groups<AmxTiles, {name}> in the binary, found {len(fns)}")
        continue
    got = {ops for op, ops in insns[fns[0]] if op == "tdpbsud"}
    print(("ok" if got == want else "FAIL") + f" {name}: TDPBSUD triples {sorted(got)}" + ("" if got == want else f", want {sorted(want)}"))
    inlined = [ops for op, ops in insns[fns[0]] if op == "ldtilecfg"]
    print(("ok" if not inlined else "FAIL") + f" {name}: no LDTILECFG inlined {inlined}")
load = [f for f in insns if "AmxTiles::LoadConfig" in f]
got = [ops for f in load for op, ops in insns[f] if op == "ldtilecfg"]
print(("ok" if len(load) == 1 and got == ["(%rdi)"] else "FAIL") + f" AmxTiles::LoadConfig is out of line, one LDTILECFG of its argument {got}")
PY
while read -r status rest; do
  if [ "$status" = ok ]; then pass "$rest"; else fail "$rest"; fi
done < "$tmp/checks"
[ -s "$tmp/checks" ] || fail "no checks ran"
finish amx_codegen
