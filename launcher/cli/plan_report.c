/* plan_report.c — what `trellis plan` prints of a search (plan_report.h). */
#include "launcher/cli/plan_report.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

const char* tl_plan_recompute_name(tl_recompute r) {
  return r == TL_RECOMPUTE_FULL ? "full" : r == TL_RECOMPUTE_SELECTIVE ? "selective" : "none";
}

/* The table's short name: "zb", "int:2" (interleaved, 2 chunks a rank). */
static const char* schedule_name(const tl_plan* p, char* buf, size_t n) {
  if (tl_plan_chunks(p) > 1) {
    snprintf(buf, n, "int:%d", tl_plan_chunks(p));
    return buf;
  }
  return p->schedule == TL_SCHEDULE_ZERO_BUBBLE ? "zb" : tl_schedule_kind_name(p->schedule);
}

static json_t* plan_json(const tl_plan* p) {
  return json_pack(
      "{s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:i, s:s, s:b, s:f, s:f, s:f, s:i, s:f, s:f, s:f, "
      "s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:s, s:b, s:i}",
      "dp", p->dp, "tp", p->tp, "pp", p->pp, "cp", tl_plan_cp(p), "micro_batch", p->micro_batch,
      "micro_batches", p->n_micro, "schedule", tl_schedule_kind_name(p->schedule), "zero", p->zero,
      "recompute", tl_plan_recompute_name(p->recompute), "sequence_parallel", p->sequence_parallel,
      "memory_bytes", p->mem_total, "memory_state_bytes", p->mem_state, "memory_activation_bytes",
      p->mem_act, "memory_stage", p->mem_stage, "step_s", p->t_step, "compute_s", p->t_compute,
      "bubble_s", p->t_bubble, "tp_comm_s", p->t_tp, "cp_comm_s", p->t_cp, "cp_comm_carried_s",
      p->c_cp, "pp_comm_s", p->t_pp, "pp_comm_tied_s", p->t_tied, "dp_comm_s", p->t_dp,
      "dp_comm_carried_s", p->c_dp, "optimizer_s", p->t_opt, "tokens_per_s", p->tokens_per_s,
      "tflops_per_device", p->flops_per_device / 1e12, "mfu", p->mfu, "bound", tl_plan_bound(p),
      "runnable", p->runnable, "virtual_stages", tl_plan_chunks(p));
}

/* plan_json with what a plan on part of the cluster adds: its devices */
static json_t* plan_json_fewer(const tl_plan* p) {
  json_t* j = plan_json(p);
  if (j) json_object_set_new(j, "devices", json_integer((json_int_t)tl_plan_devices(p)));
  return j;
}

int tl_plan_print_json(const tl_search_result* r, const tl_search_result* fewer,
                       const struct tl_plan_more* more, const char* why, int top,
                       const tl_cluster* c, double secs) {
  json_t* root = json_object();
  json_t* plans = json_array();
  for (int i = 0; i < r->n_plans && i < top; i++)
    json_array_append_new(plans, plan_json(&r->plans[i]));
  if (why[0]) json_object_set_new(root, "why_none_fits", json_string(why));
  if (fewer) {
    json_t* f = json_array();
    for (int i = 0; i < fewer->n_plans && i < top; i++)
      json_array_append_new(f, plan_json_fewer(&fewer->plans[i]));
    json_object_set_new(root, "fewer_devices", f);
    json_object_set_new(root, "fewer_device_counts_searched", json_integer(fewer->n_counts));
  }
  if (more) {
    /* {"nodes": the fewest with a plan (0: none), "devices", "plans",
     * "node_counts_searched", "nodes_searched_up_to"} */
    json_t* m = json_object();
    json_t* mp = json_array();
    for (int i = 0; i < more->r.n_plans && i < top; i++)
      json_array_append_new(mp, plan_json_fewer(&more->r.plans[i]));
    json_object_set_new(m, "nodes", json_integer(more->nodes));
    json_object_set_new(m, "devices", json_integer((json_int_t)more->nodes * c->devices_per_node));
    json_object_set_new(m, "node_counts_searched", json_integer(more->r.n_counts));
    json_object_set_new(m, "nodes_searched_up_to", json_integer(more->searched_to));
    json_object_set_new(m, "plans", mp);
    json_object_set_new(root, "more_nodes", m);
  }
  json_t* rej = json_object();
  for (int k = 0; k < TL_REJECT_COUNT; k++)
    json_object_set_new(rej, tl_reject_name((tl_reject_reason)k), json_integer(r->rejected[k]));
  json_object_set_new(root, "cluster", json_string(c->name));
  json_object_set_new(root, "devices", json_integer(tl_cluster_devices(c)));
  json_object_set_new(root, "evaluated", json_integer(r->n_evaluated));
  json_object_set_new(root, "fitting", json_integer(r->n_plans));
  json_object_set_new(root, "search_seconds", json_real(secs));
  json_object_set_new(root, "plans", plans);
  json_object_set_new(root, "rejected", rej);
  char* text = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
  json_decref(root);
  if (!text) return 0;
  printf("%s\n", text);
  free(text);
  return 1;
}

