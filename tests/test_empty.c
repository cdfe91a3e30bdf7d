/*
 * test_empty.c: empty tensors whose data is NULL, as api/flash_attn.h allows, on every backend
 * present (cpu, and opencl, cuda, hip where this machine runs them): a forward without query rows,
 * a forward of batch 0, a forward without keys (outputs 0 and LSE -inf), a backward without query
 * rows (dK and dV 0). Each call is made with the backend named and strict, and must return FA_OK,
 * run on that backend, and write exactly what the convention says into outputs poisoned first.
 * A backend that is not available is skipped with its reason.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "tensor_util.h"
#include "device_mem.h"

enum { H = 2, D = 16 };

typedef struct ctx {
  fa_device dev;
  int32_t backend;
  fa_dtype dtype;
} ctx;

/* A [b, s, H, D] tensor (lse: [b, H, s] float32) on the context's device; data NULL when empty,
   else allocated and filled with `fill` bytes. */
static fa_tensor make(const ctx *c, int lse, int64_t b, int64_t s, int fill, char *err, size_t n) {
  fa_tensor t;
  memset(&t, 0, sizeof t);
  t.device = c->dev;
  t.dtype = lse ? FA_F32 : c->dtype;
  t.ndim = lse ? 3 : 4;
  const int64_t shape4[4] = {b, s, H, D}, shape3[3] = {b, H, s};
  for (int i = 0; i < t.ndim; ++i) t.shape[i] = lse ? shape3[i] : shape4[i];
  int64_t stride = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.strides[i] = stride;
    stride *= t.shape[i] > 0 ? t.shape[i] : 1;
  }
  const int64_t numel = b * s * H * D / (lse ? D : 1);
  if (numel > 0) {
    const size_t bytes = (size_t)numel * fa_dtype_size(t.dtype);
    void *p = NULL;
    if (devmem_alloc(c->dev, bytes, &p, err, n) != 0 ||
        devmem_memset(c->dev, p, fill, bytes, err, n) != 0)
      test_fail("%s", err);
    t.data = p;
  }
  return t;
}

static void release(const ctx *c, fa_tensor *t) {
  if (t->data) devmem_free(c->dev, t->data, NULL, 0);
  t->data = NULL;
}

static size_t numel_of(const fa_tensor *t) {
  size_t n = 1;
  for (int i = 0; i < t->ndim; ++i) n *= (size_t)t->shape[i];
  return n;
}

/* Every element of t (an output) as the convention says: 0, or -inf for an LSE. */
static void expect_written(const ctx *c, const char *what, const fa_tensor *t, int lse) {
  const size_t n = numel_of(t), esize = fa_dtype_size(t->dtype);
  unsigned char host[4 * 2 * H * D * 8];
  char err[256];
  if (n * esize > sizeof host) return test_fail("%s: too large for the check", what);
  if (devmem_copy_to_host(c->dev, host, t->data, n * esize, err, sizeof err) != 0)
    return test_fail("%s: %s", what, err);
  for (size_t i = 0; i < n; ++i) {
    if (lse) {
      float x;
      memcpy(&x, host + 4 * i, 4);
      if (!(isinf(x) && x < 0)) return test_fail("%s[%zu] = %g, expected -inf", what, i, x);
    } else {
      for (size_t j = 0; j < esize; ++j)
        if (host[i * esize + j] != 0) return test_fail("%s[%zu] is not 0", what, i);
    }
  }
}

static void expect_ran(const char *what, fa_status st, const fa_run_info *info, const ctx *c) {
  if (st != FA_OK) return test_fail("%s: %s: %s", what, fa_status_string(st), fa_last_error());
  if (info->backend != c->backend)
    test_fail("%s ran on %s, not %s", what, info->backend_name, fa_backend_name(c->backend));
}

