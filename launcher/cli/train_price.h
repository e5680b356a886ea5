/* train_price.h — `trellis train --cluster SPEC`: the planner's price of
 * the run (tl_plan_price_config: the config's own plan on the spec, as
 * `trellis plan` prices it), printed as the run starts, and the run's
 * measured steps and allocator peaks set beside it as it ends. */
#ifndef TL_LAUNCHER_TRAIN_PRICE_H
#define TL_LAUNCHER_TRAIN_PRICE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/config.h"
#include "planner/cost.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tl_train_price {
  tl_plan plan;
  char cluster[64];    /* the spec's name */
  double device_bytes; /* a device's memory, as the spec says */
};

/* Loads the spec and prices cfg's plan on it. On failure, into what[]
 * (n bytes) the flag to report it under: "--cluster" where the spec's own
 * message names its file, else "--cluster SPEC". */
tl_status tl_train_price(const struct tl_config* cfg, const char* spec, struct tl_train_price* out,
                         char* what, size_t n);

/* The price, a line: the step with its parts, the fullest rank's bytes,
 * and with the spec's reserve against its devices' memory. */
void tl_train_price_print(const struct tl_train_price* p, FILE* f);

/* The run beside the price, after `step`: the mean and median of the
 * timed steps' seconds times[0..n_times) (sorted in place; the first
 * step, which warms caches, is not among them), the median of the seconds
 * the least waiting rank waited on data-parallel collectives in them (the
 * last to reach them: the communication's own time), waits[0..n_times)
 * (sorted in place), against the data-parallel time the plan shows, and
 * the largest allocator peak of `n_ranks` (peak, live) pairs in peaks.
 * `verify`: rank 0's count holds --verify's single-device run too, which
 * the line says. Printed to f, and with `metrics` the same as a JSON line
 * there: {"step", "priced": {"cluster", "step_ms", "dp_ms", "bytes"},
 * "measured": {"mean_ms", "median_ms", "dp_wait_median_ms", "peak_bytes",
 * "peak_rank"}} (a step not measured: null). */
void tl_train_price_report(const struct tl_train_price* p, FILE* f, FILE* metrics, int64_t step,
                           double* times, double* waits, int64_t n_times, const int64_t* peaks,
                           int n_ranks, bool verify);

#ifdef __cplusplus
}
#endif

#endif
