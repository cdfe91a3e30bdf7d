#!/usr/bin/env python3
"""cpu_peers.py: CPU decode attention of flashattn-c against ggml and PyTorch, in one run.

Decode shapes: one query token per sequence over a full KV cache, head dim 128, 32 query heads over
32 K/V heads (MHA) and over 8 (GQA), caches of 4096, 8192, 16384 and 32768 keys, batch 1, no mask.
The three implementations run in one Python process on the same CPU threads (--threads, default
2), in alternation, on the same input values. torch is imported first: in its Linux wheels its
OpenMP runtime is a libgomp.so.1, which the library and ggml (both built with GCC's OpenMP) then
bind to as well, so one thread team serves all three (the run prints the runtimes it mapped).
The inputs are standard-normal f32 draws (no zeros) rounded to each implementation's dtype; each
implementation holds its own copy in its own layout, so none reads another's cache lines.

- ours: fa_forward_kvcache through the library's C API (ctypes, the struct mirror of
  python/flashattn/_capi.py), backend cpu with strict, q, caches and out in f16 or bf16
  (--dtypes), laid out [batch, cache, kv_heads, 128], lse f32, a caller workspace sized by the
  first call's run report. Timed: one fa_forward_kvcache call (validation, dispatch, the kernel),
  the tensor structs built beforehand; nothing is allocated inside it. OMP_NUM_THREADS = --threads
  is set before any library is loaded.
- ggml: ggml_flash_attn_ext on ggml's CPU backend, built by this script outside the repository
  (--workdir) from the llama-cpp-python source distribution pinned below (LLAMA_CPP_PYTHON,
  which vendors llama.cpp and its ggml), with GGML_NATIVE=ON, OpenMP, Release, no GPU backend;
  bench/ggml_attn.c (ours) is compiled against it into a shared library. q is f32 (ggml's CPU
  flash attention reads q as f32 and converts it itself), K and V f16 in the same layout as ours
  (llama.cpp's KV cache layout), out f32. Timed: one ggml_graph_compute of the planned one-node
  graph (its threadpool, work buffer and graph made beforehand); with batch 1 and at least 512 keys
  this is ggml's split-KV decode path. llama.cpp also passes a KQ mask; here there is none, which
  spares ggml the mask's reads.
- torch: torch.nn.functional.scaled_dot_product_attention on CPU tensors under no_grad,
  restricted to SDPBackend.FLASH_ATTENTION (torch's CPU flash kernel; the default backend where
  that refuses), enable_gqa=True, K and V contiguous [batch, kv_heads, cache, 128] (the layout of a
  PyTorch KV cache), torch.set_num_threads(--threads). Its dtypes (--torch-dtypes) default to f32,
  where torch's CPU kernel is fastest, and bf16, the bytes ours reads. Timed: one SDPA call, which
  allocates its output.

Timing (as bench/peer_run.py on the GPU): per shape each implementation is called once untimed
(and its output checked against an f32 reference computed from the same rounded inputs: relative
L2 error at most --tol for ours, --peer-tol for the peers, whose looser bound still catches a peer
that computes something else; ggml's CPU kernel accumulates softmax(QK)V in f16 when V is f16,
which costs it about 2.7e-2 over 32k keys on one thread), then all
of them in turn for --settle-ms, then --rounds rounds whose order rotates by one each round; in a
round an implementation runs `calls` calls back to back (about --rep-ms) and its time is the wall
clock over `calls`; the median of its rounds counts. GB/s counts the K and V bytes a call must
read (2 * batch * cache * kv_heads * 128 * element size), once. cpu-read-bw (bench/cpu_read_bw.c)
measures the streaming-read rate of the same thread count before and after the shapes, so the
decode GB/s can be read as a fraction of it; a cache whose K+V fits in the last-level cache can
exceed it.

Output: the machine, the table (ms and GB/s of each, ours / ggml and ours / torch's fastest dtype,
> 1 = ours faster) and, with --json FILE, everything (metadata, every round, the checks).
Exit status: 0; 1 when a call or an output check failed (the reason is printed); 2 when a peer
cannot be built or loaded (the reason is printed).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# The ggml peer: llama-cpp-python's source distribution, which carries llama.cpp's ggml in
# vendor/llama.cpp/ggml (ggml 0.25.3, with ggml_flash_attn_ext's split-KV CPU decode path). The
# digest pins the exact bytes, so every run builds the same ggml.
LLAMA_CPP_PYTHON = "0.3.36"
LLAMA_CPP_PYTHON_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
SDIST = f"llama_cpp_python-{LLAMA_CPP_PYTHON}"
GGML_CMAKE_ARGS = [
    "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=ON", "-DGGML_NATIVE=ON", "-DGGML_CPU=ON",
    "-DGGML_OPENMP=ON", "-DGGML_BACKEND_DL=OFF", "-DGGML_CUDA=OFF", "-DGGML_HIP=OFF",
    "-DGGML_METAL=OFF", "-DGGML_VULKAN=OFF", "-DGGML_OPENCL=OFF", "-DGGML_SYCL=OFF",
    "-DGGML_MUSA=OFF", "-DGGML_WEBGPU=OFF", "-DGGML_BLAS=OFF", "-DGGML_RPC=OFF",
    "-DGGML_BUILD_TESTS=OFF", "-DGGML_BUILD_EXAMPLES=OFF",
]

SEQLENS = [4096, 8192, 16384, 32768]
KV_HEADS = [32, 8]
QUICK = [(32, 4096), (8, 4096)]  # (kv_heads, cache)
ELEM = {"f16": 2, "bf16": 2, "f32": 4}


class PeerUnavailable(Exception):
    """A peer that cannot be built or loaded: the run stops with exit status 2."""


def int_list(s: str) -> list[int]:
    try:
        return [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{s}' is not a comma-separated list of integers")


def dtype_list(s: str) -> list[str]:
    out = [x.strip() for x in s.split(",") if x.strip()]
    bad = [x for x in out if x not in ELEM]
    if bad or not out:
        raise argparse.ArgumentTypeError(f"'{s}': dtypes are f16, bf16, f32")
    return out


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description="Time CPU decode attention: flashattn-c (C API) against ggml's "
                    "ggml_flash_attn_ext and PyTorch SDPA, in one process, in alternation.",
        epilog="Exit status 1 when a call or an output check failed, 2 when a peer cannot be "
               "built or loaded.")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads of every implementation "
                    "(OMP_NUM_THREADS, ggml's n_threads, torch.set_num_threads); default 2")
    ap.add_argument("--workdir", default="/tmp/fa_cpu_peers",
                    help="where ggml is downloaded and built, outside the repository (default "
                         "/tmp/fa_cpu_peers; reused when already built)")
    ap.add_argument("--lib", default=None,
                    help="libflashattn.so (default: $FLASHATTN_LIBRARY, else what "
                         "python/flashattn finds: build/release/lib/libflashattn.so)")
    ap.add_argument("--read-bw", default=None,
                    help="cpu-read-bw program (default: bin/cpu-read-bw beside the library's "
                         "lib/, else compiled from bench/cpu_read_bw.c into --workdir)")
    ap.add_argument("--read-bw-mib", type=int, default=0,
                    help="buffer of the read-bandwidth probe in MiB (default: its own, 8x the "
                         "last-level cache)")
    ap.add_argument("--seqlens", type=int_list, default=SEQLENS,
                    help="cache lengths (default 4096,8192,16384,32768)")
    ap.add_argument("--kv-heads", type=int_list, default=KV_HEADS,
                    help="K/V heads per shape, each under --heads query heads (default 32,8)")
    ap.add_argument("--heads", type=int, default=32, help="query heads (default 32)")
    ap.add_argument("--hdim", type=int, default=128, help="head dim (default 128)")
    ap.add_argument("--batch", type=int, default=1, help="batch (default 1)")
    ap.add_argument("--dtypes", type=dtype_list, default=["f16", "bf16"],
                    help="our dtypes (default f16,bf16; ggml is always f16)")
    ap.add_argument("--torch-dtypes", type=dtype_list, default=["f32", "bf16"],
                    help="PyTorch's dtypes (default f32,bf16)")
    ap.add_argument("--splits", type=int, default=0, help="our num_splits (default 0: ours picks)")
    ap.add_argument("--quick", action="store_true",
                    help=f"a smoke test: the 2 shapes (kv_heads, cache) {QUICK}")
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    ap.add_argument("--rep-ms", type=float, default=200.0,
                    help="back-to-back calls of one implementation in a round (default 200 ms)")
    ap.add_argument("--settle-ms", type=float, default=300.0,
                    help="untimed alternating calls before the rounds (default 300 ms)")
    ap.add_argument("--max-calls", type=int, default=500, help="cap on the calls of a round")
    ap.add_argument("--tol", type=float, default=2e-2,
                    help="largest relative L2 error of our output against the f32 reference "
                         "(default 2e-2)")
    ap.add_argument("--peer-tol", type=float, default=1e-1,
                    help="the same for a peer (default 1e-1: it catches a peer computing "
                         "something else, not ggml's f16 accumulation over long caches)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"),
                    help="C compiler for the ggml harness and the probe (default $CC or cc)")
    ap.add_argument("--json", default=None, help="write everything to this file")
    a = ap.parse_args(argv)
    if a.threads < 1 or a.rounds < 1 or a.batch < 1:
        ap.error("--threads, --rounds and --batch must be at least 1")
    if any(h < 1 or a.heads % h for h in a.kv_heads):
        ap.error(f"every --kv-heads must divide --heads {a.heads}")
    return a


def log(msg: str) -> None:
    print(msg, flush=True)


def run_cmd(cmd, what: str, cwd=None, logfile=None) -> str:
    """Runs cmd; its output, or PeerUnavailable with the output's tail."""
    try:
        p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    except OSError as e:
        raise PeerUnavailable(f"{what}: cannot run {cmd[0]}: {e}")
    if logfile:
        with open(logfile, "a") as f:
            f.write(f"$ {' '.join(cmd)}\n{p.stdout}\n")
    if p.returncode != 0:
        tail = "\n".join(p.stdout.strip().splitlines()[-15:])
        raise PeerUnavailable(f"{what} failed (exit {p.returncode}): {' '.join(cmd)}\n{tail}")
    return p.stdout


