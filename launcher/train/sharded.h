/* sharded.h — sharded checkpoints: a directory that every rank writes its
 * own part of and reads only the slices it needs from, on any mesh.
 *
 * A checkpoint directory holds:
 * - index.json: {"format": "trellis-sharded", "version": 1, "step",
 *   "data_position", "n_params", "model": {...the model's sizes...},
 *   "tensors": [{"name", "shape", "offset", "numel"}, ...] (the full flat
 *   vector's tensors, llm.c's order), "files": [{"file", "rank",
 *   "elements", "slices", "tensors": {name: elements held}}, ...]};
 * - part-RRRRR.bin, one per rank that holds state no other rank writes:
 *   the 1024-byte trellis checkpoint header of the model (checkpoint.h;
 *   version 3, the part's slice count and elements), the slices as int64
 *   pairs (first element in the full flat vector, count), each slice's
 *   three checksums (XXH3 64-bit of its parameters, first and second AdamW
 *   moments), then the parameters of every slice in that order, then the
 *   first AdamW moments, then the second. A reader verifies a slice's
 *   checksum the first time it reads from it (it reads the whole slice
 *   then), so a damaged byte is refused naming the part and the tensor.
 * Each element of the full vector lies in exactly one part. The directory
 * is written under a temporary name and renamed when every part is
 * complete, so a reader sees a whole checkpoint or none. */
#ifndef TL_LAUNCHER_SHARDED_H
#define TL_LAUNCHER_SHARDED_H

#include <stdbool.h>
#include <stdint.h>

#include "graph/model.h"
#include "launcher/train/checkpoint.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tl_slice {
  int64_t full; /* first element in the full flat vector */
  int64_t n;
};

/* Whether `path` is a sharded checkpoint (a directory). */
bool tl_sharded_is(const char* path);

/* One rank's part into directory `dir` (existing): the slices and, for
 * each of params, adam_m, adam_v, the slices' elements back to back. */
tl_status tl_sharded_write_part(const char* dir, int rank, const tl_model* m,
                                const struct tl_slice* slices, int n_slices, const float* params,
                                const float* adam_m, const float* adam_v);
/* The index, once every part is written (ranks[i], slice and element
 * counts of the i-th part), then the rename of `dir` to `path`. */
tl_status tl_sharded_commit(const char* dir, const char* path, const tl_model* m,
                            const struct tl_train_state* s, int n_parts, const int* ranks,
                            const int64_t* n_slices, const int64_t* elements);

typedef struct tl_sharded_reader tl_sharded_reader;
/* Reads the index and every part's slice table (not their data), checking
 * them against model m and that the parts cover the full vector once. */
tl_status tl_sharded_open(const char* path, const tl_model* m, tl_sharded_reader** out);
void tl_sharded_close(tl_sharded_reader* r);
struct tl_train_state tl_sharded_state(const tl_sharded_reader* r);
/* Elements [full, full + n) of the full vector: which = 0 parameters, 1
 * and 2 the AdamW moments; reads only the parts' bytes that hold them. */
tl_status tl_sharded_read(tl_sharded_reader* r, int which, int64_t full, int64_t n, float* out);

#ifdef __cplusplus
}
#endif

#endif
