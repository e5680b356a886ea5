/* inputs.c — the config's files, checked before a run (see inputs.h). */
#include "launcher/train/inputs.h"

#include <stdio.h>
#include <string.h>

#include "graph/model.h"
#include "launcher/data/tokenizer.h"
#include "launcher/data/tokens.h"
#include "launcher/train/checkpoint.h"
#include "launcher/train/hf.h"
#include "launcher/train/sharded.h"

struct problems {
  char text[6144];
  size_t len;
  int n;
};

/* The message without its "file.c:line: " prefix: the field leads the line. */
/* A checkpoint file's header and size, or a sharded checkpoint's index
 * and every part's table. */
static tl_status resume_check(const char* path, const tl_model* m) {
  if (!tl_sharded_is(path)) return tl_checkpoint_check(path, m);
  tl_sharded_reader* r = NULL;
  TL_CHECK(tl_sharded_open(path, m, &r));
  tl_sharded_close(r);
  return TL_OK;
}

static void add(struct problems* p, const char* field) {
  p->n++;
  int k = snprintf(p->text + p->len, sizeof p->text - p->len, "%s%s: %s", p->len ? "\n" : "", field,
                   tl_last_error_message());
  if (k > 0)
    p->len += (size_t)k < sizeof p->text - p->len ? (size_t)k : sizeof p->text - p->len - 1;
}

/* A token file the loader will read b sequences of t tokens from. */
static tl_status check_tokens(const char* path, int vocab, int b, int t) {
  tl_token_file f;
  TL_CHECK(tl_tokens_open(path, vocab, &f));
  int64_t n = f.n_tokens, need = (int64_t)b * t + 1;
  tl_tokens_close(&f);
  if (n < need)
    return TL_ERRF(TL_ERR_FORMAT,
                   "'%s' holds %lld tokens; a batch of train.batch_size %d x train.seq_len %d "
                   "needs at least %lld",
                   path, (long long)n, b, t, (long long)need);
  return TL_OK;
}

tl_status tl_inputs_check(const struct tl_config* cfg) {
  struct problems p;
  memset(&p, 0, sizeof p);
  const int vocab = cfg->model.vocab_size, b = cfg->train.batch_size, t = cfg->train.seq_len;
  if (!cfg->data.train[0]) {
    TL_ERRF(TL_ERR_CONFIG, "not set: training needs a token file (trellis data TEXT OUT.bin)");
    add(&p, "data.train");
  } else if (check_tokens(cfg->data.train, vocab, b, t) != TL_OK) {
    add(&p, "data.train");
  }
  if (cfg->data.val[0] && check_tokens(cfg->data.val, vocab, b, t) != TL_OK) add(&p, "data.val");
  if (cfg->data.tokenizer[0]) {
    tl_tokenizer tok;
    if (tl_tokenizer_open(cfg->data.tokenizer, &tok) != TL_OK) {
      add(&p, "data.tokenizer");
    } else {
      if (tok.vocab < vocab) {
        TL_ERRF(TL_ERR_FORMAT,
                "'%s' decodes %d tokens; the model's vocabulary has %d (model.vocab_size)",
                cfg->data.tokenizer, tok.vocab, vocab);
        add(&p, "data.tokenizer");
      }
      tl_tokenizer_close(&tok);
    }
  }
  const bool init = cfg->model.init_from[0], resume = cfg->checkpoint.resume[0];
  if (init || resume) {
    tl_model m;
    if (tl_model_init(&cfg->model, &m) != TL_OK) {
      add(&p, "model");
    } else {
      const char* from = cfg->model.init_from;
      if (init && (tl_hf_is_dir(from) ? tl_hf_model_check(from, &m)
                                      : tl_llmc_model_check(from, &m)) != TL_OK)
        add(&p, "model.init_from");
      if (resume && resume_check(cfg->checkpoint.resume, &m) != TL_OK) add(&p, "checkpoint.resume");
    }
  }
  if (p.n == 0) return TL_OK;
  return TL_ERRF(TL_ERR_CONFIG, "%d input file problem%s:\n%s", p.n, p.n == 1 ? "" : "s", p.text);
}
