/* loader.c — the mesh-independent batch loader (see loader.h). */
#include "launcher/data/loader.h"

tl_status tl_loader_init(tl_loader* l, const tl_token_file* f, int b, int t, int64_t position) {
  int64_t need = (int64_t)b * t + 1;
  if (f->n_tokens < need)
    return TL_ERRF(TL_ERR_CONFIG,
                   "the token file holds %lld tokens; a batch of %d x %d needs at least %lld",
                   (long long)f->n_tokens, b, t, (long long)need);
  if (position < 0 || position + need > f->n_tokens)
    return TL_ERRF(TL_ERR_FORMAT, "data position %lld is outside the token file (%lld tokens)",
                   (long long)position, (long long)f->n_tokens);
  l->file = f;
  l->b = b;
  l->t = t;
  l->position = position;
  return TL_OK;
}

void tl_loader_get(const tl_loader* l, int seq0, int n_seq, int32_t* inputs, int32_t* targets) {
  for (int s = 0; s < n_seq; s++) {
    const int64_t at = l->position + (int64_t)(seq0 + s) * l->t;
    for (int i = 0; i < l->t; i++) {
      inputs[s * l->t + i] = (int32_t)tl_tokens_at(l->file, at + i);
      targets[s * l->t + i] = (int32_t)tl_tokens_at(l->file, at + i + 1);
    }
  }
}

void tl_loader_advance(tl_loader* l) {
  int64_t step = (int64_t)l->b * l->t;
  l->position += step;
  if (l->position + step + 1 > l->file->n_tokens) l->position = 0;
}
