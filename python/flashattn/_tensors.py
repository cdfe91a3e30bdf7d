"""Describing arrays as fa_tensor, and allocating outputs beside the inputs.

NumPy arrays and PyTorch tensors (CPU, CUDA) are read directly: their layout (dtype, device, shape,
strides) becomes a hashable key and their data address a plain integer, so a call with a layout
seen before reuses the fa_tensor built for it and only stores the address. Every other object goes
through DLPack (_dlpack.view), whose capsule is kept alive in the call's `keep` list; a call with
such an object builds its structs afresh.

describe(obj, name, keep, stream) -> (key, address). A key is a tuple for the direct readers and a
_Generic object (carrying the DLPack view) for the others; template(key, name) is the fa_tensor of
a key, with data 0.
"""

from __future__ import annotations

import ctypes
import sys

from . import _capi as C
from . import _dlpack as D

ViewError = D.ViewError

_MAX_TEMPLATES = 4096
_templates: dict = {}  # key -> FaTensor (data 0); written under the GIL, never mutated after
_readers: dict = {}  # type -> (describe, address, allocate, check_writable)


class _Generic:
    """The key of a tensor viewed through DLPack: its fa_tensor itself (never cached)."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: C.FaTensor):
        self.tensor = tensor


def describe(obj, name: str, keep: list, stream=None):
    """(key, data address) of obj; see the module's docstring. With an explicit stream every
    object goes through DLPack, which makes the producer's work visible on that stream."""
    if stream is None:
        r = _readers.get(type(obj))
        if r is None:
            r = _reader_for(type(obj))
        return r[0](obj, name, keep)
    return _describe_generic(obj, name, keep, stream)


def describe3(a, b, c, names: tuple, keep: list, stream=None):
    """describe() of three arrays (q, k, v of a call): ((key, address) of each), with one reader
    lookup where they are of one type."""
    tp = type(a)
    if stream is None and type(b) is tp and type(c) is tp:
        r = _readers.get(tp)
        if r is None:
            r = _reader_for(tp)
        d = r[0]
        return d(a, names[0], keep), d(b, names[1], keep), d(c, names[2], keep)
    return (describe(a, names[0], keep, stream), describe(b, names[1], keep, stream),
            describe(c, names[2], keep, stream))


def describe_output(obj, name: str, keep: list, stream=None):
    """describe() for an array the call writes: a read-only NumPy array is refused, and so is a
    torch tensor that requires grad while grad mode is on (written outside autograd's record)."""
    r = _readers.get(type(obj))
    if r is None:
        r = _reader_for(type(obj))
    r[3](obj, name)
    if stream is None:
        return r[0](obj, name, keep)
    return _describe_generic(obj, name, keep, stream)


def address(obj) -> int:
    """The data address of an array this module allocated (empty())."""
    return _readers[type(obj)][1](obj)


def empty(like, shape: tuple, dtype: int | None = None):
    """A new uninitialised array of shape where `like` lives, from like's own library, of like's
    dtype (dtype None) or of the fa_dtype dtype."""
    r = _readers.get(type(like))
    if r is None:
        r = _reader_for(type(like))
    return r[2](like, shape, dtype)


def template(key, name: str) -> C.FaTensor:
    """The fa_tensor of a key (data 0, byte_offset 0; a _Generic key's own view)."""
    if type(key) is _Generic:
        return key.tensor
    t = _templates.get(key)
    if t is None:
        t = _numpy_template(key, name) if key[0] == "n" else _torch_template(key, name)
        if len(_templates) >= _MAX_TEMPLATES:
            _templates.clear()
        _templates[key] = t
    return t


def contiguous(like: C.FaTensor, shape: tuple, dtype: int) -> C.FaTensor:
    """An fa_tensor on like's device, of dtype and shape, with row-major strides (data 0)."""
    t = C.FaTensor()
    t.device.kind = like.device.kind
    t.device.id = like.device.id
    t.dtype = dtype
    _set_layout(t, shape, None)
    return t