# ---------------------------------------------------------------------------------------------
# Building the peers (outside the repository)

def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch_ggml_source(work: str) -> str:
    """The pinned sdist's ggml directory under work, downloaded and unpacked when missing."""
    tgz = os.path.join(work, f"{SDIST}.tar.gz")
    ggml = os.path.join(work, SDIST, "vendor", "llama.cpp", "ggml")
    if not os.path.exists(tgz):
        log(f"downloading llama-cpp-python {LLAMA_CPP_PYTHON} (source distribution) ...")
        run_cmd([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                 f"llama-cpp-python=={LLAMA_CPP_PYTHON}", "-d", work], "pip download",
                logfile=os.path.join(work, "build.log"))
        if not os.path.exists(tgz):
            raise PeerUnavailable(f"pip download did not leave {tgz}")
    digest = sha256(tgz)
    if digest != LLAMA_CPP_PYTHON_SHA256:
        raise PeerUnavailable(f"{tgz} has sha256 {digest}, not the pinned "
                              f"{LLAMA_CPP_PYTHON_SHA256}: remove it to download it again")
    if not os.path.isfile(os.path.join(ggml, "include", "ggml.h")):
        log(f"unpacking {SDIST}/vendor/llama.cpp/ggml ...")
        prefix = f"{SDIST}/vendor/llama.cpp/ggml/"
        with tarfile.open(tgz) as tf:
            members = [m for m in tf.getmembers() if m.name.startswith(prefix)
                       and (m.isfile() or m.isdir())]
            if not members:
                raise PeerUnavailable(f"{tgz} holds no {prefix}")
            # The "data" filter (where this Python has it) refuses links and paths that leave
            # work, as an archive from an index deserves.
            kw = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tf.extractall(work, members=members, **kw)
    # The sdist leaves out ggml.pc.in, which ggml's CMakeLists configures when built on its own;
    # the pkg-config file is not used here, so an empty template stands in for it.
    pc_in = os.path.join(ggml, "ggml.pc.in")
    if not os.path.exists(pc_in):
        open(pc_in, "w").close()
    return ggml


