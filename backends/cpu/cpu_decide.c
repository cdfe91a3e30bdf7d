/*
 * cpu_decide.c: the CPU backend's one decide-function. Whether a request is supported, which
 * kernel runs, its tiles and its workspace are all answered here and nowhere else; fa_plan,
 * fa_backend_info's feature list and the call itself go through it. Pure: no allocation, no I/O.
 */
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "core/plan.h"
#include "core/strbuf.h"
#include "cpu_internal.h"
#include "cpu_kernels.h"

/* The storage dtypes the kernels compute on, by name; NULL for any other. */
static const char *storage_dtype_name(fa_dtype dtype) {
  return (dtype == FA_F32 || dtype == FA_F16 || dtype == FA_BF16) ? fa_dtype_name(dtype) : NULL;
}

/*
 * Every fa_params field is honoured or refused here, never ignored:
 *   softmax_scale, causal, causal_align, window_*, softcap, alibi_slopes, dropout_* (forward and
 *   backward; not fa_forward_kvcache), cu_seqlens_q/k, seqused_k, max_seqlen_q/k, block_table,
 *   page_size (forward and fa_forward_kvcache; paged backward refused), num_splits (see
 *   choose_splits), deterministic (always met), return_lse, workspace*, backend, strict (the
 *   core's), kernel_family (only "flash"), stream (no meaning for host memory: CPU calls are
 *   synchronous and complete before returning).
 */
static int refuse_request(const fa_request *req, fa_decision *out) {
  const fa_params *p = req->params;
  if (p->kernel_family && strcmp(p->kernel_family, "flash") != 0) {
    fa_core_refuse(out, "kernel_family '%s' is unknown to cpu (families: flash)", p->kernel_family);
    return 1;
  }
  if (p->stream) {
    fa_core_refuse(out,
                   "params.stream is set: cpu runs on the calling thread and takes no stream "
                   "(NULL)");
    return 1;
  }
  if (req->op == FA_OP_BACKWARD && p->block_table) {
    /* Pages may be shared between sequences (prefix caching), so a page's dK/dV has no single
       owner; FlashAttention has no paged backward either. */
    fa_core_refuse(out,
                   "paged KV backward (block_table) is not supported by cpu.flash: pages may be "
                   "shared between sequences");
    return 1;
  }
  if (req->op == FA_OP_KVCACHE && p->dropout_p > 0.0f) {
    fa_core_refuse(out,
                   "dropout (dropout_p > 0) is not supported by cpu.flash for fa_forward_kvcache "
                   "(inference only)");
    return 1;
  }
  return 0;
}

/*
 * Split-KV chunks for the forward pass (fa_forward, fa_forward_kvcache). num_splits = n > 1 asks
 * for n chunks, run as min(n, key tiles) since a chunk is at least one key tile (what ran is what
 * the decision reports); 1 never splits; 0 lets this choose: split when the query tiles of all
 * heads and sequences are fewer than the threads and the key range is long (at least two key
 * tiles per chunk), as in decoding one token over a long cache, so every core works.
 * The backward pass has no split-KV and reports 1: its gradients are the same whatever
 * num_splits is, and callers pass the forward's params to it unchanged, so it is not refused.
 */
static int choose_splits(const fa_request *req, const cpu_problem *pb, int64_t threads) {
  if (req->op == FA_OP_BACKWARD) return 1;
  const int64_t k_tiles = pb->k_tiles < 1 ? 1 : pb->k_tiles;
  int64_t n = req->params->num_splits;
  if (n == 0) {
    int64_t tasks = pb->batch * (pb->heads_q / pb->pack) * pb->q_tiles;
    n = 1;
    if (tasks > 0 && tasks < threads) {
      n = (threads + tasks - 1) / tasks;
      if (n > k_tiles / 2) n = k_tiles / 2;
    }
  }
  if (n > k_tiles) n = k_tiles;
  return n < 1 ? 1 : (int)n;
}

