"""The library's calls on described arrays (_tensors), with their ctypes structs cached.

A call's signature is the layout key of every tensor it passes and its scalar parameters. The
first call of a signature builds a _Plan: the fa_params, every fa_tensor (fa_kvcache_args and
fa_run_info too) and the ctypes arguments of the C call; later calls of the signature store the
data addresses and the stream, allocate their outputs and call. Plans are kept per thread (two
threads never share a struct), at most _MAX_PLANS per thread. A call with an array read through
DLPack, or whose parameters cannot be hashed, builds its plan afresh and does not keep it.
"""

from __future__ import annotations

import ctypes
import threading

from . import _capi as C
from . import _dlpack as D
from . import _tensors as T
from ._tensors import ViewError

_MAX_PLANS = 1024
_local = threading.local()
_lib = None
_lib_lock = threading.Lock()

# Every field of fa_params (except struct_size) and what it accepts.
PARAMS = {
    "softmax_scale": "float; 0 or None: 1/sqrt(head_dim)",
    "causal": "bool",
    "causal_align": "'bottom_right' (default) | 'top_left' | 0 | 1",
    "window_enabled": "bool; implied by window_left/window_right",
    "window_left": "int, keys left of the diagonal (inclusive); -1 unbounded",
    "window_right": "int, keys right of the diagonal (inclusive); -1 unbounded",
    "softcap": "float; > 0: tanh softcapping",
    "alibi_slopes": "float32 array [heads_q] or [batch, heads_q]",
    "dropout_p": "float in [0, 1)",
    "dropout_seed": "int",
    "dropout_offset": "int",
    "cu_seqlens_q": "int32 array [batch + 1] (packed q/out [total_q, heads, dim])",
    "cu_seqlens_k": "int32 array [batch + 1] (packed k/v)",
    "seqused_k": "int32 array [batch]",
    "max_seqlen_q": "int",
    "max_seqlen_k": "int",
    "block_table": "int32 array [batch, max_blocks] (paged k/v)",
    "page_size": "int",
    "num_splits": "int; 0: backend's choice",
    "deterministic": "bool",
    "return_lse": "bool; attention() then returns (out, lse)",
    "stream": "int handle (cudaStream_t, ...) or an object with .cuda_stream / .ptr; "
    "default: torch's / cupy's current stream for their CUDA tensors",
    "backend": "'auto' | 'cpu' | 'cuda' | 'hip' | 'opencl' | an fa_backend_id",
    "strict": "bool; refuse instead of falling back",
    "kernel_family": "str, e.g. 'fa2'",
    "workspace": "a writable DLPack array in the tensors' memory, used as scratch (workspace_size: "
                 "its bytes)",
    "workspace_size": "int; bytes at workspace (default: the whole array)",
    "check_indices": "bool; copy index arrays in device memory to the host and check them "
    "(a synchronisation); host ones are always checked",
    "q_descale": "float32 array [batch or 1, heads_q or 1, blocks] (FP8 q): an element of q "
    "stands for its stored value times the descale of its batch, head and block of "
    "descale_rows_q rows; None: 1",
    "k_descale": "float32 array [batch or 1, heads_kv or 1, blocks] (FP8 k), blocks of "
    "descale_rows_k keys; None: 1",
    "v_descale": "float32 array [batch or 1, heads_kv or 1, blocks] (FP8 v), as k_descale",
    "descale_rows_q": "int, query rows per q_descale block; 0: one block (blocks = "
    "ceil(seqlen_q / rows))",
    "descale_rows_k": "int, key rows per k_descale/v_descale block; 0: one block",
}
TENSOR_PARAMS = ("alibi_slopes", "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "block_table",
                 "workspace", "q_descale", "k_descale", "v_descale")
_TENSOR_PARAMS = frozenset(TENSOR_PARAMS)
_GPU = (C.FA_DEVICE_CUDA, C.FA_DEVICE_HIP)
_QKV = ("q", "k", "v")
_OUT_LSE_DOUT = ("out", "lse", "dout")
_BWD_INPUTS = _QKV + _OUT_LSE_DOUT
_GRADS = ("dq", "dk", "dv")
FP8 = (C.FA_F8E4M3, C.FA_F8E5M2)
_DTYPE_BYTES = {C.FA_F32: 4, C.FA_F16: 2, C.FA_BF16: 2, C.FA_I32: 4, C.FA_F8E4M3: 1,
                C.FA_F8E5M2: 1}


