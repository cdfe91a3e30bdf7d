"""The binding's public calls (re-exported by flashattn/__init__.py)."""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass, field

from . import _call
from . import _capi as C
from ._call import FlashAttnError, error, library, unsupported


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


def version() -> str:
    return library().version()


def release() -> None:
    """Frees the backends' workspaces and cached resources (fa_release)."""
    library().dll.fa_release()


def _split(s: str) -> list:
    return [x for x in s.split(",") if x]


def _described(call: str, ctype, init, n: int) -> list:
    """The descriptors a listing call (fa_backend_info, fa_transport_info) fills: n of ctype, each
    set up by init, of which the call reports how many it knows."""
    descs = (ctype * n)()
    for d in descs:
        init(ctypes.byref(d))
    count = ctypes.c_int32()
    st = getattr(library().dll, call)(descs, n, ctypes.byref(count))
    if st != C.FA_OK:
        raise error(call, st)
    return descs[: min(count.value, n)]


def backend_info() -> list:
    """Every backend the library knows, as BackendInfo objects."""
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
        for d in _described("fa_backend_info", C.FaBackendDesc,
                             library().dll.fa_backend_desc_init, 16)
    ]


def run_info(info: C.FaRunInfo) -> RunInfo:
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


_ops = None


def torch_ops():
    """flashattn._torch_ops (imports PyTorch; asked for only with torch tensors in hand)."""
    global _ops
    if _ops is None:
        from . import _torch_ops

        _ops = _torch_ops
    return _ops


