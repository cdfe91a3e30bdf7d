#!/usr/bin/env python3
"""cpu_peers.py: CPU attention of flashattn-c against ggml and PyTorch in one run: decode, prefill
(forward and backward).

Two modes (--mode); in either the implementations run in one Python process on the same CPU
threads (--threads, default 2), in alternation, on the same input values. --peers (default
ggml,torch) names the peers timed besides ours: without ggml, ggml is neither downloaded nor
built and the table and the JSON have no ggml columns or ratios (the output's header says so),
which is how a machine with no network and no ggml build runs it (--peers torch).

- decode (the default): one query token per sequence over a full KV cache, head dim 128, 32 query
  heads over 32 K/V heads (MHA) and over 8 (GQA), caches of 4096, 8192, 16384 and 32768 keys,
  batch 1, no mask, each on both cache layouts (--layouts): token-major, [batch, keys, kv_heads,
  dim] in memory (llama.cpp's cache), and head-major, [batch, kv_heads, keys, dim] (a PyTorch or
  Hugging Face cache). Ours and ggml read the cache in the row's layout (ggml's decode path is 4-5x
  faster on head-major); torch's SDPA takes head-major K/V in both rows. Reported: ms, and GB/s of
  the K and V a call must read.
- prefill: seqlen_q = seqlen_k (--seqlens, default 1024 and 4096), head dims 64 and 128
  (--hdims), 8 query heads over 8 K/V heads (MHA; --kv-heads adds GQA), batch 1, not causal and
  causal (--causal). Reported: ms, and GFLOP/s = 4 * batch * heads * seqlen_q * seqlen_k *
  head_dim / time, halved when causal (the FlashAttention papers' count, which FlashAttention's
  benchmarks and fa-bench use; a causal square has (seqlen + 1) / (2 * seqlen) of the pairs, 0.1%
  more than half at 1024). --pass fwd,bwd adds the backward (default fwd): a row per shape and
  pass, the backward's FLOPs 2.5x the forward's (the project's count, as fa-bench's). ggml has no
  backward: its columns are empty ("-") on the backward's rows and it is not run there.

torch is imported first: in its Linux wheels its OpenMP runtime is a libgomp.so.1, which the
library and ggml (both built with GCC's OpenMP) then bind to as well, so one thread team serves all
three (the run prints the runtimes it mapped). The inputs are standard-normal f32 draws (no zeros)
rounded to each implementation's dtype; each implementation holds its own copy in its own layout,
so none reads another's cache lines.

- ours: the library's C API through ctypes (the struct mirror of python/flashattn/_capi.py),
  backend cpu with strict, q, K, V and out in one dtype of --dtypes (f16, bf16, f32), a caller
  workspace sized by the first call's run report. Decode: fa_forward_kvcache, q [batch, 1, heads,
  128], caches [batch, cache, kv_heads, 128] (head-major: the transposed view of a contiguous
  [batch, kv_heads, cache, 128]), cache_seqlens = cache, lse f32; default f16 and bf16. Prefill: fa_forward, q and out [batch, seqlen, heads, dim], K and V [batch, seqlen,
  kv_heads, dim], params.causal when causal (aligned bottom-right, which is top-left when seqlen_q
  = seqlen_k), no lse (return_lse 0, lse NULL: an inference prefill, which is what the peers
  produce); default f16, bf16 and f32. Timed: one call (validation, dispatch, the kernel), the
  tensor structs built beforehand; nothing is allocated inside it. Backward: fa_backward with q,
  K, V, dout and dq, dK, dV in that dtype (the gradients preallocated), out and the f32 lse of one
  untimed fa_forward (return_lse 1) of the same inputs, params.causal as in the forward, num_splits
  0 (a forward knob), its own caller workspace sized by its first call's run report. The run
  report's kernel name of every call is recorded (its ISA is the CPU backend's choice, or the one
  FA_CPU_ISA forces, e.g. avx512bf16 or amx; FA_CPU_ISA is recorded too). OMP_NUM_THREADS =
  --threads is set before any library is loaded.
- ggml: ggml_flash_attn_ext on ggml's CPU backend, built by this script outside the repository
  (--workdir) from the llama-cpp-python source distribution pinned below (LLAMA_CPP_PYTHON,
  which vendors llama.cpp and its ggml), with GGML_NATIVE=ON, OpenMP, Release, no GPU backend;
  bench/ggml_attn.c (ours) is compiled against it into a shared library. q is f32 holding the
  f16-rounded values (ggml's CPU flash attention takes q as f32: its decode path rounds it to f16
  itself, its tiled path computes in f32), K and V f16 in the same layout as ours (token-major:
  llama.cpp's KV cache layout, viewed as llama.cpp views it; head-major: a plain ggml tensor
  [dim, keys, kv_heads, batch]), out f32. Timed: one ggml_graph_compute of the
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
  output. Backward: q, K and V with requires_grad, one untimed forward (the same backend) builds
  the graph; timed: one torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), the backward
  alone (it returns new dq, dK, dV, so no .grad accumulates between calls, and the forward is
  outside the timed region).

Timing (as bench/peer_run.py on the GPU): per shape (and pass) each implementation is called once
untimed (and its output checked against an f32 reference computed from the same rounded inputs:
relative L2 error at most --tol for ours, --peer-tol for the peers, whose looser bound still catches
a peer that computes something else; in decode ggml's CPU kernel accumulates softmax(QK)V in f16
when V is f16, which costs it about 2.7e-2 over 32k keys on one thread; in prefill the reference and
the check cover at most --ref-rows query rows, evenly spaced with the first and the last, every
head, causal mask included; in the backward each of dq, dK and dV is held to the same bound against
a float64 reference from the same rounded q, K, V and dout, dq on those query rows, dK and dV on the
keys of the same positions, summed over every query row), then all of them in turn for --settle-ms
(at least one turn), then each once more (twice in decode) for an estimate of its call's time, then
--rounds rounds whose order rotates by one each round; in a round an implementation runs `calls`
calls back to back (about --rep-ms; at least two in decode, one in prefill) and its time is the wall
clock over `calls`; the median of its rounds counts. Decode GB/s counts the K and V bytes a call
must read (2 * batch * cache * kv_heads * 128 * element size), once. A probe runs before and after
the shapes with the same thread count: in decode cpu-read-bw (bench/cpu_read_bw.c), the
streaming-read rate, so the decode GB/s can be read as a fraction of it (a cache whose K+V fits in
the last-level cache can exceed it); in prefill cpu-fma-peak (bench/cpu_fma_peak.c), the fp32 FMA
rate of 512-bit vectors, the ceiling the CPU backend's GFLOP/s is quoted against (%peak: over the
median of the two).

Output: the machine, the table (decode: ms and GB/s of each; prefill: ms and GFLOP/s of each, a
pass column with --pass bwd; then ours / ggml and ours / torch's fastest dtype, a peer's ms over
ours, > 1 = ours faster), the kernels of ours' run reports, and, with --json FILE, everything
(metadata, every round, the checks, each call's kernel).
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
import textwrap
import time
import typing

# The CPUs this process may run on, read before any OpenMP runtime starts: with OMP_PROC_BIND set,
# the runtime pins this (the initial) thread to one CPU, and a child process inherits that mask, so
# a probe started later would run all its threads on one CPU (on a 16-core host the FMA probe read
# 159 GFLOP/s against the 1,260 it reads on its own).
START_CPUS = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None

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
PEERS = ["ggml", "torch"]
PASSES = ["fwd", "bwd"]
LAYOUTS = ["token", "head"]
BWD_FLOP = 2.5  # the backward's FLOPs over the forward's (the FlashAttention papers', fa-bench's)


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


def choice_list(choices: list[str]):
    """A comma-separated, non-empty subset of choices, in choices' order."""
    def parse(s: str) -> list[str]:
        out = {x.strip() for x in s.split(",") if x.strip()}
        if not out or out - set(choices):
            raise argparse.ArgumentTypeError(f"'{s}': takes one or more of {','.join(choices)}")
        return [c for c in choices if c in out]
    return parse


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description="Time CPU decode or prefill attention: flashattn-c (C API) against ggml's "
                    "ggml_flash_attn_ext and PyTorch SDPA, in one process, in alternation.",
        epilog="Defaults marked decode/prefill depend on --mode. Exit status 1 when a call or an "
               "output check failed, 2 when a peer cannot be built or loaded.")
    ap.add_argument("--mode", choices=["decode", "prefill"], default="decode",
                    help="decode: one query token over a KV cache (the default); prefill: "
                         "seqlen_q = seqlen_k, causal and not")
    ap.add_argument("--peers", type=choice_list(PEERS), default=PEERS,
                    help="peers timed besides ours (default ggml,torch); without ggml it is not "
                         "downloaded or built, and the output has no ggml columns")
    ap.add_argument("--pass", dest="passes", type=choice_list(PASSES), default=["fwd"],
                    help="prefill: fwd, bwd or fwd,bwd (default fwd); bwd times fa_backward "
                         "against torch's SDPA backward (ggml has none)")
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
    ap.add_argument("--layouts", type=choice_list(LAYOUTS), default=LAYOUTS,
                    help="decode: the caches' memory layouts, token ([batch, keys, kv_heads, "
                         "dim]) and head ([batch, kv_heads, keys, dim]); default token,head")
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
                         "spaced (default 512; all rows when there are no more); the backward's "
                         "dK and dV: the same positions' keys")
    ap.add_argument("--tol", type=float, default=2e-2,
                    help="largest relative L2 error of our output against the f32 reference, "
                         "of each of dq, dK, dV against the f64 one (default 2e-2)")
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
    if a.mode == "prefill" and a.layouts != LAYOUTS:
        ap.error("--layouts is a decode option (prefill's K and V are token-major)")
    if a.mode == "decode" and a.passes != ["fwd"]:
        ap.error("--pass is a prefill option (decode times the forward over a KV cache)")
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
        d.ga_create.argtypes = [ctypes.c_int] * 9 + [P, P, P, ctypes.c_char_p, ctypes.c_size_t]
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
    def unpinned():
        os.sched_setaffinity(0, START_CPUS)

    try:
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             check=True, preexec_fn=unpinned if START_CPUS else None).stdout
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
# [batch, seqlen_q, heads, dim]; in the backward the f32 (dq, dK, dV) in the layouts of q, K, V)

