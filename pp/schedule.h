/* schedule.h — pipeline schedules as per-rank instruction lists.
 *
 * A schedule says, for one stage, in what order it runs the forward and
 * backward of each micro-batch and exchanges activations and gradients with
 * its neighbours. Lists are plain data: they can be printed, checked for
 * deadlock and counted (activations in flight, bubble) without running a
 * model; the trainer only walks them.
 *
 * GPipe: all forwards, then all backwards (micro-batches in order).
 * 1F1B (PipeDream-flush): stage s runs min(p - s - 1, m) warm-up forwards,
 * then alternates one forward and one backward, then drains the backwards;
 * at most p - s micro-batches are in flight on stage s.
 *
 * Interleaved 1F1B (Megatron-LM, Narayanan et al. 2021): each stage holds
 * v non-adjacent chunks of the model — virtual stage q = c * p + s is chunk
 * c of stage s, so micro-batches go round the pipeline v times. Stage s
 * runs min(2 (p - s - 1) + (v - 1) p, m v) warm-up forwards, then one
 * forward and one backward in turn; forward k is of chunk (k / p) mod v and
 * micro-batch (k / (p v)) p + k mod p, backward k the same with the chunks
 * in reverse. m must be a multiple of p. The bubble is (p - 1) / v of a
 * micro-batch's time against 1F1B's p - 1, for v times the exchanges.
 *
 * Zero-bubble (ZB-H1 of Qi et al. 2023): the backward split in two
 * (graph.h's tl_graph_split_weight), B the input gradients the stage before
 * waits for, W the weight gradients nobody waits for. Each stage runs, at
 * every moment of a simulation where F, B and W take their costs' ticks
 * (struct tl_pp_costs: one each unless given), a B whose gradient is there,
 * else a forward while fewer than min(p, m) micro-batches are held (1F1B's
 * first stage's count: a micro-batch is held from its F to its W), else a
 * pending W — the Ws fill what would be bubble. The lists are that
 * simulation's order; the trainer and the planner give it the same costs,
 * the block's FLOPs in each pass (tl_pp_costs_of).
 *
 * Sends are asynchronous (they complete while the stage goes on); receives
 * wait. Under that rule every schedule is deadlock-free, which
 * tl_pp_schedule_check verifies by simulation. */
#ifndef TL_PP_SCHEDULE_H
#define TL_PP_SCHEDULE_H

#include <stdio.h>

#include "core/config.h"
#include "core/status.h"
#include "graph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  TL_PP_RECV_ACT = 0, /* receive micro-batch i's input activation from stage s-1 */
  TL_PP_FORWARD,      /* forward of micro-batch i */
  TL_PP_SEND_ACT,     /* send its output activation to stage s+1 */
  TL_PP_RECV_GRAD,    /* receive the gradient of its output from stage s+1 */
  TL_PP_BACKWARD,     /* backward of micro-batch i */
  TL_PP_SEND_GRAD,    /* send the gradient of its input to stage s-1 */
  TL_PP_WEIGHT,       /* zero-bubble: the weight gradients of micro-batch i */
} tl_pp_op;

/* Most model chunks a stage holds (schedule.virtual_stages). */
#define TL_PP_MAX_CHUNKS TL_MAX_VIRTUAL_STAGES

typedef struct tl_pp_instr {
  tl_pp_op op;
  int micro;
  int chunk; /* the stage's model chunk (interleaved; else 0) */
} tl_pp_instr;

/* Relative durations of a stage's forward, input-gradient backward and
 * weight-gradient pass (each >= 1): zero-bubble's lists depend on them;
 * GPipe and 1F1B simulate a backward as backward + weight. NULL where a
 * function takes them: {1, 1, 1}. */
struct tl_pp_costs {
  int forward, backward, weight;
};

/* The costs of a block's three passes from FLOPs (the forward as 8, the
 * others in proportion, at least 1): forward nodes [begin, end) of g and
 * their backward nodes, before and after g->weight_begin (the forward's
 * own counts when g's backward is one pass: B = W = F). */
