/*
 * aliasing.c: test_errors' cases of memory shared where it must not be: an output that shares
 * memory with an input or with another output (refused, naming both), and fields a backend does
 * not honour (a CPU tensor's device id other than 0, a stream on the CPU backend).
 */
#include "test_errors.h"

/* Tensor `to` made a view of `from`'s memory (its own shape and strides kept). */
static void alias(call *c, int to, int from) {
  c->view[to].data = c->view[from].data;
  c->view[to].byte_offset = c->view[from].byte_offset;
}

static void m_out_is_k(call *c, fixture *f) { (void)f, alias(c, T_OUT, T_K); }
static void m_out_is_q(call *c, fixture *f) { (void)f, alias(c, T_OUT, T_Q); }
static void m_out_is_v(call *c, fixture *f) { (void)f, alias(c, T_OUT, T_V); }
static void m_lse_in_out(call *c, fixture *f) { (void)f, alias(c, T_LSE, T_OUT); }
/* out starting inside k's last element's row: the ranges overlap by a few bytes only. */
static void m_out_tail_of_k(call *c, fixture *f) {
  (void)f;
  alias(c, T_OUT, T_K);
  const fa_tensor *k = &c->view[T_K];
  int64_t last = 0;
  for (int d = 0; d < k->ndim; ++d) last += (k->shape[d] - 1) * k->strides[d];
  c->view[T_OUT].byte_offset += (uint64_t)last * sizeof(float);
}
static void m_dq_is_dk(call *c, fixture *f) { (void)f, alias(c, T_DQ, T_DK); }
static void m_dk_is_k(call *c, fixture *f) { (void)f, alias(c, T_DK, T_K); }
static void m_dv_is_dout(call *c, fixture *f) { (void)f, alias(c, T_DV, T_DOUT); }
static void m_dq_is_q(call *c, fixture *f) { (void)f, alias(c, T_DQ, T_Q); }
static void m_dq_is_lse(call *c, fixture *f) { (void)f, alias(c, T_DQ, T_LSE); }
static void m_q_device7(call *c, fixture *f) {
  (void)f;
  for (int i = 0; i < T_COUNT; ++i) c->view[i].device.id = 7;
}
static void m_out_device1(call *c, fixture *f) { (void)f, c->view[T_OUT].device.id = 1; }
static void m_cpu_stream(call *c, fixture *f) {
  (void)f;
  c->params.backend = FA_BACKEND_CPU;
  c->params.strict = 1;
  c->params.stream = (void *)(uintptr_t)1;
}

void run_aliasing(fixture *f) {
  const unsigned refused = S(FA_ERR_UNSUPPORTED) | S(FA_ERR_BACKEND_UNAVAILABLE);
  const spec specs[] = {
      {OP_FWD, "out in k's memory", m_out_is_k, ACCEPT_INVALID, 0, 0, "out|k"},
      {OP_FWD, "out in q's memory", m_out_is_q, ACCEPT_INVALID, 0, 0, "out|q"},
      {OP_FWD, "out in v's memory", m_out_is_v, ACCEPT_INVALID, 0, 0, "out|v"},
      {OP_FWD, "out overlapping k's last element", m_out_tail_of_k, ACCEPT_INVALID, 0, 0, "out|k"},
      {OP_FWD, "lse in out's memory", m_lse_in_out, ACCEPT_INVALID, 0, 0, "lse|out"},
      {OP_BWD, "dq in dk's memory", m_dq_is_dk, ACCEPT_INVALID, 0, 0, "dq|dk"},
      {OP_BWD, "dk in k's memory", m_dk_is_k, ACCEPT_INVALID, 0, 0, "dk|k"},
      {OP_BWD, "dv in dout's memory", m_dv_is_dout, ACCEPT_INVALID, 0, 0, "dv|dout"},
      {OP_BWD, "dq in q's memory", m_dq_is_q, ACCEPT_INVALID, 0, 0, "dq|q"},
      {OP_BWD, "dq in lse's memory", m_dq_is_lse, ACCEPT_INVALID, 0, 0, "dq|lse"},
      {OP_FWD, "CPU tensors with device.id 7", m_q_device7, ACCEPT_INVALID, 0, 0, "~device.id"},
      {OP_FWD, "out with device.id 1, q 0", m_out_device1, ACCEPT_INVALID, 0, 0, "out"},
      {OP_FWD, "params.stream on the CPU backend", m_cpu_stream, refused, 0, 0, "~params.stream"},
      {OP_BWD, "params.stream on the CPU backend", m_cpu_stream, refused, 0, 0, "~params.stream"},
  };
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; ++i) run_case(f, &specs[i]);
}
