/*
 * test_errors.c: every argument of fa_forward / fa_backward made invalid in turn (the tensor
 * cases below; the parameter cases in tests/test_errors/params.c, the kvcache, varlen, paged,
 * ALiBi and seqused_k cases in tests/test_errors/features.c).
 *
 * Each case starts from one valid call (small shapes, f32, CPU) and breaks one thing. It expects
 * the documented status, a message from fa_last_error() that names the argument, every output
 * buffer bitwise untouched (the failure must be found before anything is written) and every input
 * unchanged. fa_plan_* and fa_*_workspace_size get the same arguments and must fail the same way
 * ("fails exactly when fa_forward would fail before computing, with the same message").
 * The same holds for fa_forward_kvcache (the caches untouched too), packed (varlen) and paged
 * calls, ALiBi slopes and seqused_k.
 */
#include <stdio.h>

#include "flash_attn.h"
#include "test_errors/test_errors.h"

/* ----------------------------------------------------------------------------------------------
 * Tensor mutations, described by data: which tensor, which field, which value.
 * -------------------------------------------------------------------------------------------- */

typedef enum what {
  W_NULL,      /* the tensor pointer is NULL */
  W_NDIM,      /* ndim = value */
  W_SHAPE,     /* shape[dim] = value */
  W_STRIDE,    /* strides[dim] = value */
  W_NEGSTRIDE, /* strides[dim] negated */
  W_DTYPE,     /* dtype = value */
  W_DEVICE,    /* device.kind = value */
  W_DATA_NULL, /* data = NULL (the tensor still has elements) */
  W_OFFSET     /* byte_offset += value */
} what;

typedef struct tmut {
  op_kind op;
  int tensor;
  what what;
  int dim;
  int64_t value;
  int tensor2; /* a second tensor given the same change, or -1 */
  const char *names;
  const char *label;
} tmut;

static const tmut *g_tm; /* the mutation run_case is applying */

static void apply_one(call *c, int i, const tmut *m) {
  fa_tensor *t = &c->view[i];
  switch (m->what) {
    case W_NULL:
      c->arg[i] = NULL;
      break;
    case W_NDIM:
      t->ndim = (int32_t)m->value;
      break;
    case W_SHAPE:
      t->shape[m->dim] = m->value;
      break;
    case W_STRIDE:
      t->strides[m->dim] = m->value;
      break;
    case W_NEGSTRIDE:
      t->strides[m->dim] = -t->strides[m->dim];
      break;
    case W_DTYPE:
      t->dtype = (fa_dtype)m->value;
      break;
    case W_DEVICE:
      t->device.kind = (fa_device_kind)m->value;
      break;
    case W_DATA_NULL:
      t->data = NULL;
      t->byte_offset = 0;
      break;
    case W_OFFSET:
      t->byte_offset += (uint64_t)m->value;
      break;
  }
}

static void mut_table(call *c, fixture *f) {
  (void)f;
  apply_one(c, g_tm->tensor, g_tm);
  if (g_tm->tensor2 >= 0) apply_one(c, g_tm->tensor2, g_tm);
}

/* A batch of 1 whose k.strides[0] in bytes overflows 64 bits: that dimension reaches nothing, so
   only the stride's own check refuses it (a backend scales every stride to bytes). */
static void mut_size1_stride(call *c, fixture *f) {
  (void)f;
  for (int i = T_Q; i <= T_LSE; ++i) c->view[i].shape[0] = 1;
  c->view[T_K].strides[0] = INT64_C(1) << 62;
}

static void run_table(fixture *f, const tmut *tab, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    g_tm = &tab[i];
    spec sp = {tab[i].op, tab[i].label, mut_table, ACCEPT_INVALID, 0, 0, tab[i].names};
    run_case(f, &sp);
  }
}