def build_ggml(work: str, cc: str) -> dict:
    """ggml's CPU backend and our harness, built under work; their paths and ggml's version."""
    for tool in ("cmake", cc):
        if shutil.which(tool) is None:
            raise PeerUnavailable(f"building ggml needs {tool}, which is not on PATH")
    src = fetch_ggml_source(work)
    build = os.path.join(work, "ggml-build")
    libdir = os.path.join(build, "src")
    stamp = os.path.join(build, "cpu_peers.stamp")
    config = json.dumps([SDIST, GGML_CMAKE_ARGS])
    built = os.path.exists(os.path.join(libdir, "libggml-cpu.so")) and os.path.exists(stamp)
    if built:
        with open(stamp) as f:
            built = f.read() == config
    if not built:
        logfile = os.path.join(work, "build.log")
        log(f"building ggml's CPU backend in {build} (a few minutes; log: {logfile}) ...")
        gen = ["-G", "Ninja"] if shutil.which("ninja") else []
        run_cmd(["cmake", "-S", src, "-B", build] + gen + GGML_CMAKE_ARGS, "ggml cmake configure",
                logfile=logfile)
        jobs = str(os.cpu_count() or 2)
        run_cmd(["cmake", "--build", build, "-j", jobs], "ggml build", logfile=logfile)
        with open(stamp, "w") as f:
            f.write(config)
    harness = os.path.join(HERE, "ggml_attn.c")
    so = os.path.join(work, "libggml_attn.so")
    prog = os.path.join(work, "ggml-attn")
    common = ["-std=c11", "-O2", "-Wall", "-Wextra", "-I", os.path.join(src, "include"), harness]
    link = ["-L", libdir, "-lggml", "-lggml-cpu", "-lggml-base", f"-Wl,-rpath,{libdir}", "-lm"]
    newest = max(os.path.getmtime(harness), os.path.getmtime(stamp))
    if not os.path.exists(so) or os.path.getmtime(so) < newest:
        run_cmd([cc, "-shared", "-fPIC"] + common + ["-o", so] + link, "compiling ggml_attn.c")
        run_cmd([cc, "-DGGML_ATTN_MAIN"] + common + ["-o", prog] + link,
                "compiling ggml_attn.c (program)")
    return {"lib": so, "program": prog, "libdir": libdir, "source": src}


