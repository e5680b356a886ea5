#!/usr/bin/env bash
# gpu_check.sh [BUNDLE] — the checks that need an NVIDIA GPU, as one run of
# a few minutes on a machine with the GPU, its driver, the CUDA toolkit and
# PyTorch but no Bazel, MPICH or OpenBLAS: what runs is the bundle that
# tools/gpu_bundle.sh built elsewhere (default .gpu/trellis-gpu.tar.xz),
# unpacked into a temporary folder, its libraries beside the GPU machine's
# own NCCL and cuBLAS (its toolkit's, else its PyTorch's wheels'; the CUDA
# runtime is linked into the binaries). On a machine with Bazel and no
# bundle it builds one first.
#   1. the op suite on the GPU: every kernel's forward and gradients against
#      the double reference (the test binary, then `trellis check`);
#   2. the NCCL group suite on one rank (NCCL refuses two on one GPU), and
#      no test of 1 and 2 skipped but for a reason tools/expected_skips
#      lists for a GPU machine;
#   3. a small GPT on cuda:0 and on the CPU, 50 steps each, fp32 and bf16:
#      the same start and data, so the losses must agree (step 50 within 2%);
#   4. the benchmark: GPT-2 124M dimensions, bf16, T = 1024, in trellis and
#      in PyTorch (bf16 autocast, scaled_dot_product_attention,
#      torch.compile: tools/gpu_torch_gpt2.py), tokens/s and MFU against
#      989 TFLOP/s dense bf16, side by side;
#   5. the planner against the GPU: `trellis plan --calibrate --device cuda`
#      on one rank, then the step time it predicts with that spec for the
#      benchmark's GPT-2 124M and for a 1.5B-class GPT (GPT-2 XL's 48 x
#      1600, 25 heads, B = 8) against what trellis measures (figures).
#   6. (pipeline) with two GPUs or more: 2-stage GPipe, 1F1B, interleaved
#      and zero-bubble runs of a small GPT, a GPU per rank over NCCL, each
#      --verify'd against the single-device run (an exchange order that
#      deadlocks on NCCL ends under the watchdog); with one GPU it says so
#      and skips (NCCL takes one GPU per rank).
# TL_GPU_PARTS (default "ops nccl small pipeline bench planner") picks the parts.
# Every step is timed out on its own; a table of the figures comes last.
# Exits non-zero if a check fails (the benchmark's figures are not checks).
set -uo pipefail
cd "$(dirname "$0")/.."
bundle=${1:-.gpu/trellis-gpu.tar.xz}
B=${TL_BENCH_BATCH:-16}
STEPS=${TL_BENCH_STEPS:-10}
PARTS=" ${TL_GPU_PARTS:-ops nccl small pipeline bench planner} "
want() { [[ "$PARTS" == *" $1 "* ]]; }

fail=0
step() { # step NAME SECONDS CMD...
  local name=$1 secs=$2
  shift 2
  echo "== $name"
  local t0=$SECONDS
  timeout --kill-after=5 "$secs" "$@"
  local rc=$?
  if [ $rc -eq 0 ]; then echo "-- ok ($((SECONDS - t0)) s)"; else
    echo "-- FAILED (exit $rc after $((SECONDS - t0)) s)"
    fail=1
  fi
  return $rc
}

if ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L > /dev/null 2>&1; then
  echo "gpu_check: no NVIDIA GPU or driver on this machine; nothing to check" >&2
  exit 2
fi
nvidia-smi -L
if [ ! -f "$bundle" ]; then
  if command -v bazel > /dev/null; then
    bash tools/gpu_bundle.sh "$(dirname "$bundle")" || exit 1
  else
    echo "gpu_check: no bundle at $bundle, and no Bazel here to build one (tools/gpu_bundle.sh)" >&2
    exit 2
  fi
