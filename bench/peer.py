#!/usr/bin/env python3
"""peer.py: flashattn-c against PyTorch SDPA's FlashAttention-2 and cuDNN backends, same process.

Our library is called the way a PyTorch user calls it: through the Python binding
(python/flashattn: flashattn.attention / attention_backward on torch tensors via DLPack, outputs
preallocated with out=/lse=/dq=/dk=/dv=, on torch's current stream). In the same process, on the
same inputs, torch.nn.functional.scaled_dot_product_attention runs restricted to
SDPBackend.FLASH_ATTENTION ("FA2") and to SDPBackend.CUDNN_ATTENTION ("cuDNN"). bench/peer_run.py
says how each is timed.

Sweep (FlashAttention's): batch * seqlen = 16384 tokens, heads * head_dim = 2048, head_dim
64/128/256, seqlen 512..16384, causal off and on, bf16, forward and backward. The backward is
timed alone: the forward that produces out/lse (ours) or the autograd graph (peers) runs once,
untimed. FLOPs: forward 4*B*H*S*S*D, halved when causal; backward 2.5x the forward.

--device cpu is a smoke test that needs no GPU: CPU tensors, our cpu backend, SDPA's math backend
as the peer, tiny shapes, wall-clock timing.

With --seqlen-q (decode-like shapes) on CUDA, a read probe runs before and after the shapes: a
float32 sum over a bf16 tensor of --read-probe-gib GiB (torch.sum, which streams it once; the
best of 40 calls, each between CUDA events), whose GB/s is the measured HBM read rate the
table's %bw divides our K+V GB/s by (the median of the two probes).

Exit status: 0 when every call of ours ran (and, with --check, matched the first peer within a
relative L2 error of --tol, without NaN/Inf, with a kernel of the backend asked for); 1 otherwise.
A peer that cannot run a shape (e.g. cuDNN refusing it) shows as n/a and does not change it.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import subprocess
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
QUICK = [(64, 512), (128, 2048), (256, 8192)]


def int_list(s: str) -> list[int]:
    try:
        return [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{s}' is not a comma-separated list of integers")


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description="Time flashattn-c (through its Python binding) against PyTorch SDPA's flash "
                    "(FA2) and cuDNN backends in the same process, on the same bf16 inputs.",
        epilog="FLOPs: forward 4*B*H*S*S*D (halved when causal), backward 2.5x forward. Exit "
               "status 1 when any call of ours failed or (with --check) did not match.")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="cuda (default); cpu: a smoke test with our cpu backend against SDPA's "
                         "math backend on tiny shapes")
    ap.add_argument("--lib", default=None,
                    help="libflashattn.so to load (sets FLASHATTN_LIBRARY; default: "
                         "$FLASHATTN_LIBRARY, else what the binding finds)")
    ap.add_argument("--hdims", type=int_list, default=None, help="head dims (default 64,128,256)")
    ap.add_argument("--seqlens", type=int_list, default=None,
                    help="key lengths, and query lengths unless --seqlen-q "
                         "(default 512,1024,2048,4096,8192,16384)")
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
    ap.add_argument("--kv-heads", type=int, default=None,
                    help="K/V heads (GQA when fewer than the query heads, which must be a "
                         "multiple; the peers get K and V expanded to every query head)")
    ap.add_argument("--seqlen-q", type=int, default=None,
                    help="query length of every shape (default: the key length); with it the "
                         "causal mask is bottom-right aligned for the peers too, and the table "
                         "adds our K+V read rate (decode-like shapes)")
    ap.add_argument("--check", action="store_true",
                    help="before timing each shape, compare ours with the first peer (out and "
                         "lse, or dq/dk/dv): fail if the relative L2 error > --tol or any "
                         "NaN/Inf, or the kernel is not the asked backend's")
    ap.add_argument("--tol", type=float, default=2e-2, help="relative L2 error allowed (2e-2)")
    ap.add_argument("--json", default=None, help="write every measurement and the metadata here")
    ap.add_argument("--png", default=None, help="draw a chart here (bench/plot_sweep.py)")
    ap.add_argument("--commit", default=None,
                    help="commit recorded in the JSON (default: $FA_COMMIT, $GIT_COMMIT, or git)")
    ap.add_argument("--rep-ms", type=float, default=None,
                    help="length of one timed run of back-to-back calls (default 100 ms; cpu 20)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="timed runs of each implementation per shape, in rotated order; the "
                         "median counts (default 3)")
    ap.add_argument("--settle-ms", type=float, default=None,
                    help="untimed calls of every implementation in turn before the rounds "
                         "(default 300 ms; cpu 20)")
    ap.add_argument("--max-calls", type=int, default=2000, help="most calls in one timed run")
    ap.add_argument("--do-bench", action="store_true",
                    help="also record triton.testing.do_bench's median (one call at a time, L2 "
                         "flushed before each) for every implementation (cuda)")
    ap.add_argument("--no-workspace", action="store_true",
                    help="let the library allocate its scratch per call instead of passing a "
                         "workspace sized by the first call's run report")
    ap.add_argument("--deterministic", action="store_true",
                    help="ours with deterministic=True (the peers run as they are)")
    ap.add_argument("--kernel-family", default=None,
                    help="ask ours for this kernel family (e.g. fa3 or fa2) in both passes")
    ap.add_argument("--kernel-times", type=int, default=0, metavar="CALLS",
                    help="after timing, profile CALLS calls of each implementation "
                         "(torch.profiler, cuda) and print each kernel's device time a call")
    ap.add_argument("--host-time", action="store_true",
                    help="add each implementation's host microseconds a call to the table (the "
                         "time to issue the back-to-back calls; always in the JSON as host_us)")
    ap.add_argument("--read-probe-gib", type=float, default=4.0,
                    help="with --seqlen-q on cuda: the read probe's tensor in GiB (default 4; 0: "
                         "no probe)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    a.passes = [p for p in a.passes.split(",") if p]
    if not a.passes or any(p not in ("fwd", "bwd") for p in a.passes):
        ap.error("--pass takes fwd, bwd or fwd,bwd")
    if not a.causal or any(c not in (0, 1) for c in a.causal):
        ap.error("--causal takes 0, 1 or 0,1")
    cpu = a.device == "cpu"
    if cpu and (a.do_bench or a.kernel_times):
        ap.error("--do-bench and --kernel-times need --device cuda")
    a.hdims = a.hdims or ([64] if cpu else [64, 128, 256])
    a.seqlens = a.seqlens or ([128, 256] if cpu else [512, 1024, 2048, 4096, 8192, 16384])
    a.tokens = a.tokens or (256 if cpu else 16384)
    a.hidden = a.hidden or (128 if cpu else 2048)
    a.rep_ms = a.rep_ms if a.rep_ms is not None else (20.0 if cpu else 100.0)
    a.settle_ms = a.settle_ms if a.settle_ms is not None else (20.0 if cpu else 300.0)
    return a


# ------------------------------------------------------------------------------------------------
# Output
# ------------------------------------------------------------------------------------------------


def fmt_tf(slot: dict) -> str:
    tf = slot.get("tflops")
    if tf is None:
        return "n/a"
    return f"{tf:.1f}" if tf >= 10 else f"{tf:.3g}"  # the CPU smoke test's numbers are small


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


def fmt_host(slot: dict) -> str:
    us = slot.get("host_us")
    return "n/a" if us is None else f"{us:.1f}"


def read_probe(torch, gib: float) -> dict:
    """GB/s of a float32 sum over a bf16 tensor of gib GiB (one pass over it): the best of 40
    calls, each between CUDA events."""
    n = int(gib * 2 ** 30) // 2
    x = torch.ones(n, dtype=torch.bfloat16, device="cuda")
    torch.sum(x, dtype=torch.float32)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(40):
        start.record()
        torch.sum(x, dtype=torch.float32)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    best = min(times)
    del x
    torch.cuda.empty_cache()
    return {"bytes": 2 * n, "best_ms": best, "gbs": 2 * n / (best * 1e-3) / 1e9,
            "how": "torch.sum(bf16, dtype=float32), best of 40 calls"}


def print_table(results: list[dict], peers, kv_rate: bool, host_time: bool,
                read_gbs: float | None = None) -> None:
    head = ["hdim", "seqlen", "causal", "pass", "ours TFLOP/s"]
    head += [f"{label} TFLOP/s" for _, label, _ in peers]
    head += [f"ours/{label}" for _, label, _ in peers]
    if kv_rate:
        head += ["ours K+V GB/s"] + (["%bw"] if read_gbs else [])
    if host_time:
        head += ["ours host us"] + [f"{label} host us" for _, label, _ in peers]
    head += ["kernel (tile_m x tile_n)"]
    rows = []
    for r in results:
        s = f"{r['seqlen_q']}x{r['seqlen']}" if r["seqlen_q"] != r["seqlen"] else str(r["seqlen"])
        row = [str(r["hdim"]), s, "yes" if r["causal"] else "no", r["pass"], fmt_tf(r["ours"])]
        row += [fmt_tf(r[key]) for key, _, _ in peers]
        row += [fmt_ratio(r["ours"], r[key]) for key, _, _ in peers]
        if kv_rate:
            ms = r["ours"].get("ms")
            gbs = r["kv_bytes"] / (ms * 1e-3) / 1e9 if ms else None
            row += [f"{gbs:.3g}" if gbs else "n/a"]
            if read_gbs:
                row += [f"{100 * gbs / read_gbs:.0f}%" if gbs else "n/a"]
        if host_time:
            row += [fmt_host(r["ours"])] + [fmt_host(r[key]) for key, _, _ in peers]
        row += [kernel_cell(r["ours"])]
        rows.append(row)
    widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, h in enumerate(head)]

    def line(cells):
        return "  ".join(c.rjust(w) if i < len(cells) - 1 else c
                         for i, (c, w) in enumerate(zip(cells, widths)))

    print(line(head))
    print("-" * len(line(head)))
    for row in rows:
        print(line(row))
    seen = set()  # peers that could not run, with why (once per distinct reason)
    for r in results:
        for key, label, _ in peers:
            e = r[key].get("error")
            if e and (label, e) not in seen:
                seen.add((label, e))
                print(f"n/a: {label} at hdim {r['hdim']} seqlen {r['seqlen']} causal "
                      f"{int(r['causal'])} {r['pass']}: {e}")


def print_kernel_times(results: list[dict], peers) -> None:
    for r in results:
        for key, label in [("ours", "ours")] + [(k, lab) for k, lab, _ in peers]:
            ks = r.get(key, {}).get("kernels")
            if not ks:
                continue
            ms = r[key].get("ms")
            timed = f", timed {ms * 1e3:.1f} us" if ms else ""
            print(f"kernels hd{r['hdim']} s{r['seqlen']} causal {int(r['causal'])} {r['pass']} "
                  f"{label}: {sum(k['us'] for k in ks):.1f} us on the GPU a call{timed}")
            for k in ks:
                print(f"  {k['us']:9.1f} us  x{k['count']:.0f}  {k['name'][:110]}")


def print_problems(problems: list[dict]) -> None:
    """Each distinct problem once, with the shapes it happened at."""
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
        c = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                           capture_output=True, text=True, timeout=10)
        if c.returncode == 0:
            d = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
            dirty = d.returncode == 0 and d.stdout.strip()
            return c.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def metadata(dv, fa, desc, args) -> dict:
    torch = dv.torch
    lib = getattr(fa, "library", None)
    m = {
        "tool": "bench/peer.py",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(args.commit),
        "host": platform.node(),
        "python": platform.python_version(),
        "argv": sys.argv[1:],
        "device": args.device,
        "torch": torch.__version__,
        "library": {"path": lib().path if lib else os.environ.get("FLASHATTN_LIBRARY"),
                    "version": fa.version(), "backend_requested": dv.backend,
                    "backend": dataclasses.asdict(desc)},
        "peers": [{"key": k, "label": lab, "sdpa_backend": str(b)} for k, lab, b in dv.peers],
        "dtype": "bf16",
        "layout": "q, k, v, out, dout: (batch, seqlen, heads, head_dim) contiguous; SDPA gets "
                  "transpose(1, 2) views of the same memory (K/V expanded to every query head "
                  "for GQA); lse float32 (batch, heads, seqlen_q)",
        "flops": "forward 4*B*H*S*S*D, halved when causal; backward 2.5x forward",
        "tokens": args.tokens, "hidden": args.hidden, "batch": args.batch, "heads": args.heads,
        "kv_heads": args.kv_heads, "seqlen_q": args.seqlen_q,
        "check": bool(args.check), "tol_rel_l2": args.tol, "seed": args.seed,
        "deterministic": bool(args.deterministic), "kernel_family": args.kernel_family,
        "workspace": not args.no_workspace,
        "timing": (f"back-to-back calls on torch's current stream, about {args.rep_ms:g} ms "
                   f"between two {'CUDA events' if dv.cuda else 'wall-clock readings'}, time / "
                   f"calls; per shape one untimed call of each implementation, {args.settle_ms:g} "
                   f"ms of untimed calls of all in turn, then {args.rounds} rounds in rotated "
                   f"order, the median counts; inputs not rotated, L2 not flushed"
                   + ("; ms_do_bench: triton.testing.do_bench median" if args.do_bench else "")),
    }
    if dv.cuda:
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
            "cudnn": f"{cudnn_v // 10000}.{cudnn_v // 100 % 100}.{cudnn_v % 100}" if cudnn_v else None,
            "triton": dv.triton.__version__ if dv.triton else None,
        })
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,"
                                  "power.limit", "--format=csv,noheader", "-i", str(dev)],
                                 capture_output=True, text=True, timeout=20)
            if smi.returncode == 0:
                m["nvidia_smi"] = smi.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    else:
        m.update({"cpu": platform.processor() or platform.machine(),
                  "torch_threads": torch.get_num_threads(),
                  "omp_num_threads": os.environ.get("OMP_NUM_THREADS")})
    return m


def write_json(path: str, meta: dict, results: list[dict], problems: list[dict], complete: bool):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"meta": meta, "complete": complete, "problems": problems, "results": results},
                  f, indent=1)
    os.replace(tmp, path)


# ------------------------------------------------------------------------------------------------
# Main
# ------------------------------------------------------------------------------------------------


def import_binding():
    try:
        import flashattn
    except ImportError:
        sys.path.insert(0, os.path.join(REPO, "python"))
        import flashattn
    return flashattn


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.lib:  # the binding loads the library on first use; plugins sit beside it
        os.environ["FLASHATTN_LIBRARY"] = os.path.abspath(args.lib)
    sys.path.insert(0, HERE)
    import peer_run

    fa = import_binding()
    dv = peer_run.Device(args)
    if dv.cuda and not dv.torch.cuda.is_available():
        print("peer.py: torch sees no CUDA device", file=sys.stderr)
        return 1
    desc = next((d for d in fa.backend_info() if d.name == dv.backend), None)
    if desc is None:
        print(f"peer.py: the library does not know a backend named {dv.backend}", file=sys.stderr)
        return 1
    if desc.available:
        print(f"flashattn-c {fa.version()}: backend {dv.backend} available; {desc.devices}; "
              f"arch {desc.arch}; kernel families {','.join(desc.kernel_families)}")
    else:
        print(f"backend {dv.backend}: NOT available: {desc.reason} (peers are still timed; "
              f"ours is n/a)")
    meta = metadata(dv, fa, desc, args)
    if dv.cuda:
        print(f"GPU {meta['gpu']} ({meta['gpu_sms']} SMs), torch {meta['torch']}, CUDA "
              f"{meta['cuda_runtime_torch']}, cuDNN {meta['cudnn']}, commit {meta['commit']}")

    pairs = QUICK if args.quick else [(d, s) for d in args.hdims for s in args.seqlens]
    shapes = []
    for d, s in pairs:
        for c in args.causal:
            b = args.batch or max(1, args.tokens // s)
            h = args.heads or max(1, args.hidden // d)
            hkv = args.kv_heads or h
            if h % hkv:
                print(f"peer.py: {h} heads are not a multiple of --kv-heads {hkv}", file=sys.stderr)
                return 2
            shapes.append(peer_run.Shape(b, args.seqlen_q or s, s, h, hkv, d, bool(c)))

    probes = []

    def probe(when):
        if dv.cuda and args.seqlen_q is not None and args.read_probe_gib > 0:
            try:
                r = read_probe(dv.torch, args.read_probe_gib)
            except Exception as e:  # noqa: BLE001 (out of memory: no probe, said so)
                r = {"error": peer_run.fmt_err(e)}
            r["when"] = when
            probes.append(r)
            meta["read_probe"] = probes
            print(f"read probe ({when}): " + (f"{r['gbs']:.0f} GB/s ({r['how']}, "
                                               f"{r['bytes'] / 2 ** 30:.1f} GiB)"
                                               if "gbs" in r else r["error"]), flush=True)

    probe("before")
    results, problems = [], []
    for i, sh in enumerate(shapes):
        print(f"[{i + 1}/{len(shapes)}] {sh.label()}", flush=True)
        try:
            recs, probs = peer_run.run_shape(dv, fa, sh)
        except Exception as e:  # noqa: BLE001 (a shape that breaks the harness: report, go on)
            traceback.print_exc()
            problems.append({"shape": sh.label(), "problem": f"harness error: "
                                                             f"{peer_run.fmt_err(e)}"})
            continue
        finally:
            if dv.cuda:
                dv.torch.cuda.empty_cache()
        for r in recs:
            cells = [f"ours {fmt_tf(r['ours'])}"]
            cells += [f"{label} {fmt_tf(r[key])}" for key, label, _ in dv.peers]
            kc = kernel_cell(r["ours"])
            print(f"  {r['pass']}: TFLOP/s " + ", ".join(cells) + (f"; {kc}" if kc else ""),
                  flush=True)
        results += recs
        problems += probs
        if args.json:
            write_json(args.json, meta, results, problems, complete=False)

    probe("after")
    rates = sorted(r["gbs"] for r in probes if "gbs" in r)
    read_gbs = (rates[0] + rates[-1]) / 2 if rates else None
    print()
    print_kernel_times(results, dv.peers)
    print_table(results, dv.peers, kv_rate=args.seqlen_q is not None, host_time=args.host_time,
                read_gbs=read_gbs)
    if read_gbs:
        print(f"%bw: ours K+V GB/s over the read probes' median, {read_gbs:.0f} GB/s")
    if args.json:
        write_json(args.json, meta, results, problems, complete=True)
        print(f"wrote {args.json}")
    if args.png:
        try:
            import plot_sweep

            plot_sweep.plot({"meta": meta, "results": results}, args.png)
            print(f"wrote {args.png}")
        except Exception as e:  # noqa: BLE001
            problems.append({"shape": "", "problem": f"--png {args.png}: {peer_run.fmt_err(e)}"})
    fa.release()
    if problems:
        print_problems(problems)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
