/* tensorboard.h — TensorBoard event files: a run's curves as TensorBoard,
 * and the tools of the frameworks users come from, read them.
 *
 * A file is a sequence of records (TFRecord: the length as a little-endian
 * uint64, its masked CRC32C, the bytes, their masked CRC32C), each an Event
 * protocol buffer (tensorboard.proto, encoded by protobuf-c): first the file
 * version, then one event per call with its step, wall time and scalars.
 * Each call is flushed, so TensorBoard pointed at the directory shows a
 * running job live. One writer per run, on rank 0. */
#ifndef TL_LAUNCHER_TENSORBOARD_H
#define TL_LAUNCHER_TENSORBOARD_H

#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tl_tensorboard tl_tensorboard;

/* Creates `dir` (and the directories above it) where missing and a new
 * event file in it, events.out.tfevents.<seconds>.<host>.<pid>, holding the
 * version record. *out is the caller's (tl_tensorboard_destroy). */
tl_status tl_tensorboard_create(const char* dir, tl_tensorboard** out);

/* Appends one event: n scalars (tags[i] = values[i]) at `step`, flushed. */
tl_status tl_tensorboard_scalars(tl_tensorboard* tb, int64_t step, const char* const* tags,
                                 const float* values, int n);

/* The event file's path (owned by tb). */
const char* tl_tensorboard_path(const tl_tensorboard* tb);

/* Closes the file. NULL does nothing. */
void tl_tensorboard_destroy(tl_tensorboard* tb);

#ifdef __cplusplus
}
#endif

#endif
