/* cost_gemm.c — the matrix products of a graph range, by shape, and their
 * time on a cluster's GEMM table (planner/cost.h, cluster.h). */
#include <math.h>
#include <stdbool.h>

#include "graph/graph.h"
#include "graph/op.h"
#include "planner/cost_impl.h"

/* A matmul node's (m, n, k) and which of m or k holds the token rows (its
 * first operand not a parameter: the activations' rows; transposed, they
 * are its inner dimension). */
static void matmul_shape(const tl_graph* g, const tl_node* n, double* m, double* nn, double* k,
                         int* grows) {
  const tl_value *a = &g->values[n->in[0]], *b = &g->values[n->in[1]];
  int64_t rows = 1;
  for (int d = 0; d + 1 < a->n_dims; d++) rows *= a->shape[d];
  *m = (double)(n->attr[0] ? a->shape[1] : rows);
  *k = (double)(n->attr[0] ? a->shape[0] : a->shape[a->n_dims - 1]);
  *nn = (double)(n->attr[1] ? b->shape[0] : b->shape[1]);
  *grows = a->role == TL_ROLE_PARAM ? 0 : n->attr[0] ? 2 : 1;
}

static void add_gemm(struct tl_cost_gemm* g, int* n, int max, double m, double nn, double k,
                     int grows, int pass, int* dropped) {
  for (int i = 0; i < *n; i++)
    if (g[i].m == m && g[i].n == nn && g[i].k == k && g[i].grows == grows && g[i].pass == pass) {
      g[i].count++;
      return;
    }
  if (*n < max)
    g[(*n)++] = (struct tl_cost_gemm){m, nn, k, (signed char)grows, (signed char)pass, 1};
  else
    (*dropped)++;
}

tl_status tl__cost_gemms(const tl_graph* g, int begin, int end, int per, struct tl_cost_gemm* out,
                         int* n_out, int max) {
  *n_out = 0;
  int dropped = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const tl_node* n = &g->nodes[i];
    int f = tl__cost_forward_index(g, i);
    if (f < begin || f >= end) continue;
    double m, nn, k;
    int grows;
    if (n->op == TL_OP_MATMUL) {
      matmul_shape(g, n, &m, &nn, &k, &grows);
      if (grows == 1) m /= per;
      if (grows == 2) k /= per;
      add_gemm(out, n_out, max, m, nn, k, grows, n->again ? TL_COST_GEMM_AGAIN : TL_COST_GEMM_FWD,
               &dropped);
    } else if (n->op == TL_OP_MATMUL_BACKWARD) {
      const tl_node* fw = &g->nodes[n->forward_of];
      matmul_shape(g, fw, &m, &nn, &k, &grows);
      if (grows == 1) m /= per;
      if (grows == 2) k /= per;
      /* the node's FLOPs say how many of the two products it runs (the
       * zero-bubble split runs one each) */
      int products = fw->flops > 0 ? (int)lround(n->flops / fw->flops) : 0;
      bool da = n->out[0] >= 0, db = n->out[1] >= 0 || n->out[2] >= 0;
      if (products >= 2 || (products == 1 && da))
        add_gemm(out, n_out, max, m, k, nn, grows, TL_COST_GEMM_BWD, &dropped);
      if (products >= 2 || (products == 1 && !da && db))
        add_gemm(out, n_out, max, k, nn, m,
                 grows == 1   ? 2
                 : grows == 2 ? 1
                              : 0,
                 TL_COST_GEMM_BWD, &dropped);
    }
  }
  if (dropped)
    return TL_ERRF(TL_ERR_INTERNAL, "%d matrix product shapes beyond the cost model's %d", dropped,
                   max);
  return TL_OK;
}

static double gemm_reps(const struct tl_cost_gemm* e, bool whole) {
  if (e->pass == TL_COST_GEMM_FWD) return whole ? 2 : 1;
  if (e->pass == TL_COST_GEMM_AGAIN) return whole ? 0 : 1;
  return 1;
}

double tl_cost_gemm_flops(const struct tl_cost_gemm* g, int n, bool whole) {
  double f = 0;
  for (int i = 0; i < n; i++)
    f += gemm_reps(&g[i], whole) * g[i].count * 2 * g[i].m * g[i].n * g[i].k;
  return f;
}

/* The search prices thousands of plans over a few (shard, micro-batch)
 * pairs: the last answers are kept per thread, keyed by what they depend
 * on (the table's and the products' numbers summed, so that a changed
 * table or product misses). */
struct gemm_memo {
  const struct tl_cost_gemm* g;
  const tl_cluster* c;
  double peak, sum, seconds;
  int n, b;
  bool whole;
};
static _Thread_local struct gemm_memo g_memo[16];
static _Thread_local int g_memo_next;

static double table_sum(const struct tl_gemm_table* t) {
  double s = t->n_m * 1e6 + t->n_n * 1e3 + t->n_k;
  for (int i = 0; i < t->n_m; i++) s += t->m[i];
  for (int i = 0; i < t->n_n; i++) s += 3 * t->n[i];
  for (int i = 0; i < t->n_k; i++) s += 7 * t->k[i];
  for (int i = 0; i < t->n_m * t->n_n * t->n_k; i++) s += (i + 1) * t->eff[i];
  return s;
}

double tl_cost_gemm_seconds(const tl_cluster* c, double peak, const struct tl_cost_gemm* g, int n,
                            int b, bool whole) {
  if (c->gemm.n_m == 0) return tl_cost_gemm_flops(g, n, whole) / (peak * c->efficiency);
  double sum = table_sum(&c->gemm);
  for (int i = 0; i < n; i++)
    sum += (i + 11) *
           (g[i].m + 2 * g[i].n + 3 * g[i].k + 5 * g[i].grows + 7 * g[i].pass + 13 * g[i].count);
  for (int i = 0; i < 16; i++) {
    const struct gemm_memo* x = &g_memo[i];
    if (x->g == g && x->n == n && x->b == b && x->whole == whole && x->c == c && x->peak == peak &&
        x->sum == sum)
      return x->seconds;
  }
  double sec = 0;
  for (int i = 0; i < n; i++) {
    const struct tl_cost_gemm* e = &g[i];
    double reps = gemm_reps(e, whole) * e->count;
    if (reps == 0) continue;
    double m = e->m * (e->grows == 1 ? b : 1), k = e->k * (e->grows == 2 ? b : 1);
    sec += reps * 2 * m * e->n * k / (peak * tl_cluster_gemm_efficiency(c, m, e->n, k));
  }
  sec /= b;
  g_memo[g_memo_next] = (struct gemm_memo){g, c, peak, sum, sec, n, b, whole};
  g_memo_next = (g_memo_next + 1) % 16;
  return sec;
}
