"""PyTorch integration: the library's calls as torch.library custom operators.

    flashattn::fwd          (q, k, v, ...) -> (out, lse)        differentiable (flashattn::bwd)
    flashattn::bwd          (dout, q, k, v, out, lse, dlse, ...) -> (dq, dk, dv)
    flashattn::fwd_kvcache  (q, k_cache!, v_cache!, ...) -> (out, lse), writes the caches
    flashattn::fwd_fp8      (q, k, v, q_descale, k_descale, v_descale, ...) -> (out, lse),
                            FP8 inputs (out bfloat16), forward only
    flashattn::quantize     (x, ...) -> (y, descale), quantize_fp8 / hadamard_rotate

Each has a fake kernel (shapes only), so torch.compile traces them without graph breaks, and
their implementation is the binding's direct call (_call) on the tensors' memory, strides passed
through (no copy), on PyTorch's current CUDA stream for CUDA tensors. The autograd formula of fwd
saves q, k, v, out, the LSE and the dropout state (rng_state: int64 [seed, offset]) and calls bwd,
which recomputes the scores from the saved LSE and the same dropout mask. The LSE output is
differentiable when the caller asked for it (return_lse): its gradient is a second library
backward whose dout carries dLSE against a unit value column (dS = P * dLSE, no dropout). bwd has
no gradient of its own: differentiating it raises. On GPU devices the backward copies a
broadcast or last-dim-strided incoming gradient to a contiguous tensor (the GPU kernels read
rows with vector loads); every other tensor is passed with its strides.

The public calls (_api, flash_attn_interface) choose per call on torch tensors:
  - traced (torch.compile, another tracer, a dispatch mode, a functorch transform): the
    operators, fwd differentiable through its register_autograd;
  - plain eager, autograd recording (grad mode on, an input requires grad): _Attention, an
    autograd.Function over the operators' implementations with the same formula (no dispatcher,
    no torch.library autograd wrapper: a fraction of their per-call cost);
  - plain eager otherwise: the binding directly (_call), nothing recorded.

FP8 inputs have no backward pass: a call on FP8 tensors that autograd would record is refused
(never detached); traced, FP8 attention goes through fwd_fp8, which has no autograd formula.
"""

from typing import Optional

import torch
from torch import Tensor

from . import _call
from ._call import PARAMS, invalid, unsupported

_PLAIN = (torch.Tensor, torch.nn.Parameter)
FP8_DTYPES = frozenset(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2")
                       if hasattr(torch, n))
_DESCALE_PARAMS = ("q_descale", "k_descale", "v_descale", "descale_rows_q", "descale_rows_k")
_DESCALES = ("q_descale", "k_descale", "v_descale")
_DESCALE_SET = frozenset(_DESCALES)
_is_compiling = torch.compiler.is_compiling
_dispatch_mode = torch.utils._python_dispatch._get_current_dispatch_mode
_functorch_wrapped = torch._C._functorch.is_functorch_wrapped_tensor


def traced(q, k, v) -> bool:
    """Whether something watches calls on these tensors: torch.compile or another tracer (fake
    or functional tensors, a dispatch mode, a functorch transform). Such calls go through the
    operators themselves."""
    if _is_compiling():
        return True
    if type(q) not in _PLAIN or type(k) not in _PLAIN or type(v) not in _PLAIN:
        return True
    return _dispatch_mode() is not None or _functorch_wrapped(q)


def needs_op(q, k, v, alibi_slopes=None) -> bool:
    """Whether a call on these tensors goes through the operators' path: traced, or autograd is
    to record it (grad mode on and an input, alibi_slopes included, requires grad: that path
    then refuses grad-requiring slopes)."""
    if traced(q, k, v):
        return True
    return torch.is_grad_enabled() and (
        q.requires_grad or k.requires_grad or v.requires_grad
        or (alibi_slopes is not None and getattr(alibi_slopes, "requires_grad", False)))


