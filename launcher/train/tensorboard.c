/* tensorboard.c — event files (see tensorboard.h). Protocol buffers come
 * from protobuf-c's generated code, CRC32C from ISA-L: nothing of either
 * format is encoded by hand here but the record frame. */
#include "launcher/train/tensorboard.h"

#include <errno.h>
#include <isa-l/crc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "core/config.h"
#include "launcher/train/tensorboard.pb-c.h"

struct tl_tensorboard {
  FILE* f;
  char path[TL_PATH_MAX + 128];
};

/* TFRecord's checksum: CRC32C, rotated and offset so that a CRC of bytes
 * holding CRCs is not degenerate. */
static uint32_t masked_crc(const void* p, size_t n) {
  const uint32_t crc = ~crc32_iscsi((unsigned char*)p, (int)n, 0xFFFFFFFFu);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static void le(unsigned char* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) out[i] = (unsigned char)(v >> (8 * i));
}

static double now(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}

/* One event as one record, flushed. */
static tl_status write_event(tl_tensorboard* tb, const Tensorboard__Event* ev) {
  const size_t n = tensorboard__event__get_packed_size(ev);
  unsigned char* buf = malloc(n + 16);
  if (!buf) return TL_ERRF(TL_ERR_NOMEM, "out of memory for an event of %zu bytes", n);
  tensorboard__event__pack(ev, buf + 12);
  le(buf, n, 8);
  le(buf + 8, masked_crc(buf, 8), 4);
  le(buf + 12 + n, masked_crc(buf + 12, n), 4);
  const int ok = fwrite(buf, 1, n + 16, tb->f) == n + 16 && fflush(tb->f) == 0;
  free(buf);
  if (!ok) return TL_ERRF(TL_ERR_IO, "cannot write '%s': %s", tb->path, strerror(errno));
  return TL_OK;
}

/* mkdir -p */
static tl_status make_dirs(const char* dir) {
  char p[TL_PATH_MAX];
  if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
    return TL_ERRF(TL_ERR_INVALID, "path '%s' is too long", dir);
  for (char* s = p + 1;; s++) {
    const char c = *s;
    if (c == '/' || c == '\0') {
      *s = '\0';
      struct stat st;
      if (mkdir(p, 0755) != 0 && errno != EEXIST)
        return TL_ERRF(TL_ERR_IO, "cannot create directory '%s': %s", p, strerror(errno));
      if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode))
        return TL_ERRF(TL_ERR_IO, "'%s' is not a directory", p);
      *s = c;
    }
    if (c == '\0') return TL_OK;
  }
}

tl_status tl_tensorboard_create(const char* dir, tl_tensorboard** out) {
  *out = NULL;
  TL_CHECK(make_dirs(dir));
  tl_tensorboard* tb = calloc(1, sizeof *tb);
  if (!tb) return TL_ERRF(TL_ERR_NOMEM, "out of memory");
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  const double t = now();
  snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%010lld.%s.%d", dir, (long long)t,
           host, (int)getpid());
  if (!(tb->f = fopen(tb->path, "wb"))) {
    tl_status st = TL_ERRF(TL_ERR_IO, "cannot write '%s': %s", tb->path, strerror(errno));
    free(tb);
    return st;
  }
  Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
  ev.wall_time = t;
  ev.what_case = TENSORBOARD__EVENT__WHAT_FILE_VERSION;
  ev.file_version = "brain.Event:2";
  tl_status st = write_event(tb, &ev);
  if (st != TL_OK) {
    tl_tensorboard_destroy(tb);
    return st;
  }
  *out = tb;
  return TL_OK;
}

tl_status tl_tensorboard_scalars(tl_tensorboard* tb, int64_t step, const char* const* tags,
                                 const float* values, int n) {
  Tensorboard__Summary__Value vals[32];
  Tensorboard__Summary__Value* ptrs[32];
  if (n < 0 || n > 32) return TL_ERRF(TL_ERR_INVALID, "%d scalars in one event; at most 32", n);
  for (int i = 0; i < n; i++) {
    tensorboard__summary__value__init(&vals[i]);
    vals[i].tag = (char*)tags[i];
    vals[i].value_case = TENSORBOARD__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
    vals[i].simple_value = values[i];
    ptrs[i] = &vals[i];
  }
  Tensorboard__Summary sum = TENSORBOARD__SUMMARY__INIT;
  sum.n_value = (size_t)n;
  sum.value = ptrs;
  Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
  ev.wall_time = now();
  ev.step = step;
  ev.what_case = TENSORBOARD__EVENT__WHAT_SUMMARY;
  ev.summary = &sum;
  return write_event(tb, &ev);
}

const char* tl_tensorboard_path(const tl_tensorboard* tb) {
  return tb->path;
}

void tl_tensorboard_destroy(tl_tensorboard* tb) {
  if (!tb) return;
  if (tb->f) fclose(tb->f);
  free(tb);
}
