/* buckets_impl.h — the buckets' state, shared by buckets.c (the cut, the
 * shard, the reductions of ZeRO 0-2), units.c (ZeRO-3's parameters) and
 * pieces.c (the parameters written and read a piece of rows at a time). */
#ifndef TL_DP_BUCKETS_IMPL_H
#define TL_DP_BUCKETS_IMPL_H

#include "dp/buckets.h"

struct tl_dp_buckets {
  tl_group* group; /* NULL for a group of one */
  int size, rank, zero;
  bool staging_written; /* zero 2, 3: the config's (no staging zeroed) */
  const tl_dp_layout* layout;
  const tl_backend* be;
  float* grads; /* zero 0, 1: the caller's whole gradient buffer */
  int64_t n, per;
  int n_buckets, n_early_buckets;
  int64_t* begin; /* n_buckets + 1 boundaries */
  int64_t* at;    /* per bucket: where this rank's chunk lies in the shard */
  int64_t shard_n;
  tl_group_request** req; /* zero 0, 1: per bucket */
  /* parallel.grad_reduce "bf16" (over a group of more than one): what the
   * reductions move, rounded from the fp32 gradients — zero 0, 1: the whole
   * buffer's image; zero 2, 3: each slot's bucket and its reduced chunk */
  bool bf16;
  tl_buffer* wbuf;
  tl_buffer *wslot[2], *wtemp[2];
  int launched; /* zero 0, 1: buckets [0, launched) are in flight or done */
  int early, early_last;
  double wait_s, wait_last;
  /* zero 2 */
  tl_buffer* gbuf; /* staging, then the late parameters' whole gradients */
  int64_t staging;
  int64_t* goff; /* per graph value: its gradient's offset in gbuf */
  tl_buffer *slot[2], *temp[2];
  int slot_bucket[2];       /* the bucket a slot's reduction is of (in flight), or -1 */
  int slot_fill[2];         /* the bucket being copied into a slot, or -1 */
  const float* slot_sum[2]; /* where that bucket's reduced chunk lands */
  tl_group_request* slot_req[2];
  tl_buffer* shard; /* the reduced gradients of this rank's chunks */
  int cur;          /* the bucket the stream fills next */
  int64_t filled;   /* elements of the stream given in this pass */
  /* zero 2, 3: the parameters whose gradients arrive in pieces of rows
   * (tl_dp_buckets_piece_begin): the back's tail [piece_from, n), each
   * segment cut into buckets of whole rows, a piece a bucket, written
   * straight into a slot and reduced from there */
  int64_t piece_from;       /* n: none */
  int n_whole_buckets;      /* the buckets before theirs */
  int64_t* piece_cols;      /* per value: a row's elements (0: whole) */
  int64_t* piece_rows;      /* per value: rows a piece */
  int *piece_b0, *piece_b1; /* per value: its buckets [b0, b1) */
  int pslot, piece_slot;    /* the slot the next piece tries first; the one being written (-1) */
  int piece_bucket;
  /* zero 3: those parameters are read in pieces too, each gathered into
   * one of two piece slots (in a unit slot's tail, piece_tail below, or
   * behind the late parameters at pbuf's piece_base + s * piece_max), the
   * next piece ahead */
  bool piece_params; /* over a group of more than one: else gathered whole as the late ones */
  int64_t piece_base, piece_max;
  int ppiece[2];    /* the bucket a piece slot holds (or is being gathered into), or -1 */
  bool ppending[2]; /* its gather is in flight */
  int pnext;        /* the piece slot to fill next */
  int plast;        /* the bucket of the piece asked for last */
  int n_pslots;     /* 2, or 1 where every such parameter is one piece */
  /* the tail of a unit slot beside the largest unit that reads them
   * (tl_dp_piece_rows' room; 0: none); where the piece slots fit there
   * (piece_tail) they lie behind the parameters of the unit being run
   * (ucur), which reads them, and hold pieces gathered at pat */
  int64_t piece_room, pat;
  bool piece_tail;
  int ucur;
  /* zero 3 */
  int n_units;
  int* unit_node;             /* n_units + 1 forward node boundaries */
  int64_t *unit_lb, *unit_le; /* per unit: its parameters' range of the layout's front */
  int *unit_b0, *unit_b1;     /* per unit: its buckets [b0, b1) */
  int64_t unit_max;           /* the largest unit's elements: a slot */
  /* per unit: the late parameter gathered with it into its slot's tail
   * (config's unit_late), its layout offset (-1: none), elements, where in
   * the slot (behind the unit's parameters, or the largest of its readers')
   * and buckets [b0, b1) (0, 0: none). late_in_units: their elements (each
   * parameter once), not in pbuf's late part */
  int64_t *ulate_off, *ulate_n, *ulate_at, late_in_units;
  int *ulate_b0, *ulate_b1;
  tl_buffer* pbuf;   /* the unit slots (n_slots; a slot's tail may hold a late parameter
                      * its unit reads, ulate_*), the other late parameters whole, packed
                      * (tl__dp_late_at), the piece slots where they are not in a
                      * unit slot's tail */
  int64_t* poff;     /* per graph value: its offset in pbuf */
  tl_buffer* pshard; /* this rank's chunks of the parameters: their only copy */
  /* train.precision "bf16": the slots and the late parameters hold bf16
   * (what a bf16 graph reads, in half the bytes: the executor's
   * params_dtype); over a group the gathers move the shard rounded to bf16,
   * each rank's chunks rounded into their places as each gather starts.
   * Zero 1 and 2: pbuf is the whole stage's bf16 working copy and pshard
   * the fp32 master (tl_dp_buckets_gather_params) */
  bool pbf16;
  int n_slots;     /* 2: the next unit gathered ahead; 1: none (tl_dp_zero3_slots) */
  int punit[2];    /* the unit a slot holds (or is being gathered into), or -1 */
  bool pending[2]; /* its gather is in flight */
};

