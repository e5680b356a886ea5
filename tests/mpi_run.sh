#!/usr/bin/env bash
# mpi_run.sh N BINARY [ARGS...] — run a test binary on N local ranks under
# MPICH's mpiexec, killed after TL_MPI_TIMEOUT seconds (default 120) so that a
# hang fails the test instead of blocking CI.
set -euo pipefail
n=$1
shift
timeout_s=${TL_MPI_TIMEOUT:-120}
# Under ASan: MPICH's network modules, loaded and unloaded at run time, leak a
# little at MPI_Finalize, and LeakSanitizer reports them from an "unknown
# module" that no suppression can name. Leak checking of trellis's own code
# happens in the single-process tests; address and UB checks stay on here.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
# Hydra's own timeout tears down every rank; `timeout` backs it up.
export MPIEXEC_TIMEOUT=$timeout_s
exec timeout --kill-after=10 "$((timeout_s + 5))" mpiexec -n "$n" "$@"