class Ggml:
    """bench/ggml_attn.c's shared library through ctypes."""

    def __init__(self, path: str):
        try:
            d = ctypes.CDLL(path)
        except OSError as e:
            raise PeerUnavailable(f"cannot load {path}: {e}")
        P = ctypes.c_void_p
        d.ga_create.restype = P
        d.ga_create.argtypes = [ctypes.c_int] * 8 + [P, P, P, ctypes.c_char_p, ctypes.c_size_t]
        d.ga_run.restype = ctypes.c_double
        d.ga_run.argtypes = [P, ctypes.c_int]
        d.ga_output.restype = ctypes.c_size_t
        d.ga_output.argtypes = [P, P, ctypes.c_size_t]
        d.ga_destroy.restype = None
        d.ga_destroy.argtypes = [P]
        d.ga_ggml_version.restype = ctypes.c_char_p
        d.ga_ggml_version.argtypes = []
        self.dll = d

    def version(self) -> str:
        return self.dll.ga_ggml_version().decode()


def find_read_bw(args, lib_path: str) -> str:
    """cpu-read-bw: --read-bw, the build's bin/ beside the library's lib/, or compiled here."""
    if args.read_bw:
        return args.read_bw
    beside = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(lib_path))), "bin",
                          "cpu-read-bw")
    if os.path.exists(beside):
        return beside
    prog = os.path.join(args.workdir, "cpu-read-bw")
    src = os.path.join(HERE, "cpu_read_bw.c")
    if not os.path.exists(prog) or os.path.getmtime(prog) < os.path.getmtime(src):
        run_cmd([args.cc, "-std=c11", "-O3", "-Wall", "-Wextra", "-fopenmp", src, "-o", prog],
                "compiling cpu_read_bw.c")
    return prog


def read_bw(prog: str, threads: int, mib: int) -> dict:
    """One cpu-read-bw reading: its summary line's fields."""
    cmd = [prog, "--threads", str(threads)] + (["--mib", str(mib)] if mib else [])
    try:
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        return {"error": f"{' '.join(cmd)}: {e}"}
    line = [s for s in out.splitlines() if s.startswith("read_bw_gbs_best=")]
    if not line:
        return {"error": f"{' '.join(cmd)} printed no summary: {out.strip()[-300:]}"}
    fields = dict(kv.split("=", 1) for kv in line[0].split() if "=" in kv)
    return {"best_gbs": float(fields["read_bw_gbs_best"]),
            "median_gbs": float(fields["read_bw_gbs_median"]), "mib": int(fields["mib"]),
            "isa": fields.get("isa", "?"), "llc_mib": float(fields.get("llc_mib", "0"))}


# ---------------------------------------------------------------------------------------------
# The implementations: each is (name, dtype, fn(calls) -> ms a call, output() -> f32 tensor)

class Impl:
    def __init__(self, key, family, dtype, elem, run, output, info=None):
        self.key, self.family, self.dtype, self.elem = key, family, dtype, elem
        self.run, self.output, self.info = run, output, info or {}
        self.rec = {"impl": family, "dtype": dtype, **self.info}


