#!/usr/bin/env python3
"""peer_cuda.py: flashattn-c against PyTorch SDPA's FlashAttention-2 and cuDNN backends, same run.

Calls build/release/lib/libflashattn.so through ctypes on torch CUDA tensors (their data_ptr()),
and in the same process times torch.nn.functional.scaled_dot_product_attention restricted to
SDPBackend.FLASH_ATTENTION ("FA2") and to SDPBackend.CUDNN_ATTENTION ("cuDNN") on the same inputs.

Sweep (FlashAttention's, and ../shared/ANCHORS.md's): batch * seqlen = 16384 tokens,
heads * head_dim = 2048, head_dim 64/128/256, seqlen 512..16384, causal off and on, bf16,
forward and backward. The backward is timed alone: the forward that produces out/lse (ours) or
the autograd graph (peers) runs once, untimed; then fa_backward / torch.autograd.grad(...,
retain_graph=True) is timed. FLOPs: forward 4*B*H*S*S*D, halved when causal; backward 2.5x the
forward. Time: triton.testing.do_bench, median (it zeroes a 256 MB buffer before each call to
flush the L2). Inputs are not rotated between calls: each of q, k, v, out is 64 MB at these shapes
(16k tokens x 2048 x bf16), about the H200's 60 MB L2, so part of one call's inputs could stay
cached were it not for that flush; the tiles of one (batch, head) are re-read from L2 either way.

Exit status: 0 when every call of ours ran (and, with --check, matched FA2 within a relative L2
error of 2e-2, without NaN/Inf, and named a "cuda." kernel); 1 otherwise. A peer that cannot run a
shape (e.g. cuDNN refusing it) is shown as n/a and does not change the exit status.

Run `python3 bench/peer_cuda.py --help`; bench/README.md has the command lines.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# The ctypes mirror of api/flash_attn.h is the Python binding's (python/flashattn/_capi.py), so
# the two cannot drift apart; FlashAttnLib below still checks at load time that each struct's
# ctypes size equals the size the library's own *_init function writes into struct_size.
sys.path.insert(0, os.path.join(REPO, "python"))
from flashattn import _capi  # noqa: E402
from flashattn._capi import (  # noqa: E402,F401
    FA_BACKEND_AUTO,
    FA_BACKEND_CPU,
    FA_BACKEND_CUDA,
    FA_BACKEND_HIP,
    FA_BACKEND_OPENCL,
    FA_BF16,
    FA_CAUSAL_BOTTOM_RIGHT,
    FA_CAUSAL_TOP_LEFT,
    FA_DEVICE_CPU,
    FA_DEVICE_CUDA,
    FA_DEVICE_HIP,
    FA_DEVICE_OPENCL,
    FA_F16,
    FA_F32,
    FA_I32,
    FA_KERNEL_LEN,
    FA_MAX_DIMS,
    FA_NAME_LEN,
    FA_OK,
    FA_REASON_LEN,
    FaBackendDesc,
    FaDevice,
    FaParams,
    FaRunInfo,
    FaTensor,
    c_enum,
)

FA_STATUS_NAMES = _capi.STATUS_NAMES
FA_BACKEND_COUNT_ = FA_BACKEND_OPENCL + 1  # the header's FA_BACKEND_COUNT_


def _s(b: bytes) -> str:
    return b.decode("utf-8", "replace")


class FaError(RuntimeError):
    """A failed library call: the status name (fa_status_string) and fa_last_error()."""

    def __init__(self, call: str, status: int, status_name: str, message: str):
        super().__init__(f"{call}: {status_name}: {message}")
        self.call, self.status, self.status_name, self.message = call, status, status_name, message


class FlashAttnLib:
    """libflashattn.so through ctypes."""

    def __init__(self, path: str):
        self.path = os.path.abspath(path)  # plugins are looked for beside it: give it an absolute path
        if not os.path.exists(self.path):
            raise FileNotFoundError(
                f"{self.path} not found: build it with `cmake --preset release && "
                f"cmake --build --preset release` or pass --lib"
            )
        d = ctypes.CDLL(self.path)
        self.dll = d
        P = ctypes.POINTER
        T = P(FaTensor)
        sigs = {
            "fa_params_init": (None, [P(FaParams)]),
            "fa_run_info_init": (None, [P(FaRunInfo)]),
            "fa_backend_desc_init": (None, [P(FaBackendDesc)]),
            "fa_forward": (c_enum, [P(FaParams), T, T, T, T, T, P(FaRunInfo)]),
            "fa_backward": (c_enum, [P(FaParams), T, T, T, T, T, T, T, T, T, P(FaRunInfo)]),
            "fa_plan_forward": (c_enum, [P(FaParams), T, T, T, T, T, P(FaRunInfo)]),
            "fa_plan_backward": (c_enum, [P(FaParams), T, T, T, T, T, T, T, T, T, P(FaRunInfo)]),
            "fa_forward_workspace_size": (c_enum, [P(FaParams), T, T, T, T, T, P(ctypes.c_size_t)]),
            "fa_backward_workspace_size": (
                c_enum,
                [P(FaParams), T, T, T, T, T, T, T, T, T, P(ctypes.c_size_t)],
            ),
            "fa_backend_info": (c_enum, [P(FaBackendDesc), ctypes.c_int32, P(ctypes.c_int32)]),
            "fa_backend_name": (ctypes.c_char_p, [ctypes.c_int32]),
            "fa_backend_from_name": (c_enum, [ctypes.c_char_p, P(ctypes.c_int32)]),
            "fa_release": (None, []),
            "fa_last_error": (ctypes.c_char_p, []),
            "fa_status_string": (ctypes.c_char_p, [c_enum]),
            "fa_version": (
                ctypes.c_char_p,
                [P(ctypes.c_int), P(ctypes.c_int), P(ctypes.c_int)],
            ),
        }
        for name, (restype, argtypes) in sigs.items():
            f = getattr(d, name)
            f.restype = restype
            f.argtypes = argtypes
        self._check_struct_sizes()

    # -- struct sizes: the library's *_init writes its own sizeof into struct_size -------------
    def _library_sizeof(self, init, ctype) -> int:
        buf = (ctypes.c_uint8 * 65536)()  # far larger than any version's struct: init may memset it
        init(ctypes.cast(buf, ctypes.POINTER(ctype)))
        return ctypes.c_size_t.from_buffer(buf).value

    def _check_struct_sizes(self) -> None:
        bad = []
        for init, ctype in (
            (self.dll.fa_params_init, FaParams),
            (self.dll.fa_run_info_init, FaRunInfo),
            (self.dll.fa_backend_desc_init, FaBackendDesc),
        ):
            lib_size = self._library_sizeof(init, ctype)
            if lib_size != ctypes.sizeof(ctype):
                bad.append(f"{ctype.__name__}: ctypes {ctypes.sizeof(ctype)} bytes, library {lib_size}")
        tensor_size = 8 + 8 + 8 + 4 + 4 + 8 * FA_MAX_DIMS * 2  # no init function: by the header, LP64
        if ctypes.sizeof(FaTensor) != tensor_size:
            bad.append(f"FaTensor: ctypes {ctypes.sizeof(FaTensor)} bytes, header {tensor_size}")
        if bad:
            raise RuntimeError(
                "ctypes mirror of api/flash_attn.h does not match " + self.path + ": " + "; ".join(bad)
            )

    # -- errors -----------------------------------------------------------------------------------
    def status_name(self, st: int) -> str:
        s = self.dll.fa_status_string(st)
        return _s(s) if s else FA_STATUS_NAMES.get(st, f"status {st}")

    def error(self, call: str, st: int) -> FaError:
        msg = self.dll.fa_last_error()
        return FaError(call, st, self.status_name(st), _s(msg) if msg else "")

    def check(self, call: str, st: int) -> None:
        if st != FA_OK:
            raise self.error(call, st)

    # -- helpers ----------------------------------------------------------------------------------
    def version(self) -> str:
        return _s(self.dll.fa_version(None, None, None))

    def backend_id(self, name: str) -> int:
        i = ctypes.c_int32()
        self.check("fa_backend_from_name", self.dll.fa_backend_from_name(name.encode(), ctypes.byref(i)))
        return i.value

    def backend_info(self) -> list[dict]:
        cap = FA_BACKEND_COUNT_ - 1
        descs = (FaBackendDesc * cap)()
        for i in range(cap):
            self.dll.fa_backend_desc_init(ctypes.byref(descs[i]))
        n = ctypes.c_int32()
        self.check("fa_backend_info", self.dll.fa_backend_info(descs, cap, ctypes.byref(n)))
        out = []
        for i in range(min(cap, n.value)):
            d = descs[i]
            out.append({
                "id": d.id,
                "name": _s(d.name),
                "available": bool(d.available),
                "reason": _s(d.reason),
                "plugin_path": _s(d.plugin_path),
                "device_count": d.device_count,
                "devices": _s(d.devices),
                "arch": _s(d.arch),
                "kernel_families": _s(d.kernel_families),
                "dtypes": _s(d.dtypes),
                "features": _s(d.features),
                "unsupported": _s(d.unsupported),
            })
        return out

    def params(self) -> FaParams:
        p = FaParams()
        self.dll.fa_params_init(ctypes.byref(p))
        assert p.struct_size == ctypes.sizeof(FaParams)
        return p

    def run_info(self) -> FaRunInfo:
        info = FaRunInfo()
        self.dll.fa_run_info_init(ctypes.byref(info))
        assert info.struct_size == ctypes.sizeof(FaRunInfo)
        return info


def info_dict(info: FaRunInfo) -> dict:
    return {
        "backend": _s(info.backend_name),
        "kernel": _s(info.kernel),
        "tile_m": info.tile_m,
        "tile_n": info.tile_n,
        "num_splits": info.num_splits,
        "deterministic": bool(info.deterministic),
        "workspace_bytes": info.workspace_bytes,
        "fell_back": bool(info.fell_back),
        "rejected": _s(info.rejected),
    }


def make_fa_tensor(ptr: int, shape, strides, dtype: int, device_kind: int, device_id: int) -> FaTensor:
    t = FaTensor()
    t.data = ptr
    t.byte_offset = 0
    t.device = FaDevice(device_kind, device_id)
    t.dtype = dtype
    t.ndim = len(shape)
    assert 1 <= t.ndim <= FA_MAX_DIMS
    for i, (n, s) in enumerate(zip(shape, strides)):
        t.shape[i] = int(n)
        t.strides[i] = int(s)
    return t


class Call:
    """One prepared library call (arguments bound once, so a timed call costs one ctypes call)."""

    def __init__(self, lib: FlashAttnLib, name: str, fn, args):
        self.lib, self.name, self.fn, self.args = lib, name, fn, args

    def __call__(self):
        st = self.fn(*self.args)
        if st != FA_OK:
            raise self.lib.error(self.name, st)


# ------------------------------------------------------------------------------------------------
# Torch side (imported after argument parsing, so --help works without torch)
# ------------------------------------------------------------------------------------------------

torch = None
F = None


def torch_fa_tensor(t, device_kind: int, device_id: int) -> FaTensor:
    dtypes = {torch.bfloat16: FA_BF16, torch.float16: FA_F16, torch.float32: FA_F32}
    return make_fa_tensor(t.data_ptr(), t.shape, t.stride(), dtypes[t.dtype], device_kind, device_id)


def flops_fwd(b: int, h: int, s: int, d: int, causal: bool) -> float:
    f = 4.0 * b * h * s * s * d
    return f / 2 if causal else f


def compare(name: str, ours, ref, tol: float) -> dict:
    o = ours.detach().float()
    r = ref.detach().float()
    finite = bool(torch.isfinite(o).all().item())
    diff = o - r
    max_abs = diff.abs().max().item() if finite else float("nan")
    denom = torch.linalg.vector_norm(r).item()
    rel = (torch.linalg.vector_norm(diff).item() / denom) if (finite and denom > 0) else float("nan")
    ok = finite and math.isfinite(rel) and rel <= tol
    return {"tensor": name, "max_abs": max_abs, "rel_l2": rel, "finite": finite, "ok": ok}


class Timer:
    def __init__(self, device: str, warmup_ms: float, rep_ms: float, iters: int):
        self.device = device
        self.warmup_ms, self.rep_ms, self.iters = warmup_ms, rep_ms, iters
        if device == "cuda":
            import triton
            import triton.testing

            self.triton = triton

    def __call__(self, fn) -> float:
        """Median milliseconds of fn()."""
        if self.device == "cuda":
            return float(
                self.triton.testing.do_bench(
                    fn, warmup=self.warmup_ms, rep=self.rep_ms, return_mode="median"
                )
            )
        fn()  # CPU self-test mode: wall clock, median of iters
        ts = []
        for _ in range(self.iters):
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(ts)


def kernel_times(fn, cm, calls: int) -> list[dict]:
    """What one call of fn spends in each GPU activity (kernels, memsets, copies): the device
    time of each name summed over `calls` calls under torch.profiler (CUPTI records every kernel
    of the process, ours launched by the library as well as a peer's), divided by `calls`;
    longest first. The sum against the timed milliseconds shows the gaps between kernels."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            with cm():
                fn()
        torch.cuda.synchronize()
    rows = []
    for ev in prof.key_averages():
        us = getattr(ev, "device_time_total", None)
        if us is None:
            us = getattr(ev, "cuda_time_total", 0)
        if us > 0:
            rows.append({"name": ev.key, "us": us / calls, "count": ev.count / calls})
    rows.sort(key=lambda r: -r["us"])
    return rows


def print_kernel_times(results: list[dict], peers) -> None:
    labels = [("ours", "ours")] + [(key, label) for key, label, _ in peers]
    for r in results:
        for key, label in labels:
            ks = r.get(key, {}).get("kernels")
            if not ks:
                continue
            total = sum(k["us"] for k in ks)
            ms = r[key].get("ms")
            timed = f", timed {ms * 1e3:.1f} us" if ms else ""
            print(f"kernels hd{r['hdim']} s{r['seqlen']} causal {int(r['causal'])} {r['pass']} "
                  f"{label}: {total:.1f} us on the GPU a call{timed}")
            for k in ks:
                print(f"  {k['us']:9.1f} us  x{k['count']:.0f}  {k['name'][:110]}")


def fmt_err(e: BaseException) -> str:
    s = f"{type(e).__name__}: {e}" if not isinstance(e, FaError) else str(e)
    s = " ".join(s.split())
    return s if len(s) <= 400 else s[:400] + "..."


# ------------------------------------------------------------------------------------------------
# One shape
# ------------------------------------------------------------------------------------------------


class Shape:
    def __init__(self, batch, seqlen, heads, hdim, causal):
        self.batch, self.seqlen, self.heads, self.hdim, self.causal = batch, seqlen, heads, hdim, causal

    def label(self):
        return (
            f"hdim {self.hdim} seqlen {self.seqlen} {'causal' if self.causal else 'non-causal'} "
            f"(batch {self.batch}, heads {self.heads})"
        )


def run_shape(ctx, sh: Shape) -> tuple[list[dict], list[dict]]:
    """Checks (optional) and times every implementation on one shape: one record per pass, and the
    problems that make the exit status non-zero."""
    args, lib, timer = ctx["args"], ctx["lib"], ctx["timer"]
    dev, kind, dev_id = ctx["torch_device"], ctx["device_kind"], ctx["device_id"]
    B, S, H, D, causal = sh.batch, sh.seqlen, sh.heads, sh.hdim, sh.causal
    passes = ctx["passes"]
    peers = ctx["peers"]  # [(key, label, SDPBackend)]
    prefix = ctx["kernel_prefix"]
    tol = args.tol

    gen = torch.Generator(device=dev)
    gen.manual_seed(args.seed + 7919 * S + 131 * D + int(causal))

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=dev, dtype=torch.float32).to(torch.bfloat16)

    q, k, v, dout = (randn(B, S, H, D) for _ in range(4))  # (B, S, H, D) contiguous
    qh, kh, vh, douth = (t.transpose(1, 2) for t in (q, k, v, dout))  # SDPA's (B, H, S, D) views
    fl_f = flops_fwd(B, H, S, D, causal)
    fl = {"fwd": fl_f, "bwd": 2.5 * fl_f}

    recs = {}
    for p in passes:
        recs[p] = {
            "hdim": D, "seqlen": S, "batch": B, "heads": H, "causal": bool(causal), "pass": p,
            "dtype": "bf16", "flops": fl[p], "ours": {}, "checks": [], "check_ok": None,
        }
        for key, _, _ in peers:
            recs[p][key] = {}
    problems = []  # {"shape", "problem"}: what makes the exit status non-zero

    # ---- ours: tensors, params, workspace, one untimed forward (and backward) --------------------
    out = torch.empty_like(q)
    lse = torch.empty(B, H, S, device=dev, dtype=torch.float32)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    tq, tk, tv, tout, tdout, tdq, tdk, tdv = (
        torch_fa_tensor(t, kind, dev_id) for t in (q, k, v, out, dout, dq, dk, dv)
    )
    tlse = torch_fa_tensor(lse, kind, dev_id)
    ptr = ctypes.pointer

    def new_params():
        p = lib.params()
        p.causal = 1 if causal else 0
        p.causal_align = FA_CAUSAL_BOTTOM_RIGHT  # == top-left here (seqlen_q == seqlen_k), as SDPA
        p.return_lse = 1
        p.backend = ctx["backend_id"]
        p.strict = 1
        p.deterministic = 1 if args.deterministic else 0
        p.kernel_family = args.kernel_family.encode() if args.kernel_family else None
        p.stream = ctx["stream"]()
        return p

    keep = []  # workspaces, kept alive while the calls run
    ours_fwd = ours_bwd = None
    fwd_ok = False
    pf = new_params()
    try:
        if not args.no_workspace:
            nbytes = ctypes.c_size_t()
            lib.check("fa_forward_workspace_size", lib.dll.fa_forward_workspace_size(
                ptr(pf), ptr(tq), ptr(tk), ptr(tv), ptr(tout), ptr(tlse), ptr(nbytes)))
            if nbytes.value:
                ws = torch.empty(nbytes.value, dtype=torch.uint8, device=dev)
                keep.append(ws)
                pf.workspace, pf.workspace_size = ws.data_ptr(), nbytes.value
        info_f = lib.run_info()
        ours_fwd = Call(lib, "fa_forward", lib.dll.fa_forward,
                        (ptr(pf), ptr(tq), ptr(tk), ptr(tv), ptr(tout), ptr(tlse), ptr(info_f)))
        ours_fwd()
        ctx["sync"]()
        fwd_ok = True
        if "fwd" in recs:
            recs["fwd"]["ours"].update(info_dict(info_f))
    except Exception as e:  # noqa: BLE001 (report and go on to the next shape)
        for p in recs:
            recs[p]["ours"]["error"] = fmt_err(e)
        problems.append({"shape": sh.label(), "problem": f"ours forward: {fmt_err(e)}"})

    if fwd_ok and "bwd" in recs:
        pb = new_params()
        try:
            if not args.no_workspace:
                nbytes = ctypes.c_size_t()
                lib.check("fa_backward_workspace_size", lib.dll.fa_backward_workspace_size(
                    ptr(pb), ptr(tq), ptr(tk), ptr(tv), ptr(tout), ptr(tlse), ptr(tdout),
                    ptr(tdq), ptr(tdk), ptr(tdv), ptr(nbytes)))
                if nbytes.value:
                    ws = torch.empty(nbytes.value, dtype=torch.uint8, device=dev)
                    keep.append(ws)
                    pb.workspace, pb.workspace_size = ws.data_ptr(), nbytes.value
            info_b = lib.run_info()
            ours_bwd = Call(lib, "fa_backward", lib.dll.fa_backward,
                            (ptr(pb), ptr(tq), ptr(tk), ptr(tv), ptr(tout), ptr(tlse), ptr(tdout),
                             ptr(tdq), ptr(tdk), ptr(tdv), ptr(info_b)))
            ours_bwd()
            ctx["sync"]()
            recs["bwd"]["ours"].update(info_dict(info_b))
        except Exception as e:  # noqa: BLE001
            ours_bwd = None
            recs["bwd"]["ours"]["error"] = fmt_err(e)
            problems.append({"shape": sh.label(), "problem": f"ours backward: {fmt_err(e)}"})

    # ---- check against the first peer (FA2 on CUDA) before any timing ---------------------------
    if args.check:
        ref_key, ref_label, ref_backend = peers[0]
        for p, rec in recs.items():
            if rec["ours"].get("error"):
                rec["check_ok"] = False
                continue
            kname = rec["ours"].get("kernel", "")
            checks = []
            try:
                if p == "fwd":
                    with torch.no_grad(), ctx["sdpa_kernel"](ref_backend):
                        ref_out = F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal)
                    checks.append(compare("out", out, ref_out.transpose(1, 2), tol))
                    ref_lse, why = ctx["reference_lse"](qh, kh, vh, causal)
                    if ref_lse is not None:
                        checks.append(compare("lse", lse, ref_lse, tol))
                    else:
                        checks.append({"tensor": "lse", "skipped": why, "ok": True})
                    del ref_out
                else:
                    qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))
                    with ctx["sdpa_kernel"](ref_backend):
                        o = F.scaled_dot_product_attention(
                            qg.transpose(1, 2), kg.transpose(1, 2), vg.transpose(1, 2), is_causal=causal)
                    gq, gk, gv = torch.autograd.grad(o, (qg, kg, vg), douth)
                    checks += [compare("dq", dq, gq, tol), compare("dk", dk, gk, tol),
                               compare("dv", dv, gv, tol)]
                    del qg, kg, vg, o, gq, gk, gv
            except Exception as e:  # noqa: BLE001
                checks.append({"tensor": "reference", "error": f"{ref_label}: {fmt_err(e)}", "ok": False})
            kernel_ok = kname.startswith(prefix)
            checks.append({"tensor": "kernel", "kernel": kname, "expected_prefix": prefix, "ok": kernel_ok})
            rec["checks"] = checks
            rec["check_ok"] = all(c.get("ok") for c in checks)
            parts = []
            for c in checks:
                if "rel_l2" in c:
                    parts.append(f"{c['tensor']} max|d| {c['max_abs']:.3g} rel {c['rel_l2']:.2e}"
                                 + ("" if c["ok"] else " FAIL"))
                elif "skipped" in c:
                    parts.append(f"{c['tensor']} not compared ({c['skipped']})")
                elif "error" in c:
                    parts.append(f"check FAILED: {c['error']}")
                elif c["tensor"] == "kernel" and not c["ok"]:
                    parts.append(f"kernel '{kname}' does not start with '{prefix}' FAIL")
            print(f"  check {p} vs {ref_label}: " + "; ".join(parts), flush=True)
            if not rec["check_ok"]:
                problems.append({"shape": sh.label(), "problem": f"check {p} failed: " + "; ".join(parts)})
        ctx["sync"]()

    # ---- timing ---------------------------------------------------------------------------------
    def time_into(slot: dict, fn, flops: float):
        try:
            ms = timer(fn)
            slot["ms"] = ms
            slot["tflops"] = flops / (ms * 1e-3) / 1e12
        except Exception as e:  # noqa: BLE001
            slot["error"] = fmt_err(e)
            slot.pop("ms", None)
            slot.pop("tflops", None)
        ctx["sync"]()

    def time_all(entries, flops: float):
        """Times every (slot, fn, context) of one pass: each called once first, so that a peer's
        first call at this shape (its plan built, the GPU idle meanwhile) comes before any
        timing, then all of them in turn for --settle-ms untimed, then --shape-rounds rounds, each timing every entry once in an order rotated by
        the round, so that no implementation is always timed first or last; the median of its
        rounds counts (all kept in ms_rounds). Why: timed right after its plan was built, cuDNN
        read up to 12% above its later timings of the same kernel in the same process (hd128
        non-causal 4k: 661-679 TFLOP/s in a process's first one or two timings, 600-610 after;
        bench/NOTES.md, session 24); the cause (clocks?) is not established."""
        live = []
        for slot, fn, cm in entries:
            try:
                with cm():
                    fn()
                ctx["sync"]()
                live.append((slot, fn, cm))
            except Exception as e:  # noqa: BLE001
                slot["error"] = fmt_err(e)
        # then --settle-ms of all of them in turn, untimed, so that the GPU is under the same
        # load as in the timings before the first one starts
        t_end = time.perf_counter() + args.settle_ms / 1e3
        while live and time.perf_counter() < t_end:
            for slot, fn, cm in live:
                with cm():
                    fn()
            ctx["sync"]()
        rounds = max(1, args.shape_rounds)
        for rd in range(rounds):
            k = rd % len(live) if live else 0
            for slot, fn, cm in live[k:] + live[:k]:
                if "error" in slot:
                    continue
                try:
                    with cm():
                        slot.setdefault("ms_rounds", []).append(timer(fn))
                except Exception as e:  # noqa: BLE001
                    slot["error"] = fmt_err(e)
                ctx["sync"]()
        for slot, _, _ in live:
            if "error" in slot:
                slot.pop("ms_rounds", None)
                continue
            slot["ms"] = statistics.median(slot["ms_rounds"])
            slot["tflops"] = flops / (slot["ms"] * 1e-3) / 1e12
        if args.kernel_times > 0:
            for slot, fn, cm in live:
                if "error" not in slot:
                    slot["kernels"] = kernel_times(fn, cm, args.kernel_times)

    def no_grad_with(backend):
        def enter():
            stack = contextlib.ExitStack()
            stack.enter_context(torch.no_grad())
            stack.enter_context(ctx["sdpa_kernel"](backend))
            return stack
        return enter

    if "fwd" in recs:
        r = recs["fwd"]
        entries = []
        if ours_fwd is not None and fwd_ok:
            entries.append((r["ours"], ours_fwd, contextlib.nullcontext))
        for key, label, backend in peers:
            def peer_fwd(backend=backend):
                return F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal)
            entries.append((r[key], peer_fwd, no_grad_with(backend)))
        time_all(entries, fl["fwd"])
        if "error" in r["ours"]:
            problems.append({"shape": sh.label(),
                             "problem": f"ours forward (timed): {r['ours']['error']}"})
        if ctx["ours_last"] and ours_fwd is not None and "error" not in r["ours"]:
            r["ours_last"] = {}
            time_into(r["ours_last"], ours_fwd, fl["fwd"])

    if "bwd" in recs:
        r = recs["bwd"]
        entries, held = [], []
        if ours_bwd is not None:
            entries.append((r["ours"], ours_bwd, contextlib.nullcontext))
        for key, label, backend in peers:
            try:
                qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))  # same memory as q, k, v
                with ctx["sdpa_kernel"](backend):
                    o = F.scaled_dot_product_attention(
                        qg.transpose(1, 2), kg.transpose(1, 2), vg.transpose(1, 2), is_causal=causal)

                def peer_bwd(o=o, qg=qg, kg=kg, vg=vg):
                    return torch.autograd.grad(o, (qg, kg, vg), douth, retain_graph=True)

                entries.append((r[key], peer_bwd, lambda backend=backend: ctx["sdpa_kernel"](backend)))
                held.append((o, qg, kg, vg))
            except Exception as e:  # noqa: BLE001
                r[key]["error"] = fmt_err(e)
        time_all(entries, fl["bwd"])
        del held
        if "error" in r["ours"]:
            problems.append({"shape": sh.label(),
                             "problem": f"ours backward (timed): {r['ours']['error']}"})
        if ctx["ours_last"] and ours_bwd is not None and "error" not in r["ours"]:
            r["ours_last"] = {}
            time_into(r["ours_last"], ours_bwd, fl["bwd"])

    del keep
    return [recs[p] for p in passes], problems


