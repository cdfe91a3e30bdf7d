#!/usr/bin/env python3
"""plot_sweep.py: draws a sweep's JSON as a PNG bar chart, like FlashAttention's README charts.

Reads either bench/peer.py's JSON (ours and the peers it names: FA2 and cuDNN on CUDA) or
fa-bench's (--json: ours alone). One panel per (pass, causal, head_dim): grouped bars of TFLOP/s
against seqlen, one bar per implementation, the value on each bar, "n/a" where an implementation
could not run the shape. All panels share the y axis. Needs matplotlib.

    python3 bench/plot_sweep.py sweep.json              # writes sweep.png
    python3 bench/plot_sweep.py sweep.json -o chart.png --title "..."
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap

COLORS = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e"]  # ours first, in red
# Small files: 1320 pixels wide for three head dims, a 64-colour palette (_shrink).
PANEL_W, PANEL_H, DPI = 4.4, 3.0, 100


def _seq_label(s: int) -> str:
    return f"{s // 1024}k" if s >= 1024 and s % 1024 == 0 else str(s)


def from_fa_bench(data: dict) -> dict:
    """fa-bench's JSON in peer.py's form: one record per shape and pass, ours only."""
    results = []
    for r in data.get("results", []):
        ours = {"kernel": r.get("kernel", ""), "tile_m": r.get("tile_m"), "tile_n": r.get("tile_n")}
        if r.get("ok"):
            ours.update({"tflops": r["tflops"], "ms": r["ms_median"]})
        else:
            ours["error"] = r.get("error", "")
        results.append({"pass": r["pass"], "causal": bool(r["causal"]), "hdim": r["head_dim"],
                        "seqlen": r["seqlen"], "batch": r["batch"], "heads": r["heads"],
                        "ours": ours})
    # The label names the backend asked for and, when that was AUTO, the ones that ran.
    backend = data.get("backend_requested", "")
    ran = sorted({r["backend"] for r in data.get("results", [])
                  if r.get("ok") and r.get("backend")})
    if ran and backend in ("", "auto"):
        backend = f"{backend}: {', '.join(ran)}" if backend else ", ".join(ran)
    meta = {"tool": "fa-bench", "dtype": data.get("dtype"), "version": data.get("version"),
            "library": {"backend_requested": backend}, "peers": []}
    return {"meta": meta, "results": results}


def normalise(data: dict) -> dict:
    if data.get("tool") == "fa-bench" or (data.get("results") and "head_dim" in data["results"][0]):
        return from_fa_bench(data)
    if "results" not in data:
        raise ValueError("not a sweep JSON of bench/peer.py or fa-bench (no \"results\")")
    return data


def plot(data: dict, png: str, title: str | None = None) -> None:
    """Draws data (peer.py's or fa-bench's JSON) into png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    data = normalise(data)
    meta = data.get("meta", {})
    results = data.get("results", [])
    if not results:
        raise ValueError("no results to plot")
    lib_backend = meta.get("library", {}).get("backend_requested", "")
    impls = [("ours", f"flashattn-c ({lib_backend})" if lib_backend else "flashattn-c")]
    impls += [(p["key"], p["label"]) for p in meta.get("peers", [])]

    passes = [p for p in ("fwd", "bwd") if any(r["pass"] == p for r in results)]
    causals = sorted({bool(r["causal"]) for r in results})
    hdims = sorted({int(r["hdim"]) for r in results})
    panels = [(p, c, d) for p in passes for c in causals for d in hdims
              if any(r["pass"] == p and bool(r["causal"]) == c and int(r["hdim"]) == d
                     for r in results)]
    ncols = len(hdims)
    nrows = (len(panels) + ncols - 1) // ncols
    ymax = max([r[k]["tflops"] for r in results for k, _ in impls
                if isinstance(r.get(k), dict) and r[k].get("tflops")] or [1.0])

    fig, axes = plt.subplots(nrows, ncols, figsize=(PANEL_W * ncols, PANEL_H * nrows),
                             squeeze=False, sharey=True)
    width = 0.8 / len(impls)
    for idx, (p, c, d) in enumerate(panels):
        ax = axes[idx // ncols][idx % ncols]
        rows = sorted((r for r in results
                       if r["pass"] == p and bool(r["causal"]) == c and int(r["hdim"]) == d),
                      key=lambda r: int(r["seqlen"]))
        for j, (key, _) in enumerate(impls):
            for i, r in enumerate(rows):
                x = i + (j - (len(impls) - 1) / 2) * width
                tf = (r.get(key) or {}).get("tflops")
                color = COLORS[j % len(COLORS)]
                if tf:
                    ax.bar(x, tf, width, color=color)
                    value = f"{tf:.0f}" if ymax >= 10 else f"{tf:.2g}"
                    ax.text(x, tf + ymax * 0.01, value, ha="center", va="bottom", fontsize=6,
                            rotation=90)
                else:
                    ax.text(x, ymax * 0.01, "n/a", ha="center", va="bottom", fontsize=6,
                            rotation=90, color=color)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([_seq_label(int(r["seqlen"])) for r in rows])
        heads = sorted({int(r["heads"]) for r in rows})
        ax.set_title(f"{'Forward' if p == 'fwd' else 'Backward'}, "
                     f"{'causal' if c else 'non-causal'}, hd {d} "
                     f"({'/'.join(map(str, heads))} heads)", fontsize=8.5)
        ax.set_xlabel("sequence length", fontsize=7.5)
        if idx % ncols == 0:
            ax.set_ylabel("TFLOP/s", fontsize=7.5)
        ax.set_ylim(0, ymax * 1.2)
        ax.grid(axis="y", alpha=0.3)
        ax.tick_params(labelsize=7)
    for idx in range(len(panels), nrows * ncols):
        axes[idx // ncols][idx % ncols].set_visible(False)

    if title is None:
        bits = [meta.get("gpu") or meta.get("cpu") or "", meta.get("dtype") or "bf16"]
        if meta.get("torch"):
            bits.append(f"torch {meta['torch']}")
        if meta.get("cudnn"):
            bits.append(f"cuDNN {meta['cudnn']}")
        if meta.get("commit"):
            bits.append(f"commit {meta['commit']}")
        if meta.get("date"):
            bits.append(meta["date"][:10])
        title = "Attention speed: " + ", ".join(b for b in bits if b)
    title = textwrap.fill(title, width=50 * ncols)
    height = fig.get_figheight()
    top = 1 - (0.35 + 0.2 * title.count("\n") + 0.2) / height  # title lines, then the legend
    fig.suptitle(title, fontsize=10, y=1 - 0.1 / height, va="top")
    handles = [Patch(color=COLORS[j % len(COLORS)], label=label)
               for j, (_, label) in enumerate(impls)]
    fig.legend(handles=handles, loc="upper center", ncol=len(impls), fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, top + 0.22 / height))
    fig.tight_layout(rect=(0, 0, 1, top))
    fig.savefig(png, dpi=DPI)
    plt.close(fig)
    _shrink(png)


def _shrink(png: str) -> None:
    """Rewrites png with a 64-colour palette (a third of the bytes; the chart has a few colours
    and their anti-aliasing)."""
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(png) as im:
        small = im.convert("RGB").quantize(colors=64)
    small.save(png, optimize=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Draw bench/peer.py's or fa-bench's JSON as a PNG.")
    ap.add_argument("json", help="the file written by peer.py --json or fa-bench --json")
    ap.add_argument("-o", "--output", default=None, help="PNG to write (default: the JSON's name)")
    ap.add_argument("--title", default=None, help="chart title (default: from the metadata)")
    a = ap.parse_args(argv)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("plot_sweep.py: matplotlib is not installed (pip install matplotlib)",
              file=sys.stderr)
        return 1
    try:
        with open(a.json) as f:
            data = json.load(f)
        out = a.output or os.path.splitext(a.json)[0] + ".png"
        plot(data, out, a.title)
    except (OSError, ValueError, KeyError) as e:
        print(f"plot_sweep.py: {a.json}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
