/* plan_svg.h — a picture of a plan: its pipeline schedule (one row per
 * stage, a box per forward and backward of each micro-batch, the idle
 * bubble left blank) and its mesh (which devices hold which stage of which
 * replica), as an SVG that any browser shows. `trellis plan --svg`. */
#ifndef TL_LAUNCHER_PLAN_SVG_H
#define TL_LAUNCHER_PLAN_SVG_H

#include <stdio.h>

#include "planner/cost.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes the picture of plan p to f; `title` heads it. Draws at most 2048
 * micro-batch slots (stages x micro-batches), saying so when it cuts. */
tl_status tl_plan_svg(const tl_plan* p, const char* title, FILE* f);

#ifdef __cplusplus
}
#endif

#endif
