/* runtime.h — running one stage's pipeline schedule.
 *
 * The runtime owns the stage's executors, one per micro-batch in flight
 * (pp/schedule.h's max_in_flight; micro-batch i uses executor i mod n),
 * each with its own arena of what a forward keeps for its backward and one
 * transient arena between them all (graph/memplan.h: they run one at a
 * time), and
 * walks a schedule: it performs the exchanges itself — activations received
 * from the previous stage and sent to the next, their gradients the other
 * way, each message tagged by micro-batch and boundary value, sends
 * asynchronous and waited before their executor is reused — and hands each
 * forward and backward to the caller, who sets inputs, runs the executor
 * over the stage's nodes and reads what it needs. So the trainer decides
 * what a pass computes, and this file how passes meet.
 *
 * A boundary value that every rank of a second group holds identically
 * (the residual stream under tensor parallelism without sequence
 * parallelism) travels as each rank's 1/n chunk of it, and the receivers
 * all-gather it over that group: Megatron-LM's scatter/gather, which cuts
 * the pipeline's bytes by n.
 *
 * Under the interleaved schedule the stage holds several chunks of the
 * model, virtual stages c * p + s of p * v (pp/schedule.h): each chunk has
 * its own executors, over its own nodes, and its own neighbours — the next
 * virtual stage of the last stage's chunk c is the first stage's chunk
 * c + 1. Messages are tagged by micro-batch, the receiving chunk and
 * boundary value.
 *
 * Parameters two stages share (the GPT's tied token embedding) are summed
 * between them after the backward by tl_pp_sync_shared — or, where ZeRO
 * writes them in pieces and no whole gradient exists, their shards by the
 * trainer. */
#ifndef TL_PP_RUNTIME_H
#define TL_PP_RUNTIME_H

#include <stdbool.h>

#include "core/group.h"
#include "graph/exec.h"
#include "pp/schedule.h"
#include "pp/stage.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tl_pp_runtime tl_pp_runtime;

struct tl_pp_runtime_config {
  const tl_graph* g;
  const tl_pp_stage* stage; /* this rank's stage of g (not owned) */
  tl_group* pp;             /* the pipeline group: its rank is the stage */
  /* boundary values to split over `scatter` (NULL: none): scatter_value[v]
   * for graph value v is true when every rank of `scatter` holds it alike */
  tl_group* scatter;
  const bool* scatter_value;
  /* the executors: n_slots of them over the stage's nodes, on be, with the
   * stage's flat buffers (exec.begin/end are the stage's node range) */
  const tl_backend* be;
  tl_buffer *params, *grads;
  struct tl_exec_options exec;
  int n_slots;
  /* the interleaved schedule: the stage's n_chunks chunks, chunks[c] the
   * virtual stage c * p + stage of p * n_chunks (tl_pp_partition), each
   * run by chunk_slots[c] executors over its nodes (exec.begin/end are
   * ignored). 0: one chunk, `stage`, with n_slots executors. */
  int n_chunks;
  const tl_pp_stage* chunks;
  const int* chunk_slots;
};

tl_status tl_pp_runtime_create(const struct tl_pp_runtime_config* c, tl_pp_runtime** out);
/* Waits for sends still in flight; NULL is fine. */
void tl_pp_runtime_destroy(tl_pp_runtime* r);

/* Every executor of every chunk, numbered from 0. */
int tl_pp_runtime_n_slots(const tl_pp_runtime* r);
tl_exec* tl_pp_runtime_exec(const tl_pp_runtime* r, int slot);
/* The calls and bytes of the stage's exchanges: its links' counts summed
 * (the links are two-member groups of the pipeline group's members, one
 * per neighbour and payload: schedule.h, TL_PP_SENDS_PER_LINK). */
tl_group_stats tl_pp_runtime_stats(const tl_pp_runtime* r);
/* Bytes of the transient arena the executors share. */
int64_t tl_pp_runtime_transient_bytes(const tl_pp_runtime* r);

/* A forward or backward the schedule asks for: run it on `exec`, over
 * chunk `chunk`'s nodes (the stage's when it has one). */
typedef struct tl_pp_task {
  tl_pp_op op; /* TL_PP_FORWARD, TL_PP_BACKWARD or (zero-bubble) TL_PP_WEIGHT */
  int micro;
  tl_exec* exec;
  int chunk;
} tl_pp_task;

/* Starts walking schedule s (this stage's; not owned, alive until done). */
tl_status tl_pp_runtime_start(tl_pp_runtime* r, const tl_pp_schedule* s);
/* Runs the schedule's exchanges up to its next forward or backward and
 * returns it in *task; *done (and no task) once the schedule is over and
 * every send has completed. Collective over the pipeline (every stage walks
 * its own schedule of the same kind). */
tl_status tl_pp_runtime_next(tl_pp_runtime* r, tl_pp_task* task, bool* done);

/* Seconds spent waiting in receives since tl_pp_runtime_start. */
double tl_pp_runtime_wait_seconds(const tl_pp_runtime* r);

/* Pushes the sends in flight along: over MPI they advance only inside MPI
 * calls (a message past the transport's eager size needs the sender again
 * once the receiver has answered), so a stage that computes the next
 * micro-batch without calling in holds its last activations or gradients
 * back until it next waits. Called between the nodes of a pass (the
 * executor's pre-node hook). */
tl_status tl_pp_runtime_progress(tl_pp_runtime* r);

/* Called after each exchange with its name ("recv_act", "send_act",
 * "recv_grad", "send_grad"), micro-batch, this stage's chunk it serves and
 * times (tl_time_ns): how a trainer traces the pipeline. NULL removes it. */
typedef void (*tl_pp_span_hook)(void* user, const char* name, int micro, int chunk,
                                int64_t start_ns, int64_t end_ns);
void tl_pp_runtime_set_span_hook(tl_pp_runtime* r, tl_pp_span_hook hook, void* user);

/* The group of the stages of this pipeline that share parameters (the
 * first and the last when any parameter is shared), split from the
 * pipeline group `pp` (collective over it); NULL on other stages and
 * when nothing is shared. */
tl_status tl_pp_shared_group(tl_group* pp, const tl_pp_stage* s, tl_group** out);

/* Sums the gradients of the stage's shared parameters over `shared`
 * (tl_pp_shared_group; collective over it): grads is the stage's flat
 * gradient buffer of `dtype` elements (TL_F32, or TL_I64 for the
 * deterministic mode's fixed point), offset[v] where parameter value v lies
 * in it; a parameter whose offset is negative is not in the buffer (ZeRO's
 * pieces: its owner sums it) and is left out. */
tl_status tl_pp_sync_shared(const tl_pp_stage* s, tl_group* shared, const tl_graph* g, void* grads,
                            tl_dtype dtype, const int64_t* offset);

#ifdef __cplusplus
}
#endif

#endif
