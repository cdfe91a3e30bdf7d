"""ctypes mirror of api/flash_attn.h and the loading of libflashattn.

Field order and types are exactly the header's; `Library` checks at load time that each growable
struct's ctypes size equals the size the library's own *_init function writes into struct_size, so
a binding and a library of different versions refuse to work together instead of corrupting memory.
"""

from __future__ import annotations

import ctypes
import os

FA_OK = 0
FA_ERR_INVALID_ARGUMENT = 1
FA_ERR_UNSUPPORTED = 2
FA_ERR_OUT_OF_MEMORY = 3
FA_ERR_BACKEND_UNAVAILABLE = 4
FA_ERR_BACKEND_FAILURE = 5
FA_ERR_INTERNAL = 6
STATUS_NAMES = {
    FA_OK: "FA_OK",
    FA_ERR_INVALID_ARGUMENT: "FA_ERR_INVALID_ARGUMENT",
    FA_ERR_UNSUPPORTED: "FA_ERR_UNSUPPORTED",
    FA_ERR_OUT_OF_MEMORY: "FA_ERR_OUT_OF_MEMORY",
    FA_ERR_BACKEND_UNAVAILABLE: "FA_ERR_BACKEND_UNAVAILABLE",
    FA_ERR_BACKEND_FAILURE: "FA_ERR_BACKEND_FAILURE",
    FA_ERR_INTERNAL: "FA_ERR_INTERNAL",
}

FA_F32, FA_F16, FA_BF16, FA_I32, FA_F8E4M3, FA_F8E5M2 = 1, 2, 3, 4, 5, 6
FA_DEVICE_CPU, FA_DEVICE_CUDA, FA_DEVICE_HIP, FA_DEVICE_OPENCL = 1, 2, 3, 4
FA_BACKEND_AUTO, FA_BACKEND_CPU, FA_BACKEND_CUDA, FA_BACKEND_HIP, FA_BACKEND_OPENCL = 0, 1, 2, 3, 4
FA_CAUSAL_BOTTOM_RIGHT, FA_CAUSAL_TOP_LEFT = 0, 1
FA_TRANSPORT_SELF, FA_TRANSPORT_MPI, FA_TRANSPORT_NCCL = 1, 2, 3
FA_RING_CONTIGUOUS, FA_RING_ZIGZAG = 0, 1
FA_MAX_DIMS = 4
FA_NAME_LEN = 32
FA_KERNEL_LEN = 96
FA_REASON_LEN = 1024

c_enum = ctypes.c_int  # the header's enums are int-sized


class FaDevice(ctypes.Structure):
    _fields_ = [("kind", c_enum), ("id", ctypes.c_int32)]


class FaTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("byte_offset", ctypes.c_uint64),
        ("device", FaDevice),
        ("dtype", c_enum),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.c_int64 * FA_MAX_DIMS),
        ("strides", ctypes.c_int64 * FA_MAX_DIMS),
    ]


TensorPtr = ctypes.POINTER(FaTensor)


class FaParams(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("softmax_scale", ctypes.c_float),
        ("causal", ctypes.c_int32),
        ("causal_align", ctypes.c_int32),
        ("window_enabled", ctypes.c_int32),
        ("window_left", ctypes.c_int64),
        ("window_right", ctypes.c_int64),
        ("softcap", ctypes.c_float),
        ("alibi_slopes", TensorPtr),
        ("dropout_p", ctypes.c_float),
        ("dropout_seed", ctypes.c_uint64),
        ("dropout_offset", ctypes.c_uint64),
        ("cu_seqlens_q", TensorPtr),
        ("cu_seqlens_k", TensorPtr),
        ("seqused_k", TensorPtr),
        ("max_seqlen_q", ctypes.c_int64),
        ("max_seqlen_k", ctypes.c_int64),
        ("block_table", TensorPtr),
        ("page_size", ctypes.c_int64),
        ("num_splits", ctypes.c_int32),
        ("deterministic", ctypes.c_int32),
        ("return_lse", ctypes.c_int32),
        ("stream", ctypes.c_void_p),
        ("backend", ctypes.c_int32),
        ("strict", ctypes.c_int32),
        ("kernel_family", ctypes.c_char_p),
        ("workspace", ctypes.c_void_p),
        ("workspace_size", ctypes.c_size_t),
        ("check_indices", ctypes.c_int32),
        ("q_descale", TensorPtr),
        ("k_descale", TensorPtr),
        ("v_descale", TensorPtr),
        ("descale_rows_q", ctypes.c_int64),
        ("descale_rows_k", ctypes.c_int64),
    ]


class FaKvcacheArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("k_new", TensorPtr),
        ("v_new", TensorPtr),
        ("cache_seqlens", TensorPtr),
        ("rotary_cos", TensorPtr),
        ("rotary_sin", TensorPtr),
        ("rotary_interleaved", ctypes.c_int32),
    ]


class FaQuantizeArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("block_rows", ctypes.c_int64),
        ("rotate", ctypes.c_int32),
        ("rotate_seed", ctypes.c_uint64),
        ("backend", ctypes.c_int32),
        ("strict", ctypes.c_int32),
        ("stream", ctypes.c_void_p),
    ]


class FaRunInfo(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("backend", ctypes.c_int32),
        ("backend_name", ctypes.c_char * FA_NAME_LEN),
        ("device", FaDevice),
        ("kernel", ctypes.c_char * FA_KERNEL_LEN),
        ("tile_m", ctypes.c_int32),
        ("tile_n", ctypes.c_int32),
        ("num_splits", ctypes.c_int32),
        ("deterministic", ctypes.c_int32),
        ("workspace_bytes", ctypes.c_size_t),
        ("fell_back", ctypes.c_int32),
        ("rejected", ctypes.c_char * FA_REASON_LEN),
    ]


class FaBackendDesc(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("id", ctypes.c_int32),
        ("name", ctypes.c_char * FA_NAME_LEN),
        ("available", ctypes.c_int32),
        ("reason", ctypes.c_char * FA_REASON_LEN),
        ("plugin_path", ctypes.c_char * 512),
        ("device_count", ctypes.c_int32),
        ("devices", ctypes.c_char * 256),
        ("arch", ctypes.c_char * 64),
        ("kernel_families", ctypes.c_char * 128),
        ("dtypes", ctypes.c_char * 64),
        ("features", ctypes.c_char * 512),
        ("unsupported", ctypes.c_char * 2048),
    ]


class FaRingArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("transport", ctypes.c_int32),
        ("comm", ctypes.c_void_p),
        ("layout", ctypes.c_int32),
        ("world", ctypes.c_int32),
        ("rank", ctypes.c_int32),
    ]


class FaTransportDesc(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("kind", ctypes.c_int32),
        ("name", ctypes.c_char * FA_NAME_LEN),
        ("available", ctypes.c_int32),
        ("reason", ctypes.c_char * FA_REASON_LEN),
        ("plugin_path", ctypes.c_char * 512),
        ("memory", ctypes.c_int32),
        ("runtime", ctypes.c_char * 256),
    ]


def text(b: bytes) -> str:
    return b.decode("utf-8", "replace")


def _installed_library() -> str | None:
    """The library installed with this package, or None in a source tree. `pip install` and
    `cmake --install` write _libpath.txt beside this file: the library's path relative to it."""
    here = os.path.dirname(os.path.abspath(__file__))
    record = os.path.join(here, "_libpath.txt")
    if not os.path.exists(record):
        return None
    with open(record) as f:
        rel = f.read().strip()
    if not rel:
        raise OSError(f"{record} is empty: reinstall the flashattn package")
    return os.path.normpath(os.path.join(here, rel))


def _candidates() -> list[str]:
    """Where libflashattn is looked for, in order (see find_library)."""
    env = os.environ.get("FLASHATTN_LIBRARY")
    if env:
        return [env]
    installed = _installed_library()
    if installed:
        # An installed package uses its own library, never another one found elsewhere.
        return [installed]
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    return [
        # The dynamic linker's search (LD_LIBRARY_PATH, ldconfig: an installed tree).
        "libflashattn.so.0",
        # This source tree's release build (README: cmake --preset release).
        os.path.join(repo, "build", "release", "lib", "libflashattn.so"),
    ]


def find_library() -> str:
    """The library the binding loads: $FLASHATTN_LIBRARY (a path) if set; else, for a package
    installed by pip or cmake --install, the library installed with it (its plugins lie beside
    it); else, in a source tree, libflashattn.so.0 through the dynamic linker (an installed tree on
    its search path), else the tree's build/release/lib/libflashattn.so."""
    errors = []
    for c in _candidates():
        try:
            ctypes.CDLL(c)
            return c
        except OSError as e:
            errors.append(f"{c}: {e}")
    raise OSError(
        "libflashattn not found; set FLASHATTN_LIBRARY to its path. Tried: " + "; ".join(errors)
    )