class Shape(typing.NamedTuple):
    batch: int
    seqlen_q: int   # 1 in decode
    seqlen_k: int   # the cache in decode
    heads: int
    kv_heads: int
    hdim: int
    causal: int     # 0 in decode
    layout: str = "token"  # decode: the cache's memory layout, "token" or "head"

    def flop(self, pass_: str = "fwd") -> float:
        """4 * batch * heads * seqlen_q * seqlen_k * hdim, halved when causal; BWD_FLOP times
        that for the backward."""
        f = 4.0 * self.batch * self.heads * self.seqlen_q * self.seqlen_k * self.hdim
        f = f / 2 if self.causal else f
        return f * BWD_FLOP if pass_ == "bwd" else f


class Impl:
    def __init__(self, key, family, dtype, elem, run, output, info=None):
        self.key, self.family, self.dtype, self.elem = key, family, dtype, elem
        self.run, self.output, self.info = run, output, info or {}
        self.rec = {"impl": family, "dtype": dtype, **self.info}


TORCH_DT = {"f16": "float16", "bf16": "bfloat16", "f32": "float32"}


def fa_tensor(C, t, dtype):
    """The C API's tensor struct over a CPU torch tensor (its strides in elements)."""
    ft = C.FaTensor()
    ft.data = t.data_ptr()
    ft.device = C.FaDevice(C.FA_DEVICE_CPU, 0)
    ft.dtype = dtype
    ft.ndim = t.dim()
    for i in range(t.dim()):
        ft.shape[i] = t.shape[i]
        ft.strides[i] = t.stride(i)
    return ft