# ------------------------------------------------------------------------------------------------
# Output
# ------------------------------------------------------------------------------------------------


def fmt_tf(slot: dict) -> str:
    tf = slot.get("tflops")
    if tf is None:
        return "n/a"
    return f"{tf:.1f}" if tf >= 10 else f"{tf:.3g}"  # the CPU self-test's numbers are small


def fmt_ratio(a: dict, b: dict) -> str:
    if a.get("tflops") and b.get("tflops"):
        return f"{a['tflops'] / b['tflops']:.2f}"
    return "n/a"


def kernel_cell(o: dict) -> str:
    if o.get("kernel"):
        return f"{o['kernel']} ({o.get('tile_m', 0)}x{o.get('tile_n', 0)})"
    if o.get("error"):
        e = o["error"]
        return "error: " + (e if len(e) <= 70 else e[:70] + "...")
    return ""


def print_table(results: list[dict], peers) -> None:
    head = ["hdim", "seqlen", "causal", "pass", "ours TFLOP/s"]
    head += [f"{label} TFLOP/s" for _, label, _ in peers]
    head += [f"ours/{label}" for _, label, _ in peers]
    last = any("ours_last" in r for r in results)
    if last:
        head += ["ours(last) TFLOP/s"] + [f"ours(last)/{label}" for _, label, _ in peers[:1]]
    head += ["kernel (tile_m x tile_n)"]
    rows = []
    for r in results:
        row = [str(r["hdim"]), str(r["seqlen"]), "yes" if r["causal"] else "no", r["pass"],
               fmt_tf(r["ours"])]
        row += [fmt_tf(r[key]) for key, _, _ in peers]
        row += [fmt_ratio(r["ours"], r[key]) for key, _, _ in peers]
        if last:
            ol = r.get("ours_last", {})
            row += [fmt_tf(ol)] + [fmt_ratio(ol, r[key]) for key, _, _ in peers[:1]]
        row += [kernel_cell(r["ours"])]
        rows.append(row)
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(head)]
    line = "  ".join(h.rjust(w) if i < len(head) - 1 else h for i, (h, w) in enumerate(zip(head, widths)))
    print(line)
    print("-" * len(line))
    for row in rows:
        print("  ".join(c.rjust(w) if i < len(row) - 1 else c for i, (c, w) in enumerate(zip(row, widths))))
    # peers that could not run, with why (once per distinct reason)
    seen = set()
    for r in results:
        for key, label, _ in peers:
            e = r[key].get("error")
            if e and (label, e) not in seen:
                seen.add((label, e))
                print(f"n/a: {label} at hdim {r['hdim']} seqlen {r['seqlen']} causal {int(r['causal'])} "
                      f"{r['pass']}: {e}")


