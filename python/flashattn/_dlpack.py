"""Viewing any object that offers __dlpack__ as an fa_tensor (the Python side of
api/flash_attn_dlpack.h), and allocating outputs next to the inputs.

The producer's capsule is kept alive (in a `Keep` list) for as long as the library uses the memory
and is then dropped unconsumed: the producer's capsule destructor releases its DLManagedTensor, as
the DLPack protocol specifies for a capsule that was not renamed "used_dltensor".
"""

from __future__ import annotations

import ctypes

from . import _capi as C

# DLPack (dlpack.h) constants.
kDLCPU, kDLCUDA, kDLCUDAHost, kDLOpenCL, kDLROCM, kDLCUDAManaged = 1, 2, 3, 4, 10, 13
kDLInt, kDLUInt, kDLFloat, kDLBfloat = 0, 1, 2, 4
kDLFloat8_e4m3fn, kDLFloat8_e5m2 = 10, 12  # DLPack 1.1: OCP FP8 ("e4m3fn": no infinities)

_DEVICE_KINDS = {
    kDLCPU: C.FA_DEVICE_CPU,
    kDLCUDAHost: C.FA_DEVICE_CPU,
    kDLCUDA: C.FA_DEVICE_CUDA,
    kDLCUDAManaged: C.FA_DEVICE_CUDA,
    kDLROCM: C.FA_DEVICE_HIP,
    kDLOpenCL: C.FA_DEVICE_OPENCL,
}
_DTYPES = {(kDLFloat, 32): C.FA_F32, (kDLFloat, 16): C.FA_F16, (kDLBfloat, 16): C.FA_BF16,
           (kDLInt, 32): C.FA_I32, (kDLFloat8_e4m3fn, 8): C.FA_F8E4M3,
           (kDLFloat8_e5m2, 8): C.FA_F8E5M2}

# Every array library spells the library's dtypes with these names (NumPy through ml_dtypes for
# bfloat16 and the FP8 types).
DTYPE_NAMES = {C.FA_F32: "float32", C.FA_F16: "float16", C.FA_BF16: "bfloat16", C.FA_I32: "int32",
               C.FA_F8E4M3: "float8_e4m3fn", C.FA_F8E5M2: "float8_e5m2"}

# The dtypes an array may have, for the messages that refuse one.
ALLOWED_DTYPES = ("float32, float16, bfloat16 or int32 (and the FP8 float8_e4m3fn, float8_e5m2 "
                  "for attention's q, k, v and quantize_fp8's output)")


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_is_valid.restype = ctypes.c_int
_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]


class ViewError(Exception):
    """An object that cannot be viewed as an fa_tensor; status is an fa_status."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _module(obj) -> str:
    return type(obj).__module__.split(".")[0]


def device_of(obj) -> tuple[int, int]:
    """(DLPack device type, device id) of obj."""
    if hasattr(obj, "__dlpack_device__"):
        t, i = obj.__dlpack_device__()
        return int(t), int(i)
    return kDLCPU, 0


def as_array(obj, name: str):
    """obj itself if it speaks DLPack, else numpy.asarray(obj) (lists, scalars, buffers)."""
    if hasattr(obj, "__dlpack__"):
        if _module(obj) == "torch" and getattr(obj, "requires_grad", False):
            import torch

            if torch.is_grad_enabled():
                raise ViewError(C.FA_ERR_UNSUPPORTED,
                                f"{name}: the tensor requires grad, and a DLPack view would "
                                f"detach it; differentiable calls go through flashattn.attention "
                                f"on torch.Tensor inputs (or use torch.no_grad())")
            obj = obj.detach()  # grad mode off: autograd records nothing anyway
        return obj
    try:
        import numpy as np
    except ImportError:
        raise ViewError(C.FA_ERR_INVALID_ARGUMENT,
                        f"{name}: {type(obj).__name__} has no __dlpack__") from None
    return np.asarray(obj)


def view(obj, name: str, keep: list, stream=None) -> C.FaTensor:
    """An fa_tensor viewing obj's memory (no copy). keep receives what must outlive the call."""
    obj = as_array(obj, name)
    kind, _ = device_of(obj)
    try:
        if stream is None or kind in (kDLCPU, kDLCUDAHost):
            capsule = obj.__dlpack__()
        else:  # DLPack: 1 names CUDA's legacy default stream (0 is ambiguous there)
            capsule = obj.__dlpack__(stream=1 if stream == 0 else stream)
    except BufferError as e:
        # NumPy does not export read-only arrays through the legacy protocol: copy inputs.
        if _module(obj) == "numpy":
            obj = obj.copy()
            capsule = obj.__dlpack__()
        else:
            raise ViewError(C.FA_ERR_INVALID_ARGUMENT, f"{name}: __dlpack__ failed: {e}") from None
    if not _is_valid(capsule, b"dltensor"):
        raise ViewError(C.FA_ERR_INVALID_ARGUMENT,
                        f"{name}: __dlpack__ did not return an unconsumed 'dltensor' capsule")
    keep.append((obj, capsule))
    m = DLManagedTensor.from_address(_get_pointer(capsule, b"dltensor"))
    t = m.dl_tensor
    if t.ndim < 1 or t.ndim > C.FA_MAX_DIMS:
        raise ViewError(C.FA_ERR_UNSUPPORTED, f"{name}: ndim {t.ndim} not in [1, 4]")
    if t.device.device_type not in _DEVICE_KINDS:
        raise ViewError(C.FA_ERR_UNSUPPORTED,
                        f"{name}: DLPack device type {t.device.device_type} has no flashattn backend")
    if t.dtype.lanes != 1 or (t.dtype.code, t.dtype.bits) not in _DTYPES:
        raise ViewError(C.FA_ERR_UNSUPPORTED,
                        f"{name}: dtype (DLPack code {t.dtype.code}, {t.dtype.bits} bits, "
                        f"{t.dtype.lanes} lanes) must be {ALLOWED_DTYPES}")
    out = C.FaTensor()
    out.data = t.data
    out.byte_offset = t.byte_offset
    out.device.kind = _DEVICE_KINDS[t.device.device_type]
    out.device.id = t.device.device_id
    out.dtype = _DTYPES[(t.dtype.code, t.dtype.bits)]
    out.ndim = t.ndim
    compact = 1
    for i in reversed(range(t.ndim)):
        out.shape[i] = t.shape[i]
        out.strides[i] = t.strides[i] if t.strides else compact
        compact *= t.shape[i]
    return out