def cpu_params(C, lib, causal: int):
    """fa_params for the strict cpu backend."""
    params = C.FaParams()
    lib.dll.fa_params_init(ctypes.byref(params))
    params.backend = C.FA_BACKEND_CPU
    params.strict = 1
    params.causal = causal
    return params


def api_timer(C, lib, name: str, f, refs):
    """fn(calls) -> ms a call of f(*refs), raising on a status other than FA_OK."""
    def run(calls: int) -> float:
        t0 = time.perf_counter()
        for _ in range(calls):
            st = f(*refs)
            if st != C.FA_OK:
                raise RuntimeError(f"{name}: {lib.status_name(st)}: {lib.last_error()}")
        return (time.perf_counter() - t0) * 1e3 / calls
    return run


def with_workspace(torch, run, params, info):
    """Calls once, so that the run report sizes the caller workspace the timed calls get, then
    once more with it; the workspace (None when the call needs none)."""
    run(1)
    workspace = None
    if info.workspace_bytes:
        workspace = torch.empty(info.workspace_bytes, dtype=torch.uint8)
        params.workspace = workspace.data_ptr()
        params.workspace_size = info.workspace_bytes
    run(1)
    return workspace


def run_report(C, info) -> dict:
    return {"kernel": C.text(info.kernel), "num_splits": info.num_splits,
            "workspace_bytes": info.workspace_bytes, "fell_back": info.fell_back}


def cache_layout(t, layout: str):
    """A [B, Sk, HKV, D] tensor with the memory of the layout: token-major contiguous, head-major
    the transposed view of a contiguous [B, HKV, Sk, D]."""
    if layout == "head":
        return t.transpose(1, 2).contiguous().transpose(1, 2)
    return t.contiguous()


def make_ours(C, lib, torch, dt, inputs, sh: Shape, args) -> Impl:
    """fa_forward_kvcache (decode) or fa_forward (prefill) on ctypes structs built once over
    torch's CPU tensors."""
    decode = args.mode == "decode"
    tdt = getattr(torch, TORCH_DT[dt])
    fdt = {"f16": C.FA_F16, "bf16": C.FA_BF16, "f32": C.FA_F32}[dt]
    q = inputs["q32"].to(tdt).contiguous()           # [B, Sq, H, D]
    k, v = (cache_layout(inputs[n].to(tdt), sh.layout) for n in ("k32", "v32"))  # [B, Sk, HKV, D]
    out = torch.empty_like(q)
    tq, tk, tv, to = (fa_tensor(C, t, fdt) for t in (q, k, v, out))
    params = cpu_params(C, lib, sh.causal)
    params.num_splits = args.splits
    info = C.FaRunInfo()
    lib.dll.fa_run_info_init(ctypes.byref(info))
    if decode:
        lse = torch.empty(sh.batch, sh.heads, 1, dtype=torch.float32)
        lens = torch.full((sh.batch,), sh.seqlen_k, dtype=torch.int32)
        tl, tc = fa_tensor(C, lse, C.FA_F32), fa_tensor(C, lens, C.FA_I32)
        params.return_lse = 1
        kv = C.FaKvcacheArgs()
        lib.dll.fa_kvcache_args_init(ctypes.byref(kv))
        kv.cache_seqlens = ctypes.pointer(tc)
        name, f = "fa_forward_kvcache", lib.dll.fa_forward_kvcache
        refs = [ctypes.byref(x) for x in (params, tq, tk, tv, kv, to, tl, info)]
        keep = (lse, lens, tl, tc, kv)
    else:
        name, f = "fa_forward", lib.dll.fa_forward
        refs = [ctypes.byref(x) for x in (params, tq, tk, tv, to)] + [None, ctypes.byref(info)]
        keep = ()
    run = api_timer(C, lib, name, f, refs)
    workspace = with_workspace(torch, run, params, info)
    impl = Impl(f"ours_{dt}", "ours", dt, ELEM[dt], run, lambda: out.float(), run_report(C, info))
    impl.keep = (q, k, v, out, workspace, tq, tk, tv, to, params, info, refs, keep)
    return impl


