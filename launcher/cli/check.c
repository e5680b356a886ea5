/* check.c — `trellis check`: the op self-check on this machine's devices.
 * (`trellis check CONFIG.json` validates a config instead: check_config.c.)
 *
 * Runs every op case of the suite (kernels/opcheck.h) on the CPU and, where a
 * GPU is present, on CUDA against the reference and against the CPU, and
 * prints one line per case. A person installing trellis on a new machine
 * runs this first: it says whether the arithmetic here can be trusted. */
#include <stdio.h>
#include <string.h>

#include "core/env.h"
#include "core/log.h"
#include "core/timer.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu.h"
#include "kernels/opcheck.h"
#include "launcher/cli/cli.h"

static void usage(FILE* f) {
  fprintf(f,
          "usage: trellis check [--device cpu|cuda|cuda:N|all]\n"
          "       trellis check CONFIG.json [--ranks-per-node N]   (validate a config)\n"
          "\n"
          "Checks every kernel against a double-precision reference (forward) and\n"
          "central finite differences (backward); on CUDA also against the CPU.\n"
          "Default --device all: the CPU, and cuda:0 when a GPU is present.\n");
}

static void print_row(const char* dev, const char* how, const tl_opcheck_result* r) {
  char grad[32] = "(no backward)";
  if (r->grad_tol > 0) snprintf(grad, sizeof grad, "%9.2e / %-8.0e", r->grad_err, r->grad_tol);
  printf("%-8s %-28s %-9s %9.2e / %-8.0e %-20s %s%s%s\n", dev, r->name, how, r->fwd_err, r->fwd_tol,
         grad, r->passed ? "ok" : "FAIL", r->passed ? "" : "  worst: ", r->passed ? "" : r->worst);
}

/* Runs the whole suite on `be` (and against `ref` when given); counts failures. */
static int check_backend(const tl_backend* be, const tl_backend* ref, const char* dev, int* n_run) {
  int failed = 0;
  for (int i = 0; i < tl_opcheck_count(); i++) {
    tl_opcheck_result r;
    tl_status st = tl_opcheck_run(be, i, &r);
    if (st != TL_OK) {
      printf("%-8s %-28s ERROR: %s\n", dev, tl_opcheck_name(i), tl_cli_error());
      failed++;
      continue;
    }
    print_row(dev, "reference", &r);
    failed += !r.passed;
    (*n_run)++;
    if (!ref) continue;
    st = tl_opcheck_compare(be, ref, i, &r);
    if (st != TL_OK) {
      printf("%-8s %-28s ERROR: %s\n", dev, tl_opcheck_name(i), tl_cli_error());
      failed++;
      continue;
    }
    print_row(dev, "vs cpu", &r);
    failed += !r.passed;
    (*n_run)++;
  }
  return failed;
}

int tl_cli_check(int argc, char** argv) {
  const char* device = "all";
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
      device = argv[++i];
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage(stdout);
      return 0;
    } else if (argv[i][0] != '-') {
      return tl_cli_check_config(argc, argv); /* trellis check CONFIG.json */
    } else {
      fprintf(stderr, "trellis check: unexpected argument '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  int want_cpu = 1, want_cuda = -1; /* -1: if present */
  tl_device cuda_dev = tl_cuda(0);
  if (strcmp(device, "all") != 0) {
    tl_device d;
    if (tl_device_parse(device, &d) != TL_OK) {
      fprintf(stderr, "trellis check: --device: %s\n", tl_cli_error());
      return 2;
    }
    want_cpu = d.type == TL_DEVICE_CPU;
    want_cuda = d.type == TL_DEVICE_CUDA;
    cuda_dev = d;
  }

  tl_timer timer;
  tl_timer_start(&timer);
  tl_backend *cpu = NULL, *cuda = NULL;
  if (tl_backend_create(tl_cpu(), &cpu) != TL_OK) {
    fprintf(stderr, "trellis check: %s\n", tl_cli_error());
    return 1;
  }
  const char* why = NULL;
  int n_gpus = tl_cuda_device_count(&why);
  printf("trellis op self-check: %d op cases; cpu with %d thread%s; %s\n", tl_opcheck_count(),
         tl_cpu_num_threads(), tl_cpu_num_threads() == 1 ? "" : "s",
         n_gpus == 0              ? "no CUDA"
         : tl_env()->emulate_cuda ? "emulated GPUs (TRELLIS_EMULATE=cuda: the CPU kernels queued)"
                                  : "CUDA devices found");
  printf("%-8s %-28s %-9s %-20s %-20s %s\n", "device", "case", "against", "forward err / tol",
         "gradient err / tol", "result");

  int failed = 0, n_run = 0;
  if (want_cpu) failed += check_backend(cpu, NULL, "cpu", &n_run);
  if (want_cuda != 0) {
    if (n_gpus == 0) {
      printf("cuda     skipped: %s\n", why);
      if (want_cuda == 1) failed++; /* asked for explicitly: that is a failure */
    } else if (tl_backend_create(cuda_dev, &cuda) != TL_OK) {
      printf("cuda     ERROR: %s\n", tl_cli_error());
      failed++;
    } else {
      char name[16];
      failed += check_backend(cuda, cpu, tl_device_name(cuda_dev, name, sizeof name), &n_run);
    }
  }
  tl_backend_destroy(cuda);
  tl_backend_destroy(cpu);
  printf("%d checks, %d failed, in %.2f s\n", n_run, failed, tl_timer_elapsed_s(&timer));
  return failed ? 1 : 0;
}
