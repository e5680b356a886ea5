/* atomic_file.h — write a file so that readers see the old one or the whole
 * new one, never a part: write a temporary file beside it, flush it to disk,
 * rename it over the target. Abort removes the temporary. Every file trellis
 * writes (configs, token files, checkpoints, model files, plans) goes
 * through it. */
#ifndef TL_CORE_ATOMIC_FILE_H
#define TL_CORE_ATOMIC_FILE_H

#include <stddef.h>
#include <stdio.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tl_atomic_file {
  FILE* f;
  char path[1024];
  char tmp[1040];
} tl_atomic_file;

tl_status tl_atomic_file_open(tl_atomic_file* af, const char* path);
tl_status tl_atomic_file_write(tl_atomic_file* af, const void* data, size_t bytes);
/* Flushes, syncs and renames; on failure the temporary is removed. */
tl_status tl_atomic_file_commit(tl_atomic_file* af);
void tl_atomic_file_abort(tl_atomic_file* af);
/* The whole write of a file made of n buffers, one after another
 * (data[i], bytes[i]): open, write each, commit; nothing left on failure. */
tl_status tl_atomic_file_write_all(const char* path, int n, const void* const* data,
                                   const size_t* bytes);

#ifdef __cplusplus
}
#endif

#endif
