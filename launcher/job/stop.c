/* stop.c — signals noted, agreed on at step boundaries (see stop.h). */
#include "launcher/job/stop.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t g_signal;
static struct timespec g_first; /* when the first one came */

static void on_signal(int sig) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now); /* async-signal-safe */
  if (!g_signal) {
    g_first = now;
    g_signal = sig;
    return;
  }
  double since = (double)(now.tv_sec - g_first.tv_sec) + (now.tv_nsec - g_first.tv_nsec) * 1e-9;
  if (since < 1.0) return; /* the same request by another road (stop.h) */
  static const char msg[] = "trellis: a second signal: stopping at once, without a checkpoint\n";
  ssize_t ignored = write(2, msg, sizeof msg - 1);
  (void)ignored;
  _exit(128 + sig);
}

tl_status tl_stop_install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART; /* a receive in progress carries on */
  const int sigs[] = {SIGTERM, SIGINT, SIGUSR1};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
    if (sigaction(sigs[i], &sa, NULL) != 0)
      return TL_ERRF(TL_ERR_IO, "cannot handle %s: %s", tl_stop_name(sigs[i]), strerror(errno));
  return TL_OK;
}

int tl_stop_signal(void) {
  return (int)g_signal;
}

tl_status tl_stop_agree(tl_group* world, int* sig) {
  int32_t s = (int32_t)g_signal;
  if (world && tl_group_size(world) > 1)
    TL_CHECK(tl_group_all_reduce(world, &s, &s, 1, TL_I32, TL_REDUCE_MAX, NULL));
  *sig = (int)s;
  return TL_OK;
}

const char* tl_stop_name(int sig) {
  static char buf[32];
  switch (sig) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGUSR1:
      return "SIGUSR1";
    default:
      snprintf(buf, sizeof buf, "signal %d", sig);
      return buf;
  }
}
