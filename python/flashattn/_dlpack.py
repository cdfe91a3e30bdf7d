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

_DEVICE_KINDS = {
    kDLCPU: C.FA_DEVICE_CPU,
    kDLCUDAHost: C.FA_DEVICE_CPU,
    kDLCUDA: C.FA_DEVICE_CUDA,
    kDLCUDAManaged: C.FA_DEVICE_CUDA,
    kDLROCM: C.FA_DEVICE_HIP,
    kDLOpenCL: C.FA_DEVICE_OPENCL,
}
_DTYPES = {(kDLFloat, 32): C.FA_F32, (kDLFloat, 16): C.FA_F16, (kDLBfloat, 16): C.FA_BF16,
           (kDLInt, 32): C.FA_I32}


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
                        f"{name}: dtype (DLPack code {t.dtype.code}, {t.dtype.bits} bits) must be "
                        f"float32, float16, bfloat16 or int32")
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


def empty_like_namespace(like, shape: tuple[int, ...], dtype: str):
    """A new uninitialised array of shape and dtype ("like" or "float32") where `like` lives, from
    like's own library: NumPy for CPU inputs that are not PyTorch/CuPy, torch/cupy otherwise."""
    mod = _module(like)
    kind, dev = device_of(like)
    if mod == "torch":
        import torch

        dt = like.dtype if dtype == "like" else torch.float32
        return torch.empty(shape, dtype=dt, device=like.device)
    if mod == "cupy":
        import cupy

        dt = like.dtype if dtype == "like" else cupy.float32
        with cupy.cuda.Device(dev):
            return cupy.empty(shape, dtype=dt)
    if kind in (kDLCPU, kDLCUDAHost):
        import numpy as np

        src = like if mod == "numpy" else np.from_dlpack(like)
        dt = src.dtype if dtype == "like" else np.float32
        return np.empty(shape, dtype=dt)
    raise ViewError(C.FA_ERR_UNSUPPORTED,
                    f"cannot allocate an output on DLPack device {kind} for a {mod} input: pass "
                    f"the output arrays (out=, lse=, dq=, ...)")


def current_stream(like):
    """The stream a call on like's device should use when none is given: PyTorch's or CuPy's
    current stream for CUDA/HIP inputs, else None (the backend's default)."""
    kind, dev = device_of(like)
    if kind not in (kDLCUDA, kDLCUDAManaged, kDLROCM):
        return None
    mod = _module(like)
    if mod == "torch":
        import torch

        return torch.cuda.current_stream(like.device).cuda_stream
    if mod == "cupy":
        import cupy

        with cupy.cuda.Device(dev):
            return cupy.cuda.get_current_stream().ptr
    return None
