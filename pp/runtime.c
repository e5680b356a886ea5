/* runtime.c — a stage's schedule, walked (see runtime.h). */
#include "pp/runtime.h"

#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/timer.h"

#define MAX_SENDS 64

struct slot {
  tl_exec* exec;
  tl_group_request* sends[MAX_SENDS];
  int n_sends;
};

/* One chunk of the model the stage holds (the stage itself unless
 * interleaved): its virtual stage and executors. */
struct chunk {
  const tl_pp_stage* st;
  struct slot* slots; /* into the runtime's */
  int n_slots;
};

struct tl_pp_runtime {
  struct tl_pp_runtime_config c;
  int n_slots; /* created, over all chunks */
  struct slot* slots;
  int n_chunks;
  struct chunk chunks[TL_PP_MAX_CHUNKS];
  int p;                /* the pipeline's stages */
  tl_buffer* transient; /* the slots' shared transient arena (graph/memplan.h) */
  const tl_pp_schedule* sched;
  int pc; /* the next instruction of sched */
  int64_t wait_ns;
  /* the exchanges' links (schedule.h, TL_PP_SENDS_PER_LINK): activations to
   * the next stage and from the previous, gradients to the previous and
   * from the next; each a two-member group, the lower edge stage member 0 */
  tl_group *act_next, *act_prev, *grad_prev, *grad_next;
  tl_pp_span_hook hook;
  void* hook_user;
};

/* Tags: a micro-batch's boundary values for the receiving chunk,
 * activations then gradients. */
static int act_tag(const tl_pp_runtime* r, int micro, int chunk, int k) {
  return (micro * r->n_chunks + chunk) * 2 * TL_PP_MAX_BOUNDARY + k;
}
static int grad_tag(const tl_pp_runtime* r, int micro, int chunk, int k) {
  return act_tag(r, micro, chunk, k) + TL_PP_MAX_BOUNDARY;
}

static tl_status wait_sends(struct slot* s) {
  tl_status st = tl_group_wait_all(s->n_sends, s->sends);
  s->n_sends = 0;
  return st;
}

/* Collective over pp (p members, this one stage s): the two-member groups
 * of the edges k -> k + 1 (mod p) for k < p - 1, and p - 1 -> 0 when
 * `wrap` (interleaved chunks go round): *next the edge from s, *prev the
 * edge into s (NULL where there is none). Member 0 of edge k's group is
 * stage k. A member takes part in one edge per split: the even edges,
 * then the odd ones, then (p odd) the wrap, whose rank 0 is in edge 0. */
static tl_status edges(tl_group* pp, bool wrap, const char* name, tl_group** next,
                       tl_group** prev) {
  const int p = tl_group_size(pp), s = tl_group_rank(pp);
  *next = *prev = NULL;
  for (int batch = 0; batch < 3; batch++) {
    int edge = -1; /* this member's edge in the batch */
    for (int k = 0; k < p && edge < 0; k++) {
      const bool is_wrap = k == p - 1;
      if (is_wrap && !wrap) continue;
      /* which batch edge k goes in */
      const int b = is_wrap && p % 2 == 1 ? 2 : k % 2;
      if (b == batch && (s == k || s == (k + 1) % p)) edge = k;
    }
    tl_group* g = NULL;
    const int key = edge >= 0 && s == edge ? 0 : 1;
    TL_CHECK(tl_group_split(pp, edge >= 0 ? edge : TL_GROUP_UNDEFINED, key, name, &g));
    if (!g) continue;
    if (edge == s)
      *next = g;
    else
      *prev = g;
  }
  return TL_OK;
}

static void links_destroy(tl_pp_runtime* r) {
  tl_group_destroy(r->act_next), tl_group_destroy(r->act_prev);
  tl_group_destroy(r->grad_prev), tl_group_destroy(r->grad_next);
  r->act_next = r->act_prev = r->grad_prev = r->grad_next = NULL;
}

/* Collective over the pipeline group: the links, a group per neighbour
 * and payload. */
static tl_status links_create(tl_pp_runtime* r) {
  if (!r->c.pp || tl_group_size(r->c.pp) < 2) return TL_OK;
  const bool wrap = r->n_chunks > 1;
  TL_CHECK(edges(r->c.pp, wrap, "pp_act", &r->act_next, &r->act_prev));
  /* gradients go back over the same edges, on groups of their own */
  return edges(r->c.pp, wrap, "pp_grad", &r->grad_next, &r->grad_prev);
}

