/* status.h — trellis's error codes and the message kept with the last error.
 *
 * Every fallible function returns a tl_status. The code says what kind of
 * failure it was; the thread-local message (tl_last_error) says what, where,
 * which value and what was expected. Codes, names and default messages come
 * from one X-macro table so that they can never drift apart (libuv, NCCL). */
#ifndef TL_CORE_STATUS_H
#define TL_CORE_STATUS_H

#include <stdio.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X(NAME, message) */
#define TL_STATUS_MAP(X)                   \
  X(OK, "success")                         \
  X(ERR_INVALID, "invalid argument")       \
  X(ERR_CONFIG, "invalid configuration")   \
  X(ERR_IO, "input/output error")          \
  X(ERR_FORMAT, "malformed file")          \
  X(ERR_NOMEM, "out of memory")            \
  X(ERR_UNSUPPORTED, "not supported")      \
  X(ERR_NO_DEVICE, "device not available") \
  X(ERR_CUDA, "CUDA runtime error")        \
  X(ERR_CUBLAS, "cuBLAS error")            \
  X(ERR_NCCL, "NCCL error")                \
  X(ERR_MPI, "MPI error")                  \
  X(ERR_INTERNAL, "internal error")        \
  X(ERR_PEER, "failed on another rank")

/* clang-format off */
typedef enum {
#define TL__STATUS_ENUM(name, msg) TL_##name,
  TL_STATUS_MAP(TL__STATUS_ENUM)
#undef TL__STATUS_ENUM
  TL_STATUS_COUNT
} tl_status;
/* clang-format on */

/* "TL_ERR_CONFIG"; "TL_UNKNOWN_STATUS" for values outside the table. */
const char* tl_status_name(tl_status s);
/* The table's fixed description, e.g. "invalid configuration". */
const char* tl_status_message(tl_status s);

/* The message recorded with the most recent error on this thread, or "" if
 * none. The pointer stays valid until the next error on this thread. */
const char* tl_last_error(void);
/* The same message without where it was recorded: tl_last_error() past its
 * "file.c:line: " prefix, and past those of a message recorded again
 * elsewhere ("group.c:260: group_mpi.c:381: what" reads "what"). What a
 * person is shown; the location is for the developer. */
const char* tl_last_error_message(void);
void tl_clear_error(void);

/* Records a formatted message (prefixed "file:line: ") and returns `code`.
 * Use through TL_ERRF. */
tl_status tl__set_error(tl_status code, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Record where an error starts: return TL_ERRF(TL_ERR_CONFIG, "tp=%d ...", tp); */
#define TL_ERRF(code, ...) tl__set_error((code), __FILE__, __LINE__, __VA_ARGS__)

/* Propagate a failure unchanged; its message was recorded where it began. */
#define TL_CHECK(expr)                \
  do {                                \
    tl_status tl__s = (expr);         \
    if (tl__s != TL_OK) return tl__s; \
  } while (0)

/* Propagate to a function's cleanup label: TL_CHECK_GOTO(f(), st, fail); */
#define TL_CHECK_GOTO(expr, st, label) \
  do {                                 \
    (st) = (expr);                     \
    if ((st) != TL_OK) goto label;     \
  } while (0)

/* Broken internal invariants only — never for bad input. */
#define TL_ASSERT(cond)                                                                        \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      fprintf(stderr, "trellis: internal invariant failed at %s:%d: %s\n", __FILE__, __LINE__, \
              #cond);                                                                          \
      abort();                                                                                 \
    }                                                                                          \
  } while (0)

#ifdef __cplusplus
}
#endif

#endif
