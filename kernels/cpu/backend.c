/* backend.c — the CPU kernel table and its thread settings.
 *
 * Threads: TRELLIS_NUM_THREADS if set, otherwise the online cores divided
 * by the ranks that the MPI launcher placed on this node, so that four ranks
 * on two cores do not run sixteen busy threads. The count goes to OpenMP,
 * whose one pool runs both our kernels and OpenBLAS's GEMM (its OpenMP
 * build). */
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/device.h"
#include "core/env.h"
#include "core/log.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/cpu_impl.h"

/* Declared by OpenBLAS's cblas.h in some versions and not others. */
void openblas_set_num_threads(int num_threads);

static int g_threads = 0;

static int local_ranks(void) {
  static const char* const vars[] = {"MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE",
                                     "SLURM_NTASKS_PER_NODE"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char* v = getenv(vars[i]);
    int n = v ? atoi(v) : 0;
    if (n > 0) return n;
  }
  return 1;
}

static tl_status cpu_synchronize(void* ctx) {
  (void)ctx;
  return TL_OK;
}

int tl_cpu_num_threads(void) {
  return g_threads;
}

tl_status tl_cpu_backend_init(void** ctx) {
  *ctx = NULL;
  int n = tl_env()->num_threads;
  if (n == 0) {
    long cores = tl_cpu_cores();
    n = (int)(cores > 0 ? cores : 1) / local_ranks();
    if (n < 1) n = 1;
  }
  if (n != g_threads) {
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
    g_threads = n;
    TL_LOG_DEBUG("cpu backend: %d thread%s", n, n == 1 ? "" : "s");
  }
  return TL_OK;
}

void tl_cpu_backend_free(void* ctx) {
  (void)ctx;
}

const struct tl_kernel_ops tl_cpu_kernel_ops = {
    .name = "cpu",
    .synchronize = cpu_synchronize,
    .matmul = tl__cpu_matmul,
    .matmul_ld = tl__cpu_matmul_ld,
    .matmul_backward = tl__cpu_matmul_backward,
    .layernorm_forward = tl__cpu_layernorm_forward,
    .layernorm_backward = tl__cpu_layernorm_backward,
    .gelu_forward = tl__cpu_gelu_forward,
    .gelu_backward = tl__cpu_gelu_backward,
    .attention_forward = tl__cpu_attention_forward,
    .attention_backward = tl__cpu_attention_backward,
    .embedding_forward = tl__cpu_embedding_forward,
    .embedding_backward = tl__cpu_embedding_backward,
    .crossentropy_forward_backward = tl__cpu_crossentropy_forward_backward,
    .xent_shard_forward = tl__cpu_xent_shard_forward,
    .xent_shard_backward = tl__cpu_xent_shard_backward,
    .add_forward = tl__cpu_add_forward,
    .add_backward = tl__cpu_add_backward,
    .scale_forward = tl__cpu_scale_forward,
    .scale_backward = tl__cpu_scale_backward,
    .sumsq = tl__cpu_sumsq,
    .adamw = tl__cpu_adamw,
    .fixed_add = tl__cpu_fixed_add,
    .fixed_to_float = tl__cpu_fixed_to_float,
    .sumsq_fixed = tl__cpu_sumsq_fixed,
    .to_bf16 = tl__cpu_to_bf16,
    .from_bf16 = tl__cpu_from_bf16,
    .round_bf16 = tl__cpu_round_bf16,
    .rmsnorm_forward = tl__cpu_rmsnorm_forward,
    .rmsnorm_backward = tl__cpu_rmsnorm_backward,
    .rope_forward = tl__cpu_rope_forward,
    .rope_backward = tl__cpu_rope_backward,
    .swiglu_forward = tl__cpu_swiglu_forward,
    .swiglu_backward = tl__cpu_swiglu_backward,
    .copy_2d = tl__cpu_copy_2d,
};
