/* train_report.c — the run described, the sample and --verify's report
 * (train_report.h). */
#include "launcher/cli/train_report.h"

#include <stdio.h>

#include "kernels/cpu/cpu.h"
#include "launcher/data/tokenizer.h"

/* A piece of text as a quoted C-like string: UTF-8 and printable ASCII as
 * they are, the rest escaped. */
static void print_quoted(const char* s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '\n')
      fputs("\\n", stdout);
    else if (c == '"' || c == '\\')
      printf("\\%c", c);
    else if (c < 32 || c == 127)
      printf("\\x%02x", c);
    else
      putchar(c);
  }
}

void tl_train_print_sample(const tl_model* m, const struct tl_config* cfg, const int32_t* tok,
                           int n) {
  printf("sample: ");
  tl_tokenizer dec;
  if (cfg->data.tokenizer[0] && tl_tokenizer_open(cfg->data.tokenizer, &dec) == TL_OK) {
    putchar('"');
    for (int i = 0; i < n; i++) {
      size_t len = 0;
      const char* piece = tl_tokenizer_piece(&dec, tok[i], &len);
      if (piece)
        print_quoted(piece, len);
      else
        printf("<%d>", tok[i]);
    }
    puts("\"");
    tl_tokenizer_close(&dec);
    return;
  }
  if (m->vocab == 256) {
    putchar('"');
    for (int i = 0; i < n; i++) {
      int c = tok[i];
      if (c == '\n')
        fputs("\\n", stdout);
      else if (c == '"' || c == '\\')
        printf("\\%c", c);
      else
        putchar(c >= 32 && c < 127 ? c : '?');
    }
    puts("\"");
  } else {
    for (int i = 0; i < n; i++) printf("%s%d", i ? " " : "", tok[i]);
    putchar('\n');
  }
}

void tl_train_describe(const struct tl_config* c, const tl_model* m, long steps,
                       const char* tensorboard, const struct tl_train_price* price) {
  const struct tl_model_config* mc = &m->cfg;
  if (mc->kind == TL_MODEL_GPT)
    printf(
        "model: gpt, %d layers, %d heads, %d channels, vocabulary %d (padded %d), %.2fM "
        "parameters\n",
        mc->n_layers, mc->n_heads, mc->n_embd, m->vocab, m->padded_vocab, m->n_params / 1e6);
  else if (mc->kind == TL_MODEL_LLAMA)
    printf(
        "model: llama, %d layers, %d heads (%d key/value), %d channels, MLP %d, vocabulary %d "
        "(padded %d), %s head, %.2fM parameters\n",
        mc->n_layers, mc->n_heads, tl_config_kv_heads(mc), mc->n_embd, tl_config_ffn_hidden(mc),
        m->vocab, m->padded_vocab, mc->tie_embeddings ? "tied" : "untied", m->n_params / 1e6);
  else
    printf("model: mlp, %d layers, vocabulary %d, %.2fM parameters\n", mc->n_mlp_layers, m->vocab,
           m->n_params / 1e6);
  int ranks = (int)tl_config_ranks(&c->mesh);
  char cp[32] = "";
  if (c->mesh.cp > 1) snprintf(cp, sizeof cp, ", cp %d", c->mesh.cp);
  printf(
      "run: %d step%s of %d x %d tokens; %d rank%s (dp %d, tp %d%s, pp %d%s), %s, %d "
      "micro-batch%s per replica\n",
      c->train.steps, c->train.steps == 1 ? "" : "s", c->train.batch_size, c->train.seq_len, ranks,
      ranks == 1 ? "" : "s", c->mesh.dp, c->mesh.tp,
      c->mesh.tp > 1 && c->parallel.sequence_parallel ? " sequence-parallel" : "", c->mesh.pp, cp,
      tl_schedule_kind_name(c->schedule.kind), c->schedule.micro_batches,
      c->schedule.micro_batches == 1 ? "" : "es");
  if (c->train.skip_nonfinite)
    printf(
        "non-finite: a step whose loss or gradient norm is not finite is skipped, nothing "
        "updated (train.skip_nonfinite)\n");
  if (steps > 0 && steps < c->train.steps)
    printf("stop: after step %ld (--steps), on the learning-rate schedule of train.steps = %d\n",
           steps, c->train.steps);
  printf("device: %s, %d CPU thread%s per rank; lr %g\n",
         c->device.type == TL_DEVICE_CUDA ? "cuda" : "cpu", tl_cpu_num_threads(),
         tl_cpu_num_threads() == 1 ? "" : "s", c->train.lr);
  if (tensorboard) printf("tensorboard: %s\n", tensorboard);
  if (price) tl_train_price_print(price, stdout);
  fflush(stdout);
}

