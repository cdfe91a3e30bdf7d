/*
 * cpu_plugin.c: the CPU backend's entry point and its run(). decide() (cpu_decide.c) says what
 * runs and records it in the decision's payload (cpu_choice); run() reads it back, checks that it
 * is one the kernels can carry out, then runs the pass.
 */
#include <stdint.h>

#include "cpu_internal.h"

static fa_status run_pass(const fa_request *req, const cpu_choice *c, void *workspace,
                          size_t workspace_bytes);

static fa_status cpu_run(const fa_request *req, const fa_decision *decision, void *workspace) {
  if (!decision->supported)
    return fa_core_set_error(FA_ERR_UNSUPPORTED, "cpu: %s", decision->reason);
  cpu_choice choice;
  fa_decision_get(decision, &choice, sizeof choice);
  if (!choice.fp8) return run_pass(req, &choice, workspace, decision->workspace_bytes);
  /* FP8 inputs: dequantized copies first in the workspace, the float32 pass's scratch after */
  cpu_fp8_inner in;
  char *base =
      (char *)(((uintptr_t)workspace + CPU_FP8_ALIGN - 1) & ~(uintptr_t)(CPU_FP8_ALIGN - 1));
  const size_t lead = (size_t)(base - (char *)workspace);
  /* decide() asked for the copies, CPU_FP8_ALIGN bytes to align them, and the pass's scratch */
  if (req->op != FA_OP_FORWARD || !workspace || !cpu_fp8_inner_init(req, base, &in) ||
      in.bytes + CPU_FP8_ALIGN > decision->workspace_bytes || lead >= CPU_FP8_ALIGN)
    return fa_core_set_error(FA_ERR_INTERNAL, "cpu: FP8 decision for a request it does not fit");
  cpu_fp8_dequantize(req, &in);
  choice.fp8 = 0;
  fa_status st = run_pass(&in.req, &choice, base + in.bytes,
                          decision->workspace_bytes - CPU_FP8_ALIGN - in.bytes);
  if (st == FA_OK) cpu_fp8_store_out(req, &in);
  return st;
}

static fa_status run_pass(const fa_request *req, const cpu_choice *c, void *workspace,
                          size_t workspace_bytes) {
  const cpu_choice choice = *c;
  /* Guards the fixed-size row buffers of the kernels against a decision made elsewhere. */
  if (!choice.kern || choice.tile_m < 1 || choice.tile_m > CPU_MAX_TILE_M || choice.tile_n < 1 ||
      choice.tile_n > CPU_MAX_TILE_N || req->head_dim < 1 || req->head_dim > CPU_MAX_HEAD_DIM ||
      req->head_dim_v < 1 || req->head_dim_v > CPU_MAX_HEAD_DIM_V)
    return fa_core_set_error(FA_ERR_INTERNAL,
                             "cpu: decision (tiles %dx%d, head dims %lld/%lld) out of the "
                             "kernels' range",
                             (int)choice.tile_m, (int)choice.tile_n, (long long)req->head_dim,
                             (long long)req->head_dim_v);
  if (req->op == FA_OP_BACKWARD && (!req->lse || !req->dout || !req->dq || !req->dk || !req->dv))
    return fa_core_set_error(FA_ERR_INTERNAL, "cpu: backward request without lse or gradients");
  if (choice.splits < 1 || (req->op == FA_OP_BACKWARD && choice.splits != 1))
    return fa_core_set_error(FA_ERR_INTERNAL, "cpu: decision with num_splits %d for this op",
                             (int)choice.splits);

  cpu_problem pb;
  cpu_problem_init(&pb, req, &choice);
  cpu_workspace ws;
  fa_status st = cpu_workspace_split(&pb, req->op, workspace, workspace_bytes, &ws);
  if (st != FA_OK) return st;
  if (req->op == FA_OP_BACKWARD) return cpu_backward(req, &pb, &ws);
  /* fa_forward_kvcache: the new tokens are in the cache before any query reads it. */
  if (req->op == FA_OP_KVCACHE) cpu_kvcache_append(req, &pb);
  return cpu_forward(req, &pb, &ws);
}

FA_PLUGIN_DEFINE(FA_BACKEND_CPU, "cpu", cpu_probe, cpu_decide, cpu_run, NULL, cpu_quantize, NULL)
