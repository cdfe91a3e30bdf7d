"""flashattn: Python binding of flashattn-c (ctypes over libflashattn; no compiled extension).

    import numpy as np, flashattn
    out = flashattn.attention(q, k, v, causal=True)             # q [batch, seqlen_q, heads, dim]
    out, lse = flashattn.attention(q, k, v, return_lse=True)
    dq, dk, dv = flashattn.attention_backward(dout, q, k, v, out, lse, causal=True)
    out = flashattn.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_q, max_k)
    out = flashattn.attention_kvcache(q, k_cache, v_cache, cache_seqlens, k_new=k, v_new=v)
    for b in flashattn.backend_info(): print(b.name, b.available, b.reason)

    qf, qs = flashattn.quantize_fp8(q, block_rows=64, rotate=True, seed=s)   # FP8 + descales
    kf, ks = flashattn.quantize_fp8(k, rotate=True, seed=s)
    vf, vs = flashattn.quantize_fp8(v)
    out = flashattn.attention(qf, kf, vf, q_descale=qs, k_descale=ks, v_descale=vs,
                              descale_rows_q=64)                        # out bfloat16

    out, lse = flashattn.ring_attention(q, k, v, comm=MPI.COMM_WORLD, layout="zigzag",
                                        causal=True, return_lse=True)  # this rank's shards
    dq, dk, dv = flashattn.ring_attention_backward(dout, q, k, v, out, lse, comm=MPI.COMM_WORLD,
                                                   layout="zigzag", causal=True)
    out = flashattn.ring_attention(q, k, v, comm=group)   # CUDA tensors, an NCCL process group

    from flashattn import flash_attn_func                # FlashAttention's names and conventions
    out = flash_attn_func(q, k, v, causal=True)          # torch tensors: differentiable, compilable

Inputs are NumPy arrays and PyTorch tensors (read directly: data address, shape and strides, no
copy), or any other object offering __dlpack__ (CuPy tensors, ...; anything else NumPy can
convert), viewed without copying. Strides pass through to the library as they are. Outputs are
allocated where the inputs live by the inputs' own library (NumPy arrays for NumPy inputs, torch
tensors for torch inputs, ...), contiguous, or passed in (out=, lse=, dq=, dk=, dv=: any writable
array). Every field of fa_params is a keyword (see PARAMS); the library's conventions apply
(api/flash_attn.h): layout [batch, seqlen, heads, head_dim], causal bottom-right aligned, LSE
float32 natural log.

PyTorch: attention() on tensors that require grad (grad mode on) is differentiable, through the
torch.library operators flashattn::fwd / flashattn::bwd (flashattn._torch_ops), which also make
the calls traceable by torch.compile(fullgraph=True). flash_attn_interface offers FlashAttention's
entry points (flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache, the packed forms)
and an SDPA-style call (scaled_dot_product_attention), re-exported here. A call that cannot do
what it is asked raises (FlashAttnError, FA_ERR_UNSUPPORTED), never detaches or converts silently.

FP8: quantize_fp8 turns float32/float16/bfloat16 tensors into FP8 (float8_e4m3fn or
float8_e5m2: torch's dtypes, ml_dtypes' for NumPy) with float32 descales per block of rows,
optionally after the seeded Hadamard rotation of incoherent processing (hadamard_rotate alone
rotates); attention() takes FP8 q, k, v with those descales (q_descale=, ..., descale_rows_q=),
forward only, its out bfloat16 unless out= passes float16.

Each distinct signature (the tensors' dtypes, devices, shapes and strides, and the scalar
parameters) builds its ctypes structs once per thread; later calls only store addresses.

The library is found as flashattn._capi.find_library says. Failures raise FlashAttnError carrying
the library's status and message.
"""

from __future__ import annotations

from ._api import (
    BackendInfo,
    NcclComm,
    RunInfo,
    TransportInfo,
    attention,
    attention_backward,
    attention_kvcache,
    attention_varlen,
    backend_info,
    hadamard_rotate,
    plan,
    plan_kvcache,
    quantize_fp8,
    release,
    ring_attention,
    ring_attention_backward,
    transport_info,
    version,
)
from ._call import PARAMS, FlashAttnError, library
from .flash_attn_interface import (
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache,
    scaled_dot_product_attention,
)

__all__ = [
    "attention",
    "attention_backward",
    "attention_varlen",
    "attention_kvcache",
    "plan",
    "plan_kvcache",
    "quantize_fp8",
    "hadamard_rotate",
    "backend_info",
    "ring_attention",
    "ring_attention_backward",
    "transport_info",
    "version",
    "release",
    "library",
    "FlashAttnError",
    "RunInfo",
    "BackendInfo",
    "TransportInfo",
    "NcclComm",
    "PARAMS",
    "flash_attn_func",
    "flash_attn_varlen_func",
    "flash_attn_with_kvcache",
    "flash_attn_qkvpacked_func",
    "flash_attn_kvpacked_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_attn_varlen_kvpacked_func",
    "scaled_dot_product_attention",
]
