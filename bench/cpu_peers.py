#!/usr/bin/env python3
"""cpu_peers.py: CPU attention of flashattn-c against ggml and PyTorch in one run: decode, prefill.

Two modes (--mode); in either the three implementations run in one Python process on the same CPU
threads (--threads, default 2), in alternation, on the same input values.

- decode (the default): one query token per sequence over a full KV cache, head dim 128, 32 query
  heads over 32 K/V heads (MHA) and over 8 (GQA), caches of 4096, 8192, 16384 and 32768 keys,
  batch 1, no mask. Reported: ms, and GB/s of the K and V a call must read.
- prefill: seqlen_q = seqlen_k (--seqlens, default 1024 and 4096), head dims 64 and 128
  (--hdims), 8 query heads over 8 K/V heads (MHA; --kv-heads adds GQA), batch 1, not causal and
  causal (--causal). Reported: ms, and GFLOP/s = 4 * batch * heads * seqlen_q * seqlen_k *
  head_dim / time, halved when causal (the FlashAttention papers' count, which FlashAttention's
  benchmarks and fa-bench use; a causal square has (seqlen + 1) / (2 * seqlen) of the pairs, 0.1%
  more than half at 1024).

torch is imported first: in its Linux wheels its OpenMP runtime is a libgomp.so.1, which the
library and ggml (both built with GCC's OpenMP) then bind to as well, so one thread team serves all
three (the run prints the runtimes it mapped). The inputs are standard-normal f32 draws (no zeros)
rounded to each implementation's dtype; each implementation holds its own copy in its own layout,
so none reads another's cache lines.

- ours: the library's C API through ctypes (the struct mirror of python/flashattn/_capi.py),
  backend cpu with strict, q, K, V and out in one dtype of --dtypes (f16, bf16, f32), a caller
  workspace sized by the first call's run report. Decode: fa_forward_kvcache, q [batch, 1, heads,
  128], caches [batch, cache, kv_heads, 128], cache_seqlens = cache, lse f32; default f16 and
  bf16. Prefill: fa_forward, q and out [batch, seqlen, heads, dim], K and V [batch, seqlen,
  kv_heads, dim], params.causal when causal (aligned bottom-right, which is top-left when seqlen_q
  = seqlen_k), no lse (return_lse 0, lse NULL: an inference prefill, which is what the peers
  produce); default f16, bf16 and f32. Timed: one call (validation, dispatch, the kernel), the
  tensor structs built beforehand; nothing is allocated inside it. OMP_NUM_THREADS = --threads is
  set before any library is loaded.
- ggml: ggml_flash_attn_ext on ggml's CPU backend, built by this script outside the repository
  (--workdir) from the llama-cpp-python source distribution pinned below (LLAMA_CPP_PYTHON,
  which vendors llama.cpp and its ggml), with GGML_NATIVE=ON, OpenMP, Release, no GPU backend;
  bench/ggml_attn.c (ours) is compiled against it into a shared library. q is f32 holding the
  f16-rounded values (ggml's CPU flash attention takes q as f32: its decode path rounds it to f16
  itself, its tiled path computes in f32), K and V f16 in the same layout as ours (llama.cpp's KV
  cache layout) and viewed as llama.cpp views them, out f32. Timed: one ggml_graph_compute of the
  planned one-node graph (its threadpool, work buffer and graph made beforehand). Decode: with
  batch 1 and at least 512 keys this is ggml's split-KV decode path; llama.cpp also passes a KQ
  mask, here there is none, which spares ggml the mask's reads. Prefill: all seqlen_q query rows
  in one graph (llama.cpp cuts a long prompt into micro-batches of n_ubatch tokens, 512 by
  default, each over the keys so far), which with at least 64 rows is ggml's tiled path (64 query
  rows x 64 keys a tile, K and V widened to f32, both products f32 GEMMs); not causal: no mask;
  causal: the f16 KQ mask llama.cpp gives it, [seqlen_k, seqlen_q] in ggml's order (rows not
  padded: this ggml has no GGML_KQ_MASK_PAD), -INF above the diagonal and 0 elsewhere, shared by
  the heads, filled once before the timed calls (llama.cpp fills it once a batch for every
  layer); ggml skips a tile whose mask is -INF throughout.
- torch: torch.nn.functional.scaled_dot_product_attention on CPU tensors under no_grad,
  restricted to SDPBackend.FLASH_ATTENTION (torch's CPU flash kernel; the default backend where
  that refuses), enable_gqa when kv_heads < heads, q [batch, heads, seqlen_q, dim], K and V
  contiguous [batch, kv_heads, keys, dim] (the layout of a PyTorch KV cache), is_causal when
  causal (aligned top-left, the same as ours at seqlen_q = seqlen_k),
  torch.set_num_threads(--threads). Its dtypes (--torch-dtypes) default to f32, where torch's CPU
  kernel is fastest, and bf16, the bytes ours reads. Timed: one SDPA call, which allocates its
  output.

Timing (as bench/peer_run.py on the GPU): per shape each implementation is called once untimed
(and its output checked against an f32 reference computed from the same rounded inputs: relative
L2 error at most --tol for ours, --peer-tol for the peers, whose looser bound still catches a peer
that computes something else; in decode ggml's CPU kernel accumulates softmax(QK)V in f16 when V
is f16, which costs it about 2.7e-2 over 32k keys on one thread; in prefill the reference and the
check cover at most --ref-rows query rows, evenly spaced with the first and the last, every head,
causal mask included), then all of them in turn for --settle-ms (at least one turn), then each
once more (twice in decode) for an estimate of its call's time, then --rounds rounds whose order
rotates by one each round; in a round an implementation runs `calls` calls back to back (about
--rep-ms; at least two in decode, one in prefill) and its time is the wall clock over `calls`; the
median of its rounds counts. Decode GB/s counts the K and V bytes a call must read (2 * batch *
cache * kv_heads * 128 * element size), once. A probe runs before and after the shapes with the
same thread count: in decode cpu-read-bw (bench/cpu_read_bw.c), the streaming-read rate, so the
decode GB/s can be read as a fraction of it (a cache whose K+V fits in the last-level cache can
exceed it); in prefill cpu-fma-peak (bench/cpu_fma_peak.c), the fp32 FMA rate of 512-bit vectors,
the ceiling the CPU backend's GFLOP/s is quoted against (%peak: over the median of the two).

Output: the machine, the table (decode: ms and GB/s of each; prefill: ms and GFLOP/s of each;
then ours / ggml and ours / torch's fastest dtype, a peer's ms over ours, > 1 = ours faster) and,
with --json FILE, everything (metadata, every round, the checks).
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
import typing

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

# Each mode's defaults of the options that default to None.
DEFAULTS = {
    "decode": {"seqlens": [4096, 8192, 16384, 32768], "kv_heads": [32, 8], "heads": 32,
               "hdims": [128], "causal": [0], "dtypes": ["f16", "bf16"],
               "torch_dtypes": ["f32", "bf16"], "rounds": 5, "rep_ms": 200.0, "settle_ms": 300.0},
    "prefill": {"seqlens": [1024, 4096], "kv_heads": [8], "heads": 8, "hdims": [64, 128],
                "causal": [0, 1], "dtypes": ["f16", "bf16", "f32"],
                "torch_dtypes": ["f32", "bf16"], "rounds": 5, "rep_ms": 200.0,
                "settle_ms": 0.0},
}
QUICK = {"decode": [(32, 4096), (8, 4096)],             # (kv_heads, cache), head dim 128
         "prefill": [(64, 512, 0), (128, 512, 1)]}      # (head dim, seqlen, causal)
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
        description="Time CPU decode or prefill attention: flashattn-c (C API) against ggml's "
                    "ggml_flash_attn_ext and PyTorch SDPA, in one process, in alternation.",
        epilog="Defaults marked decode/prefill depend on --mode. Exit status 1 when a call or an "
               "output check failed, 2 when a peer cannot be built or loaded.")
    ap.add_argument("--mode", choices=["decode", "prefill"], default="decode",
                    help="decode: one query token over a KV cache (the default); prefill: "
                         "seqlen_q = seqlen_k, causal and not")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads of every implementation "
                    "(OMP_NUM_THREADS, ggml's n_threads, torch.set_num_threads); default 2")
    ap.add_argument("--workdir", default="/tmp/fa_cpu_peers",
                    help="where ggml is downloaded and built, outside the repository (default "
                         "/tmp/fa_cpu_peers; reused when already built)")
    ap.add_argument("--lib", default=None,
                    help="libflashattn.so (default: $FLASHATTN_LIBRARY, else what "
                         "python/flashattn finds: build/release/lib/libflashattn.so)")
    ap.add_argument("--read-bw", default=None,
                    help="cpu-read-bw program, decode's probe (default: bin/cpu-read-bw beside "
                         "the library's lib/, else compiled from bench/cpu_read_bw.c into "
                         "--workdir)")
    ap.add_argument("--read-bw-mib", type=int, default=0,
                    help="buffer of the read-bandwidth probe in MiB (default: its own, 8x the "
                         "last-level cache)")
    ap.add_argument("--fma-peak", default=None,
                    help="cpu-fma-peak program, prefill's probe (default: bin/cpu-fma-peak beside "
                         "the library's lib/, else compiled from bench/cpu_fma_peak.c into "
                         "--workdir)")
    ap.add_argument("--seqlens", type=int_list, default=None,
                    help="decode: cache lengths (default 4096,8192,16384,32768); prefill: "
                         "seqlen_q = seqlen_k (default 1024,4096)")
    ap.add_argument("--kv-heads", type=int_list, default=None,
                    help="K/V heads per shape, each under --heads query heads (default decode "
                         "32,8, prefill 8)")
    ap.add_argument("--heads", type=int, default=None,
                    help="query heads (default decode 32, prefill 8)")
    ap.add_argument("--hdims", "--hdim", type=int_list, default=None,
                    help="head dims (default decode 128, prefill 64,128)")
    ap.add_argument("--causal", type=int_list, default=None,
                    help="prefill: 0 (not causal), 1 (causal) or both (default 0,1)")
    ap.add_argument("--batch", type=int, default=1, help="batch (default 1)")
    ap.add_argument("--dtypes", type=dtype_list, default=None,
                    help="our dtypes (default decode f16,bf16, prefill f16,bf16,f32; ggml is "
                         "always f32 q and f16 K/V)")
    ap.add_argument("--torch-dtypes", type=dtype_list, default=None,
                    help="PyTorch's dtypes (default f32,bf16)")
    ap.add_argument("--splits", type=int, default=0, help="our num_splits (default 0: ours picks)")
    ap.add_argument("--quick", action="store_true",
                    help=f"a smoke test: decode's 2 shapes (kv_heads, cache) {QUICK['decode']}, "
                         f"prefill's 2 shapes (hdim, seqlen, causal) {QUICK['prefill']}")
    ap.add_argument("--rounds", type=int, default=None, help="timed rounds (default 5)")
    ap.add_argument("--rep-ms", type=float, default=None,
                    help="back-to-back calls of one implementation in a round (default 200 ms; at "
                         "least 2 calls in decode, 1 in prefill)")
    ap.add_argument("--settle-ms", type=float, default=None,
                    help="untimed alternating calls before the rounds, at least one turn (default "
                         "decode 300 ms, prefill 0: one turn)")
    ap.add_argument("--max-calls", type=int, default=500, help="cap on the calls of a round")
    ap.add_argument("--ref-rows", type=int, default=512,
                    help="prefill: query rows the f32 reference and the check cover, evenly "
                         "spaced (default 512; all rows when there are no more)")
    ap.add_argument("--tol", type=float, default=2e-2,
                    help="largest relative L2 error of our output against the f32 reference "
                         "(default 2e-2)")
    ap.add_argument("--peer-tol", type=float, default=1e-1,
                    help="the same for a peer (default 1e-1: it catches a peer computing "
                         "something else, not ggml's f16 accumulation over long caches)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"),
                    help="C compiler for the ggml harness and the probes (default $CC or cc)")
    ap.add_argument("--json", default=None, help="write everything to this file")
    a = ap.parse_args(argv)
    for key, value in DEFAULTS[a.mode].items():
        if getattr(a, key) is None:
            setattr(a, key, value)
    if a.threads < 1 or a.rounds < 1 or a.batch < 1 or a.heads < 1 or a.ref_rows < 1:
        ap.error("--threads, --rounds, --batch, --heads and --ref-rows must be at least 1")
    if any(h < 1 or a.heads % h for h in a.kv_heads):
        ap.error(f"every --kv-heads must divide --heads {a.heads}")
    if any(x < 1 for x in a.seqlens + a.hdims):
        ap.error("--seqlens and --hdims must be at least 1")
    if any(c not in (0, 1) for c in a.causal) or not a.causal:
        ap.error("--causal takes 0, 1 or 0,1")
    if a.mode == "decode" and a.causal != [0]:
        ap.error("--causal is a prefill option (decode's one query row sees every key)")
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


def find_probe(args, lib_path: str, name: str) -> str:
    """cpu-read-bw or cpu-fma-peak: the option naming it, the build's bin/ beside the library's
    lib/, or compiled here from bench/."""
    given = args.read_bw if name == "cpu-read-bw" else args.fma_peak
    if given:
        return given
    beside = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(lib_path))), "bin",
                          name)
    if os.path.exists(beside):
        return beside
    prog = os.path.join(args.workdir, name)
    src = os.path.join(HERE, name.replace("-", "_") + ".c")
    if not os.path.exists(prog) or os.path.getmtime(prog) < os.path.getmtime(src):
        run_cmd([args.cc, "-std=c11", "-O3", "-Wall", "-Wextra", "-fopenmp", src, "-o", prog],
                f"compiling {os.path.basename(src)}")
    return prog


def probe_fields(cmd: list, key: str) -> dict:
    """The key=value fields of a probe's summary line (the one starting with key=), or
    {"error": why}."""
    try:
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        return {"error": f"{' '.join(cmd)}: {e}"}
    line = [x for x in out.splitlines() if x.startswith(key + "=")]
    if not line:
        return {"error": f"{' '.join(cmd)} printed no summary: {out.strip()[-300:]}"}
    return dict(kv.split("=", 1) for kv in line[0].split() if "=" in kv)


def read_bw(prog: str, threads: int, mib: int) -> dict:
    """One cpu-read-bw reading: its summary line's fields."""
    cmd = [prog, "--threads", str(threads)] + (["--mib", str(mib)] if mib else [])
    fields = probe_fields(cmd, "read_bw_gbs_best")
    if "error" in fields:
        return fields
    return {"best_gbs": float(fields["read_bw_gbs_best"]),
            "median_gbs": float(fields["read_bw_gbs_median"]), "mib": int(fields["mib"]),
            "isa": fields.get("isa", "?"), "llc_mib": float(fields.get("llc_mib", "0"))}


