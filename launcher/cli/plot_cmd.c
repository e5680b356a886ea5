/* plot_cmd.c — `trellis plot METRICS.jsonl... --svg FILE`: what --metrics
 * wrote, drawn: loss, validation loss, learning rate and tokens/s against
 * the step, one colour per run, the runs overlaid (meshes or precisions
 * compared at a glance). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/atomic_file.h"
#include "launcher/cli/cli.h"

#define MAX_RUNS 8

static void usage(FILE* f) {
  fprintf(f,
          "usage: trellis plot METRICS.jsonl [METRICS.jsonl ...] --svg FILE\n"
          "\n"
          "Draws the files `trellis train --metrics` wrote (up to %d runs, one colour each):\n"
          "loss, validation loss, learning rate and tokens/s against the step.\n",
          MAX_RUNS);
}

/* One run's series, by step. */
struct series {
  double *x, *y;
  int n, cap;
};
enum { LOSS = 0, VAL, LR, TOKENS, N_SERIES };
static const char* const k_keys[N_SERIES] = {"loss", "val_loss", "lr", "tokens_per_s"};
static const char* const k_titles[N_SERIES] = {"loss", "validation loss", "learning rate",
                                               "tokens/s"};
struct run {
  const char* path;
  struct series s[N_SERIES];
};

static int push(struct series* s, double x, double y) {
  if (s->n == s->cap) {
    int cap = s->cap ? 2 * s->cap : 256;
    double* nx = realloc(s->x, sizeof(double) * (size_t)cap);
    if (!nx) return 0;
    s->x = nx;
    double* ny = realloc(s->y, sizeof(double) * (size_t)cap);
    if (!ny) return 0;
    s->y = ny;
    s->cap = cap;
  }
  s->x[s->n] = x, s->y[s->n] = y, s->n++;
  return 1;
}

/* Reads a metrics file: a JSON object a line, with "step" and some of the
 * series' keys (null where a value was not finite: left out). */
static int read_run(const char* path, struct run* r) {
  FILE* f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "trellis plot: cannot open '%s': %s\n", path, strerror(errno));
    return 0;
  }
  r->path = path;
  char line[8192];
  int no = 0, ok = 1;
  while (ok && fgets(line, sizeof line, f)) {
    no++;
    if (line[0] == '\n') continue;
    json_error_t err;
    json_t* j = json_loads(line, 0, &err);
    json_t* step = j ? json_object_get(j, "step") : NULL;
    if (!j || !json_is_integer(step)) {
      fprintf(
          stderr, "trellis plot: %s:%d: %s\n", path, no,
          j ? "no integer \"step\": expected a line `trellis train --metrics` wrote" : err.text);
      ok = 0;
    }
    for (int k = 0; ok && k < N_SERIES; k++) {
      json_t* v = json_object_get(j, k_keys[k]);
      if (json_is_number(v) &&
          !push(&r->s[k], (double)json_integer_value(step), json_number_value(v))) {
        fprintf(stderr, "trellis plot: out of memory reading '%s'\n", path);
        ok = 0;
      }
    }
    json_decref(j);
  }
  if (ok && ferror(f)) { /* a directory: EISDIR */
    fprintf(stderr, "trellis plot: cannot read '%s': %s\n", path, strerror(errno ? errno : EIO));
    ok = 0;
  }
  fclose(f);
  if (ok && r->s[LOSS].n == 0 && r->s[VAL].n == 0) {
    fprintf(stderr,
            "trellis plot: '%s' holds no step: expected what `trellis train --metrics` "
            "writes\n",
            path);
    ok = 0;
  }
  return ok;
}

static const char* const k_colours[MAX_RUNS] = {"#4e79a7", "#e15759", "#59a14f", "#f28e2b",
                                                "#b07aa1", "#76b7b2", "#edc948", "#9c755f"};

