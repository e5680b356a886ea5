/* train_record.h — where `trellis train` records each step for tools:
 * --metrics (JSON lines, FILE.partial renamed to FILE at the end) and
 * --tensorboard (an event file, tensorboard.h), both on rank 0 only and
 * both from the same numbers. */
#ifndef TL_LAUNCHER_CLI_TRAIN_RECORD_H
#define TL_LAUNCHER_CLI_TRAIN_RECORD_H

#include <stdint.h>
#include <stdio.h>

#include "core/config.h"
#include "launcher/train/tensorboard.h"
#include "launcher/train/trainer.h"

struct tl_train_record {
  FILE* metrics; /* --metrics' file while the run writes it, or NULL */
  char metrics_path[TL_PATH_MAX], metrics_partial[TL_PATH_MAX + 16];
  tl_tensorboard* tb; /* --tensorboard's writer, or NULL */
};

/* Opens what is asked for (NULL: not asked). */
tl_status tl_train_record_open(struct tl_train_record* rec, const char* metrics,
                               const char* tensorboard);

/* One step: its stats, the tokens of a step, the steps skipped so far and
 * each rank's (peak, live) bytes (peaks[2k], peaks[2k + 1]) of n_ranks. */
tl_status tl_train_record_step(struct tl_train_record* rec, const struct tl_step_stats* st,
                               double tokens, int64_t skipped, const int64_t* peaks, int n_ranks);

/* A validation loss at `step`. */
tl_status tl_train_record_val(struct tl_train_record* rec, int64_t step, double val);

/* Closes both; the metrics file takes its name. Errors go to stderr. */
void tl_train_record_close(struct tl_train_record* rec);

#endif
