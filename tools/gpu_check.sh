#!/usr/bin/env bash
# gpu_check.sh — the checks that need an NVIDIA GPU, as one run of a few
# minutes (for a machine with a GPU and the CUDA toolkit; everything else is
# tested on the CPU by tools/test.sh):
#   1. the op suite on the GPU (every kernel's forward and gradients against
#      the double reference), through the test and through `trellis check`;
#   2. the NCCL group suite (it skips, saying so, unless every rank has a GPU);
#   3. a small GPT trained on cuda:0 for 50 steps and the same model on the
#      CPU for 50 steps: the same initialisation and data, so their losses
#      should agree to a few digits (printed side by side at the end);
# and prints each step's status. Exits non-zero if any step fails.
set -uo pipefail
cd "$(dirname "$0")/.."

fail=0
step() {
  echo "== $1"
  shift
  if "$@"; then echo "-- ok"; else echo "-- FAILED ($?)"; fail=1; fi
}

if ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L > /dev/null 2>&1; then
  echo "gpu_check: no NVIDIA GPU or driver on this machine; nothing to check" >&2
  exit 2
fi
nvidia-smi -L

step "build" bazel build //launcher:trellis //tests/kernels:op_test //tests/core:group_nccl_test
step "op suite on the GPU (test)" bazel test //tests/kernels:op_test //tests/core:group_nccl_test \
  --test_output=all
step "op suite (trellis check --device cuda)" bazel-bin/launcher/trellis check --device cuda

if [ ! -f data/fortunes_train.bin ]; then
  step "corpus" bazel-bin/launcher/trellis data --corpus data
fi
cfg=$(mktemp --suffix=.json)
sed -e 's/"type": "cpu"/"type": "cuda"/' -e 's/"checkpoint": {[^}]*}/"checkpoint": {}/' \
  examples/gpt_small.json > "$cfg"
gpu_log=$(mktemp) cpu_log=$(mktemp)
step "a GPT on cuda:0, 50 steps" bash -c "bazel-bin/launcher/trellis train '$cfg' --steps 50 \
  | tee '$gpu_log'"
step "the same GPT on the CPU, 50 steps" bash -c "bazel-bin/launcher/trellis train \
  examples/gpt_small.json --steps 50 | tee '$cpu_log'"
echo "== losses, cuda | cpu (steps 1, 10, 20, ..., 50)"
paste <(grep -E '^step (1|10|20|30|40|50)/' "$gpu_log" | cut -d'|' -f1,2) \
  <(grep -E '^step (1|10|20|30|40|50)/' "$cpu_log" | cut -d'|' -f2)
rm -f "$cfg" "$gpu_log" "$cpu_log"
exit $fail
