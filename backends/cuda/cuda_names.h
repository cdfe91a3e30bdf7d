/*
 * cuda_names.h: the CUDA backend's kernel names (docs/backends.md lists them), built without
 * printf (core/strbuf.h), since a name is made for the run report on every call.
 */
#ifndef FA_CUDA_NAMES_H
#define FA_CUDA_NAMES_H

#include <stddef.h>
#include <stdint.h>

typedef struct cuda_name_parts {
  const char *family; /* "fa2.sm80" or "fa3.sm90" */
  const char *op;     /* "fwd" or "bwd" */
  const char *dtype;  /* "f16", "bf16" */
  int64_t head_dim;
  int rows16, halves, bulk, causal, window, softcap, varlen, paged, kvcache; /* suffixes when set */
  int splits, pack; /* ".split<S>", ".gqa<P>" when above 1 */
} cuda_name_parts;

/* cuda.<family>.<op>.<dtype>.hd<D>, then in this order: .rows16 .halves .bulk .causal .window
   .softcap .varlen .paged .split<S> .kvcache .gqa<P>. */
void cuda_kernel_name(const cuda_name_parts *n, char *out, size_t size);

#endif /* FA_CUDA_NAMES_H */
