/* transport.c — whether every stage's list completes when the boundary
 * values travel as a given transport moves them (schedule.h). Untimed: a
 * deadlock is a property of the lists' orders and the transport's rules,
 * not of how long a pass takes, so the walk makes any progress it can
 * until every list is done or nothing can move. */
#include <stdlib.h>
#include <string.h>

#include "pp/schedule.h"

static bool is_exchange(tl_pp_op op) {
  return op == TL_PP_RECV_ACT || op == TL_PP_SEND_ACT || op == TL_PP_RECV_GRAD ||
         op == TL_PP_SEND_GRAD;
}

static bool is_recv(tl_pp_op op) {
  return op == TL_PP_RECV_ACT || op == TL_PP_RECV_GRAD;
}

int tl_pp_exchange_run(const tl_pp_schedule* s, int k) {
  while (k < s->n && is_exchange(s->instr[k].op)) k++;
  return k;
}

/* One message: its receiving virtual stage, micro-batch and payload
 * (activations or gradients) name it on both sides. */
struct msg {
  int q, micro, grad;
  bool send;
  bool done;
  int slot; /* the executor whose memory it leaves from or arrives in */
};

/* A group of messages on a stage's stream, in issue order. */
struct group {
  int first, n; /* into the stage's messages */
  bool has_recv;
  int stream;
  bool done;
};

struct stage {
  struct msg* msgs;
  struct group* groups;
  int n_msgs, n_groups;
  int* cursor; /* per stream: no unfinished group of it before this one */
  int pc;      /* the host's next instruction */
  int blocked; /* the group the host waits for, or -1 */
  int open;    /* the first message of the group being gathered, or -1 */
};

/* The executor micro-batch i of chunk c runs on: the runtime keeps
 * chunk_in_flight[c] of them per chunk and reuses them in turn. */
static int slot_of(const tl_pp_schedule* l, tl_pp_instr in) {
  int n = l->chunk_in_flight[in.chunk] > 0 ? l->chunk_in_flight[in.chunk] : 1;
  return in.chunk * 4096 + in.micro % n;
}

/* Whether the host has to wait for sends of instruction in's executor
 * before running it (pp/runtime.c: a receive or a forward about to write
 * the executor's memory waits for what it is still sending), and whether
 * any such send is not done. */
static bool waits_on_sends(const struct stage* x, const tl_pp_schedule* l, tl_pp_instr in) {
  if (in.op != TL_PP_RECV_ACT && in.op != TL_PP_RECV_GRAD && in.op != TL_PP_FORWARD) return false;
  const int slot = slot_of(l, in);
  for (int i = 0; i < x->n_msgs; i++)
    if (x->msgs[i].send && !x->msgs[i].done && x->msgs[i].slot == slot) return true;
  return false;
}

/* The message instruction `in` of virtual stage q (chunk * p + stage) names. */
static struct msg msg_of(tl_pp_instr in, int q) {
  struct msg m = {0};
  m.micro = in.micro;
  m.send = in.op == TL_PP_SEND_ACT || in.op == TL_PP_SEND_GRAD;
  m.grad = in.op == TL_PP_SEND_GRAD || in.op == TL_PP_RECV_GRAD;
  /* named by its receiver: activations go up, gradients down */
  m.q = m.send ? (m.grad ? q - 1 : q + 1) : q;
  return m;
}

static bool same(const struct msg* a, const struct msg* b) {
  return a->q == b->q && a->micro == b->micro && a->grad == b->grad;
}

/* Whether group g of stage x holds the unfinished counterpart of m: the
 * receive a send needs posted, or the send a receive needs. */
/* The stream a message goes on at its stage: one for all (NCCL's one
 * stream per group), or one per payload, or one per peer, direction and payload. */
static int stream_of(tl_pp_transport t, const struct msg* m, int p) {
  if (t == TL_PP_SENDS_PER_LINK) {
    int peer_q = m->send ? m->q : (m->grad ? m->q + 1 : m->q - 1);
    int peer = ((peer_q % p) + p) % p;
    return (peer * 2 + m->send) * 2 + m->grad;
  }
  return 0;
}

static int active(struct stage* x, int stream) {
  int g = x->cursor[stream];
  while (g < x->n_groups && (x->groups[g].stream != stream || x->groups[g].done)) g++;
  x->cursor[stream] = g;
  return g;
}

