/* main.c — the `trellis` command: dispatch to a subcommand. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/env.h"
#include "launcher/cli/cli.h"

static void usage(FILE* f) {
  fprintf(f,
          "usage: trellis <command> [options]\n"
          "\n"
          "commands:\n"
          "  train   train the model a JSON config describes\n"
          "  data    turn text into a token file; build the default corpus\n"
          "  check   check every kernel on this machine's CPU and GPUs;\n"
          "          check CONFIG.json validates a config and prints its rank map\n"
          "  env     list the environment variables trellis reads\n"
          "  plan    rank data x tensor x pipeline splits of a model on a cluster\n"
          "  plot    draw what train --metrics wrote: loss, lr, tokens/s, runs overlaid\n"
          "\n"
          "`trellis <command> --help` describes a command.\n");
}

int main(int argc, char** argv) {
  /* Under `bazel run`, paths on the command line and in configs are relative
   * to where the person typed the command, not to Bazel's runfiles. */
  const char* wd = getenv("BUILD_WORKING_DIRECTORY");
  if (wd && chdir(wd) != 0) {
    fprintf(stderr, "trellis: cannot enter %s\n", wd);
    return 1;
  }
  if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
      strcmp(argv[1], "help") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const char* cmd = argv[1];
  if (strcmp(cmd, "env") == 0) return tl_cli_env(argc - 2, argv + 2);
  /* Every other command computes: refuse a bad environment up front. */
  if (tl_env_status() != TL_OK) {
    fprintf(stderr, "trellis: %s\n", tl_cli_error());
    return 2;
  }
  if (strcmp(cmd, "check") == 0) return tl_cli_check(argc - 2, argv + 2);
  if (strcmp(cmd, "data") == 0) return tl_cli_data(argc - 2, argv + 2);
  if (strcmp(cmd, "train") == 0) return tl_cli_train(argc - 2, argv + 2);
  if (strcmp(cmd, "plan") == 0) return tl_cli_plan(argc - 2, argv + 2);
  if (strcmp(cmd, "plot") == 0) return tl_cli_plot(argc - 2, argv + 2);
  fprintf(stderr, "trellis: unknown command '%s'\n", cmd);
  usage(stderr);
  return 2;
}
