/* cost.c — per-layer costs read off the graph, and the analytic step model
 * built on them (see cost.h for the formulas and their sources). */
#include "planner/cost.h"

#include <math.h>
#include <string.h>

#include "graph/graph.h"
#include "graph/model.h"
#include "graph/op.h"

/* Which forward region node i (forward or backward) belongs to. */
static int forward_index(const tl_graph* g, int i) {
  return i < g->n_forward ? i : g->nodes[i].forward_of;
}

/* Whether tensor parallelism replicates value v (produced by node n): layer
 * norms and residual adds run on every tp rank, and the row-parallel matmuls
 * (attention projection, MLP projection) end in an all-reduce that leaves
 * their (B, T, C) output whole on every rank. */
static bool replicated(const tl_graph* g, const tl_node* n, int v, int n_embd) {
  if (n->op == TL_OP_LAYERNORM || n->op == TL_OP_ADD || n->op == TL_OP_EMBEDDING) return true;
  const tl_value* x = &g->values[v];
  return n->op == TL_OP_MATMUL && x->shape[x->n_dims - 1] == n_embd;
}

tl_status tl_cost_model_build(const struct tl_model_config* mc, int seq, tl_cost_model* out) {
  memset(out, 0, sizeof *out);
  if (mc->kind != TL_MODEL_GPT)
    return TL_ERRF(TL_ERR_UNSUPPORTED,
                   "model.kind: the planner prices GPT models only (an MLP's layers differ in "
                   "shape)");
  if (seq < 1) return TL_ERRF(TL_ERR_INVALID, "sequence length %d; expected >= 1", seq);
  /* 1. the whole model's parameter layout (arithmetic only) */
  struct tl_model_config full = *mc;
  if (full.max_seq_len < seq) full.max_seq_len = seq;
  tl_model m;
  TL_CHECK(tl_model_init(&full, &m));
  out->n_layers = mc->n_layers;
  out->n_heads = mc->n_heads;
  out->n_embd = mc->n_embd;
  out->vocab = m.vocab;
  out->padded_vocab = m.padded_vocab;
  out->seq = seq;
  out->params_total = m.n_params;
  const struct tl_param_tensor* wte = &m.tensors[tl_model_tensor(&m, "wte")];
  const struct tl_param_tensor* wpe = &m.tensors[tl_model_tensor(&m, "wpe")];
  const struct tl_param_tensor* lnfw = &m.tensors[tl_model_tensor(&m, "lnfw")];
  out->params_embed = wte->numel + wpe->numel;
  out->params_head = wte->numel + 2 * lnfw->numel;
  out->params_layer =
      (m.n_params - out->params_embed - 2 * lnfw->numel) / (mc->n_layers > 0 ? mc->n_layers : 1);

  /* 2. one block's graph at micro-batch 1: every block has this shape */
  struct tl_model_config one = full;
  one.n_layers = 1;
  tl_model m1;
  TL_CHECK(tl_model_init(&one, &m1));
  tl_graph* g = NULL;
  struct tl_model_io io;
  TL_CHECK(tl_model_build(&m1, 1, seq, true, &g, &io));
  int lb = io.layer_begin[0], le = io.layer_begin[1];
  for (int i = 0; i < g->n_nodes; i++) {
    const tl_node* n = &g->nodes[i];
    int f = forward_index(g, i);
    double fl = n->flops;
    if (f < lb) {
      out->embed_flops += fl;
    } else if (f < le) {
      out->layer_flops += fl;
      if (i < g->n_forward) out->layer_fwd_flops += fl;
    } else {
      out->head_flops += fl;
      if (i < g->n_forward) out->head_fwd_flops += fl;
    }
    if (i >= g->n_forward) continue;
    /* 3. the activations this forward node writes, which its backward reads */
    for (int k = 0; k < n->n_out; k++) {
      int v = n->out[k];
      if (v < 0 || g->values[v].role != TL_ROLE_ACTIVATION) continue;
      double e = (double)tl_value_numel(&g->values[v]);
      if (f < lb) {
        out->layer_input += e; /* the embedding's output is block 0's input */
      } else if (f < le) {
        if (replicated(g, n, v, mc->n_embd))
          out->layer_act_rep += e;
        else
          out->layer_act_shard += e;
      } else {
        out->head_act += e;
      }
    }
  }
  tl_graph_destroy(g);
  return TL_OK;
}

struct tl_state_bytes tl_cost_state_bytes(tl_dtype dtype) {
  struct tl_state_bytes sb = {4, 4, 8}; /* fp32 Adam: weights, grads, two moments */
  if (dtype == TL_BF16 || dtype == TL_F16)
    sb = (struct tl_state_bytes){2, 2, 12}; /* 16-bit w, g; fp32 master + two moments */
  return sb;
}

double tl_cost_model_state(double params, int zero, int d, struct tl_state_bytes sb) {
  double dd = d < 1 ? 1 : d;
  switch (zero) {
    case 1:
      return params * (sb.w + sb.g + sb.o / dd);
    case 2:
      return params * (sb.w + (sb.g + sb.o) / dd);
    case 3:
      return params * (sb.w + sb.g + sb.o) / dd;
    default:
      return params * (sb.w + sb.g + sb.o);
  }
}

/* Ring all-reduce of `bytes` over n ranks on `link`. */
static double ring_all_reduce(double bytes, int n, const struct tl_link* link) {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) / n * bytes / link->bandwidth + 2.0 * (n - 1) * link->latency;
}

