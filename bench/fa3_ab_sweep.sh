#!/usr/bin/env bash
# fa3_ab_sweep.sh: one device call for a plan change: the A/Bs of AB_PLAN (bench/fa3_check_ab.sh,
# no checks) and then three sweep runs of the forward (bench/peer_cuda.py, the issue-5 table) on
# build/lead (~100 s for a 3-library, 3-shape plan and the sweeps). Medians: bench/sweep_median.py.
#
#   COMMIT=<sha> AB_PLAN=bench/ab_plans/<file> bash bench/fa3_ab_sweep.sh
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/out}
CHECK_ARGS=none ROUNDS=${ROUNDS:-3} BUDGET_S=${BUDGET_S:-300} bash bench/fa3_check_ab.sh
for r in 1 2 3; do
  python3 bench/peer_cuda.py --check --lib build/lead/lib/libflashattn.so --pass fwd \
    --seqlens 1024,2048,4096,8192,16384 --commit "${COMMIT:-unknown}" \
    --json "$OUT/sweep-run$r.json" > "$OUT/sweep-run$r.log" 2>&1
  echo "sweep run $r rc=$? at ${SECONDS}s"
done
python3 bench/sweep_median.py "$OUT"/sweep-run[123].json -o "$OUT/sweep-median.json" 2>&1 | tail -n 40
