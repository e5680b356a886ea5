/* matmul_backward.c — the transpose algebra of a matmul's gradients, once,
 * for every backend. With out = op(a) op(b):
 *   d op(a) = dout op(b)^T   (M,K)      d op(b) = op(a)^T dout   (K,N)
 * and each is stored back in a's or b's own layout by choosing the operand
 * order and transposes of one more matmul (accumulating). */
#include "kernels/ops.h"

tl_status tl__matmul_backward_by_matmul(
    const struct tl_kernel_ops* ops, void* ctx, float* da, float* db, float* dbias,
    const float* dout, const float* a, const float* b, int m, int n, int k, bool trans_a,
    bool trans_b,
    tl_status (*colsum_add)(void* ctx, float* out, const float* x, int rows, int cols)) {
  if (da) {
    if (!trans_a) /* da (M,K) += dout (M,N) . op(b)^T */
      TL_CHECK(ops->matmul(ctx, da, dout, b, NULL, m, k, n, false, !trans_b, true));
    else /* da (K,M) += op(b) (K,N) . dout^T */
      TL_CHECK(ops->matmul(ctx, da, b, dout, NULL, k, m, n, trans_b, true, true));
  }
  if (db) {
    if (!trans_b) /* db (K,N) += op(a)^T (K,M) . dout */
      TL_CHECK(ops->matmul(ctx, db, a, dout, NULL, k, n, m, !trans_a, false, true));
    else /* db (N,K) += dout^T (N,M) . op(a) */
      TL_CHECK(ops->matmul(ctx, db, dout, a, NULL, n, k, m, true, trans_a, true));
  }
  if (dbias) TL_CHECK(colsum_add(ctx, dbias, dout, m, n));
  return TL_OK;
}
