/* env_cmd.c — `trellis env`: the environment knobs, their defaults, their
 * current values and what they do (the table in core/env.h). */
#include <stdio.h>
#include <stdlib.h>

#include "core/env.h"
#include "launcher/cli/cli.h"

int tl_cli_env(int argc, char** argv) {
  (void)argv;
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
