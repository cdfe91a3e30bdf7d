/*
 * test_broadcast.c: inputs whose K and V repeat one row across a dimension through a stride of 0
 * (inputs may alias; only outputs may not), on the CPU backend, every element against the
 * float64 reference with the suite's pass rule (tests/reference.h) and the run report checked:
 *
 *   decoding (fa_forward_kvcache, one query row, MHA: the token-major row path) over a cache of
 *   one head whose head stride is 0 (a size-1 dimension may have any stride; the row path once
 *   divided by it);
 *   fa_forward (the tiled path) with K/V head stride 0 over 4 heads, at 1 and 40 query rows.
 * A cache is written by the call, so a cache that repeats a slice of 2 or more (head or batch
 * stride 0) is refused with FA_ERR_INVALID_ARGUMENT naming the stride, outputs untouched.
 *
 * bf16 and f32. Inputs are fresh random values from the run seed (printed; FA_TEST_SEED replays
 * it); outputs are poisoned first.
 */
#include <stdio.h>
#include <string.h>

#include "flash_attn.h"
#include "reference.h"
#include "check_count.h"
#include "tensor_util.h"

typedef struct shape {
  const char *name;
  int64_t b, sq, sk, h, d;
  int zero_dim; /* the K/V dimension whose stride is 0: 0 batch, 2 heads */
  int kvcache;  /* fa_forward_kvcache over the first sk - 13 b keys of sequence b; refused where
                   the repeated dimension has an extent of 2 or more */
} shape;

/* A [b, s, h, d] tensor of dtype dt whose dimension zd repeats one slice: the data of a tensor
   with extent 1 there, seen with extent n and stride 0. */
static int alloc_repeated(tu_tensor *x, fa_dtype dt, const int64_t full[4], int zd, tu_rng *r) {
  int64_t one[4] = {full[0], full[1], full[2], full[3]};
  one[zd] = 1;
  if (tu_alloc(x, dt, 4, one, TU_CONTIGUOUS)) return -1;
  tu_fill_random(x, r);
  x->t.shape[zd] = full[zd];
  x->t.strides[zd] = 0;
  return 0;
}

