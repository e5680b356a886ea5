/* atomic_file.c — see atomic_file.h. */
#include "core/atomic_file.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

tl_status tl_atomic_file_open(tl_atomic_file* af, const char* path) {
  memset(af, 0, sizeof *af);
  if (strlen(path) >= sizeof af->path)
    return TL_ERRF(TL_ERR_INVALID, "path is too long: '%.64s...'", path);
  snprintf(af->path, sizeof af->path, "%s", path);
  snprintf(af->tmp, sizeof af->tmp, "%s.tmp.XXXXXX", path);
  int fd = mkstemp(af->tmp);
  if (fd < 0)
    return TL_ERRF(TL_ERR_IO, "cannot create a file beside '%s': %s", path, strerror(errno));
  /* mkstemp makes the file 0600; the finished file gets the usual permissions */
  mode_t mask = umask(0);
  umask(mask);
  if (fchmod(fd, 0666 & ~mask) != 0) {
    close(fd);
    unlink(af->tmp);
    return TL_ERRF(TL_ERR_IO, "cannot set the permissions of '%s': %s", af->tmp, strerror(errno));
  }
  af->f = fdopen(fd, "wb");
  if (!af->f) {
    close(fd);
    unlink(af->tmp);
    return TL_ERRF(TL_ERR_IO, "cannot open '%s': %s", af->tmp, strerror(errno));
  }
  return TL_OK;
}

tl_status tl_atomic_file_write(tl_atomic_file* af, const void* data, size_t bytes) {
  if (bytes && fwrite(data, 1, bytes, af->f) != bytes)
    return TL_ERRF(TL_ERR_IO, "writing '%s' failed: %s", af->path, strerror(errno));
  return TL_OK;
}

tl_status tl_atomic_file_commit(tl_atomic_file* af) {
  int ok = fflush(af->f) == 0 && fsync(fileno(af->f)) == 0;
  int err = errno;
  ok = (fclose(af->f) == 0) && ok;
  af->f = NULL;
  if (!ok || rename(af->tmp, af->path) != 0) {
    if (ok) err = errno;
    unlink(af->tmp);
    return TL_ERRF(TL_ERR_IO, "cannot write '%s': %s", af->path, strerror(err));
  }
  return TL_OK;
}

void tl_atomic_file_abort(tl_atomic_file* af) {
  if (af->f) fclose(af->f);
  af->f = NULL;
  unlink(af->tmp);
}

tl_status tl_atomic_file_write_all(const char* path, int n, const void* const* data,
                                   const size_t* bytes) {
  tl_atomic_file af;
  TL_CHECK(tl_atomic_file_open(&af, path));
  tl_status st = TL_OK;
  for (int i = 0; i < n && st == TL_OK; i++) st = tl_atomic_file_write(&af, data[i], bytes[i]);
  if (st != TL_OK) {
    tl_atomic_file_abort(&af);
    return st;
  }
  return tl_atomic_file_commit(&af);
}