def shape_of(t: C.FaTensor) -> tuple[int, ...]:
    return tuple(t.shape[i] for i in range(t.ndim))


def numpy_dtype(dtype: str):
    """The NumPy dtype of one of DTYPE_NAMES' names: NumPy's own, or ml_dtypes' for bfloat16 and
    the FP8 types (refused with the reason when ml_dtypes is not installed)."""
    import numpy as np

    if dtype in ("float32", "float16", "int32"):
        return np.dtype(dtype)
    try:
        import ml_dtypes
    except ImportError:
        raise ViewError(C.FA_ERR_UNSUPPORTED,
                        f"NumPy has no {dtype} dtype of its own: install ml_dtypes (pip install "
                        f"ml_dtypes), whose {dtype} arrays the library reads") from None
    return np.dtype(getattr(ml_dtypes, dtype))


def empty_like_namespace(like, shape: tuple[int, ...], dtype: str):
    """A new uninitialised array of shape where `like` lives, from like's own library: NumPy for
    CPU inputs that are not PyTorch/CuPy, torch/cupy otherwise. dtype is "like" (like's dtype) or
    a name of DTYPE_NAMES."""
    mod = _module(like)
    kind, dev = device_of(like)
    if mod == "torch":
        import torch

        dt = like.dtype if dtype == "like" else getattr(torch, dtype)
        return torch.empty(shape, dtype=dt, device=like.device)
    if mod == "cupy":
        import cupy

        if dtype == "like":
            dt = like.dtype
        elif dtype in ("float32", "float16", "int32"):
            dt = getattr(cupy, dtype)
        else:
            raise ViewError(C.FA_ERR_UNSUPPORTED,
                            f"cannot allocate a {dtype} output for a cupy input: pass the output "
                            f"array (out=)")
        with cupy.cuda.Device(dev):
            return cupy.empty(shape, dtype=dt)
    if kind in (kDLCPU, kDLCUDAHost):
        import numpy as np

        if dtype == "like":
            src = like if mod == "numpy" else np.from_dlpack(like)
            dt = src.dtype
        else:
            dt = numpy_dtype(dtype)
        return np.empty(shape, dtype=dt)
    raise ViewError(C.FA_ERR_UNSUPPORTED,
                    f"cannot allocate an output on DLPack device {kind} for a {mod} input: pass "
                    f"the output arrays (out=, lse=, dq=, ...)")


def current_stream(like):
    """The stream a call on like's device should use when none is given: PyTorch's or CuPy's
    current stream for CUDA/HIP inputs, else None (the backend's default)."""
    mod = _module(like)
    if mod == "torch":
        # torch's own accessors: __dlpack_device__ costs 2.3 us a call, is_cuda and get_device
        # 0.1 us each (ROCm builds say cuda too); the raw handle without a Stream object (what
        # Triton's launcher reads) 0.3 us, torch.cuda.current_stream(device).cuda_stream 3.0.
        if not like.is_cuda:
            return None
        import torch

        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw is not None:
            return raw(like.get_device())
        return torch.cuda.current_stream(like.device).cuda_stream
    kind, dev = device_of(like)
    if kind not in (kDLCUDA, kDLCUDAManaged, kDLROCM):
        return None
    if mod == "cupy":
        import cupy

        with cupy.cuda.Device(dev):
            return cupy.cuda.get_current_stream().ptr
    return None