static struct msg* counterpart(struct stage* x, int g, const struct msg* m) {
  if (g < 0 || g >= x->n_groups) return NULL;
  const struct group* gr = &x->groups[g];
  for (int i = gr->first; i < gr->first + gr->n; i++) {
    struct msg* o = &x->msgs[i];
    if (!o->done && o->send != m->send && same(o, m)) return o;
  }
  return NULL;
}

tl_status tl_pp_schedule_check_transport(tl_schedule_kind kind, int n_stages, int n_micro,
                                         int n_chunks, const struct tl_pp_costs* costs,
                                         tl_pp_transport transport) {
  if (n_stages < 1 || n_micro < 1 || n_chunks < 1 || n_stages > TL_MAX_STAGES)
    return TL_ERRF(TL_ERR_INVALID, "a schedule of %d stages, %d micro-batches, %d chunks", n_stages,
                   n_micro, n_chunks);
  const int p = n_stages;
  tl_pp_schedule lists[TL_MAX_STAGES];
  struct stage st[TL_MAX_STAGES];
  memset(lists, 0, sizeof lists);
  memset(st, 0, sizeof st);
  tl_status rc = TL_OK;
  for (int s = 0; s < p && rc == TL_OK; s++) {
    rc = tl_pp_schedule_build_costs(kind, p, s, n_micro, n_chunks, costs, &lists[s]);
    if (rc != TL_OK) break;
    st[s].msgs = calloc((size_t)lists[s].n + 1, sizeof(struct msg));
    st[s].groups = calloc((size_t)lists[s].n + 1, sizeof(struct group));
    st[s].blocked = -1;
    st[s].cursor = calloc(4 * (size_t)p, sizeof(int));
    st[s].open = -1;
    if (!st[s].msgs || !st[s].groups || !st[s].cursor)
      rc = TL_ERRF(TL_ERR_NOMEM, "out of memory checking a schedule");
  }
  int remaining = 0; /* instructions not yet run, messages not yet done */
  for (int s = 0; s < p && rc == TL_OK; s++) remaining += lists[s].n;
  /* buffered: every send posted so far, by message */
  for (bool moved = true; rc == TL_OK && remaining > 0 && moved;) {
    moved = false;
    for (int s = 0; s < p; s++) {
      struct stage* x = &st[s];
      const tl_pp_schedule* l = &lists[s];
      /* the host: runs passes, issues exchanges, waits for receives */
      while (x->blocked < 0 && x->pc < l->n) {
        tl_pp_instr in = l->instr[x->pc];
        if (transport != TL_PP_SENDS_BUFFERED && waits_on_sends(x, l, in)) break;
        if (!is_exchange(in.op)) {
          x->pc++, remaining--, moved = true;
          continue;
        }
        int end = transport == TL_PP_SENDS_GROUPED ? tl_pp_exchange_run(l, x->pc) : x->pc + 1;
        if (x->open < 0) x->open = x->n_msgs;
        bool has_recv = false;
        for (int k = x->pc; k < end; k++) {
          if (k > x->pc && transport != TL_PP_SENDS_BUFFERED && waits_on_sends(x, l, l->instr[k])) {
            end = k; /* the run so far goes as a group; this exchange waits */
            break;
          }
          x->msgs[x->n_msgs] = msg_of(l->instr[k], l->instr[k].chunk * p + s);
          x->msgs[x->n_msgs++].slot = slot_of(l, l->instr[k]);
          has_recv |= is_recv(l->instr[k].op);
        }
        x->pc = end;
        moved = true;
        struct group* g = &x->groups[x->n_groups];
        g->first = x->open, g->n = x->n_msgs - x->open, g->has_recv = has_recv;
        g->stream = stream_of(transport, &x->msgs[g->first], p);
        x->open = -1;
        if (g->has_recv) x->blocked = x->n_groups;
        x->n_groups++;
      }
      if (x->pc == l->n && x->open >= 0) { /* the list's last sends */
        struct group* g = &x->groups[x->n_groups++];
        g->first = x->open, g->n = x->n_msgs - x->open, g->has_recv = false;
        x->open = -1;
      }
    }
    /* the transport: match messages */
    for (int s = 0; s < p; s++) {
      struct stage* x = &st[s];
      if (transport == TL_PP_SENDS_BUFFERED) {
        /* a send completes by itself; a receive once its send is posted */
        for (int i = 0; i < x->n_msgs; i++) {
          struct msg* m = &x->msgs[i];
          if (m->done) continue;
          if (m->send) {
            m->done = true, remaining--, moved = true;
            continue;
          }
          /* its sender: the stage holding virtual stage q -/+ 1 */
          int from_q = m->grad ? m->q + 1 : m->q - 1;
          struct stage* y = &st[((from_q % p) + p) % p];
          for (int j = 0; j < y->n_msgs; j++)
            if (y->msgs[j].send && same(&y->msgs[j], m)) {
              m->done = true, remaining--, moved = true;
              break;
            }
        }
      } else {
        /* NCCL: a stream's first unfinished group is the only one active;
         * its messages complete when the peer's active group holds their
         * counterparts (a send needs its receive posted) */
        for (int k = 0; k < 4 * p; k++)
          for (int h; (h = active(x, k)) < x->n_groups;) {
            struct group* g = &x->groups[h];
            for (int i = g->first; i < g->first + g->n; i++) {
              struct msg* m = &x->msgs[i];
              if (m->done) continue;
              int peer_q = m->send ? m->q : (m->grad ? m->q + 1 : m->q - 1);
              struct stage* y = &st[((peer_q % p) + p) % p];
              struct msg* o = counterpart(y,
                                          active(y, stream_of(transport,
                                                              &(struct msg){.q = m->q,
                                                                            .micro = m->micro,
                                                                            .grad = m->grad,
                                                                            .send = !m->send},
                                                              p)),
                                          m);
              if (o) {
                m->done = o->done = true;
                remaining -= 2, moved = true;
              }
            }
            bool all = true;
            for (int i = g->first; i < g->first + g->n; i++) all &= x->msgs[i].done;
            if (!all) break;
            g->done = true;
            moved = true;
          }
      }
      /* the host waits for its group's receives (and, on NCCL's stream,
       * everything issued before them) */
      if (x->blocked >= 0) {
        bool done = transport == TL_PP_SENDS_BUFFERED ? true : x->groups[x->blocked].done;
        const struct group* g = &x->groups[x->blocked];
        for (int i = g->first; i < g->first + g->n; i++)
          if (!x->msgs[i].send) done &= x->msgs[i].done;
        if (done) x->blocked = -1, moved = true;
      }
    }
  }
  if (rc == TL_OK && remaining > 0) {
    /* name a stuck stage: the first whose host waits, and what its
     * stream's first unfinished message is */
    int s = 0;
    while (s < p - 1 && st[s].blocked < 0) s++;
    const struct stage* x = &st[s];
    const struct msg* m = NULL;
    for (int g = 0; g < x->n_groups && !m; g++)
      for (int i = x->groups[g].first; i < x->groups[g].first + x->groups[g].n && !m; i++)
        if (!x->msgs[i].done) m = &x->msgs[i];
    static const char* const how[] = {"buffered", "unbuffered, each exchange alone",
                                      "unbuffered, each run of exchanges grouped",
                                      "unbuffered, a stream per peer, direction and payload"};
    if (m)
      rc = TL_ERRF(TL_ERR_INTERNAL,
                   "%s with %d stages, %d micro-batches and %d chunks deadlocks with sends %s: "
                   "stage %d waits on the %s of micro-batch %d's %s %s virtual stage %d",
                   tl_schedule_kind_name(kind), p, n_micro, n_chunks, how[transport], s,
                   m->send ? "send" : "receive", m->micro, m->grad ? "gradient" : "activation",
                   m->send ? "to" : "for", m->q);
    else
      rc = TL_ERRF(TL_ERR_INTERNAL,
                   "%s with %d stages, %d micro-batches and %d chunks deadlocks with sends %s",
                   tl_schedule_kind_name(kind), p, n_micro, n_chunks, how[transport]);
  }
  for (int s = 0; s < p; s++) {
    tl_pp_schedule_free(&lists[s]);
    free(st[s].msgs), free(st[s].groups), free(st[s].cursor);
  }
  return rc;
}
