"""FlashAttention's Python entry points over flashattn-c, and an SDPA-style call.

    from flashattn import flash_attn_func   # instead of: from flash_attn import flash_attn_func
    out = flash_attn_func(q, k, v, causal=True)  # q [batch, seqlen, heads, dim]

The names, argument order, defaults, layouts and conventions are FlashAttention 2's
(flash_attn.flash_attn_interface, 2.7): softmax_scale None is 1/sqrt(head_dim); window_size
(left, right), -1 unbounded; causal and windows aligned bottom-right; softcap 0 is off;
alibi_slopes float32 [heads] or [batch, heads]; GQA/MQA by heads_kv dividing heads; varlen
sequences packed [total, heads, dim] with int32 cu_seqlens [batch + 1]; the KV-cache call writes
k/v into k_cache/v_cache in place and returns (out, lse) with return_softmax_lse.

On PyTorch tensors the calls are differentiable (autograd through flashattn::fwd / flashattn::bwd,
the saved LSE reused) and torch.compile(fullgraph=True) traces them; eager calls without gradients
call the library directly. NumPy arrays work too (no autograd). float32 inputs and CPU tensors are
accepted, beyond FlashAttention's fp16/bf16 on CUDA.

Dropout: each call draws its mask's seed and offset from PyTorch's default generator
(torch.manual_seed reproduces them; NumPy inputs: NumPy's global generator), and the backward
rebuilds the same mask from them. Masks are the library's Philox draws, not FlashAttention's.

What the library cannot do is refused with FlashAttnError (status FA_ERR_UNSUPPORTED), never
ignored: return_attn_probs=True (the probabilities are never materialised), cache_batch_idx and
cache_leftpad (not in the library's KV-cache call), softmax_scale=0.0 (the library reads 0 as
1/sqrt(head_dim)), attn_mask in the SDPA-style call. The KV-cache call has no backward pass, so
inputs that require grad (grad mode on) are refused there.

FP8 (FlashAttention 3's q_descale/k_descale/v_descale keywords of flash_attn_func and its packed
forms): q, k, v of dtype float8_e4m3fn (or float8_e5m2), descales float32 of FlashAttention 3's
shape [batch, heads_kv] (one scale per sequence and KV head; query head h takes that of KV head
h // (heads / heads_kv)) or of the library's [batch or 1, heads or 1, blocks] (passed as they
are; one block per sequence here). The output is bfloat16, forward only: FP8 inputs that require
grad are refused.

flash_attn_varlen_func with block_table passes the key lengths to the library as seqused_k
(cu_seqlens_k[1:] - cu_seqlens_k[:-1], computed here), the library's form for paged keys.
"""

from __future__ import annotations

import numbers

from . import _api, _call
from ._call import invalid, unsupported

__all__ = [
    "flash_attn_func",
    "flash_attn_varlen_func",
    "flash_attn_with_kvcache",
    "flash_attn_qkvpacked_func",
    "flash_attn_kvpacked_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_attn_varlen_kvpacked_func",
    "scaled_dot_product_attention",
]


def _params(call, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
            deterministic, return_attn_probs=False) -> dict:
    """The binding's keywords of FlashAttention's arguments (defaults left out)."""
    if return_attn_probs:
        raise unsupported(call, "return_attn_probs=True: the library never materialises the "
                          "attention probabilities (the LSE is available from "
                          "flashattn.attention(..., return_lse=True) or "
                          "flash_attn_with_kvcache(..., return_softmax_lse=True))")
    p = {}
    if softmax_scale is not None:
        if softmax_scale == 0:
            raise unsupported(call, "softmax_scale=0.0: the library reads a scale of 0 as "
                              "1/sqrt(head_dim)")
        p["softmax_scale"] = softmax_scale
    if causal:
        p["causal"] = True
    left, right = (-1, -1) if window_size is None else window_size
    if left >= 0 or right >= 0:
        p["window_left"], p["window_right"] = int(left), int(right)
    if softcap:
        p["softcap"] = softcap
    if alibi_slopes is not None:
        p["alibi_slopes"] = alibi_slopes
    if deterministic:
        p["deterministic"] = True
    if dropout_p:
        p["dropout_p"] = dropout_p
    return p


def _forward(call, q, k, v, params: dict):
    """out of attention with FlashAttention's dropout seeding (see the module's docstring)."""
    if _api.is_torch(q, k, v):
        ops = _api.torch_ops()
        if ops.needs_op(q, k, v, params.get("alibi_slopes")):
            return ops.forward_op(q, k, v, params, False, True, call)
        ops.refuse_descale_grad(call, params)
        if params.get("dropout_p"):
            params["dropout_seed"], params["dropout_offset"] = ops.draw_rng_state().tolist()
    elif params.get("dropout_p"):
        import numpy as np

        seed, offset = np.random.randint(0, 1 << 62, size=2, dtype=np.int64).tolist()
        params["dropout_seed"], params["dropout_offset"] = seed, offset
    return _call.forward(q, k, v, None, None, params)[0]