def fma_peak(prog: str) -> dict:
    """One cpu-fma-peak reading (its threads are OMP_NUM_THREADS, set to --threads)."""
    fields = probe_fields([prog], "fma_peak_gflops")
    if "error" in fields:
        return fields
    return {"gflops": float(fields["fma_peak_gflops"]), "threads": int(fields["threads"]),
            "isa": fields.get("isa", "?")}


# ---------------------------------------------------------------------------------------------
# The implementations: each is (name, dtype, fn(calls) -> ms a call, output() -> f32 tensor
# [batch, seqlen_q, heads, dim])

class Shape(typing.NamedTuple):
    batch: int
    seqlen_q: int   # 1 in decode
    seqlen_k: int   # the cache in decode
    heads: int
    kv_heads: int
    hdim: int
    causal: int     # 0 in decode

    def flop(self) -> float:
        """4 * batch * heads * seqlen_q * seqlen_k * hdim, halved when causal."""
        f = 4.0 * self.batch * self.heads * self.seqlen_q * self.seqlen_k * self.hdim
        return f / 2 if self.causal else f


class Impl:
    def __init__(self, key, family, dtype, elem, run, output, info=None):
        self.key, self.family, self.dtype, self.elem = key, family, dtype, elem
        self.run, self.output, self.info = run, output, info or {}
        self.rec = {"impl": family, "dtype": dtype, **self.info}


