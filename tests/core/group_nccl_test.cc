// The process-group suite (group_suite.inc) on the NCCL backend, device
// buffers: skipped, with the reason, where this machine cannot run NCCL.
#define TL_TEST_NCCL
#include "tests/core/group_suite.inc"
