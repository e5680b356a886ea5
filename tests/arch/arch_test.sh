#!/usr/bin/env bash
# arch_test.sh — the include arrows between trellis's folders are the
# design's, and the graph knows no mesh.
#
# 1. Every `#include "folder/..."` of every source file is an arrow from its
#    folder to that folder (kernels/cpu and kernels/cuda count as kernels).
#    Allowed, downwards only:
#      launcher -> {planner, dp, tp, pp} -> graph -> kernels -> core,
#      planner -> {dp, tp, pp} (it prices the shard, the cut and the
#      data-parallel state with their code),
#      and nothing among dp, tp and pp.
#    The arrows found are printed, one line per pair with a count.
# 2. No file of graph/ outside the op implementations (graph/ops/) names a
#    tensor-parallel size or rank or sequence parallelism.
set -u
fail=0

allowed() { # from to
  case "$1:$2" in
    core:core) return 0 ;;
    kernels:core | kernels:kernels) return 0 ;;
    graph:core | graph:kernels | graph:graph) return 0 ;;
    dp:core | dp:kernels | dp:graph | dp:dp) return 0 ;;
    tp:core | tp:kernels | tp:graph | tp:tp) return 0 ;;
    pp:core | pp:kernels | pp:graph | pp:pp) return 0 ;;
    planner:core | planner:kernels | planner:graph | planner:dp | planner:tp | planner:pp | planner:planner) return 0 ;;
    launcher:core | launcher:kernels | launcher:graph | launcher:dp | launcher:tp | launcher:pp) return 0 ;;
    launcher:planner | launcher:launcher) return 0 ;;
  esac
  return 1
}

arrows=$(mktemp)
n_files=0
for f in $(find -L core kernels graph dp tp pp planner launcher -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) | sort); do
  n_files=$((n_files + 1))
  from=${f%%/*}
  grep -oE '^#include "[a-z_]+/' "$f" | sed -E 's/#include "([a-z_]+)\//\1/' | while read -r to; do
    echo "$from $to $f"
  done >> "$arrows"
done
if [ "$n_files" -lt 100 ]; then
  echo "FAIL: only $n_files source files found (the data of this test is missing)"
  exit 1
fi

echo "include arrows (folder -> folder: #include lines):"
awk '$1 != $2 {print $1 " -> " $2}' "$arrows" | sort | uniq -c | awk '{print "  " $2 " " $3 " " $4 ": " $1}'
while read -r from to file; do
  if ! allowed "$from" "$to"; then
    echo "FAIL: $file includes $to/ (the arrow $from -> $to is not the design's)"
    fail=1
  fi
done < "$arrows"
rm -f "$arrows"

# 2. the graph knows no mesh
words='tensor.parallel|sequence.parallel|tp_rank|tp_size|\btp\b|\bsp\b'
hits=$(grep -nEi "$words" graph/*.c graph/*.h 2>/dev/null)
if [ -n "$hits" ]; then
  echo "FAIL: graph/ outside its op implementations names the mesh:"
  echo "$hits"
  fail=1
fi

[ "$fail" -eq 0 ] && echo "ok: $n_files files, every arrow the design's; graph/ knows no mesh"
exit "$fail"
