/*
 * fake_plugin_limited.c: a plugin whose backward does not run above head dim 128 while its
 * forward runs up to 256, as a GPU with less shared memory than the tiles want, and whose
 * backward refuses packed sequences (cu_seqlens) that its forward runs (built as libfa_hip.so in
 * a directory of its own, for test_features). The feature list must then claim neither hd256 nor
 * varlen: those features hold for every pass the backend serves.
 */
#include <string.h>

#include "core/plugin.h"

#include "fake_plugin.h"

static void fake_probe(fa_plugin_probe *out) {
  memset(out, 0, sizeof *out);
  out->available = 1;
  out->device_count = 1;
  strcpy(out->devices, "fake0: backward up to head dim 128 only");
  strcpy(out->dtypes, "f16,bf16,f32");
}

static void fake_decide(const fa_request *req, fa_decision *out) {
  memset(out, 0, sizeof *out);
  if (req->op == FA_OP_KVCACHE) {
    fa_core_refuse(out, "fake: fa_forward_kvcache is not supported");
    return;
  }
  if (req->head_dim > 256) {
    fa_core_refuse(out, "fake: head_dim %lld > 256", (long long)req->head_dim);
    return;
  }
  if (req->op == FA_OP_BACKWARD && (req->params->cu_seqlens_q || req->params->cu_seqlens_k)) {
    fa_core_refuse(out, "fake: the backward has no packed sequences (its forward runs them)");
    return;
  }
  if (req->op == FA_OP_BACKWARD && req->head_dim > 128) {
    fa_core_refuse(out,
                   "fake: the backward at head_dim %lld needs more shared memory than this "
                   "device has",
                   (long long)req->head_dim);
    return;
  }
  out->supported = 1;
  out->deterministic = 1;
  out->num_splits = 1;
  strcpy(out->kernel, "fake.limited");
}

static fa_status fake_run(const fa_request *req, const fa_decision *decision, void *workspace) {
  (void)req, (void)decision, (void)workspace;
  return fa_core_set_error(FA_ERR_INTERNAL, "fake limited plugin: it only describes itself");
}

static const fa_plugin fake_table = {
    .abi_version = FA_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(fa_plugin),
    .backend_id = FA_BACKEND_HIP,
    .name = "hip",
    .probe = fake_probe,
    .decide = fake_decide,
    .run = fake_run,
    .release = NULL,
};

FAKE_EXPORT const fa_plugin *fa_plugin_entry(uint32_t core_abi_version);
const fa_plugin *fa_plugin_entry(uint32_t core_abi_version) {
  (void)core_abi_version;
  return &fake_table;
}