fi

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
xz -dc "$bundle" | tar -C "$root" -xf - || exit 1
echo "bundle: $bundle, commit $(cat "$root/COMMIT")"
# the GPU machine's CUDA runtime, NCCL and cuBLAS: its toolkit's, then its
# PyTorch's wheels' (nvidia-*-cu13)
libs="$root/lib"
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && libs="$libs:$d"
done
py=$(command -v python3)
site=$("$py" -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null)
for d in "$site"/nvidia/*/lib; do [ -d "$d" ] && libs="$libs:$d"; done
export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export UCX_MODULE_DIR="$root/ucx"
# (trellis opens cuBLAS at its first CUDA backend and NCCL at its first NCCL
# group: from the toolkit's folder it was built against, else from this
# same path)
tl="$root/bin/trellis"
ldd "$tl" | grep "not found" && { echo "gpu_check: the bundle misses libraries" >&2; exit 1; }

# the test binaries' reports: a skip on this machine must be one that
# tools/expected_skips lists for a GPU machine (a CUDA backend or NCCL
# group that fails to start here fails; it does not skip)
mkdir -p "$root/xml"
if want ops; then
  step "op suite on the GPU (test binary)" 240 "$root/bin/op_test" \
    --gtest_output="xml:$root/xml/op_test.xml"
  step "op suite (trellis check --device cuda)" 120 "$tl" check --device cuda
fi
want nccl && step "NCCL group suite, one rank" 120 "$root/bin/group_nccl_test_bin" \
  --gtest_output="xml:$root/xml/group_nccl_test.xml"
reports=("$root"/xml/*.xml)
[ -e "${reports[0]}" ] && step "no skip but for a reason listed (tools/expected_skips)" 10 \
  bash tools/check_skips.sh gpu "${reports[@]}"

# 3. cuda against the CPU
small() { # small DEVICE PRECISION -> a config path
  local f="$root/small_$1_$2.json"
  sed -e "s/\"type\": \"cpu\"/\"type\": \"$1\"/" -e 's/"checkpoint": {[^}]*}/"checkpoint": {}/' \
    -e "s#data/fortunes_#$root/data/fortunes_#g" \
    -e "s/\"sample_tokens\": [0-9]*/\"sample_tokens\": 0, \"precision\": \"$2\"/" \
    "$root/gpt_small.json" > "$f"
  echo "$f"
}
want small && for prec in fp32 bf16; do
  for dev in cuda cpu; do
    step "a small GPT on $dev, $prec, 50 steps" 300 bash -c \
      "'$tl' train '$(small $dev $prec)' --steps 50 > '$root/$dev.$prec.log' 2>&1; \
       rc=\$?; tail -3 '$root/$dev.$prec.log'; exit \$rc"
  done
  echo "== losses, $prec: cuda | cpu (steps 1, 10, 20, ..., 50)"
  paste <(grep -E '^step (1|10|20|30|40|50)/' "$root/cuda.$prec.log" | cut -d'|' -f1,2) \
    <(grep -E '^step (1|10|20|30|40|50)/' "$root/cpu.$prec.log" | cut -d'|' -f2)
  step "cuda's step-50 loss within 2% of the CPU's ($prec)" 10 "$py" - "$root/cuda.$prec.log" \
    "$root/cpu.$prec.log" << 'EOF'
import re, sys
def last(p):
    v = [float(m.group(1)) for m in re.finditer(r"^step 50/\d+ \| loss ([0-9.]+)", open(p).read(), re.M)]
    return v[-1] if v else float("nan")
g, c = last(sys.argv[1]), last(sys.argv[2])
print(f"step 50: cuda {g:.4f}, cpu {c:.4f}, {100 * abs(g - c) / c:.2f}% apart")
sys.exit(0 if abs(g - c) <= 0.02 * c else 1)
EOF
done

# 6. pipelines over NCCL, a GPU per rank
if want pipeline; then
  gpus=$(nvidia-smi -L | grep -c '^GPU')
  if [ "$gpus" -lt 2 ]; then
    echo "== pipelines on 2 GPUs: skipped: this machine has $gpus GPU (NCCL takes one per rank)"
  else
    for kind in gpipe 1f1b interleaved zero_bubble; do
      extra=""
      [ "$kind" = interleaved ] && extra=', "virtual_stages": 2'
      cfg="$root/pp_$kind.json"
      cat > "$cfg" << EOF
{"model": {"kind": "gpt", "n_layers": 4, "n_heads": 4, "n_embd": 128, "vocab_size": 256,
           "max_seq_len": 64},
 "train": {"steps": 5, "batch_size": 8, "seq_len": 64, "lr": 3e-3, "sample_tokens": 0},
 "mesh": {"pp": 2}, "schedule": {"kind": "$kind", "micro_batches": 4$extra},
 "parallel": {"timeout_s": 60},
 "data": {"train": "$root/data/fortunes_train.bin"},
 "device": {"type": "cuda"}}
EOF
      step "a 2-stage $kind pipeline on 2 GPUs, --verify" 300 bash -c \
        "PATH='$root/bin':\$PATH '$tl' train '$cfg' --verify > '$root/pp_$kind.log' 2>&1; \
         rc=\$?; grep -E '^verify: (EQUAL|DIFFERENT)|E\]' '$root/pp_$kind.log' | head -3; \
         grep -q '^verify: EQUAL' '$root/pp_$kind.log' && exit \$rc; exit 1"
    done
  fi
fi

