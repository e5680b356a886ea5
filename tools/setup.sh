#!/usr/bin/env bash
# setup.sh — install what trellis needs to build and test, from Debian's
# packages. Idempotent: when everything is present it only checks (a second or
# two). Run as root, or as a user with sudo.
#
# The CUDA toolkit is not a Debian package here: trellis finds it at
# $CUDA_PATH, through nvcc on PATH, or at /usr/local/cuda, and builds its CUDA
# backend when it is there (without it, the CPU half builds and `trellis
# check` says CUDA was not built).
set -euo pipefail

packages=(
  # compilers and the build
  gcc g++ libc6-dev make
  bazel-bootstrap bazel-rules-java
  # MPI, JSON, BLAS, tests
  mpich libmpich-dev
  libjansson-dev
  libxxhash-dev
  # tokenizer.json: split patterns (PCRE2), Unicode normalization (utf8proc)
  libpcre2-dev libutf8proc-dev
  # TensorBoard event files: protobuf-c (runtime and protoc-c), CRC32C
  libprotobuf-c-dev protobuf-c-compiler libisal-dev
  libopenblas-openmp-dev
  libgtest-dev googletest
  # a one-node Slurm for tests/launcher:slurm_test (started by the test)
  slurmctld slurmd slurm-client munge
  # the default training corpus (English text, see docs/training.md)
  fortunes
  # used by the scripts and tests (python3-venv: TensorBoard's reader below)
  git gawk procps python3 python3-venv
  # emulated nodes for tests/cluster (ip netns, tc: tools/cluster.sh)
  iproute2
)

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo=sudo; fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  if [ -n "$sudo" ]; then
    command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# TensorBoard's own event-file reader, for tests/launcher:tensorboard_test
# (Debian packages no TensorBoard): a virtual environment of its own, so
# nothing of the system's Python changes.
venv=/opt/trellis/venv
# Where PyPI cannot be reached the test skips its read-back checks, saying
# so; nothing else needs it.
if ! "$venv/bin/python3" -c "import tensorboard" 2>/dev/null; then
  echo "setup: installing TensorBoard's reader into $venv (pip)" >&2
  $sudo mkdir -p "$(dirname "$venv")"
  if ! { $sudo /usr/bin/python3 -m venv "$venv" &&
         $sudo "$venv/bin/pip" install -q --disable-pip-version-check tensorboard==2.21.0 >&2; }; then
    echo "setup: warning: TensorBoard could not be installed into $venv (pip failed, above);" \
         "tests/launcher:tensorboard_test will skip reading event files back with it" >&2
  fi
fi

# OpenBLAS's OpenMP build must be the one we link (third_party/openblas.BUILD).
if [ ! -e /usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so ]; then
  echo "setup: OpenBLAS OpenMP library not found under /usr/lib/x86_64-linux-gnu/openblas-openmp" >&2
  exit 1
fi

# The default corpus, once: data/fortunes_{train,val}.bin for the main job.
cd "$(dirname "$0")/.."
if [ ! -s data/fortunes_train.bin ] || [ ! -s data/fortunes_val.bin ]; then
  echo "setup: building the default corpus in data/" >&2
  bazel build //launcher:trellis >&2 && bazel-bin/launcher/trellis data --corpus data >&2
fi

nvcc=""
for c in "${CUDA_PATH:-}/bin/nvcc" "$(command -v nvcc || true)" /usr/local/cuda/bin/nvcc; do
  if [ -n "$c" ] && [ -x "$c" ]; then nvcc=$c; break; fi
done
if [ -n "$nvcc" ]; then
  echo "setup: ok (CUDA toolkit: $(dirname "$(dirname "$(readlink -f "$nvcc")")"))" >&2
else
  echo "setup: ok (no CUDA toolkit found: building the CPU backend only)" >&2
fi