static int refuse_head_dim(const char *name, int64_t dim, int64_t max, fa_decision *out) {
  if (dim >= 1 && dim <= max) return 0;
  if (dim < 1)
    fa_core_refuse(out, "%s %lld < 1 for cpu.flash", name, (long long)dim);
  else
    fa_core_refuse(out, "%s %lld > %lld for cpu.flash", name, (long long)dim, (long long)max);
  return 1;
}

static const char *op_name(fa_op op) {
  return op == FA_OP_FORWARD ? "fwd" : (op == FA_OP_BACKWARD ? "bwd" : "kvcache");
}

/* cpu.flash.<isa>.<fwd|bwd|kvcache>.<dtype>.hd<D or DxDv>, then .rows<R> when the few-query-rows
   path runs (R query rows per task: seqlen_q x heads_q), then one suffix per feature in use, in
   this fixed order: .causal .window .softcap .alibi .dropout .varlen .paged .split<N>. */
static void kernel_name(const fa_request *req, const cpu_problem *pb, const char *dtype, int splits,
                        fa_decision *out) {
  const fa_params *p = req->params;
  fa_strbuf b = fa_strbuf_of(out->kernel, sizeof out->kernel);
  /* The kernel build (generic, avx2, avx512, neon) is part of the name: a CPU without AVX-512
     runs slower code, and the report says so; avx512bf16 only where its bf16 products run. */
  fa_strbuf_put(&b, "cpu.flash.");
  fa_strbuf_put(&b, pb->bf16dp ? pb->kern->isa : pb->kern->fp32_isa);
  fa_strbuf_put(&b, ".");
  fa_strbuf_put(&b, op_name(req->op));
  fa_strbuf_put(&b, ".");
  fa_strbuf_put(&b, dtype);
  fa_strbuf_put(&b, ".hd");
  fa_strbuf_int(&b, req->head_dim);
  if (req->head_dim_v != req->head_dim) {
    fa_strbuf_put(&b, "x");
    fa_strbuf_int(&b, req->head_dim_v);
  }
  if (pb->rows_path) {
    fa_strbuf_put(&b, ".rows");
    fa_strbuf_int(&b, pb->pack * pb->seqlen_q);
  }
  if (p->causal) fa_strbuf_put(&b, ".causal");
  if (p->window_enabled) fa_strbuf_put(&b, ".window");
  if (p->softcap > 0.0f) fa_strbuf_put(&b, ".softcap");
  if (p->alibi_slopes) fa_strbuf_put(&b, ".alibi");
  if (p->dropout_p > 0.0f) fa_strbuf_put(&b, ".dropout");
  if (p->cu_seqlens_q) fa_strbuf_put(&b, ".varlen");
  if (p->block_table) fa_strbuf_put(&b, ".paged");
  if (splits > 1) {
    fa_strbuf_put(&b, ".split");
    fa_strbuf_int(&b, splits);
  }
}

/* FP8 inputs: the float32 request on dequantized copies (cpu_fp8.c), decided as any, with the
   copies added to its workspace and the FP8 dtype in the kernel's name. */
static void decide_fp8(const fa_request *req, fa_decision *out) {
  cpu_fp8_inner in;
  if (!cpu_fp8_inner_init(req, NULL, &in)) {
    fa_core_refuse(out, "%s inputs: their float32 copies would exceed the address space",
                   fa_dtype_name(req->dtype));
    return;
  }
  cpu_decide(&in.req, out);
  if (!out->supported) return;
  cpu_choice choice;
  fa_decision_get(out, &choice, sizeof choice);
  choice.fp8 = 1;
  fa_decision_put(out, &choice, sizeof choice);
  out->workspace_bytes += in.bytes + CPU_FP8_ALIGN; /* the copies, aligned in any workspace */
  char name[FA_KERNEL_LEN];
  const char *f32 = strstr(out->kernel, ".f32.");
  if (f32) {
    snprintf(name, sizeof name, "%.*s.%s.%s", (int)(f32 - out->kernel), out->kernel,
             fa_dtype_name(req->dtype), f32 + 5);
    snprintf(out->kernel, sizeof out->kernel, "%s", name);
  }
}

