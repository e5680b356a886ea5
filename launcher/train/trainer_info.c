/* trainer_info.c — what a trainer tells about itself: its config, model,
 * stage, the bytes it holds, the costs its schedule was built with, and
 * per-op profiling. */
#include "core/alloc.h"
#include "launcher/train/trainer_impl.h"

int64_t tl_trainer_steps_done(const tl_trainer* t) {
  return t->step;
}
const struct tl_config* tl_trainer_config(const tl_trainer* t) {
  return &t->cfg;
}
int tl_trainer_world_rank(const tl_trainer* t) {
  return t->world_rank;
}
const tl_model* tl_trainer_model(const tl_trainer* t) {
  return &t->model;
}
int32_t tl_trainer_first_token(const tl_trainer* t) {
  const tl_token_file* f = t->val_file.tokens ? &t->val_file : &t->train_file;
  return f->n_tokens > 0 ? (int32_t)tl_tokens_at(f, 0) : 0;
}

double tl_trainer_step_flops(const tl_trainer* t) {
  double f = 0;
  for (int c = 0; c < t->n_chunks; c++) f += t->chunks[c].flops;
  return f * t->cfg.schedule.micro_batches;
}

int64_t tl_trainer_peak_bytes(const tl_trainer* t) {
  return tl_alloc_stats_get(t->be->device).peak_bytes;
}

int64_t tl_trainer_live_bytes(const tl_trainer* t) {
  return tl_alloc_stats_get(t->be->device).live_bytes;
}

tl_group_stats tl_trainer_pp_stats(const tl_trainer* t) {
  return tl_pp_runtime_stats(t->rt);
}

struct tl_pp_costs tl_trainer_schedule_costs(const tl_trainer* t) {
  return t->costs;
}

int64_t tl_trainer_param_bytes(const tl_trainer* t) {
  return t->param_bytes;
}

int64_t tl_trainer_state_bytes(const tl_trainer* t) {
  return t->state_bytes;
}

int64_t tl_trainer_activation_bytes(const tl_trainer* t) {
  /* each slot's own arena, and the transient one they share */
  int64_t b = 0;
  for (int i = 0; i < tl_pp_runtime_n_slots(t->rt); i++)
    b += (int64_t)tl_exec_plan(tl_pp_runtime_exec(t->rt, i))->arena_bytes;
  return b + tl_pp_runtime_transient_bytes(t->rt);
}

void tl_trainer_stage(const tl_trainer* t, int* stage, int* n_stages, int* layer_begin,
                      int* layer_end) {
  *stage = t->pp_rank;
  *n_stages = t->pp_size;
  *layer_begin = t->me->layer_begin;
  *layer_end = t->me->layer_end;
}

void tl_trainer_profile(tl_trainer* t, int on) {
  for (int i = 0; i < tl_pp_runtime_n_slots(t->rt); i++)
    tl_exec_profile(tl_pp_runtime_exec(t->rt, i), on);
}

double tl_trainer_op_seconds(const tl_trainer* t, int op) {
  double s = 0;
  for (int i = 0; i < tl_pp_runtime_n_slots(t->rt); i++)
    s += tl_exec_op_seconds(tl_pp_runtime_exec(t->rt, i), op);
  return s;
}
