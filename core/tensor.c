/* tensor.c */
#include "core/tensor.h"

#include <stdio.h>
#include <string.h>

int64_t tl_tensor_numel(const tl_tensor* t) {
  int64_t n = 1;
  for (int i = 0; i < t->n_dims; i++) n *= t->shape[i];
  return t->n_dims > 0 ? n : 0;
}

size_t tl_tensor_nbytes(const tl_tensor* t) {
  return (size_t)tl_tensor_numel(t) * tl_dtype_size(t->dtype);
}

static tl_status check_shape(tl_dtype dtype, int n_dims, const int64_t* shape, int64_t* numel) {
  if ((unsigned)dtype >= TL_DTYPE_COUNT)
    return TL_ERRF(TL_ERR_INVALID, "unknown dtype %d", (int)dtype);
  if (n_dims < 1 || n_dims > TL_MAX_DIMS)
    return TL_ERRF(TL_ERR_INVALID, "tensor has %d dimensions; expected 1 to %d", n_dims,
                   TL_MAX_DIMS);
  int64_t n = 1;
  for (int i = 0; i < n_dims; i++) {
    if (shape[i] < 1)
      return TL_ERRF(TL_ERR_INVALID, "tensor dimension %d is %lld; expected >= 1", i,
                     (long long)shape[i]);
    if (n > INT64_MAX / shape[i]) return TL_ERRF(TL_ERR_INVALID, "tensor element count overflows");
    n *= shape[i];
  }
  *numel = n;
  return TL_OK;
}

tl_status tl_tensor_view(tl_buffer* buf, size_t offset, tl_dtype dtype, int n_dims,
                         const int64_t* shape, tl_tensor* out) {
  memset(out, 0, sizeof *out);
  int64_t numel = 0;
  TL_CHECK(check_shape(dtype, n_dims, shape, &numel));
  size_t esize = tl_dtype_size(dtype);
  if (offset % esize != 0)
    return TL_ERRF(TL_ERR_INVALID, "view offset %zu is not a multiple of the %s element size %zu",
                   offset, tl_dtype_name(dtype), esize);
  size_t need = (size_t)numel * esize;
  if (offset > buf->bytes || need > buf->bytes - offset)
    return TL_ERRF(TL_ERR_INVALID, "view of %zu bytes at offset %zu runs past the %zu-byte buffer",
                   need, offset, buf->bytes);
  out->dtype = dtype;
  out->device = buf->device;
  out->n_dims = n_dims;
  memcpy(out->shape, shape, (size_t)n_dims * sizeof shape[0]);
  out->buffer = buf;
  out->offset = offset;
  out->data = (char*)buf->data + offset;
  return TL_OK;
}

tl_status tl_tensor_view_1d(tl_buffer* buf, size_t offset, tl_dtype dtype, int64_t n0,
                            tl_tensor* out) {
  return tl_tensor_view(buf, offset, dtype, 1, &n0, out);
}

tl_status tl_tensor_view_2d(tl_buffer* buf, size_t offset, tl_dtype dtype, int64_t n0, int64_t n1,
                            tl_tensor* out) {
  int64_t shape[2] = {n0, n1};
  return tl_tensor_view(buf, offset, dtype, 2, shape, out);
}

tl_status tl_tensor_slice_rows(const tl_tensor* t, int64_t row0, int64_t n_rows, tl_tensor* out) {
  if (row0 < 0 || n_rows < 1 || row0 + n_rows > t->shape[0])
    return TL_ERRF(TL_ERR_INVALID, "rows [%lld, %lld) are outside the %lld rows of the tensor",
                   (long long)row0, (long long)(row0 + n_rows), (long long)t->shape[0]);
  int64_t shape[TL_MAX_DIMS];
  memcpy(shape, t->shape, sizeof shape);
  shape[0] = 1;
  int64_t row_elems = 1;
  for (int i = 1; i < t->n_dims; i++) row_elems *= t->shape[i];
  shape[0] = n_rows;
  size_t off = t->offset + (size_t)(row0 * row_elems) * tl_dtype_size(t->dtype);
  return tl_tensor_view(t->buffer, off, t->dtype, t->n_dims, shape, out);
}

tl_status tl_tensor_reshape(const tl_tensor* t, int n_dims, const int64_t* shape, tl_tensor* out) {
  int64_t numel = 0;
  TL_CHECK(check_shape(t->dtype, n_dims, shape, &numel));
  if (numel != tl_tensor_numel(t))
    return TL_ERRF(TL_ERR_INVALID, "cannot reshape %lld elements into %lld",
                   (long long)tl_tensor_numel(t), (long long)numel);
  return tl_tensor_view(t->buffer, t->offset, t->dtype, n_dims, shape, out);
}

tl_status tl_tensor_alloc(tl_device device, tl_dtype dtype, int n_dims, const int64_t* shape,
                          tl_tensor* out) {
  memset(out, 0, sizeof *out);
  int64_t numel = 0;
  TL_CHECK(check_shape(dtype, n_dims, shape, &numel));
  tl_buffer* buf = NULL;
  TL_CHECK(tl_buffer_create(device, (size_t)numel * tl_dtype_size(dtype), &buf));
  tl_status st = tl_tensor_view(buf, 0, dtype, n_dims, shape, out);
  if (st != TL_OK) {
    tl_buffer_destroy(buf);
    return st;
  }
  out->owns_buffer = 1;
  return TL_OK;
}

void tl_tensor_free(tl_tensor* t) {
  if (!t) return;
  if (t->owns_buffer) tl_buffer_destroy(t->buffer);
  memset(t, 0, sizeof *t);
}

const char* tl_tensor_describe(const tl_tensor* t, char* buf, size_t size) {
  char dev[32];
  int n = snprintf(buf, size, "%s[", tl_dtype_name(t->dtype));
  for (int i = 0; i < t->n_dims && n > 0 && (size_t)n < size; i++)
    n += snprintf(buf + n, size - (size_t)n, i ? ",%lld" : "%lld", (long long)t->shape[i]);
  if (n > 0 && (size_t)n < size)
    snprintf(buf + n, size - (size_t)n, "]@%s", tl_device_name(t->device, dev, sizeof dev));
  return buf;
}