TORCH_DT = {"f16": "float16", "bf16": "bfloat16", "f32": "float32"}


def make_ours(C, lib, torch, dt, inputs, sh: Shape, args) -> Impl:
    """fa_forward_kvcache (decode) or fa_forward (prefill) on ctypes structs built once over
    torch's CPU tensors."""
    decode = args.mode == "decode"
    tdt = getattr(torch, TORCH_DT[dt])
    fdt = {"f16": C.FA_F16, "bf16": C.FA_BF16, "f32": C.FA_F32}[dt]
    q = inputs["q32"].to(tdt).contiguous()           # [B, Sq, H, D]
    k = inputs["k32"].to(tdt).contiguous()           # [B, Sk, HKV, D]
    v = inputs["v32"].to(tdt).contiguous()
    out = torch.empty_like(q)

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
    params = C.FaParams()
    lib.dll.fa_params_init(ctypes.byref(params))
    params.backend = C.FA_BACKEND_CPU
    params.strict = 1
    params.num_splits = args.splits
    info = C.FaRunInfo()
    lib.dll.fa_run_info_init(ctypes.byref(info))
    if decode:
        lse = torch.empty(sh.batch, sh.heads, 1, dtype=torch.float32)
        lens = torch.full((sh.batch,), sh.seqlen_k, dtype=torch.int32)
        tl, tc = tensor(lse, C.FA_F32), tensor(lens, C.FA_I32)
        params.return_lse = 1
        kv = C.FaKvcacheArgs()
        lib.dll.fa_kvcache_args_init(ctypes.byref(kv))
        kv.cache_seqlens = ctypes.pointer(tc)
        name, f = "fa_forward_kvcache", lib.dll.fa_forward_kvcache
        refs = [ctypes.byref(x) for x in (params, tq, tk, tv, kv, to, tl, info)]
        keep = (lse, lens, tl, tc, kv)
    else:
        params.causal = sh.causal
        name, f = "fa_forward", lib.dll.fa_forward
        refs = [ctypes.byref(x) for x in (params, tq, tk, tv, to)] + [None, ctypes.byref(info)]
        keep = ()

    def call_once():
        st = f(*refs)
        if st != C.FA_OK:
            raise RuntimeError(f"{name}: {lib.status_name(st)}: {lib.last_error()}")

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
                raise RuntimeError(f"{name}: {lib.status_name(st)}: {lib.last_error()}")
        return (time.perf_counter() - t0) * 1e3 / calls

    impl = Impl(f"ours_{dt}", "ours", dt, ELEM[dt], run, lambda: out.float(), meta)
    impl.keep = (q, k, v, out, workspace, tq, tk, tv, to, params, info, refs, keep)
    return impl


