/* watchdog.c — a thread that ends a process stuck waiting (see watchdog.h). */
#include "core/watchdog.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/timer.h"

/* The operation waited in: written by the process's one communicating
 * thread, read by the watchdog; `since` 0 means none. The names are copied
 * so that a group destroyed meanwhile leaves nothing dangling. */
static _Atomic int64_t g_since;
static char g_group[32], g_op[32];
static _Atomic size_t g_bytes;
static _Atomic int64_t g_timeout_ns;
static int g_rank;
static atomic_int g_notify_pid, g_notify_sig; /* tl_watchdog_notify */
static char g_host[64] = "?";                 /* this process's host, for the message */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void* watch(void* arg) {
  (void)arg;
  for (;;) {
    struct timespec nap = {0, 100 * 1000 * 1000};
    nanosleep(&nap, NULL);
    int64_t since = atomic_load(&g_since), timeout = atomic_load(&g_timeout_ns);
    if (!since || timeout <= 0) continue;
    int64_t waited = tl_time_ns() - since;
    /* ranks that wait on each other (a deadlock) all time out together:
     * the lower rank speaks first and ends the job, once */
    const int64_t stagger = (int64_t)(g_rank < 16 ? g_rank : 16) * 200000000;
    if (waited < timeout + stagger) continue;
    char msg[512];
    int n = snprintf(msg, sizeof msg,
                     "[trellis %d E] rank %d on %s: %s of %zu bytes on group '%s' has not "
                     "finished after %.0f s (parallel.timeout_s = %g): a rank of the group is "
                     "not answering, or the ranks wait on each other; ending the job\n",
                     g_rank, g_rank, g_host, g_op, atomic_load(&g_bytes), g_group,
                     (double)waited * 1e-9, (double)timeout * 1e-9);
    ssize_t ignored = write(2, msg, (size_t)(n < (int)sizeof msg ? n : (int)sizeof msg - 1));
    (void)ignored;
    const int pid = atomic_load(&g_notify_pid);
    if (pid > 0) kill((pid_t)pid, atomic_load(&g_notify_sig));
    _exit(124);
  }
  return NULL;
}

static int g_started;

static void start(void) {
  pthread_t th;
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  g_started = pthread_create(&th, &a, watch, NULL) == 0;
  pthread_attr_destroy(&a);
}

void tl_watchdog_notify(int pid, int sig) {
  atomic_store(&g_notify_sig, sig);
  atomic_store(&g_notify_pid, pid);
}

tl_status tl_watchdog_start(double timeout_s, int rank) {
  g_rank = rank;
  if (gethostname(g_host, sizeof g_host) != 0) snprintf(g_host, sizeof g_host, "?");
  g_host[sizeof g_host - 1] = '\0';
  atomic_store(&g_timeout_ns, timeout_s > 0 ? (int64_t)(timeout_s * 1e9) : 0);
  if (timeout_s <= 0) return TL_OK;
  pthread_once(&g_once, start);
  if (!g_started) return TL_ERRF(TL_ERR_IO, "cannot start the watchdog thread");
  return TL_OK;
}

void tl_watchdog_enter(const char* group, const char* op, size_t bytes) {
  if (!atomic_load(&g_timeout_ns)) return;
  snprintf(g_group, sizeof g_group, "%s", group);
  snprintf(g_op, sizeof g_op, "%s", op);
  atomic_store(&g_bytes, bytes);
  atomic_store(&g_since, tl_time_ns());
}

void tl_watchdog_leave(void) {
  atomic_store(&g_since, 0);
}
