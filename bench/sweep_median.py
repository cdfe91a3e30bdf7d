#!/usr/bin/env python3
"""sweep_median.py: combines several runs of bench/peer_cuda.py (JSON, same shapes) into one.

Per shape, each implementation's median TFLOP/s over the runs (ours and every peer), and the range
of the per-run ratio ours/cuDNN, so that one noisy run neither makes nor breaks a shape. Writes the
median JSON (peer_cuda.py's format: bench/plot_sweep.py draws it) and prints the RESULTS.md table.
A shape any run failed to check, or ran with another kernel than in the first run, is an error.

    python3 bench/sweep_median.py run1.json run2.json run3.json --commit 2d1ed9f -o v7.json
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys


def _key(r: dict) -> tuple:
    return (r["pass"], r["hdim"], r["seqlen"], r["causal"])


def _tflops(entry: dict | None) -> float | None:
    return entry.get("tflops") if isinstance(entry, dict) else None


def combine(runs: list[dict], commit: str | None) -> tuple[dict, list[str]]:
    """The median document and the table's lines."""
    shapes = [_key(r) for r in runs[0]["results"]]
    by_run = [{_key(r): r for r in run["results"]} for run in runs]
    out = copy.deepcopy(runs[0])
    rows = []
    for i, key in enumerate(shapes):
        per = [b.get(key) for b in by_run]
        if any(p is None for p in per):
            raise SystemExit(f"sweep_median: shape {key} missing from a run")
        if not all(p.get("check_ok", True) for p in per):
            raise SystemExit(f"sweep_median: shape {key} failed its check in a run")
        kernels = {p["ours"].get("kernel") for p in per}
        if len(kernels) != 1:
            raise SystemExit(f"sweep_median: shape {key} ran different kernels: {sorted(kernels)}")
        res = out["results"][i]
        ratios = []
        for impl in ["ours"] + [k for k in ("fa2", "cudnn") if k in res]:
            vals = [_tflops(p.get(impl)) for p in per]
            if any(v is None for v in vals):
                continue
            res[impl]["tflops"] = statistics.median(vals)
            res[impl]["ms"] = statistics.median(p[impl]["ms"] for p in per)
        for p in per:
            o, c = _tflops(p.get("ours")), _tflops(p.get("cudnn"))
            if o and c:
                ratios.append(o / c)
        ours = res["ours"]["tflops"]
        fa2 = _tflops(res.get("fa2"))
        cud = _tflops(res.get("cudnn"))
        rows.append(
            "| %d | %d | %dx%d | %s | %dx%d | %.0f | %s | %s | %s | %s | %s |"
            % (
                res["hdim"], res["seqlen"], res["batch"], res["heads"],
                "yes" if res["causal"] else "no", res["ours"]["tile_m"], res["ours"]["tile_n"],
                ours, "%.0f" % fa2 if fa2 else "n/a", "%.0f" % cud if cud else "n/a",
                "%.2f" % (ours / fa2) if fa2 else "n/a", "%.2f" % (ours / cud) if cud else "n/a",
                "%.2f-%.2f" % (min(ratios), max(ratios)) if ratios else "n/a",
            )
        )
    out["meta"]["note"] = "medians over %d runs of each implementation, per shape%s" % (
        len(runs), "; commit " + commit if commit else "")
    if commit:
        out["meta"]["commit"] = commit
    return out, rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="peer_cuda.py JSON files of the same sweep")
    ap.add_argument("-o", "--output", required=True, help="the median JSON to write")
    ap.add_argument("--commit", help="the commit the runs measured (the device's copy may say otherwise)")
    args = ap.parse_args()
    runs = [json.load(open(p)) for p in args.runs]
    doc, rows = combine(runs, args.commit)
    with open(args.output, "w") as f:
        json.dump(doc, f, indent=1)
    print("| head_dim | seqlen | batch x heads | causal | tile | fwd ours | fwd FA2 | fwd cuDNN "
          "| ours/FA2 | ours/cuDNN | ours/cuDNN per run |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