class Library:
    """libflashattn through ctypes, with the signatures of api/flash_attn.h."""

    def __init__(self, path: str | None = None):
        path = path or find_library()
        if os.sep in path:
            # The registry finds the plugins from the library's own (absolute) location.
            path = os.path.abspath(path)
        self.path = path
        d = ctypes.CDLL(path)
        self.dll = d
        P = ctypes.POINTER
        T = TensorPtr
        sigs = {
            "fa_params_init": (None, [P(FaParams)]),
            "fa_run_info_init": (None, [P(FaRunInfo)]),
            "fa_backend_desc_init": (None, [P(FaBackendDesc)]),
            "fa_kvcache_args_init": (None, [P(FaKvcacheArgs)]),
            "fa_quantize_args_init": (None, [P(FaQuantizeArgs)]),
            "fa_quantize": (c_enum, [P(FaQuantizeArgs), T, T, T, P(FaRunInfo)]),
            "fa_forward": (c_enum, [P(FaParams), T, T, T, T, T, P(FaRunInfo)]),
            "fa_backward": (c_enum, [P(FaParams), T, T, T, T, T, T, T, T, T, P(FaRunInfo)]),
            "fa_forward_kvcache": (c_enum, [P(FaParams), T, T, T, P(FaKvcacheArgs), T, T,
                                            P(FaRunInfo)]),
            "fa_plan_forward": (c_enum, [P(FaParams), T, T, T, T, T, P(FaRunInfo)]),
            "fa_plan_forward_kvcache": (c_enum, [P(FaParams), T, T, T, P(FaKvcacheArgs), T, T,
                                                 P(FaRunInfo)]),
            "fa_plan_backward": (c_enum, [P(FaParams), T, T, T, T, T, T, T, T, T, P(FaRunInfo)]),
            "fa_backend_info": (c_enum, [P(FaBackendDesc), ctypes.c_int32, P(ctypes.c_int32)]),
            "fa_ring_args_init": (None, [P(FaRingArgs)]),
            "fa_ring_forward": (c_enum, [P(FaParams), P(FaRingArgs), T, T, T, T, T,
                                         P(FaRunInfo)]),
            "fa_ring_backward": (c_enum, [P(FaParams), P(FaRingArgs), T, T, T, T, T, T, T, T, T,
                                          P(FaRunInfo)]),
            "fa_transport_desc_init": (None, [P(FaTransportDesc)]),
            "fa_transport_info": (c_enum, [P(FaTransportDesc), ctypes.c_int32,
                                           P(ctypes.c_int32)]),
            "fa_backend_from_name": (c_enum, [ctypes.c_char_p, P(ctypes.c_int32)]),
            "fa_backend_name": (ctypes.c_char_p, [ctypes.c_int32]),
            "fa_device_kind_name": (ctypes.c_char_p, [ctypes.c_int32]),
            "fa_release": (None, []),
            "fa_last_error": (ctypes.c_char_p, []),
            "fa_status_string": (ctypes.c_char_p, [c_enum]),
            "fa_version": (ctypes.c_char_p, [P(ctypes.c_int), P(ctypes.c_int), P(ctypes.c_int)]),
        }
        for name, (restype, argtypes) in sigs.items():
            f = getattr(d, name)
            f.restype = restype
            f.argtypes = argtypes
        self._check_layout()

    def _library_sizeof(self, init, ctype) -> int:
        buf = (ctypes.c_uint8 * 65536)()  # larger than any version's struct: init may clear it
        init(ctypes.cast(buf, ctypes.POINTER(ctype)))
        return ctypes.c_size_t.from_buffer(buf).value

    def _check_layout(self) -> None:
        bad = []
        for init, ctype in (
            (self.dll.fa_params_init, FaParams),
            (self.dll.fa_run_info_init, FaRunInfo),
            (self.dll.fa_backend_desc_init, FaBackendDesc),
            (self.dll.fa_kvcache_args_init, FaKvcacheArgs),
            (self.dll.fa_quantize_args_init, FaQuantizeArgs),
            (self.dll.fa_ring_args_init, FaRingArgs),
            (self.dll.fa_transport_desc_init, FaTransportDesc),
        ):
            n = self._library_sizeof(init, ctype)
            if n != ctypes.sizeof(ctype):
                bad.append(f"{ctype.__name__}: binding {ctypes.sizeof(ctype)} bytes, library {n}")
        major = ctypes.c_int()
        minor = ctypes.c_int()
        self.dll.fa_version(ctypes.byref(major), ctypes.byref(minor), None)
        if (major.value, minor.value) != (0, 3):
            bad.append(f"library version {major.value}.{minor.value}, binding written for 0.3")
        if bad:
            raise OSError(f"flashattn binding does not match {self.path}: " + "; ".join(bad))

    def version(self) -> str:
        return text(self.dll.fa_version(None, None, None))

    def status_name(self, status: int) -> str:
        s = self.dll.fa_status_string(status)
        return text(s) if s else STATUS_NAMES.get(status, f"status {status}")

    def last_error(self) -> str:
        m = self.dll.fa_last_error()
        return text(m) if m else ""