def print_problems(problems: list[dict]) -> None:
    """Each distinct problem once, with the shapes it happened at (a missing backend: one line)."""
    groups: dict[str, list[str]] = {}
    for p in problems:
        groups.setdefault(p["problem"], []).append(p["shape"])
    print(f"\nFAILED: {len(problems)} problem(s), {len(groups)} distinct:", file=sys.stderr)
    for msg, shapes in groups.items():
        shapes = [x for x in shapes if x]
        where = ""
        if shapes:
            more = "; ..." if len(shapes) > 3 else ""
            where = f" [{len(shapes)} shape(s): " + "; ".join(shapes[:3]) + more + "]"
        print(f"  {msg}{where}", file=sys.stderr)


def git_commit(explicit: str | None) -> str:
    if explicit:
        return explicit
    for var in ("FA_COMMIT", "GIT_COMMIT"):
        if os.environ.get(var):
            return os.environ[var]
    try:
        c = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                           text=True, timeout=10)
        if c.returncode == 0:
            commit = c.stdout.strip()
            d = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
            return commit + ("-dirty" if d.returncode == 0 and d.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def metadata(ctx, args) -> dict:
    m = {
        "tool": "bench/peer_cuda.py",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(args.commit),
        "host": platform.node(),
        "python": platform.python_version(),
        "argv": sys.argv[1:],
        "device": args.device,
        "torch": torch.__version__,
        "library": {"path": ctx["lib"].path, "version": ctx["lib"].version(),
                    "backend_requested": ctx["backend_name"], "backend": ctx["backend_desc"]},
        "peers": [{"key": key, "label": label, "sdpa_backend": str(b)} for key, label, b in ctx["peers"]],
        "dtype": "bf16",
        "layout": "q, k, v, out, dout: (batch, seqlen, heads, head_dim) contiguous; SDPA gets "
                  "transpose(1, 2) views of the same memory; lse float32 (batch, heads, seqlen)",
        "flops": "forward 4*B*H*S*S*D, halved when causal; backward 2.5x forward",
        "tokens": args.tokens, "hidden": args.hidden, "batch": args.batch, "heads": args.heads,
        "check": bool(args.check), "tol_rel_l2": args.tol, "seed": args.seed,
        "deterministic": bool(args.deterministic),
        "kernel_family": args.kernel_family,
        "workspace": not args.no_workspace,
    }
    if args.device == "cuda":
        dev = torch.cuda.current_device()
        prop = torch.cuda.get_device_properties(dev)
        cudnn_v = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        m.update({
            "gpu": torch.cuda.get_device_name(dev),
            "gpu_sms": prop.multi_processor_count,
            "gpu_memory_bytes": prop.total_memory,
            "gpu_l2_bytes": getattr(prop, "L2_cache_size", None),
            "gpu_cc": f"{prop.major}.{prop.minor}",
            "cuda_runtime_torch": torch.version.cuda,
            "cudnn": (f"{cudnn_v // 10000}.{cudnn_v // 100 % 100}.{cudnn_v % 100}" if cudnn_v else None),
            "cudnn_raw": cudnn_v,
            "triton": ctx["timer"].triton.__version__,
            "timing": (f"triton.testing.do_bench(warmup={args.warmup_ms} ms, rep={args.rep_ms} ms, "
                       "return_mode='median'); inputs not rotated (do_bench flushes the L2 "
                       f"before each call); per shape one untimed call of each implementation, "
                       f"{args.settle_ms:g} ms of untimed calls of all in turn, then "
                       f"{args.shape_rounds} rounds in rotated order, the median counts"),
        })
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm",
                                  "--format=csv,noheader", "-i", str(dev)],
                                 capture_output=True, text=True, timeout=20)
            if smi.returncode == 0:
                m["nvidia_smi"] = smi.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    else:
        m.update({"cpu": platform.processor() or platform.machine(),
                  "torch_threads": torch.get_num_threads(),
                  "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
                  "timing": f"wall clock, median of {args.iters} calls after one warm-up"})
    return m