tl_status tl_pp_runtime_create(const struct tl_pp_runtime_config* c, tl_pp_runtime** out) {
  *out = NULL;
  const int n_chunks = c->n_chunks > 0 ? c->n_chunks : 1;
  if (n_chunks > TL_PP_MAX_CHUNKS || (c->n_chunks > 0 && (!c->chunks || !c->chunk_slots)))
    return TL_ERRF(TL_ERR_INVALID, "a pipeline runtime of %d chunks (at most %d, each given)",
                   c->n_chunks, TL_PP_MAX_CHUNKS);
  int total = 0;
  for (int k = 0; k < n_chunks; k++) {
    int n = c->n_chunks > 0 ? c->chunk_slots[k] : c->n_slots;
    if (n < 1) return TL_ERRF(TL_ERR_INVALID, "a pipeline runtime needs at least one executor");
    total += n;
  }
  tl_pp_runtime* r = calloc(1, sizeof *r);
  if (!r) return TL_ERRF(TL_ERR_NOMEM, "out of memory for a pipeline runtime");
  r->c = *c;
  r->n_chunks = n_chunks;
  r->p = c->stage->n_stages / n_chunks;
  r->slots = calloc((size_t)total, sizeof(struct slot));
  tl_status st = r->slots ? TL_OK : TL_ERRF(TL_ERR_NOMEM, "out of memory for executors");
  /* every stage comes here: the links are made on all of them alike */
  tl_status links = links_create(r);
  if (st == TL_OK) st = links;
  for (int k = 0, at = 0; k < n_chunks && st == TL_OK; k++) {
    r->chunks[k].st = c->n_chunks > 0 ? &c->chunks[k] : c->stage;
    r->chunks[k].n_slots = c->n_chunks > 0 ? c->chunk_slots[k] : c->n_slots;
    r->chunks[k].slots = r->slots + at;
    at += r->chunks[k].n_slots;
  }
  /* the slots run one at a time: what lives within a pass needs one arena,
   * the largest any chunk asks for */
  struct tl_exec_options opt = c->exec;
  if (st == TL_OK && !opt.transient) {
    size_t most = 0;
    for (int k = 0; k < n_chunks && st == TL_OK; k++) {
      struct tl_exec_bytes size;
      const tl_pp_stage* x = r->chunks[k].st;
      st = c->n_chunks > 0
               ? tl_exec_size_pieces(c->g, x->node_begin, x->node_end, &opt.pieces, &size)
               : tl_exec_size_pieces(c->g, opt.begin, opt.end, &opt.pieces, &size);
      if (st == TL_OK && size.transient > most) most = size.transient;
    }
    if (st == TL_OK) st = tl_buffer_create(c->be->device, most, &r->transient);
    opt.transient = r->transient;
  }
  for (int k = 0; k < n_chunks && st == TL_OK; k++) {
    struct chunk* ch = &r->chunks[k];
    if (c->n_chunks > 0) opt.begin = ch->st->node_begin, opt.end = ch->st->node_end;
    for (int i = 0; i < ch->n_slots && st == TL_OK; i++) {
      st = tl_exec_create_ex(c->g, c->be, c->params, c->grads, &opt, &ch->slots[i].exec);
      if (st == TL_OK) r->n_slots++;
    }
  }
  if (st != TL_OK) {
    tl_pp_runtime_destroy(r);
    return st;
  }
  *out = r;
  return TL_OK;
}

void tl_pp_runtime_destroy(tl_pp_runtime* r) {
  if (!r) return;
  for (int i = 0; i < r->n_slots; i++) {
    wait_sends(&r->slots[i]);
    tl_exec_destroy(r->slots[i].exec);
  }
  tl_buffer_destroy(r->transient);
  links_destroy(r);
  free(r->slots);
  free(r);
}

int tl_pp_runtime_n_slots(const tl_pp_runtime* r) {
  return r->n_slots;
}

tl_exec* tl_pp_runtime_exec(const tl_pp_runtime* r, int slot) {
  return slot >= 0 && slot < r->n_slots ? r->slots[slot].exec : NULL;
}

tl_group_stats tl_pp_runtime_stats(const tl_pp_runtime* r) {
  tl_group_stats sum;
  memset(&sum, 0, sizeof sum);
  tl_group* links[4] = {r ? r->act_next : NULL, r ? r->act_prev : NULL, r ? r->grad_prev : NULL,
                        r ? r->grad_next : NULL};
  for (int i = 0; i < 4; i++) {
    if (!links[i]) continue;
    tl_group_stats s = tl_group_stats_get(links[i]);
    for (int k = 0; k < TL_GROUP_CALL_COUNT; k++)
      sum.calls[k] += s.calls[k], sum.bytes[k] += s.bytes[k];
    sum.total_calls += s.total_calls, sum.total_bytes += s.total_bytes;
  }
  return sum;
}

