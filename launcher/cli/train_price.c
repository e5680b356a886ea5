/* train_price.c — the planner's price of a training run beside what the
 * run measures (see train_price.h). */
#include "launcher/cli/train_price.h"

#include <jansson.h>
#include <stdlib.h>

#include "planner/cluster.h"
#include "planner/recommend.h"

tl_status tl_train_price(const struct tl_config* cfg, const char* spec, struct tl_train_price* out,
                         char* what, size_t n) {
  tl_cluster c;
  snprintf(what, n, "--cluster");
  TL_CHECK(tl_cluster_load(spec, &c));
  snprintf(what, n, "--cluster %s", spec);
  TL_CHECK(tl_plan_price_config(cfg, &c, &out->plan));
  snprintf(out->cluster, sizeof out->cluster, "%s", c.name);
  out->device_bytes = c.device_memory_bytes;
  return TL_OK;
}

void tl_train_price_print(const struct tl_train_price* tp, FILE* f) {
  const tl_plan* p = &tp->plan;
  fprintf(f,
          "priced on %s (--cluster): %.1f ms a step (compute %.1f, bubble %.1f, tp %.1f, pp %.1f, "
          "dp %.1f, optimizer %.1f), %.2f MB of state and activations on the fullest rank; %.2f "
          "GB with the spec's reserve, %s its devices' %.2f GB\n",
          tp->cluster, p->t_step * 1e3, p->t_compute * 1e3, p->t_bubble * 1e3, p->t_tp * 1e3,
          p->t_pp * 1e3, p->t_dp * 1e3, p->t_opt * 1e3, (p->mem_state + p->mem_act) / 1e6,
          p->mem_total / 1e9, p->fits ? "within" : "beyond", tp->device_bytes / 1e9);
}

static int by_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double median_of(double* v, int64_t n) {
  qsort(v, (size_t)n, sizeof(double), by_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void tl_train_price_report(const struct tl_train_price* tp, FILE* f, FILE* metrics, int64_t step,
                           double* times, double* waits, int64_t n_times, const int64_t* peaks,
                           int n_ranks, bool verify) {
  const tl_plan* p = &tp->plan;
  /* the fullest rank: the one a memory plan must fit (ranks differ: first
   * and last stages, tensor-parallel rank 0) */
  int64_t peak = 0;
  int at = 0;
  for (int k = 0; k < n_ranks; k++)
    if (peaks[2 * k] > peak) peak = peaks[2 * k], at = k;
  const double bytes = p->mem_state + p->mem_act;
  double mean = 0, median = 0, wait = 0;
  if (n_times > 0) {
    for (int64_t i = 0; i < n_times; i++) mean += times[i] / (double)n_times;
    median = median_of(times, n_times);
    wait = median_of(waits, n_times);
    fprintf(f,
            "priced on %s: %.1f ms a step; measured %.1f mean (%+.1f%%), %.1f median (%+.1f%%) "
            "over the %lld step%s after the first\n",
            tp->cluster, p->t_step * 1e3, mean * 1e3, 100 * (mean / p->t_step - 1), median * 1e3,
            100 * (median / p->t_step - 1), (long long)n_times, n_times == 1 ? "" : "s");
    if (p->dp > 1)
      fprintf(f,
              "priced on %s: data-parallel communication shows %.1f ms a step (%.1f ms on the "
              "link); the rank that waited least on it waited %.1f ms, the median step\n",
              tp->cluster, p->t_dp * 1e3, p->c_dp * 1e3, wait * 1e3);
  } else
    fprintf(f, "priced on %s: %.1f ms a step; one step taken, which warms caches: none measured\n",
            tp->cluster, p->t_step * 1e3);
  fprintf(f,
          "priced on %s: %.2f MB on the fullest rank (stage %d); rank %d's allocator peaked at "
          "%.2f MB (%+.1f%%)%s\n",
          tp->cluster, bytes / 1e6, p->mem_stage, at, (double)peak / 1e6,
          bytes > 0 ? 100 * ((double)peak / bytes - 1) : 0.0,
          verify ? " (rank 0's count holds --verify's single-device run too)" : "");
  fflush(f);
  if (!metrics) return;
  json_t* o =
      json_pack("{sI s{ss sf sf sf} s{so so so sI si}}", "step", (json_int_t)step, "priced",
                "cluster", tp->cluster, "step_ms", p->t_step * 1e3, "dp_ms", p->t_dp * 1e3, "bytes",
                bytes, "measured", "mean_ms", n_times > 0 ? json_real(mean * 1e3) : json_null(),
                "median_ms", n_times > 0 ? json_real(median * 1e3) : json_null(),
                "dp_wait_median_ms", n_times > 0 ? json_real(wait * 1e3) : json_null(),
                "peak_bytes", (json_int_t)peak, "peak_rank", at);
  char* line = o ? json_dumps(o, JSON_COMPACT) : NULL;
  if (line) fprintf(metrics, "%s\n", line);
  free(line);
  json_decref(o);
}
