/* buckets.h — the data-parallel gradient reduction in buckets, whole
 * (all-reduce) or sharded (ZeRO-1 and ZeRO-2: reduce-scatter, each rank
 * keeping its chunk of every bucket).
 *
 * The flat gradient buffer of a stage (dp/layout.h) is cut into buckets of
 * about parallel.bucket_mb each, in buffer order: the layout's front
 * [0, n_early) and its back of late parameters [n_early, n) are cut apart,
 * so no bucket mixes the two. During the backward pass the trainer reports
 * each forward node whose backward has run; the layout says how much of the
 * buffer's front is then final, and every bucket lying entirely in that
 * front starts its collective at once, asynchronously, so communication
 * overlaps the rest of the backward pass. tl_dp_buckets_finish starts what
 * is left (the late buckets: after the caller's sums over other groups) and
 * waits for everything.
 *
 * The reduction is a SUM: each replica's gradients are already scaled by
 * 1 / (global batch tokens), so the sum is the gradient of the mean loss
 * over the global batch.
 *
 * The three forms (parallel.zero):
 * - 0: every bucket all-reduced in place; each replica keeps the whole
 *   gradient, and the caller updates every parameter. Gradients of
 *   intermediate micro-batches accumulate locally: only the last
 *   micro-batch's backward starts buckets.
 * - 1: every bucket reduce-scattered in place over the group: rank r ends
 *   with the sum of chunk r of each bucket (tl_group_chunk's split) and
 *   updates only those elements, whose AdamW moments it alone holds (its
 *   shard, tl_dp_buckets_shard_n elements); tl_dp_buckets_gather_params
 *   then all-gathers the updated chunks. Gradients still accumulate over
 *   micro-batches in the whole buffer.
 * - 2: the gradients too exist only as the rank's shard. The executor
 *   writes each parameter gradient into a staging area that holds one
 *   backward node's gradients (tl_dp_buckets_grad_buffer and _grad_offset
 *   say where); when the node has run, its gradients are copied into the
 *   bucket they fall in (two bucket buffers take turns), each full bucket
 *   is reduce-scattered and its chunk added into the rank's shard of
 *   gradients, and the staging is zeroed for the next node. This happens
 *   for EVERY micro-batch's backward (gradient accumulation is over
 *   shards): m micro-batches reduce m times the bytes of ZeRO-0/1 and in
 *   return no rank holds the whole gradient. Late parameters (several
 *   writers, or a sum over another group first) keep a whole gradient in
 *   the back of the grad buffer, accumulate there over micro-batches and
 *   are reduce-scattered by tl_dp_buckets_finish — except those written in
 *   pieces (the config's piece_cols: each piece reduced as it is written,
 *   tl_dp_buckets_piece_begin).
 *
 * A group of one (or NULL) runs every form without communication: ZeRO over
 * one rank shards nothing, and the shard is the whole buffer. */
#ifndef TL_DP_BUCKETS_H
#define TL_DP_BUCKETS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/alloc.h"
#include "core/group.h"
#include "dp/layout.h"
#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tl_dp_buckets tl_dp_buckets;

