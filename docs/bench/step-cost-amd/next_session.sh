#!/usr/bin/env bash
# What issue 32 still needs measured on the 2-core AMD EPYC (Zen 4), in one go: run from the repository
# root with the venv active (the README's test command installs it); about 115 minutes on a quiet
# machine, plus 17 for llama.cpp's build where the cache lacks it. Writes under DIR (default
# /tmp/amd-DATE); copy what it wrote into docs/bench/ and the tables into docs/performance.md.
#
# Resumable: each step leaves DIR/STEP.done when it succeeds, and a second run with the same DIR skips
# the steps already done (a session may stop before the end). A failed step is reported and the others
# still run; the script then exits 1. The steps run in the order the goals need them: the probe,
# the decode rows on the default weights and on llama.cpp's kernels, then the cost grid, the other
# weights and the typist pair.
set -uo pipefail
out=${1:-/tmp/amd-$(date +%F)}
mkdir -p "$out"
failed=()

step() {  # step NAME COMMAND...: run COMMAND unless DIR/NAME.done exists; its output in DIR/NAME.log
  local name=$1
  shift
  if [ -e "$out/$name.done" ]; then
    echo "== $name: done before, skipped"
    return
  fi
  echo "== $name ($(date +%T))"
  if "$@" 2>&1 | tee "$out/$name.log"; then
    touch "$out/$name.done"
  else
    echo "== $name FAILED (see $out/$name.log)"
    failed+=("$name")
  fi
}

decode() {  # decode NAME ARGS...: the decode rows with ARGS
  local name=$1
  shift
  step "decode-$name" speclsp bench decode --quick --workloads edit,fim \
    --methods none,ngram,auto,llama_plain,llama_ngram --no-sweep --out "$out/decode-$name" "$@"
}

typist() {  # typist QUANTIZATION: the typist, every answer replayed in the server's own computation
  step "typist-$1" speclsp bench lsp --typist --max-new-tokens 64 --paces steady --check-exact \
    --setting "quantization=\"$1\"" --out "$out/typist-$1"
}

command -v speclsp >/dev/null || { echo "speclsp is not on PATH: install as the README's test command does, then activate .venv"; exit 2; }
grep -m1 "model name" /proc/cpuinfo | tee "$out/cpu.txt"
# llama.cpp for the peer rows and the llama.cpp engine: built once into the user cache (about 17
# CPU-minutes on a fresh machine), seconds when it is there.
step peers speclsp bench peers --build
# Which bfloat16 kernel oneDNN runs there, and the int8 kernel int8-hybrid uses (about a minute).
step bf16-probe python docs/bench/step-cost-amd/bf16_probe.py --out "$out/bf16_probe.json"
# The default (quantization auto: what it chose is in the log and weight-choice.json), then llama.cpp's
# kernels on the same Q4_K_M files (about 10 minutes each).
decode auto --quantization auto
decode llama-cpp --engine llama.cpp
# cost(M) of every weight path (about 55 minutes on the Intel Xeon).
step step-cost speclsp bench step-cost --out "$out/step-cost"
decode none --quantization none
decode int4-hybrid --quantization int4-hybrid
# The typist under the default and in bfloat16 (about 12 minutes each on the Intel Xeon). It exits 1
# when a replay finds a fault: its log says which answer.
typist auto
typist none
cp "${SPECLSP_CACHE_DIR:-$HOME/.cache/speclsp}/weight-choice.json" "$out/" 2>/dev/null || true
echo "wrote $out"
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed: ${failed[*]} (run again with the same DIR to retry only those)"
  exit 1
fi