static void run_cases(const ctx *c) {
  char err[256], name[96];
  snprintf(name, sizeof name, "%s: empty tensors with NULL data", fa_backend_name(c->backend));
  test_case_begin(name);
  fa_params p;
  fa_params_init(&p);
  p.backend = c->backend;
  p.strict = 1;
  if (devmem_stream(c->dev, &p.stream, err, sizeof err) != 0) test_fail("%s", err);
  fa_run_info info;
  fa_run_info_init(&info);

  /* No query rows: q, out and lse empty and NULL, k and v real. */
  fa_tensor q = make(c, 0, 2, 0, 0, err, sizeof err), k = make(c, 0, 2, 8, 0x3c, err, sizeof err);
  fa_tensor v = make(c, 0, 2, 8, 0x3c, err, sizeof err), out = make(c, 0, 2, 0, 0, err, sizeof err);
  fa_tensor lse = make(c, 1, 2, 0, 0, err, sizeof err);
  expect_ran("forward without query rows", fa_forward(&p, &q, &k, &v, &out, &lse, &info), &info, c);
  release(c, &k), release(c, &v);

  /* Batch 0: every tensor empty and NULL. */
  fa_tensor q0 = make(c, 0, 0, 8, 0, err, sizeof err), o0 = make(c, 0, 0, 8, 0, err, sizeof err);
  fa_tensor l0 = make(c, 1, 0, 8, 0, err, sizeof err);
  expect_ran("forward of batch 0", fa_forward(&p, &q0, &q0, &q0, &o0, &l0, &info), &info, c);

  /* No keys: k and v empty and NULL; out 0 and lse -inf where they were poisoned. */
  fa_tensor q5 = make(c, 0, 1, 5, 0x3c, err, sizeof err), k0 = make(c, 0, 1, 0, 0, err, sizeof err);
  fa_tensor o5 = make(c, 0, 1, 5, 0x7f, err, sizeof err),
            l5 = make(c, 1, 1, 5, 0x7f, err, sizeof err);
  fa_status st = fa_forward(&p, &q5, &k0, &k0, &o5, &l5, &info);
  expect_ran("forward without keys", st, &info, c);
  if (st == FA_OK) {
    devmem_sync(c->dev, NULL, 0);
    expect_written(c, "out (no keys)", &o5, 0);
    expect_written(c, "lse (no keys)", &l5, 1);
  }
  release(c, &q5), release(c, &o5), release(c, &l5);

  /* A backward without query rows: dk and dv 0 where they were poisoned. */
  fa_tensor k6 = make(c, 0, 1, 6, 0x3c, err, sizeof err),
            v6 = make(c, 0, 1, 6, 0x3c, err, sizeof err);
  fa_tensor dk = make(c, 0, 1, 6, 0x7f, err, sizeof err),
            dv = make(c, 0, 1, 6, 0x7f, err, sizeof err);
  fa_tensor qe = make(c, 0, 1, 0, 0, err, sizeof err), le = make(c, 1, 1, 0, 0, err, sizeof err);
  st = fa_backward(&p, &qe, &k6, &v6, &qe, &le, &qe, &qe, &dk, &dv, &info);
  expect_ran("backward without query rows", st, &info, c);
  if (st == FA_OK) {
    devmem_sync(c->dev, NULL, 0);
    expect_written(c, "dk (no query rows)", &dk, 0);
    expect_written(c, "dv (no query rows)", &dv, 0);
  }
  release(c, &k6), release(c, &v6), release(c, &dk), release(c, &dv);
  test_case_end();
}

int main(void) {
  const struct {
    int32_t backend;
    fa_device_kind kind;
    fa_dtype dtype;
  } all[] = {{FA_BACKEND_CPU, FA_DEVICE_CPU, FA_F32},
             {FA_BACKEND_OPENCL, FA_DEVICE_OPENCL, FA_F32},
             {FA_BACKEND_CUDA, FA_DEVICE_CUDA, FA_F16},
             {FA_BACKEND_HIP, FA_DEVICE_HIP, FA_F16}};
  for (size_t b = 0; b < sizeof all / sizeof all[0]; ++b) {
    fa_backend_desc d;
    const fa_status st = tu_backend_desc(all[b].backend, &d);
    if (st != FA_OK && st != FA_ERR_BACKEND_UNAVAILABLE) {
      printf("fa_backend_info: %s\n", fa_last_error());
      return 1;
    }
    const int listed = st == FA_OK;
    if (!listed || !d.available || !devmem_supported(all[b].kind)) {
      printf("skip %s: %s\n", fa_backend_name(all[b].backend),
             listed && !d.available ? d.reason : "no device memory of its kind in this build");
      continue;
    }
    ctx c = {{FA_DEVICE_CPU, 0}, all[b].backend, all[b].dtype};
    char err[256];
    if (devmem_default_device(all[b].kind, &c.dev, err, sizeof err) != 0) {
      printf("skip %s: %s\n", fa_backend_name(all[b].backend), err);
      continue;
    }
    run_cases(&c);
  }
  devmem_shutdown();
  return test_summary("test_empty");
}
