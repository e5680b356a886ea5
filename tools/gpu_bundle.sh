#!/usr/bin/env bash
# gpu_bundle.sh [OUT_DIR] — builds, on this machine, everything
# tools/gpu_check.sh runs on a GPU machine that has the CUDA toolkit,
# PyTorch and NVIDIA's Python wheels but no Bazel, MPICH, jansson or
# OpenBLAS: the optimised trellis binary, the op suite and the NCCL group
# suite, every shared library `ldd` names for them except the C library's
# own and what the GPU machine brings (the CUDA runtime, NCCL, cuBLAS: from
# its toolkit and its PyTorch's wheels), UCX's transport modules (MPICH
# loads them at run time) and the default corpus. One xz tarball,
# OUT_DIR/trellis-gpu.tar.xz (default OUT_DIR .gpu, which git ignores):
# about 25 MB, under the 64 MiB a device call carries.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.gpu}

bazel build -c opt //launcher:trellis //tests/kernels:op_test //tests/core:group_nccl_test_bin
[ -f data/fortunes_train.bin ] || bazel-bin/launcher/trellis data --corpus data

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/data" "$stage/ucx"
bins="bazel-bin/launcher/trellis bazel-bin/tests/kernels/op_test bazel-bin/tests/core/group_nccl_test_bin"
cp -L $bins "$stage/bin/"
# MPICH's launcher, for the multi-GPU pipeline part (trellis train starts
# its ranks with the mpiexec on PATH)
cp -L "$(command -v mpiexec.hydra)" "$stage/bin/mpiexec"
cp -L "$(command -v hydra_pmi_proxy)" "$stage/bin/"
# what the GPU machine has itself, or must be its own (the C library); the
# test binaries' own libraries (Bazel's _solib_k8) are found from where
# they were built
skip='/(libc|libm|libpthread|libdl|librt|libutil|ld-linux-x86-64|libcudart|libnccl|libcublas|libcublasLt)\.so'
for b in $bins "$stage/bin/mpiexec" "$stage/bin/hydra_pmi_proxy"; do ldd "$b"; done | awk '/=>/ && $3 ~ /^\// {print $3}' | sort -u |
  grep -Ev "$skip" | while read -r lib; do cp -L "$lib" "$stage/lib/"; done
ucx=$(dirname "$(readlink -f "$(ldd "$stage/bin/trellis" | awk '/libucp/ {print $3}')")")/ucx
if [ -d "$ucx" ]; then
  cp -L "$ucx"/*.so* "$stage/ucx/" 2>/dev/null || true
  for m in "$stage"/ucx/*.so*; do ldd "$m"; done 2>/dev/null | awk '/=>/ && $3 ~ /^\// {print $3}' |
    sort -u | grep -Ev "$skip" | while read -r lib; do
      [ -e "$stage/lib/$(basename "$lib")" ] || cp -L "$lib" "$stage/lib/"
    done
fi
cp data/fortunes_train.bin data/fortunes_val.bin "$stage/data/"
cp examples/gpt_small.json "$stage/"
git rev-parse --short HEAD > "$stage/COMMIT" 2>/dev/null || echo unknown > "$stage/COMMIT"

mkdir -p "$out"
tar -C "$stage" -cf - . | xz -T0 -6 > "$out/trellis-gpu.tar.xz.tmp"
mv "$out/trellis-gpu.tar.xz.tmp" "$out/trellis-gpu.tar.xz"
echo "gpu_bundle: $out/trellis-gpu.tar.xz ($(du -h "$out/trellis-gpu.tar.xz" | cut -f1)," \
  "$(ls "$stage/lib" | wc -l) libraries, commit $(cat "$stage/COMMIT"))"
