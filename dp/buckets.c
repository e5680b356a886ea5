/* buckets.c — see buckets.h. */
#include "dp/buckets.h"

#include <stdlib.h>

struct tl_dp_buckets {
  tl_group* group;
  const tl_dp_layout* layout;
  float* grads;
  int64_t n;
  int n_buckets;
  int64_t* begin; /* n_buckets + 1 boundaries */
  tl_group_request** req;
  int launched; /* buckets [0, launched) are in flight or done */
  int early, early_last;
};

tl_status tl_dp_buckets_create(tl_group* dp, const tl_dp_layout* layout, float* grads,
                               double bucket_mb, tl_dp_buckets** out) {
  *out = NULL;
  const int64_t n = layout->n;
  if (bucket_mb <= 0) return TL_ERRF(TL_ERR_CONFIG, "parallel.bucket_mb=%g must be > 0", bucket_mb);
  tl_dp_buckets* b = calloc(1, sizeof *b);
  if (!b) return TL_ERRF(TL_ERR_NOMEM, "out of memory for gradient buckets");
  b->group = dp;
  b->layout = layout;
  b->grads = grads;
  b->n = n;
  int64_t per = (int64_t)(bucket_mb * 1024.0 * 1024.0 / sizeof(float));
  if (per < 1) per = 1;
  b->n_buckets = n > 0 ? (int)((n + per - 1) / per) : 0;
  b->begin = malloc(sizeof(int64_t) * (size_t)(b->n_buckets + 1));
  b->req = calloc((size_t)(b->n_buckets + 1), sizeof(tl_group_request*));
  if (!b->begin || !b->req) {
    tl_dp_buckets_destroy(b);
    return TL_ERRF(TL_ERR_NOMEM, "out of memory for gradient buckets");
  }
  for (int i = 0; i <= b->n_buckets; i++) b->begin[i] = (int64_t)i * per < n ? (int64_t)i * per : n;
  *out = b;
  return TL_OK;
}

void tl_dp_buckets_destroy(tl_dp_buckets* b) {
  if (!b) return;
  free(b->begin);
  free(b->req);
  free(b);
}

static tl_status launch(tl_dp_buckets* b, int i) {
  size_t count = (size_t)(b->begin[i + 1] - b->begin[i]);
  float* p = b->grads + b->begin[i];
  return tl_group_all_reduce(b->group, p, p, count, TL_F32, TL_REDUCE_SUM, &b->req[i]);
}

tl_status tl_dp_buckets_node_done(tl_dp_buckets* b, int forward_node) {
  if (tl_group_size(b->group) == 1) return TL_OK;
  const int64_t upto = tl_dp_layout_final_upto(b->layout, forward_node);
  while (b->launched < b->n_buckets && b->begin[b->launched + 1] <= upto) {
    TL_CHECK(launch(b, b->launched));
    b->launched++;
    b->early++;
  }
  return TL_OK;
}

tl_status tl_dp_buckets_finish(tl_dp_buckets* b) {
  tl_status st = TL_OK;
  if (tl_group_size(b->group) > 1) {
    while (b->launched < b->n_buckets && st == TL_OK) st = launch(b, b->launched++);
    tl_status w = tl_group_wait_all(b->launched, b->req);
    if (st == TL_OK) st = w;
  }
  b->launched = 0;
  b->early_last = b->early;
  b->early = 0;
  return st;
}

int tl_dp_buckets_count(const tl_dp_buckets* b) {
  return b->n_buckets;
}

int tl_dp_buckets_early(const tl_dp_buckets* b) {
  return b->early_last;
}