int64_t tl_pp_runtime_transient_bytes(const tl_pp_runtime* r) {
  return r->transient ? (int64_t)r->transient->bytes : 0;
}

void tl_pp_runtime_set_span_hook(tl_pp_runtime* r, tl_pp_span_hook hook, void* user) {
  r->hook = hook;
  r->hook_user = user;
}

double tl_pp_runtime_wait_seconds(const tl_pp_runtime* r) {
  return (double)r->wait_ns * 1e-9;
}

tl_status tl_pp_runtime_progress(tl_pp_runtime* r) {
  bool done;
  for (int i = 0; i < r->n_slots; i++)
    for (int k = 0; k < r->slots[i].n_sends; k++)
      TL_CHECK(tl_group_test(r->slots[i].sends[k], &done));
  return TL_OK;
}

typedef enum { RECV = 0, SEND } direction;
typedef enum { ACTIVATIONS = 0, GRADIENTS } payload;

/* Sends or receives the boundary values[0..n) (or their gradients) of
 * micro-batch `micro` to or from virtual stage `peer` (chunk `chunk` of
 * the receiving stage is named in the tags); a value the scatter group
 * holds alike goes as this rank's chunk, gathered on arrival. */
static tl_status exchange(tl_pp_runtime* r, struct slot* s, const int* values, int n, payload what,
                          direction dir, int peer, int micro) {
  const int peer_q = peer;
  const int chunk = dir == RECV ? (peer + (what == ACTIVATIONS ? 1 : -1)) / r->p : peer / r->p;
  /* the link: sender member 0 for activations, 1 for gradients */
  tl_group* link = dir == SEND ? (what == ACTIVATIONS ? r->act_next : r->grad_prev)
                               : (what == ACTIVATIONS ? r->act_prev : r->grad_next);
  int link_peer = (dir == SEND) == (what == ACTIVATIONS) ? 1 : 0;
  if (tl_fault_on(TL_FAULT_PP_ONE_STREAM)) /* a deliberate bug (core/env.h) */
    link = r->c.pp, link_peer = peer % r->p;
  if (!link)
    return TL_ERRF(TL_ERR_INTERNAL, "stage %d has no link to %s %s of virtual stage %d",
                   r->chunks[0].st->stage, dir == SEND ? "send" : "receive",
                   what == ACTIVATIONS ? "activations" : "gradients", peer);
  const tl_graph* g = r->c.g;
  int64_t t0 = tl_time_ns();
  /* what the device computed leaves once it is there: the send waits for
   * it on the device (group.h) */
  for (int k = 0; k < n; k++) {
    int v = what == GRADIENTS ? g->values[values[k]].grad : values[k];
    if (v < 0) continue; /* an activation without gradient */
    /* as stored: a bf16 graph's boundary values travel in 2 bytes */
    const tl_dtype dt = g->values[v].dtype;
    char* p = tl_exec_data(s->exec, v);
    const size_t es = tl_dtype_size(dt);
    size_t count = (size_t)tl_value_numel(&g->values[v]), off = 0, len = count;
    const bool split = r->c.scatter && tl_group_size(r->c.scatter) > 1 && r->c.scatter_value &&
                       r->c.scatter_value[values[k]];
    if (split)
      tl_group_chunk(count, tl_group_size(r->c.scatter), tl_group_rank(r->c.scatter), &off, &len);
    int tag = what == GRADIENTS ? grad_tag(r, micro, chunk, k) : act_tag(r, micro, chunk, k);
    if (dir == SEND) {
      if (s->n_sends == MAX_SENDS) TL_CHECK(wait_sends(s));
      TL_CHECK(tl_group_send(link, p + off * es, len, dt, link_peer, tag, &s->sends[s->n_sends++]));
    } else {
      TL_CHECK(tl_group_recv(link, p + off * es, len, dt, link_peer, tag, NULL));
      if (split) TL_CHECK(tl_group_all_gather(r->c.scatter, p + off * es, p, count, dt, NULL));
    }
  }
  int64_t t1 = tl_time_ns();
  if (dir == RECV) r->wait_ns += t1 - t0;
  if (r->hook) {
    static const char* const names[2][2] = {{"recv_act", "send_act"}, {"recv_grad", "send_grad"}};
    /* this stage's chunk: the receiver's on receiving, else the sender's */
    const int mine = dir == RECV ? chunk : (peer_q + (what == ACTIVATIONS ? -1 : 1)) / r->p;
    r->hook(r->hook_user, names[what][dir], micro, mine, t0, t1);
  }
  return TL_OK;
}