def make_ours(C, lib, torch, dt, inputs, sh, args) -> Impl:
    """fa_forward_kvcache on ctypes structs built once over torch's CPU tensors."""
    B, S, H, HKV, D = sh
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16}[dt]
    fdt = {"f16": C.FA_F16, "bf16": C.FA_BF16}[dt]
    q = inputs["q32"].to(tdt).contiguous()           # [B, 1, H, D]
    k = inputs["k32"].to(tdt).contiguous()           # [B, S, HKV, D]
    v = inputs["v32"].to(tdt).contiguous()
    out = torch.empty_like(q)
    lse = torch.empty(B, H, 1, dtype=torch.float32)
    lens = torch.full((B,), S, dtype=torch.int32)

    def tensor(t, dtype):
        ft = C.FaTensor()
        ft.data = t.data_ptr()
        ft.device = C.FaDevice(C.FA_DEVICE_CPU, 0)
        ft.dtype = dtype
        ft.ndim = t.dim()
        for i in range(t.dim()):
            ft.shape[i] = t.shape[i]
            ft.strides[i] = t.stride(i)
        return ft

    tq, tk, tv, to = (tensor(t, fdt) for t in (q, k, v, out))
    tl, tc = tensor(lse, C.FA_F32), tensor(lens, C.FA_I32)
    params = C.FaParams()
    lib.dll.fa_params_init(ctypes.byref(params))
    params.backend = C.FA_BACKEND_CPU
    params.strict = 1
    params.return_lse = 1
    params.num_splits = args.splits
    kv = C.FaKvcacheArgs()
    lib.dll.fa_kvcache_args_init(ctypes.byref(kv))
    kv.cache_seqlens = ctypes.pointer(tc)
    info = C.FaRunInfo()
    lib.dll.fa_run_info_init(ctypes.byref(info))
    f = lib.dll.fa_forward_kvcache
    refs = [ctypes.byref(x) for x in (params, tq, tk, tv, kv, to, tl, info)]

    def call_once():
        st = f(*refs)
        if st != C.FA_OK:
            raise RuntimeError(f"fa_forward_kvcache: {lib.status_name(st)}: {lib.last_error()}")

    call_once()  # the run report sizes the workspace the timed calls get
    workspace = None
    if info.workspace_bytes:
        workspace = torch.empty(info.workspace_bytes, dtype=torch.uint8)
        params.workspace = workspace.data_ptr()
        params.workspace_size = info.workspace_bytes
    call_once()
    meta = {"kernel": C.text(info.kernel), "num_splits": info.num_splits,
            "workspace_bytes": info.workspace_bytes, "fell_back": info.fell_back}

    def run(calls: int) -> float:
        t0 = time.perf_counter()
        for _ in range(calls):
            st = f(*refs)
            if st != C.FA_OK:
                raise RuntimeError(f"fa_forward_kvcache: {lib.status_name(st)}: "
                                   f"{lib.last_error()}")
        return (time.perf_counter() - t0) * 1e3 / calls

    keep = (q, k, v, out, lse, lens, workspace, tq, tk, tv, to, tl, tc, params, kv, info)
    impl = Impl(f"ours_{dt}", "ours", dt, ELEM[dt], run, lambda: out.float(), meta)
    impl.keep = keep
    return impl


def make_ggml(gg, torch, inputs, sh, threads) -> Impl:
    """ggml_flash_attn_ext over f32 q (the f16-rounded values) and f16 K/V in our layout."""
    B, S, H, HKV, D = sh
    q = inputs["q32"].to(torch.float16).float().contiguous()
    k = inputs["k32"].to(torch.float16).contiguous()
    v = inputs["v32"].to(torch.float16).contiguous()
    err = ctypes.create_string_buffer(512)
    p = gg.dll.ga_create(D, H, HKV, 1, S, B, 0, threads, q.data_ptr(), k.data_ptr(), v.data_ptr(),
                         err, len(err))
    if not p:
        raise RuntimeError(f"ga_create: {err.value.decode()}")
    out = torch.empty(B, 1, H, D, dtype=torch.float32)

    def run(calls: int) -> float:
        ms = gg.dll.ga_run(p, calls)
        if ms < 0:
            raise RuntimeError("ggml_graph_compute failed")
        return ms

    def output():
        if gg.dll.ga_output(p, out.data_ptr(), out.numel()) != out.numel():
            raise RuntimeError("ga_output: size mismatch")
        return out

    run(1)
    impl = Impl("ggml_f16", "ggml", "f16", 2, run, output, {"q_dtype": "f32"})
    impl.keep = (q, k, v, out)
    impl.close = lambda: gg.dll.ga_destroy(p)
    return impl


