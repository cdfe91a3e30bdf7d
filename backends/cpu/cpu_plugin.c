/*
 * cpu_plugin.c: the CPU backend's entry point and its run(). decide() (cpu_decide.c) says what
 * runs; run() only checks that the decision is one it can carry out, then runs the pass.
 */
#include "cpu_internal.h"

static fa_status cpu_run(const fa_request *req, const fa_decision *decision, void *workspace) {
  if (!decision->supported)
    return fa_core_set_error(FA_ERR_UNSUPPORTED, "cpu: %s", decision->reason);
  /* Guards the fixed-size row buffers of the kernels against a decision made elsewhere. */
  if (decision->tile_m < 1 || decision->tile_m > CPU_MAX_TILE_M || decision->tile_n < 1 ||
      decision->tile_n > CPU_MAX_TILE_N || req->head_dim < 1 || req->head_dim > CPU_MAX_HEAD_DIM ||
      req->head_dim_v < 1 || req->head_dim_v > CPU_MAX_HEAD_DIM_V)
    return fa_core_set_error(FA_ERR_INTERNAL,
                             "cpu: decision (tiles %dx%d, head dims %lld/%lld) out of the "
                             "kernels' range",
                             (int)decision->tile_m, (int)decision->tile_n, (long long)req->head_dim,
                             (long long)req->head_dim_v);
  if (req->op == FA_OP_BACKWARD && (!req->lse || !req->dout || !req->dq || !req->dk || !req->dv))
    return fa_core_set_error(FA_ERR_INTERNAL, "cpu: backward request without lse or gradients");

  if (decision->num_splits < 1 || (req->op == FA_OP_BACKWARD && decision->num_splits != 1))
    return fa_core_set_error(FA_ERR_INTERNAL, "cpu: decision with num_splits %d for this op",
                             (int)decision->num_splits);

  cpu_problem pb;
  cpu_problem_init(&pb, req, decision->tile_m, decision->tile_n, decision->num_splits);
  cpu_workspace ws;
  fa_status st = cpu_workspace_split(&pb, req->op, workspace, decision->workspace_bytes, &ws);
  if (st != FA_OK) return st;
  if (req->op == FA_OP_BACKWARD) return cpu_backward(req, &pb, &ws);
  /* fa_forward_kvcache: the new tokens are in the cache before any query reads it. */
  if (req->op == FA_OP_KVCACHE) cpu_kvcache_append(req, &pb);
  return cpu_forward(req, &pb, &ws);
}

FA_PLUGIN_DEFINE(FA_BACKEND_CPU, "cpu", cpu_probe, cpu_decide, cpu_run, NULL)