class FlashAttnError(RuntimeError):
    """A call that failed: status (fa_status value), status_name ("FA_ERR_UNSUPPORTED"), message
    (fa_last_error(), naming the argument and the constraint) and call ("fa_forward")."""

    def __init__(self, call: str, status: int, status_name: str, message: str):
        super().__init__(f"{call}: {status_name}: {message}")
        self.call = call
        self.status = status
        self.status_name = status_name
        self.message = message


def unsupported(call: str, message: str) -> FlashAttnError:
    """The error of a feature this binding cannot honour (FA_ERR_UNSUPPORTED)."""
    return FlashAttnError(call, C.FA_ERR_UNSUPPORTED, "FA_ERR_UNSUPPORTED", message)


def invalid(call: str, message: str) -> FlashAttnError:
    """The error of an argument that breaks a constraint (FA_ERR_INVALID_ARGUMENT)."""
    return FlashAttnError(call, C.FA_ERR_INVALID_ARGUMENT, "FA_ERR_INVALID_ARGUMENT", message)


def library() -> C.Library:
    """The loaded library (loaded on first use)."""
    global _lib
    if _lib is None:
        with _lib_lock:
            if _lib is None:
                _lib = C.Library()
    return _lib


def error(call: str, status: int) -> FlashAttnError:
    lib = library()
    return FlashAttnError(call, status, lib.status_name(status), lib.last_error())


def _invoke(name: str, plan) -> None:
    """Calls the C function `name` with a plan's arguments; FlashAttnError on any status but FA_OK."""
    fn = plan.fn  # the C function, looked up on a plan's first call (one name per plan)
    if fn is None:
        fn = plan.fn = getattr(library().dll, name)
    st = fn(*plan.args)
    if st != C.FA_OK:
        e = error(name, st)
        e.ring_joined = True  # a ring call that reached the library took part in its agreement
        raise e


def ring_abstain(name: str, ring) -> None:
    """Takes part in a ring call's agreement without arguments (the C call with no tensors, which
    every rank then refuses), for a rank whose arguments failed before reaching the library:
    without it the other ranks would wait for this one forever."""
    if ring[0] == C.FA_TRANSPORT_SELF:
        return
    r = _ring_args(ring)
    r.comm = ring[2]
    nulls = (None,) * (6 if name == "fa_ring_forward" else 10)
    getattr(library().dll, name)(None, ctypes.byref(r), *nulls)


def view_error(e: ViewError) -> FlashAttnError:
    return FlashAttnError("flashattn", e.status, C.STATUS_NAMES.get(e.status, "?"), str(e))


def _backend_id(value) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        i = ctypes.c_int32()
        st = library().dll.fa_backend_from_name(value.encode(), ctypes.byref(i))
        if st != C.FA_OK:
            raise error("fa_backend_from_name", st)
        return i.value
    raise TypeError(f"backend must be a name or an int, not {type(value).__name__}")


def stream_handle(value) -> int:
    if isinstance(value, int):
        return value
    for attr in ("cuda_stream", "ptr", "handle"):
        if hasattr(value, attr):
            return int(getattr(value, attr))
    raise TypeError(f"stream must be an int handle or have .cuda_stream/.ptr, not {type(value)}")


def _params_struct(params: dict, tensors: dict) -> C.FaParams:
    """fa_params of a call's keywords; tensors maps the tensor keywords to their fa_tensor."""
    unknown = sorted(set(params) - set(PARAMS))
    if unknown:
        raise TypeError(f"unknown flashattn parameter(s) {unknown}; known: {sorted(PARAMS)}")
    p = C.FaParams()
    library().dll.fa_params_init(ctypes.byref(p))
    for name, value in params.items():
        if value is None or name == "stream":
            continue
        if name == "workspace":
            t = tensors[name]
            if params.get("workspace_size") is None:  # bytes of the whole array
                elems = 1
                for i in range(t.ndim):
                    elems *= t.shape[i]
                p.workspace_size = elems * _DTYPE_BYTES[t.dtype]
        elif name in _TENSOR_PARAMS:
            setattr(p, name, ctypes.pointer(tensors[name]))
        elif name == "causal_align":
            if isinstance(value, str):
                aligns = {"bottom_right": 0, "top_left": 1}
                if value not in aligns:
                    raise ValueError(f"causal_align must be one of {sorted(aligns)}")
                value = aligns[value]
            p.causal_align = int(value)
        elif name == "backend":
            p.backend = _backend_id(value)
        elif name == "kernel_family":
            p.kernel_family = str(value).encode()  # kept alive by the struct
        elif name in ("softmax_scale", "softcap", "dropout_p"):
            setattr(p, name, float(value))
        else:  # integers and booleans
            setattr(p, name, int(value))
    if (params.get("window_left") is not None or params.get("window_right") is not None) \
            and params.get("window_enabled") is None:
        p.window_enabled = 1
        if params.get("window_left") is None:
            p.window_left = -1
        if params.get("window_right") is None:
            p.window_right = -1
    return p


