/* plan_report.h — what `trellis plan` prints of a search: the plans ranked
 * by step time with what bounds the winner and what each rule rejected;
 * where no split of the cluster's devices fits, the plans on fewer devices
 * or on the fewest nodes above them; and all of it as one JSON document
 * (--json). The command (plan_cmd.c) searches; this says what was found. */
#ifndef TL_LAUNCHER_PLAN_REPORT_H
#define TL_LAUNCHER_PLAN_REPORT_H

#include "core/dtype.h"
#include "planner/cluster.h"
#include "planner/cost.h"
#include "planner/search.h"

/* The search over more nodes (tl_search_more_nodes) and what it found. */
struct tl_plan_more {
  tl_search_result r;
  int nodes;       /* the fewest with a plan; 0: none */
  int searched_to; /* the most nodes searched; 0: no count a mesh fills */
  int spec_nodes;  /* the spec's own count, whatever --nodes asked */
};

/* "none", "selective" or "full". */
const char* tl_plan_recompute_name(tl_recompute r);

/* The model and cluster, the top plans of r (rejections counted by rule),
 * what bounds the winner and its memory. */
void tl_plan_print_table(const tl_search_result* r, int top, const tl_cluster* c,
                         const tl_cost_model* cm, int batch, tl_dtype dtype, double secs);

/* The plans on fewer devices (tl_search_fewer's, which looked for
 * max_counts counts with a plan), by step time, and the one with the most
 * tokens/s per device. */
void tl_plan_print_fewer(const tl_search_result* f, int top, const tl_cluster* c, int max_counts);

/* The plans on the fewest nodes above the cluster's that hold the model,
 * or the counts searched. */
void tl_plan_print_more(const struct tl_plan_more* m, int top, const tl_cluster* c);

/* All of it as {"plans", "rejected", "why_none_fits", "fewer_devices",
 * "more_nodes", ...} on stdout (fewer and more NULL where not searched);
 * 0 when it cannot be encoded. */
int tl_plan_print_json(const tl_search_result* r, const tl_search_result* fewer,
                       const struct tl_plan_more* more, const char* why, int top,
                       const tl_cluster* c, double secs);

#endif