def make_ggml(gg, torch, inputs, sh: Shape, threads) -> Impl:
    """ggml_flash_attn_ext over f32 q (the f16-rounded values) and f16 K/V in our layout."""
    B, Sq, Sk, H, HKV, D = sh.batch, sh.seqlen_q, sh.seqlen_k, sh.heads, sh.kv_heads, sh.hdim
    q = inputs["q32"].to(torch.float16).float().contiguous()
    k = inputs["k32"].to(torch.float16).contiguous()
    v = inputs["v32"].to(torch.float16).contiguous()
    err = ctypes.create_string_buffer(512)
    p = gg.dll.ga_create(D, H, HKV, Sq, Sk, B, sh.causal, threads, q.data_ptr(), k.data_ptr(),
                         v.data_ptr(), err, len(err))
    if not p:
        raise RuntimeError(f"ga_create: {err.value.decode()}")
    out = torch.empty(B, Sq, H, D, dtype=torch.float32)

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
    impl = Impl("ggml_f16", "ggml", "f16", 2, run, output,
                {"q_dtype": "f32", "mask": "f16 causal" if sh.causal else "none"})
    impl.keep = (q, k, v, out)
    impl.close = lambda: gg.dll.ga_destroy(p)
    return impl


def make_torch(torch, dt, inputs, sh: Shape) -> Impl:
    """SDPA on [B, H, Sq, D] q and contiguous [B, HKV, Sk, D] K/V, flash backend where it runs."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    tdt = getattr(torch, TORCH_DT[dt])
    q = inputs["q32"].to(tdt).transpose(1, 2).contiguous()   # [B, H, Sq, D]
    k = inputs["k32"].to(tdt).transpose(1, 2).contiguous()   # [B, HKV, Sk, D]
    v = inputs["v32"].to(tdt).transpose(1, 2).contiguous()
    gqa = sh.kv_heads != sh.heads
    causal = bool(sh.causal)
    state = {"out": None, "backend": "FLASH_ATTENTION", "flash": True}

    def sdpa():
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

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
                {"sdpa_backend": state["backend"], "enable_gqa": gqa, "is_causal": causal})
    impl.keep = (q, k, v)
    return impl


# ---------------------------------------------------------------------------------------------
# One shape

def ref_rows(torch, seqlen_q: int, most: int):
    """The query rows the reference covers: all, or `most` evenly spaced with the first and
    last."""
    if seqlen_q <= most:
        return torch.arange(seqlen_q)
    return torch.linspace(0, seqlen_q - 1, most).round().long().unique()


def reference(torch, q32, k32, v32, dt, rows, causal: int):
    """Attention in f32 over inputs rounded to dt, for query rows `rows`: [B, len(rows), H, D].
    Causal: row i sees keys j <= i + seqlen_k - seqlen_q."""
    tdt = getattr(torch, TORCH_DT[dt])
    q, k, v = (t.to(tdt).float() for t in (q32[:, rows], k32, v32))
    B, R, H, D = q.shape
    Sq, Sk, HKV = q32.shape[1], k.shape[1], k.shape[2]
    g = H // HKV
    qh = q.view(B, R, HKV, g, D)                      # query heads of one K/V head together
    s = torch.einsum("brhgd,bshd->bhgrs", qh, k) / D ** 0.5
    if causal:
        hidden = torch.arange(Sk)[None, :] > rows[:, None] + (Sk - Sq)     # [R, Sk]
        s = s.masked_fill(hidden, float("-inf"))
    p = torch.softmax(s, dim=-1)
    o = torch.einsum("bhgrs,bshd->brhgd", p, v)
    return o.reshape(B, R, H, D).float()


def check(torch, impl: Impl, ref, rows, tol: float) -> dict:
    o = impl.output()[:, rows]
    finite = bool(torch.isfinite(o).all().item())
    d = (o - ref).double()
    rel = (torch.linalg.vector_norm(d) / torch.linalg.vector_norm(ref.double())).item()
    ok = finite and rel <= tol
    return {"rel_l2": rel if finite else float("nan"), "finite": finite, "ok": ok,
            "rows_checked": len(rows)}


def time_shape(impls: list, args) -> None:
    """The module docstring's protocol over impls (warm-up done by their makers)."""
    least = 2 if args.mode == "decode" else 1
    t_end = time.perf_counter() + args.settle_ms / 1e3
    while True:
        for im in impls:
            im.run(1)
        if time.perf_counter() >= t_end:
            break
    for im in impls:
        est = im.run(least)
        im.rec["calls"] = max(least, min(args.max_calls, int(args.rep_ms / max(est, 1e-3))))
    for rd in range(args.rounds):
        k = rd % len(impls)
        for im in impls[k:] + impls[:k]:
            im.rec.setdefault("ms_rounds", []).append(im.run(im.rec["calls"]))
    for im in impls:
        im.rec["ms"] = statistics.median(im.rec["ms_rounds"])


