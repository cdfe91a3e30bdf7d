#!/usr/bin/env bash
# fa3_ab_sweep.sh: one device call for a plan change: the A/Bs of AB_PLAN (bench/fa3_check_ab.sh,
# no checks) and then bench/fa3_sweeps.sh (three sweep runs of the forward on build/lead and their
# medians; ~100 s for a 3-library, 3-shape plan and the sweeps).
#
#   COMMIT=<sha> AB_PLAN=bench/ab_plans/<file> bash bench/fa3_ab_sweep.sh
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/out}
CHECK_ARGS=none ROUNDS=${ROUNDS:-3} BUDGET_S=${BUDGET_S:-300} bash bench/fa3_check_ab.sh
bash bench/fa3_sweeps.sh
