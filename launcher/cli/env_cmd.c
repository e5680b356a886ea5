/* env_cmd.c — `trellis env`: the environment knobs, their defaults, their
 * current values and what they do (the table in core/env.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "launcher/cli/cli.h"

int tl_cli_env(int argc, char** argv) {
  if (argc == 1 && (strcmp(argv[0], "-h") == 0 || strcmp(argv[0], "--help") == 0)) {
    printf(
        "usage: trellis env\n\n"
        "Lists the environment variables trellis reads, each with its value in this\n"
        "environment (or its default), and what it does (docs/operations.md).\n");
    return 0;
  }
  if (argc > 0) {
    fprintf(stderr, "usage: trellis env\n");
    return 2;
  }
  const char *name, *def, *doc;
  for (int i = 0; tl_env_describe(i, &name, &def, &doc); i++) {
    const char* v = getenv(name);
    printf("%s=%s%s\n    %s (default %s)\n", name, v ? v : def, v ? "" : "  [default]", doc, def);
  }
  if (tl_env_status() != TL_OK) {
    fprintf(stderr, "trellis env: %s\n", tl_cli_error());
    return 1;
  }
  return 0;
}
