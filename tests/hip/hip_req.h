/*
 * hip_req.h: requests as core/validate hands them to a plugin, for the HIP tests that call the
 * generic family's decide and run rules directly (test_hip_info.c, test_hip_bwd_tiles.c).
 */
#ifndef FA_TESTS_HIP_REQ_H
#define FA_TESTS_HIP_REQ_H

#include "core/plugin.h"

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

#endif /* FA_TESTS_HIP_REQ_H */
