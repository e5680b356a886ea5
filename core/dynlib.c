/* dynlib.c — opening the libraries trellis loads rather than links. */
#include "core/dynlib.h"

#include <dlfcn.h>
#include <stdio.h>

void* tl_dynlib_open(const char* soname, const char* dir, char* err, size_t err_size) {
  void* h = NULL;
  if (dir && dir[0]) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, soname);
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  }
  if (!h) h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* why = dlerror();
    if (dir && dir[0])
      snprintf(err, err_size, "cannot load %s (from %s or the loader's path): %s", soname, dir,
               why ? why : "unknown");
    else
      snprintf(err, err_size, "cannot load %s (from the loader's path): %s", soname,
               why ? why : "unknown");
  }
  return h;
}
