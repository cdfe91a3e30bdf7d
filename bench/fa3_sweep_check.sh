#!/usr/bin/env bash
# fa3_sweep_check.sh: one device call for the record of a build: bench/fa3_sweeps.sh (three sweep
# runs of the forward on build/lead and their medians, straight into $OUT), then
# tests/gpu/h200_check.sh on the same build with what is left of the call's time (CALL_S, default
# 570 s, minus the sweeps), its logs tarred into $OUT/check.tgz whether or not it finished (the
# device returns only a few loose files, and nothing from a call that runs past 600 s: session
# 24 lost one that way). The full check (~425-500 s with 24 fa3 configurations) no longer fits
# beside the sweeps (peer_cuda.py's rotated timing rounds): set FA3_CHECK_CONFIGS to the planned
# configurations here and give the full check a call of its own.
#
#   COMMIT=<sha> FA3_CHECK_CONFIGS="hd64_3x128_opdqo3rxtl ..." bash bench/fa3_sweep_check.sh
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/out}
bash bench/fa3_sweeps.sh
left=$((${CALL_S:-570} - SECONDS))
work=$(mktemp -d)
if [ "$left" -gt 60 ]; then
  # shellcheck disable=SC2086 # CHECK_ARGS is a list of options
  OUT=$work timeout -s INT "$left" bash tests/gpu/h200_check.sh --build build/lead ${CHECK_ARGS:-} \
    > "$work/check.log" 2>&1
  echo "h200_check rc=$? at ${SECONDS}s (limit ${left}s)" | tee -a "$work/check.log"
  tail -n 40 "$work/check.log"
else
  echo "h200_check not run: ${left}s left of CALL_S"
fi
tar -czf "$OUT/check.tgz" -C "$work" . && rm -rf "$work"
