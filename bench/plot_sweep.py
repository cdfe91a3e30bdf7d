#!/usr/bin/env python3
"""plot_sweep.py: draws the JSON of bench/peer_cuda.py as a PNG, like FlashAttention's README charts.

One subplot per (pass, causal, head_dim): grouped bars of TFLOP/s against seqlen, one bar per
implementation (ours, then the peers the JSON names: FA2 and cuDNN on CUDA), the value on each bar,
"n/a" where an implementation could not run the shape. All subplots share the y axis.

    python3 bench/plot_sweep.py sweep.json              # writes sweep.png
    python3 bench/plot_sweep.py sweep.json -o chart.png
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap

COLORS = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e"]  # ours first, in red


def _seq_label(s: int) -> str:
    return f"{s // 1024}k" if s >= 1024 and s % 1024 == 0 else str(s)


def plot(data: dict, png: str, title: str | None = None) -> None:
    """Draws data (peer_cuda.py's JSON: {"meta": ..., "results": [...]}) into png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    meta = data.get("meta", {})
    results = data.get("results", [])
    if not results:
        raise ValueError("no results to plot")
    lib_backend = meta.get("library", {}).get("backend_requested", "")
    impls = [("ours", f"flashattn-c ({lib_backend})" if lib_backend else "flashattn-c")]
    impls += [(p["key"], p["label"]) for p in meta.get("peers", [])]
    if len(impls) == 1:  # a JSON without peer metadata: take the keys the records carry
        skip = {"ours", "checks"}
        impls += [(k, k) for k, v in results[0].items() if isinstance(v, dict) and k not in skip]

    passes = [p for p in ("fwd", "bwd") if any(r["pass"] == p for r in results)]
    causals = sorted({bool(r["causal"]) for r in results})
    hdims = sorted({int(r["hdim"]) for r in results})
    panels = [(p, c, d) for p in passes for c in causals for d in hdims
              if any(r["pass"] == p and bool(r["causal"]) == c and int(r["hdim"]) == d for r in results)]
    ncols = len(hdims)
    nrows = (len(panels) + ncols - 1) // ncols
    ymax = max([r[k]["tflops"] for r in results for k, _ in impls
                if isinstance(r.get(k), dict) and r[k].get("tflops")] or [1.0])

    fig, axes = plt.subplots(nrows, ncols, figsize=(5.6 * ncols, 3.9 * nrows), squeeze=False,
                             sharey=True)
    width = 0.8 / len(impls)
    for idx, (p, c, d) in enumerate(panels):
        ax = axes[idx // ncols][idx % ncols]
        rows = sorted((r for r in results
                       if r["pass"] == p and bool(r["causal"]) == c and int(r["hdim"]) == d),
                      key=lambda r: int(r["seqlen"]))
        seqlens = [int(r["seqlen"]) for r in rows]
        for j, (key, label) in enumerate(impls):
            for i, r in enumerate(rows):
                x = i + (j - (len(impls) - 1) / 2) * width
                slot = r.get(key) or {}
                tf = slot.get("tflops")
                if tf:
                    ax.bar(x, tf, width, color=COLORS[j % len(COLORS)])
                    value = f"{tf:.0f}" if ymax >= 10 else f"{tf:.2g}"
                    ax.text(x, tf + ymax * 0.01, value, ha="center", va="bottom", fontsize=6.5,
                            rotation=90)
                else:
                    ax.text(x, ymax * 0.01, "n/a", ha="center", va="bottom", fontsize=6.5,
                            rotation=90, color=COLORS[j % len(COLORS)])
        ax.set_xticks(range(len(seqlens)))
        ax.set_xticklabels([_seq_label(s) for s in seqlens])
        heads = sorted({int(r["heads"]) for r in rows})
        ax.set_title(f"{'Forward' if p == 'fwd' else 'Backward'}, "
                     f"{'causal' if c else 'non-causal'}, head_dim {d} "
                     f"({'/'.join(map(str, heads))} heads)", fontsize=9.5)
        ax.set_xlabel("sequence length", fontsize=8.5)
        if idx % ncols == 0:
            ax.set_ylabel("TFLOP/s", fontsize=8.5)
        ax.set_ylim(0, ymax * 1.18)
        ax.grid(axis="y", alpha=0.3)
        ax.tick_params(labelsize=8)
    for idx in range(len(panels), nrows * ncols):
        axes[idx // ncols][idx % ncols].set_visible(False)

    if title is None:
        bits = [meta.get("gpu") or meta.get("cpu") or "", meta.get("dtype", "bf16")]
        if meta.get("torch"):
            bits.append(f"torch {meta['torch']}")
        if meta.get("cudnn"):
            bits.append(f"cuDNN {meta['cudnn']}")
        if meta.get("commit"):
            bits.append(f"commit {meta['commit']}")
        if meta.get("date"):
            bits.append(meta["date"][:10])
        title = "Attention speed: " + ", ".join(b for b in bits if b)
    title = textwrap.fill(title, width=60 * ncols)
    height = fig.get_figheight()
    top = 1 - (0.45 + 0.22 * title.count("\n") + 0.3) / height  # title lines, then the legend
    fig.suptitle(title, fontsize=11, y=1 - 0.12 / height, va="top")
    handles = [Patch(color=COLORS[j % len(COLORS)], label=label) for j, (_, label) in enumerate(impls)]
    fig.legend(handles=handles, loc="upper center", ncol=len(impls), fontsize=9, frameon=False,
               bbox_to_anchor=(0.5, top + 0.32 / height))
    fig.tight_layout(rect=(0, 0, 1, top))
    fig.savefig(png, dpi=130)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Draw bench/peer_cuda.py's JSON as a PNG bar chart.")
    ap.add_argument("json", help="the file written by peer_cuda.py --json")
    ap.add_argument("-o", "--output", default=None, help="PNG to write (default: the JSON's name, .png)")
    ap.add_argument("--title", default=None, help="chart title (default: from the JSON's metadata)")
    a = ap.parse_args(argv)
    with open(a.json) as f:
        data = json.load(f)
    out = a.output or os.path.splitext(a.json)[0] + ".png"
    plot(data, out, a.title)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