def _descale(call, name, d, heads_q, heads_kv):
    """A descale in the library's form [batch or 1, heads or 1, blocks]: FlashAttention 3's
    [batch, heads_kv] becomes [batch, heads_kv, 1] (a view), for q [batch, heads_q, 1] with each
    KV head's scale repeated for its query heads (a copy of batch x heads_q floats)."""
    if d is None or d.ndim == 3:
        return d
    if d.ndim != 2:
        raise invalid(call, f"{name} must be FlashAttention 3's [batch, heads_kv] or the "
                      f"library's [batch or 1, heads or 1, blocks], not {d.ndim}-D")
    d = d[:, :, None]
    if name == "q_descale" and heads_q != heads_kv and d.shape[1] == heads_kv:
        g = heads_q // heads_kv
        if _api.is_torch(d):
            return d.repeat_interleave(g, dim=1)
        import numpy as np

        return np.repeat(d, g, axis=1)
    return d


def _fp8_params(call, p: dict, q, k, q_descale, k_descale, v_descale) -> dict:
    """p with the descales given, in the library's form."""
    if q_descale is None and k_descale is None and v_descale is None:
        return p
    for name, d in (("q_descale", q_descale), ("k_descale", k_descale),
                    ("v_descale", v_descale)):
        if d is not None:
            p[name] = _descale(call, name, d, q.shape[-2], k.shape[-2])
    return p


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                    return_attn_probs=False, *, q_descale=None, k_descale=None, v_descale=None):
    """q [batch, seqlen_q, heads, dim], k/v [batch, seqlen_k, heads_kv, dim] -> out
    [batch, seqlen_q, heads, dim_v] (FlashAttention's flash_attn_func). FP8 q/k/v take
    q_descale/k_descale/v_descale (FlashAttention 3's keywords; see the module's docstring) and
    give a bfloat16 out."""
    call = "flash_attn_func"
    p = _params(call, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                deterministic, return_attn_probs)
    return _forward(call, q, k, v, _fp8_params(call, p, q, k, q_descale, k_descale, v_descale))


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                              window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                              deterministic=False, return_attn_probs=False, *, q_descale=None,
                              k_descale=None, v_descale=None):
    """qkv [batch, seqlen, 3, heads, dim] (viewed, not split into copies)."""
    return flash_attn_func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dropout_p, softmax_scale,
                           causal, window_size, softcap, alibi_slopes, deterministic,
                           return_attn_probs, q_descale=q_descale, k_descale=k_descale,
                           v_descale=v_descale)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                             window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                             deterministic=False, return_attn_probs=False, *, q_descale=None,
                             k_descale=None, v_descale=None):
    """kv [batch, seqlen_k, 2, heads_kv, dim] (viewed)."""
    return flash_attn_func(q, kv[:, :, 0], kv[:, :, 1], dropout_p, softmax_scale, causal,
                           window_size, softcap, alibi_slopes, deterministic, return_attn_probs,
                           q_descale=q_descale, k_descale=k_descale, v_descale=v_descale)


def _seqlens(cu):
    """cu[1:] - cu[:-1] as int32, in cu's own library."""
    d = cu[1:] - cu[:-1]
    return d.to(cu.dtype) if _api.is_torch(d) else d.astype(cu.dtype)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                           softcap=0.0, alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, block_table=None):
    """Packed sequences: q [total_q, heads, dim], k/v [total_k, heads_kv, dim] (or pages
    [blocks, page_size, heads_kv, dim] with block_table [batch, max_blocks]); cu_seqlens int32
    [batch + 1] -> out [total_q, heads, dim_v] (FlashAttention's flash_attn_varlen_func)."""
    call = "flash_attn_varlen_func"
    p = _params(call, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                deterministic, return_attn_probs)
    p["cu_seqlens_q"] = cu_seqlens_q
    p["max_seqlen_q"], p["max_seqlen_k"] = int(max_seqlen_q), int(max_seqlen_k)
    if block_table is None:
        p["cu_seqlens_k"] = cu_seqlens_k
    else:
        p["block_table"] = block_table
        p["seqused_k"] = _seqlens(cu_seqlens_k)
    return _forward(call, q, k, v, p)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0,
                                     softmax_scale=None, causal=False, window_size=(-1, -1),
                                     softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """qkv [total, 3, heads, dim] (viewed)."""
    return flash_attn_varlen_func(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_seqlens, cu_seqlens,
                                  max_seqlen, max_seqlen, dropout_p, softmax_scale, causal,
                                  window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                    max_seqlen_k, dropout_p=0.0, softmax_scale=None,
                                    causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False,
                                    return_attn_probs=False):
    """kv [total_k, 2, heads_kv, dim] (viewed)."""
    return flash_attn_varlen_func(q, kv[:, 0], kv[:, 1], cu_seqlens_q, cu_seqlens_k,
                                  max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
                                  window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs)


