/*
 * ring_mem.c: where a ring call's buffers live and who runs its element-wise steps (fill, copy,
 * add, the LSE merge). Host shards: malloc'd buffers, the loops of ring_tensor.c, blocks computed
 * in float32. Device shards: the buffers and steps of the backend that owns the memory (its
 * buffer_op, core/plugin.h), enqueued on params.stream like the block calls themselves, and blocks
 * computed in the inputs' dtype (the device kernels take f16/bf16); outputs and gradients still
 * sum in float32. And the size of the blocks' workspace, allocated with the other buffers.
 */
#include <stdio.h>
#include <stdlib.h>

#include "ring.h"
#include "validate.h"

fa_status fa_ring_mem_open(fa_ring_mem *m, const fa_request *r) {
  m->device = r->device;
  m->stream = r->params->stream;
  m->plugin = NULL;
  m->block_dtype = FA_F32;
  if (r->device.kind == FA_DEVICE_CPU) return FA_OK;
  int32_t order[FA_BACKEND_COUNT_];
  const int n = fa_backend_candidates(r->params->backend, r->device.kind, 0, order);
  char tried[FA_REASON_LEN] = "";
  for (int i = 0; i < n; ++i) {
    const fa_backend_slot *s = fa_registry_slot(order[i]);
    char why[FA_REASON_LEN];
    int refused = 0;
    if (fa_slot_usable(s, r->device.kind, why, sizeof why, &refused) && s->plugin->buffer_op) {
      m->plugin = s->plugin;
      m->block_dtype = r->dtype;
      return FA_OK;
    }
    if (s->plugin) snprintf(why, sizeof why, "offers no ring over its memory");
    fa_note_rejected(tried, sizeof tried, s->name, why);
  }
  return fa_core_set_error(FA_ERR_UNSUPPORTED,
                           "q.device = %s: no backend runs the ring's buffer steps on this "
                           "memory (%s)",
                           fa_device_kind_name(r->device.kind), tried[0] ? tried : "none built");
}

static fa_status device_op(const fa_ring_mem *m, fa_buffer_op *op) {
  op->device = m->device;
  op->stream = m->stream;
  return m->plugin->buffer_op(op);
}

fa_status fa_ring_mem_alloc(const fa_ring_mem *m, int64_t n, size_t size, void **out) {
  const size_t bytes = n > 0 ? (size_t)n * size : 1; /* an empty tensor still gets a pointer */
  *out = NULL;
  if (!m->plugin) {
    *out = malloc(bytes);
    return *out ? FA_OK
                : fa_core_set_error(FA_ERR_OUT_OF_MEMORY,
                                    "ring: no memory for its buffers (%zu bytes)", bytes);
  }
  fa_buffer_op op = {.kind = FA_BUFFER_ALLOC, .bytes = bytes, .alloc_out = out};
  return device_op(m, &op);
}

fa_status fa_ring_mem_alloc_all(const fa_ring_mem *m, const fa_ring_need *need, size_t count) {
  for (size_t i = 0; i < count; ++i)
    if (need[i].want) TRY(fa_ring_mem_alloc(m, need[i].n, need[i].size, need[i].p));
  return FA_OK;
}

void fa_ring_mem_free(const fa_ring_mem *m, void *p) {
  if (!p) return;
  if (!m->plugin) {
    free(p);
    return;
  }
  fa_buffer_op op = {.kind = FA_BUFFER_FREE, .ptr = p};
  device_op(m, &op);
}

fa_status fa_ring_fill(const fa_ring_mem *m, const fa_tensor *dst, float value) {
  if (!m->plugin) {
    fa_ring_host_fill(dst, value);
    return FA_OK;
  }
  fa_buffer_op op = {.kind = FA_BUFFER_FILL, .value = value, .dst = dst};
  return device_op(m, &op);
}

fa_status fa_ring_copy(const fa_ring_mem *m, const fa_tensor *src, const fa_tensor *dst) {
  if (!m->plugin) {
    fa_ring_host_copy(src, dst);
    return FA_OK;
  }
  fa_buffer_op op = {.kind = FA_BUFFER_COPY, .src = src, .dst = dst};
  return device_op(m, &op);
}

fa_status fa_ring_add(const fa_ring_mem *m, const fa_tensor *src, const fa_tensor *dst) {
  if (!m->plugin) {
    fa_ring_host_add(src, dst);
    return FA_OK;
  }
  fa_buffer_op op = {.kind = FA_BUFFER_ADD, .src = src, .dst = dst};
  return device_op(m, &op);
}

fa_status fa_ring_merge(const fa_ring_mem *m, const fa_tensor *src, const fa_tensor *src_lse,
                        const fa_tensor *dst, const fa_tensor *dst_lse) {
  if (!m->plugin) {
    fa_ring_host_merge(src, src_lse, dst, dst_lse);
    return FA_OK;
  }
  fa_buffer_op op = {
      .kind = FA_BUFFER_MERGE, .src = src, .dst = dst, .src_lse = src_lse, .dst_lse = dst_lse};
  return device_op(m, &op);
}

void fa_ring_kv_views(const fa_ring_mem *m, const fa_ring_shapes *sh, void *kv, fa_dtype dtype,
                      fa_tensor *k, fa_tensor *v) {
  *k = fa_ring_view(m, kv, dtype, 4, sh->k);
  *v = fa_ring_view(m, (char *)kv + (size_t)sh->nk * fa_dtype_size(dtype), dtype, 4, sh->v);
}

fa_status fa_ring_pack_kv(const fa_ring_mem *m, const fa_ring_shapes *sh, const fa_request *r,
                          void *kv) {
  fa_tensor k, v;
  fa_ring_kv_views(m, sh, kv, r->dtype, &k, &v);
  TRY(fa_ring_copy(m, r->k, &k));
  return fa_ring_copy(m, r->v, &v);
}

fa_status fa_ring_widen_kv(const fa_ring_mem *m, const fa_ring_shapes *sh, const fa_request *r,
                           void *kv, void *k, void *v) {
  fa_tensor ks, vs;
  fa_ring_kv_views(m, sh, kv, r->dtype, &ks, &vs);
  fa_tensor kd = fa_ring_view(m, k, FA_F32, 4, sh->k), vd = fa_ring_view(m, v, FA_F32, 4, sh->v);
  TRY(fa_ring_copy(m, &ks, &kd));
  return fa_ring_copy(m, &vs, &vd);
}

fa_status fa_ring_block_workspace(fa_op op, fa_params p, const fa_positions *pos,
                                  const fa_call_args *args, size_t *most) {
  p.workspace = NULL;
  p.workspace_size = 0;
  size_t bytes = 0;
  const fa_status st = fa_workspace_size_at(op, &p, pos, args, &bytes);
  if (st == FA_OK && bytes > *most) *most = bytes;
  return st;
}