struct tl_dp_buckets_config {
  tl_group* dp; /* the data-parallel group; NULL: a group of one */
  const tl_dp_layout* layout;
  double bucket_mb;
  int zero; /* 0, 1 or 2 */
  const tl_backend* be;
  /* zero 0 and 1: the layout's n floats of gradients on be's device (not
   * owned); zero 2 and 3: NULL (the buckets own their gradient buffers) */
  float* grads;
  /* zero 2 and 3: the caller's backward writes each node's gradients into
   * the staging and the late ones rather than adding into them where they
   * hold nothing of the step yet (graph/exec.h's grads_fresh, marked again
   * for a node's gradients once tl_dp_buckets_node_done has moved them), so
   * the buckets zero neither: only the shard as a step begins */
  bool staging_written;
  /* zero 3: the units whose parameters are gathered together (a block,
   * the embedding, the head): unit u is forward nodes [unit_begin[u],
   * unit_begin[u + 1]) of the layout's range, n_units + 1 entries (copied) */
  int n_units;
  const int* unit_begin;
  /* the dtype the reductions move (parallel.grad_reduce): TL_F32, or
   * TL_BF16: each bucket is rounded to bf16, summed over the group in bf16
   * (half the bytes) and widened back into the fp32 gradients — a group
   * of one reduces nothing and rounds nothing */
  tl_dtype wire;
  /* the precision the graph reads its parameters at (train.precision):
   * TL_BF16 — zero 1 and 2 over a group of more than one: the buckets hold the fp32 master of the
   * rank's chunks (tl_dp_buckets_shard_params, what the optimizer
   * updates) and the whole stage's working parameters in bf16
   * (tl_dp_buckets_param_buffer, what the executor reads: the master
   * rounded, exactly what a bf16 graph reads of fp32 parameters, since it
   * rounds every parameter to bf16 anyway, graph/exec.c), and
   * tl_dp_buckets_gather_params all-gathers the updated chunks in bf16
   * (half the bytes); zero 3: the units are gathered rounded to bf16 into
   * slots of bf16 (tl_dp_buckets_param_dtype says which to read). TL_F32
   * (0): the caller's fp32 parameters (zero 0-2), ZeRO-3's fp32 shards
   * into fp32 slots. Zero 0 ignores it. */
  tl_dtype params;
  /* zero 2 and 3: per graph value, the elements of a row of a parameter
   * whose gradient the executor writes a piece of rows at a time
   * (graph/exec.h's tl_exec_pieces: the tied embedding, written by the
   * head and by the embedding, on one stage or on each of two) — never
   * whole on a rank: each piece is a
   * bucket of whole rows, reduce-scattered as soon as it is written and
   * added into the shard (tl_dp_buckets_piece_begin); 0 for the others.
   * Such parameters are late and the last of the layout's back. NULL: none
   * (copied) */
  const int64_t* piece_cols;
  /* zero 3: per unit, whether one of its nodes reads a parameter written
   * in pieces (the embedding's, the head's). Over a group such a parameter
   * is read a piece at a time too, and where its piece slots fit the
   * unused tail of the reading unit's own slot (tl_dp_piece_rows,
   * tl_dp_pieces_in_room) they lie there, with no memory of their own;
   * else behind the late parameters. NULL: none */
  const bool* unit_pieces;
  /* zero 3: per unit, a late parameter its nodes read (the tied
   * embedding: on a pipeline stage that holds one of its readers, or kept
   * whole on a stage of both), else -1 (n_units entries). Over a group one
   * that fits its reading unit's slot's unused tail is gathered with the
   * unit into that tail instead of whole for the step — one several units
   * read only where there is one slot, behind the largest of them, where
   * every reader finds it. NULL: none */
  const int* unit_late;
  /* zero 2 and 3: per graph value, the rows a piece of a parameter in
   * piece_cols, where the caller sets them (> 0): a parameter another
   * stage holds too (the tied embedding over a pipeline) is cut alike on
   * both, so that rank r's chunks of it are the same elements there and
   * the stages can sum its shards (the caller takes the fewest rows
   * tl_dp_piece_rows gives any of them); 0 or NULL: tl_dp_piece_rows's
   * (copied) */
  const int64_t* piece_rows;
};

/* The layout and grads must outlive the buckets. */
tl_status tl_dp_buckets_create(const struct tl_dp_buckets_config* c, tl_dp_buckets** out);
void tl_dp_buckets_destroy(tl_dp_buckets* b); /* waits for nothing: finish first */

/* The backward of forward node `forward_node` has run: zero 0 and 1 launch
 * every bucket whose gradients are now all final (call it during the last
 * micro-batch's backward only); zero 2 moves the node's staged gradients
 * into their buckets (call it during every backward). */
tl_status tl_dp_buckets_node_done(tl_dp_buckets* b, int forward_node);
/* Zeroes the gradient memory the buckets own (zero 2: staging, late
 * gradients, the shard; with staging_written the shard alone) before a
 * step; nothing for zero 0 and 1. */
tl_status tl_dp_buckets_zero_grads(tl_dp_buckets* b);
/* Launches the remaining buckets and waits for all; then resets for the
 * next step. Zero 1 and 2: the late parameters' gradients must hold their
 * sums over other groups by then. */
tl_status tl_dp_buckets_finish(tl_dp_buckets* b);

int tl_dp_buckets_count(const tl_dp_buckets* b);
/* Buckets launched before finish in the last step (how much overlapped). */
int tl_dp_buckets_early(const tl_dp_buckets* b);
/* Seconds spent waiting on the group inside node_done and finish in the
 * last step (what stayed exposed). */