class _Plan:
    """The ctypes structs of one signature (see the module's docstring)."""

    __slots__ = ("tensors", "params", "kv", "info", "args", "shapes", "gpu", "ws", "odtype",
                 "ring", "fn")

    def __init__(self):
        self.fn = None

    def bind(self, addresses, stream) -> None:
        for t, a in zip(self.tensors, addresses):
            t.data = a
        self.params.stream = stream
        if self.ws is not None:
            t = self.tensors[self.ws]
            self.params.workspace = (t.data or 0) + t.byte_offset


def _scan(params: dict, keep: list, stream):
    """The hashable key of a call's keywords (a tensor keyword's value replaced by its layout
    key), the names and keys of its tensor keywords and their addresses. The key keeps the
    keywords' order (a call site passes them in one order; another order only makes another
    plan)."""
    if not params:
        return (), (), ()
    names = _TENSOR_PARAMS.intersection(params)
    if not names:  # the common call: scalars only
        if "stream" in params:
            return tuple([kv for kv in params.items() if kv[0] != "stream"]), (), ()
        return tuple(params.items()), (), ()
    d = dict(params)
    d.pop("stream", None)
    slots, addrs = [], []
    for name in sorted(names):  # one order for the slots of every call of a plan
        value = d[name]
        if value is not None:
            key, addr = T.describe(value, "params." + name, keep, stream)
            d[name] = key
            slots.append((name, key))
            addrs.append(addr)
    return tuple(d.items()), tuple(slots), tuple(addrs)


def _lookup(sig, keep: list):
    """(the cached plan of sig or None, whether a plan built for sig may be cached): not where an
    array was read through DLPack (keep) or a parameter value is unhashable (such a plan is built
    afresh, and refused if invalid)."""
    if keep:
        return None, False
    try:
        cache = _local.plans
    except AttributeError:
        cache = _local.plans = {}
    try:
        return cache.get(sig), True
    except TypeError:
        return None, False


def _store(sig, plan: _Plan) -> None:
    cache = _local.plans
    if len(cache) >= _MAX_PLANS:
        cache.clear()
    cache[sig] = plan


def _plan(sig, keep: list, build, *args):
    """The cached plan of sig, or build(*args) (cached where _lookup allows). The builder takes its
    inputs as arguments, so a call whose plan is cached makes no closure."""
    plan, cacheable = _lookup(sig, keep)
    if plan is None:
        plan = build(*args)
        if cacheable:
            _store(sig, plan)
    return plan


def _new_plan(tensors: list, params: dict, pslots: tuple) -> _Plan:
    """A plan's fa_tensor copies (call slots, then tensor keywords) and fa_params."""
    plan = _Plan()
    ptensors = [C.FaTensor.from_buffer_copy(T.template(k, "params." + n)) for n, k in pslots]
    plan.tensors = tensors + ptensors
    plan.params = _params_struct(params, {n: t for (n, _), t in zip(pslots, ptensors)})
    plan.kv = None
    plan.info = C.FaRunInfo()
    library().dll.fa_run_info_init(ctypes.byref(plan.info))
    plan.gpu = tensors[0].device.kind in _GPU
    plan.ws = len(tensors) + [n for n, _ in pslots].index("workspace") \
        if params.get("workspace") is not None else None
    if plan.ws is not None:
        _check_workspace_device(plan.tensors[plan.ws].device, tensors[0].device)
    plan.odtype = None
    return plan


def _device_name(d: C.FaDevice) -> str:
    return f"{C.text(library().dll.fa_device_kind_name(d.kind))}:{d.id}"