/* The table's header and rows; with `devices` a first column of each
 * plan's device count (plans on part of the cluster). */
static void print_header(bool devices) {
  if (devices) printf("%7s ", "devices");
  printf("%4s %5s %3s %4s %3s %5s %5s %6s %4s %3s %3s %9s %10s %11s %9s %6s  %-9s\n", "rank", "dp",
         "tp", "pp", "cp", "mb", "n_mb", "sched", "zero", "rc", "sp", "mem GB", "step s",
         "tokens/s", "hwTFLOP/s", "MFU", "bound");
}

static void print_row(const tl_plan* p, int rank, bool devices) {
  char name[16];
  if (devices) printf("%7d ", (int)tl_plan_devices(p));
  printf("%4d %5d %3d %4d %3d %5d %5d %6s %4d %3s %3s %9.2f %10.4g %11.4g %9.4g %5.1f%%  %-9s%s\n",
         rank, p->dp, p->tp, p->pp, tl_plan_cp(p), p->micro_batch, p->n_micro,
         schedule_name(p, name, sizeof name), p->zero,
         p->recompute == TL_RECOMPUTE_SELECTIVE ? "sel"
         : p->recompute                         ? "full"
                                                : "-",
         p->tp == 1             ? "-"
         : p->sequence_parallel ? "on"
                                : "off",
         p->mem_total / 1e9, p->t_step, p->tokens_per_s, p->flops_per_device / 1e12, 100 * p->mfu,
         tl_plan_bound(p), p->runnable ? "" : "  (trellis train: not yet)");
}

static const char* const k_flops_note =
    "(hwTFLOP/s: FLOPs a device executes per second, recomputation included; MFU: the model's "
    "FLOPs, without recomputation, over the peak)\n";

void tl_plan_print_fewer(const tl_search_result* f, int top, const tl_cluster* c, int max_counts) {
  printf(
      "\nsearched fewer devices: %d device counts below %d (%lld plans priced), %d with a "
      "plan (the %d largest counts with one, at most)\n",
      f->n_counts, tl_cluster_devices(c), (long long)f->n_evaluated, f->n_counts_fitting,
      max_counts);
  if (!f->n_plans) {
    printf("none fits on fewer devices either\n");
    return;
  }
  print_header(true);
  for (int i = 0; i < f->n_plans && i < top; i++) print_row(&f->plans[i], i + 1, true);
  int best = 0;
  for (int i = 1; i < f->n_plans; i++) {
    const tl_plan *p = &f->plans[i], *b = &f->plans[best];
    if (p->tokens_per_s / tl_plan_devices(p) > b->tokens_per_s / tl_plan_devices(b)) best = i;
  }
  const tl_plan* b = &f->plans[best];
  printf("most tokens/s per device (%.4g on each of %d):\n", b->tokens_per_s / tl_plan_devices(b),
         (int)tl_plan_devices(b));
  print_row(b, best + 1, true);
  printf("%s", k_flops_note);
}

void tl_plan_print_more(const struct tl_plan_more* m, int top, const tl_cluster* c) {
  char spec[96] = "";
  if (c->nodes != m->spec_nodes)
    snprintf(spec, sizeof spec, "; --nodes %d, the spec lists %d", c->nodes, m->spec_nodes);
  else
    snprintf(spec, sizeof spec, "; the spec lists %d", m->spec_nodes);
  if (!m->searched_to) {
    printf("\nsearched more nodes: no mesh the rules allow fills more than %d nodes of %s%s\n",
           c->nodes, c->name, spec);
    return;
  }
  if (!m->nodes) {
    printf(
        "\nsearched more nodes: no plan fits on %d to %d nodes of %s either (%d node count%s "
        "a mesh fills, %lld plans priced%s)\n",
        c->nodes + 1, m->searched_to, c->name, m->r.n_counts, m->r.n_counts == 1 ? "" : "s",
        (long long)m->r.n_evaluated, spec);
    return;
  }
  printf(
      "\nsearched more nodes: the fewest %s nodes above %d with a plan that fits: %d (%d "
      "devices%s; %d node count%s searched, %lld plans priced):\n",
      c->name, c->nodes, m->nodes, m->nodes * c->devices_per_node, spec, m->r.n_counts,
      m->r.n_counts == 1 ? "" : "s", (long long)m->r.n_evaluated);
  print_header(true);
  for (int i = 0; i < m->r.n_plans && i < top; i++) print_row(&m->r.plans[i], i + 1, true);
  printf("(`--nodes %d` plans them, and --out then writes the best)\n", m->nodes);
  printf("%s", k_flops_note);
}