def make_ours_bwd(C, lib, torch, dt, inputs, sh: Shape) -> Impl:
    """fa_backward on out and lse of one untimed fa_forward, dq, dK, dV preallocated."""
    tdt = getattr(torch, TORCH_DT[dt])
    fdt = {"f16": C.FA_F16, "bf16": C.FA_BF16, "f32": C.FA_F32}[dt]
    q, k, v, dout = (inputs[n].to(tdt).contiguous() for n in ("q32", "k32", "v32", "do32"))
    out = torch.empty_like(q)
    lse = torch.empty(sh.batch, sh.heads, sh.seqlen_q, dtype=torch.float32)
    dq, dk, dv = (torch.empty_like(t) for t in (q, k, v))
    ts = [fa_tensor(C, t, fdt) for t in (q, k, v, out)]
    tl = fa_tensor(C, lse, C.FA_F32)
    tg = [fa_tensor(C, t, fdt) for t in (dout, dq, dk, dv)]
    params = cpu_params(C, lib, sh.causal)
    params.return_lse = 1
    fwd_refs = [ctypes.byref(x) for x in [params] + ts + [tl]] + [None]
    api_timer(C, lib, "fa_forward", lib.dll.fa_forward, fwd_refs)(1)  # out, lse: untimed
    info = C.FaRunInfo()
    lib.dll.fa_run_info_init(ctypes.byref(info))
    refs = [ctypes.byref(x) for x in [params] + ts + [tl] + tg + [info]]
    run = api_timer(C, lib, "fa_backward", lib.dll.fa_backward, refs)
    workspace = with_workspace(torch, run, params, info)
    impl = Impl(f"ours_{dt}", "ours", dt, ELEM[dt], run,
                lambda: (dq.float(), dk.float(), dv.float()), run_report(C, info))
    impl.keep = (q, k, v, dout, out, lse, dq, dk, dv, workspace, ts, tl, tg, params, info, refs)
    return impl


def make_ggml(gg, torch, inputs, sh: Shape, threads) -> Impl:
    """ggml_flash_attn_ext over f32 q (the f16-rounded values) and f16 K/V in our layout."""
    B, Sq, Sk, H, HKV, D = sh.batch, sh.seqlen_q, sh.seqlen_k, sh.heads, sh.kv_heads, sh.hdim
    q = inputs["q32"].to(torch.float16).float().contiguous()
    head_major = sh.layout == "head"
    k, v = (cache_layout(inputs[n].to(torch.float16), sh.layout) for n in ("k32", "v32"))
    err = ctypes.create_string_buffer(512)
    p = gg.dll.ga_create(D, H, HKV, Sq, Sk, B, sh.causal, int(head_major), threads, q.data_ptr(),
                         k.data_ptr(), v.data_ptr(), err, len(err))
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
                {"q_dtype": "f32", "mask": "f16 causal" if sh.causal else "none",
                 "kv_layout": "head-major" if head_major else "token-major"})
    impl.keep = (q, k, v, out)
    impl.close = lambda: gg.dll.ga_destroy(p)
    return impl