def _check_workspace_device(ws: C.FaDevice, first: C.FaDevice) -> None:
    """fa_params.workspace is a bare address, which the library cannot place: a workspace in
    another memory than the call's tensors would be written by the wrong device."""
    if (ws.kind, ws.id) != (first.kind, first.id):
        raise ViewError(C.FA_ERR_INVALID_ARGUMENT,
                        f"params.workspace is in {_device_name(ws)} memory but the call's tensors "
                        f"are in {_device_name(first)} memory")


def _copy(key, name):
    return C.FaTensor.from_buffer_copy(T.template(key, name))


def _stream(params: dict):
    s = params.get("stream")
    return None if s is None else stream_handle(s)


def _dlpack_stream(explicit, like):
    """The stream the arrays are read for: None (the direct readers, cached plans) when there is
    no explicit stream or it is the current stream of like's device (PyTorch's, CuPy's), where
    DLPack's handshake between producer and consumer streams has nothing to order; else the
    explicit stream, and every array goes through DLPack."""
    if explicit is None or explicit == D.current_stream(like):
        return None
    return explicit


def _call_stream(plan: _Plan, explicit, like):
    if explicit is not None:
        return explicit
    return (D.current_stream(like) or None) if plan.gpu else None


def _lse_shape(q: C.FaTensor, params: dict) -> tuple:
    s = T.shape_of(q)
    if params.get("cu_seqlens_q") is not None:  # packed q: lse unpadded [heads, total_q]
        return (s[1], s[0])
    return (s[0], s[2], s[1])


def _alloc(like, name, shape, dtype, keep, explicit, cached):
    """(array, address) of a new output beside `like`, of like's dtype (dtype None) or the
    fa_dtype dtype."""
    try:
        arr = T.empty(like, shape, dtype)
    except ViewError as e:
        raise view_error(e) from None
    if cached:
        return arr, T.address(arr)
    _, addr = T.describe(arr, name, keep, explicit)
    return arr, addr


def _describe_out_lse(out, lse, keep, explicit):
    """The caller's out and lse where given: (out key, out address, lse key, lse address), None
    for one not given."""
    ko = ao = kl = al = None
    if out is not None:
        ko, ao = T.describe_output(out, "out", keep, explicit)
    if lse is not None:
        kl, al = T.describe_output(lse, "lse", keep, explicit)
    return ko, ao, kl, al


def out_dtype(q_dtype: int) -> int | None:
    """The dtype of an output allocated for q's dtype: bfloat16 for FP8 q (whose output must be
    f16 or bf16; bf16 keeps FP8's range), else None (q's own)."""
    return C.FA_BF16 if q_dtype in FP8 else None


def _out_lse_structs(tq, tv, ko, kl, want_lse, params):
    """A new plan's out and lse structs (the caller's, else contiguous ones where q lives, of q's
    dtype or out_dtype's; lse None when not wanted) and their shapes: out [..., v's head_dim], lse
    as _lse_shape says."""
    out_shape = T.shape_of(tq)[:-1] + (tv.shape[tv.ndim - 1],)
    odt = out_dtype(tq.dtype)
    tout = _copy(ko, "out") if ko is not None \
        else T.contiguous(tq, out_shape, tq.dtype if odt is None else odt)
    lse_shape = _lse_shape(tq, params)
    tlse = None
    if kl is not None:
        tlse = _copy(kl, "lse")
    elif want_lse:
        tlse = T.contiguous(tq, lse_shape, C.FA_F32)
    return tout, tlse, out_shape, lse_shape


def _out_lse_addresses(q, out, lse, ao, al, plan, plan_only, want_lse, keep, explicit):
    """(out, lse, their addresses for plan.bind): outputs not given are allocated beside q; a plan
    only gets out at an address it never touches."""
    cached = not keep
    if plan_only:
        ao = 1 << 63
    elif out is None:
        out, ao = _alloc(q, "out", plan.shapes[0], plan.odtype, keep, explicit, cached)
    tail = (ao,)
    if want_lse:
        if lse is None:
            lse, al = _alloc(q, "lse", plan.shapes[1], C.FA_F32, keep, explicit, cached)
        tail += (al,)
    return out, lse, tail


def _ring_args(ring) -> C.FaRingArgs:
    """fa_ring_args of ring = (transport, layout, ...), without its communicator."""
    r = C.FaRingArgs()
    library().dll.fa_ring_args_init(ctypes.byref(r))
    r.transport, r.layout = ring[0], ring[1]
    return r


