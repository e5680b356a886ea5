/* plan_svg.c — the schedule comes from pp's simulation (forward 1 tick,
 * backward 2), the same one that checks the schedules; device numbers follow
 * the default rank order (tensor parallel innermost, then data, then
 * pipeline), counted from 1 as the design's pictures count devices. */
#include "launcher/cli/plan_svg.h"

#include <stdlib.h>

#include "pp/schedule.h"

#define WIDTH 960.0
#define LEFT 90.0
#define ROW 26.0
#define MAX_SLOTS 2048

static void text(FILE* f, double x, double y, const char* anchor, int size, const char* s) {
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%d\">%s</text>\n", x, y,
          anchor, size, s);
}

tl_status tl_plan_svg(const tl_plan* p, const char* title, FILE* f) {
  const int v = tl_plan_chunks(p);
  int stages = p->pp, micro = p->n_micro, shown = micro;
  if ((long)stages * micro * v > MAX_SLOTS) {
    shown = MAX_SLOTS / stages / v > 0 ? MAX_SLOTS / stages / v : 1;
    if (v > 1) shown = shown / stages > 0 ? shown / stages * stages : stages; /* groups of pp */
  }
  tl_pp_span* spans = malloc(sizeof(tl_pp_span) * 3 * (size_t)stages * (size_t)shown * (size_t)v);
  if (!spans) return TL_ERRF(TL_ERR_NOMEM, "out of memory drawing the schedule");
  int n = 0, ticks = 0;
  tl_status st = tl_pp_schedule_timeline(
      p->schedule, stages, shown, v, p->schedule == TL_SCHEDULE_ZERO_BUBBLE ? &p->zb_costs : NULL,
      spans, &n, &ticks);
  if (st != TL_OK) {
    free(spans);
    return st;
  }
  double scale = (WIDTH - LEFT - 110.0) / ticks;
  double top = 70.0, mesh_top = top + stages * ROW + 70.0;
  double cell_w = stages > 8 ? 90.0 : 110.0, cell_h = 34.0;
  int rows_shown = p->dp > 16 ? 16 : p->dp, cols_shown = stages > 16 ? 16 : stages;
  double height = mesh_top + 54.0 + rows_shown * cell_h + 30.0;
  double width =
      LEFT + cols_shown * cell_w + 40.0 > WIDTH ? LEFT + cols_shown * cell_w + 40.0 : WIDTH;
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
          "font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
          width, height);
  char buf[384];
  text(f, 10, 24, "start", 16, title);
  const bool zb = p->schedule == TL_SCHEDULE_ZERO_BUBBLE;
  if (zb)
    snprintf(buf, sizeof buf,
             "zero-bubble schedule, %d stage%s x %d micro-batch%s%s: forward %d, input-gradient "
             "backward (B) %d, weight pass (W) %d ticks (a block's FLOPs); bubble %.1f%% "
             "(1F1B's (p-1)/(m+p-1) = %.1f%%)",
             stages, stages == 1 ? "" : "s", micro, micro == 1 ? "" : "es",
             shown < micro ? " (first ones drawn)" : "", p->zb_costs.forward, p->zb_costs.backward,
             p->zb_costs.weight,
             100.0 * (1.0 - (double)shown *
                                (p->zb_costs.forward + p->zb_costs.backward + p->zb_costs.weight) /
                                ticks),
             100.0 * (stages - 1) / (micro + stages - 1));
  else if (v > 1)
    snprintf(buf, sizeof buf,
             "interleaved 1F1B, %d stages x %d chunks x %d micro-batches%s: a chunk's forward = "
             "1 tick, backward = 2 (F1.0: micro-batch 1, chunk 0, darker for later chunks); "
             "bubble (p-1)/(vm+p-1) = %.1f%% (1F1B's %.1f%%)",
             stages, v, micro, shown < micro ? " (first ones drawn)" : "",
             100.0 * (stages - 1) / ((double)v * micro + stages - 1),
             100.0 * (stages - 1) / (micro + stages - 1));
  else
    snprintf(buf, sizeof buf,
             "%s schedule, %d stage%s x %d micro-batch%s%s: forward = 1 tick, backward = 2; "
             "bubble (p-1)/(m+p-1) = %.1f%%",
             p->schedule == TL_SCHEDULE_GPIPE ? "GPipe" : "1F1B", stages, stages == 1 ? "" : "s",
             micro, micro == 1 ? "" : "es", shown < micro ? " (first ones drawn)" : "",
             100.0 * (stages - 1) / (micro + stages - 1));
  text(f, 10, 48, "start", 12, buf);
  /* 1. the schedule: a row per stage */
  for (int s = 0; s < stages; s++) {
    double y = top + s * ROW;
    snprintf(buf, sizeof buf, "stage %d", s);
    text(f, LEFT - 8, y + ROW * 0.65, "end", 12, buf);
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#eeeeee\"/>\n",
            LEFT, y + 2, ticks * scale, ROW - 4);
    int busy = 0;
    for (int k = 0; k < n; k++)
      if (spans[k].stage == s) busy += spans[k].end - spans[k].start;
    snprintf(buf, sizeof buf, "idle %.0f%%", 100.0 * (ticks - busy) / ticks);
    text(f, LEFT + ticks * scale + 8, y + ROW * 0.65, "start", 11, buf);
  }
  for (int k = 0; k < n; k++) {
    const tl_pp_span* sp = &spans[k];
    int fwd = sp->op == TL_PP_FORWARD, wgt = sp->op == TL_PP_WEIGHT;
    double x = LEFT + sp->start * scale, w = (sp->end - sp->start) * scale;
    double y = top + sp->stage * ROW + 2;
    /* later chunks darker: blue forwards, green backwards, orange weight passes */
    static const char* const fwd_fill[] = {"#4e79a7", "#2f5580", "#1b3a5c", "#0e2440"};
    static const char* const bwd_fill[] = {"#59a14f", "#3d7a35", "#285a22", "#173d13"};
    const int shade = sp->chunk < 3 ? sp->chunk : 3;
    fprintf(f,
            "<rect class=\"%s\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" "
            "stroke=\"white\" stroke-width=\"0.5\"><title>%s %d, stage %d, chunk "
            "%d</title></rect>\n",
            fwd   ? "fwd"
            : wgt ? "wgt"
                  : "bwd",
            x, y, w, ROW - 4,
            fwd   ? fwd_fill[shade]
            : wgt ? "#f28e2b"
                  : bwd_fill[shade],
            fwd   ? "forward"
            : wgt ? "weight pass"
                  : "backward",
            sp->micro, sp->stage, sp->chunk);
    if (w >= 16) {
      if (v > 1)
        snprintf(buf, sizeof buf, "%c%d.%d", fwd ? 'F' : 'B', sp->micro, sp->chunk);
      else
        snprintf(buf, sizeof buf, "%c%d", fwd ? 'F' : wgt ? 'W' : 'B', sp->micro);
      fprintf(f,
              "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"10\" "
              "fill=\"white\">%s</text>\n",
              x + w / 2, y + ROW * 0.55, buf);
    }
  }
  /* 2. the mesh: replicas down, stages across; each cell the devices of its tp group */
  if (tl_plan_cp(p) > 1)
    snprintf(buf, sizeof buf,
             "mesh: dp %d x tp %d x pp %d x cp %d = %lld devices; each box is one stage of one "
             "replica, its tensor- and context-parallel devices%s",
             p->dp, p->tp, p->pp, tl_plan_cp(p), (long long)tl_plan_devices(p),
             p->dp > rows_shown || stages > cols_shown ? " (first ones drawn)" : "");
  else
    snprintf(buf, sizeof buf,
             "mesh: dp %d x tp %d x pp %d = %d devices; each box is one stage of one replica, "
             "its tensor-parallel devices%s",
             p->dp, p->tp, p->pp, p->dp * p->tp * p->pp,
             p->dp > rows_shown || stages > cols_shown ? " (first ones drawn)" : "");
  text(f, 10, mesh_top, "start", 12, buf);
  for (int s = 0; s < cols_shown; s++) {
    snprintf(buf, sizeof buf, "stage %d", s);
    text(f, LEFT + s * cell_w + cell_w / 2, mesh_top + 22, "middle", 11, buf);
  }
  for (int d = 0; d < rows_shown; d++) {
    double y = mesh_top + 28 + d * cell_h;
    snprintf(buf, sizeof buf, "replica %d", d);
    text(f, LEFT - 8, y + cell_h * 0.6, "end", 11, buf);
    for (int s = 0; s < cols_shown; s++) {
      double x = LEFT + s * cell_w;
      int first = ((s * p->dp) + d) * p->tp + 1, last = first + p->tp - 1;
      if (p->tp == 1)
        snprintf(buf, sizeof buf, "device %d", first);
      else
        snprintf(buf, sizeof buf, "devices %d-%d", first, last);
      fprintf(f,
              "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#f3f6fa\" "
              "stroke=\"#4e79a7\"/>\n",
              x + 2, y + 2, cell_w - 4, cell_h - 4);
      text(f, x + cell_w / 2, y + cell_h * 0.6, "middle", 11, buf);
    }
  }
  fputs("</svg>\n", f);
  free(spans);
  return ferror(f) ? TL_ERRF(TL_ERR_IO, "writing the picture failed") : TL_OK;
}
