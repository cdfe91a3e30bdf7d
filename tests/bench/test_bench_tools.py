"""fa-bench and bench/plot_sweep.py together (CTest bench.tools).

fa-bench: a tiny CPU sweep whose rows name the kernel and tile of both passes, with a progress
line per shape on stderr (--progress 0) and a JSON record; plot_sweep.py: reads that JSON and a
peer.py JSON of bench/results, and draws both when matplotlib is installed, else says how to
install it.

    python3 test_bench_tools.py FA_BENCH PLOT_SWEEP_PY RESULTS_DIR SCRATCH_DIR
"""

from __future__ import annotations

import glob
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
from contextlib import redirect_stderr

failures = 0


def check(ok: bool, what: str) -> None:
    global failures
    print(("ok: " if ok else "FAIL: ") + what)
    failures += not ok


def main() -> int:
    fa_bench, plot_py, results_dir, scratch = sys.argv[1:5]
    os.makedirs(scratch, exist_ok=True)
    sweep_json = os.path.join(scratch, "sweep.json")
    args = [fa_bench, "--backend", "cpu", "--hdims", "32", "--seqlens", "64,128", "--batch", "1",
            "--heads", "2", "--warmup", "0", "--iters", "1", "--progress", "0", "--json",
            sweep_json]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    print(r.stdout + r.stderr)
    check(r.returncode == 0, "fa-bench's tiny sweep exits 0")
    rows = [line for line in r.stdout.splitlines() if re.match(r"^[01] +32 ", line)]
    check(len(rows) == 4, "four rows (two lengths, causal off and on)")
    check(all(re.search(r"\.fwd\..*; \S+\.bwd\..*, \d+x\d+; \d+x\d+$", row) for row in rows),
          "each row names the forward and backward kernels and both tiles")
    progress = re.findall(r"^fa-bench: shape (\d)/4 done, elapsed \d+:\d\d, ETA \d+:\d\d$",
                          r.stderr, re.M)
    check(progress == ["1", "2", "3"], "a progress line after each shape but the last")

    spec = importlib.util.spec_from_file_location("plot_sweep", plot_py)
    plot_sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plot_sweep)
    with open(sweep_json) as f:
        ours = plot_sweep.normalise(json.load(f))
    check(len(ours["results"]) == 8 and all(x["ours"].get("tflops") for x in ours["results"]),
          "plot_sweep reads fa-bench's JSON: 8 records with TFLOP/s")
    check(ours["meta"]["library"]["backend_requested"] == "cpu", "the label names backend cpu")
    peers = sorted(glob.glob(os.path.join(results_dir, "*.json")))
    check(bool(peers), f"peer.py JSON files in {results_dir}")
    peer_data = None
    if peers:
        with open(peers[0]) as f:
            peer_data = plot_sweep.normalise(json.load(f))
        check(bool(peer_data["results"]) and bool(peer_data["meta"].get("peers")),
              f"plot_sweep reads peer.py's JSON ({os.path.basename(peers[0])})")

    try:
        import matplotlib  # noqa: F401

        have_mpl = True
    except ImportError:
        have_mpl = False
    if have_mpl:
        for name, src in (("ours", sweep_json), ("peer", peers[0] if peers else None)):
            if not src:
                continue
            png = os.path.join(scratch, name + ".png")
            rc = plot_sweep.main([src, "-o", png])
            check(rc == 0 and os.path.getsize(png) > 1000, f"plot_sweep draws {name} into {png}")
    else:
        err = io.StringIO()
        with redirect_stderr(err):
            rc = plot_sweep.main([sweep_json, "-o", os.path.join(scratch, "x.png")])
        check(rc == 1 and "pip install matplotlib" in err.getvalue(),
              "without matplotlib, plot_sweep says 'pip install matplotlib'")
        print("note: matplotlib is not installed: the charts were not drawn")
    print(f"{'PASS' if not failures else 'FAIL'}: {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
