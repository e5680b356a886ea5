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
# module" that no suppression can name. So no check at exit: each rank checks
# before MPI_Finalize instead (tests/mpi_main.cc), where the blocks UCX keeps
# from MPI_Init are still named by their library and suppressed.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}leak_check_at_exit=0"
export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$PWD/tests/lsan_suppressions.txt:print_suppressions=0"
# Hydra's own timeout tears down every rank; `timeout` backs it up.
export MPIEXEC_TIMEOUT=$timeout_s
exec timeout --kill-after=10 "$((timeout_s + 5))" mpiexec -n "$n" "$@"