def make_torch(torch, dt, inputs, sh: Shape, pass_: str) -> Impl:
    """SDPA on [B, H, Sq, D] q and contiguous [B, HKV, Sk, D] K/V, flash backend where it runs;
    the backward: torch.autograd.grad over the graph of one untimed forward."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    bwd = pass_ == "bwd"
    tdt = getattr(torch, TORCH_DT[dt])
    q = inputs["q32"].to(tdt).transpose(1, 2).contiguous()   # [B, H, Sq, D]
    k = inputs["k32"].to(tdt).transpose(1, 2).contiguous()   # [B, HKV, Sk, D]
    v = inputs["v32"].to(tdt).transpose(1, 2).contiguous()
    for t in (q, k, v):
        t.requires_grad_(bwd)
    gqa = sh.kv_heads != sh.heads
    causal = bool(sh.causal)
    state = {"out": None, "backend": "FLASH_ATTENTION", "flash": True}

    def sdpa():
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

    def cm():
        if state["flash"]:
            return sdpa_kernel(SDPBackend.FLASH_ATTENTION)
        return contextlib.nullcontext()

    def first_forward():  # with grad enabled it records the graph the backward's calls walk
        with torch.set_grad_enabled(bwd), cm():
            return sdpa()

    try:
        state["out"] = first_forward()
    except RuntimeError as e:  # torch's flash kernel refuses: its default choice is timed
        state["flash"] = False
        state["backend"] = f"default (flash refused: {' '.join(str(e).split())[:200]})"
        state["out"] = first_forward()
    info = {"sdpa_backend": state["backend"], "enable_gqa": gqa, "is_causal": causal}

    if bwd:
        out = state["out"]
        dout = inputs["do32"].to(tdt).transpose(1, 2).contiguous()

        def grads():
            return torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)

        state["grads"] = grads()

        def run(calls: int) -> float:
            t0 = time.perf_counter()
            for _ in range(calls):
                g = grads()
            ms = (time.perf_counter() - t0) * 1e3 / calls
            state["grads"] = g
            return ms

        impl = Impl(f"torch_{dt}", "torch", dt, ELEM[dt], run,
                    lambda: tuple(g.transpose(1, 2).float() for g in state["grads"]), info)
        impl.keep = (q, k, v, out, dout)
        return impl

    def run(calls: int) -> float:
        with torch.no_grad(), cm():
            t0 = time.perf_counter()
            for _ in range(calls):
                o = sdpa()
            ms = (time.perf_counter() - t0) * 1e3 / calls
        state["out"] = o
        return ms

    impl = Impl(f"torch_{dt}", "torch", dt, ELEM[dt], run,
                lambda: state["out"].transpose(1, 2).float(), info)
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
    """Attention in f32 over inputs rounded to dt, for query rows `rows`: {"out": [B, len(rows),
    H, D]}. Causal: row i sees keys j <= i + seqlen_k - seqlen_q."""
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
    return {"out": o.reshape(B, R, H, D).float()}


def reference_bwd(torch, inputs, dt, rows, keys, causal: int) -> dict:
    """The backward in f64 over q, K, V and dout rounded to dt: dq of query rows `rows` [B,
    len(rows), H, D], dK and dV of keys `keys` [B, len(keys), HKV, D] (summed over every query row
    and, under GQA, over the query heads of their K/V head). The query rows go through in chunks
    (a few hundred MB of f64 scores each), so a 4k x 4k shape needs no 4k x 4k matrix per head."""
    tdt = getattr(torch, TORCH_DT[dt])
    q, k, v, do = (inputs[n].to(tdt).double() for n in ("q32", "k32", "v32", "do32"))
    B, Sq, H, D = q.shape
    Sk, HKV = k.shape[1], k.shape[2]
    g, scale = H // HKV, D ** -0.5
    dq = torch.zeros(B, len(rows), H, D, dtype=torch.float64)
    dk = torch.zeros(B, len(keys), HKV, D, dtype=torch.float64)
    dv = torch.zeros_like(dk)
    step = max(1, 2 ** 24 // (B * H * Sk))
    for c0 in range(0, Sq, step):
        c1 = min(Sq, c0 + step)
        qc = q[:, c0:c1].reshape(B, c1 - c0, HKV, g, D)
        doc = do[:, c0:c1].reshape(B, c1 - c0, HKV, g, D)
        s = torch.einsum("brhgd,bshd->bhgrs", qc, k) * scale
        if causal:
            hidden = torch.arange(Sk)[None, :] > torch.arange(c0, c1)[:, None] + (Sk - Sq)
            s.masked_fill_(hidden, float("-inf"))
        p = torch.softmax(s, dim=-1)
        o = torch.einsum("bhgrs,bshd->brhgd", p, v)
        dp = torch.einsum("brhgd,bshd->bhgrs", doc, v)
        delta = (doc * o).sum(-1).permute(0, 2, 3, 1)             # rowsum(dO * O): [B, HKV, g, r]
        ds = p * (dp - delta[..., None])
        mine = (rows >= c0) & (rows < c1)
        if mine.any():
            dsr = ds[:, :, :, rows[mine] - c0]
            dq[:, mine] = (torch.einsum("bhgrs,bshd->brhgd", dsr, k) * scale).reshape(
                B, -1, H, D)
        dk += torch.einsum("bhgrs,brhgd->bshd", ds[..., keys], qc) * scale
        dv += torch.einsum("bhgrs,brhgd->bshd", p[..., keys], doc)
    return {"dq": dq, "dk": dk, "dv": dv}


def check(torch, got: dict, ref: dict, tol: float) -> dict:
    """Relative L2 error of each output against its reference; the largest counts."""
    rels, finite = {}, True
    for name, r in ref.items():
        o = got[name]
        finite = finite and bool(torch.isfinite(o).all().item())
        d = (o - r).double()
        rels[name] = (torch.linalg.vector_norm(d) / torch.linalg.vector_norm(r.double())).item()
    rel = max(rels.values()) if finite else float("nan")
    out = {"rel_l2": rel, "finite": finite, "ok": finite and rel <= tol}
    if len(rels) > 1:
        out["rel_l2_each"] = rels
    return out


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


def shape_inputs(torch, sh: Shape, args) -> dict:
    """The f32 draws of q, K, V (and dout with --pass bwd) every implementation rounds."""
    B, Sq, Sk, H, HKV, D = sh.batch, sh.seqlen_q, sh.seqlen_k, sh.heads, sh.kv_heads, sh.hdim
    seed = args.seed + 7919 * Sk + 131 * HKV + (0 if args.mode == "decode" else 17 * D)
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape):
        x = torch.randn(*shape, generator=gen)
        return torch.where(x == 0, torch.full_like(x, 0.5), x)  # no zeros a kernel could skip

    inputs = {"q32": randn(B, Sq, H, D), "k32": randn(B, Sk, HKV, D), "v32": randn(B, Sk, HKV, D)}
    if "bwd" in args.passes:  # drawn last, so the forward's inputs are those of a forward run
        inputs["do32"] = randn(B, Sq, H, D)
    return inputs


def run_shape(ctx, sh: Shape, args, inputs, pass_: str) -> tuple[dict, list[str]]:
    torch, C, lib, gg = ctx["torch"], ctx["C"], ctx["lib"], ctx["ggml"]
    B, Sq, Sk, H, HKV, D = sh.batch, sh.seqlen_q, sh.seqlen_k, sh.heads, sh.kv_heads, sh.hdim
    decode, bwd = args.mode == "decode", pass_ == "bwd"
    rec = {"batch": B, "seqlen_q": Sq, "cache" if decode else "seqlen_k": Sk, "heads": H,
           "kv_heads": HKV, "hdim": D, "impls": {}}
    if decode:
        rec["layout"] = sh.layout
        rec["kv_mib"] = 2 * B * Sk * HKV * D * 2 / 2 ** 20
    else:
        rec["causal"] = sh.causal
        rec["pass"] = pass_
        rec["flop"] = sh.flop(pass_)
    rows = ref_rows(torch, Sq, args.ref_rows)
    keys = ref_rows(torch, Sk, args.ref_rows)
    problems, impls = [], []
    if bwd:
        makers = [(f"ours_{dt}", lambda dt=dt: make_ours_bwd(C, lib, torch, dt, inputs, sh))
                  for dt in args.dtypes]
    else:
        makers = [(f"ours_{dt}", lambda dt=dt: make_ours(C, lib, torch, dt, inputs, sh, args))
                  for dt in args.dtypes]
        if gg:
            makers.append(("ggml_f16", lambda: make_ggml(gg, torch, inputs, sh, args.threads)))
    if "torch" in args.peers:
        makers += [(f"torch_{dt}", lambda dt=dt: make_torch(torch, dt, inputs, sh, pass_))
                   for dt in args.torch_dtypes]
    refs = {}
    label = (f"{H}/{HKV} heads, cache {Sk}, {sh.layout}-major" if decode else
             f"{H}/{HKV} heads, hdim {D}, seqlen {Sq}, {'causal' if sh.causal else 'not causal'}"
             + (", backward" if bwd else ""))
    for key, make in makers:
        try:
            im = make()
        except Exception as e:  # noqa: BLE001 (reported; the others still run)
            rec["impls"][key] = {"error": " ".join(str(e).split())[:500]}
            problems.append(f"{label}: {key}: {rec['impls'][key]['error']}")
            continue
        ref_dt = "f16" if im.family == "ggml" else im.dtype
        if ref_dt not in refs:
            refs[ref_dt] = (reference_bwd(torch, inputs, ref_dt, rows, keys, sh.causal) if bwd
                            else reference(torch, inputs["q32"], inputs["k32"], inputs["v32"],
                                           ref_dt, rows, sh.causal))
        tol = args.tol if im.family == "ours" else args.peer_tol
        if bwd:
            dq, dk, dv = im.output()
            got = {"dq": dq[:, rows], "dk": dk[:, keys], "dv": dv[:, keys]}
        else:
            got = {"out": im.output()[:, rows]}
        im.rec["check"] = check(torch, got, refs[ref_dt], tol)
        im.rec["check"]["rows_checked"] = len(rows)
        if bwd:
            im.rec["check"]["keys_checked"] = len(keys)
        if not im.rec["check"]["ok"]:
            what = "dq, dK or dV differ from the f64" if bwd else "output differs from the f32"
            problems.append(f"{label}: {key}: {what} reference "
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
                im.rec["gflops"] = sh.flop(pass_) / (im.rec["ms"] * 1e-3) / 1e9
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


def table_keys(args) -> tuple[list, list, list]:
    """The result keys of ours, of ggml and of torch that the run times (none of a peer that
    --peers leaves out)."""
    return ([f"ours_{dt}" for dt in args.dtypes],
            ["ggml_f16"] if "ggml" in args.peers else [],
            [f"torch_{dt}" for dt in args.torch_dtypes] if "torch" in args.peers else [])


def cells(im: dict, key: str, fields: list) -> list:
    """A result's fields formatted: n/a where it failed, - where it did not run (ggml in the
    backward)."""
    if key not in im:
        return ["-"] * len(fields)
    return [fmt.format(im[key][f]) if im[key].get(f) else "n/a" for f, fmt in fields]


def ratio_columns(ours: list, ggml: list, torches: list) -> list:
    return ([f"{k.split('_')[1]} /ggml" for k in ours if ggml]
            + [f"{k.split('_')[1]} /torch" for k in ours if torches])


def ratio_cells(im: dict, ours: list, ggml: list, torches: list) -> list:
    """A row's ratios: ggml's ms over each of ours, then torch's fastest dtype's over each; - where
    the peer did not run."""
    out = []
    for group in (ggml, torches):
        if not group:
            continue
        if not any(k in im for k in group):
            out += ["-"] * len(ours)
            continue
        peer = min((im[k]["ms"] for k in group if im.get(k, {}).get("ms")), default=None)
        for key in ours:
            m = im.get(key, {}).get("ms")
            out.append(f"{peer / m:.2f}" if peer and m else "n/a")
    return out


def ratio_legend(ggml: list, torches: list, ggml_what: str) -> str:
    parts = ([f"/ggml against {ggml_what}"] if ggml else []) + \
        (["/torch against torch's fastest dtype of the row"] if torches else [])
    return "ratios: a peer's ms / ours (> 1 = ours faster); " + ", ".join(parts)


def print_table(results: list, args, bw: float | None) -> None:
    """Decode: one row per shape, ms and GB/s of each, then the ratios (> 1 = ours faster)."""
    ours, ggml, torches = table_keys(args)
    cols = ["heads", "cache", "layout", "K+V MiB"]
    for key in ours + ggml:
        cols += [f"{key} ms", "GB/s"] + (["%bw"] if bw else [])
    cols += [f"{key} ms" for key in torches]
    cols += ratio_columns(ours, ggml, torches)
    rows = []
    for r in results:
        im = r["impls"]
        row = [f"{r['heads']}/{r['kv_heads']}", str(r["cache"]), r["layout"],
               f"{r['kv_mib']:.0f}"]
        for key in ours + ggml:
            row += cells(im, key, [("ms", "{:.3f}"), ("gbs", "{:.1f}")])
            if bw:
                g = im.get(key, {}).get("gbs")
                row.append(f"{100 * g / bw:.0f}%" if g else "n/a")
        for key in torches:
            row += cells(im, key, [("ms", "{:.3f}")])
        row += ratio_cells(im, ours, ggml, torches)
        rows.append(row)
    print_rows(cols, rows)
    print(ratio_legend(ggml, torches, "ggml f16 on the row's layout")
          + ("; %bw: GB/s over the read probe's median" if bw else ""))
    print_kernels(results, ours)


def print_rows(cols: list, rows: list) -> None:
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    print("  ".join(c.rjust(w) for c, w in zip(cols, widths)))
    for r in rows:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))


def print_kernels(results: list, ours: list) -> None:
    """The kernels our calls' run reports named, once each (their ISA is the CPU backend's
    choice, or FA_CPU_ISA's)."""
    names = []
    for r in results:
        for key in ours:
            k = r["impls"].get(key, {}).get("kernel")
            if k and k not in names:
                names.append(k)
    print(textwrap.fill("ours' kernels (run reports): " + (", ".join(names) or "none"),
                        width=100, subsequent_indent="  ", break_on_hyphens=False))