def _attach_ring(plan: _Plan, ring) -> None:
    """Gives a new plan the fa_ring_args of ring = (transport, layout, ...), passed after its
    fa_params; the communicator is bound per call."""
    r = _ring_args(ring)
    plan.ring = r
    plan.args = plan.args[:1] + (ctypes.byref(r),) + plan.args[1:]


def _forward_plan(kq, kk, kv, ko, kl, want_lse: bool, params: dict, pslots: tuple,
                  plan_only: bool, ring) -> _Plan:
    """A new plan of forward()'s: the structs of q, k, v (keys kq, kk, kv), out and lse (the
    caller's keys ko, kl, or allocated ones), the params and the call's arguments."""
    tq, tk, tv = _copy(kq, "q"), _copy(kk, "k"), _copy(kv, "v")
    tout, tlse, out_shape, lse_shape = _out_lse_structs(tq, tv, ko, kl, want_lse, params)
    slots = [tq, tk, tv, tout] + ([tlse] if tlse is not None else [])
    plan = _new_plan(slots, params, pslots)
    plan.shapes = (out_shape, lse_shape)
    plan.odtype = out_dtype(tq.dtype)
    if plan_only:
        # out at an address no array of the process has (the upper half of the address space: no
        # output may share memory with an input); a plan never touches it.
        tout.data = 1 << 63
    r = ctypes.byref
    plan.args = (r(plan.params), r(tq), r(tk), r(tv), r(tout),
                 r(tlse) if tlse is not None else None, r(plan.info))
    if ring is not None:
        _attach_ring(plan, ring)
    return plan


def forward(q, k, v, out, lse, params: dict, plan_only: bool = False, ring=None):
    """fa_forward (fa_plan_forward with plan_only; fa_ring_forward with ring = (transport, layout,
    communicator address)): (out, lse or None, RunInfo struct)."""
    keep: list = []
    explicit = _stream(params)
    via = _dlpack_stream(explicit, q)
    want_lse = not plan_only and (bool(params.get("return_lse")) or lse is not None)
    try:
        (kq, aq), (kk, ak), (kv, av) = T.describe3(q, k, v, _QKV, keep, via)
        ko, ao, kl, al = _describe_out_lse(out, lse, keep, via)
        pkey, pslots, paddrs = _scan(params, keep, via)
        op = ("ring_fwd", ring[0], ring[1]) if ring is not None else \
            ("plan" if plan_only else "fwd")
        plan = _plan((op, kq, kk, kv, ko, kl, want_lse, pkey), keep, _forward_plan, kq, kk, kv,
                     ko, kl, want_lse, params, pslots, plan_only, ring)
        if ring is not None:
            plan.ring.comm = ring[2]
        if out is not None and (lse is not None or not want_lse) and not plan_only:
            tail = (ao, al) if want_lse else (ao,)  # the common call: both given
        else:
            out, lse, tail = _out_lse_addresses(q, out, lse, ao, al, plan, plan_only, want_lse,
                                                keep, via)
        plan.bind((aq, ak, av) + tail + paddrs, _call_stream(plan, explicit, q))
    except ViewError as e:
        raise view_error(e) from None
    _invoke("fa_ring_forward" if ring is not None else
            "fa_plan_forward" if plan_only else "fa_forward", plan)
    return out, (lse if want_lse else None), plan.info


def _backward_plan(keys, given, params: dict, pslots: tuple, ring) -> _Plan:
    """A new plan of backward()'s: the structs of q, k, v, out, lse, dout (keys), dq, dk, dv (the
    caller's keys given, or contiguous ones shaped as q, k, v), the params and the arguments."""
    ts = [_copy(key, name) for key, name in zip(keys, _BWD_INPUTS)]
    for i, name in enumerate(_GRADS):
        like = ts[i]
        ts.append(_copy(given[i], name) if given[i] is not None
                  else T.contiguous(like, T.shape_of(like), like.dtype))
    plan = _new_plan(ts, params, pslots)
    plan.shapes = tuple(T.shape_of(ts[i]) for i in range(3))
    r = ctypes.byref
    plan.args = (r(plan.params),) + tuple(r(t) for t in ts) + (r(plan.info),)
    if ring is not None:
        _attach_ring(plan, ring)
    return plan