void tl_plan_print_table(const tl_search_result* r, int top, const tl_cluster* c,
                         const tl_cost_model* cm, int batch, tl_dtype dtype, double secs) {
  if (cm->kind == TL_MODEL_MLP)
    printf("model: mlp, %d layers, %d inputs, %d classes; %.3g parameters\n", cm->n_layers,
           cm->n_embd, cm->vocab, (double)cm->params_total);
  else if (cm->kind == TL_MODEL_LLAMA)
    printf(
        "model: llama, %d layers, %d heads (%d key/value), %d channels, MLP %d, vocabulary %d; "
        "%.4g parameters\n",
        cm->n_layers, cm->n_heads, cm->n_kv_heads, cm->n_embd, cm->ffn_hidden, cm->vocab,
        (double)cm->params_total);
  else
    printf("model: gpt, %d layers, %d heads, %d channels, vocabulary %d; %.3g parameters\n",
           cm->n_layers, cm->n_heads, cm->n_embd, cm->vocab, (double)cm->params_total);
  printf("cluster %s: %d nodes x %d devices, %.1f GB each, %.4g TFLOP/s %s peak\n", c->name,
         c->nodes, c->devices_per_node, c->device_memory_bytes / 1e9,
         tl_cluster_peak(c, dtype) / 1e12, dtype == TL_BF16 ? "bf16" : "fp32");
  if (dtype == TL_BF16)
    printf("(bf16 mixed precision: train.precision \"bf16\"; --dtype fp32 predicts fp32 runs)\n");
  if (c->cores_per_node > 0 && c->cores_per_node < c->rated_ranks_per_node) {
    char measured[128] = "";
    if (c->n_shared_speed > 0)
      snprintf(measured, sizeof measured,
               ", one computing alone x%.2f as fast, as measured (the cores' share: x%.2f)",
               c->shared_speed[0], (double)c->rated_ranks_per_node / c->cores_per_node);
    printf(
        "(the %d ranks of a node share its %d cores: the spec's rates are each rank's while all "
        "compute; a rank idle in a pipeline's bubble lends its share to the busy ones%s)\n",
        c->rated_ranks_per_node, c->cores_per_node, measured);
  }
  printf("global batch %d x %d tokens; %lld plans priced in %.1f ms, %d fit\n\n", batch, cm->seq,
         (long long)r->n_evaluated, secs * 1e3, r->n_plans);
  if (r->n_plans > 0) print_header(false);
  for (int i = 0; i < r->n_plans && i < top; i++) print_row(&r->plans[i], i + 1, false);
  if (r->n_plans > 0) printf("%s", k_flops_note);
  if (r->n_plans > 0) {
    const tl_plan* w = &r->plans[0];
    double t = w->t_step;
    printf(
        "\nthe winner's step: compute %.0f%%, bubble %.0f%%, tp comm %.0f%%, cp comm %.0f%%, "
        "pp comm %.0f%%, dp comm %.0f%%, optimizer %.0f%% -> bound by %s\n",
        100 * w->t_compute / t, 100 * w->t_bubble / t, 100 * w->t_tp / t, 100 * w->t_cp / t,
        100 * w->t_pp / t, 100 * w->t_dp / t, 100 * w->t_opt / t, tl_plan_bound(w));
    if (tl_plan_cp(w) > 1)
      printf(
          "context-parallel ring: %.3g s a step on the link, %.3g s of it hidden behind the "
          "attention, %.3g s shown\n",
          w->c_cp, fmax(0, w->c_cp - w->t_cp), w->t_cp);
    if (w->t_tied > 0)
      printf(
          "pipeline communication: %.3g s a step, %.3g s of it the tied embedding's gradient "
          "summed over the first and last stages (once a step, exposed)\n",
          w->t_pp, w->t_tied);
    if (tl_plan_data(w) > 1)
      printf(
          "data-parallel communication: %.3g s a step on the link, %.3g s of it hidden behind "
          "compute, %.3g s shown\n",
          w->c_dp, fmax(0, w->c_dp - w->t_dp), w->t_dp);
    double usable = c->device_memory_bytes;
    char alloc[96] = "";
    if (c->allocator_overhead > 0)
      snprintf(alloc, sizeof alloc, ": %.2f runtime + the allocator's %.0f%% of the tensors",
               c->reserve_bytes / 1e9, 100 * c->allocator_overhead);
    printf(
        "memory: %.2f GB of %.2f GB per device (%.0f%%; state %.2f, activations %.2f, reserve "
        "%.2f%s)%s\n",
        w->mem_total / 1e9, usable / 1e9, 100 * w->mem_total / usable, w->mem_state / 1e9,
        w->mem_act / 1e9, w->mem_reserve / 1e9, alloc,
        w->mem_total > 0.9 * usable ? " -> also bound by memory" : "");
  }
  printf("\nrejected:");
  for (int k = 0; k < TL_REJECT_COUNT; k++)
    printf(" %s %lld%s", tl_reject_name((tl_reject_reason)k), (long long)r->rejected[k],
           k + 1 < TL_REJECT_COUNT ? "," : "\n");
  printf(
      "(tp_*, pp_layers and batch count mesh shapes; sp_tokens micro-batch sizes; trainer and "
      "memory count plans)\n");
}
