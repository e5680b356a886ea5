#!/usr/bin/env bash
# llama_vs_torch.sh [ROUNDS] [STEPS] — trellis against PyTorch eager on one
# Llama shape, on this machine's CPU, side by side in one run: 12 layers,
# 768 channels, 12 query and 4 key/value heads, SwiGLU 2048 wide,
# vocabulary 32000, untied head, B=4, T=256, fp32, AdamW. For 1 thread and
# then 2, ROUNDS rounds (default 3) each time trellis's train_bench
# ("llama") and then tests/bench/torch_llama.py (transformers'
# LlamaForCausalLM, SDPA attention), STEPS timed steps each (default 3,
# after one of warm-up), so that the machine's load falls on both alike.
# Prints every round's line and, per thread count, the median ms per step of
# each and their ratio. Needs torch and transformers (pip) in the python3
# it runs; not a test.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
steps=${2:-3}
python=${PYTHON:-python3}
bazel build -c opt //tests/bench:train_bench >&2
bin=bazel-bin/tests/bench/train_bench
for threads in 1 2; do
  tr=() pt=()
  for ((r = 1; r <= rounds; r++)); do
    line=$("$bin" --only llama --threads "$threads" --steps "$steps" | grep '^llama')
    echo "round $r trellis  $threads thread(s): $line"
    tr+=("$(echo "$line" | sed -E 's/.*\| +([0-9.]+) ms\/step.*/\1/')")
    line=$("$python" tests/bench/torch_llama.py "$threads" "$steps" 2>/dev/null | tail -1)
    echo "round $r $line"
    pt+=("$(echo "$line" | sed -E 's/.*: ([0-9.]+) ms\/step.*/\1/')")
  done
  median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
  mt=$(median "${tr[@]}") mp=$(median "${pt[@]}")
  awk -v t="$mt" -v p="$mp" -v n="$threads" 'BEGIN {
    printf "%d thread(s): trellis %.0f ms/step (%.0f tokens/s), PyTorch %.0f ms/step (%.0f tokens/s): trellis %.2fx\n",
      n, t, 1024000 / t, p, 1024000 / p, p / t }'
done