def make_torch(torch, dt, inputs, sh) -> Impl:
    """SDPA on [B, H, 1, D] q and contiguous [B, HKV, S, D] K/V, flash backend where it runs."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    B, S, H, HKV, D = sh
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[dt]
    q = inputs["q32"].to(tdt).transpose(1, 2).contiguous()   # [B, H, 1, D]
    k = inputs["k32"].to(tdt).transpose(1, 2).contiguous()   # [B, HKV, S, D]
    v = inputs["v32"].to(tdt).transpose(1, 2).contiguous()
    gqa = HKV != H
    state = {"out": None, "backend": "FLASH_ATTENTION", "flash": True}

    def sdpa():
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)

    def cm():
        if state["flash"]:
            return sdpa_kernel(SDPBackend.FLASH_ATTENTION)
        return contextlib.nullcontext()

    try:
        with torch.no_grad(), cm():
            state["out"] = sdpa()
    except RuntimeError as e:  # torch's flash kernel refuses: its default choice is timed
        state["flash"] = False
        state["backend"] = f"default (flash refused: {' '.join(str(e).split())[:200]})"
        with torch.no_grad():
            state["out"] = sdpa()

    def run(calls: int) -> float:
        with torch.no_grad(), cm():
            t0 = time.perf_counter()
            for _ in range(calls):
                o = sdpa()
            ms = (time.perf_counter() - t0) * 1e3 / calls
        state["out"] = o
        return ms

    impl = Impl(f"torch_{dt}", "torch", dt, ELEM[dt], run,
                lambda: state["out"].transpose(1, 2).float(),
                {"sdpa_backend": state["backend"], "enable_gqa": gqa})
    impl.keep = (q, k, v)
    return impl


# ---------------------------------------------------------------------------------------------
# One shape

def reference(torch, q32, k32, v32, dt):
    """Attention in f32 over inputs rounded to dt: [B, 1, H, D]."""
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[dt]
    q, k, v = (t.to(tdt).float() for t in (q32, k32, v32))
    B, _, H, D = q.shape
    HKV = k.shape[2]
    g = H // HKV
    qh = q.view(B, HKV, g, D)                         # query heads of one K/V head together
    s = torch.einsum("bhgd,bshd->bhgs", qh, k) / D ** 0.5
    p = torch.softmax(s, dim=-1)
    o = torch.einsum("bhgs,bshd->bhgd", p, v)
    return o.reshape(B, 1, H, D).float()


def check(torch, impl: Impl, ref, tol: float) -> dict:
    o = impl.output()
    finite = bool(torch.isfinite(o).all().item())
    d = (o - ref).double()
    rel = (torch.linalg.vector_norm(d) / torch.linalg.vector_norm(ref.double())).item()
    ok = finite and rel <= tol
    return {"rel_l2": rel if finite else float("nan"), "finite": finite, "ok": ok}


def time_shape(impls: list, args) -> None:
    """The module docstring's protocol over impls (warm-up done by their makers)."""
    t_end = time.perf_counter() + args.settle_ms / 1e3
    while time.perf_counter() < t_end:
        for im in impls:
            im.run(1)
    for im in impls:
        est = im.run(2)
        im.rec["calls"] = max(2, min(args.max_calls, int(args.rep_ms / max(est, 1e-3))))
    for rd in range(args.rounds):
        k = rd % len(impls)
        for im in impls[k:] + impls[:k]:
            im.rec.setdefault("ms_rounds", []).append(im.run(im.rec["calls"]))
    for im in impls:
        im.rec["ms"] = statistics.median(im.rec["ms_rounds"])


