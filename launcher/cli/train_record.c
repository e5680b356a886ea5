/* train_record.c — --metrics and --tensorboard (see train_record.h). */
#include "launcher/cli/train_record.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "launcher/cli/cli.h"

tl_status tl_train_record_open(struct tl_train_record* rec, const char* metrics,
                               const char* tensorboard) {
  memset(rec, 0, sizeof *rec);
  if (metrics) {
    snprintf(rec->metrics_path, sizeof rec->metrics_path, "%s", metrics);
    snprintf(rec->metrics_partial, sizeof rec->metrics_partial, "%s.partial", metrics);
    if (!(rec->metrics = fopen(rec->metrics_partial, "w")))
      return TL_ERRF(TL_ERR_IO, "--metrics: cannot write '%s': %s", rec->metrics_partial,
                     strerror(errno));
  }
  if (tensorboard && tl_tensorboard_create(tensorboard, &rec->tb) != TL_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", tl_cli_error());
    return TL_ERRF(TL_ERR_IO, "--tensorboard: %s", why);
  }
  return TL_OK;
}

/* A JSON number, or null where it is not finite (JSON has no NaN). */
static const char* json_number(double x, const char* fmt, char* buf) {
  if (!isfinite(x)) return "null";
  snprintf(buf, 32, fmt, x);
  return buf;
}

/* {"rank0": N, "rank1": N, ...}: element `which` of each rank's pair */
static void print_peaks(FILE* f, const int64_t* peaks, int n, int which) {
  fputc('{', f);
  for (int k = 0; k < n; k++)
    fprintf(f, "%s\"rank%d\": %lld", k ? ", " : "", k, (long long)peaks[2 * k + which]);
  fputc('}', f);
}

static tl_status tensorboard_error(void) {
  char why[512];
  snprintf(why, sizeof why, "%s", tl_cli_error());
  return TL_ERRF(TL_ERR_IO, "--tensorboard: %s", why);
}

tl_status tl_train_record_step(struct tl_train_record* rec, const struct tl_step_stats* st,
                               double tokens, int64_t skipped, const int64_t* peaks, int n_ranks) {
  if (rec->metrics) {
    char num[2][32];
    fprintf(rec->metrics,
            "{\"step\": %lld, \"loss\": %s, \"lr\": %.6g, \"grad_norm\": %s, \"ms\": "
            "%.3f, \"tokens_per_s\": %.1f, \"wait_ms\": %.3f, \"dp_buckets\": %d, "
            "\"dp_buckets_early\": %d, \"dp_wait_ms\": %.3f, \"skipped\": %lld, "
            "\"peak_bytes\": ",
            (long long)st->step, json_number(st->loss, "%.6f", num[0]), st->lr,
            json_number(st->grad_norm, "%.6g", num[1]), st->seconds * 1e3, tokens / st->seconds,
            st->bubble_seconds * 1e3, st->dp_buckets, st->dp_buckets_early,
            st->dp_wait_seconds * 1e3, (long long)skipped);
    print_peaks(rec->metrics, peaks, n_ranks, 0);
    fputs(", \"live_bytes\": ", rec->metrics);
    print_peaks(rec->metrics, peaks, n_ranks, 1);
    fputs("}\n", rec->metrics);
  }
  if (rec->tb) {
    int64_t peak = 0;
    for (int k = 0; k < n_ranks; k++)
      if (peaks[2 * k] > peak) peak = peaks[2 * k];
    static const char* const tags[] = {
        "train/loss",    "train/lr",         "train/grad_norm",        "train/tokens_per_s",
        "train/step_ms", "train/peak_bytes", "train/pipeline_wait_ms", "train/dp_wait_ms"};
    const float v[] = {(float)st->loss,
                       (float)st->lr,
                       (float)st->grad_norm,
                       (float)(tokens / st->seconds),
                       (float)(st->seconds * 1e3),
                       (float)peak,
                       (float)(st->bubble_seconds * 1e3),
                       (float)(st->dp_wait_seconds * 1e3)};
    if (tl_tensorboard_scalars(rec->tb, st->step, tags, v, 8) != TL_OK) return tensorboard_error();
  }
  return TL_OK;
}

tl_status tl_train_record_val(struct tl_train_record* rec, int64_t step, double val) {
  if (rec->metrics) {
    char num[32];
    fprintf(rec->metrics, "{\"step\": %lld, \"val_loss\": %s}\n", (long long)step,
            json_number(val, "%.6f", num));
  }
  if (rec->tb) {
    const char* tag = "val/loss";
    const float v = (float)val;
    if (tl_tensorboard_scalars(rec->tb, step, &tag, &v, 1) != TL_OK) return tensorboard_error();
  }
  return TL_OK;
}

void tl_train_record_close(struct tl_train_record* rec) {
  if (rec->metrics) {
    fclose(rec->metrics);
    if (rename(rec->metrics_partial, rec->metrics_path) != 0)
      fprintf(stderr, "trellis train: cannot rename '%s': %s\n", rec->metrics_partial,
              strerror(errno));
  }
  tl_tensorboard_destroy(rec->tb);
  memset(rec, 0, sizeof *rec);
}
