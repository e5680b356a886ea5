/* alloc.c — counted buffers. Counters are atomics so that kernel threads and
 * communication threads may allocate; the memory ops table is written once at
 * start-up before any thread exists. */
#include "core/alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#define N_SLOTS (1 + TL_MAX_CUDA_DEVICES)

struct counters {
  _Atomic int64_t live, peak, n_allocs, n_live;
};

static struct counters g_counters[N_SLOTS];
static const struct tl_memory_ops* g_ops[2];

static int slot_of(tl_device d) {
  if (d.type == TL_DEVICE_CPU) return 0;
  if (d.index < 0 || d.index >= TL_MAX_CUDA_DEVICES) return -1;
  return 1 + d.index;
}

void tl_memory_register(tl_device_type type, const struct tl_memory_ops* ops) {
  if (type == TL_DEVICE_CUDA) g_ops[TL_DEVICE_CUDA] = ops;
}

static void count(int slot, int64_t bytes, int64_t n) {
  struct counters* c = &g_counters[slot];
  int64_t live = atomic_fetch_add(&c->live, bytes) + bytes;
  atomic_fetch_add(&c->n_live, n);
  if (n > 0) atomic_fetch_add(&c->n_allocs, n);
  int64_t peak = atomic_load(&c->peak);
  while (live > peak && !atomic_compare_exchange_weak(&c->peak, &peak, live)) {
  }
}

static tl_status need_ops(tl_device d, const struct tl_memory_ops** ops) {
  char name[32];
  if (slot_of(d) < 0 || d.type != TL_DEVICE_CUDA || !g_ops[TL_DEVICE_CUDA])
    return TL_ERRF(TL_ERR_NO_DEVICE,
                   "no memory allocator for device %s (CUDA backend not initialised?)",
                   tl_device_name(d, name, sizeof name));
  *ops = g_ops[TL_DEVICE_CUDA];
  return TL_OK;
}

tl_status tl_buffer_create(tl_device device, size_t bytes, tl_buffer** out) {
  *out = NULL;
  int slot = slot_of(device);
  const struct tl_memory_ops* ops = NULL;
  if (device.type != TL_DEVICE_CPU) TL_CHECK(need_ops(device, &ops));
  tl_buffer* b = calloc(1, sizeof *b);
  if (!b) return TL_ERRF(TL_ERR_NOMEM, "out of host memory for a buffer header");
  b->device = device;
  b->bytes = bytes;
  if (device.type == TL_DEVICE_CPU) {
    size_t rounded = (bytes + 63) / 64 * 64;
    b->data = aligned_alloc(64, rounded ? rounded : 64);
    if (!b->data) {
      free(b);
      return TL_ERRF(TL_ERR_NOMEM, "cannot allocate %zu bytes of host memory", bytes);
    }
    memset(b->data, 0, bytes);
  } else {
    tl_status st = ops->alloc(device.index, bytes ? bytes : 1, &b->data);
    if (st == TL_OK) st = ops->zero(device.index, b->data, bytes);
    if (st != TL_OK) {
      if (b->data) ops->free(device.index, b->data);
      free(b);
      return st;
    }
  }
  count(slot, (int64_t)bytes, 1);
  *out = b;
  return TL_OK;
}

void tl_buffer_destroy(tl_buffer* b) {
  if (!b) return;
  if (b->device.type == TL_DEVICE_CPU)
    free(b->data);
  else if (g_ops[TL_DEVICE_CUDA])
    g_ops[TL_DEVICE_CUDA]->free(b->device.index, b->data);
  count(slot_of(b->device), -(int64_t)b->bytes, -1);
  free(b);
}

tl_status tl_memcpy(tl_device dst_dev, void* dst, tl_device src_dev, const void* src,
                    size_t bytes) {
  if (bytes == 0) return TL_OK;
  const struct tl_memory_ops* ops = NULL;
  int dst_cpu = dst_dev.type == TL_DEVICE_CPU, src_cpu = src_dev.type == TL_DEVICE_CPU;
  if (dst_cpu && src_cpu) {
    memmove(dst, src, bytes);
    return TL_OK;
  }
  if (dst_cpu) {
    TL_CHECK(need_ops(src_dev, &ops));
    return ops->copy_to_host(src_dev.index, dst, src, bytes);
  }
  TL_CHECK(need_ops(dst_dev, &ops));
  if (src_cpu) return ops->copy_from_host(dst_dev.index, dst, src, bytes);
  if (dst_dev.index == src_dev.index) return ops->copy_on_device(dst_dev.index, dst, src, bytes);
  /* Between two GPUs: through the host, which is slow but always possible. */
  void* tmp = malloc(bytes);
  if (!tmp) return TL_ERRF(TL_ERR_NOMEM, "cannot stage %zu bytes between GPUs", bytes);
  tl_status st = ops->copy_to_host(src_dev.index, tmp, src, bytes);
  if (st == TL_OK) st = ops->copy_from_host(dst_dev.index, dst, tmp, bytes);
  free(tmp);
  return st;
}

tl_status tl_memzero(tl_device dev, void* dst, size_t bytes) {
  if (dev.type == TL_DEVICE_CPU) {
    memset(dst, 0, bytes);
    return TL_OK;
  }
  const struct tl_memory_ops* ops = NULL;
  TL_CHECK(need_ops(dev, &ops));
  return ops->zero(dev.index, dst, bytes);
}

static const struct tl_memory_ops* queue_ops(tl_device dev) {
  const struct tl_memory_ops* ops = dev.type == TL_DEVICE_CUDA ? g_ops[TL_DEVICE_CUDA] : NULL;
  return ops && ops->mark && ops->run_to ? ops : NULL;
}

uint64_t tl_device_mark(tl_device dev) {
  const struct tl_memory_ops* ops = queue_ops(dev);
  return ops ? ops->mark(dev.index) : 0;
}

tl_status tl_device_run_to(tl_device dev, uint64_t mark) {
  const struct tl_memory_ops* ops = queue_ops(dev);
  return ops ? ops->run_to(dev.index, mark) : TL_OK;
}

tl_alloc_stats tl_alloc_stats_get(tl_device device) {
  tl_alloc_stats s = {0, 0, 0, 0};
  int slot = slot_of(device);
  if (slot < 0) return s;
  s.live_bytes = atomic_load(&g_counters[slot].live);
  s.peak_bytes = atomic_load(&g_counters[slot].peak);
  s.n_allocs = atomic_load(&g_counters[slot].n_allocs);
  s.n_live = atomic_load(&g_counters[slot].n_live);
  return s;
}

void tl_alloc_reset_peak(tl_device device) {
  int slot = slot_of(device);
  if (slot >= 0) atomic_store(&g_counters[slot].peak, atomic_load(&g_counters[slot].live));
}

#if defined(__SANITIZE_ADDRESS__)
/* LeakSanitizer reads this at start-up. MPICH's UCX network modules keep
 * blocks at MPI_Init that nothing points to (UCX's own, 2.4 kB a rank):
 * not trellis's to free. */
const char* __lsan_default_suppressions(void);
const char* __lsan_default_suppressions(void) {
  return "leak:libucs.so\nleak:libuct.so\n";
}
/* and says nothing of them on every exit */
const char* __lsan_default_options(void);
const char* __lsan_default_options(void) {
  return "print_suppressions=0";
}
#endif

tl_status tl_alloc_leak_check(void) {
#if defined(__SANITIZE_ADDRESS__)
  if (__lsan_do_recoverable_leak_check())
    return TL_ERRF(TL_ERR_INTERNAL,
                   "LeakSanitizer found memory nothing points to (its report is above)");
#endif
  return TL_OK;
}