double tl_dp_buckets_wait_seconds(const tl_dp_buckets* b);

/* ---- the shard (zero >= 1; with zero 0 the shard is the whole buffer) -- */

/* Elements this rank owns: the sum of its chunks of every bucket. */
int64_t tl_dp_buckets_shard_n(const tl_dp_buckets* b);

/* A piece of the shard: elements [offset, offset + n) of the stage's flat
 * buffers, of layout segment `segment`, at element `at` of the shard. */
struct tl_dp_piece {
  int segment;
  int64_t offset, n, at;
};
/* The shard as pieces, in buffer order, into out (NULL: counts only). */
int tl_dp_buckets_pieces(const tl_dp_buckets* b, struct tl_dp_piece* out);

/* Zero 1 and 2, after the update of the shard: every chunk of the
 * parameters to every rank — an all-gather per bucket, in place: fp32 in
 * `params` (the whole stage buffer, updated in this rank's chunks), or
 * under bf16 training (params NULL) the master chunks rounded into the
 * buckets' bf16 working parameters and gathered there (also over a group
 * of one: the rounding). Call it too after writing the master (a
 * checkpoint loaded). Collective; nothing with zero 0 and 3. */
tl_status tl_dp_buckets_gather_params(tl_dp_buckets* b, float* params);

/* The whole stage vector into `full` (the layout's n floats, device) from
 * every rank's shard: `src` is a shard (tl_dp_buckets_shard_n floats) when
 * src_is_shard, else a stage buffer whose chunks this rank holds. Collective. */
tl_status tl_dp_buckets_unshard(tl_dp_buckets* b, const float* src, bool src_is_shard, float* full);
/* This rank's shard (device) of a whole stage vector `full` (host). */
tl_status tl_dp_buckets_to_shard(const tl_dp_buckets* b, const float* full, float* shard);

/* ---- zero 2 and 3's gradient buffers ------------------------------------ */

/* The buffer the executor writes parameter gradients into (staging, then
 * the late parameters' whole gradients) and, per graph value, where in it
 * (-1 for values the stage does not hold); the late ones' offsets serve
 * the caller's sums over other groups. The rank's shard of the reduced
 * gradients (tl_dp_buckets_shard_n floats). NULL for zero 0 and 1; zero 3
 * handles gradients as zero 2. */
tl_buffer* tl_dp_buckets_grad_buffer(const tl_dp_buckets* b);
const int64_t* tl_dp_buckets_grad_offset(const tl_dp_buckets* b);
float* tl_dp_buckets_shard_grads(const tl_dp_buckets* b);

/* ---- zero 2 and 3: gradients written in pieces (piece_cols) ------------ */

/* Rows a piece of value v's gradient: the executor's tl_exec_pieces.rows
 * (0: v is written whole). */
int64_t tl_dp_buckets_piece_rows(const tl_dp_buckets* b, int v);
/* Rows [row0, row0 + rows) of v's gradient, a piece: where the executor
 * writes them (*grad, zeroed: a bucket buffer), then piece_end reduces
 * them and adds this rank's chunk into the shard of gradients. Pieces of
 * a parameter may come several times a backward (each writer's), in any
 * order of whole pieces. */
tl_status tl_dp_buckets_piece_begin(tl_dp_buckets* b, int v, int64_t row0, int64_t rows,
                                    float** grad);
tl_status tl_dp_buckets_piece_end(tl_dp_buckets* b, int v, int64_t row0, int64_t rows);
/* Zero 3: rows [row0, row0 + rows) of parameter v (a piece), gathered from
 * every rank's shard into one of two piece slots of the param buffer
 * (tl_dp_buckets_param_dtype: in the tail of the slot of the unit being
 * run, behind its parameters, where they fit) unless a slot holds it, the next piece of v
 * gathered ahead into the other (the one after, or before where the pieces
 * come last first); *at valid until the next call, or until a unit is
 * gathered into the slot whose tail holds it (tl_dp_buckets_before_node;
 * the kernels already queued on it are waited for by any gather into it). The
 * executor's tl_exec_pieces.param: such a parameter is never whole. */
tl_status tl_dp_buckets_piece_param(tl_dp_buckets* b, int v, int64_t row0, int64_t rows,
                                    const void** at);
/* Whether those parameters are read in pieces (zero 3 over a group of more
 * than one; over one rank they are gathered whole with the late ones). */