struct tl_pp_costs tl_pp_costs_of(const tl_graph* g, int begin, int end);

typedef struct tl_pp_schedule {
  tl_schedule_kind kind;
  int n_stages, stage, n_micro;
  int n;
  tl_pp_instr* instr;
  int max_in_flight; /* most micro-batches whose activations one chunk holds at once */
  int n_chunks;      /* model chunks per stage: virtual_stages (interleaved), else 1 */
  /* per chunk: its most micro-batches held at once (the executors it keeps) */
  int chunk_in_flight[TL_PP_MAX_CHUNKS];
} tl_pp_schedule;

/* Micro-batches whose activations stage `stage` of n_stages holds at once
 * under `kind`: GPipe all n_micro, 1F1B min(n_stages - stage, n_micro),
 * zero-bubble what its list holds (at most min(n_stages, n_micro)) — the
 * executors a trainer keeps, and what the planner prices. The _costs form
 * takes the chunks per stage (1 unless interleaved) and counts all the
 * chunks' (the sum of chunk_in_flight); -1 where no such schedule is
 * built. */
int tl_pp_schedule_in_flight(tl_schedule_kind kind, int n_stages, int stage, int n_micro);
int tl_pp_schedule_in_flight_costs(tl_schedule_kind kind, int n_stages, int stage, int n_micro,
                                   int n_chunks, const struct tl_pp_costs* costs);

/* The interleaved schedule's chunk_in_flight for `stage` (held[0 ..
 * n_chunks)) without building its list: the counts are periodic after the
 * warm-up, so a walk of the warm-up and one round of p v steps finds their
 * most (what the planner prices at any m). Returns their sum, or -1 for a
 * (p, m, v) it cannot schedule. */
int tl_pp_schedule_chunk_in_flight(int n_stages, int stage, int n_micro, int n_chunks, int* held);

/* The instruction list of `stage` (0-based) of n_stages for n_micro
 * micro-batches, one chunk per stage (TL_ERR_INVALID for the interleaved
 * kind, which needs the _costs form's n_chunks >= 2; other kinds take 1). */
tl_status tl_pp_schedule_build(tl_schedule_kind kind, int n_stages, int stage, int n_micro,
                               tl_pp_schedule* out);
tl_status tl_pp_schedule_build_costs(tl_schedule_kind kind, int n_stages, int stage, int n_micro,
                                     int n_chunks, const struct tl_pp_costs* costs,
                                     tl_pp_schedule* out);
void tl_pp_schedule_free(tl_pp_schedule* s);

/* Forward passes only (evaluation): each micro-batch received, run and
 * sent on through each of the stage's n_chunks chunks, in order; one
 * micro-batch in flight per chunk. */
tl_status tl_pp_schedule_build_forward(int n_stages, int stage, int n_micro, int n_chunks,
                                       tl_pp_schedule* out);

/* Simulates all stages' lists together (sends never block, receives wait
 * for their send) and checks that every micro-batch is forwarded and
 * backwarded once per stage (and its weight pass run once, after its
 * backward, under zero-bubble), in dependency order, with no deadlock. On
 * success *ticks is the length of the run counting one tick per forward and
 * two per backward — one for B and one for W under zero-bubble — (so
 * bubble = 1 - 3m / ticks). */
tl_status tl_pp_schedule_check(tl_schedule_kind kind, int n_stages, int n_micro, int* ticks);
/* The same with n_chunks per stage, each pass taking its costs' ticks (the
 * lists built with them; a pass is one chunk's, so an interleaved run's
 * work is m v (F + B + W) ticks). */
tl_status tl_pp_schedule_check_costs(tl_schedule_kind kind, int n_stages, int n_micro, int n_chunks,
                                     const struct tl_pp_costs* costs, int* ticks);

