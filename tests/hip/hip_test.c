/* hip_test.c: see hip_test.h. */
#include "hip_test.h"

#include <stdint.h>
#include <string.h>

int hip_test_failures;

static void tensor4(fa_tensor *t, int64_t b, int64_t s, int64_t h, int64_t d, fa_device_kind k) {
  memset(t, 0, sizeof *t);
  t->data = (void *)(uintptr_t)0x10000;
  t->device.kind = k;
  t->dtype = FA_BF16;
  t->ndim = 4;
  int64_t shape[4] = {b, s, h, d};
  memcpy(t->shape, shape, sizeof shape);
  t->strides[3] = 1;
  t->strides[2] = d;
  t->strides[1] = h * d;
  t->strides[0] = s * h * d;
}

fa_request *make_req(req_store *s, fa_op op, int64_t d, int64_t hq, int64_t hkv,
                     fa_device_kind kind) {
  memset(s, 0, sizeof *s);
  fa_params_init(&s->p);
  tensor4(&s->q, 2, 100, hq, d, kind);
  tensor4(&s->k, 2, 70, hkv, d, kind);
  s->v = s->k;
  s->o = s->q;
  s->r.op = op;
  s->r.params = &s->p;
  s->r.q = &s->q;
  s->r.k = &s->k;
  s->r.v = &s->v;
  s->r.out = &s->o;
  s->r.lse = &s->lse;
  if (op == FA_OP_BACKWARD) {
    s->dq = s->q;
    s->dk = s->k;
    s->dv = s->k;
    s->dout = s->q;
    s->r.dq = &s->dq;
    s->r.dk = &s->dk;
    s->r.dv = &s->dv;
    s->r.dout = &s->dout;
  }
  s->r.dtype = FA_BF16;
  s->r.device.kind = kind;
  s->r.batch = 2;
  s->r.seqlen_q = 100;
  s->r.seqlen_k = 70;
  s->r.heads_q = hq;
  s->r.heads_kv = hkv;
  s->r.head_dim = s->r.head_dim_v = d;
  s->r.scale = 0.125f;
  return &s->r;
}
