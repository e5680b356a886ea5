/* sample.c — top-k sampling with an inference graph (batch 1) on the CPU. */
#include "launcher/train/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "graph/exec.h"

tl_status tl_sample(const tl_model* m, int seq_len, const float* params, const int32_t* prompt,
                    int n_prompt, int n, int top_k, uint64_t seed, int32_t* out) {
  int T = seq_len, vp = m->padded_vocab, v = m->vocab;
  if (n_prompt < 1) return TL_ERRF(TL_ERR_INVALID, "sampling needs a prompt of at least one token");
  tl_graph* g = NULL;
  struct tl_model_io io;
  tl_backend* be = NULL;
  tl_buffer* pb = NULL;
  tl_exec* x = NULL;
  int total = n_prompt + n;
  int32_t* seq = malloc(sizeof(int32_t) * (size_t)total);
  float* logits = malloc(sizeof(float) * (size_t)T * vp);
  int32_t* window = malloc(sizeof(int32_t) * (size_t)T);
  tl_status st =
      (seq && logits && window) ? TL_OK : TL_ERRF(TL_ERR_NOMEM, "out of memory sampling");
  if (st == TL_OK) st = tl_model_build(m, 1, T, false, &g, &io);
  if (st == TL_OK) st = tl_backend_create(tl_cpu(), &be);
  if (st == TL_OK) st = tl_buffer_create(tl_cpu(), sizeof(float) * (size_t)m->n_params, &pb);
  if (st == TL_OK) memcpy(pb->data, params, sizeof(float) * (size_t)m->n_params);
  if (st == TL_OK) st = tl_exec_create(g, be, pb, NULL, &x);
  if (st == TL_OK) memcpy(seq, prompt, sizeof(int32_t) * (size_t)n_prompt);
  for (int len = n_prompt; st == TL_OK && len < total; len++) {
    /* the last T tokens, left-aligned; positions past the end are ignored (causal) */
    int start = len > T ? len - T : 0, used = len - start;
    for (int i = 0; i < T; i++) window[i] = i < used ? seq[start + i] : 0;
    st = tl_exec_set_input(x, io.tokens, window, sizeof(int32_t) * (size_t)T);
    if (st == TL_OK) st = tl_exec_forward(x, 0, g->n_forward);
    if (st == TL_OK) st = tl_exec_get_f32(x, io.logits, logits, (int64_t)T * vp);
    if (st != TL_OK) break;
    const float* row = logits + (size_t)(used - 1) * vp;
    /* top-k: the k largest logits, then a draw from their softmax */
    int k = top_k < 1 ? 1 : (top_k > v ? v : top_k);
    if (k > 64) k = 64;
    int best[64] = {0};
    for (int j = 0; j < k; j++) best[j] = -1;
    for (int c = 0; c < v; c++) {
      int pos = k;
      while (pos > 0 && (best[pos - 1] < 0 || row[c] > row[best[pos - 1]])) pos--;
      if (pos < k) {
        memmove(best + pos + 1, best + pos, sizeof(int) * (size_t)(k - pos - 1));
        best[pos] = c;
      }
    }
    int pick = best[0];
    if (k > 1) {
      double w[64], sum = 0;
      for (int j = 0; j < k; j++) sum += (w[j] = exp((double)row[best[j]] - row[best[0]]));
      float u;
      tl_rng_uniform(seed, 0x5a4d, (uint64_t)len, 1, 0.0f, 1.0f, &u);
      double acc = 0, target = u * sum;
      for (int j = 0; j < k; j++)
        if ((acc += w[j]) >= target) {
          pick = best[j];
          break;
        }
    }
    seq[len] = pick;
  }
  if (st == TL_OK) memcpy(out, seq + n_prompt, sizeof(int32_t) * (size_t)n);
  tl_exec_destroy(x);
  tl_buffer_destroy(pb);
  tl_backend_destroy(be);
  tl_graph_destroy(g);
  free(seq);
  free(logits);
  free(window);
  return st;
}
