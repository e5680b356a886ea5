/* env.h — the environment variables trellis reads, each read once.
 *
 * Every knob is one row of TL_ENV_MAP (name, default, documentation), so the
 * list that `trellis env` prints and docs/operations.md documents is the list the code
 * reads. Values are parsed on first use and then fixed for the process; a
 * value that does not parse is reported by tl_env_status() and the default is
 * kept, so library code can always call tl_env(). */
#ifndef TL_CORE_ENV_H
#define TL_CORE_ENV_H

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(NAME, default, doc) */
#define TL_ENV_MAP(X)                                                                            \
  X(TRELLIS_LOG_LEVEL, "info", "least severe log level printed: error, warn, info or debug")     \
  X(TRELLIS_LOG_RANKS, "0",                                                                      \
    "which ranks print info and debug lines: a rank number, or 'all' "                           \
    "(warnings and errors always print)")                                                        \
  X(TRELLIS_NUM_THREADS, "0",                                                                    \
    "CPU threads per process for kernels and OpenBLAS; 0 = the cores this process may run "      \
    "on (its CPU affinity) divided by the ranks sharing this node")                              \
  X(TRELLIS_MPI_WAIT, "auto",                                                                    \
    "how a rank waits for an MPI message: 'spin' (MPI's own busy-polling), 'yield' (poll, "      \
    "giving the core away between polls) or 'auto' (yield when the node's ranks times "          \
    "their threads outnumber its cores)")                                                        \
  X(TRELLIS_EXPORT_SHARD_MB, "5000",                                                             \
    "the largest safetensors file a Hugging Face export writes, in MB (10^6 bytes); a model "    \
    "of more is split into model-0000k-of-0000n.safetensors files with an index")                \
  X(TRELLIS_EMULATE, "none",                                                                     \
    "run a CPU job with another runtime's semantics, so that what would go wrong there goes "    \
    "wrong here (tests): none; nccl (the mesh groups run a group's operations one at a time in " \
    "issue order, sends end only when their receive is posted; core/group_emul.h); or cuda "     \
    "(device.type \"cuda\" runs on emulated GPUs: the CPU kernels queued on a compute stream, "  \
    "copies and zeroing on the legacy stream, each run only when something waits for it, and "   \
    "the groups with NCCL's ordering; kernels/emul/emul.h); nccl on a CUDA job warns that it "   \
    "does nothing there")                                                                        \
  X(TRELLIS_FAULT, "none",                                                                       \
    "a deliberate bug, for proving that --verify catches one (tests only): none, "               \
    "micro_batch_dropped, dp_scaled_twice, tied_sync_skipped, tp_allreduce_skipped, "            \
    "sp_sync_skipped, pp_grad_misrouted, update_repeated, zero_shard_offset, "                   \
    "zero_gather_skipped, nan_at_step_2, rank_stops, pp_one_stream, copies_unordered or "        \
    "collectives_unordered (docs/equality.md)")

typedef enum { TL_LOG_ERROR = 0, TL_LOG_WARN, TL_LOG_INFO, TL_LOG_DEBUG } tl_log_level;
typedef enum { TL_MPI_WAIT_AUTO = 0, TL_MPI_WAIT_SPIN, TL_MPI_WAIT_YIELD } tl_mpi_wait;

/* TRELLIS_FAULT: one real bug, injected where the code it breaks lives, in
 * runs on more than one rank only (the single-device reference of --verify
 * in the same process stays right). */
typedef enum {
  TL_FAULT_NONE = 0,
  TL_FAULT_MICRO_BATCH_DROPPED,   /* the last replica's last micro-batch adds no gradient */
  TL_FAULT_DP_SCALED_TWICE,       /* the data-parallel gradient sum divided by mesh.dp again */
  TL_FAULT_TIED_SYNC_SKIPPED,     /* the tied embedding's gradient not summed across stages */
  TL_FAULT_TP_ALLREDUCE_SKIPPED,  /* a row-parallel output keeps this rank's partial sum (no
                                   * all-reduce, or no reduce-scatter under sequence parallelism) */
  TL_FAULT_SP_SYNC_SKIPPED,       /* sequence parallelism's LayerNorm gradients not summed */
  TL_FAULT_PP_GRAD_MISROUTED,     /* micro-batches 0 and 1 receive each other's gradients */
  TL_FAULT_UPDATE_REPEATED,       /* replica 0's last stage runs AdamW twice */
  TL_FAULT_NAN_AT_STEP_2,         /* world rank 0's gradients of step 2 are NaN (a transient
                                   * divergence, for the non-finite tests; --verify does not
                                   * compare a step that stops or is skipped) */
  TL_FAULT_RANK_STOPS,            /* the last world rank stops itself (SIGSTOP) in step 3: a
                                   * rank that no longer answers, for the watchdog's test */
  TL_FAULT_ZERO_SHARD_OFFSET,     /* ZeRO: the last dp rank's first piece of its shard is read
                                   * one element on (its moments, its gradient shard under
                                   * ZeRO-2, its parameter shard under ZeRO-3 and bf16's
                                   * ZeRO 1-2) */
  TL_FAULT_ZERO_GATHER_SKIPPED,   /* ZeRO-3: the second unit's parameters are not gathered (its
                                   * slot keeps what it held) */
  TL_FAULT_PP_ONE_STREAM,         /* the pipeline's exchanges all go over the pp group, not a
                                   * link each (deadlocks where sends are unbuffered and ordered:
                                   * NCCL, TRELLIS_EMULATE=nccl) */
  TL_FAULT_COPIES_UNORDERED,      /* a GPU group's operation waits for the compute streams'
                                   * work issued before it, not for the copies and zeroing
                                   * on the legacy stream after their last kernel (emulated
                                   * GPUs, TRELLIS_EMULATE=cuda) */
  TL_FAULT_COLLECTIVES_UNORDERED, /* a GPU group's operation does not wait for the device's
                                   * work issued before it (NCCL, and emulated GPUs) */
  TL_FAULT_COUNT
} tl_fault;

struct tl_env {
  tl_log_level log_level;
  int log_rank;    /* -1 = all ranks */
  int num_threads; /* 0 = automatic */
  tl_mpi_wait mpi_wait;
  int export_shard_mb; /* >= 1 */
  tl_fault fault;
  int emulate_nccl; /* TRELLIS_EMULATE=nccl or cuda: the groups with NCCL's ordering */
  int emulate_cuda; /* TRELLIS_EMULATE=cuda: device.type "cuda" on emulated GPUs */
};

/* The parsed knobs; parsed on the first call (thread-safe), fixed after. */
const struct tl_env* tl_env(void);

/* Replaces the thread count for the rest of the process: the launcher's
 * worker applies the config's device.threads (or the node's cores divided
 * by its ranks) this way. Call at start-up, before any CPU backend exists;
 * n >= 0, 0 meaning automatic. Not thread-safe. */
void tl_env_set_num_threads(int n);

/* TL_OK, or TL_ERR_CONFIG with the offending variable, its value and the
 * allowed values recorded in tl_last_error(). */
tl_status tl_env_status(void);

/* For listings: the i-th knob's name, default and documentation;
 * returns 0 past the end. */
int tl_env_describe(int i, const char** name, const char** def, const char** doc);

/* Whether TRELLIS_FAULT injects fault f. */
static inline int tl_fault_on(tl_fault f) {
  return tl_env()->fault == f;
}

/* The fault's name as TRELLIS_FAULT spells it. */
const char* tl_fault_name(tl_fault f);

#ifdef __cplusplus
}
#endif

#endif
