#!/usr/bin/env bash
# cp_bench.sh [T] [STEPS] — context parallelism's ring on this machine: for
# 2 and 4 ranks (R), a Llama (4 layers, 256 channels, 8 query and 2
# key/value heads, vocabulary 256) trains R sequences of T tokens (default
# 4096) a step, STEPS steps (default 4, the first not counted), once with
# mesh.cp = R (every rank a share of every sequence) and once with mesh.dp =
# R (every rank whole sequences): the same tokens a step and a rank, the
# same sequence length. Prints each run's median step time and peak bytes a
# rank, and from the cp run's --trace the share of the step the ring leaves
# exposed (its "ring wait" and "ring dkv" spans over the step, averaged
# over ranks and steps) beside the share it kept in flight behind the
# attention ("ring kv"). One thread a rank; with more ranks than cores the
# waits include the scheduler's. Not a test.
set -euo pipefail
cd "$(dirname "$0")/../.."
T=${1:-4096}
steps=${2:-4}
bazel build //launcher:trellis >&2
bin=$PWD/bazel-bin/launcher/trellis
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for R in 2 4; do
  for axis in cp dp; do
    cat > "$dir/$axis$R.json" <<JSON
{"model": {"kind": "llama", "n_layers": 4, "n_heads": 8, "n_kv_heads": 2, "n_embd": 256,
           "max_seq_len": $T},
 "mesh": {"$axis": $R},
 "train": {"seq_len": $T, "batch_size": $R, "steps": $steps, "sample_tokens": 0, "lr": 0.001},
 "data": {"train": "$PWD/data/fortunes_train.bin"}, "device": {"threads": 1},
 "checkpoint": {"every": 0}}
JSON
    (cd "$dir" && "$bin" train "$axis$R.json" --metrics "$axis$R.jsonl" \
       $([ "$axis" = cp ] && echo --trace "$axis$R.trace.json") > "$axis$R.log" 2>&1) ||
      { cat "$dir/$axis$R.log" >&2; exit 1; }
  done
  python3 - "$dir" "$R" <<'PY'
import json, statistics, sys
d, R = sys.argv[1], int(sys.argv[2])
def run(axis):
    recs = [json.loads(l) for l in open(f"{d}/{axis}{R}.jsonl") if '"step"' in l]
    recs = [r for r in recs if "ms" in r]
    ms = statistics.median(r["ms"] for r in recs[1:] or recs)
    peak = max(max(r["peak_bytes"].values()) for r in recs)
    return recs, ms, peak
cp, cp_ms, cp_peak = run("cp")
dp, dp_ms, dp_peak = run("dp")
steps = {r["step"]: r["ms"] for r in cp}
ev = json.load(open(f"{d}/cp{R}.trace.json"))["traceEvents"]
shown, flight = {}, {}
for e in ev:
    if e.get("cat") != "cp" or not e.get("name", "").startswith("ring "):
        continue
    k = (e["pid"], e["args"]["step"])
    if k[1] == 1 or k[1] not in steps:
        continue
    what = e["name"].split(" ")[1]
    if what in ("wait", "dkv"):
        shown[k] = shown.get(k, 0) + e["dur"] / 1e3
    if what == "kv":
        flight[k] = flight.get(k, 0) + e["dur"] / 1e3
keys = sorted(set(shown) | set(flight))
share = statistics.mean(shown.get(k, 0) / steps[k[1]] for k in keys)
kv = statistics.mean(flight.get(k, 0) / steps[k[1]] for k in keys)
print(f"{R} ranks: cp {R}: {cp_ms:.0f} ms/step, peak {cp_peak / 1e6:.1f} MB a rank; "
      f"dp {R}: {dp_ms:.0f} ms/step, peak {dp_peak / 1e6:.1f} MB a rank; "
      f"cp/dp step {cp_ms / dp_ms:.2f}x; the ring exposed {100 * share:.1f}% of the cp step "
      f"(k/v in flight beside the attention {100 * kv:.1f}%)")
PY
done
