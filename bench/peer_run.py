"""peer_run.py: one shape of bench/peer.py: the inputs, our calls through the flashattn binding,
the PyTorch SDPA peers, the check and the timings.

Timing (the figure every table quotes): each implementation is called back to back on torch's
current stream, `calls` times between two CUDA events (on the CPU: the wall clock), and the time
is the events' interval over `calls`; `calls` is chosen so that one such run takes about --rep-ms.
Per shape every implementation is called once untimed, then all of them in turn for --settle-ms,
then timed in --rounds rounds whose order rotates by one each round; the median of its rounds
counts. Inputs are not rotated and the L2 is not flushed: this is the rate of a caller that runs
the same attention over and over. With --do-bench, triton.testing.do_bench's median (one call at
a time, the L2 flushed before each) is recorded beside it.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time


def fmt_err(e: BaseException) -> str:
    s = str(e) if type(e).__name__ == "FlashAttnError" else f"{type(e).__name__}: {e}"
    s = " ".join(s.split())
    return s if len(s) <= 400 else s[:400] + "..."


class Device:
    """Where the run happens: torch's device, our backend's name, the peers, the timers."""

    def __init__(self, args):
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        self.torch, self.F, self.sdpa_kernel, self.args = torch, F, sdpa_kernel, args
        self.cuda = args.device == "cuda"
        if self.cuda:
            self.dev = torch.device("cuda", torch.cuda.current_device())
            self.backend, self.prefix = "cuda", "cuda."
            self.peers = [("fa2", "FA2", SDPBackend.FLASH_ATTENTION),
                          ("cudnn", "cuDNN", SDPBackend.CUDNN_ATTENTION)]
        else:
            self.dev = torch.device("cpu")
            self.backend, self.prefix = "cpu", "cpu."
            self.peers = [("math", "SDPA-math", SDPBackend.MATH)]
        self.triton = None
        if self.cuda and args.do_bench:
            import triton.testing

            self.triton = triton

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def stream(self):
        return self.torch.cuda.current_stream() if self.cuda else None

    def back_to_back(self, fn, cm, calls: int) -> tuple[float, float]:
        """Milliseconds a call over `calls` calls of fn issued back to back inside cm(), and the
        host's microseconds a call: the time to issue them (on the GPU, until the last call
        returns, before waiting for the GPU; equal to the GPU's time where the launch queue
        fills, a few hundred calls ahead)."""
        if self.cuda:
            start = self.torch.cuda.Event(enable_timing=True)
            end = self.torch.cuda.Event(enable_timing=True)
            with cm():
                start.record()
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn()
                host = time.perf_counter() - t0
                end.record()
            end.synchronize()
            return start.elapsed_time(end) / calls, host * 1e6 / calls
        with cm():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            ms = (time.perf_counter() - t0) * 1e3 / calls
            return ms, ms * 1e3

    def do_bench(self, fn, cm) -> float:
        with cm():
            return float(self.triton.testing.do_bench(fn, warmup=25, rep=self.args.rep_ms,
                                                      return_mode="median"))


class Shape:
    def __init__(self, batch, seqlen_q, seqlen, heads, heads_kv, hdim, causal):
        self.batch, self.seqlen_q, self.seqlen = batch, seqlen_q, seqlen
        self.heads, self.heads_kv, self.hdim, self.causal = heads, heads_kv, hdim, causal

    def label(self) -> str:
        sq = f"{self.seqlen_q}x" if self.seqlen_q != self.seqlen else ""
        kv = f"/{self.heads_kv}" if self.heads_kv != self.heads else ""
        return (f"hdim {self.hdim} seqlen {sq}{self.seqlen} "
                f"{'causal' if self.causal else 'non-causal'} (batch {self.batch}, heads "
                f"{self.heads}{kv})")

    def flops_fwd(self) -> float:
        """4 * B * H * D * (query, key) pairs: S * S, halved when causal (the FlashAttention
        papers' count) for square shapes; the exact bottom-right visible pairs otherwise."""
        sq, sk = self.seqlen_q, self.seqlen
        if not self.causal:
            pairs = sq * sk
        elif sq == sk:
            pairs = sq * sk / 2
        else:
            pairs = sum(min(sk, max(0, i + 1 + sk - sq)) for i in range(sq))
        return 4.0 * self.batch * self.heads * self.hdim * pairs

    def kv_bytes(self, elem: int = 2) -> int:
        return 2 * self.batch * self.seqlen * self.heads_kv * self.hdim * elem


def compare(torch, name: str, ours, ref, tol: float) -> dict:
    o, r = ours.detach().float(), ref.detach().float()
    finite = bool(torch.isfinite(o).all().item())
    diff = o - r
    max_abs = diff.abs().max().item() if finite else float("nan")
    denom = torch.linalg.vector_norm(r).item()
    rel = torch.linalg.vector_norm(diff).item() / denom if finite and denom > 0 else float("nan")
    ok = finite and math.isfinite(rel) and rel <= tol
    return {"tensor": name, "max_abs": max_abs, "rel_l2": rel, "finite": finite, "ok": ok}


def kernel_times(torch, fn, cm, calls: int) -> list[dict]:
    """Device time a call of each GPU activity (kernels, memsets, copies: ours launched by the
    library as well as the peers'), under torch.profiler over `calls` calls; longest first."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        with cm():
            for _ in range(calls):
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


def time_all(dv: Device, entries: list, flops: float) -> None:
    """Times every (slot, fn, cm) of one pass (see the module's docstring) into its slot."""
    args = dv.args
    live = []
    for slot, fn, cm in entries:
        try:
            with cm():
                fn()
            dv.sync()
            live.append((slot, fn, cm))
        except Exception as e:  # noqa: BLE001 (a peer that cannot run the shape: n/a)
            slot["error"] = fmt_err(e)
    t_end = time.perf_counter() + args.settle_ms / 1e3
    while live and time.perf_counter() < t_end:
        for _, fn, cm in live:
            with cm():
                fn()
        dv.sync()
    for slot, fn, cm in live:  # calls a round: about --rep-ms of back-to-back calls
        try:
            est, _ = dv.back_to_back(fn, cm, 2)
            slot["calls"] = max(3, min(args.max_calls, int(args.rep_ms / max(est, 1e-6))))
        except Exception as e:  # noqa: BLE001
            slot["error"] = fmt_err(e)
    for rd in range(max(1, args.rounds)):
        k = rd % len(live) if live else 0
        for slot, fn, cm in live[k:] + live[:k]:
            if "error" in slot:
                continue
            try:
                ms, host_us = dv.back_to_back(fn, cm, slot["calls"])
                slot.setdefault("ms_rounds", []).append(ms)
                slot.setdefault("host_us_rounds", []).append(host_us)
            except Exception as e:  # noqa: BLE001
                slot["error"] = fmt_err(e)
            dv.sync()
    for slot, fn, cm in live:
        if "error" in slot:
            slot.pop("ms_rounds", None)
            slot.pop("host_us_rounds", None)
            continue
        slot["ms"] = statistics.median(slot["ms_rounds"])
        slot["host_us"] = statistics.median(slot["host_us_rounds"])
        slot["tflops"] = flops / (slot["ms"] * 1e-3) / 1e12
        if dv.triton is not None:
            slot["ms_do_bench"] = dv.do_bench(fn, cm)
            slot["tflops_do_bench"] = flops / (slot["ms_do_bench"] * 1e-3) / 1e12
        if args.kernel_times > 0 and dv.cuda:
            slot["kernels"] = kernel_times(dv.torch, fn, cm, args.kernel_times)


def info_dict(info) -> dict:
    return {k: getattr(info, k) for k in ("backend", "kernel", "tile_m", "tile_n", "num_splits",
                                          "deterministic", "workspace_bytes", "fell_back",
                                          "rejected")}


def run_shape(dv: Device, fa, sh: Shape) -> tuple[list[dict], list[dict]]:
    """Checks (optional) and times ours and every peer on one shape: one record per pass, and the
    problems that make the exit status non-zero."""
    torch, F, args = dv.torch, dv.F, dv.args
    B, SQ, S, H, HKV, D, causal = (sh.batch, sh.seqlen_q, sh.seqlen, sh.heads, sh.heads_kv,
                                   sh.hdim, sh.causal)
    gen = torch.Generator(device=dv.dev)
    gen.manual_seed(args.seed + 7919 * S + 131 * D + int(causal))

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=dv.dev).to(torch.bfloat16)

    q, dout = randn(B, SQ, H, D), randn(B, SQ, H, D)
    k, v = randn(B, S, HKV, D), randn(B, S, HKV, D)
    group = H // HKV
    # SDPA's (B, H, S, D) views; its flash and cuDNN paths take K/V expanded to every query head.
    kx = k.repeat_interleave(group, dim=2) if group > 1 else k
    vx = v.repeat_interleave(group, dim=2) if group > 1 else v
    qh, kh, vh, douth = (t.transpose(1, 2) for t in (q, kx, vx, dout))
    mask = None
    if causal and SQ != S:  # ours is bottom-right aligned; SDPA's is_causal is top-left
        from torch.nn.attention.bias import causal_lower_right

        mask = causal_lower_right(SQ, S)

    def sdpa(a, b, c):
        if mask is not None:
            return F.scaled_dot_product_attention(a, b, c, attn_mask=mask)
        return F.scaled_dot_product_attention(a, b, c, is_causal=bool(causal))

    fl = {"fwd": sh.flops_fwd(), "bwd": 2.5 * sh.flops_fwd()}
    recs = {}
    for p in args.passes:
        recs[p] = {"hdim": D, "seqlen": S, "seqlen_q": SQ, "batch": B, "heads": H,
                   "heads_kv": HKV, "causal": bool(causal), "pass": p, "dtype": "bf16",
                   "flops": fl[p], "kv_bytes": sh.kv_bytes(), "ours": {}, "checks": [],
                   "check_ok": None}
        for key, _, _ in dv.peers:
            recs[p][key] = {}
    problems = []

    # ---- ours: outputs preallocated, one untimed call each (its run report and workspace size)
    out, lse = torch.empty_like(q), torch.empty(B, H, SQ, device=dv.dev, dtype=torch.float32)
    dq, dk, dv_ = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    params = {"causal": bool(causal), "backend": dv.backend, "strict": True,
              "stream": dv.stream(), "deterministic": bool(args.deterministic),
              "kernel_family": args.kernel_family}

    def workspace(info):
        if args.no_workspace or not info.workspace_bytes:
            return None
        return torch.empty((info.workspace_bytes + 3) // 4, dtype=torch.int32, device=dv.dev)

    pf, pb = dict(params), dict(params)

    def ours_fwd():
        fa.attention(q, k, v, out=out, lse=lse, return_lse=True, **pf)

    def ours_bwd():
        fa.attention_backward(dout, q, k, v, out, lse, dq=dq, dk=dk, dv=dv_, **pb)

    fwd_ok = bwd_ok = False
    try:
        info = fa.attention(q, k, v, out=out, lse=lse, return_lse=True, return_info=True, **pf)[-1]
        pf["workspace"] = workspace(info)
        dv.sync()
        fwd_ok = True
        if "fwd" in recs:
            recs["fwd"]["ours"].update(info_dict(info))
    except Exception as e:  # noqa: BLE001 (report and go on to the next shape)
        for rec in recs.values():
            rec["ours"]["error"] = fmt_err(e)
        problems.append({"shape": sh.label(), "problem": f"ours forward: {fmt_err(e)}"})
    if fwd_ok and "bwd" in recs:
        try:
            info = fa.attention_backward(dout, q, k, v, out, lse, dq=dq, dk=dk, dv=dv_,
                                         return_info=True, **pb)[-1]
            pb["workspace"] = workspace(info)
            dv.sync()
            bwd_ok = True
            recs["bwd"]["ours"].update(info_dict(info))
        except Exception as e:  # noqa: BLE001
            recs["bwd"]["ours"]["error"] = fmt_err(e)
            problems.append({"shape": sh.label(), "problem": f"ours backward: {fmt_err(e)}"})

    # ---- the check against the first peer (FA2 on CUDA, SDPA's math on the CPU), before timing
    if args.check:
        check_shape(dv, sh, recs, problems, (q, kx, vx, douth, qh, kh, vh),
                    (out, lse, dq, dk, dv_), sdpa, mask)

    # ---- timing
    def no_grad_with(backend):
        def enter():
            stack = contextlib.ExitStack()
            stack.enter_context(torch.no_grad())
            stack.enter_context(dv.sdpa_kernel(backend))
            return stack
        return enter

    if "fwd" in recs:
        r = recs["fwd"]
        entries = [(r["ours"], ours_fwd, contextlib.nullcontext)] if fwd_ok else []
        for key, _, backend in dv.peers:
            entries.append((r[key], lambda: sdpa(qh, kh, vh), no_grad_with(backend)))
        time_all(dv, entries, fl["fwd"])
        if fwd_ok and "error" in r["ours"]:
            problems.append({"shape": sh.label(), "problem": f"ours forward (timed): "
                                                             f"{r['ours']['error']}"})
    if "bwd" in recs:
        r = recs["bwd"]
        entries, held = ([(r["ours"], ours_bwd, contextlib.nullcontext)] if bwd_ok else []), []
        for key, _, backend in dv.peers:
            try:  # one untimed forward builds the autograd graph; the backward alone is timed
                qg, kg, vg = (t.detach().requires_grad_() for t in (q, kx, vx))
                with dv.sdpa_kernel(backend):
                    o = sdpa(qg.transpose(1, 2), kg.transpose(1, 2), vg.transpose(1, 2))

                def peer_bwd(o=o, qg=qg, kg=kg, vg=vg):
                    return torch.autograd.grad(o, (qg, kg, vg), douth, retain_graph=True)

                entries.append((r[key], peer_bwd, lambda backend=backend: dv.sdpa_kernel(backend)))
                held.append((o, qg, kg, vg))
            except Exception as e:  # noqa: BLE001
                r[key]["error"] = fmt_err(e)
        time_all(dv, entries, fl["bwd"])
        del held
        if bwd_ok and "error" in r["ours"]:
            problems.append({"shape": sh.label(), "problem": f"ours backward (timed): "
                                                             f"{r['ours']['error']}"})
    return [recs[p] for p in args.passes], problems


def reference_lse(dv: Device, qh, kh, vh, causal, mask):
    """The log-sum-exp of SDPA's scores: (lse, None), or (None, why not)."""
    torch = dv.torch
    if not dv.cuda:  # small CPU shapes: from the scores themselves
        s = (qh.float() @ kh.float().transpose(-1, -2)) / math.sqrt(qh.shape[-1])
        if causal:
            n_q, n_k = s.shape[-2], s.shape[-1]
            i = torch.arange(n_q).view(-1, 1)
            j = torch.arange(n_k).view(1, -1)
            s = s.masked_fill(j > i + (n_k - n_q), float("-inf"))
        return torch.logsumexp(s, dim=-1), None
    if mask is not None:
        return None, "no flash reference for a bottom-right mask with seqlen_q != seqlen"
    try:
        with torch.no_grad():
            res = torch.ops.aten._scaled_dot_product_flash_attention(qh, kh, vh, 0.0,
                                                                     bool(causal), False)
        lse, n = res[1], qh.shape[2]
        if lse.dim() == 3 and lse.shape[:2] == qh.shape[:2] and lse.shape[2] >= n:
            return lse[..., :n], None
        return None, f"aten flash logsumexp has shape {tuple(lse.shape)}"
    except Exception as e:  # noqa: BLE001
        return None, f"aten._scaled_dot_product_flash_attention: {fmt_err(e)}"


def check_shape(dv: Device, sh: Shape, recs, problems, inputs, ours, sdpa, mask) -> None:
    """Ours against the first peer: out and lse, or dq, dk, dv; and the kernel's prefix."""
    torch, tol = dv.torch, dv.args.tol
    q, kx, vx, douth, qh, kh, vh = inputs
    out, lse, dq, dk, dv_ = ours
    _, ref_label, ref_backend = dv.peers[0]
    group = sh.heads // sh.heads_kv
    for p, rec in recs.items():
        if rec["ours"].get("error"):
            rec["check_ok"] = False
            continue
        kname = rec["ours"].get("kernel", "")
        checks = []
        try:
            if p == "fwd":
                with torch.no_grad(), dv.sdpa_kernel(ref_backend):
                    ref_out = sdpa(qh, kh, vh)
                checks.append(compare(torch, "out", out, ref_out.transpose(1, 2), tol))
                ref_lse, why = reference_lse(dv, qh, kh, vh, sh.causal, mask)
                if ref_lse is not None:
                    checks.append(compare(torch, "lse", lse, ref_lse, tol))
                else:
                    checks.append({"tensor": "lse", "skipped": why, "ok": True})
            else:
                qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, kx, vx))
                with dv.sdpa_kernel(ref_backend):
                    o = sdpa(qg.transpose(1, 2), kg.transpose(1, 2), vg.transpose(1, 2))
                gq, gk, gv = torch.autograd.grad(o, (qg, kg, vg), douth)
                if group > 1:  # the expanded heads' gradients, summed per K/V head
                    b, s, _, d = gk.shape
                    gk = gk.view(b, s, sh.heads_kv, group, d).sum(3)
                    gv = gv.view(b, s, sh.heads_kv, group, d).sum(3)
                checks += [compare(torch, "dq", dq, gq, tol), compare(torch, "dk", dk, gk, tol),
                           compare(torch, "dv", dv_, gv, tol)]
        except Exception as e:  # noqa: BLE001
            checks.append({"tensor": "reference", "error": f"{ref_label}: {fmt_err(e)}",
                           "ok": False})
        checks.append({"tensor": "kernel", "kernel": kname, "expected_prefix": dv.prefix,
                       "ok": kname.startswith(dv.prefix)})
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
                parts.append(f"kernel '{kname}' does not start with '{dv.prefix}' FAIL")
        print(f"  check {p} vs {ref_label}: " + "; ".join(parts), flush=True)
        if not rec["check_ok"]:
            problems.append({"shape": sh.label(), "problem": f"check {p} failed: "
                                                             + "; ".join(parts)})
    dv.sync()
