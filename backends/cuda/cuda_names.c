/*
 * cuda_names.c: the CUDA backend's kernel names (cuda_names.h).
 */
#include "cuda_names.h"

#include "core/strbuf.h"

void cuda_kernel_name(const cuda_name_parts *n, char *out, size_t size) {
  fa_strbuf b = fa_strbuf_of(out, size);
  fa_strbuf_put(&b, "cuda.");
  fa_strbuf_put(&b, n->family);
  fa_strbuf_put(&b, ".");
  fa_strbuf_put(&b, n->op);
  fa_strbuf_put(&b, ".");
  fa_strbuf_put(&b, n->dtype);
  fa_strbuf_put(&b, ".hd");
  fa_strbuf_int(&b, n->head_dim);
  if (n->rows16) fa_strbuf_put(&b, ".rows16");
  if (n->halves) fa_strbuf_put(&b, ".halves");
  if (n->bulk) fa_strbuf_put(&b, ".bulk");
  if (n->causal) fa_strbuf_put(&b, ".causal");
  if (n->window) fa_strbuf_put(&b, ".window");
  if (n->softcap) fa_strbuf_put(&b, ".softcap");
  if (n->varlen) fa_strbuf_put(&b, ".varlen");
  if (n->paged) fa_strbuf_put(&b, ".paged");
  if (n->splits > 1) {
    fa_strbuf_put(&b, ".split");
    fa_strbuf_int(&b, n->splits);
  }
  if (n->kvcache) fa_strbuf_put(&b, ".kvcache");
  if (n->pack > 1) {
    fa_strbuf_put(&b, ".gqa");
    fa_strbuf_int(&b, n->pack);
  }
}
