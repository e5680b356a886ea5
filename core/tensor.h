/* tensor.h — a typed, shaped, contiguous view into a tl_buffer.
 *
 * A tl_tensor is a small value (copy it freely): it does not own memory
 * unless made by tl_tensor_alloc, in which case tl_tensor_free releases the
 * buffer it made. Parameters and gradients are views into one flat buffer per
 * stage (llm.c), so data parallelism moves a few large blocks, not one per
 * tensor. Shapes are row-major, up to 4-D; shape[n_dims-1] varies fastest. */
#ifndef TL_CORE_TENSOR_H
#define TL_CORE_TENSOR_H

#include <stdint.h>

#include "core/alloc.h"
#include "core/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TL_MAX_DIMS 4

typedef struct tl_tensor {
  tl_dtype dtype;
  tl_device device;
  int n_dims;
  int64_t shape[TL_MAX_DIMS];
  void* data;        /* first element; device memory for CUDA tensors */
  tl_buffer* buffer; /* the buffer viewed */
  size_t offset;     /* bytes from buffer->data to data */
  int owns_buffer;   /* set by tl_tensor_alloc only */
} tl_tensor;

int64_t tl_tensor_numel(const tl_tensor* t);
size_t tl_tensor_nbytes(const tl_tensor* t);

/* A view of `buf` starting `offset` bytes in. Fails (TL_ERR_INVALID) when a
 * dimension is < 1, n_dims is not 1..4, the offset is misaligned for the
 * dtype, or the view runs past the buffer's end. */
tl_status tl_tensor_view(tl_buffer* buf, size_t offset, tl_dtype dtype, int n_dims,
                         const int64_t* shape, tl_tensor* out);
tl_status tl_tensor_view_1d(tl_buffer* buf, size_t offset, tl_dtype dtype, int64_t n0,
                            tl_tensor* out);
tl_status tl_tensor_view_2d(tl_buffer* buf, size_t offset, tl_dtype dtype, int64_t n0, int64_t n1,
                            tl_tensor* out);

/* Rows [row0, row0 + n_rows) of the outermost dimension: the same buffer. */
tl_status tl_tensor_slice_rows(const tl_tensor* t, int64_t row0, int64_t n_rows, tl_tensor* out);

/* The same elements under another shape with the same element count. */
tl_status tl_tensor_reshape(const tl_tensor* t, int n_dims, const int64_t* shape, tl_tensor* out);

/* A new zero-filled tensor with a buffer of its own; release with tl_tensor_free. */
tl_status tl_tensor_alloc(tl_device device, tl_dtype dtype, int n_dims, const int64_t* shape,
                          tl_tensor* out);
/* Frees the buffer if this tensor made it; either way clears *t. */
void tl_tensor_free(tl_tensor* t);

/* "f32[4,8,16]@cpu" into buf; returns buf. */
const char* tl_tensor_describe(const tl_tensor* t, char* buf, size_t size);

#ifdef __cplusplus
}
#endif

#endif
