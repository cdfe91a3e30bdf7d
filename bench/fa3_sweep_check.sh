#!/usr/bin/env bash
# fa3_sweep_check.sh: one device call for the record of a build: three sweep runs of the forward
# (bench/peer_cuda.py, the issue-5 table) on build/lead, then the full tests/gpu/h200_check.sh on
# the same build (~530 s in all with 23 fa3 configurations). Medians: bench/sweep_median.py.
#
#   COMMIT=<sha> bash bench/fa3_sweep_check.sh
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/out}
commit=${COMMIT:-unknown}
for r in 1 2 3; do
  python3 bench/peer_cuda.py --check --lib build/lead/lib/libflashattn.so --pass fwd \
    --seqlens 1024,2048,4096,8192,16384 --commit "$commit" --json "$OUT/sweep-run$r.json" \
    > "$OUT/sweep-run$r.log" 2>&1
  echo "sweep run $r rc=$? at ${SECONDS}s"
done
mkdir -p "$OUT/c"
OUT=$OUT/c bash tests/gpu/h200_check.sh --build build/lead > "$OUT/check.log" 2>&1
echo "h200_check rc=$? at ${SECONDS}s"
tail -n 40 "$OUT/check.log"