def backward(dout, q, k, v, out, lse, dq, dk, dv, params: dict, ring=None):
    """fa_backward (fa_ring_backward with ring, as forward's): (dq, dk, dv, RunInfo struct)."""
    keep: list = []
    explicit = _stream(params)
    via = _dlpack_stream(explicit, q)
    try:
        (kq, aq), (kk, ak), (kv, av) = T.describe3(q, k, v, _QKV, keep, via)
        (ko, ao), (kl, al), (kd, ad) = T.describe3(out, lse, dout, _OUT_LSE_DOUT, keep, via)
        grads = [dq, dk, dv]
        given = [None, None, None]
        gaddrs = [None, None, None]
        for i in range(3):
            if grads[i] is not None:
                given[i], gaddrs[i] = T.describe_output(grads[i], _GRADS[i], keep, via)
        pkey, pslots, paddrs = _scan(params, keep, via)
        keys = (kq, kk, kv, ko, kl, kd)
        op = ("ring_bwd", ring[0], ring[1]) if ring is not None else ("bwd",)
        plan = _plan((*op, *keys, *given, pkey), keep, _backward_plan, keys, given, params,
                     pslots, ring)
        if ring is not None:
            plan.ring.comm = ring[2]
        cached = not keep
        for i, like in enumerate((q, k, v)):
            if grads[i] is None:
                grads[i], gaddrs[i] = _alloc(like, _GRADS[i], plan.shapes[i], None, keep, via,
                                             cached)
        plan.bind((aq, ak, av, ao, al, ad, *gaddrs) + paddrs, _call_stream(plan, explicit, q))
    except ViewError as e:
        raise view_error(e) from None
    _invoke("fa_ring_backward" if ring is not None else "fa_backward", plan)
    return grads[0], grads[1], grads[2], plan.info


_KV_FIELDS = ("k_new", "v_new", "cache_seqlens", "rotary_cos", "rotary_sin")


def _kvcache_plan(keys, names, ko, kl, want_lse: bool, rotary_interleaved: bool, params: dict,
                  pslots: tuple, plan_only: bool) -> _Plan:
    """A new plan of forward_kvcache()'s: the structs of q, k_cache, v_cache and the present
    fa_kvcache_args fields (keys, names), out and lse, fa_kvcache_args, the params and the
    arguments."""
    tq, tkc, tvc = (_copy(k, n) for k, n in zip(keys, ("q", "k_cache", "v_cache")))
    tkv = [_copy(k, "kv." + n) for k, n in zip(keys[3:], names)]
    tout, tlse, out_shape, lse_shape = _out_lse_structs(tq, tvc, ko, kl, want_lse, params)
    slots = [tq, tkc, tvc] + tkv + [tout] + ([tlse] if tlse is not None else [])
    plan = _new_plan(slots, params, pslots)
    plan.shapes = (out_shape, lse_shape)
    plan.odtype = out_dtype(tq.dtype)
    args = C.FaKvcacheArgs()
    library().dll.fa_kvcache_args_init(ctypes.byref(args))
    for n, t in zip(names, tkv):
        setattr(args, n, ctypes.pointer(t))
    args.rotary_interleaved = int(bool(rotary_interleaved))
    plan.kv = args
    if plan_only:
        tout.data = 1 << 63  # as forward()'s plan
    r = ctypes.byref
    plan.args = (r(plan.params), r(tq), r(tkc), r(tvc), r(args), r(tout),
                 r(tlse) if tlse is not None else None, r(plan.info))
    return plan


