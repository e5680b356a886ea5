/* alloc.h — device memory, counted.
 *
 * All memory trellis computes on comes from tl_buffer_create, which counts
 * live and peak bytes per device. The planner's memory predictions are tested
 * against these counts, so nothing large may bypass them.
 *
 * The CPU allocator is built in (64-byte aligned). Other device types plug in
 * a struct tl_memory_ops at start-up (the CUDA backend registers cudaMalloc
 * and friends); core itself never links a GPU runtime. */
#ifndef TL_CORE_ALLOC_H
#define TL_CORE_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#include "core/device.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tl_memory_ops {
  tl_status (*alloc)(int index, size_t bytes, void** out);
  void (*free)(int index, void* ptr);
  /* Byte copies between host memory and this device type. Synchronous. */
  tl_status (*copy_to_host)(int index, void* dst_host, const void* src, size_t bytes);
  tl_status (*copy_from_host)(int index, void* dst, const void* src_host, size_t bytes);
  tl_status (*copy_on_device)(int index, void* dst, const void* src, size_t bytes);
  tl_status (*zero)(int index, void* dst, size_t bytes);
  /* A device whose work is queued and run later where core can see it
   * (emulated GPUs, kernels/emul/emul.h; NULL elsewhere): mark says how far
   * the queue reaches now, run_to runs it that far. A group's operation on
   * the device's buffers runs after the work issued before it (group.h). */
  uint64_t (*mark)(int index);
  tl_status (*run_to)(int index, uint64_t mark);
};

/* Installs the memory functions for a device type other than the CPU.
 * Not thread-safe: call once at start-up. */
void tl_memory_register(tl_device_type type, const struct tl_memory_ops* ops);

/* A block of device memory. Owned by whoever created it. */
typedef struct tl_buffer {
  tl_device device;
  void* data;
  size_t bytes;
} tl_buffer;

/* Allocates `bytes` (may be 0) on `device`, zero-filled. *out is NULL on failure.
 * Fails with TL_ERR_NO_DEVICE if the device type has no registered memory. */
tl_status tl_buffer_create(tl_device device, size_t bytes, tl_buffer** out);
void tl_buffer_destroy(tl_buffer* buf); /* NULL is fine */

/* Copies between any two devices (through the host where needed). */
tl_status tl_memcpy(tl_device dst_dev, void* dst, tl_device src_dev, const void* src, size_t bytes);
tl_status tl_memzero(tl_device dev, void* dst, size_t bytes);

/* The device's work issued so far, and running it (the memory ops' mark
 * and run_to): 0 and a no-op on devices that queue nowhere core can see
 * (the CPU has run it; a GPU's collectives wait for it with an event). */
uint64_t tl_device_mark(tl_device dev);
tl_status tl_device_run_to(tl_device dev, uint64_t mark);

typedef struct tl_alloc_stats {
  int64_t live_bytes;
  int64_t peak_bytes;
  int64_t n_allocs; /* buffers created so far */
  int64_t n_live;   /* buffers not yet destroyed */
} tl_alloc_stats;

tl_alloc_stats tl_alloc_stats_get(tl_device device);
/* Restarts peak tracking from the current live bytes. */
void tl_alloc_reset_peak(tl_device device);

/* In a build with AddressSanitizer: LeakSanitizer's check now, of every
 * heap block nothing points to any more (its report goes to stderr);
 * TL_ERR_INTERNAL when it found any. A process with MPI runs it before
 * MPI_Finalize, whose network modules leak on their way out from a place
 * no suppression can name: with ASAN_OPTIONS=leak_check_at_exit=0 the
 * check at exit is off and this one covers the process's own memory.
 * TL_OK without ASan, or when ASAN_OPTIONS has detect_leaks=0. */
tl_status tl_alloc_leak_check(void);

#ifdef __cplusplus
}
#endif

#endif