def shape_of(t: C.FaTensor) -> tuple:
    return tuple(t.shape[i] for i in range(t.ndim))


def _set_layout(t: C.FaTensor, shape: tuple, strides) -> None:
    t.ndim = len(shape)
    stride = 1
    for i in reversed(range(len(shape))):
        t.shape[i] = shape[i]
        t.strides[i] = strides[i] if strides is not None else stride
        stride *= shape[i]


def _check_ndim(name: str, shape: tuple) -> None:
    if not 1 <= len(shape) <= C.FA_MAX_DIMS:
        raise ViewError(C.FA_ERR_UNSUPPORTED, f"{name}: ndim {len(shape)} not in [1, 4]")


# --- NumPy --------------------------------------------------------------------------------------


# ml_dtypes' extension types, by their dtype's name (NumPy has none of them).
_NUMPY_EXTENSION_DTYPES = {"bfloat16": C.FA_BF16, "float8_e4m3fn": C.FA_F8E4M3,
                           "float8_e5m2": C.FA_F8E5M2}


def _numpy_fa_dtype(dt):
    if not dt.isnative:
        return None
    ext = _NUMPY_EXTENSION_DTYPES.get(dt.name)
    if ext is not None:
        return ext
    return {("f", 4): C.FA_F32, ("f", 2): C.FA_F16, ("i", 4): C.FA_I32}.get((dt.kind, dt.itemsize))