/* The length of tl_pp_schedule_check_costs's simulation, without
 * checking: (m + p - 1)(F + B + W) for GPipe and 1F1B, (m v + p - 1)(F +
 * B + W) for interleaved (in a chunk's passes; schedule_test checks the
 * simulation gives it), zero-bubble's from the simulation that made its
 * lists (the last (p, m, costs) asked for is kept) — what the planner
 * prices the bubble with. */
tl_status tl_pp_schedule_ticks(tl_schedule_kind kind, int n_stages, int n_micro, int n_chunks,
                               const struct tl_pp_costs* costs, int* ticks);

/* How the boundary values travel between stages. MPI's sends are
 * buffered: a send completes by itself, a receive once its send is posted
 * (what tl_pp_schedule_check assumes). NCCL's are not: a send completes
 * only when its receive is posted on the peer, and a group's operations
 * run on one stream in the order they were issued, so an operation waits
 * for every one before it. Two stages that each send to the other before
 * receiving then wait for each other (1F1B's steady state: stage s sends
 * an activation and receives a gradient while stage s + 1 sends a gradient
 * and receives an activation). The walk keeps the runtime's own waits too:
 * a receive or a forward waits for what its executor is still sending
 * before it writes the executor's memory. Issuing each run of consecutive
 * exchanges as one NCCL group (ncclGroupStart/End, Megatron-LM's batched
 * send-and-receive) still leaves most lists deadlocking (252 of 336 1F1B,
 * 150 of 156 interleaved and 115 of 336 zero-bubble cases of
 * schedule_test). What completes every list is a group of its own
 * for each sender, receiver and payload (a pair's activations one way, its
 * gradients the other, as pp/runtime.c makes them): each stream then
 * carries one sender's messages to one receiver in the order both lists
 * issue them, as MPI's channels do, and nothing queues behind another
 * link's message. */
typedef enum {
  TL_PP_SENDS_BUFFERED = 0, /* MPI */
  TL_PP_SENDS_EACH_ALONE,   /* NCCL, every exchange its own operation */
  TL_PP_SENDS_GROUPED,      /* NCCL, each run of consecutive exchanges one group */
  TL_PP_SENDS_PER_LINK,     /* NCCL, a group per sender, receiver and payload: the runtime's */
} tl_pp_transport;

/* The end of the run of exchange instructions (sends and receives) of s
 * that begins at instruction k: k itself when instruction k is a pass. */
int tl_pp_exchange_run(const tl_pp_schedule* s, int k);

/* Whether every stage's list of `kind` completes under `transport`: the
 * lists walked together, each host running its passes in order, issuing
 * its exchanges and waiting for its receives, the transport matching the
 * messages by its rules. TL_ERR_INTERNAL naming a stuck stage and the
 * message it waits on where they deadlock. */
tl_status tl_pp_schedule_check_transport(tl_schedule_kind kind, int n_stages, int n_micro,
                                         int n_chunks, const struct tl_pp_costs* costs,
                                         tl_pp_transport transport);

/* One forward, backward or weight pass of the simulation: stage, op
 * (TL_PP_FORWARD, TL_PP_BACKWARD or TL_PP_WEIGHT), micro-batch, and its
 * ticks [start, end). */
typedef struct tl_pp_span {
  int stage, micro;
  tl_pp_op op;
  int start, end;
  int chunk;
} tl_pp_span;

/* The same simulation, recording every forward, backward and weight pass:
 * spans has room for 3 * n_stages * n_micro * n_chunks entries; *n_spans
 * and *ticks are set. */
tl_status tl_pp_schedule_timeline(tl_schedule_kind kind, int n_stages, int n_micro, int n_chunks,
                                  const struct tl_pp_costs* costs, tl_pp_span* spans, int* n_spans,
                                  int* ticks);

/* "F0 F1 B0 F2 B1 ..." (sends and receives omitted unless `all`; an
 * interleaved list's passes name their chunk: "F0.1" is micro-batch 0's
 * forward of chunk 1). */
void tl_pp_schedule_print(const tl_pp_schedule* s, FILE* f, int all);

#ifdef __cplusplus
}
#endif

#endif
