/* env.c — parse the TL_ENV_MAP knobs once. */
#include "core/env.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static struct tl_env g_env;
static tl_status g_status = TL_OK;
static char g_error[512];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static const char* value_of(const char* name, const char* def) {
  const char* v = getenv(name);
  return (v && *v) ? v : def;
}

static int parse_int(const char* s, long lo, long hi, int* out) {
  char* end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end != '\0' || v < lo || v > hi) return 0;
  *out = (int)v;
  return 1;
}

static void bad(const char* name, const char* value, const char* expected) {
  if (g_status != TL_OK) return; /* keep the first complaint */
  g_status = TL_ERR_CONFIG;
  snprintf(g_error, sizeof g_error, "environment variable %s='%s' is not valid: expected %s", name,
           value, expected);
}

static void load(void) {
  static const char* const levels[] = {"error", "warn", "info", "debug"};
  const char* v = value_of("TRELLIS_LOG_LEVEL", "info");
  g_env.log_level = TL_LOG_INFO;
  int found = 0;
  for (int i = 0; i < 4; i++)
    if (strcmp(v, levels[i]) == 0) g_env.log_level = (tl_log_level)i, found = 1;
  if (!found) bad("TRELLIS_LOG_LEVEL", v, "one of error, warn, info, debug");

  v = value_of("TRELLIS_LOG_RANKS", "0");
  g_env.log_rank = 0;
  if (strcmp(v, "all") == 0)
    g_env.log_rank = -1;
  else if (!parse_int(v, 0, INT_MAX, &g_env.log_rank))
    bad("TRELLIS_LOG_RANKS", v, "a rank number (0, 1, ...) or 'all'"), g_env.log_rank = 0;

  v = value_of("TRELLIS_NUM_THREADS", "0");
  if (!parse_int(v, 0, 4096, &g_env.num_threads))
    bad("TRELLIS_NUM_THREADS", v, "an integer from 0 (automatic) to 4096"), g_env.num_threads = 0;

  v = value_of("TRELLIS_EXPORT_SHARD_MB", "5000");
  if (!parse_int(v, 1, INT_MAX, &g_env.export_shard_mb))
    bad("TRELLIS_EXPORT_SHARD_MB", v, "an integer >= 1 (MB)"), g_env.export_shard_mb = 5000;
  static const char* const waits[] = {"auto", "spin", "yield"};
  v = value_of("TRELLIS_MPI_WAIT", "auto");
  g_env.mpi_wait = TL_MPI_WAIT_AUTO;
  found = 0;
  for (int i = 0; i < 3; i++)
    if (strcmp(v, waits[i]) == 0) g_env.mpi_wait = (tl_mpi_wait)i, found = 1;
  if (!found) bad("TRELLIS_MPI_WAIT", v, "one of auto, spin, yield");

  v = value_of("TRELLIS_EMULATE", "none");
  g_env.emulate_cuda = strcmp(v, "cuda") == 0;
  g_env.emulate_nccl = g_env.emulate_cuda || strcmp(v, "nccl") == 0;
  if (!g_env.emulate_nccl && strcmp(v, "none") != 0)
    bad("TRELLIS_EMULATE", v, "one of none, nccl, cuda");

  v = value_of("TRELLIS_FAULT", "none");
  g_env.fault = TL_FAULT_NONE;
  found = 0;
  for (int i = 0; i < TL_FAULT_COUNT; i++)
    if (strcmp(v, tl_fault_name((tl_fault)i)) == 0) g_env.fault = (tl_fault)i, found = 1;
  if (!found)
    bad("TRELLIS_FAULT", v,
        "one of none, micro_batch_dropped, dp_scaled_twice, tied_sync_skipped, "
        "tp_allreduce_skipped, sp_sync_skipped, pp_grad_misrouted, update_repeated, "
        "nan_at_step_2, rank_stops, zero_shard_offset, zero_gather_skipped, pp_one_stream, "
        "copies_unordered, collectives_unordered");
}

const char* tl_fault_name(tl_fault f) {
  static const char* const names[TL_FAULT_COUNT] = {"none",
                                                    "micro_batch_dropped",
                                                    "dp_scaled_twice",
                                                    "tied_sync_skipped",
                                                    "tp_allreduce_skipped",
                                                    "sp_sync_skipped",
                                                    "pp_grad_misrouted",
                                                    "update_repeated",
                                                    "nan_at_step_2",
                                                    "rank_stops",
                                                    "zero_shard_offset",
                                                    "zero_gather_skipped",
                                                    "pp_one_stream",
                                                    "copies_unordered",
                                                    "collectives_unordered"};
  return f >= 0 && f < TL_FAULT_COUNT ? names[f] : "?";
}

const struct tl_env* tl_env(void) {
  pthread_once(&g_once, load);
  return &g_env;
}

void tl_env_set_num_threads(int n) {
  pthread_once(&g_once, load);
  g_env.num_threads = n < 0 ? 0 : n;
}

tl_status tl_env_status(void) {
  pthread_once(&g_once, load);
  if (g_status != TL_OK) return TL_ERRF(g_status, "%s", g_error);
  return TL_OK;
}

int tl_env_describe(int i, const char** name, const char** def, const char** doc) {
  static const char* const names[] = {
#define TL__ENV_NAME(n, d, doc) #n,
      TL_ENV_MAP(TL__ENV_NAME)
#undef TL__ENV_NAME
  };
  static const char* const defs[] = {
#define TL__ENV_DEF(n, d, doc) d,
      TL_ENV_MAP(TL__ENV_DEF)
#undef TL__ENV_DEF
  };
  static const char* const docs[] = {
#define TL__ENV_DOC(n, d, doc) doc,
      TL_ENV_MAP(TL__ENV_DOC)
#undef TL__ENV_DOC
  };
  if (i < 0 || i >= (int)(sizeof names / sizeof names[0])) return 0;
  *name = names[i];
  *def = defs[i];
  *doc = docs[i];
  return 1;
}
