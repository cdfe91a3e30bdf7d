#!/usr/bin/env bash
# fa3_sweep_check.sh: one device call for the record of a build: bench/fa3_sweeps.sh (three sweep
# runs of the forward on build/lead and their medians), then the full tests/gpu/h200_check.sh on
# the same build (~530 s in all with 23 fa3 configurations).
#
#   COMMIT=<sha> bash bench/fa3_sweep_check.sh
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/out}
bash bench/fa3_sweeps.sh
mkdir -p "$OUT/c"
OUT=$OUT/c bash tests/gpu/h200_check.sh --build build/lead > "$OUT/check.log" 2>&1
echo "h200_check rc=$? at ${SECONDS}s"
tail -n 40 "$OUT/check.log"
