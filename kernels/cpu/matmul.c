/* matmul.c — GEMM through OpenBLAS's cblas_sgemm (row-major), bias folded in
 * by pre-filling the output so the GEMM accumulates onto it. */
#include <cblas.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/cpu_impl.h"

static void add_bias_rows(float* out, int ldo, const float* bias, int m, int n, bool overwrite) {
#pragma omp parallel for if ((int64_t)m * n > TL_CPU_PAR_MIN)
  for (int i = 0; i < m; i++) {
    float* row = out + (int64_t)i * ldo;
    if (overwrite)
      for (int j = 0; j < n; j++) row[j] = bias[j];
    else
      for (int j = 0; j < n; j++) row[j] += bias[j];
  }
}

tl_status tl__cpu_matmul_ld(void* ctx, float* out, int ldo, const float* a, int lda, const float* b,
                            int ldb, const float* bias, int m, int n, int k, bool trans_a,
                            bool trans_b, bool accumulate) {
  (void)ctx;
  float beta = accumulate ? 1.0f : 0.0f;
  if (bias) {
    add_bias_rows(out, ldo, bias, m, n, !accumulate);
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, lda, b, ldb, beta, out, ldo);
  return TL_OK;
}

tl_status tl__cpu_matmul(void* ctx, float* out, const float* a, const float* b, const float* bias,
                         int m, int n, int k, bool trans_a, bool trans_b, bool accumulate) {
  return tl__cpu_matmul_ld(ctx, out, n, a, trans_a ? m : k, b, trans_b ? k : n, bias, m, n, k,
                           trans_a, trans_b, accumulate);
}

/* out (cols) += column sums of x (rows, cols); columns split across threads so
 * each sum keeps one fixed order. */
static tl_status colsum_add(void* ctx, float* out, const float* x, int rows, int cols) {
  (void)ctx;
  enum { BLOCK = 64 };
  int n_blocks = (cols + BLOCK - 1) / BLOCK;
#pragma omp parallel for if ((int64_t)rows * cols > TL_CPU_PAR_MIN)
  for (int blk = 0; blk < n_blocks; blk++) {
    int j0 = blk * BLOCK, j1 = j0 + BLOCK < cols ? j0 + BLOCK : cols;
    float acc[BLOCK] = {0};
    for (int i = 0; i < rows; i++) {
      const float* row = x + (int64_t)i * cols;
      for (int j = j0; j < j1; j++) acc[j - j0] += row[j];
    }
    for (int j = j0; j < j1; j++) out[j] += acc[j - j0];
  }
  return TL_OK;
}

tl_status tl__cpu_matmul_backward(void* ctx, float* da, float* db, float* dbias, const float* dout,
                                  const float* a, const float* b, int m, int n, int k, bool trans_a,
                                  bool trans_b) {
  return tl__matmul_backward_by_matmul(&tl_cpu_kernel_ops, ctx, da, db, dbias, dout, a, b, m, n, k,
                                       trans_a, trans_b, colsum_add);
}
