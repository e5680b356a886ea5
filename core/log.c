/* log.c — one formatted write per line so lines from ranks do not interleave. */
#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>

static int g_rank = -1;
static int g_n_ranks = 0;

void tl_log_set_rank(int rank, int n_ranks) {
  g_rank = rank;
  g_n_ranks = n_ranks;
}

int tl_log_enabled(tl_log_level level) {
  const struct tl_env* env = tl_env();
  if (level > env->log_level) return 0;
  if (level <= TL_LOG_WARN) return 1;
  return env->log_rank < 0 || g_rank < 0 || env->log_rank == g_rank;
}

void tl_log(tl_log_level level, const char* fmt, ...) {
  if (!tl_log_enabled(level)) return;
  static const char tags[] = "EWID";
  char line[2048];
  int n;
  if (g_rank >= 0)
    n = snprintf(line, sizeof line, "[trellis %d/%d %c] ", g_rank, g_n_ranks, tags[level]);
  else
    n = snprintf(line, sizeof line, "[trellis %c] ", tags[level]);
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
  va_end(ap);
  size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
  if (len > sizeof line - 2) len = sizeof line - 2;
  line[len++] = '\n';
  fwrite(line, 1, len, stderr);
}