tl_status tl_pp_runtime_start(tl_pp_runtime* r, const tl_pp_schedule* s) {
  const tl_pp_stage* me = r->chunks[0].st;
  if (s->stage != me->stage || s->n_stages * s->n_chunks != me->n_stages ||
      s->n_chunks != r->n_chunks)
    return TL_ERRF(TL_ERR_INVALID,
                   "a schedule of stage %d of %d (%d chunks) for stage %d of %d (%d chunks)",
                   s->stage, s->n_stages, s->n_chunks, me->stage, r->p, r->n_chunks);
  r->sched = s;
  r->pc = 0;
  r->wait_ns = 0;
  return TL_OK;
}

tl_status tl_pp_runtime_next(tl_pp_runtime* r, tl_pp_task* task, bool* done) {
  *done = false;
  while (r->sched && r->pc < r->sched->n) {
    tl_pp_instr in = r->sched->instr[r->pc++];
    struct chunk* ch = &r->chunks[in.chunk];
    const tl_pp_stage* me = ch->st;
    const int q = me->stage; /* the chunk's virtual stage */
    struct slot* s = &ch->slots[in.micro % ch->n_slots];
    switch (in.op) {
      case TL_PP_RECV_ACT:
        TL_CHECK(wait_sends(s)); /* the slot's memory is about to be written */
        TL_CHECK(exchange(r, s, me->recv, me->n_recv, ACTIVATIONS, RECV, q - 1, in.micro));
        break;
      case TL_PP_SEND_ACT:
        TL_CHECK(exchange(r, s, me->send, me->n_send, ACTIVATIONS, SEND, q + 1, in.micro));
        break;
      case TL_PP_RECV_GRAD: {
        struct slot* into = s;
        if (tl_fault_on(TL_FAULT_PP_GRAD_MISROUTED) && ch->n_slots > 1 &&
            (in.micro ^ 1) < r->sched->n_micro) /* a deliberate bug (core/env.h) */
          into = &ch->slots[(in.micro ^ 1) % ch->n_slots];
        /* only this slot's sends are waited for: waiting for `into`'s
         * (its activations, still travelling) would deadlock the fault */
        TL_CHECK(wait_sends(s));
        TL_CHECK(exchange(r, into, me->send, me->n_send, GRADIENTS, RECV, q + 1, in.micro));
        break;
      }
      case TL_PP_SEND_GRAD:
        TL_CHECK(exchange(r, s, me->recv, me->n_recv, GRADIENTS, SEND, q - 1, in.micro));
        break;
      case TL_PP_FORWARD:
        TL_CHECK(wait_sends(s));
        /* fallthrough */
      case TL_PP_BACKWARD:
      case TL_PP_WEIGHT:
        *task = (tl_pp_task){in.op, in.micro, s->exec, in.chunk};
        return TL_OK;
    }
  }
  for (int i = 0; i < r->n_slots; i++) TL_CHECK(wait_sends(&r->slots[i]));
  r->sched = NULL;
  *done = true;
  return TL_OK;
}

tl_status tl_pp_shared_group(tl_group* pp, const tl_pp_stage* s, tl_group** out) {
  *out = NULL;
  if (!pp || tl_group_size(pp) == 1) return TL_OK;
  /* every stage takes part in the split; those sharing nothing stay out */
  return tl_group_split(pp, s->n_shared > 0 ? 0 : TL_GROUP_UNDEFINED, s->stage, "shared", out);
}

tl_status tl_pp_sync_shared(const tl_pp_stage* s, tl_group* shared, const tl_graph* g, void* grads,
                            tl_dtype dtype, const int64_t* offset) {
  if (!shared || tl_fault_on(TL_FAULT_TIED_SYNC_SKIPPED)) return TL_OK;
  for (int i = 0; i < s->n_shared; i++) {
    int v = s->shared[i];
    if (offset[v] < 0) continue; /* not in the buffer: its owner sums it (ZeRO's pieces) */
    char* p = (char*)grads + (size_t)offset[v] * tl_dtype_size(dtype);
    TL_CHECK(tl_group_all_reduce(shared, p, p, (size_t)tl_value_numel(&g->values[v]), dtype,
                                 TL_REDUCE_SUM, NULL));
  }
  return TL_OK;
}