def write_json(path: str, meta: dict, results: list[dict], problems: list[dict], complete: bool):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"meta": meta, "complete": complete, "problems": problems, "results": results}, f,
                  indent=1)
    os.replace(tmp, path)


# ------------------------------------------------------------------------------------------------
# Main
# ------------------------------------------------------------------------------------------------

QUICK = [(64, 512), (128, 2048), (256, 8192)]


def int_list(s: str) -> list[int]:
    try:
        return [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{s}' is not a comma-separated list of integers")


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description="Time flashattn-c (through ctypes) against PyTorch SDPA's flash (FA2) and cuDNN "
                    "backends in the same process, on the same bf16 inputs.",
        epilog="FLOPs: forward 4*B*H*S*S*D (halved when causal), backward 2.5x forward. "
               "Exit status 1 when any call of ours failed or (with --check) did not match.")
    ap.add_argument("--lib", default=os.path.join(REPO, "build", "release", "lib", "libflashattn.so"),
                    help="path of libflashattn.so (default: %(default)s)")
    ap.add_argument("--hdims", type=int_list, default=None, help="head dims (default 64,128,256)")
    ap.add_argument("--seqlens", type=int_list, default=None,
                    help="sequence lengths (default 512,1024,2048,4096,8192,16384)")
    ap.add_argument("--causal", type=int_list, default=[0, 1], help="0,1 (default), 0 or 1")
    ap.add_argument("--pass", dest="passes", default="fwd,bwd", help="fwd,bwd (default), fwd or bwd")
    ap.add_argument("--quick", action="store_true",
                    help=f"3 shapes only, (head_dim, seqlen) in {QUICK}, with --causal and --pass")
    ap.add_argument("--tokens", type=int, default=None,
                    help="batch * seqlen (default 16384): batch = max(1, tokens / seqlen)")
    ap.add_argument("--hidden", type=int, default=None,
                    help="heads * head_dim (default 2048): heads = max(1, hidden / head_dim)")
    ap.add_argument("--batch", type=int, default=None, help="fixed batch (overrides --tokens)")
    ap.add_argument("--heads", type=int, default=None, help="fixed heads (overrides --hidden)")
    ap.add_argument("--check", action="store_true",
                    help="before timing each shape, compare ours with SDPA flash (out and lse, or "
                         "dq/dk/dv): fail if the relative L2 error > --tol or any NaN/Inf, or the "
                         "kernel name does not start with 'cuda.'")
    ap.add_argument("--tol", type=float, default=2e-2, help="relative L2 error allowed (default 2e-2)")
    ap.add_argument("--json", default=None, help="write every measurement and the metadata here")
    ap.add_argument("--png", default=None, help="draw a chart here (bench/plot_sweep.py)")
    ap.add_argument("--commit", default=None,
                    help="commit recorded in the JSON (default: $FA_COMMIT, $GIT_COMMIT, or git)")
    ap.add_argument("--warmup-ms", type=float, default=25, help="do_bench warmup (default 25 ms)")
    ap.add_argument("--rep-ms", type=float, default=100, help="do_bench rep (default 100 ms)")
    ap.add_argument("--no-workspace", action="store_true",
                    help="let the library allocate its scratch per call instead of passing "
                         "params.workspace sized by fa_*_workspace_size")
    ap.add_argument("--deterministic", action="store_true",
                    help="ask ours for the deterministic backward (params.deterministic = 1); "
                         "the peers run as they are")
    ap.add_argument("--kernel-family", default=None,
                    help="ask ours for this kernel family (params.kernel_family, e.g. fa3 or fa2) "
                         "in both passes; refused by the library where it does not apply")
    ap.add_argument("--shape-rounds", type=int, default=3,
                    help="timings of each implementation per shape, in an order rotated each "
                         "round after one untimed call of each; the median counts (default 3; "
                         "with 1: ours, then the peers, the order before session 24, which had "
                         "no untimed first calls)")
    ap.add_argument("--settle-ms", type=float, default=300,
                    help="untimed calls of every implementation in turn, per shape, between the "
                         "first calls and the timing rounds (default 300 ms)")
    ap.add_argument("--ours-last", action="store_true",
                    help="time ours a second time after the peers (recorded as ours_last and "
                         "printed beside the first timing), to see whether the order of the "
                         "timings (clocks, power, the L2) favours one side")
    ap.add_argument("--kernel-times", type=int, default=0, metavar="CALLS",
                    help="after timing, profile CALLS calls of each implementation (torch.profiler)"
                         " and print each kernel's device time a call")
    ap.add_argument("--seed", type=int, default=0)
    # Hidden self-test mode: CPU tensors, FA_DEVICE_CPU, backend cpu, SDPA math as the peer.
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help=argparse.SUPPRESS)
    ap.add_argument("--iters", type=int, default=5, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    a.passes = [p for p in a.passes.split(",") if p]
    if not a.passes or any(p not in ("fwd", "bwd") for p in a.passes):
        ap.error("--pass takes fwd, bwd or fwd,bwd")
    if not a.causal or any(c not in (0, 1) for c in a.causal):
        ap.error("--causal takes 0, 1 or 0,1")
    cpu = a.device == "cpu"
    if a.hdims is None:
        a.hdims = [64] if cpu else [64, 128, 256]
    if a.seqlens is None:
        a.seqlens = [128, 256] if cpu else [512, 1024, 2048, 4096, 8192, 16384]
    if a.tokens is None:
        a.tokens = 256 if cpu else 16384
    if a.hidden is None:
        a.hidden = 128 if cpu else 2048
    return a


def main(argv=None) -> int:
    global torch, F
    args = parse_args(sys.argv[1:] if argv is None else argv)

    import torch as _torch
    import torch.nn.functional as _F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch, F = _torch, _F
    lib = FlashAttnLib(args.lib)
    print(f"flashattn-c {lib.version()} from {lib.path}; ctypes structs match the library's sizes "
          f"(fa_params {ctypes.sizeof(FaParams)}, fa_run_info {ctypes.sizeof(FaRunInfo)}, "
          f"fa_backend_desc {ctypes.sizeof(FaBackendDesc)}, fa_tensor {ctypes.sizeof(FaTensor)} bytes)")

    cuda = args.device == "cuda"
    if cuda:
        if not torch.cuda.is_available():
            print("peer_cuda.py: torch sees no CUDA device", file=sys.stderr)
            return 1
        dev_id = torch.cuda.current_device()
        torch_device = torch.device("cuda", dev_id)
        backend_name, device_kind, prefix = "cuda", FA_DEVICE_CUDA, "cuda."
        peers = [("fa2", "FA2", SDPBackend.FLASH_ATTENTION), ("cudnn", "cuDNN", SDPBackend.CUDNN_ATTENTION)]
        stream = lambda: torch.cuda.current_stream().cuda_stream  # noqa: E731 (the library runs on it)
        sync = torch.cuda.synchronize

        def reference_lse(qh, kh, vh, causal):
            try:
                with torch.no_grad():
                    res = torch.ops.aten._scaled_dot_product_flash_attention(
                        qh, kh, vh, 0.0, bool(causal), False)
                l = res[1]
                S = qh.shape[2]
                if l.dim() == 3 and l.shape[0] == qh.shape[0] and l.shape[1] == qh.shape[1] \
                        and l.shape[2] >= S:
                    return l[..., :S], None
                return None, f"aten flash logsumexp has shape {tuple(l.shape)}"
            except Exception as e:  # noqa: BLE001
                return None, f"aten._scaled_dot_product_flash_attention: {fmt_err(e)}"
    else:
        dev_id = 0
        torch_device = torch.device("cpu")
        backend_name, device_kind, prefix = "cpu", FA_DEVICE_CPU, "cpu."
        peers = [("math", "SDPA-math", SDPBackend.MATH)]
        stream = lambda: None  # noqa: E731
        sync = lambda: None  # noqa: E731

        def reference_lse(qh, kh, vh, causal):
            s = (qh.float() @ kh.float().transpose(-1, -2)) / math.sqrt(qh.shape[-1])
            if causal:
                n_q, n_k = s.shape[-2], s.shape[-1]
                i = torch.arange(n_q).view(-1, 1)
                j = torch.arange(n_k).view(1, -1)
                s = s.masked_fill(j > i + (n_k - n_q), float("-inf"))
            return torch.logsumexp(s, dim=-1), None

    backends = lib.backend_info()
    desc = next((d for d in backends if d["name"] == backend_name), None)
    if desc is None:
        print(f"peer_cuda.py: the library does not know a backend named {backend_name}", file=sys.stderr)
        return 1
    if desc["available"]:
        print(f"backend {backend_name}: available; devices: {desc['devices']}; arch {desc['arch']}; "
              f"kernel families {desc['kernel_families']}")
    else:
        print(f"backend {backend_name}: NOT available: {desc['reason']} (peers are still timed; "
              f"ours is n/a)")

    ctx = {
        "args": args, "lib": lib,
        "timer": Timer(args.device, args.warmup_ms, args.rep_ms, args.iters),
        "torch_device": torch_device, "device_kind": device_kind, "device_id": dev_id,
        "backend_name": backend_name, "backend_id": lib.backend_id(backend_name),
        "backend_desc": desc, "passes": args.passes, "peers": peers, "kernel_prefix": prefix,
        "stream": stream, "sync": sync, "sdpa_kernel": sdpa_kernel, "reference_lse": reference_lse,
        "ours_last": args.ours_last,
    }
    meta = metadata(ctx, args)
    if cuda:
        print(f"GPU {meta['gpu']} ({meta['gpu_sms']} SMs), torch {meta['torch']}, CUDA "
              f"{meta['cuda_runtime_torch']}, cuDNN {meta['cudnn']}, triton {meta['triton']}, "
              f"commit {meta['commit']}")

    pairs = QUICK if args.quick else [(d, s) for d in args.hdims for s in args.seqlens]
    shapes = []
    for d, s in pairs:
        for c in args.causal:
            b = args.batch if args.batch else max(1, args.tokens // s)
            h = args.heads if args.heads else max(1, args.hidden // d)
            shapes.append(Shape(b, s, h, d, bool(c)))

    results, problems = [], []
    for i, sh in enumerate(shapes):
        print(f"[{i + 1}/{len(shapes)}] {sh.label()}", flush=True)
        try:
            recs, probs = run_shape(ctx, sh)
        except Exception as e:  # noqa: BLE001 (a shape that breaks the harness: report, go on)
            traceback.print_exc()
            problems.append({"shape": sh.label(), "problem": f"harness error: {fmt_err(e)}"})
            continue
        finally:
            if cuda:
                torch.cuda.empty_cache()
        for r in recs:
            cells = [f"ours {fmt_tf(r['ours'])}"] + [f"{label} {fmt_tf(r[key])}" for key, label, _ in peers]
            print(f"  {r['pass']}: TFLOP/s " + ", ".join(cells)
                  + (f"; {kernel_cell(r['ours'])}" if kernel_cell(r["ours"]) else ""), flush=True)
        results += recs
        problems += probs
        if args.json:
            write_json(args.json, meta, results, problems, complete=False)

    print()
    print_kernel_times(results, peers)
    print_table(results, peers)
    if args.json:
        write_json(args.json, meta, results, problems, complete=True)
        print(f"wrote {args.json}")
    if args.png:
        try:
            sys.path.insert(0, HERE)
            import plot_sweep

            plot_sweep.plot({"meta": meta, "results": results}, args.png)
            print(f"wrote {args.png}")
        except Exception as e:  # noqa: BLE001
            problems.append({"shape": "", "problem": f"--png {args.png}: {fmt_err(e)}"})
    lib.dll.fa_release()
    if problems:
        print_problems(problems)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
