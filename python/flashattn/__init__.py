"""flashattn: Python binding of flashattn-c (ctypes over libflashattn; no compiled extension).

    import numpy as np, flashattn
    out = flashattn.attention(q, k, v, causal=True)             # q [batch, seqlen_q, heads, dim]
    out, lse = flashattn.attention(q, k, v, return_lse=True)
    dq, dk, dv = flashattn.attention_backward(dout, q, k, v, out, lse, causal=True)
    for b in flashattn.backend_info(): print(b.name, b.available, b.reason)

Inputs are any objects offering __dlpack__ (NumPy arrays on the CPU; PyTorch and CuPy tensors on
CUDA; anything else NumPy can convert), viewed without copying. Outputs are allocated where the
inputs live by the inputs' own library (NumPy arrays for NumPy/CPU inputs, torch/cupy tensors for
theirs), or passed in (out=, lse=, dq=, dk=, dv=: any writable DLPack object). Every field of
fa_params is a keyword (see PARAMS); the library's conventions apply (api/flash_attn.h): layout
[batch, seqlen, heads, head_dim], causal bottom-right aligned, LSE float32 natural log.

The library is found as flashattn._capi.find_library says: $FLASHATTN_LIBRARY, else
libflashattn.so.0 through the dynamic linker, else this source tree's build/release/lib.
Failures raise FlashAttnError carrying the library's status and message.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, field

from . import _capi as C
from . import _dlpack as D

__all__ = [
    "attention",
    "attention_backward",
    "plan",
    "backend_info",
    "version",
    "release",
    "FlashAttnError",
    "RunInfo",
    "BackendInfo",
    "PARAMS",
]

# Every field of fa_params (except struct_size) and what it accepts here.
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
    "workspace": "a writable DLPack array used as scratch (workspace_size: its bytes)",
    "workspace_size": "int; bytes at workspace (default: the whole array)",
}
_TENSOR_PARAMS = ("alibi_slopes", "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "block_table")


class FlashAttnError(RuntimeError):
    """A call that failed: status (fa_status value), status_name ("FA_ERR_UNSUPPORTED"), message
    (fa_last_error(), naming the argument and the constraint) and call ("fa_forward")."""

    def __init__(self, call: str, status: int, status_name: str, message: str):
        super().__init__(f"{call}: {status_name}: {message}")
        self.call = call
        self.status = status
        self.status_name = status_name
        self.message = message


@dataclass(frozen=True)
class RunInfo:
    """What ran (fa_run_info)."""

    backend: str
    backend_id: int
    device_kind: str
    device_id: int
    kernel: str
    tile_m: int
    tile_n: int
    num_splits: int
    deterministic: bool
    workspace_bytes: int
    fell_back: bool
    rejected: str


@dataclass(frozen=True)
class BackendInfo:
    """One backend the library knows, loaded or not (fa_backend_desc)."""

    id: int
    name: str
    available: bool
    reason: str
    plugin_path: str
    device_count: int
    devices: str
    arch: str
    kernel_families: list = field(default_factory=list)
    dtypes: list = field(default_factory=list)
    features: list = field(default_factory=list)
    unsupported: str = ""


_lib = None
_lib_lock = threading.Lock()


def library() -> C.Library:
    """The loaded library (loaded on first use)."""
    global _lib
    with _lib_lock:
        if _lib is None:
            _lib = C.Library()
        return _lib


def _error(call: str, status: int) -> FlashAttnError:
    lib = library()
    return FlashAttnError(call, status, lib.status_name(status), lib.last_error())


def _view_error(e: D.ViewError) -> FlashAttnError:
    return FlashAttnError("flashattn", e.status, C.STATUS_NAMES.get(e.status, "?"), str(e))


def version() -> str:
    return library().version()


def release() -> None:
    """Frees the backends' workspaces and cached resources (fa_release)."""
    library().dll.fa_release()


def _split(s: str) -> list:
    return [x for x in s.split(",") if x]


def backend_info() -> list:
    """Every backend the library knows, as BackendInfo objects."""
    lib = library()
    n = 16
    descs = (C.FaBackendDesc * n)()
    for d in descs:
        lib.dll.fa_backend_desc_init(ctypes.byref(d))
    count = ctypes.c_int32()
    st = lib.dll.fa_backend_info(descs, n, ctypes.byref(count))
    if st != C.FA_OK:
        raise _error("fa_backend_info", st)
    return [
        BackendInfo(
            id=d.id,
            name=C.text(d.name),
            available=bool(d.available),
            reason=C.text(d.reason),
            plugin_path=C.text(d.plugin_path),
            device_count=d.device_count,
            devices=C.text(d.devices),
            arch=C.text(d.arch),
            kernel_families=_split(C.text(d.kernel_families)),
            dtypes=_split(C.text(d.dtypes)),
            features=_split(C.text(d.features)),
            unsupported=C.text(d.unsupported),
        )
        for d in descs[: min(count.value, n)]
    ]


