#!/usr/bin/env bash
# fa3_sweeps.sh: three sweep runs of the forward (bench/peer_cuda.py, the issue-5 table, every
# shape checked against SDPA-flash) on build/lead into $OUT/sweep-run{1,2,3}.json, then their
# medians (bench/sweep_median.py) into $OUT/sweep-median.json, the table printed (~60 s on the
# H200 before session 24; peer_cuda.py's three timing rounds per shape since make it ~3x that,
# not yet measured). Called by fa3_sweep_check.sh and fa3_ab_sweep.sh.
#
#   COMMIT=<sha> bash bench/fa3_sweeps.sh
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/out}
for r in 1 2 3; do
  python3 bench/peer_cuda.py --check --lib build/lead/lib/libflashattn.so --pass fwd \
    --seqlens 1024,2048,4096,8192,16384 --commit "${COMMIT:-unknown}" \
    --json "$OUT/sweep-run$r.json" > "$OUT/sweep-run$r.log" 2>&1
  echo "sweep run $r rc=$? at ${SECONDS}s"
done
python3 bench/sweep_median.py "$OUT"/sweep-run[123].json -o "$OUT/sweep-median.json" 2>&1 | tail -n 40
