/* layout.h — a pipeline stage's flat parameter and gradient buffers: which
 * parameter values of the graph they hold, where, and in what order their
 * gradients become final.
 *
 * Parameters and gradients live in one flat buffer each (llm.c), so a
 * data-parallel all-reduce moves a few large buckets, not one message per
 * tensor. The stage's buffer holds the parameters its forward nodes
 * [begin, end) read, each once (a tied weight read twice is one segment),
 * ordered so that gradients finish front to back: a gradient is final once
 * the backward of the parameter's FIRST forward use has run, and the
 * backward runs from the last node down, so later first uses come first.
 * Buckets (dp/buckets.h) then fill from the buffer's front while the
 * backward pass goes on. */
#ifndef TL_DP_LAYOUT_H
#define TL_DP_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "graph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tl_dp_segment {
  int value;      /* the parameter value of the graph */
  int64_t offset; /* elements into the flat buffers */
  int64_t n;      /* elements */
  int first_use;  /* the first forward node that reads it */
} tl_dp_segment;

typedef struct tl_dp_layout {
  int n_segments;
  tl_dp_segment* segments; /* in buffer order */
  int64_t* offset;         /* per graph value: element offset in the buffers, or -1 */
  int n_values;            /* the graph's values (offset's length) */
  int64_t n;               /* elements of each flat buffer */
  /* the buffers' front [0, n_early) holds the parameters whose gradients
   * the backward finishes; the back [n_early, n) the "late" ones, whose
   * gradients need a sum over another group (the tied embedding over the
   * pipeline, sequence parallelism's partial LayerNorms over the tensor-
   * parallel group) or several writers before a sharded data-parallel
   * reduction may take them (ZeRO, dp/buckets.h) */
  int64_t n_early;
} tl_dp_layout;

/* The layout of the parameters that forward nodes [begin, end) of g read. */
tl_status tl_dp_layout_build(const tl_graph* g, int begin, int end, tl_dp_layout* out);
/* The same with the parameter values late[v] placed at the back, in the
 * same order among themselves (late NULL: none; tl_dp_layout_build). */
tl_status tl_dp_layout_build_late(const tl_graph* g, int begin, int end, const bool* late,
                                  tl_dp_layout* out);

/* The layout of a pipeline stage that holds several chunks of the model
 * (the interleaved schedule): the parameters forward nodes [begin[k],
 * end[k]) read, k < n, ranges ascending and disjoint — in one pair of
 * buffers, still in the order their gradients become final (the chunks'
 * last backwards run from the last chunk down). */
tl_status tl_dp_layout_build_ranges(const tl_graph* g, int n, const int* begin, const int* end,
                                    const bool* late, tl_dp_layout* out);

/* How many of forward nodes [begin, end) read value v. */
int tl_dp_readers(const tl_graph* g, int begin, int end, int v);
void tl_dp_layout_free(tl_dp_layout* l); /* zeroes it; a zeroed layout is fine */

/* How much of the buffers' front has final gradients once the backward of
 * forward node `forward_node` has run (in a pass running backward from the
 * range's last node down); never past n_early. */
int64_t tl_dp_layout_final_upto(const tl_dp_layout* l, int forward_node);

#ifdef __cplusplus
}
#endif

#endif