def print_table_prefill(results: list, args, peak: float | None) -> None:
    """Prefill: one row per shape and pass, ms and GFLOP/s of each, then the ratios (> 1 = ours
    faster)."""
    ours, ggml, torches = table_keys(args)
    bwd = "bwd" in args.passes
    cols = ["heads", "hdim", "seqlen", "causal"] + (["pass"] if bwd else [])
    for key in ours + ggml + torches:
        cols += [f"{key} ms", "GFLOP/s"]
    if peak:
        cols += [f"{k.split('_')[1]} %peak" for k in ours]
    cols += ratio_columns(ours, ggml, torches)
    rows = []
    for r in results:
        im = r["impls"]
        row = [f"{r['heads']}/{r['kv_heads']}", str(r["hdim"]), str(r["seqlen_q"]),
               str(r["causal"])] + ([r["pass"]] if bwd else [])
        for key in ours + ggml + torches:
            row += cells(im, key, [("ms", "{:.2f}"), ("gflops", "{:.1f}")])
        if peak:
            for key in ours:
                g = im.get(key, {}).get("gflops")
                row.append(f"{100 * g / peak:.0f}%" if g else "n/a")
        row += ratio_cells(im, ours, ggml, torches)
        rows.append(row)
    print_rows(cols, rows)
    print("GFLOP/s: 4*batch*heads*seqlen_q*seqlen_k*hdim per call, halved when causal"
          + (f", {BWD_FLOP}x that in the backward" if bwd else "") + ". "
          + ratio_legend(ggml, torches, "ggml (f32 q, f16 K/V)")
          + ("; %peak: GFLOP/s over the FMA probe's median" if peak else "")
          + ("; -: not run (ggml has no backward)" if bwd and ggml else ""))
    print_kernels(results, ours)


