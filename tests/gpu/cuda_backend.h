/*
 * cuda_backend.h: the GPU test programs' first step: the cuda backend's description from
 * fa_backend_info, or why the program cannot run (header-only, for the programs in tests/gpu).
 */
#ifndef FA_TESTS_GPU_CUDA_BACKEND_H
#define FA_TESTS_GPU_CUDA_BACKEND_H

#include <stdio.h>

#include "flash_attn.h"

/* 0 with *out the cuda backend's description when it is available; else what the program should
   exit with, after printing why: 77 (a skip) when the backend cannot run here, 1 when
   fa_backend_info itself fails. */
static int cuda_backend_or_skip(fa_backend_desc *out) {
  fa_backend_desc descs[FA_BACKEND_COUNT_ + 4];
  int32_t count = 0;
  const int32_t n = (int32_t)(sizeof descs / sizeof descs[0]);
  for (int32_t i = 0; i < n; ++i) fa_backend_desc_init(&descs[i]);
  if (fa_backend_info(descs, n, &count) != FA_OK) {
    printf("FAIL fa_backend_info: %s\n", fa_last_error());
    return 1;
  }
  for (int32_t i = 0; i < count && i < n; ++i)
    if (descs[i].id == FA_BACKEND_CUDA) {
      if (!descs[i].available) break;
      *out = descs[i];
      return 0;
    }
  for (int32_t i = 0; i < count && i < n; ++i)
    if (descs[i].id == FA_BACKEND_CUDA) {
      printf("SKIP: cuda: %s\n", descs[i].reason);
      return 77;
    }
  printf("SKIP: cuda: not known to this library\n");
  return 77;
}

#endif /* FA_TESTS_GPU_CUDA_BACKEND_H */