bool tl_dp_buckets_piece_params(const tl_dp_buckets* b);

/* ---- the parameters the buckets hold: zero 3, and zero 1-2 in bf16 ---- */

/* Zero 1 and 2 under bf16 training: tl_dp_buckets_shard_params is the
 * fp32 master of the rank's chunks, tl_dp_buckets_param_buffer the whole
 * stage in bf16 at the layout's offsets (_param_offset), refreshed by
 * tl_dp_buckets_gather_params; begin_step and before_node do nothing.
 *
 * Zero 3: the parameters exist whole only a unit at a time. Every rank keeps its
 * chunks of them (tl_dp_buckets_shard_params: the only copy, which the
 * optimizer updates); the executor reads them from a buffer of two unit
 * slots, unit u in slot u % 2, and the late parameters whole behind them
 * (tl_dp_buckets_param_buffer, _param_offset) — but a late parameter
 * gathered with the unit that reads it into its slot's tail where it fits
 * (the config's unit_late), and those read in pieces. Before each node runs the
 * trainer calls before_node: the node's unit is gathered (all-gathered
 * from the shards) unless its slot holds it, and the next unit of the pass
 * (u + 1 forward, u - 1 backward) is gathered ahead into the other slot
 * while the current one computes. On a stage whose units are too large
 * for two slots to save memory (tl_dp_zero3_slots) there is one slot,
 * every unit in it, and nothing is gathered ahead. A unit is thus gathered for its forward
 * and again for its backward, except where one pass ends and the next
 * begins on the same units. begin_step (before a step's or an
 * evaluation's first pass) drops what the slots hold and gathers the late
 * parameters kept whole. Otherwise every call is a no-op and the accessors NULL. */
tl_status tl_dp_buckets_begin_step(tl_dp_buckets* b);
tl_status tl_dp_buckets_before_node(tl_dp_buckets* b, int forward_node, bool backward);
tl_buffer* tl_dp_buckets_param_buffer(const tl_dp_buckets* b);
const int64_t* tl_dp_buckets_param_offset(const tl_dp_buckets* b);
/* How the param buffer stores them (the executor's params_dtype): TL_BF16
 * under bf16 training (tl_dp_buckets_config.params), else TL_F32. */
tl_dtype tl_dp_buckets_param_dtype(const tl_dp_buckets* b);
tl_buffer* tl_dp_buckets_shard_params(const tl_dp_buckets* b);
int64_t tl_dp_buckets_unit_max(const tl_dp_buckets* b);
/* ZeRO-3's unit slots: 2 (the next unit gathered while one computes) where
 * they hold at most half of what sharding saves of a stage's early
 * parameters over `size` ranks (2 * unit_max <= (early - early / size) / 2),
 * else 1 (each unit gathered when it is read, nothing ahead) — so that
 * ZeRO-3 holds fewer bytes than ZeRO-2 on a stage of few, large units. */
int tl_dp_zero3_slots(int64_t n, int64_t n_late, int64_t unit_max, int size);
/* The slots these buckets gather into (0 below ZeRO-3). */
int tl_dp_buckets_slots(const tl_dp_buckets* b);

/* What the buckets allocate on the device for a stage of n elements, n_late
 * of them late (n_pieced of those written in pieces of `piece` elements:
 * no whole gradient), whose largest backward
 * node writes `staging` elements of early gradients and whose largest unit holds unit_max (zero 3;
 * piece_room: tl_dp_piece_rows' room; late_in_units: late elements gathered with their unit, the
 * config's unit_late), over `size` ranks, reducing in `wire`: the planner prices
 * ZeRO with it. Zero 0 and 1: nothing (the gradients are the caller's) but a bf16 wire's image of
 * them and (zero 1, bf16 training) the parameters below. With zero 3 the shard is counted as zero 2
 * cuts it; cutting buckets at units too adds at most a few elements per bucket; `params` TL_BF16
 * (bf16 training) keeps the unit slots and late parameters in 2 bytes each (each rank rounds its
 * chunks straight into them and gathers in place), and under zero 1 and 2 the whole stage's working
 * parameters in bf16 and the shard's fp32 master. */
int64_t tl_dp_buckets_bytes(int zero, int64_t n, int64_t n_late, int64_t n_pieced, int64_t piece,
                            int64_t staging, int64_t unit_max, int64_t piece_room,
                            int64_t late_in_units, int size, double bucket_mb, tl_dtype wire,
                            tl_dtype params);