def run_shape(ctx, sh: Shape, args) -> tuple[dict, list[str]]:
    torch, C, lib, gg = ctx["torch"], ctx["C"], ctx["lib"], ctx["ggml"]
    B, Sq, Sk, H, HKV, D = sh.batch, sh.seqlen_q, sh.seqlen_k, sh.heads, sh.kv_heads, sh.hdim
    decode = args.mode == "decode"
    seed = args.seed + 7919 * Sk + 131 * HKV + (0 if decode else 17 * D)
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape):
        x = torch.randn(*shape, generator=gen)
        return torch.where(x == 0, torch.full_like(x, 0.5), x)  # no zeros a kernel could skip

    inputs = {"q32": randn(B, Sq, H, D), "k32": randn(B, Sk, HKV, D), "v32": randn(B, Sk, HKV, D)}
    rec = {"batch": B, "seqlen_q": Sq, "cache" if decode else "seqlen_k": Sk, "heads": H,
           "kv_heads": HKV, "hdim": D, "impls": {}}
    if decode:
        rec["kv_mib"] = 2 * B * Sk * HKV * D * 2 / 2 ** 20
    else:
        rec["causal"] = sh.causal
        rec["flop"] = sh.flop()
    rows = ref_rows(torch, Sq, args.ref_rows)
    problems, impls = [], []
    makers = [(f"ours_{dt}", lambda dt=dt: make_ours(C, lib, torch, dt, inputs, sh, args))
              for dt in args.dtypes]
    makers.append(("ggml_f16", lambda: make_ggml(gg, torch, inputs, sh, args.threads)))
    makers += [(f"torch_{dt}", lambda dt=dt: make_torch(torch, dt, inputs, sh))
               for dt in args.torch_dtypes]
    refs = {}
    label = (f"{H}/{HKV} heads, cache {Sk}" if decode else
             f"{H}/{HKV} heads, hdim {D}, seqlen {Sq}, {'causal' if sh.causal else 'not causal'}")
    for key, make in makers:
        try:
            im = make()
        except Exception as e:  # noqa: BLE001 (reported; the others still run)
            rec["impls"][key] = {"error": " ".join(str(e).split())[:500]}
            problems.append(f"{label}: {key}: {rec['impls'][key]['error']}")
            continue
        ref_dt = "f16" if im.family == "ggml" else im.dtype
        if ref_dt not in refs:
            refs[ref_dt] = reference(torch, inputs["q32"], inputs["k32"], inputs["v32"], ref_dt,
                                     rows, sh.causal)
        tol = args.tol if im.family == "ours" else args.peer_tol
        im.rec["check"] = check(torch, im, refs[ref_dt], rows, tol)
        if not im.rec["check"]["ok"]:
            problems.append(f"{label}: {key}: output differs from the f32 reference "
                            f"(rel L2 {im.rec['check']['rel_l2']:.3g} > {tol})")
        rec["impls"][key] = im.rec
        impls.append(im)
    refs.clear()
    try:
        time_shape(impls, args)
    except Exception as e:  # noqa: BLE001
        problems.append(f"{label}: timing: {' '.join(str(e).split())[:500]}")
        for im in impls:
            im.rec.setdefault("error", str(e)[:500])
    for im in impls:
        if "ms" in im.rec:
            if decode:
                kv_bytes = 2 * B * Sk * HKV * D * im.elem
                im.rec["kv_bytes"] = kv_bytes
                im.rec["gbs"] = kv_bytes / (im.rec["ms"] * 1e-3) / 1e9
            else:
                im.rec["gflops"] = sh.flop() / (im.rec["ms"] * 1e-3) / 1e9
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
    """Decode: one row per shape, ms and GB/s of each, then the ratios (> 1 = ours faster)."""
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
        row += ratio_cells(ms, ours, torches)
        rows.append(row)
    print_rows(cols, rows)
    print("ratios: a peer's ms / ours (> 1 = ours faster); /ggml against ggml f16, /torch against "
          "torch's fastest dtype of the row" + ("; %bw: GB/s over the read probe's median" if bw
                                               else ""))