# 4. the benchmark
step_ms() { # step_ms LOG STEPS: the mean of the last STEPS steps' ms, or nothing
  "$py" - "$1" "$2" << 'EOF'
import re, sys
log, steps = open(sys.argv[1]).read(), int(sys.argv[2])
ms = [float(m.group(1)) for m in re.finditer(r"^step\s+\d+/\d+ \|.*\|\s+([0-9.]+) ms \|", log, re.M)]
if len(ms) >= steps:
    print(f"{sum(ms[-steps:]) / steps:.2f}")
EOF
}
gpt_config() { # gpt_config PATH LAYERS HEADS EMBD BATCH STEPS
  cat > "$1" << EOF
{"model": {"kind": "gpt", "n_layers": $2, "n_heads": $3, "n_embd": $4, "vocab_size": 50257,
           "max_seq_len": 1024},
 "train": {"steps": $6, "batch_size": $5, "seq_len": 1024, "lr": 3e-4,
           "warmup_steps": 0, "sample_tokens": 0, "precision": "bf16"},
 "data": {"train": "$root/data/fortunes_train.bin"},
 "device": {"type": "cuda"}}
EOF
}
bench="$root/gpt2.json"
gpt_config "$bench" 12 12 768 "$B" $((STEPS + 3))
trellis_line="trellis: not run (TL_GPU_PARTS)"
if want bench || want planner; then
  step "trellis: GPT-2 124M, bf16, B=$B, T=1024, $((STEPS + 3)) steps" 300 bash -c \
    "'$tl' train '$bench' > '$root/bench.log' 2>&1; rc=\$?; tail -4 '$root/bench.log'; exit \$rc"
  bench_ms=$(step_ms "$root/bench.log" "$STEPS")
  trellis_line=$("$py" - "$B" "$bench_ms" << 'EOF'
import sys
B, ms = int(sys.argv[1]), sys.argv[2]
if not ms:
    print("trellis: no step times (see the log above)")
    sys.exit(0)
dt = float(ms) / 1e3
tok = B * 1024 / dt
L, C, T, V = 12, 768, 1024, 50304
n = V * C + L * (12 * C * C + 13 * C) + 2 * C  # the parameters but wpe
print(f"trellis: B={B} T={T}: {dt * 1e3:.1f} ms a step, {tok:.0f} tokens/s, "
      f"MFU {100 * tok * (6 * n + 12 * L * T * C) / 989e12:.1f}%")
EOF
)
fi
if want bench; then
  step "pytorch: the same model, bf16 autocast, SDPA, torch.compile" 420 \
    bash -c "'$py' tools/gpu_torch_gpt2.py $B 1024 $STEPS 2>&1 | tail -20 | tee '$root/torch.log'"
fi

# 5. the planner against the GPU: its spec measured here, its predictions
# for two models at dp = tp = pp = 1 against the step times trellis takes
planner_lines=()
if want planner; then
  cal="$root/calibrated.json"
  step "trellis plan --calibrate --device cuda, one rank" 240 \
    "$tl" plan --calibrate "$cal" --device cuda --ranks 1
  predict() { # predict CONFIG BATCH: the predicted step time in ms
    "$tl" plan --model "$1" --cluster "$cal" --batch "$2" --json --fix \
      "dp=1,tp=1,pp=1,micro_batch=$2,micro_batches=1,zero=0,recompute=none,schedule=1f1b" |
      "$py" -c 'import json, sys
p = json.load(sys.stdin)["plans"]
print("%.2f" % (1e3 * p[0]["step_s"]) if p else "")'
  }
  xl="$root/gpt2_xl.json"
  gpt_config "$xl" 48 25 1600 8 6
  # with the calibrated spec, train sets its own price beside its steps
  priced=""
  [ -f "$cal" ] && priced="--cluster '$cal'"
  step "trellis: a 1.5B-class GPT (48 x 1600), bf16, B=8, T=1024, 6 steps" 400 bash -c \
    "'$tl' train '$xl' $priced > '$root/xl.log' 2>&1; rc=\$?; grep '^priced on' '$root/xl.log'; grep -v '^priced on' '$root/xl.log' | tail -3; exit \$rc"
  for m in "GPT-2 124M, B=$B|$bench|$B|$root/bench.log|$STEPS" \
    "1.5B-class, B=8|$xl|8|$root/xl.log|3"; do
    IFS='|' read -r name cfg batch log n <<< "$m"
    pred=""
    [ -f "$cal" ] && pred=$(predict "$cfg" "$batch")
    meas=$(step_ms "$log" "$n")
    planner_lines+=("$("$py" - "$name" "$pred" "$meas" << 'EOF'
import sys
name, p, m = sys.argv[1:4]
if not p or not m:
    print(f"planner: {name}: predicted {p or '-'} ms, measured {m or '-'} ms")
else:
    print(f"planner: {name}: predicted {float(p):.1f} ms, measured {float(m):.1f} ms, "
          f"error {100 * (float(p) / float(m) - 1):+.1f}%")
EOF
)")
  done
fi

echo
echo "== figures (GPU $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1))"
echo "$trellis_line"
want bench && { grep '^pytorch:' "$root/torch.log" || echo "pytorch: no figure (see the log above)"; }
for l in "${planner_lines[@]}"; do echo "$l"; done
[ $fail -eq 0 ] && echo "gpu_check: every check passed" || echo "gpu_check: a check FAILED"
exit $fail
