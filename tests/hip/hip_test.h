/*
 * hip_test.h: what the HIP tests that call the generic family's decide and run rules directly
 * share (test_hip_info.c, test_hip_bwd_tiles.c): a failure counter with its CHECK, and requests
 * as core/validate hands them to a plugin.
 */
#ifndef FA_TESTS_HIP_TEST_H
#define FA_TESTS_HIP_TEST_H

#include <stdio.h>

#include "core/plugin.h"

extern int hip_test_failures;

#define CHECK(cond, ...)                          \
  do {                                            \
    if (!(cond)) {                                \
      ++hip_test_failures;                        \
      printf("FAIL %s:%d: ", __FILE__, __LINE__); \
      printf(__VA_ARGS__);                        \
      printf("\n");                               \
    }                                             \
  } while (0)

/* A request as core/validate hands it to a plugin: contiguous [b, s, h, d] tensors. */
typedef struct req_store {
  fa_params p;
  fa_tensor q, k, v, o, lse, dq, dk, dv, dout;
  fa_request r;
} req_store;

/* A bf16 request of batch 2, seqlen_q 100, seqlen_k 70, contiguous [b, s, h, d] tensors at a
   fake device address (decide reads, never dereferences them), softmax scale 0.125; s->p holds
   the fa_params (defaults) for the caller to change. */
fa_request *make_req(req_store *s, fa_op op, int64_t d, int64_t hq, int64_t hkv,
                     fa_device_kind kind);

#endif /* FA_TESTS_HIP_TEST_H */