int main(void) {
  uint64_t seed = tu_run_seed();
  fixture f;
  if (fixture_init(&f)) {
    printf("test_errors: out of memory\ntest_errors: 0 passed, 1 failed\n");
    return 1;
  }

  /* The sizes are distinct, so a value changed to another dimension's size is still wrong. */
  static const tmut fwd[] = {
      {OP_FWD, T_Q, W_NULL, 0, 0, -1, "q", "q NULL"},
      {OP_FWD, T_K, W_NULL, 0, 0, -1, "k", "k NULL"},
      {OP_FWD, T_V, W_NULL, 0, 0, -1, "v", "v NULL"},
      {OP_FWD, T_OUT, W_NULL, 0, 0, -1, "out", "out NULL"},
      {OP_FWD, T_Q, W_NDIM, 0, 3, -1, "q", "q.ndim 3 (no cu_seqlens)"},
      {OP_FWD, T_Q, W_NDIM, 0, 5, -1, "q", "q.ndim 5"},
      {OP_FWD, T_K, W_NDIM, 0, 0, -1, "k", "k.ndim 0"},
      {OP_FWD, T_OUT, W_NDIM, 0, 2, -1, "out", "out.ndim 2"},
      {OP_FWD, T_K, W_SHAPE, 3, D + 1, -1, "k.shape[3]|q.shape[3]", "k head_dim != q head_dim"},
      {OP_FWD, T_K, W_SHAPE, 2, 4, T_V, "k.shape[2]|q.shape[2]",
       "heads_q 6 not a multiple of heads_kv 4"},
      {OP_FWD, T_K, W_SHAPE, 0, B + 1, -1, "k.shape[0]|v.shape[0]|q.shape[0]", "k batch mismatch"},
      {OP_FWD, T_Q, W_SHAPE, 0, 1, -1, "q.shape[0]|k.shape[0]|out.shape[0]", "q batch mismatch"},
      {OP_FWD, T_V, W_SHAPE, 1, SK - 1, -1, "v.shape[1]|k.shape[1]", "v seqlen != k seqlen"},
      {OP_FWD, T_V, W_SHAPE, 2, 1, -1, "v.shape[2]|k.shape[2]", "v heads != k heads"},
      {OP_FWD, T_V, W_SHAPE, 3, DV + 2, -1, "v.shape[3]|out.shape[3]", "v head_dim != out's"},
      {OP_FWD, T_OUT, W_SHAPE, 1, SQ - 1, -1, "out", "out seqlen wrong"},
      {OP_FWD, T_OUT, W_SHAPE, 2, HKV, -1, "out", "out heads wrong"},
      {OP_FWD, T_OUT, W_SHAPE, 3, DV + 1, -1, "out", "out head_dim wrong"},
      {OP_FWD, T_LSE, W_SHAPE, 1, HKV, -1, "lse", "lse heads wrong"},
      {OP_FWD, T_LSE, W_SHAPE, 2, SQ + 1, -1, "lse", "lse seqlen wrong"},
      {OP_FWD, T_LSE, W_NDIM, 0, 4, -1, "lse", "lse.ndim 4"},
      {OP_FWD, T_LSE, W_DTYPE, 0, FA_F16, -1, "lse", "lse dtype f16"},
      {OP_FWD, T_K, W_DTYPE, 0, FA_F16, -1, "k", "k f16 with q f32"},
      {OP_FWD, T_OUT, W_DTYPE, 0, FA_BF16, -1, "out", "out bf16 with q f32"},
      {OP_FWD, T_Q, W_DTYPE, 0, FA_I32, T_K, "q", "q,k int32"},
      {OP_FWD, T_Q, W_DTYPE, 0, 0, -1, "q", "q dtype invalid (0)"},
      {OP_FWD, T_Q, W_DTYPE, 0, 77, -1, "q", "q dtype 77"},
      {OP_FWD, T_K, W_DEVICE, 0, FA_DEVICE_CUDA, -1, "k", "k on a CUDA device, q on CPU"},
      {OP_FWD, T_OUT, W_DEVICE, 0, FA_DEVICE_OPENCL, -1, "out", "out on OpenCL, q on CPU"},
      {OP_FWD, T_Q, W_DEVICE, 0, 0, -1, "q", "q device kind invalid (0)"},
      {OP_FWD, T_K, W_NEGSTRIDE, 1, 0, -1, "k", "k negative stride[1]"},
      {OP_FWD, T_Q, W_STRIDE, 3, -1, -1, "q", "q stride[3] -1"},
      {OP_FWD, T_Q, W_SHAPE, 1, -1, -1, "q", "q negative shape[1]"},
      {OP_FWD, T_V, W_SHAPE, 3, -8, -1, "v", "v negative shape[3]"},
      {OP_FWD, T_Q, W_DATA_NULL, 0, 0, -1, "q", "q data NULL"},
      {OP_FWD, T_V, W_DATA_NULL, 0, 0, -1, "v", "v data NULL"},
      {OP_FWD, T_OUT, W_DATA_NULL, 0, 0, -1, "out", "out data NULL"},
      {OP_FWD, T_LSE, W_DATA_NULL, 0, 0, -1, "lse", "lse data NULL"},
      /* Outputs whose strides make two elements share memory (documented as invalid). */
      {OP_FWD, T_OUT, W_STRIDE, 3, 0, -1, "out", "out stride[3] 0 (aliasing)"},
      {OP_FWD, T_LSE, W_STRIDE, 2, 0, -1, "lse", "lse stride[2] 0 (aliasing)"},
      /* Elements not aligned to their size. */
      {OP_FWD, T_Q, W_OFFSET, 0, 2, -1, "q", "q byte_offset 2 (misaligned f32)"},
      {OP_FWD, T_LSE, W_OFFSET, 0, 1, -1, "lse", "lse byte_offset 1 (misaligned)"},
      /* Sizes whose byte counts overflow 64 bits are refused before anything is touched. */
      {OP_FWD, T_K, W_SHAPE, 1, INT64_C(1) << 61, T_V, "k", "k seqlen 2^61 (bytes overflow)"},
      {OP_FWD, T_Q, W_STRIDE, 0, INT64_C(1) << 62, -1, "q", "q stride[0] 2^62 (bytes overflow)"},
  };
  static const tmut bwd[] = {
      {OP_BWD, T_Q, W_NULL, 0, 0, -1, "q", "q NULL"},
      {OP_BWD, T_K, W_NULL, 0, 0, -1, "k", "k NULL"},
      {OP_BWD, T_V, W_NULL, 0, 0, -1, "v", "v NULL"},
      {OP_BWD, T_OUT, W_NULL, 0, 0, -1, "out", "out NULL"},
      {OP_BWD, T_LSE, W_NULL, 0, 0, -1, "lse", "lse NULL"},
      {OP_BWD, T_DOUT, W_NULL, 0, 0, -1, "dout", "dout NULL"},
      {OP_BWD, T_DQ, W_NULL, 0, 0, -1, "dq", "dq NULL"},
      {OP_BWD, T_DK, W_NULL, 0, 0, -1, "dk", "dk NULL"},
      {OP_BWD, T_DV, W_NULL, 0, 0, -1, "dv", "dv NULL"},
      {OP_BWD, T_K, W_SHAPE, 3, D + 1, T_DK, "k.shape[3]|q.shape[3]", "k head_dim != q head_dim"},
      {OP_BWD, T_DQ, W_SHAPE, 3, D + 1, -1, "dq", "dq head_dim != q's"},
      {OP_BWD, T_DQ, W_SHAPE, 1, SQ + 1, -1, "dq", "dq seqlen != q's"},
      {OP_BWD, T_DK, W_SHAPE, 1, SK - 1, -1, "dk", "dk seqlen != k's"},
      {OP_BWD, T_DK, W_SHAPE, 2, HQ, -1, "dk", "dk heads != k's"},
      {OP_BWD, T_DV, W_SHAPE, 3, DV + 1, -1, "dv", "dv head_dim != v's"},
      {OP_BWD, T_DOUT, W_SHAPE, 2, HKV, -1, "dout", "dout heads wrong"},
      {OP_BWD, T_DOUT, W_SHAPE, 3, DV + 1, -1, "dout", "dout head_dim wrong"},
      {OP_BWD, T_OUT, W_SHAPE, 1, SQ + 1, -1, "out", "out seqlen wrong"},
      {OP_BWD, T_LSE, W_SHAPE, 2, SQ - 1, -1, "lse", "lse seqlen wrong"},
      {OP_BWD, T_LSE, W_NDIM, 0, 4, -1, "lse", "lse.ndim 4"},
      {OP_BWD, T_LSE, W_DTYPE, 0, FA_F16, -1, "lse", "lse dtype f16"},
      {OP_BWD, T_DQ, W_DTYPE, 0, FA_F16, -1, "dq", "dq f16 with q f32"},
      {OP_BWD, T_DOUT, W_DTYPE, 0, FA_BF16, -1, "dout", "dout bf16 with q f32"},
      {OP_BWD, T_DK, W_DEVICE, 0, FA_DEVICE_CUDA, -1, "dk", "dk on a CUDA device"},
      {OP_BWD, T_DOUT, W_NEGSTRIDE, 1, 0, -1, "dout", "dout negative stride[1]"},
      {OP_BWD, T_DV, W_SHAPE, 0, -2, -1, "dv", "dv negative shape[0]"},
      {OP_BWD, T_DQ, W_DATA_NULL, 0, 0, -1, "dq", "dq data NULL"},
      {OP_BWD, T_LSE, W_DATA_NULL, 0, 0, -1, "lse", "lse data NULL"},
      {OP_BWD, T_DV, W_STRIDE, 3, 0, -1, "dv", "dv stride[3] 0 (aliasing)"},
      {OP_BWD, T_DK, W_STRIDE, 1, 0, -1, "dk", "dk stride[1] 0 (aliasing)"},
  };

  run_params(&f, OP_FWD);
  run_table(&f, fwd, sizeof fwd / sizeof fwd[0]);
  const spec size1 = {OP_FWD,
                      "k stride[0] 2^62 over a batch of 1 (byte stride overflows)",
                      mut_size1_stride,
                      ACCEPT_INVALID,
                      0,
                      0,
                      "k.strides[0]"};
  run_case(&f, &size1);
  run_params(&f, OP_BWD);
  run_table(&f, bwd, sizeof bwd / sizeof bwd[0]);
  run_aliasing(&f);
  run_features();

  fixture_free(&f);
  fa_release();
  if (g_fail)
    printf("replay with FA_TEST_SEED=%llu (the inputs only; the checks do not depend on them)\n",
           (unsigned long long)seed);
  printf("test_errors: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
