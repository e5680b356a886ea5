/* memplan.h — where each activation lives in one arena, from lifetimes.
 *
 * A value is live from the first node that writes it to the last node that
 * reads or writes it, over the whole forward + backward node order. Values
 * whose lifetimes do not overlap share memory, so an activation's bytes are
 * reused as soon as its last reader has run (ggml-alloc's idea, done once
 * ahead of time). Offsets are 64-byte aligned.
 *
 * Two arenas. A value that lives within one pass — written and last read
 * by forward nodes, or by backward nodes of one pass (the weight gradients
 * are a pass of their own when tl_graph_split_weight split them off) — and
 * that no node outside the
 * range touches (a pipeline boundary, sent or received while the stage
 * goes on) nor the caller reads is TRANSIENT: it is dead when its pass
 * returns, so executors that never run at once (a pipeline stage's, one
 * per micro-batch in flight) can share one transient arena. The rest —
 * what the forward saves for the backward, boundaries, outputs — lives in
 * the executor's own arena. */
#ifndef TL_GRAPH_MEMPLAN_H
#define TL_GRAPH_MEMPLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "graph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tl_memplan {
  int n_values;
  int64_t* offset;        /* bytes into its arena; -1 for values not planned */
  bool* transient;        /* in the transient arena (else the executor's own) */
  int* first;             /* node index of the first write; -1 if not planned */
  int* last;              /* node index of the last use */
  size_t arena_bytes;     /* the executor's own arena: what lives across passes */
  size_t transient_bytes; /* the transient arena: what lives within one pass */
  size_t peak_live_bytes; /* the most bytes live at once (a lower bound on any plan) */
} tl_memplan;

/* Plans ACTIVATION and GRAD values over nodes [0, g->n_nodes). The loss
 * gradient (seeded by the executor) is live from the first backward node. */
tl_status tl_memplan_build(const tl_graph* g, tl_memplan* out);

/* The same over a pipeline stage: forward nodes [begin, end) and the
 * backward nodes of those. Values the stage reads but does not write (the
 * activation received from the previous stage, the gradient received from
 * the next) are live from their first reader; values it never touches are
 * not planned. */
tl_status tl_memplan_build_range(const tl_graph* g, int begin, int end, tl_memplan* out);

/* Whether node i belongs to the stage [begin, end). */
static inline int tl_memplan_in_range(const tl_graph* g, int i, int begin, int end) {
  int f = i < g->n_forward ? i : g->nodes[i].forward_of;
  return f >= begin && f < end;
}
void tl_memplan_free(tl_memplan* p);

#ifdef __cplusplus
}
#endif

#endif
