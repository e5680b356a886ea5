/* cli.h — the `trellis` command's subcommands. Each takes the arguments after
 * its name and returns the process exit status: 0 success, 1 failure, 2 bad
 * usage. Only the CLI prints to stdout and decides to exit. */
#ifndef TL_LAUNCHER_CLI_H
#define TL_LAUNCHER_CLI_H

#include "core/device.h"
#include "core/log.h"
#include "core/status.h"

/* The last error as a person is shown it: its message; with
 * TRELLIS_LOG_LEVEL=debug also where it was recorded (tl_last_error). */
static inline const char* tl_cli_error(void) {
  return tl_log_enabled(TL_LOG_DEBUG) ? tl_last_error() : tl_last_error_message();
}

int tl_cli_check(int argc, char** argv);
int tl_cli_check_config(int argc, char** argv);
int tl_cli_env(int argc, char** argv);
int tl_cli_data(int argc, char** argv);
int tl_cli_train(int argc, char** argv);
int tl_cli_plan(int argc, char** argv);
int tl_cli_plot(int argc, char** argv);
/* 0 when the file `path` can be created: it names no directory, and its
 * directory exists and takes files; else 2, said on stderr (as "CMD: FLAG
 * PATH: cannot write into 'DIR': why" for the directory). What a command writes at its end is
 * checked before it starts (training or calibrating can take hours). */
int tl_cli_writable(const char* cmd, const char* flag, const char* path);
/* The same for a directory to write files into: an existing directory that
 * takes files, or a name whose parent directory does (it is created). */
int tl_cli_writable_dir(const char* cmd, const char* flag, const char* path);
/* The same for a directory the command makes with the ones above it where
 * missing (mkdir -p): the nearest one that exists must take them. */
int tl_cli_makeable_dir(const char* cmd, const char* flag, const char* path);

/* `trellis plan --calibrate OUT [--device cpu|cuda]`: argv is the whole
 * command line (it may start the job's ranks). */
int tl_cli_plan_calibrate(int argc, char** argv, const char* out, int ranks, tl_device_type device);

#endif
