/* train_report.h — what `trellis train` prints about a run besides its
 * steps: the run described at the start, the sample at the end and
 * --verify's report (train.c). Rank 0's, on stdout. */
#ifndef TL_LAUNCHER_CLI_TRAIN_REPORT_H
#define TL_LAUNCHER_CLI_TRAIN_REPORT_H

#include <stdint.h>

#include "core/config.h"
#include "graph/model.h"
#include "launcher/cli/train_price.h"
#include "launcher/train/verify.h"

/* The model, the run (mesh, schedule, micro-batches), the device; `steps`
 * the --steps stop (0: none), `tensorboard` the event file's path and
 * `price` the planner's price of the run (NULL: neither). */
void tl_train_describe(const struct tl_config* c, const tl_model* m, long steps,
                       const char* tensorboard, const struct tl_train_price* price);

/* "sample: " and n generated tokens: decoded by data.tokenizer where it is
 * set, as bytes for a 256-token vocabulary, else as ids. */
void tl_train_print_sample(const tl_model* m, const struct tl_config* cfg, const int32_t* tok,
                           int n);

/* What --verify compared, the figures and the verdict; 0 when EQUAL. */
int tl_train_print_verify(const struct tl_verify_report* v, const tl_model* m,
                          const struct tl_config* cfg);

#endif