def run_shape(ctx, sh, args) -> tuple[dict, list[str]]:
    torch, C, lib, gg = ctx["torch"], ctx["C"], ctx["lib"], ctx["ggml"]
    B, S, H, HKV, D = sh
    gen = torch.Generator().manual_seed(args.seed + 7919 * S + 131 * HKV)

    def randn(*shape):
        x = torch.randn(*shape, generator=gen)
        return torch.where(x == 0, torch.full_like(x, 0.5), x)  # no zeros a kernel could skip

    inputs = {"q32": randn(B, 1, H, D), "k32": randn(B, S, HKV, D), "v32": randn(B, S, HKV, D)}
    rec = {"batch": B, "cache": S, "heads": H, "kv_heads": HKV, "hdim": D,
           "kv_mib": 2 * B * S * HKV * D * 2 / 2 ** 20, "impls": {}}
    problems, impls = [], []
    makers = [(f"ours_{dt}", lambda dt=dt: make_ours(C, lib, torch, dt, inputs, sh, args))
              for dt in args.dtypes]
    makers.append(("ggml_f16", lambda: make_ggml(gg, torch, inputs, sh, args.threads)))
    makers += [(f"torch_{dt}", lambda dt=dt: make_torch(torch, dt, inputs, sh))
               for dt in args.torch_dtypes]
    refs = {}
    label = f"{H}/{HKV} heads, cache {S}"
    for key, make in makers:
        try:
            im = make()
        except Exception as e:  # noqa: BLE001 (reported; the others still run)
            rec["impls"][key] = {"error": " ".join(str(e).split())[:500]}
            problems.append(f"{label}: {key}: {rec['impls'][key]['error']}")
            continue
        ref_dt = "f16" if im.family == "ggml" else im.dtype
        if ref_dt not in refs:
            refs[ref_dt] = reference(torch, inputs["q32"], inputs["k32"], inputs["v32"], ref_dt)
        tol = args.tol if im.family == "ours" else args.peer_tol
        im.rec["check"] = check(torch, im, refs[ref_dt], tol)
        if not im.rec["check"]["ok"]:
            problems.append(f"{label}: {key}: output differs from the f32 reference "
                            f"(rel L2 {im.rec['check']['rel_l2']:.3g} > {tol})")
        rec["impls"][key] = im.rec
        impls.append(im)
    try:
        time_shape(impls, args)
    except Exception as e:  # noqa: BLE001
        problems.append(f"{label}: timing: {' '.join(str(e).split())[:500]}")
        for im in impls:
            im.rec.setdefault("error", str(e)[:500])
    for im in impls:
        if "ms" in im.rec:
            kv_bytes = 2 * B * S * HKV * D * im.elem
            im.rec["kv_bytes"] = kv_bytes
            im.rec["gbs"] = kv_bytes / (im.rec["ms"] * 1e-3) / 1e9
        if hasattr(im, "close"):
            im.close()
    return rec, problems


# ---------------------------------------------------------------------------------------------
# Report

