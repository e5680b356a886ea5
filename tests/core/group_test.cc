// The process-group suite (group_suite.inc) on the MPI backend, host buffers.
#include "tests/core/group_suite.inc"