def _run_info(info: C.FaRunInfo) -> RunInfo:
    return RunInfo(
        backend=C.text(info.backend_name),
        backend_id=info.backend,
        device_kind=C.text(library().dll.fa_device_kind_name(info.device.kind)),
        device_id=info.device.id,
        kernel=C.text(info.kernel),
        tile_m=info.tile_m,
        tile_n=info.tile_n,
        num_splits=info.num_splits,
        deterministic=bool(info.deterministic),
        workspace_bytes=info.workspace_bytes,
        fell_back=bool(info.fell_back),
        rejected=C.text(info.rejected),
    )


def _backend_id(value) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        i = ctypes.c_int32()
        lib = library()
        st = lib.dll.fa_backend_from_name(value.encode(), ctypes.byref(i))
        if st != C.FA_OK:
            raise _error("fa_backend_from_name", st)
        return i.value
    raise TypeError(f"backend must be a name or an int, not {type(value).__name__}")


def _stream_handle(value) -> int:
    if isinstance(value, int):
        return value
    for attr in ("cuda_stream", "ptr", "handle"):
        if hasattr(value, attr):
            return int(getattr(value, attr))
    raise TypeError(f"stream must be an int handle or have .cuda_stream/.ptr, not {type(value)}")


class _Call:
    """The fa_params of one call and everything that must stay alive until it returns."""

    def __init__(self, like, kwargs: dict):
        unknown = sorted(set(kwargs) - set(PARAMS))
        if unknown:
            raise TypeError(f"unknown flashattn parameter(s) {unknown}; known: {sorted(PARAMS)}")
        lib = library()
        self.keep: list = []
        p = C.FaParams()
        lib.dll.fa_params_init(ctypes.byref(p))
        stream = kwargs.get("stream")
        self.stream = _stream_handle(stream) if stream is not None else D.current_stream(like)
        p.stream = self.stream or None
        for name, value in kwargs.items():
            if value is None or name == "stream":
                continue
            if name in _TENSOR_PARAMS:
                setattr(p, name, ctypes.pointer(self.tensor(value, f"params.{name}")))
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
                b = str(value).encode()
                self.keep.append(b)
                p.kernel_family = b
            elif name == "workspace":
                t = self.tensor(value, "params.workspace")
                p.workspace = (t.data or 0) + t.byte_offset
                if kwargs.get("workspace_size") is None:  # bytes of the whole array
                    elems = 1
                    for i in range(t.ndim):
                        elems *= t.shape[i]
                    p.workspace_size = elems * {1: 4, 2: 2, 3: 2, 4: 4}[t.dtype]
            elif name in ("softmax_scale", "softcap", "dropout_p"):
                setattr(p, name, float(value))
            else:  # integers and booleans
                setattr(p, name, int(value))
        if (kwargs.get("window_left") is not None or kwargs.get("window_right") is not None) \
                and kwargs.get("window_enabled") is None:
            p.window_enabled = 1
            if kwargs.get("window_left") is None:
                p.window_left = -1
            if kwargs.get("window_right") is None:
                p.window_right = -1
        self.params = p

    def tensor(self, obj, name: str) -> C.FaTensor:
        try:
            t = D.view(obj, name, self.keep, self.stream)
        except D.ViewError as e:
            raise _view_error(e) from None
        self.keep.append(t)
        return t

    def output(self, given, like, shape, dtype, name):
        """(array, fa_tensor): the caller's array, or a new one where `like` lives."""
        if given is None:
            try:
                given = D.empty_like_namespace(like, shape, dtype)
            except D.ViewError as e:
                raise _view_error(e) from None
        return given, self.tensor(given, name)


def _ref(t):
    return ctypes.byref(t) if t is not None else None


def _lse_shape(call: _Call, q: C.FaTensor) -> tuple:
    s = D.shape_of(q)
    if call.params.cu_seqlens_q:  # packed q [total_q, heads, dim]: lse unpadded [heads, total_q]
        return (s[1], s[0])
    return (s[0], s[2], s[1])