def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def openmp_runtimes() -> list[str]:
    """The OpenMP runtimes mapped into this process (one, when all three share it)."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "/" in line}
    except OSError:
        return []
    return sorted(p for p in paths if os.path.basename(p).startswith(("libgomp", "libiomp",
                                                                      "libomp")))


def git_commit() -> str:
    try:
        rev = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               check=True).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def print_table(results: list, args, bw: float | None) -> None:
    """One row per shape: ms and GB/s of each, then the ratios (> 1 = ours faster)."""
    ours = [f"ours_{dt}" for dt in args.dtypes]
    torches = [f"torch_{dt}" for dt in args.torch_dtypes]
    cols = ["heads", "cache", "K+V MiB"]
    for key in ours + ["ggml_f16"]:
        cols += [f"{key} ms", "GB/s"] + (["%bw"] if bw else [])
    cols += [f"{key} ms" for key in torches]
    cols += [f"{k.split('_')[1]} /ggml" for k in ours] + [f"{k.split('_')[1]} /torch" for k in ours]
    rows = []
    for r in results:
        im = r["impls"]
        row = [f"{r['heads']}/{r['kv_heads']}", str(r["cache"]), f"{r['kv_mib']:.0f}"]

        def ms(key, im=im):
            return im.get(key, {}).get("ms")

        for key in ours + ["ggml_f16"]:
            m = ms(key)
            g = im.get(key, {}).get("gbs")
            row += [f"{m:.3f}" if m else "n/a", f"{g:.1f}" if g else "n/a"]
            if bw:
                row.append(f"{100 * g / bw:.0f}%" if g else "n/a")
        row += [f"{ms(k):.3f}" if ms(k) else "n/a" for k in torches]
        torch_best = min((ms(k) for k in torches if ms(k)), default=None)
        for peer in ("ggml", "torch"):
            for key in ours:
                p = ms("ggml_f16") if peer == "ggml" else torch_best
                row.append(f"{p / ms(key):.2f}" if p and ms(key) else "n/a")
        rows.append(row)
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    print("  ".join(c.rjust(w) for c, w in zip(cols, widths)))
    for r in rows:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
    print("ratios: a peer's ms / ours (> 1 = ours faster); /ggml against ggml f16, /torch against "
          "torch's fastest dtype of the row" + ("; %bw: GB/s over the read probe's median" if bw
                                               else ""))


def main(argv=None) -> int:
    args = parse_args(argv)
    # Before any OpenMP runtime starts: ours reads it through omp_get_max_threads, torch at import.
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    if os.path.commonpath([os.path.realpath(args.workdir), os.path.realpath(REPO)]) == \
            os.path.realpath(REPO):
        log(f"--workdir {args.workdir} is inside the repository; the peers are built outside it")
        return 2
    os.makedirs(args.workdir, exist_ok=True)
    meta = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "cpu": cpu_model(), "logical_cpus": os.cpu_count(), "threads": args.threads,
            "commit": git_commit(), "host": platform.node(), "python": platform.python_version(),
            "llama_cpp_python": LLAMA_CPP_PYTHON, "sdist_sha256": LLAMA_CPP_PYTHON_SHA256}
    try:
        import torch  # first: its OpenMP runtime is then the one every implementation shares
    except ImportError as e:
        log(f"peer unavailable: PyTorch: {e}")
        return 2
    torch.set_num_threads(args.threads)
    meta["torch"] = torch.__version__
    meta["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    try:
        ggml_build = build_ggml(args.workdir, args.cc)
        gg = Ggml(ggml_build["lib"])
    except PeerUnavailable as e:
        log(f"peer unavailable: ggml: {e}")
        return 2
    meta["ggml"] = gg.version()
    meta["ggml_build"] = {"dir": ggml_build["libdir"], "cmake_args": GGML_CMAKE_ARGS}
    sys.path.insert(0, os.path.join(REPO, "python"))
    from flashattn import _capi as C

    try:
        lib = C.Library(args.lib)
    except OSError as e:
        log(f"cannot load libflashattn: {e}")
        return 1
    meta["library"] = {"path": lib.path, "version": lib.version()}
    meta["openmp_runtimes"] = openmp_runtimes()
    try:
        bw_prog = find_read_bw(args, lib.path)
    except PeerUnavailable as e:
        log(f"no read-bandwidth probe: {e}")
        bw_prog = None
    shapes = [(args.batch, s, args.heads, h, args.hdim) for h, s in QUICK] if args.quick else \
        [(args.batch, s, args.heads, h, args.hdim) for h in args.kv_heads for s in args.seqlens]

    log(f"cpu: {meta['cpu']} ({meta['logical_cpus']} logical CPUs), threads {args.threads}, "
        f"torch {meta['torch']} ({meta['torch_cpu_capability']})")
    log(f"date {meta['date']}, commit {meta['commit']}, libflashattn {meta['library']['version']}"
        f", ggml {meta['ggml']} (llama-cpp-python {LLAMA_CPP_PYTHON} sdist)")
    log(f"OpenMP runtime(s) in this process: {', '.join(meta['openmp_runtimes']) or 'none'}")
    doc = {"meta": meta, "args": {k: v for k, v in vars(args).items()}, "read_bw": [],
           "results": [], "problems": []}

    def save():
        if args.json:
            with open(args.json, "w") as f:
                json.dump(doc, f, indent=1)

    def probe(when):
        if bw_prog:
            r = read_bw(bw_prog, args.threads, args.read_bw_mib)
            r["when"] = when
            doc["read_bw"].append(r)
            if "error" in r:
                log(f"read bandwidth ({when}): {r['error']}")
            else:
                log(f"read bandwidth ({when}, cpu-read-bw, {args.threads} threads, {r['mib']} MiB, "
                    f"{r['isa']}): best {r['best_gbs']:.1f} GB/s, median {r['median_gbs']:.1f} "
                    f"GB/s (last-level cache {r['llc_mib']:.0f} MiB)")

    probe("before")
    for sh in shapes:
        log(f"shape: batch {sh[0]}, cache {sh[1]}, heads {sh[2]}/{sh[3]}, hdim {sh[4]} ...")
        rec, problems = run_shape({"torch": torch, "C": C, "lib": lib, "ggml": gg}, sh, args)
        doc["results"].append(rec)
        doc["problems"] += problems
        for p in problems:
            log(f"  PROBLEM: {p}")
        for key, r in rec["impls"].items():
            if "ms" in r:
                extra = r.get("kernel") or r.get("sdpa_backend") or f"q {r.get('q_dtype')}"
                log(f"  {key:11s} {r['ms']:9.3f} ms {r['gbs']:7.2f} GB/s  rel L2 "
                    f"{r['check']['rel_l2']:.1e}  {extra}")
        save()
    probe("after")
    meds = [r["median_gbs"] for r in doc["read_bw"] if "median_gbs" in r]
    bw = statistics.median(meds) if meds else None
    print()
    log(f"CPU decode, same run: {meta['cpu']}, {args.threads} threads, {meta['date']}, commit "
        f"{meta['commit']}, ggml {meta['ggml']}, torch {meta['torch']}"
        + (f", read probe {bw:.1f} GB/s" if bw else ""))
    print_table(doc["results"], args, bw)
    save()
    if doc["problems"]:
        log(f"\n{len(doc['problems'])} problem(s):")
        for p in doc["problems"]:
            log(f"  {p}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