def peers_note(args) -> str:
    """What --peers leaves out, for the output's header ("" with every peer)."""
    missing = [p for p in PEERS if p not in args.peers]
    if not missing:
        return ""
    return (f"peers: {', '.join(args.peers)} (--peers): no {' or '.join(missing)} columns or "
            f"ratios" + ("; ggml neither downloaded nor built" if "ggml" in missing else ""))


def peer_versions(meta) -> str:
    return (f"ggml {meta['ggml']}, " if "ggml" in meta else "") + f"torch {meta['torch']}"


def run_notes(meta, args) -> str:
    """The header's tail: what --peers left out, a forced FA_CPU_ISA."""
    notes = [n for n in (peers_note(args), meta["fa_cpu_isa"] and
                         f"FA_CPU_ISA={meta['fa_cpu_isa']}") if n]
    return "".join(f"; {n}" for n in notes)


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
            "peers": args.peers, "fa_cpu_isa": os.environ.get("FA_CPU_ISA", "")}
    try:
        import torch  # first: its OpenMP runtime is then the one every implementation shares
    except ImportError as e:
        log(f"peer unavailable: PyTorch: {e}")
        return 2
    torch.set_num_threads(args.threads)
    meta["torch"] = torch.__version__
    meta["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    gg = None
    if "ggml" in args.peers:
        try:
            ggml_build = build_ggml(args.workdir, args.cc)
            gg = Ggml(ggml_build["lib"])
        except PeerUnavailable as e:
            log(f"peer unavailable: ggml: {e}")
            return 2
        meta["llama_cpp_python"] = LLAMA_CPP_PYTHON
        meta["sdist_sha256"] = LLAMA_CPP_PYTHON_SHA256
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
        shapes = [Shape(B, 1, s, H, h, d, 0, lay) for h, s, d in (quick if args.quick else full)
                  for lay in args.layouts]
    else:
        quick = [(h, d, s, c) for h in args.kv_heads for d, s, c in QUICK["prefill"]]
        full = [(h, d, s, c) for h in args.kv_heads for d in args.hdims for s in args.seqlens
                for c in args.causal]
        shapes = [Shape(B, s, s, H, h, d, c) for h, d, s, c in (quick if args.quick else full)]

    log(f"cpu: {meta['cpu']} ({meta['logical_cpus']} logical CPUs), threads {args.threads}, "
        f"torch {meta['torch']} ({meta['torch_cpu_capability']})")
    log(f"date {meta['date']}, commit {meta['commit']}, libflashattn {meta['library']['version']}"
        + (f", ggml {meta['ggml']} (llama-cpp-python {LLAMA_CPP_PYTHON} sdist)" if gg else ""))
    if peers_note(args):
        log(peers_note(args))
    if meta["fa_cpu_isa"]:
        log(f"FA_CPU_ISA={meta['fa_cpu_isa']}: the CPU backend's ISA as forced (our kernels' names "
            f"carry it)")
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
        inputs = shape_inputs(torch, sh, args)
        for pass_ in args.passes:
            if decode:
                log(f"shape: batch {sh.batch}, cache {sh.seqlen_k} ({sh.layout}-major), heads "
                    f"{sh.heads}/{sh.kv_heads}, hdim {sh.hdim} ...")
            else:
                log(f"shape: batch {sh.batch}, seqlen {sh.seqlen_q}, heads {sh.heads}/"
                    f"{sh.kv_heads}, hdim {sh.hdim}, {'causal' if sh.causal else 'not causal'}, "
                    + ("backward, " if pass_ == "bwd" else "")
                    + f"{sh.flop(pass_) / 1e9:.2f} GFLOP ...")
            rec, problems = run_shape({"torch": torch, "C": C, "lib": lib, "ggml": gg}, sh, args,
                                      inputs, pass_)
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
            f"{meta['commit']}, {peer_versions(meta)}"
            + (f", read probe {bw:.1f} GB/s" if bw else "") + run_notes(meta, args))
        print_table(doc["results"], args, bw)
    else:
        peaks = [r["gflops"] for r in doc["fma_peak"] if "gflops" in r]
        peak = statistics.median(peaks) if peaks else None
        log(f"CPU prefill, same run: {meta['cpu']}, {args.threads} threads, {meta['date']}, "
            f"commit {meta['commit']}, {peer_versions(meta)}"
            + (f", FMA probe {peak:.1f} GFLOP/s" if peak else "") + run_notes(meta, args))
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