static void run(const shape *s, fa_dtype dt) {
  char name[96];
  snprintf(name, sizeof name, "%s.%s", s->name, tu_dtype_name(dt));
  tu_rng r;
  tu_rng_init(&r, tu_seed_for(tu_run_seed(), name));
  const int64_t qs[4] = {s->b, s->sq, s->h, s->d}, ks[4] = {s->b, s->sk, s->h, s->d};
  const int64_t ls[3] = {s->b, s->h, s->sq};
  tu_tensor q = {0}, k = {0}, v = {0}, out = {0}, lse = {0};
  if (tu_alloc(&q, dt, 4, qs, TU_CONTIGUOUS) || alloc_repeated(&k, dt, ks, s->zero_dim, &r) ||
      alloc_repeated(&v, dt, ks, s->zero_dim, &r) || tu_alloc(&out, dt, 4, qs, TU_CONTIGUOUS) ||
      tu_alloc(&lse, FA_F32, 3, ls, TU_CONTIGUOUS)) {
    CHECK(0, "%s: allocation", name);
    goto done;
  }
  tu_fill_random(&q, &r);
  tu_poison(&out);
  tu_poison(&lse);

  fa_params pa;
  fa_params_init(&pa);
  pa.backend = FA_BACKEND_CPU;
  pa.strict = 1;
  fa_run_info info;
  fa_run_info_init(&info);
  int64_t lens[2] = {s->sk, s->sk};
  int32_t cache_len[2];
  fa_status st;
  if (s->kvcache) {
    for (int64_t b = 0; b < s->b; ++b) cache_len[b] = (int32_t)(lens[b] = s->sk - 13 * b);
    const int64_t nb = s->b;
    const fa_tensor seqlens = tu_view(cache_len, FA_I32, (fa_device){FA_DEVICE_CPU, 0}, 1, &nb);
    fa_kvcache_args kv;
    fa_kvcache_args_init(&kv);
    kv.cache_seqlens = &seqlens;
    st = fa_forward_kvcache(&pa, &q.t, &k.t, &v.t, &kv, &out.t, &lse.t, &info);
  } else {
    st = fa_forward(&pa, &q.t, &k.t, &v.t, &out.t, &lse.t, &info);
  }
  const int64_t extent = s->zero_dim == 0 ? s->b : s->h;
  if (s->kvcache && extent > 1) {
    char want[64];
    snprintf(want, sizeof want, "k_cache.strides[%d] = 0", s->zero_dim);
    char why[256];
    CHECK(st == FA_ERR_INVALID_ARGUMENT && strstr(fa_last_error(), want),
          "%s: a cache repeating one slice: %s, '%s'", name, fa_status_string(st), fa_last_error());
    CHECK(tu_unchanged(&out, why, sizeof why) && tu_unchanged(&lse, why, sizeof why),
          "%s: refused call wrote an output: %s", name, why);
    printf("%-28s refused: %s\n", name, fa_last_error());
    goto done;
  }
  CHECK(st == FA_OK, "%s: %s", name, fa_last_error());
  if (st != FA_OK) goto done;
  /* the path meant to run: one query row reads K/V rows in place (".rows"), many the tiles */
  const int rows_path = strstr(info.kernel, ".rows") != NULL;
  CHECK(!strncmp(info.kernel, "cpu.", 4) && rows_path == s->kvcache, "%s: kernel %s", name,
        info.kernel);

  const ref_problem p = {s->b, s->sq, s->sk, s->h, s->h, s->d, s->d, ref_resolve_scale(0.0f, s->d),
                         0,    0};
  ref_result r64 = {0}, naive = {0};
  ref_ext x;
  memset(&x, 0, sizeof x);
  x.lens_k = lens;
  if (ref_attention_ext(&p, &x, REF_F64, &q, &k, &v, NULL, &r64, 1) ||
      ref_attention_ext(&p, &x, REF_STORAGE, &q, &k, &v, NULL, &naive, 1)) {
    CHECK(0, "%s: reference", name);
  } else {
    ref_check c;
    ref_check_output(&out, &r64, &naive, REF_OUT, NULL, dt, &c);
    CHECK(c.pass, "%s: out error %.3g > tolerance %.3g (%s)", name, c.max_err, c.tol, c.why);
    ref_check_output(&lse, &r64, &naive, REF_LSE, NULL, FA_F32, &c);
    CHECK(c.pass, "%s: lse error %.3g > tolerance %.3g (%s)", name, c.max_err, c.tol, c.why);
    printf("%-28s %-40s ok\n", name, info.kernel);
  }
  ref_result_free(&r64);
  ref_result_free(&naive);
done:
  tu_free(&q);
  tu_free(&k);
  tu_free(&v);
  tu_free(&out);
  tu_free(&lse);
}

int main(void) {
  printf("test_broadcast: seed %llu\n", (unsigned long long)tu_run_seed());
  static const shape shapes[] = {
      {"decode.one_head", 1, 1, 300, 1, 64, 2, 1},
      {"decode.one_head.hd128", 2, 1, 200, 1, 128, 2, 1},
      {"decode.heads0", 1, 1, 300, 4, 64, 2, 1},
      {"decode.batch0", 2, 1, 200, 4, 128, 0, 1},
      {"fwd.one_row.heads0", 1, 1, 300, 4, 64, 2, 0},
      {"prefill.heads0", 1, 40, 300, 4, 64, 2, 0},
  };
  const fa_dtype dts[] = {FA_BF16, FA_F32};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i)
    for (size_t j = 0; j < sizeof dts / sizeof dts[0]; ++j) run(&shapes[i], dts[j]);
  return check_count_summary("test_broadcast");
}
