#!/usr/bin/env python3
"""Read the per-instruction table that bench/ncu_source.sh writes (ncu_source_<tag>.csv.gz) on
the development machine and say where the kernel's warps wait:

  - stall samples by opcode, with the main stall reasons of each (percent of all samples);
  - samples per region between the kernel's block barriers (BAR.SYNC), with the opcodes there
    and how often each executed, which separates a kernel's phases (e.g. the backward's
    Sᵀ/dPᵀ phase from its dV/dQ/dK products);
  - the instructions with the most samples of one reason (--top REASON, e.g. stall_mio).

  python3 bench/ncu_stalls.py ncu_source_bwd_hd256_s4096_c0.csv.gz [--top stall_mio] [-n 20]
"""
import argparse
import collections
import csv
import gzip

REASONS = ("stall_mio", "stall_short_sb", "stall_wait", "stall_barrier", "stall_long_sb",
           "stall_math", "stall_lg", "stall_selected", "stall_not_selected",
           "stall_branch_resolving", "stall_dispatch", "stall_no_inst")
ALL = "Warp Stall Sampling (All Samples)"


def num(x):
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0


def opcode(source):
    words = source.strip().split()
    if not words:
        return ""
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return op.split(".")[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("table", help="ncu_source_<tag>.csv.gz from bench/ncu_source.sh")
    ap.add_argument("--top", default="", help="list the instructions with most samples of this")
    ap.add_argument("-n", type=int, default=15, help="rows per list")
    args = ap.parse_args()
    rows = list(csv.reader(gzip.open(args.table, "rt")))
    head, data = rows[1], rows[2:]
    ix = {h: i for i, h in enumerate(head)}
    total = sum(num(r[ix[ALL]]) for r in data) or 1.0
    pct = lambda v: 100.0 * v / total
    print(f"{total:.0f} samples, {len(data)} instructions")

    by_op = collections.defaultdict(collections.Counter)
    for r in data:
        o = opcode(r[ix["Source"]])
        by_op[o]["all"] += num(r[ix[ALL]])
        for k in REASONS:
            if k in ix:
                by_op[o][k] += num(r[ix[k]])
    print("--- samples by opcode (% of all): main reasons")
    for o, c in sorted(by_op.items(), key=lambda kv: -kv[1]["all"])[:args.n]:
        why = ", ".join(f"{k[6:]} {pct(v):.1f}" for k, v in c.most_common()
                        if k != "all" and pct(v) > 0.4)
        print(f"{o:10s} {pct(c['all']):5.1f}%  {why}")

    cuts = [i for i, r in enumerate(data) if "BAR.SYNC" in r[ix["Source"]]]
    bounds = [0] + cuts + [len(data)]
    print("--- regions between barriers: samples, then opcodes (% of all, executions / 1M)")
    for a, b in zip(bounds, bounds[1:]):
        c, n = collections.Counter(), collections.Counter()
        for r in data[a:b]:
            o = opcode(r[ix["Source"]])
            c[o] += num(r[ix[ALL]])
            n[o] += num(r[ix["Instructions Executed"]])
        s = sum(c.values())
        if pct(s) < 0.5:
            continue
        ops = ", ".join(f"{o} {pct(v):.1f} ({n[o] / 1e6:.1f}M)" for o, v in c.most_common(6))
        print(f"[{a}, {b}) {pct(s):5.1f}%  {ops}")

    if args.top:
        print(f"--- instructions with most {args.top} samples")
        order = sorted(range(len(data)), key=lambda i: -num(data[i][ix[args.top]]))
        for i in order[:args.n]:
            r = data[i]
            print(f"{i:5d} {pct(num(r[ix[args.top]])):5.2f}%  exec {r[ix['Instructions Executed']]:>9s}"
                  f"  {r[ix['Source']].strip()[:80]}")


if __name__ == "__main__":
    main()