/* The text of one panel (k) at (x0, y0) of w x h. */
static void panel(FILE* f, const struct run* runs, int n_runs, int k, double x0, double y0,
                  double w, double h, double step_max) {
  double lo = HUGE_VAL, hi = -HUGE_VAL;
  for (int r = 0; r < n_runs; r++)
    for (int i = 0; i < runs[r].s[k].n; i++) {
      lo = fmin(lo, runs[r].s[k].y[i]);
      hi = fmax(hi, runs[r].s[k].y[i]);
    }
  fprintf(f, "<g class=\"panel\" id=\"%s\">\n", k_keys[k]);
  fprintf(f,
          "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
          "stroke=\"#999\"/>\n",
          x0, y0, w, h);
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\">%s</text>\n", x0, y0 - 6, k_titles[k]);
  if (lo > hi) { /* nothing to draw (no validation, say) */
    fprintf(f,
            "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"#999\" "
            "text-anchor=\"middle\">none</text>\n</g>\n",
            x0 + w / 2, y0 + h / 2);
    return;
  }
  if (hi == lo) hi = lo + (lo != 0 ? fabs(lo) * 0.1 : 1);
  fprintf(f,
          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\">%.4g</text>\n"
          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\">%.4g</text>\n"
          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\">step 0</text>\n"
          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\">%.0f</text>\n",
          x0 - 4, y0 + 10, hi, x0 - 4, y0 + h, lo, x0, y0 + h + 12, x0 + w, y0 + h + 12, step_max);
  for (int r = 0; r < n_runs; r++) {
    const struct series* s = &runs[r].s[k];
    if (!s->n) continue;
    if (k == VAL) { /* a point per validation */
      for (int i = 0; i < s->n; i++)
        fprintf(f, "<circle class=\"run%d\" cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", r,
                x0 + w * s->x[i] / step_max, y0 + h * (hi - s->y[i]) / (hi - lo), k_colours[r]);
      continue;
    }
    fprintf(f,
            "<polyline class=\"run%d\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"",
            r, k_colours[r]);
    for (int i = 0; i < s->n; i++)
      fprintf(f, "%s%.1f,%.1f", i ? " " : "", x0 + w * s->x[i] / step_max,
              y0 + h * (hi - s->y[i]) / (hi - lo));
    fputs("\"/>\n", f);
  }
  fputs("</g>\n", f);
}

static int draw(const char* out, const struct run* runs, int n_runs) {
  double step_max = 1;
  for (int r = 0; r < n_runs; r++)
    for (int k = 0; k < N_SERIES; k++)
      for (int i = 0; i < runs[r].s[k].n; i++) step_max = fmax(step_max, runs[r].s[k].x[i]);
  char* text = NULL;
  size_t len = 0;
  FILE* f = open_memstream(&text, &len);
  if (!f) {
    fprintf(stderr, "trellis plot: out of memory\n");
    return 1;
  }
  const double W = 960, H = 640, pw = 390, ph = 220;
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
          "font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
          W, H);
  for (int k = 0; k < N_SERIES; k++)
    panel(f, runs, n_runs, k, 80 + (k % 2) * 460, 50 + (k / 2) * 280, pw, ph, step_max);
  for (int r = 0; r < n_runs; r++) { /* the legend: each run's file */
    const char* base = strrchr(runs[r].path, '/');
    base = base ? base + 1 : runs[r].path;
    fprintf(f,
            "<rect x=\"%d\" y=\"%.0f\" width=\"12\" height=\"12\" fill=\"%s\"/>"
            "<text x=\"%d\" y=\"%.0f\" font-size=\"12\">",
            80 + 220 * (r % 4), H - 48 + 20 * (r / 4), k_colours[r], 96 + 220 * (r % 4),
            H - 38 + 20 * (r / 4));
    for (const char* c = base; *c; c++) /* XML-escaped */
      if (*c == '<')
        fputs("&lt;", f);
      else if (*c == '&')
        fputs("&amp;", f);
      else
        fputc(*c, f);
    fputs("</text>\n", f);
  }
  fputs("</svg>\n", f);
  fclose(f);
  const void* data[1] = {text};
  size_t sizes[1] = {len};
  tl_status st = tl_atomic_file_write_all(out, 1, data, sizes);
  free(text);
  if (st != TL_OK) {
    fprintf(stderr, "trellis plot: --svg: %s\n", tl_cli_error());
    return 1;
  }
  printf("plot: %s (%d run%s, %.0f steps)\n", out, n_runs, n_runs == 1 ? "" : "s", step_max);
  return 0;
}

int tl_cli_plot(int argc, char** argv) {
  const char* svg = NULL;
  const char* files[MAX_RUNS];
  int n = 0;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage(stdout);
      return 0;
    }
    if (strcmp(argv[i], "--svg") == 0 && i + 1 < argc) {
      svg = argv[++i];
    } else if (argv[i][0] == '-' || n == MAX_RUNS) {
      fprintf(stderr, "trellis plot: %s '%s'\n",
              n == MAX_RUNS ? "at most 8 runs; one too many:" : "unexpected argument", argv[i]);
      usage(stderr);
      return 2;
    } else {
      files[n++] = argv[i];
    }
  }
  if (!svg || n == 0) {
    usage(stderr);
    return 2;
  }
  struct run runs[MAX_RUNS];
  memset(runs, 0, sizeof runs);
  int rc = 0;
  for (int r = 0; r < n && rc == 0; r++)
    if (!read_run(files[r], &runs[r])) rc = 1;
  if (rc == 0) rc = draw(svg, runs, n);
  for (int r = 0; r < n; r++)
    for (int k = 0; k < N_SERIES; k++) free(runs[r].s[k].x), free(runs[r].s[k].y);
  return rc;
}