def draw_rng_state() -> Tensor:
    """int64 [seed, offset] for a dropout mask, drawn from PyTorch's default generator (so
    torch.manual_seed makes it reproducible)."""
    return torch.randint(0, 1 << 62, (2,), dtype=torch.int64)


def rng_state_of(seed: int, offset: int) -> Tensor:
    """int64 [seed, offset] of explicit uint64 values (stored as their two's complement)."""
    def signed(x):
        x = int(x) & ((1 << 64) - 1)
        return x - (1 << 64) if x >= 1 << 63 else x

    return torch.tensor([signed(seed), signed(offset)], dtype=torch.int64)


def _params(alibi_slopes, cu_seqlens_q, cu_seqlens_k, seqused_k, block_table, rng_state,
            softmax_scale, causal, causal_align, window_left, window_right, softcap, dropout_p,
            max_seqlen_q, max_seqlen_k, page_size, num_splits, deterministic, backend, strict,
            kernel_family) -> dict:
    """The binding's keyword dict of the operators' arguments (only what differs from the
    defaults, so that equal calls share one cached plan)."""
    p = {}
    for name, value in (("alibi_slopes", alibi_slopes), ("cu_seqlens_q", cu_seqlens_q),
                        ("cu_seqlens_k", cu_seqlens_k), ("seqused_k", seqused_k),
                        ("block_table", block_table)):
        if value is not None:
            p[name] = value
    for name, value in (("softmax_scale", softmax_scale),
                        ("causal", causal), ("causal_align", causal_align),
                        ("softcap", softcap), ("dropout_p", dropout_p),
                        ("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k),
                        ("page_size", page_size), ("num_splits", num_splits),
                        ("deterministic", deterministic), ("backend", backend),
                        ("strict", strict)):
        if value:
            p[name] = value
    if window_left >= 0 or window_right >= 0:
        p["window_left"], p["window_right"] = window_left, window_right
    if kernel_family:
        p["kernel_family"] = kernel_family
    if dropout_p:
        if rng_state is None:
            raise invalid("flashattn::fwd", "dropout_p > 0 needs rng_state [seed, offset]")
        seed, offset = rng_state.tolist()
        p["dropout_seed"] = seed & ((1 << 64) - 1)
        p["dropout_offset"] = offset & ((1 << 64) - 1)
    return p


# The operators' argument lists after the tensors; the Python signatures below spell them out
# (torch.library infers the schemas from them).
_FWD_SCALARS = ("softmax_scale", "causal", "causal_align", "window_left", "window_right",
                "softcap", "dropout_p", "max_seqlen_q", "max_seqlen_k", "page_size", "num_splits",
                "deterministic", "backend", "strict", "kernel_family")


def _fwd_impl(q: Tensor, k: Tensor, v: Tensor, alibi_slopes: Optional[Tensor],
              cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
              seqused_k: Optional[Tensor], block_table: Optional[Tensor],
              rng_state: Optional[Tensor], softmax_scale: float, causal: bool,
              causal_align: int, window_left: int, window_right: int, softcap: float,
              dropout_p: float, max_seqlen_q: int, max_seqlen_k: int, page_size: int,
              num_splits: int, deterministic: bool, backend: int, strict: bool,
              kernel_family: str, return_lse: bool) -> tuple[Tensor, Tensor]:
    p = _params(alibi_slopes, cu_seqlens_q, cu_seqlens_k, seqused_k, block_table, rng_state,
                softmax_scale, causal, causal_align, window_left, window_right, softcap,
                dropout_p, max_seqlen_q, max_seqlen_k, page_size, num_splits, deterministic,
                backend, strict, kernel_family)
    p["return_lse"] = True
    out, lse, _ = _call.forward(q, k, v, None, None, p)
    return out, lse


fwd = torch.library.custom_op("flashattn::fwd", mutates_args=())(_fwd_impl)


def _lse_shape(q: Tensor, varlen: bool):
    return (q.shape[1], q.shape[0]) if varlen else (q.shape[0], q.shape[2], q.shape[1])


@fwd.register_fake
def _fwd_fake(q, k, v, alibi_slopes, cu_seqlens_q, *args):
    out = q.new_empty(tuple(q.shape[:-1]) + (v.shape[-1],))
    lse = q.new_empty(_lse_shape(q, cu_seqlens_q is not None), dtype=torch.float32)
    return out, lse


def _bwd_impl(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
              dlse: Optional[Tensor], alibi_slopes: Optional[Tensor],
              cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
              seqused_k: Optional[Tensor], block_table: Optional[Tensor],
              rng_state: Optional[Tensor], softmax_scale: float, causal: bool,
              causal_align: int, window_left: int, window_right: int, softcap: float,
              dropout_p: float, max_seqlen_q: int, max_seqlen_k: int, page_size: int,
              num_splits: int, deterministic: bool, backend: int, strict: bool,
              kernel_family: str) -> tuple[Tensor, Tensor, Tensor]:
    args = (alibi_slopes, cu_seqlens_q, cu_seqlens_k, seqused_k, block_table, rng_state,
            softmax_scale, causal, causal_align, window_left, window_right, softcap, dropout_p,
            max_seqlen_q, max_seqlen_k, page_size, num_splits, deterministic, backend, strict,
            kernel_family)
    dq, dk, dv, _ = _call.backward(dout, q, k, v, out, lse, None, None, None, _params(*args))
    if dlse is not None:
        # d lse_i / d s_ij = P_ij: a backward with dout' = dLSE in column 0, v' = 1 in column 0
        # and out' = 0 has dP'_ij = dLSE_i and D'_i = 0, so dS' = P * dLSE (no dropout: the LSE
        # is taken before it).
        ones = torch.zeros_like(v)
        ones[..., 0] = 1
        zero_out = torch.zeros_like(out)
        d = torch.zeros_like(out)
        dlse = dlse.expand(lse.shape)
        d[..., 0] = dlse.t() if cu_seqlens_q is not None else dlse.transpose(1, 2)
        p = _params(*args[:5], None, *args[6:12], 0.0, *args[13:])
        dq2, dk2, _, _ = _call.backward(d, q, k, ones, zero_out, lse, None, None, None, p)
        dq += dq2
        dk += dk2
    return dq, dk, dv


bwd = torch.library.custom_op("flashattn::bwd", mutates_args=())(_bwd_impl)


@bwd.register_fake
def _bwd_fake(dout, q, k, v, *args):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _save(ctx, tensors, out, lse, scalars, return_lse):
    """What the backward needs: the inputs' tensors, out, the LSE, the scalars."""
    q, k, v, alibi, cu_q, cu_k, seqused, table, rng = tensors
    ctx.save_for_backward(q, k, v, out, lse, alibi, cu_q, cu_k, seqused, table, rng)
    ctx.scalars = tuple(scalars)
    ctx.return_lse = return_lse


def _grads(ctx, dout, dlse, backward=None):
    """(dq, dk, dv) through bwd (or the given implementation) from what _save kept."""
    q, k, v, out, lse, alibi, cu_q, cu_k, seqused, table, rng = ctx.saved_tensors
    if dout is None:
        dout = torch.zeros_like(out)
    elif not dout.is_cpu and (dout.stride(-1) != 1 or 0 in dout.stride()):
        # autograd's broadcast or strided gradient (out.sum().backward() hands a stride-0 one):
        # copied, since GPU kernels read rows with vector loads (the CPU takes any strides)
        dout = dout.contiguous()
    return (backward or bwd)(dout, q, k, v, out, lse, dlse if ctx.return_lse else None, alibi,
                             cu_q, cu_k, seqused, table, rng, *ctx.scalars)


def _fwd_setup(ctx, inputs, output):
    _save(ctx, inputs[:9], output[0], output[1], inputs[9:-1], inputs[-1])


def _fwd_backward(ctx, dout, dlse):
    return _grads(ctx, dout, dlse) + (None,) * (6 + len(_FWD_SCALARS) + 1)


# fwd called directly (torch.ops.flashattn.fwd) is differentiable through this formula.
fwd.register_autograd(_fwd_backward, setup_context=_fwd_setup)


class _Attention(torch.autograd.Function):
    """The operators' implementations as one autograd.Function: what forward_op records in plain
    eager mode (nothing traces there, so the dispatcher is skipped). The same formula as fwd's
    register_autograd, which traced calls use, without the per-call cost of torch.library's
    autograd wrapper and the dispatcher."""

    @staticmethod
    def forward(ctx, q, k, v, alibi, cu_q, cu_k, seqused, table, rng, return_lse, *scalars):
        out, lse = _fwd_impl(q, k, v, alibi, cu_q, cu_k, seqused, table, rng, *scalars,
                             return_lse)
        _save(ctx, (q, k, v, alibi, cu_q, cu_k, seqused, table, rng), out, lse, scalars,
              return_lse)
        if not return_lse:
            ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        if torch.is_grad_enabled():  # create_graph: through bwd, whose backward refuses
            return _grads(ctx, dout, dlse) + (None,) * (7 + len(ctx.scalars))
        return _grads(ctx, dout, dlse, _bwd_impl) + (None,) * (7 + len(ctx.scalars))


def _bwd_setup(ctx, inputs, output):
    pass


def _bwd_backward(ctx, *grads):
    raise unsupported("flashattn::bwd", "the backward pass is not differentiable (no double "
                      "backward): differentiate once, without create_graph")


bwd.register_autograd(_bwd_backward, setup_context=_bwd_setup)


def _fwd_kvcache_impl(q: Tensor, k_cache: Tensor, v_cache: Tensor, k_new: Optional[Tensor],
                      v_new: Optional[Tensor], cache_seqlens: Tensor,
                      rotary_cos: Optional[Tensor], rotary_sin: Optional[Tensor],
                      rotary_interleaved: bool, alibi_slopes: Optional[Tensor],
                      block_table: Optional[Tensor], softmax_scale: float, causal: bool,
                      causal_align: int, window_left: int, window_right: int, softcap: float,
                      num_splits: int, backend: int, strict: bool,
                      kernel_family: str) -> tuple[Tensor, Tensor]:
    p = _params(alibi_slopes, None, None, None, block_table, None, softmax_scale, causal,
                causal_align, window_left, window_right, softcap, 0.0, 0, 0, 0, num_splits,
                False, backend, strict, kernel_family)
    p["return_lse"] = True
    kv = {"k_new": k_new, "v_new": v_new, "cache_seqlens": cache_seqlens,
          "rotary_cos": rotary_cos, "rotary_sin": rotary_sin}
    out, lse, _ = _call.forward_kvcache(q, k_cache, v_cache, kv, rotary_interleaved, None, None,
                                        p)
    return out, lse


fwd_kvcache = torch.library.custom_op("flashattn::fwd_kvcache",
                                      mutates_args=("k_cache", "v_cache"))(_fwd_kvcache_impl)


@fwd_kvcache.register_fake
def _fwd_kvcache_fake(q, k_cache, v_cache, *args):
    out = q.new_empty(tuple(q.shape[:-1]) + (v_cache.shape[-1],))
    return out, q.new_empty(_lse_shape(q, False), dtype=torch.float32)


def is_fp8(*tensors) -> bool:
    """Whether any of tensors (None entries allowed) has an FP8 dtype."""
    for t in tensors:
        if isinstance(t, Tensor) and t.dtype in FP8_DTYPES:
            return True
    return False


def refuse_fp8_grad(call: str, q, k, v, params: dict) -> None:
    """Refuses FP8 inputs on a call autograd would record (the library has no FP8 backward), and
    descales that require grad (no gradient is computed for them)."""
    if (q.dtype in FP8_DTYPES or k.dtype in FP8_DTYPES or v.dtype in FP8_DTYPES) \
            and grad_wanted(q, k, v):
        raise unsupported(call, f"FP8 inputs (q.dtype {q.dtype}) have no backward pass, but an "
                          f"input requires grad: detach the FP8 tensors or call under "
                          f"torch.no_grad() (FP8 attention is forward only)")
    refuse_descale_grad(call, params)


def refuse_descale_grad(call: str, params: dict) -> None:
    """refuse_fp8_grad's part that a call needs_op declined can still meet: descales that require
    grad (with needs_op false, no input of q, k, v is one autograd would record)."""
    if params and not _DESCALE_SET.isdisjoint(params):
        for name in _DESCALES:
            d = params.get(name)
            if d is not None and grad_wanted(d):
                raise unsupported(call, f"{name} requires grad, but no gradient is computed for "
                                  f"the descales: detach them")


def _fwd_fp8_impl(q: Tensor, k: Tensor, v: Tensor, q_descale: Optional[Tensor],
                  k_descale: Optional[Tensor], v_descale: Optional[Tensor],
                  alibi_slopes: Optional[Tensor], seqused_k: Optional[Tensor],
                  rng_state: Optional[Tensor], descale_rows_q: int, descale_rows_k: int,
                  softmax_scale: float, causal: bool, causal_align: int, window_left: int,
                  window_right: int, softcap: float, dropout_p: float, num_splits: int,
                  deterministic: bool, backend: int, strict: bool,
                  kernel_family: str) -> tuple[Tensor, Tensor]:
    p = _params(alibi_slopes, None, None, seqused_k, None, rng_state, softmax_scale, causal,
                causal_align, window_left, window_right, softcap, dropout_p, 0, 0, 0, num_splits,
                deterministic, backend, strict, kernel_family)
    for name, value in (("q_descale", q_descale), ("k_descale", k_descale),
                        ("v_descale", v_descale), ("descale_rows_q", descale_rows_q),
                        ("descale_rows_k", descale_rows_k)):
        if value is not None and (isinstance(value, Tensor) or value):
            p[name] = value
    p["return_lse"] = True
    out, lse, _ = _call.forward(q, k, v, None, None, p)
    return out, lse


fwd_fp8 = torch.library.custom_op("flashattn::fwd_fp8", mutates_args=())(_fwd_fp8_impl)


@fwd_fp8.register_fake
def _fwd_fp8_fake(q, k, v, *args):
    out = q.new_empty(tuple(q.shape[:-1]) + (v.shape[-1],), dtype=torch.bfloat16)
    return out, q.new_empty(_lse_shape(q, False), dtype=torch.float32)


def _quantize_impl(x: Tensor, y_dtype: int, descale_shape: list[int], block_rows: int,
                   rotate: bool, seed: int, backend: int, strict: bool) -> tuple[Tensor, Tensor]:
    """(y, descale) of fa_quantize; y_dtype an fa_dtype, or 0 for x's (rotation only, descale
    then an empty placeholder)."""
    opts = {"block_rows": block_rows, "rotate": rotate, "rotate_seed": seed & ((1 << 64) - 1),
            "backend": backend, "strict": strict}
    if not y_dtype:
        y, _, _ = _call.quantize(x, None, None, None, None, opts)
        return y, x.new_empty((0,), dtype=torch.float32)
    y, d, _ = _call.quantize(x, None, None, y_dtype, tuple(descale_shape), opts)
    return y, d


quantize = torch.library.custom_op("flashattn::quantize", mutates_args=())(_quantize_impl)


@quantize.register_fake
def _quantize_fake(x, y_dtype, descale_shape, *args):
    if not y_dtype:
        return x.new_empty(x.shape), x.new_empty((0,), dtype=torch.float32)
    from ._dlpack import DTYPE_NAMES

    y = x.new_empty(x.shape, dtype=getattr(torch, DTYPE_NAMES[y_dtype]))
    return y, x.new_empty(tuple(descale_shape), dtype=torch.float32)


def quantize_op(call: str, x, y_dtype, descale_shape, opts: dict):
    """(y, descale) through flashattn::quantize (traced calls); refused where autograd would
    record the call (quantization has no gradient). The uint64 seed travels as the int64 of its
    bits (the schema's int)."""
    refuse_grad(call, x)
    seed = int(opts.get("rotate_seed") or 0) & ((1 << 64) - 1)
    if seed >= 1 << 63:
        seed -= 1 << 64
    return quantize(x, int(y_dtype or 0), list(descale_shape or ()),
                    int(opts.get("block_rows") or 0), bool(opts.get("rotate")), seed,
                    _call._backend_id(opts.get("backend") or 0), bool(opts.get("strict")))


# --- the binding's keyword dicts onto the operators ---------------------------------------------

_NOT_ON_OPS = ("stream", "workspace", "workspace_size")


_SCALARS = (type(None), bool, int, float, str)
_op_arguments_seen: dict = {}


def op_arguments(params: dict, call: str) -> dict:
    """fwd's keyword arguments (after q, k, v) of attention()'s keywords. Explicit dropout seeds
    become rng_state; what the operators cannot carry is refused, naming it (the descales of FP8
    inputs are fp8_arguments'). Keywords of plain values only (no tensor, no dropout) are
    translated once and then looked up: the translation is most of a small call's host time."""
    key = None
    if not params.get("dropout_p") and all(type(v_) in _SCALARS for v_ in params.values()):
        key = (call, tuple(sorted(params.items())))
        hit = _op_arguments_seen.get(key)
        if hit is not None:
            return dict(hit)  # callers add rng_state or pop entries
    a = _translate(params, call)
    if key is not None:
        if len(_op_arguments_seen) >= 256:
            _op_arguments_seen.clear()
        _op_arguments_seen[key] = dict(a)
    return a


def _translate(params: dict, call: str) -> dict:
    """op_arguments without the lookup."""
    unknown = sorted(set(params) - set(PARAMS))
    if unknown:
        raise TypeError(f"unknown flashattn parameter(s) {unknown}; known: {sorted(PARAMS)}")
    for name in _DESCALE_PARAMS:
        value = params.get(name)
        if value is not None and (not isinstance(value, (bool, int)) or value):
            raise invalid(call, f"params.{name} is set but the inputs are not FP8: descales "
                          f"belong to FP8 inputs (float8_e4m3fn / float8_e5m2)")
    for name in _NOT_ON_OPS:
        if params.get(name) is not None:
            raise unsupported(call, f"{name}= is not available when the call is traced or "
                              f"differentiated (the operator runs on PyTorch's current stream "
                              f"and allocates through PyTorch)")
    if params.get("check_indices"):
        raise unsupported(call, "check_indices= is not available when the call is traced or "
                          "differentiated (it reads the index tensors back with a "
                          "synchronisation): check them in an eager call under torch.no_grad()")
    for name in ("alibi_slopes", "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "block_table"):
        value = params.get(name)
        if value is not None and not isinstance(value, Tensor):
            raise TypeError(f"{call}: {name} must be a torch.Tensor when q is one")
    alibi = params.get("alibi_slopes")
    if alibi is not None and alibi.requires_grad and torch.is_grad_enabled():
        raise unsupported(call, "alibi_slopes requires grad, but no gradient is computed for "
                          "the slopes: detach them")
    left, right = params.get("window_left"), params.get("window_right")
    enabled = params.get("window_enabled")
    if enabled is None:
        enabled = left is not None or right is not None
    if not enabled:
        left = right = -1
    align = params.get("causal_align") or 0
    if isinstance(align, str):
        aligns = {"bottom_right": 0, "top_left": 1}
        if align not in aligns:
            raise ValueError(f"causal_align must be one of {sorted(aligns)}")
        align = aligns[align]
    dropout_p = float(params.get("dropout_p") or 0.0)
    rng = None
    if dropout_p:
        rng = rng_state_of(params.get("dropout_seed") or 0, params.get("dropout_offset") or 0)
    return dict(
        alibi_slopes=alibi, cu_seqlens_q=params.get("cu_seqlens_q"),
        cu_seqlens_k=params.get("cu_seqlens_k"), seqused_k=params.get("seqused_k"),
        block_table=params.get("block_table"), rng_state=rng,
        softmax_scale=float(params.get("softmax_scale") or 0.0),
        causal=bool(params.get("causal")), causal_align=int(align),
        window_left=-1 if left is None else int(left),
        window_right=-1 if right is None else int(right),
        softcap=float(params.get("softcap") or 0.0), dropout_p=dropout_p,
        max_seqlen_q=int(params.get("max_seqlen_q") or 0),
        max_seqlen_k=int(params.get("max_seqlen_k") or 0),
        page_size=int(params.get("page_size") or 0), num_splits=int(params.get("num_splits") or 0),
        deterministic=bool(params.get("deterministic")),
        backend=_call._backend_id(params.get("backend") or 0), strict=bool(params.get("strict")),
        kernel_family=str(params.get("kernel_family") or ""))


def grad_wanted(*tensors) -> bool:
    """Whether autograd would record a call on these tensors (None entries allowed)."""
    return torch.is_grad_enabled() and any(
        isinstance(t, Tensor) and t.requires_grad for t in tensors)


def refuse_grad(call: str, *tensors) -> None:
    """Refuses a call that has no backward pass on tensors autograd would record."""
    if grad_wanted(*tensors):
        raise unsupported(call, "this call has no backward pass, but an input requires grad: "
                          "call it under torch.no_grad() or torch.inference_mode()")


def is_traced(*tensors) -> bool:
    """traced() for any number of tensors (None entries allowed)."""
    ts = [t for t in tensors if t is not None]
    return any(traced(t, t, t) for t in ts)


def fp8_arguments(params: dict, call: str) -> dict:
    """fwd_fp8's keyword arguments (after q, k, v) of attention()'s keywords: op_arguments' less
    what FP8 inputs cannot have (varlen, paged KV: refused, naming it), plus the descales."""
    rest = {n: v_ for n, v_ in params.items() if n not in _DESCALE_PARAMS}
    a = op_arguments(rest, call)
    for name in ("cu_seqlens_q", "cu_seqlens_k", "block_table", "max_seqlen_q", "max_seqlen_k",
                 "page_size"):
        if a.pop(name):
            raise unsupported(call, f"params.{name} is set: FP8 inputs are dense [batch, "
                              f"seqlen, heads, dim] tensors (no varlen or paged KV with FP8)")
    for name in ("q_descale", "k_descale", "v_descale"):
        value = params.get(name)
        if value is not None and not isinstance(value, Tensor):
            raise TypeError(f"{call}: {name} must be a torch.Tensor when q is one")
        a[name] = value
    a["descale_rows_q"] = int(params.get("descale_rows_q") or 0)
    a["descale_rows_k"] = int(params.get("descale_rows_k") or 0)
    return a


def forward_op(q, k, v, params: dict, return_lse: bool, draw_seed: bool, call: str):
    """out, or (out, lse), through flashattn::fwd (flashattn::fwd_fp8 for FP8 inputs, which
    autograd may not record). draw_seed: a dropout mask's seed and offset come from PyTorch's
    generator (traced with the graph) instead of params."""
    if q.dtype in FP8_DTYPES or k.dtype in FP8_DTYPES or v.dtype in FP8_DTYPES:
        refuse_fp8_grad(call, q, k, v, params)
        a = fp8_arguments(params, call)
        if draw_seed and a["dropout_p"]:
            a["rng_state"] = draw_rng_state()
        out, lse = fwd_fp8(q, k, v, **a)
        return (out, lse) if return_lse else out
    a = op_arguments(params, call)
    if draw_seed and a["dropout_p"]:
        a["rng_state"] = draw_rng_state()
    if traced(q, k, v):  # the operator itself, differentiable by its register_autograd
        out, lse = fwd(q, k, v, **a, return_lse=return_lse)
    else:
        out, lse = _Attention.apply(q, k, v, a["alibi_slopes"], a["cu_seqlens_q"],
                                    a["cu_seqlens_k"], a["seqused_k"], a["block_table"],
                                    a["rng_state"], return_lse,
                                    *(a[name] for name in _FWD_SCALARS))
    return (out, lse) if return_lse else out


def attention(q, k, v, out, lse, return_info: bool, params: dict):
    """flashattn.attention on tensors that need the operators (needs_op)."""
    refuse_fp8_grad("attention", q, k, v, params)
    if out is not None or lse is not None:
        raise unsupported("attention", "out=/lse= cannot be written in place when the call is "
                          "traced or differentiated (inputs require grad): leave them out")
    if return_info:
        raise unsupported("attention", "return_info=True is not available when the call is "
                          "traced or differentiated (inputs require grad); flashattn.plan() "
                          "with the same arguments says what runs")
    p = {k_: v_ for k_, v_ in params.items() if k_ != "return_lse"}
    return forward_op(q, k, v, p, bool(params.get("return_lse")), False, "attention")


def attention_backward(dout, q, k, v, out, lse, grads, return_info: bool, params: dict):
    """flashattn.attention_backward on tensors that need the operators (traced or recorded)."""
    if is_fp8(q, k, v):
        raise unsupported("attention_backward", f"q.dtype = {q.dtype}: FP8 inputs have no "
                          f"backward pass (FP8 attention is forward only)")
    if grad_wanted(dout, q, k, v, out, lse):
        raise unsupported("attention_backward", "the backward pass is not differentiable (its "
                          "inputs require grad): call it under torch.no_grad(), or let autograd "
                          "differentiate flashattn.attention")
    if any(g is not None for g in grads) or return_info:
        raise unsupported("attention_backward", "dq=/dk=/dv= and return_info=True are not "
                          "available when the call is traced")
    args = op_arguments({k_: v_ for k_, v_ in params.items() if k_ != "return_lse"},
                        "attention_backward")
    return bwd(dout, q, k, v, out, lse, None, **args)


def kvcache_op(q, k_cache, v_cache, kv: dict, rotary_interleaved: bool, params: dict,
               return_lse: bool, call: str):
    """fa_forward_kvcache through flashattn::fwd_kvcache: out, or (out, lse)."""
    if is_fp8(q, k_cache, v_cache, kv.get("k_new"), kv.get("v_new")):
        raise unsupported(call, f"q.dtype = {q.dtype}: FP8 inputs are taken by attention only "
                          f"(no FP8 KV cache)")
    args = op_arguments(params, call)
    for name in ("cu_seqlens_q", "cu_seqlens_k", "seqused_k", "max_seqlen_q", "max_seqlen_k",
                 "page_size", "deterministic"):
        if args.pop(name):
            raise invalid(call, "page_size: the traced KV-cache call takes the page size from "
                          "k_cache.shape[1]" if name == "page_size" else
                          f"{name} is not an argument of the KV-cache call")
    if args.pop("rng_state") is not None or args.pop("dropout_p"):
        raise invalid(call, "dropout_p is not an argument of the KV-cache call")
    out, lse = fwd_kvcache(q, k_cache, v_cache, kv.get("k_new"), kv.get("v_new"),
                           kv["cache_seqlens"], kv.get("rotary_cos"), kv.get("rotary_sin"),
                           bool(rotary_interleaved), **args)
    return (out, lse) if return_lse else out


__all__ = ["fwd", "bwd", "fwd_kvcache", "fwd_fp8", "quantize", "needs_op", "grad_wanted"]