/* n > 0 elements, or one (buffers are never empty). */
int64_t tl__dp_at_least_one(int64_t n);
/* This rank's chunk of bucket i (zero 0: the whole bucket). */
void tl__dp_chunk_of(const tl_dp_buckets* b, int i, int64_t* off, int64_t* len);
/* Pushes the collectives in flight along (MPICH moves them only inside MPI calls). */
tl_status tl__dp_progress(tl_dp_buckets* b);
/* Zero 2: waits for slot s's bucket and adds its reduced chunk into the
 * shard; reduce-scatters bucket i from `src` (contiguous) through slot s. */
tl_status tl__dp_retire(tl_dp_buckets* b, int s);
tl_status tl__dp_reduce_bucket(tl_dp_buckets* b, int i, int s, const float* src);
/* Zero 3, bf16 over a group: this rank's chunks of buckets [i0, i1)
 * rounded into the param buffer, bucket i at base + (begin[i] - from).
 * Gathers bucket i to element `dst` of the param buffer (blocking when req
 * is NULL). */
tl_status tl__dp_round_chunks(tl_dp_buckets* b, int i0, int i1, int64_t base, int64_t from);
tl_status tl__dp_gather_bucket(tl_dp_buckets* b, int i, int64_t dst, tl_group_request** req);
/* pieces.c: the parameters written in pieces (the layout's tail from
 * piece_from); zero 3's piece slots and the param buffer (`slots`
 * elements of unit slots before them); landing and forgetting what the
 * piece slots hold. */
tl_status tl__dp_pieced_tail(tl_dp_buckets* b, const struct tl_dp_buckets_config* c);
tl_status tl__dp_piece_slots(tl_dp_buckets* b, int64_t slots, size_t es);
tl_status tl__dp_pieces_drop(tl_dp_buckets* b);
/* Zero 3: each unit's range of the layout's front, then its buffers. */
tl_status tl__dp_units_build(tl_dp_buckets* b, const struct tl_dp_buckets_config* c);
/* Zero 3: the room for piece slots in the units' slots, and the late
 * parameters gathered with their unit (before the buckets are cut). */
void tl__dp_units_tails(tl_dp_buckets* b, const struct tl_dp_buckets_config* c);
/* Zero 3: whether the late elements at layout offset `off` are gathered
 * with a unit; where the late part of pbuf holds element `off` (those
 * gathered with units left out). */
bool tl__dp_late_in_unit(const tl_dp_buckets* b, int64_t off);
int64_t tl__dp_late_at(const tl_dp_buckets* b, int64_t off);
tl_status tl__dp_create_zero3(tl_dp_buckets* b);

#endif