void cpu_decide(const fa_request *req, fa_decision *out) {
  memset(out, 0, sizeof *out);
  if ((req->dtype == FA_F8E4M3 || req->dtype == FA_F8E5M2) && req->device.kind == FA_DEVICE_CPU &&
      req->op == FA_OP_FORWARD) {
    decide_fp8(req, out);
    return;
  }
  const char *dtype = storage_dtype_name(req->dtype);
  if (req->device.kind != FA_DEVICE_CPU) {
    fa_core_refuse(out, "tensors are in %s memory; cpu.flash reads host memory only",
                   fa_device_kind_name(req->device.kind));
    return;
  }
  /* FA_CPU_ISA asked for something this process cannot run (AMX): refused, not run otherwise. */
  const char *refused = cpu_kernels_refusal();
  if (refused) {
    fa_core_refuse(out, "cpu.flash: %s", refused);
    return;
  }
  if (!dtype) {
    fa_core_refuse(out, "dtype %s is not supported by cpu.flash (f32, f16, bf16)",
                   fa_dtype_name(req->dtype));
    return;
  }
  if (req->op != FA_OP_FORWARD && req->op != FA_OP_BACKWARD && req->op != FA_OP_KVCACHE) {
    fa_core_refuse(out, "operation %d is unknown to cpu.flash", (int)req->op);
    return;
  }
  if (refuse_head_dim("head_dim", req->head_dim, CPU_MAX_HEAD_DIM, out) ||
      refuse_head_dim("head_dim_v", req->head_dim_v, CPU_MAX_HEAD_DIM_V, out) ||
      refuse_request(req, out))
    return;

  /* Tiles sized for the larger of the two head dims: the K and V tiles share the budget. */
  int64_t dmax = req->head_dim > req->head_dim_v ? req->head_dim : req->head_dim_v;
  fa_tile_limits limits = {cpu_fast_memory_bytes(), 4, 4, 4, CPU_PLAN_TILE_M, CPU_MAX_TILE_N};
  fa_tile_plan tiles = fa_plan_tiles(&limits, dmax);
  cpu_choice choice = {cpu_kernels_get(), 0, 0, 1, cpu_rows_path(req), 0, 0};
  choice.bf16dp = cpu_bf16dp_applies(req, choice.kern);
  /* Decoding's few rows: one query tile holds every head's rows (cpu_decode.c), whatever the cache
     budget. */
  if (choice.rows_path)
    tiles.tile_m = (int32_t)(req->heads_q * req->seqlen_q);
  else if (req->op != FA_OP_BACKWARD && dmax >= 64 && tiles.tile_m < tiles.tile_n)
    /* The forward converts (and transposes) each K/V tile once per query tile: below head dim
       128 the plan's Br = min(Bc, d) would make that a per-FLOP cost twice hd128's. Br = Bc
       (256 x 256 tiles) spreads the conversion over the most rows and keeps a thread's scratch
       within L2 (hd64: 514 KB, hd128: 770 KB). From head dim 64 only: below it the scores tile
       would be most of the scratch (workspace 16x at hd8). */
    tiles.tile_m = tiles.tile_n < CPU_MAX_TILE_M ? tiles.tile_n : CPU_MAX_TILE_M;

  choice.tile_m = tiles.tile_m;
  choice.tile_n = tiles.tile_n;
  cpu_problem pb;
  cpu_problem_init(&pb, req, &choice);
  int64_t threads = omp_get_max_threads();
  choice.splits = choose_splits(req, &pb, threads);
  cpu_problem_init(&pb, req, &choice);
  int64_t tasks = cpu_parallel_tasks(&pb, req->op);
  if (threads > tasks) threads = tasks;

  kernel_name(req, &pb, dtype, choice.splits, out);
  out->supported = 1;
  out->tile_m = choice.tile_m;
  out->tile_n = choice.tile_n;
  out->num_splits = choice.splits;
  /* No atomics, and each output element is summed in an order fixed by the tiles (and the
     chunks, merged in chunk order) alone. */
  out->deterministic = 1;
  out->workspace_bytes = cpu_workspace_bytes(&pb, req->op, (int)threads);
  fa_decision_put(out, &choice, sizeof choice);
}