void tl_cost_evaluate(const tl_cost_model* cm, const tl_cluster* c, tl_dtype dtype, tl_plan* p) {
  const int t = p->tp, pp = p->pp, d = p->dp, m = p->n_micro, b = p->micro_batch;
  const double act_bytes = tl_dtype_size(dtype); /* the graph counts elements */
  const int dpn = c->devices_per_node;
  const int L = cm->n_layers, Lmax = (L + pp - 1) / pp; /* the fullest stage's blocks */
  const double bsh = (double)b * cm->layer_input;       /* (b, s, h) elements */

  /* 1. memory: model state of the first and the last stage */
  struct tl_state_bytes sb = tl_cost_state_bytes(dtype);
  double p_first = (double)Lmax * cm->params_layer + cm->params_embed;
  double p_last = (double)Lmax * cm->params_layer + cm->params_head;
  if (pp == 1) p_first = p_last = (double)cm->params_total;
  double st_first = tl_cost_model_state(p_first / t, p->zero, d, sb);
  double st_last = tl_cost_model_state(p_last / t, p->zero, d, sb);

  /* 2. activations: saved per block and micro-batch, and the working set */
  double layer_full = (cm->layer_act_rep + cm->layer_act_shard / t) * b * act_bytes;
  double layer_kept = p->recompute ? bsh * act_bytes : layer_full;
  double head = cm->head_act * b / t * 4.0; /* logits and losses stay fp32 */
  int in_first = p->schedule == TL_SCHEDULE_GPIPE ? m : (pp < m ? pp : m);
  int in_last = p->schedule == TL_SCHEDULE_GPIPE ? m : 1;
  double work = layer_full; /* the block being (re)computed and its gradients */
  double act_first = in_first * Lmax * layer_kept + work + (pp == 1 ? head * (1 + in_first) : 0);
  double act_last = in_last * (Lmax * layer_kept + head) + work + head; /* + dlogits */
  double first = st_first + act_first, last = st_last + act_last;
  p->mem_reserve = c->reserve_bytes;
  if (first >= last) {
    p->mem_state = st_first, p->mem_act = act_first;
  } else {
    p->mem_state = st_last, p->mem_act = act_last;
  }
  p->mem_total = p->mem_state + p->mem_act + p->mem_reserve;
  p->fits = p->mem_total <= c->device_memory_bytes;

  /* 3. time of one micro-batch on the slowest stage */
  double layer_fl = cm->layer_flops + (p->recompute ? cm->layer_fwd_flops : 0);
  double ends = pp == 1 ? cm->embed_flops + cm->head_flops
                        : (cm->embed_flops > cm->head_flops ? cm->embed_flops : cm->head_flops);
  double fl_micro = ((double)Lmax * layer_fl + ends) * b / t;
  double x = cm->layer_fwd_flops * b / t; /* one block's forward on one rank */
  double eff = c->efficiency * x / (x + c->efficiency_half_flops);
  double comp = fl_micro / (tl_cluster_peak(c, dtype) * eff);
  const struct tl_link* tp_link = t <= dpn ? &c->intra : &c->inter;
  int tp_calls = p->recompute ? 6 : 4;
  double tp_comm = Lmax * tp_calls * ring_all_reduce(bsh * act_bytes, t, tp_link);
  double pp_comm = 0;
  if (pp > 1) {
    const struct tl_link* pp_link = d * t >= dpn ? &c->inter : &c->intra;
    pp_comm = 2.0 * (bsh * act_bytes / t / pp_link->bandwidth + pp_link->latency);
  }
  double micro = comp + tp_comm + pp_comm;

  /* 4. the step: m micro-batches, the bubble, then the gradient all-reduce */
  const struct tl_link* dp_link = d * t > dpn ? &c->inter : &c->intra;
  /* gradients are summed and all-reduced in fp32 (Megatron-LM's default for
   * bf16, and trellis's only dtype), whatever the weights' dtype */
  double grads = (p_first > p_last ? p_first : p_last) / t * 4.0;
  double dp = ring_all_reduce(grads, d, dp_link) * (p->zero == 3 ? 1.5 : 1.0);
  p->t_compute = m * comp;
  p->t_tp = m * tp_comm;
  p->t_pp = m * pp_comm;
  p->t_bubble = (pp - 1) * micro;
  p->t_dp = dp;
  p->t_step = p->t_compute + p->t_tp + p->t_pp + p->t_bubble + p->t_dp;

  double devices = (double)d * t * pp;
  double seqs = (double)d * b * m;
  p->tokens_per_s = seqs * cm->seq / p->t_step;
  double exec = seqs * (L * layer_fl + cm->embed_flops + cm->head_flops);
  double model = seqs * (L * cm->layer_flops + cm->embed_flops + cm->head_flops);
  p->flops_per_device = exec / p->t_step / devices;
  p->mfu = model / p->t_step / devices / tl_cluster_peak(c, dtype);
  /* the trainer runs dp x tp x pp meshes and reads neither ZeRO nor recomputation yet */
  p->runnable = p->zero == 0 && !p->recompute;
}

const char* tl_plan_bound(const tl_plan* p) {
  const char* name = "compute";
  double best = p->t_compute;
  if (p->t_bubble > best) name = "bubble", best = p->t_bubble;
  if (p->t_tp > best) name = "tp comm", best = p->t_tp;
  if (p->t_pp > best) name = "pp comm", best = p->t_pp;
  if (p->t_dp > best) name = "dp comm", best = p->t_dp;
  return name;
}