def attention(q, k, v, *, out=None, lse=None, return_info: bool = False, **params):
    """out = softmax(q·kᵀ·scale + mask)·v (fa_forward).

    q [batch, seqlen_q, heads_q, dim], k [batch, seqlen_k, heads_kv, dim], v [..., dim_v]; packed
    [total, heads, dim] with cu_seqlens_q/k. Returns out, or (out, lse) with return_lse=True (lse
    float32 [batch, heads_q, seqlen_q]; a given lse= is written too), plus a RunInfo last with
    return_info=True. params: see PARAMS.
    """
    q = D.as_array(q, "q")
    call = _Call(q, params)
    tq, tk, tv = call.tensor(q, "q"), call.tensor(k, "k"), call.tensor(v, "v")
    want_lse = bool(params.get("return_lse")) or lse is not None
    out_shape = D.shape_of(tq)[:-1] + (tv.shape[tv.ndim - 1],)
    out, tout = call.output(out, q, out_shape, "like", "out")
    tlse = None
    if want_lse:
        lse, tlse = call.output(lse, q, _lse_shape(call, tq), "float32", "lse")
    info = C.FaRunInfo()
    lib = library()
    lib.dll.fa_run_info_init(ctypes.byref(info))
    st = lib.dll.fa_forward(ctypes.byref(call.params), ctypes.byref(tq), ctypes.byref(tk),
                            ctypes.byref(tv), ctypes.byref(tout), _ref(tlse), ctypes.byref(info))
    if st != C.FA_OK:
        raise _error("fa_forward", st)
    result = (out, lse) if params.get("return_lse") else out
    if return_info:
        return (*(result if isinstance(result, tuple) else (result,)), _run_info(info))
    return result


def attention_backward(dout, q, k, v, out, lse, *, dq=None, dk=None, dv=None,
                       return_info: bool = False, **params):
    """Gradients (dq, dk, dv) of attention (fa_backward), from the forward's out and lse; params
    must be the forward call's. Returns (dq, dk, dv), plus a RunInfo last with return_info=True."""
    q = D.as_array(q, "q")
    call = _Call(q, params)
    tq, tk, tv = call.tensor(q, "q"), call.tensor(k, "k"), call.tensor(v, "v")
    tout, tlse, tdo = call.tensor(out, "out"), call.tensor(lse, "lse"), call.tensor(dout, "dout")
    k = D.as_array(k, "k")
    v = D.as_array(v, "v")
    dq, tdq = call.output(dq, q, D.shape_of(tq), "like", "dq")
    dk, tdk = call.output(dk, k, D.shape_of(tk), "like", "dk")
    dv, tdv = call.output(dv, v, D.shape_of(tv), "like", "dv")
    info = C.FaRunInfo()
    lib = library()
    lib.dll.fa_run_info_init(ctypes.byref(info))
    st = lib.dll.fa_backward(ctypes.byref(call.params), ctypes.byref(tq), ctypes.byref(tk),
                             ctypes.byref(tv), ctypes.byref(tout), ctypes.byref(tlse),
                             ctypes.byref(tdo), ctypes.byref(tdq), ctypes.byref(tdk),
                             ctypes.byref(tdv), ctypes.byref(info))
    if st != C.FA_OK:
        raise _error("fa_backward", st)
    if return_info:
        return dq, dk, dv, _run_info(info)
    return dq, dk, dv


def plan(q, k, v, **params) -> RunInfo:
    """What attention(q, k, v, **params) would run, without running it (fa_plan_forward)."""
    q = D.as_array(q, "q")
    call = _Call(q, params)
    tq, tk, tv = call.tensor(q, "q"), call.tensor(k, "k"), call.tensor(v, "v")
    # out as a call would pass it, at an address no array of the process has (the upper half of
    # the address space: no output may share memory with an input); a plan never touches it.
    tout = C.FaTensor.from_buffer_copy(tq)
    tout.data = 1 << 63
    tout.byte_offset = 0
    tout.shape[tout.ndim - 1] = tv.shape[tv.ndim - 1]
    tout.strides[:] = [0] * C.FA_MAX_DIMS
    stride = 1
    for i in reversed(range(tout.ndim)):
        tout.strides[i] = stride
        stride *= tout.shape[i]
    info = C.FaRunInfo()
    lib = library()
    lib.dll.fa_run_info_init(ctypes.byref(info))
    st = lib.dll.fa_plan_forward(ctypes.byref(call.params), ctypes.byref(tq), ctypes.byref(tk),
                                 ctypes.byref(tv), ctypes.byref(tout), None, ctypes.byref(info))
    if st != C.FA_OK:
        raise _error("fa_plan_forward", st)
    return _run_info(info)