/* Rows a piece of a parameter of `all` rows of `cols` elements written in
 * pieces: a bucket's `per` elements of whole rows, at least one, at most
 * all; where the parameter is read in pieces (zero 3 over a group) and
 * `room` elements (the unit slot's tail beside the largest unit that
 * reads it: its slot's unit_max less that unit's parameters) hold two
 * pieces of half a bucket's rows or more, at most half of room, so both
 * piece slots lie there. room 0: the parameter is not read in pieces. */
int64_t tl_dp_piece_rows(int64_t per, int64_t cols, int64_t all, int64_t room);
/* ZeRO-2 on a stage of n gradient elements, none late, whose largest
 * backward node writes `staging` of them: whether writing that node's
 * matrices (`pieced` elements, a piece `piece` of them, whole rows) in
 * pieces straight into the buckets, the next largest node's `after`
 * elements then staged, holds fewer bytes (tl_dp_buckets_bytes both ways,
 * the pieces' `temps` bytes of temporaries added: the executor's
 * tl_exec_piece_sizes) — on a stage one node's gradients fill (an MLP's
 * layer, a single block) the staging costs what sharding saves. The
 * trainer writes them so and the planner prices them alike. */
bool tl_dp_solo_pieces_pay(int64_t n, int64_t staging, int64_t after, int64_t pieced, int64_t piece,
                           double temps, int size, double bucket_mb, tl_dtype wire,
                           tl_dtype params);
/* Such matrices on a stage of forward nodes [begin, end) of g with layout
 * l (no late parameters): those of l's staging group (the gradients of
 * the node that writes the most: tl_dp_layout_staging) that only that
 * node reads and that it can write in pieces (tl_exec_can_piece), 2-D.
 * Their count (0 on a layout with late parameters), the first max of
 * them into out, their elements into *pieced and the staging that remains
 * into *after (the group's other elements, or the next largest group's).
 * The trainer and the planner take one alone. */
int tl_dp_solo_candidates(const tl_graph* g, int begin, int end, const tl_dp_layout* l, int* out,
                          int max, int64_t* pieced, int64_t* after);
/* The rows a piece of such a matrix (`all` rows of `cols`): a bucket's of
 * the whole stage's n elements (tl_dp_bucket_elems at ZeRO-2), whole rows. */
int64_t tl_dp_solo_piece_rows(int64_t n, int64_t cols, int64_t all, double bucket_mb);
/* The room tl_dp_piece_rows is given on a stage of layout l whose ZeRO-3
 * units begin at forward nodes unit_begin[0..n_units] and of which
 * unit_pieces say which read a parameter in pieces: the largest unit's
 * early elements less the largest reading unit's (0: none reads one).
 * Meaningful over a group of more than one only. */
int64_t tl_dp_piece_room(const tl_dp_layout* l, int n_units, const int* unit_begin,
                         const bool* unit_pieces);
/* Whether n_pslots piece slots of piece_max elements lie in `room`: else
 * the param buffer holds them behind the late parameters. */
bool tl_dp_pieces_in_room(int n_pslots, int64_t piece_max, int64_t room);
/* The elements a bucket holds (the last of each part fewer): bucket_mb's,
 * and under ZeRO 2 and 3 at most 1/TL_DP_SHARDED_BUCKETS of the stage's
 * n_early early gradients — two buckets in flight then stay small beside
 * the shard they are reduced into, on a small stage as on a large one
 * (25 MiB buckets are capped on stages under 100M elements) — unless
 * bucket_mb asks for one bucket a part (TL_DP_ONE_BUCKET_MB or more: the
 * reduction after the backward, bucket buffers of the whole stage). */
#define TL_DP_SHARDED_BUCKETS 16
#define TL_DP_ONE_BUCKET_MB 1e6
int64_t tl_dp_bucket_elems(int zero, int64_t n_early, double bucket_mb);
/* The elements a rank owns of a stage of n elements, n_late late, over
 * `size` ranks under ZeRO `zero` (the largest rank's share: rank 0). */
int64_t tl_dp_shard_elems(int zero, int64_t n, int64_t n_late, int size, double bucket_mb);
/* The staging a layout needs: the most early gradient elements one
 * backward node writes. */
int64_t tl_dp_layout_staging(const tl_dp_layout* l);

#ifdef __cplusplus
}
#endif

#endif
