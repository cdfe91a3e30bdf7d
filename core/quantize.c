/*
 * quantize.c: fa_quantize, FP8 quantization with block descales and the incoherent processing
 * rotation (docs/fp8.md). The arguments are checked here, once; the backends that own the memory
 * are tried in order (the named one first, then AUTO's), each either running the call or refusing
 * it before writing anything.
 */
#include <stdio.h>
#include <string.h>

#include "validate.h"

void fa_quantize_args_init(fa_quantize_args *args) {
  if (!args) return;
  memset(args, 0, sizeof *args);
  args->struct_size = sizeof *args;
}

static int is_float(fa_dtype dt) { return dt == FA_F32 || dt == FA_F16 || dt == FA_BF16; }

static fa_status check_args(const fa_quantize_args *a) {
  if (a->block_rows < 0)
    return fa_core_set_error(INVALID, "args.block_rows = %lld is negative (0: one block)",
                             (long long)a->block_rows);
  if (a->backend < FA_BACKEND_AUTO || a->backend >= FA_BACKEND_COUNT_)
    return fa_core_set_error(INVALID, "args.backend = %d is not an fa_backend_id", (int)a->backend);
  return FA_OK;
}

static fa_status validate(const fa_quantize_args *a, const fa_tensor *x, const fa_tensor *y,
                          const fa_tensor *descale, fa_quantize_request *req) {
  TRY(check_args(a));
  TRY(fa_check_tensor("x", x, 4));
  if (!is_float(x->dtype))
    return fa_core_set_error(INVALID, "x.dtype = %s but must be f32, f16 or bf16",
                             fa_dtype_name(x->dtype));
  TRY(fa_check_tensor("y", y, 4));
  TRY(fa_expect_device("y", y, x->device));
  TRY(fa_expect_same_shape("y", y, "x", x));
  TRY(fa_check_no_self_overlap("y", y));
  const int fp8 = fa_dtype_is_fp8(y->dtype);
  if (!fp8 && !is_float(y->dtype))
    return fa_core_set_error(INVALID,
                             "y.dtype = %s but must be f8e4m3 or f8e5m2 (or f32, f16, bf16 to "
                             "rotate only)",
                             fa_dtype_name(y->dtype));
  if (x->shape[3] > FA_MAX_HEAD_DIM)
    return fa_core_set_error(INVALID, "x.shape[3] = %lld (head_dim) must be <= %d",
                             (long long)x->shape[3], FA_MAX_HEAD_DIM);
  memset(req, 0, sizeof *req);
  req->args = a;
  req->x = x;
  req->y = y;
  req->device = x->device;
  req->batch = x->shape[0];
  req->seqlen = x->shape[1];
  req->heads = x->shape[2];
  req->head_dim = x->shape[3];
  if (fp8) {
    if (!descale)
      return fa_core_set_error(INVALID,
                               "descale: NULL tensor but y.dtype = %s (FP8 values need their "
                               "descales)",
                               fa_dtype_name(y->dtype));
    TRY(fa_check_descale("descale", descale, x->device, req->batch, req->heads, "x.shape[2]",
                         req->seqlen, a->block_rows, "args.block_rows"));
    TRY(fa_check_no_self_overlap("descale", descale));
    req->descale = descale;
  } else if (descale || a->block_rows) {
    return fa_core_set_error(INVALID,
                             "%s is set but y.dtype = %s: descales and blocks belong to FP8 "
                             "output",
                             descale ? "descale" : "args.block_rows", fa_dtype_name(y->dtype));
  }
  if (a->rotate) {
    int32_t log2_dim = 0;
    while ((int64_t)1 << log2_dim < req->head_dim) ++log2_dim;
    if (req->head_dim > 0 && ((int64_t)1 << log2_dim) != req->head_dim)
      return fa_core_set_error(FA_ERR_UNSUPPORTED,
                               "x.shape[3] = %lld (head_dim) is not a power of two: the Hadamard "
                               "rotation (args.rotate) needs one (pad the head dim with zeros)",
                               (long long)req->head_dim);
    req->log2_dim = log2_dim;
  }
  const char *names[3];
  const fa_tensor *ts[3];
  int n = 0;
  names[n] = "y";
  ts[n++] = y;
  if (req->descale) {
    names[n] = "descale";
    ts[n++] = req->descale;
  }
  const int n_out = n;
  names[n] = "x";
  ts[n++] = x;
  return fa_check_outputs_apart(names, ts, n, n_out);
}

fa_status fa_quantize(const fa_quantize_args *args, const fa_tensor *x, fa_tensor *y,
                      fa_tensor *descale, fa_run_info *info) {
  fa_core_clear_error();
  TRY(fa_check_run_info(info));
  fa_quantize_args a;
  if (args) {
    TRY(fa_resolve_versioned("args", "fa_quantize_args", "fa_quantize_args_init()", args, sizeof a,
                             &a));
  } else {
    fa_quantize_args_init(&a);
  }
  fa_quantize_request req;
  TRY(validate(&a, x, y, descale, &req));

  int32_t order[FA_BACKEND_COUNT_];
  const int n = fa_backend_candidates(a.backend, req.device.kind, a.strict, order);
  if (n == 0)
    return fa_core_set_error(FA_ERR_BACKEND_UNAVAILABLE, "no backend computes on %s memory",
                             fa_device_kind_name(req.device.kind));
  char rejected[FA_REASON_LEN] = "";
  int any_refused = 0;
  for (int i = 0; i < n; ++i) {
    const fa_backend_slot *s = fa_registry_slot(order[i]);
    char why[FA_REASON_LEN];
    if (!fa_slot_usable(s, req.device.kind, why, sizeof why, &any_refused)) {
      /* unavailable, or not on this memory: why says which */
    } else if (!s->plugin->quantize) {
      snprintf(why, sizeof why, "fa_quantize is not offered by %s", s->name);
      any_refused = 1;
    } else {
      /* What the report says of an fa_quantize: its kernel, one piece, deterministic. */
      fa_decision ran;
      memset(&ran, 0, sizeof ran);
      ran.num_splits = 1;
      ran.deterministic = 1;
      fa_status st = s->plugin->quantize(&req, ran.kernel);
      if (st == FA_OK) {
        fa_fill_run_info(info, s, req.device, &ran, i > 0, rejected);
        return FA_OK;
      }
      if (st != FA_ERR_UNSUPPORTED) return st;
      snprintf(why, sizeof why, "%s", fa_last_error());
      any_refused = 1;
    }
    fa_note_rejected(rejected, sizeof rejected, s->name, why);
  }
  return fa_core_set_error(any_refused ? FA_ERR_UNSUPPORTED : FA_ERR_BACKEND_UNAVAILABLE,
                           "%sno backend can run fa_quantize: %s", a.strict ? "strict: " : "",
                           rejected);
}
