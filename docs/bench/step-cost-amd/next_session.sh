#!/usr/bin/env bash
# What issue 32 still needs measured on the 2-core AMD EPYC (Zen 4), in one go: run from the repository
# root with the venv active and the peer build in the cache (speclsp bench peers --build); about 115
# minutes on a quiet machine. Writes under DIR (default /tmp/amd-DATE); copy what it wrote into
# docs/bench/ and the tables into docs/performance.md.
set -euo pipefail
out=${1:-/tmp/amd-$(date +%F)}
mkdir -p "$out"
grep -m1 "model name" /proc/cpuinfo | tee "$out/cpu.txt"
# Which bfloat16 kernel oneDNN runs there, and the int8 kernel int8-hybrid uses (about a minute).
python docs/bench/step-cost-amd/bf16_probe.py --out "$out/bf16_probe.json"
# cost(M) of every weight path (about 55 minutes on the Intel Xeon).
speclsp bench step-cost --out "$out/step-cost"
# The decode rows on each engine: the default (quantization auto: what it chose is in the log),
# bfloat16, int4-hybrid, and llama.cpp's kernels on the same Q4_K_M files.
methods=none,ngram,auto,llama_plain,llama_ngram
for quantization in auto none int4-hybrid; do
  speclsp bench decode --quick --workloads edit,fim --methods "$methods" --no-sweep \
    --quantization "$quantization" --out "$out/decode-$quantization" 2>&1 | tee "$out/decode-$quantization.log"
done
speclsp bench decode --quick --workloads edit,fim --methods "$methods" --no-sweep --engine llama.cpp \
  --out "$out/decode-llama-cpp" 2>&1 | tee "$out/decode-llama-cpp.log"
# The typist under the default and in bfloat16, every shown answer replayed in the server's own
# computation (about 12 minutes each on the Intel Xeon).
for quantization in auto none; do
  speclsp bench lsp --typist --max-new-tokens 64 --paces steady --check-exact \
    --setting "quantization=\"$quantization\"" --out "$out/typist-$quantization" > "$out/typist-$quantization.log" 2>&1 \
    || echo "typist $quantization: a replay found a fault (see $out/typist-$quantization.log)"
  tail -n 3 "$out/typist-$quantization.log"
done
cp "${SPECLSP_CACHE_DIR:-$HOME/.cache/speclsp}/weight-choice.json" "$out/" 2>/dev/null || true
echo "wrote $out"