static const char* tensor_name(const tl_model* m, int k) {
  return k >= 0 ? m->tensors[k].name : "-";
}

int tl_train_print_verify(const struct tl_verify_report* v, const tl_model* m,
                          const struct tl_config* cfg) {
  if (v->steps == 0) {
    printf("verify: no step was taken (train.steps = %d already done): nothing to compare\n",
           cfg->train.steps);
    return v->equal ? 0 : 1;
  }
  printf(
      "verify: %d step%s checked against the same config on one device, each step started "
      "from the mesh's state (docs/equality.md)\n",
      v->steps, v->steps == 1 ? "" : "s");
  printf("verify:   start       %s\n",
         v->start.value == 0 ? "parameters equal bit for bit" : "parameters DIFFER");
  printf("verify:   loss        %.3g relative, worst at step %d (allowed %g)\n", v->loss.value,
         v->loss.step, v->loss_tol);
  printf("verify:   grad norm   %.3g relative, worst at step %d (allowed %g)\n", v->norm.value,
         v->norm.step, v->norm_tol);
  char biases[96] = "";
  if (v->n_key_bias > 0) /* a GPT's: their exact gradient is zero (graph/model.h) */
    snprintf(biases, sizeof biases, "; %lld attention key biases, exactly zero, left out",
             (long long)v->n_key_bias);
  printf(
      "verify:   gradients   %.3g of the tensor's largest, worst %s element %lld at step %d "
      "(allowed %g%s)\n",
      v->grad.value, tensor_name(m, v->grad.tensor),
      (long long)(v->grad.element >= 0 ? v->grad.element - m->tensors[v->grad.tensor].offset : -1),
      v->grad.step, v->grad_tol, biases);
  printf(
      "verify:   AdamW       parameters %.3g lr from AdamW replayed on the mesh's state and "
      "gradients (%.3g of the bound 1e-3 lr + 2 roundings), moments %.3g (allowed %g)\n",
      v->update.value, v->update_bound.value, v->moment.value, TL_VERIFY_MOMENT_TOL);
  printf("verify:   copies      %s\n",
         v->copies_agree ? "replicas, the tied embedding and whole tensor-parallel copies hold the "
                           "same bits"
                         : v->copies_what);
  if (v->deterministic) {
    if (v->bits_differ == 0)
      printf(
          "verify:   bits        parallel.deterministic: every parameter, moment and gradient "
          "equal to the single-device run's (%d micro-batches of the same size) bit for bit\n",
          cfg->schedule.micro_batches * cfg->mesh.dp);
    else
      printf("verify:   bits        parallel.deterministic: %lld elements differ in their bits\n",
             (long long)v->bits_differ);
  }
  if (v->flips && v->equal)
    printf(
        "verify:   note        %lld element%s took a step more than lr/2 from one device's; "
        "the largest gradient among them is %.3g of its tensor's largest: rounding noise, "
        "which AdamW (eps %g) turns into a whole step\n",
        (long long)v->flips, v->flips == 1 ? "" : "s", v->flip_grad, cfg->train.eps);
  else if (v->flips)
    printf("verify:   note        %lld element%s took a step more than lr/2 from one device's\n",
           (long long)v->flips, v->flips == 1 ? "" : "s");
  if (v->equal) {
    printf("verify: EQUAL to the single-device run\n");
    return 0;
  }
  printf("verify: DIFFERENT from the single-device run: %s\n", v->failure);
  return 1;
}