def _full_int32(like, n: int, value: int):
    """int32 [n] filled with value, where like lives."""
    if _api.is_torch(like):
        import torch

        return torch.full((n,), int(value), dtype=torch.int32, device=like.device)
    import numpy as np

    return np.full(n, int(value), np.int32)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None,
                            rotary_sin=None, cache_seqlens=None, cache_batch_idx=None,
                            cache_leftpad=None, block_table=None, softmax_scale=None,
                            causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0,
                            return_softmax_lse=False):
    """Decoding over a KV cache (FlashAttention's flash_attn_with_kvcache): k/v [batch,
    seqlen_new, heads_kv, dim], when given, are written into k_cache/v_cache [batch, capacity,
    heads_kv, dim] (or pages with block_table) at cache_seqlens (int or int32 [batch]; None: the
    caches are full), rotated by rotary_cos/rotary_sin [max_position, rotary_dim / 2]; q attends
    to the first cache_seqlens + seqlen_new keys. Returns out, or (out, softmax_lse [batch, heads,
    seqlen_q]) with return_softmax_lse."""
    call = "flash_attn_with_kvcache"
    if cache_batch_idx is not None:
        raise unsupported(call, "cache_batch_idx: the library's KV-cache call reads sequence b "
                          "from cache row b (index the caches, or pass a block_table)")
    if cache_leftpad is not None:
        raise unsupported(call, "cache_leftpad: the library's KV-cache call has no left padding")
    p = _params(call, 0.0, softmax_scale, causal, window_size, softcap, alibi_slopes, False)
    if block_table is not None:
        p["block_table"] = block_table
    if num_splits:
        p["num_splits"] = int(num_splits)
    if return_softmax_lse:
        p["return_lse"] = True
    if cache_seqlens is None or isinstance(cache_seqlens, numbers.Integral):
        capacity = k_cache.shape[1] if block_table is None \
            else block_table.shape[1] * k_cache.shape[1]
        cache_seqlens = _full_int32(q, q.shape[0],
                                    capacity if cache_seqlens is None else cache_seqlens)
    return _api.attention_kvcache(q, k_cache, v_cache, cache_seqlens, k_new=k, v_new=v,
                                  rotary_cos=rotary_cos, rotary_sin=rotary_sin,
                                  rotary_interleaved=rotary_interleaved, **p)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention's conventions: query [batch, heads, L,
    dim] (or [heads, L, dim]), key/value [batch, heads_kv, S, dim]; is_causal aligned top-left
    (query i sees keys j <= i); enable_gqa lets heads_kv divide heads. The tensors are handed to
    the library as [batch, L, heads, dim] views (strides, no copy) and the output comes back as a
    [batch, heads, L, dim_v] view of the library's [batch, L, heads, dim_v] result."""
    call = "scaled_dot_product_attention"
    if attn_mask is not None:
        raise unsupported(call, "attn_mask: only is_causal masks are available (the library "
                          "takes no mask tensor)")
    nd = query.ndim
    if nd not in (3, 4) or key.ndim != nd or value.ndim != nd:
        raise invalid(call, f"query/key/value must all be 4-D [batch, heads, seqlen, dim] or 3-D "
                      f"[heads, seqlen, dim], not {query.ndim}-D/{key.ndim}-D/{value.ndim}-D")
    if query.shape[-3] != key.shape[-3] and not enable_gqa:
        raise invalid(call, f"query has {query.shape[-3]} heads but key {key.shape[-3]}: pass "
                      f"enable_gqa=True for grouped-query attention")
    q, k, v = (t.swapaxes(-3, -2) for t in (query, key, value))
    if nd == 3:
        q, k, v = q[None], k[None], v[None]
    p = _params(call, dropout_p, scale, is_causal, None, 0.0, None, False)
    if is_causal:
        p["causal_align"] = "top_left"
    out = _forward(call, q, k, v, p)
    return out[0].swapaxes(0, 1) if nd == 3 else out.swapaxes(1, 2)
