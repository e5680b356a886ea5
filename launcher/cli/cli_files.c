/* cli_files.c — checks on the files a command will write (cli.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/config.h"
#include "launcher/cli/cli.h"

int tl_cli_writable(const char* cmd, const char* flag, const char* path) {
  char dir[TL_PATH_MAX];
  const char* slash = strrchr(path, '/');
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else
    snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
  struct stat st;
  const char* why = NULL;
  if (stat(dir, &st) != 0)
    why = strerror(errno);
  else if (!S_ISDIR(st.st_mode))
    why = "not a directory";
  else if (access(dir, W_OK | X_OK) != 0)
    why = strerror(errno);
  if (!why) return 0;
  fprintf(stderr, "%s: %s %s: cannot write into '%s': %s\n", cmd, flag, path, dir, why);
  return 2;
}