def is_torch(*xs) -> bool:
    """Whether any of xs is a torch.Tensor (PyTorch already imported by the caller)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    tensor = torch.Tensor
    for x in xs:
        if isinstance(x, tensor):
            return True
    return False


def attention(q, k, v, *, out=None, lse=None, return_info: bool = False, **params):
    """out = softmax(q·kᵀ·scale + mask)·v (fa_forward).

    q [batch, seqlen_q, heads_q, dim], k [batch, seqlen_k, heads_kv, dim], v [..., dim_v]; packed
    [total, heads, dim] with cu_seqlens_q/k. Returns out, or (out, lse) with return_lse=True (lse
    float32 [batch, heads_q, seqlen_q]; [heads_q, total_q] packed; a given lse= is written too),
    plus a RunInfo last with return_info=True. params: see PARAMS.

    FP8 inputs (q, k, v all float8_e4m3fn or all float8_e5m2: torch's dtypes, or ml_dtypes' for
    NumPy; dense [batch, seqlen, heads, dim] only) stand for their stored values times the
    descales q_descale, k_descale, v_descale (float32 [batch or 1, heads or 1, blocks], blocks of
    descale_rows_q / descale_rows_k rows; None: 1), as quantize_fp8 returns them: the result is
    attention on those products. Their out is bfloat16 unless out= passes a float16 (or bfloat16)
    array; forward only (no gradients: torch inputs that require grad are refused).

    PyTorch tensors that require grad (with grad mode on) make the call differentiable: it goes
    through the flashattn::fwd operator and autograd records it (gradients of q, k, v, and of
    the lse when return_lse=True). Under torch.compile the same operator is traced. On that path
    out=, lse=, return_info=True, stream= and workspace= are refused (FA_ERR_UNSUPPORTED), and so
    are alibi_slopes that require grad (no gradient is computed for them).
    """
    if is_torch(q, k, v):
        ops = torch_ops()
        if ops.needs_op(q, k, v, params.get("alibi_slopes")):
            return ops.attention(q, k, v, out, lse, return_info, params)
        ops.refuse_descale_grad("attention", params)
    out, lse, info = _call.forward(q, k, v, out, lse, params)
    result = (out, lse) if params.get("return_lse") else out
    if return_info:
        return (*(result if isinstance(result, tuple) else (result,)), run_info(info))
    return result


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int,
                     **kwargs):
    """attention() on packed sequences: q [total_q, heads_q, dim], k/v [total_k, heads_kv, dim],
    sequence b at rows cu_seqlens_q[b]..cu_seqlens_q[b+1] (int32 [batch + 1]); lse (return_lse)
    is [heads_q, total_q]. Differentiable as attention()."""
    return attention(q, k, v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                     max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, **kwargs)


def attention_backward(dout, q, k, v, out, lse, *, dq=None, dk=None, dv=None,
                       return_info: bool = False, **params):
    """Gradients (dq, dk, dv) of attention (fa_backward), from the forward's out and lse; params
    must be the forward call's. Returns (dq, dk, dv), plus a RunInfo last with return_info=True.
    Not differentiable itself: PyTorch inputs that require grad (grad mode on) are refused."""
    if is_torch(q, k, v, dout, out, lse):
        ops = torch_ops()
        if ops.needs_op(q, k, v) or ops.grad_wanted(dout, out, lse):
            return ops.attention_backward(dout, q, k, v, out, lse, (dq, dk, dv), return_info,
                                          params)
    dq, dk, dv, info = _call.backward(dout, q, k, v, out, lse, dq, dk, dv, params)
    if return_info:
        return dq, dk, dv, run_info(info)
    return dq, dk, dv


@dataclass(frozen=True)
class TransportInfo:
    """One transport of the ring calls, loaded or not (fa_transport_desc)."""

    kind: int
    name: str
    available: bool
    reason: str
    plugin_path: str
    memory: str
    runtime: str


def transport_info() -> list:
    """Every transport the ring calls know (fa_transport_info), as TransportInfo objects: "self"
    (one process), "mpi" (host tensors between processes), "nccl"; available or why not."""
    lib = library()
    return [
        TransportInfo(kind=d.kind, name=C.text(d.name), available=bool(d.available),
                      reason=C.text(d.reason), plugin_path=C.text(d.plugin_path),
                      memory=C.text(lib.dll.fa_device_kind_name(d.memory)),
                      runtime=C.text(d.runtime))
        for d in _described("fa_transport_info", C.FaTransportDesc,
                            lib.dll.fa_transport_desc_init, 8)
    ]


_RING_LAYOUTS = {"contiguous": C.FA_RING_CONTIGUOUS, "zigzag": C.FA_RING_ZIGZAG}


class NcclComm:
    """An NCCL communicator for the ring calls (FA_TRANSPORT_NCCL, CUDA tensors): handle is the
    ncclComm_t itself (an int), as CuPy's NcclCommunicator.comm or ProcessGroupNCCL's
    _comm_ptr() give it. The caller owns the communicator: it stays alive and unused by others
    for the length of a call. A torch.distributed process group with an NCCL backend may be
    passed as comm directly."""

    __slots__ = ("handle", "_box")

    def __init__(self, handle: int):
        if isinstance(handle, bool) or not isinstance(handle, int):
            raise TypeError(f"NcclComm(handle): an int (the ncclComm_t), not "
                            f"{type(handle).__name__}")
        self.handle = handle
        self._box = ctypes.c_void_p(handle)  # the C call takes the address of an ncclComm_t

    def address(self) -> int:
        return ctypes.addressof(self._box)

    def __repr__(self) -> str:
        return f"NcclComm({self.handle:#x})"


def _invalid_comm(call: str, message: str) -> FlashAttnError:
    return FlashAttnError(call, C.FA_ERR_INVALID_ARGUMENT, "FA_ERR_INVALID_ARGUMENT",
                          "comm: " + message)


def _process_group_comm(call: str, group, q) -> NcclComm:
    """The NCCL communicator on q's CUDA device of a torch.distributed process group, or of its
    backend (ProcessGroupNCCL)."""
    import torch

    if not (isinstance(q, torch.Tensor) and q.is_cuda):
        raise _invalid_comm(call, "a process group is taken for CUDA tensors (its NCCL "
                            "communicator); these are not CUDA tensors")
    backend = group  # a backend itself (ProcessGroupNCCL), or the group's CUDA backend
    if isinstance(group, torch.distributed.ProcessGroup):
        try:
            backend = group._get_backend(torch.device("cuda"))
        except (RuntimeError, ValueError) as e:
            raise _invalid_comm(call, f"the process group has no CUDA backend ({e})") from None
    comm_ptr = getattr(backend, "_comm_ptr", None)
    if comm_ptr is None:
        raise _invalid_comm(call, f"the process group's CUDA backend is "
                            f"{type(backend).__name__}, not NCCL (or this PyTorch does not give "
                            f"out its communicator)")
    with torch.cuda.device(q.device):  # the communicator is looked up by the current device
        handle = int(comm_ptr())
    if handle == 0:
        raise _invalid_comm(call, f"the process group has no NCCL communicator on {q.device} "
                            f"yet: run one collective on it first, or pass device_id to "
                            f"init_process_group")
    return NcclComm(handle)


def _torch_comm_types(dist) -> tuple:
    """torch.distributed's process group class and its backends' base class (ProcessGroupNCCL's),
    where this PyTorch has them."""
    c10d = sys.modules.get("torch._C._distributed_c10d")
    backend = getattr(c10d, "Backend", None)
    return (dist.ProcessGroup,) + ((backend,) if isinstance(backend, type) else ())


def _ring_of(call: str, comm, layout, q=None) -> tuple:
    """(transport, layout, communicator address, what keeps it alive) of a ring call's comm and
    layout: comm None is the ring of this process alone (FA_TRANSPORT_SELF); an mpi4py
    communicator, or an int (the address of an MPI_Comm), is FA_TRANSPORT_MPI; an NcclComm, or a
    torch.distributed process group with an NCCL backend (its communicator on q's device), is
    FA_TRANSPORT_NCCL. A layout refused here on one rank of a valid communicator still joins the
    ring's agreement (_call.ring_abstain)."""
    keep = None
    if comm is None:
        transport, address = C.FA_TRANSPORT_SELF, None
    elif isinstance(comm, int) and not isinstance(comm, bool):
        transport, address = C.FA_TRANSPORT_MPI, comm
        if address == 0:
            raise _invalid_comm(call, "the address of an MPI_Comm is NULL")
    else:
        mpi = sys.modules.get("mpi4py.MPI")
        dist = sys.modules.get("torch.distributed")
        if mpi is not None and isinstance(comm, mpi.Comm):
            transport, address = C.FA_TRANSPORT_MPI, mpi._addressof(comm)
        else:
            if dist is not None and dist.is_available() and \
                    isinstance(comm, _torch_comm_types(dist)):
                comm = _process_group_comm(call, comm, q)
            if not isinstance(comm, NcclComm):
                raise _invalid_comm(call, f"None (this process alone), an mpi4py communicator, "
                                    f"the address of an MPI_Comm (int), an NcclComm or a "
                                    f"torch.distributed process group with an NCCL backend, not "
                                    f"{type(comm).__name__}")
            if comm.handle == 0:
                raise _invalid_comm(call, "the NCCL communicator is NULL")
            transport, address, keep = C.FA_TRANSPORT_NCCL, comm.address(), comm
    if layout not in _RING_LAYOUTS:
        _call.ring_abstain(_RING_C_NAMES[call], (transport, 0, address))
        raise FlashAttnError(call, C.FA_ERR_INVALID_ARGUMENT, "FA_ERR_INVALID_ARGUMENT",
                             f"layout {layout!r}: one of {sorted(_RING_LAYOUTS)}")
    return transport, _RING_LAYOUTS[layout], address, keep


_RING_C_NAMES = {"ring_attention": "fa_ring_forward",
                 "ring_attention_backward": "fa_ring_backward"}


def _ring_run(name: str, ring, call):
    """call() (which ends in the C ring call `name`); an error this rank raises before the library
    is reached still takes part in the ring's agreement (_call.ring_abstain), so every other rank
    returns a refusal instead of waiting."""
    try:
        return call()
    except BaseException as e:
        if not getattr(e, "ring_joined", False):
            _call.ring_abstain(name, ring)
        raise


def _refuse_ring_grad(call: str, *xs) -> None:
    if is_torch(*xs) and torch_ops().grad_wanted(*xs):
        raise unsupported(call, "an input requires grad, but the ring calls are not recorded by "
                          "autograd: call ring_attention_backward for the gradients, on tensors "
                          "that do not require grad (or under torch.no_grad())")


def ring_attention(q, k, v, *, comm=None, layout: str = "contiguous", out=None, lse=None,
                   return_info: bool = False, **params):
    """fa_ring_forward: attention over a sequence sharded across the processes of comm (ring
    attention, docs/ring.md). q, k, v are this process's shards, [batch, local seqlen, heads, dim];
    every process calls it with the same shapes, params and layout ("contiguous": rank r holds
    tokens r*n..; "zigzag": chunks r and 2*world-1-r of n/2 tokens, balanced under a causal mask).
    comm: None (this process alone, any memory), for host arrays (NumPy, CPU torch tensors) an
    mpi4py communicator or the address of an MPI_Comm, for CUDA tensors an NcclComm or a
    torch.distributed process group with an NCCL backend (the ring runs on torch's current
    stream). Returns this rank's rows of the output, or (out, lse) with return_lse=True (lse is
    needed by ring_attention_backward), plus a RunInfo (the diagonal block's call) last with
    return_info=True. params: see PARAMS; what the ring refuses is refused with FlashAttnError
    (FA_ERR_UNSUPPORTED naming it)."""
    ring = _ring_of("ring_attention", comm, layout, q)

    def call():
        _refuse_ring_grad("ring_attention", q, k, v)
        return _call.forward(q, k, v, out, lse, params, ring=ring)

    out, lse, info = _ring_run("fa_ring_forward", ring, call)
    result = (out, lse) if params.get("return_lse") else out
    if return_info:
        return (*(result if isinstance(result, tuple) else (result,)), run_info(info))
    return result


def ring_attention_backward(dout, q, k, v, out, lse, *, comm=None, layout: str = "contiguous",
                            dq=None, dk=None, dv=None, return_info: bool = False, **params):
    """fa_ring_backward: this rank's gradients (dq, dk, dv) of ring_attention over the same shards,
    comm, layout and params, from its out and lse. Returns (dq, dk, dv), plus a RunInfo last with
    return_info=True."""
    ring = _ring_of("ring_attention_backward", comm, layout, q)

    def call():
        _refuse_ring_grad("ring_attention_backward", dout, q, k, v, out, lse)
        return _call.backward(dout, q, k, v, out, lse, dq, dk, dv, params, ring=ring)

    dq, dk, dv, info = _ring_run("fa_ring_backward", ring, call)
    if return_info:
        return dq, dk, dv, run_info(info)
    return dq, dk, dv


def _kv_args(cache_seqlens, k_new, v_new, rotary_cos, rotary_sin) -> dict:
    return {"k_new": k_new, "v_new": v_new, "cache_seqlens": cache_seqlens,
            "rotary_cos": rotary_cos, "rotary_sin": rotary_sin}


def attention_kvcache(q, k_cache, v_cache, cache_seqlens, *, k_new=None, v_new=None,
                      rotary_cos=None, rotary_sin=None, rotary_interleaved: bool = False,
                      out=None, lse=None, return_info: bool = False, **params):
    """Decoding / incremental attention over a KV cache (fa_forward_kvcache).

    q [batch, seqlen_q, heads_q, dim]; k_cache/v_cache [batch, capacity, heads_kv, dim(_v)], or
    pages [blocks, page_size, heads_kv, dim] with block_table=; cache_seqlens int32 [batch]: the
    tokens already in each sequence's cache. k_new/v_new [batch, seqlen_new, heads_kv, dim], when
    given, are first written into the caches (in place) at cache_seqlens[b].., rotated by
    rotary_cos/rotary_sin [max_position, rotary_dim / 2] when given (rotary_interleaved: pairs
    (0,1),(2,3)..., else (i, i + rotary_dim/2)); q is rotated too. Then q attends to keys
    [0, cache_seqlens[b] + seqlen_new), causal masks aligned bottom-right to that length. Returns
    out, or (out, lse) with return_lse=True, plus a RunInfo with return_info=True. No backward
    exists: PyTorch inputs that require grad (grad mode on) are refused.
    """
    kv = _kv_args(cache_seqlens, k_new, v_new, rotary_cos, rotary_sin)
    if is_torch(q, k_cache, v_cache):
        ops = torch_ops()
        ops.refuse_grad("attention_kvcache", q, k_cache, v_cache, k_new, v_new, rotary_cos,
                        rotary_sin, params.get("alibi_slopes"))
        if ops.needs_op(q, k_cache, v_cache):
            if out is not None or lse is not None or return_info:
                raise unsupported("attention_kvcache", "out=/lse=/return_info=True are not "
                                  "available when the call is traced")
            p = {k_: v_ for k_, v_ in params.items() if k_ != "return_lse"}
            return ops.kvcache_op(q, k_cache, v_cache, kv, rotary_interleaved, p,
                                  bool(params.get("return_lse")), "attention_kvcache")
    out, lse, info = _call.forward_kvcache(q, k_cache, v_cache, kv, rotary_interleaved, out, lse,
                                           params)
    result = (out, lse) if params.get("return_lse") else out
    if return_info:
        return (*(result if isinstance(result, tuple) else (result,)), run_info(info))
    return result


def _refuse_traced_info(call: str, refused: bool) -> None:
    if refused:
        raise unsupported(call, "out= and return_info=True are not available when the call is "
                          "traced (it goes through the flashattn::quantize operator)")


def _fp8_dtype(dtype) -> int:
    """The fa_dtype of an FP8 dtype given as torch's or ml_dtypes' dtype or by name."""
    if dtype is None:
        return C.FA_F8E4M3
    if isinstance(dtype, str):
        name = dtype
    elif isinstance(dtype, type):
        name = dtype.__name__  # ml_dtypes' scalar types
    else:
        name = str(dtype).rsplit(".", 1)[-1]  # torch.float8_e4m3fn, numpy.dtype
    names = {"float8_e4m3fn": C.FA_F8E4M3, "e4m3": C.FA_F8E4M3, "f8e4m3": C.FA_F8E4M3,
             "float8_e5m2": C.FA_F8E5M2, "e5m2": C.FA_F8E5M2, "f8e5m2": C.FA_F8E5M2}
    if name not in names:
        raise ValueError(f"dtype {dtype!r} is not an FP8 dtype: float8_e4m3fn (e4m3) or "
                         f"float8_e5m2 (e5m2)")
    return names[name]


def _quantize_shape(call: str, x) -> tuple:
    shape = tuple(int(n) for n in x.shape)
    if len(shape) != 4:
        raise _call.invalid(call, f"x.shape = {list(shape)}: x must be [batch, seqlen, heads, "
                            f"head_dim]")
    return shape


def quantize_fp8(x, *, dtype=None, block_rows: int = 0, per_tensor: bool = False,
                 rotate: bool = False, seed: int = 0, backend=None, strict: bool = False,
                 out=None, return_info: bool = False):
    """(y, descale): x [batch, seqlen, heads, head_dim] (float32, float16 or bfloat16) quantized
    to FP8 with one scale per block of rows (fa_quantize), ready for attention(y_q, y_k, y_v,
    q_descale=.., k_descale=.., v_descale=.., descale_rows_q=block_rows, ...).

    dtype: float8_e4m3fn (default; largest finite 448) or float8_e5m2 (57344), as torch's dtype,
    ml_dtypes' or a name ("e4m3", "e5m2"). descale is float32 [batch, heads, blocks], blocks =
    ceil(seqlen / block_rows) (block_rows 0: 1, a scale per (batch, head)), or [1, 1, 1] with
    per_tensor (then block_rows must be 0). With rotate, each row (a head's vector) is first
    multiplied by M = diag(s)·H/sqrt(head_dim), H the Sylvester Hadamard matrix and s random
    signs drawn from seed (head_dim a power of two; rotate q and k with the same seed: M is
    orthogonal, so q·kᵀ is unchanged while outliers spread over the channels). Then, with
    z = x·M (x without rotate) in float32: descale = amax(|z|) / largest finite FP8 over the
    elements a descale covers (NaN and infinities left out), or 1 where that is 0 (or
    underflows), and y = z / descale rounded to nearest even and saturated to the finite range
    (NaN stays NaN); so y × descale is z up to FP8 rounding. y is allocated with the FP8 dtype
    where x lives: torch's float8_e4m3fn / float8_e5m2 for torch tensors, ml_dtypes' for NumPy
    arrays (ml_dtypes must be installed); or out=(y, descale) passes both arrays, written in
    place and returned (y's dtype is then the FP8 dtype). A RunInfo comes last with
    return_info=True. Not differentiable: torch inputs that require grad (grad mode on) are
    refused."""
    call = "quantize_fp8"
    y = descale = None
    if out is not None:
        y, descale = out
        y_dtype = _fp8_dtype(y.dtype)
        if dtype is not None and _fp8_dtype(dtype) != y_dtype:
            raise ValueError(f"quantize_fp8: dtype {dtype} but out's y is {y.dtype}")
    else:
        y_dtype = _fp8_dtype(dtype)
    b, s, h, _ = _quantize_shape(call, x)
    block_rows = int(block_rows)
    if per_tensor:
        if block_rows:
            raise ValueError("quantize_fp8: per_tensor=True takes one scale for the whole "
                             "tensor: block_rows must be 0")
        shape = (1, 1, 1)
    else:
        shape = (b, h, -(-s // block_rows) if block_rows > 0 else 1)
    if descale is not None and tuple(int(n) for n in descale.shape) != shape:
        raise _call.invalid(call, f"out[1] (descale) has shape {list(descale.shape)} but must be "
                            f"{list(shape)}: [1, 1, 1] per tensor, else [batch, heads, "
                            f"ceil(seqlen / block_rows) or 1]")
    opts = {"block_rows": block_rows, "rotate": bool(rotate), "rotate_seed": int(seed),
            "backend": backend, "strict": bool(strict)}
    if is_torch(x, y, descale):
        ops = torch_ops()
        ops.refuse_grad(call, x, y, descale)
        if ops.is_traced(x, y, descale):
            _refuse_traced_info(call, return_info or out is not None)
            return ops.quantize_op(call, x, y_dtype, shape, opts)
    y, descale, info = _call.quantize(x, y, descale, y_dtype, shape, opts)
    return (y, descale, run_info(info)) if return_info else (y, descale)


def hadamard_rotate(x, seed: int, *, out=None, backend=None, strict: bool = False,
                    return_info: bool = False):
    """x·M for every row of x [batch, seqlen, heads, head_dim] (float32, float16 or bfloat16;
    head_dim a power of two), M = diag(s)·H/sqrt(head_dim) the rotation quantize_fp8(rotate=True,
    seed=seed) applies (fa_quantize with a float output): in float32 the signs, then the
    butterfly stages of H, then a multiplication by 1/sqrt(head_dim); the result rounded once to
    out's dtype. Returns out (given, of a float dtype and x's shape, or allocated with x's
    dtype), plus a RunInfo with return_info=True. M is orthogonal (M·Mᵀ = I): rotating q and k
    with one seed leaves q·kᵀ unchanged, and every row keeps its norm."""
    call = "hadamard_rotate"
    _quantize_shape(call, x)
    opts = {"rotate": True, "rotate_seed": int(seed), "backend": backend, "strict": bool(strict)}
    if is_torch(x, out):
        ops = torch_ops()
        ops.refuse_grad(call, x, out)
        if ops.is_traced(x, out):
            _refuse_traced_info(call, return_info or out is not None)
            return ops.quantize_op(call, x, None, None, opts)[0]
    y, _, info = _call.quantize(x, out, None, None, None, opts)
    return (y, run_info(info)) if return_info else y


def plan(q, k, v, **params) -> RunInfo:
    """What attention(q, k, v, **params) would run, without running it (fa_plan_forward)."""
    return run_info(_call.forward(q, k, v, None, None, params, plan_only=True)[2])


def plan_kvcache(q, k_cache, v_cache, cache_seqlens, *, k_new=None, v_new=None, rotary_cos=None,
                 rotary_sin=None, rotary_interleaved: bool = False, **params) -> RunInfo:
    """What attention_kvcache(...) would run, without running it (fa_plan_forward_kvcache)."""
    kv = _kv_args(cache_seqlens, k_new, v_new, rotary_cos, rotary_sin)
    return run_info(_call.forward_kvcache(q, k_cache, v_cache, kv, rotary_interleaved, None,
                                          None, params, plan_only=True)[2])


__all__ = ["FlashAttnError", "RunInfo", "BackendInfo", "attention", "attention_varlen",
           "attention_backward", "attention_kvcache", "plan", "plan_kvcache", "backend_info",
           "version", "release", "quantize_fp8", "hadamard_rotate"]