def _numpy_template(key, name: str) -> C.FaTensor:
    _, dt, shape, strides = key
    _check_ndim(name, shape)
    fa_dtype = _numpy_fa_dtype(dt)
    if fa_dtype is None:
        raise ViewError(C.FA_ERR_UNSUPPORTED,
                        f"{name}: dtype {dt} must be {D.ALLOWED_DTYPES}, in native byte "
                        f"order")
    size = dt.itemsize
    if any(s % size for s in strides):
        raise ViewError(C.FA_ERR_INVALID_ARGUMENT,
                        f"{name}: strides {strides} (bytes) are not multiples of the {size}-byte "
                        f"element")
    t = C.FaTensor()
    t.device.kind = C.FA_DEVICE_CPU
    t.dtype = fa_dtype
    _set_layout(t, shape, tuple(s // size for s in strides))
    return t


def _numpy_address_reader():
    """A function giving an ndarray's data address: read from the PyArrayObject (whose first field
    after the object header is `char *data`) when that agrees with __array_interface__ on probe
    arrays, else __array_interface__ itself (slower)."""
    import numpy as np

    offset = object.__basicsize__

    def fast(a):
        return ctypes.c_void_p.from_address(id(a) + offset).value

    def slow(a):
        return a.__array_interface__["data"][0]

    base = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    probes = (base, base[1], base[:, 1:, ::2], base.T, np.zeros(1, np.int32))
    if all(fast(a) == slow(a) for a in probes):
        return fast
    return slow


def _numpy_reader():
    import numpy as np

    addr = _numpy_address_reader()

    def desc(a, name, keep):
        return ("n", a.dtype, a.shape, a.strides), addr(a)

    def alloc(like, shape, dtype):
        return np.empty(shape, like.dtype if dtype is None else D.numpy_dtype(D.DTYPE_NAMES[dtype]))

    def writable(a, name):
        if not a.flags.writeable:
            raise ViewError(C.FA_ERR_INVALID_ARGUMENT, f"{name}: the array is read-only")

    return desc, addr, alloc, writable


# --- PyTorch ------------------------------------------------------------------------------------


_torch_dtypes: dict = {}


def torch_dtypes() -> dict:
    """torch dtype -> fa_dtype, FP8 included where this PyTorch has the types."""
    if not _torch_dtypes:
        import torch

        dts = {torch.float32: C.FA_F32, torch.float16: C.FA_F16, torch.bfloat16: C.FA_BF16,
               torch.int32: C.FA_I32}
        for name, fa_dtype in (("float8_e4m3fn", C.FA_F8E4M3), ("float8_e5m2", C.FA_F8E5M2)):
            dt = getattr(torch, name, None)
            if dt is not None:
                dts[dt] = fa_dtype
        _torch_dtypes.update(dts)
    return _torch_dtypes


def _torch_template(key, name: str) -> C.FaTensor:
    import torch

    _, dt, dev, shape, strides = key
    _check_ndim(name, shape)
    fa_dtype = torch_dtypes().get(dt)
    if fa_dtype is None:
        raise ViewError(C.FA_ERR_UNSUPPORTED, f"{name}: dtype {dt} must be {D.ALLOWED_DTYPES}")
    t = C.FaTensor()
    if dev < 0:
        t.device.kind = C.FA_DEVICE_CPU
    else:
        t.device.kind = C.FA_DEVICE_HIP if torch.version.hip else C.FA_DEVICE_CUDA
        t.device.id = dev
    t.dtype = fa_dtype
    _set_layout(t, tuple(shape), tuple(strides))
    return t


def _torch_writable(t, name: str) -> None:
    """Refuses a tensor that requires grad as an output while grad mode is on."""
    import torch

    if torch.is_grad_enabled():
        raise ViewError(C.FA_ERR_UNSUPPORTED,
                        f"{name}: the tensor requires grad, and the call would write it in "
                        f"place without autograd recording it (use torch.no_grad())")


def _torch_reader():
    import torch

    def desc(t, name, keep):
        if t.is_cuda:  # GPU tensors first: their calls are the ones whose host time shows
            dev = t.get_device()
        elif t.is_cpu:
            dev = -1
        else:  # other devices: DLPack says whether a backend can take them
            return _describe_generic(t, name, keep, None)
        return ("t", t.dtype, dev, t.shape, t.stride()), t.data_ptr()

    def addr(t):
        return t.data_ptr()

    def alloc(like, shape, dtype):
        # new_empty: like's device without a torch.device object per call (0.35 us less)
        if dtype is None:
            return like.new_empty(shape)
        return like.new_empty(shape, dtype=getattr(torch, D.DTYPE_NAMES[dtype]))

    def writable(t, name):
        if t.requires_grad:
            _torch_writable(t, name)

    return desc, addr, alloc, writable


# --- everything else: DLPack --------------------------------------------------------------------


def _describe_generic(obj, name, keep, stream):
    t = D.view(obj, name, keep, stream)
    keep.append(t)
    return _Generic(t), (t.data or 0)


def _generic_reader():
    def desc(obj, name, keep):
        return _describe_generic(obj, name, keep, None)

    def addr(obj):
        raise TypeError("address() of a DLPack-only array")  # empty() outputs are described

    def alloc(like, shape, dtype):
        return D.empty_like_namespace(D.as_array(like, "like"), shape,
                                      "like" if dtype is None else D.DTYPE_NAMES[dtype])

    def writable(obj, name):  # subclasses of NumPy's and torch's arrays
        mod = type(obj).__module__
        if mod.startswith("numpy") and not obj.flags.writeable:
            raise ViewError(C.FA_ERR_INVALID_ARGUMENT, f"{name}: the array is read-only")
        if mod.startswith("torch") and getattr(obj, "requires_grad", False):
            _torch_writable(obj, name)

    return desc, addr, alloc, writable


def _reader_for(tp):
    """The reader of a type, registered on first sight: direct for numpy.ndarray and torch.Tensor
    (and torch.nn.Parameter), DLPack for the rest (subclasses included)."""
    r = None
    if tp.__module__ == "numpy" and tp.__name__ == "ndarray":
        r = _numpy_reader()
    elif "torch" in sys.modules:
        import torch

        if tp is torch.Tensor or tp is torch.nn.Parameter:
            r = _torch_reader()
    if r is None:
        r = _generic_reader()
    _readers[tp] = r
    return r
