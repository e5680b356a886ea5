/* matmul_bench.c — CPU matmul throughput at GPT-2 shapes, next to raw
 * OpenBLAS sgemm on the same shapes in the same run (not a test: timings on
 * shared machines are noisy, so only the side-by-side ratio means much).
 *
 *   bazel run -c opt //tests/bench:matmul_bench [-- --threads N --seconds S]
 *
 * Shapes are the linear layers of GPT-2 small with B*T = 256 rows:
 * x (M,K) times W^T with W (N,K), plus a bias — how the model calls it. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/timer.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu.h"

struct shape {
  const char* what;
  int m, k, n;
};

static const struct shape k_shapes[] = {
    {"qkv", 256, 768, 2304},
    {"attn proj", 256, 768, 768},
    {"fc", 256, 768, 3072},
    {"fc proj", 256, 3072, 768},
};

/* Runs fn until `seconds` pass (after one warm-up call); returns GFLOP/s. */
static double gflops(double flops, double seconds, void (*fn)(void*), void* arg) {
  fn(arg);
  tl_timer t;
  tl_timer_start(&t);
  int iters = 0;
  do {
    fn(arg);
    iters++;
  } while (tl_timer_elapsed_s(&t) < seconds);
  return flops * iters / tl_timer_elapsed_s(&t) * 1e-9;
}

struct job {
  const tl_backend* be;
  const struct shape* s;
  float *x, *w, *b, *y, *dy, *dx, *dw, *db;
};

static void run_trellis(void* p) {
  struct job* j = p;
  j->be->ops->matmul(j->be->ctx, j->y, j->x, j->w, j->b, j->s->m, j->s->n, j->s->k, false, true,
                     false);
}

static void run_trellis_backward(void* p) {
  struct job* j = p;
  j->be->ops->matmul_backward(j->be->ctx, j->dx, j->dw, j->db, j->dy, j->x, j->w, j->s->m, j->s->n,
                              j->s->k, false, true);
}

static void run_sgemm(void* p) {
  struct job* j = p;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->s->m, j->s->n, j->s->k, 1.0f, j->x,
              j->s->k, j->w, j->s->k, 0.0f, j->y, j->s->n);
}

static float* random_floats(size_t n, uint32_t id) {
  float* p = malloc(n * sizeof(float));
  if (p) tl_rng_normal(1, id, 0, n, 0.0f, 0.02f, p);
  return p;
}

int main(int argc, char** argv) {
  double seconds = 1.0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
      seconds = atof(argv[++i]);
    } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      setenv("TRELLIS_NUM_THREADS", argv[++i], 1);
    } else {
      fprintf(stderr, "usage: matmul_bench [--threads N] [--seconds S]\n");
      return 2;
    }
  }
  tl_backend* be = NULL;
  if (tl_backend_create(tl_cpu(), &be) != TL_OK) {
    fprintf(stderr, "matmul_bench: %s\n", tl_last_error());
    return 1;
  }
  printf(
      "CPU matmul, %d thread%s, %.1f s per figure; GFLOP/s (2*M*N*K per forward, twice that "
      "per backward)\n",
      tl_cpu_num_threads(), tl_cpu_num_threads() == 1 ? "" : "s", seconds);
  printf("%-10s %-16s %12s %12s %8s %14s\n", "layer", "M x K x N", "sgemm", "trellis fwd", "ratio",
         "trellis bwd");
  for (size_t i = 0; i < sizeof k_shapes / sizeof k_shapes[0]; i++) {
    const struct shape* s = &k_shapes[i];
    size_t mk = (size_t)s->m * s->k, nk = (size_t)s->n * s->k, mn = (size_t)s->m * s->n;
    struct job j = {be,
                    s,
                    random_floats(mk, 0),
                    random_floats(nk, 1),
                    random_floats(s->n, 2),
                    calloc(mn, 4),
                    random_floats(mn, 3),
                    calloc(mk, 4),
                    calloc(nk, 4),
                    calloc(s->n, 4)};
    if (!j.x || !j.w || !j.b || !j.y || !j.dy || !j.dx || !j.dw || !j.db) {
      fprintf(stderr, "matmul_bench: out of memory\n");
      return 1;
    }
    double flops = 2.0 * s->m * s->n * s->k;
    double raw = gflops(flops, seconds, run_sgemm, &j);
    double fwd = gflops(flops, seconds, run_trellis, &j);
    double bwd = gflops(2 * flops, seconds, run_trellis_backward, &j);
    char dims[32];
    snprintf(dims, sizeof dims, "%dx%dx%d", s->m, s->k, s->n);
    printf("%-10s %-16s %12.1f %12.1f %8.2f %14.1f\n", s->what, dims, raw, fwd, fwd / raw, bwd);
    free(j.x), free(j.w), free(j.b), free(j.y), free(j.dy), free(j.dx), free(j.dw), free(j.db);
  }
  tl_backend_destroy(be);
  return 0;
}
