/*
 * json.c: the sweep's measurements as JSON (--json): one record per shape and pass, with the
 * kernel and tile the run report names. bench/plot_sweep.py draws it.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fa_bench.h"

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; ++s) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

FILE *json_begin(const options *o) {
  FILE *json = fopen(o->json, "w");
  if (!json) {
    fprintf(stderr, "fa-bench: cannot write %s: %s\n", o->json, strerror(errno));
    return NULL;
  }
  fprintf(json, "{\"tool\": \"fa-bench\", \"version\": \"%s\", \"backend_requested\": \"%s\", ",
          fa_version(NULL, NULL, NULL), fa_backend_name(o->backend));
  fprintf(json, "\"dtype\": \"%s\", \"iters\": %d, \"warmup\": %d, \"results\": [",
          fa_dtype_name(o->dtype), o->iters, o->warmup);
  return json;
}

void json_record(FILE *f, int first, const options *o, int64_t batch, int64_t seqlen, int64_t heads,
                 int64_t hdim, int causal, const char *pass, double flops, const measurement *m) {
  fprintf(f, "%s\n    {\"pass\": \"%s\", \"dtype\": \"%s\", \"batch\": %lld, \"seqlen\": %lld, ",
          first ? "" : ",", pass, fa_dtype_name(o->dtype), (long long)batch, (long long)seqlen);
  fprintf(f, "\"heads\": %lld, \"head_dim\": %lld, \"causal\": %d, \"flops\": %.6g, ",
          (long long)heads, (long long)hdim, causal, flops);
  fprintf(f, "\"warmup\": %d, \"iters\": %d, ", o->warmup, o->iters);
  if (m->ok) {
    fprintf(f, "\"ok\": true, \"ms_median\": %.6g, \"ms_min\": %.6g, \"tflops\": %.6g, ",
            m->ms_median, m->ms_min, m->tflops);
    fprintf(f, "\"b2b_ms\": %.6g, \"host_us\": %.6g, ", m->b2b_ms, m->host_us);
    fprintf(f, "\"backend\": ");
    json_string(f, m->info.backend_name);
    fprintf(f, ", \"kernel\": ");
    json_string(f, m->info.kernel);
    fprintf(f, ", \"tile_m\": %d, \"tile_n\": %d, \"fell_back\": %d, \"rejected\": ",
            (int)m->info.tile_m, (int)m->info.tile_n, (int)m->info.fell_back);
    json_string(f, m->info.rejected);
    fprintf(f, "}");
  } else {
    fprintf(f, "\"ok\": false, \"error\": ");
    json_string(f, m->error);
    fprintf(f, "}");
  }
}

int json_end(FILE *f) {
  fprintf(f, "\n  ]\n}\n");
  return fclose(f) != 0 ? -1 : 0;
}
