/* cli_files.c — checks on the files a command will write (cli.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/config.h"
#include "launcher/cli/cli.h"

/* Why `dir` cannot take new files (not there, not a directory, no write
 * access), or NULL when it can. */
static const char* takes_files(const char* dir) {
  struct stat st;
  if (stat(dir, &st) != 0) return strerror(errno);
  if (!S_ISDIR(st.st_mode)) return "not a directory";
  if (access(dir, W_OK | X_OK) != 0) return strerror(errno);
  return NULL;
}

int tl_cli_writable(const char* cmd, const char* flag, const char* path) {
  struct stat st;
  /* the path itself: a file to replace, not a directory */
  const size_t len = strlen(path);
  if (len == 0) {
    fprintf(stderr, "%s: %s '': expected a file name\n", cmd, flag);
    return 2;
  }
  if (path[len - 1] == '/' || (stat(path, &st) == 0 && S_ISDIR(st.st_mode))) {
    fprintf(stderr, "%s: %s '%s': a directory; expected a file name\n", cmd, flag, path);
    return 2;
  }
  char dir[TL_PATH_MAX];
  const char* slash = strrchr(path, '/');
  const size_t n = !slash ? 1 : slash == path ? 1 : (size_t)(slash - path);
  if (n >= sizeof dir) {
    fprintf(stderr, "%s: %s: the path's directory is longer than %d characters\n", cmd, flag,
            TL_PATH_MAX - 1);
    return 2;
  }
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else
    snprintf(dir, sizeof dir, "%.*s", (int)n, path);
  const char* why = takes_files(dir);
  if (!why) return 0;
  fprintf(stderr, "%s: %s %s: cannot write into '%s': %s\n", cmd, flag, path, dir, why);
  return 2;
}

int tl_cli_writable_dir(const char* cmd, const char* flag, const char* path) {
  struct stat st;
  if (path[0] == '\0') {
    fprintf(stderr, "%s: %s '': expected a directory name\n", cmd, flag);
    return 2;
  }
  if (stat(path, &st) == 0) {
    const char* why = !S_ISDIR(st.st_mode)             ? "not a directory"
                      : access(path, W_OK | X_OK) != 0 ? strerror(errno)
                                                       : NULL;
    if (!why) return 0;
    fprintf(stderr, "%s: %s '%s': cannot write into it: %s\n", cmd, flag, path, why);
    return 2;
  }
  /* a new directory: its parent must take it (the checks of a file's) */
  char trimmed[TL_PATH_MAX];
  snprintf(trimmed, sizeof trimmed, "%s", path);
  for (size_t n = strlen(trimmed); n > 1 && trimmed[n - 1] == '/'; n--) trimmed[n - 1] = '\0';
  return tl_cli_writable(cmd, flag, trimmed);
}

int tl_cli_makeable_dir(const char* cmd, const char* flag, const char* path) {
  struct stat st;
  if (path[0] == '\0' || stat(path, &st) == 0) return tl_cli_writable_dir(cmd, flag, path);
  /* the nearest directory above it that exists must take the new ones */
  char up[TL_PATH_MAX];
  if (snprintf(up, sizeof up, "%s", path) >= (int)sizeof up) {
    fprintf(stderr, "%s: %s: the path is longer than %d characters\n", cmd, flag, TL_PATH_MAX - 1);
    return 2;
  }
  for (;;) {
    size_t n = strlen(up);
    while (n > 1 && up[n - 1] == '/') up[--n] = '\0';
    char* slash = strrchr(up, '/');
    if (!slash)
      snprintf(up, sizeof up, ".");
    else if (slash == up)
      up[1] = '\0';
    else
      *slash = '\0';
    if (stat(up, &st) == 0) break;
    if (errno != ENOENT) break; /* said below */
  }
  const char* why = takes_files(up);
  if (!why) return 0;
  fprintf(stderr, "%s: %s '%s': cannot make it: '%s': %s\n", cmd, flag, path, up, why);
  return 2;
}