def forward_kvcache(q, k_cache, v_cache, kv: dict, rotary_interleaved: bool, out, lse,
                    params: dict, plan_only: bool = False):
    """fa_forward_kvcache (fa_plan_forward_kvcache with plan_only): (out, lse or None, RunInfo
    struct). kv maps fa_kvcache_args' tensor fields (_KV_FIELDS) to arrays or None."""
    keep: list = []
    explicit = _stream(params)
    via = _dlpack_stream(explicit, q)
    want_lse = not plan_only and (bool(params.get("return_lse")) or lse is not None)
    try:
        kq, aq = T.describe(q, "q", keep, via)
        kkc, akc = T.describe_output(k_cache, "k_cache", keep, via)  # the caches are written
        kvc, avc = T.describe_output(v_cache, "v_cache", keep, via)
        keys, addrs, names = [kq, kkc, kvc], [aq, akc, avc], []
        for name in _KV_FIELDS:
            obj = kv.get(name)
            if obj is not None:
                key, addr = T.describe(obj, "kv." + name, keep, via)
                names.append(name)
                keys.append(key)
                addrs.append(addr)
        ko, ao, kl, al = _describe_out_lse(out, lse, keep, via)
        pkey, pslots, paddrs = _scan(params, keep, via)
        names = tuple(names)
        sig = ("kvplan" if plan_only else "kv", *keys, names, bool(rotary_interleaved),
               ko, kl, want_lse, pkey)
        plan = _plan(sig, keep, _kvcache_plan, keys, names, ko, kl, want_lse, rotary_interleaved,
                     params, pslots, plan_only)
        out, lse, tail = _out_lse_addresses(q, out, lse, ao, al, plan, plan_only, want_lse, keep,
                                            via)
        plan.bind(tuple(addrs) + tail + paddrs, _call_stream(plan, explicit, q))
    except ViewError as e:
        raise view_error(e) from None
    _invoke("fa_plan_forward_kvcache" if plan_only else "fa_forward_kvcache", plan)
    return out, (lse if want_lse else None), plan.info


_QUANTIZE_OPTIONS = ("block_rows", "rotate", "rotate_seed", "backend", "strict")


def quantize(x, y, descale, y_dtype: int | None, descale_shape, opts: dict):
    """fa_quantize: (y, descale or None, RunInfo struct). Where not passed, y (of the fa_dtype
    y_dtype, None: x's) and, with descale_shape, descale (float32) are allocated beside x. opts:
    fa_quantize_args' fields (_QUANTIZE_OPTIONS) and stream."""
    keep: list = []
    explicit = _stream(opts)
    via = _dlpack_stream(explicit, x)
    want_descale = descale is not None or descale_shape is not None
    try:
        kx, ax = T.describe(x, "x", keep, via)
        ky = ay = kd = ad = None
        if y is not None:
            ky, ay = T.describe_output(y, "y", keep, via)
        if descale is not None:
            kd, ad = T.describe_output(descale, "descale", keep, via)
        okey = tuple((n, opts.get(n)) for n in _QUANTIZE_OPTIONS)

        def build():
            tx = _copy(kx, "x")
            shape = T.shape_of(tx)
            ty = _copy(ky, "y") if ky is not None \
                else T.contiguous(tx, shape, tx.dtype if y_dtype is None else y_dtype)
            td = None
            if kd is not None:
                td = _copy(kd, "descale")
            elif descale_shape is not None:
                td = T.contiguous(tx, descale_shape, C.FA_F32)
            a = C.FaQuantizeArgs()
            library().dll.fa_quantize_args_init(ctypes.byref(a))
            a.block_rows = int(opts.get("block_rows") or 0)
            a.rotate = int(bool(opts.get("rotate")))
            a.rotate_seed = int(opts.get("rotate_seed") or 0) & ((1 << 64) - 1)
            a.backend = _backend_id(opts.get("backend") or 0)
            a.strict = int(bool(opts.get("strict")))
            plan = _Plan()
            plan.tensors = [tx, ty] + ([td] if td is not None else [])
            plan.params = a  # bind() stores the stream in it, as in fa_params
            plan.kv = None
            plan.info = C.FaRunInfo()
            library().dll.fa_run_info_init(ctypes.byref(plan.info))
            plan.gpu = tx.device.kind in _GPU
            plan.ws = None
            plan.odtype = y_dtype
            plan.shapes = (shape, descale_shape)
            r = ctypes.byref
            plan.args = (r(a), r(tx), r(ty), r(td) if td is not None else None, r(plan.info))
            return plan

        plan = _plan(("quant", kx, ky, kd, y_dtype, descale_shape, okey), keep, build)
        cached = not keep
        if y is None:
            y, ay = _alloc(x, "y", plan.shapes[0], y_dtype, keep, via, cached)
        addrs = (ax, ay)
        if want_descale:
            if descale is None:
                descale, ad = _alloc(x, "descale", descale_shape, C.FA_F32, keep, via, cached)
            addrs += (ad,)
        plan.bind(addrs, _call_stream(plan, explicit, x))
    except ViewError as e:
        raise view_error(e) from None
    _invoke("fa_quantize", plan)
    return y, descale, plan.info
