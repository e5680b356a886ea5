/* safetensors.h — the safetensors format, read strictly and written.
 *
 * A file is an 8-byte little-endian header length N, N bytes of UTF-8
 * JSON {name: {"dtype", "shape", "data_offsets": [begin, end)}, optional
 * "__metadata__": {string: string}}, then the tensors' bytes, offsets
 * relative to the byte after the header, packed with no hole and no
 * overlap. Opening a file checks all of it that can be checked without
 * reading the data: the header is JSON of that shape, every tensor's byte
 * count is its shape times its dtype's size, the tensors tile the data,
 * and the file is exactly as long as they say — so a truncated or padded
 * file is refused before anything is read from it. Dtypes F32, BF16 and
 * F16 are read (as fp32); others are refused by name. */
#ifndef TL_LAUNCHER_SAFETENSORS_H
#define TL_LAUNCHER_SAFETENSORS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TL_ST_MAX_DIMS 8
#define TL_ST_HEADER_MAX (100 << 20) /* the format's own limit on N */

typedef enum { TL_ST_F32 = 0, TL_ST_BF16, TL_ST_F16 } tl_st_dtype;

struct tl_st_tensor {
  char* name;
  tl_st_dtype dtype;
  int n_dims;
  int64_t shape[TL_ST_MAX_DIMS];
  int64_t numel;
  int64_t begin, end; /* bytes, relative to the data (after the header) */
};

typedef struct tl_st_file {
  char path[1024];
  int fd;
  int64_t data_start; /* 8 + N */
  int n_tensors;
  struct tl_st_tensor* tensors; /* in the header's order */
} tl_st_file;

/* Opens and checks `path` (above). TL_ERR_IO when it cannot be read,
 * TL_ERR_FORMAT naming the file (and the tensor) otherwise. */
tl_status tl_st_open(const char* path, tl_st_file* out);
void tl_st_close(tl_st_file* f); /* a zeroed or closed file is fine */

/* The tensor named `name`, or NULL. */
const struct tl_st_tensor* tl_st_find(const tl_st_file* f, const char* name);

/* "F32", "BF16", "F16". */
const char* tl_st_dtype_name(tl_st_dtype d);

/* Elements [first, first + n) of tensor t (row-major), as fp32, into out. */
tl_status tl_st_read(const tl_st_file* f, const struct tl_st_tensor* t, int64_t first, int64_t n,
                     float* out);

/* One tensor of a file to write: fp32, at data bytes [begin, end). */
struct tl_st_entry {
  const char* name;
  int n_dims;
  int64_t shape[TL_ST_MAX_DIMS];
  int64_t begin, end;
};

/* The header of a file of fp32 tensors `e` (with "__metadata__"
 * {"format": "pt"}, which transformers requires): the 8-byte length and
 * the JSON, padded with spaces to a multiple of 8. *out (malloc'd, the
 * caller frees it) holds *len bytes. */
tl_status tl_st_header(const struct tl_st_entry* e, int n, char** out, int64_t* len);

#ifdef __cplusplus
}
#endif

#endif