def ratio_cells(ms, ours: list, torches: list) -> list:
    """A row's ratios: ggml's ms over each of ours, then torch's fastest dtype's over each."""
    torch_best = min((ms(k) for k in torches if ms(k)), default=None)
    cells = []
    for peer in (ms("ggml_f16"), torch_best):
        for key in ours:
            cells.append(f"{peer / ms(key):.2f}" if peer and ms(key) else "n/a")
    return cells


def print_rows(cols: list, rows: list) -> None:
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    print("  ".join(c.rjust(w) for c, w in zip(cols, widths)))
    for r in rows:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))


def print_table_prefill(results: list, args, peak: float | None) -> None:
    """Prefill: one row per shape, ms and GFLOP/s of each, then the ratios (> 1 = ours faster)."""
    ours = [f"ours_{dt}" for dt in args.dtypes]
    torches = [f"torch_{dt}" for dt in args.torch_dtypes]
    cols = ["heads", "hdim", "seqlen", "causal"]
    for key in ours + ["ggml_f16"] + torches:
        cols += [f"{key} ms", "GFLOP/s"]
    if peak:
        cols += [f"{k.split('_')[1]} %peak" for k in ours]
    cols += [f"{k.split('_')[1]} /ggml" for k in ours] + [f"{k.split('_')[1]} /torch" for k in ours]
    rows = []
    for r in results:
        im = r["impls"]
        row = [f"{r['heads']}/{r['kv_heads']}", str(r["hdim"]), str(r["seqlen_q"]),
               str(r["causal"])]

        def ms(key, im=im):
            return im.get(key, {}).get("ms")

        for key in ours + ["ggml_f16"] + torches:
            m, g = ms(key), im.get(key, {}).get("gflops")
            row += [f"{m:.2f}" if m else "n/a", f"{g:.1f}" if g else "n/a"]
        if peak:
            for key in ours:
                g = im.get(key, {}).get("gflops")
                row.append(f"{100 * g / peak:.0f}%" if g else "n/a")
        row += ratio_cells(ms, ours, torches)
        rows.append(row)
    print_rows(cols, rows)
    print("GFLOP/s: 4*batch*heads*seqlen_q*seqlen_k*hdim per call, halved when causal. ratios: a "
          "peer's ms / ours (> 1 = ours faster); /ggml against ggml (f32 q, f16 K/V), /torch "
          "against torch's fastest dtype of the row"
          + ("; %peak: GFLOP/s over the FMA probe's median" if peak else ""))


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
    decode = args.mode == "decode"
    probe_name = "cpu-read-bw" if decode else "cpu-fma-peak"
    try:
        probe_prog = find_probe(args, lib.path, probe_name)
    except PeerUnavailable as e:
        log(f"no {probe_name} probe: {e}")
        probe_prog = None
    B, H = args.batch, args.heads
    if decode:
        quick = [(h, s, d) for h, s in QUICK["decode"] for d in args.hdims]
        full = [(h, s, d) for d in args.hdims for h in args.kv_heads for s in args.seqlens]
        shapes = [Shape(B, 1, s, H, h, d, 0) for h, s, d in (quick if args.quick else full)]
    else:
        quick = [(h, d, s, c) for h in args.kv_heads for d, s, c in QUICK["prefill"]]
        full = [(h, d, s, c) for h in args.kv_heads for d in args.hdims for s in args.seqlens
                for c in args.causal]
        shapes = [Shape(B, s, s, H, h, d, c) for h, d, s, c in (quick if args.quick else full)]

    log(f"cpu: {meta['cpu']} ({meta['logical_cpus']} logical CPUs), threads {args.threads}, "
        f"torch {meta['torch']} ({meta['torch_cpu_capability']})")
    log(f"date {meta['date']}, commit {meta['commit']}, libflashattn {meta['library']['version']}"
        f", ggml {meta['ggml']} (llama-cpp-python {LLAMA_CPP_PYTHON} sdist)")
    log(f"OpenMP runtime(s) in this process: {', '.join(meta['openmp_runtimes']) or 'none'}")
    doc = {"meta": meta, "mode": args.mode, "args": {k: v for k, v in vars(args).items()},
           "read_bw" if decode else "fma_peak": [], "results": [], "problems": []}

    def save():
        if args.json:
            with open(args.json, "w") as f:
                json.dump(doc, f, indent=1)

    def probe(when):
        if not probe_prog:
            return
        if decode:
            r = read_bw(probe_prog, args.threads, args.read_bw_mib)
            r["when"] = when
            doc["read_bw"].append(r)
            if "error" in r:
                log(f"read bandwidth ({when}): {r['error']}")
            else:
                log(f"read bandwidth ({when}, cpu-read-bw, {args.threads} threads, {r['mib']} MiB, "
                    f"{r['isa']}): best {r['best_gbs']:.1f} GB/s, median {r['median_gbs']:.1f} "
                    f"GB/s (last-level cache {r['llc_mib']:.0f} MiB)")
        else:
            r = fma_peak(probe_prog)
            r["when"] = when
            doc["fma_peak"].append(r)
            if "error" in r:
                log(f"FMA peak ({when}): {r['error']}")
            else:
                log(f"FMA peak ({when}, cpu-fma-peak, {r['threads']} threads, {r['isa']}): "
                    f"{r['gflops']:.1f} GFLOP/s fp32")

    probe("before")
    for sh in shapes:
        if decode:
            log(f"shape: batch {sh.batch}, cache {sh.seqlen_k}, heads {sh.heads}/{sh.kv_heads}, "
                f"hdim {sh.hdim} ...")
        else:
            log(f"shape: batch {sh.batch}, seqlen {sh.seqlen_q}, heads {sh.heads}/{sh.kv_heads}, "
                f"hdim {sh.hdim}, {'causal' if sh.causal else 'not causal'}, "
                f"{sh.flop() / 1e9:.2f} GFLOP ...")
        rec, problems = run_shape({"torch": torch, "C": C, "lib": lib, "ggml": gg}, sh, args)
        doc["results"].append(rec)
        doc["problems"] += problems
        for p in problems:
            log(f"  PROBLEM: {p}")
        for key, r in rec["impls"].items():
            if "ms" in r:
                extra = r.get("kernel") or r.get("sdpa_backend") or \
                    f"q {r.get('q_dtype')}, mask {r.get('mask')}"
                rate = f"{r['gbs']:7.2f} GB/s" if decode else f"{r['gflops']:7.1f} GFLOP/s"
                log(f"  {key:11s} {r['ms']:9.3f} ms {rate}  rel L2 "
                    f"{r['check']['rel_l2']:.1e}  {extra}")
        save()
    probe("after")
    print()
    if decode:
        meds = [r["median_gbs"] for r in doc["read_bw"] if "median_gbs" in r]
        bw = statistics.median(meds) if meds else None
        log(f"CPU decode, same run: {meta['cpu']}, {args.threads} threads, {meta['date']}, commit "
            f"{meta['commit']}, ggml {meta['ggml']}, torch {meta['torch']}"
            + (f", read probe {bw:.1f} GB/s" if bw else ""))
        print_table(doc["results"], args, bw)
    else:
        peaks = [r["gflops"] for r in doc["fma_peak"] if "gflops" in r]
        peak = statistics.median(peaks) if peaks else None
        log(f"CPU prefill, same run: {meta['cpu']}, {args.threads} threads, {meta['date']}, "
            f"commit {meta['commit']}, ggml {meta['ggml']}, torch {meta['torch']}"
            + (f", FMA probe {peak:.1f} GFLOP/s" if peak else ""))
        print_table_prefill(doc["results"], args, peak)
    save()
    if doc["problems"]:
        log(f"\n{len(doc['problems'])} problem(s):")
        for p in doc["problems"]:
            log(f"  {p}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
