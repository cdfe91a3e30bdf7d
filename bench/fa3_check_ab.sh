#!/usr/bin/env bash
# fa3_check_ab.sh: one device call for a change to the fa3 forward kernels: a hang check of the
# dynamic schedule (cuda_smoke with the persistent grid at one block), the CUDA checks
# (tests/gpu/h200_check.sh with CHECK_ARGS), a same-run A/B of two or more builds
# (bench/h200_ab.sh: LIBS, ROUNDS, AB_ARGS) and, with NCU_SHAPES set, the new build's counters
# beside cuDNN's kernel (bench/ncu_compare.sh). Everything goes to $OUT/run.tgz (the device
# returns few files); the summaries print last.
#
#   LIBS="old=build/old/lib/libflashattn.so new=build/lead/lib/libflashattn.so" \
#   CHECK_ARGS="--no-sanitize --no-sass" NCU_SHAPES="128:8192:0" bash bench/fa3_check_ab.sh
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/out}
BUILD=${BUILD:-build/lead}
work=$(mktemp -d)
rc=0
FA_CUDA_FA3_GRID=1 timeout 60 "$BUILD/bin/cuda_smoke" > "$work/smoke_grid1.txt" 2>&1 || {
  echo "fa3_check_ab: cuda_smoke with FA_CUDA_FA3_GRID=1 failed or hung"
  rc=1
}
if [ $rc -eq 0 ] && [ "${CHECK_ARGS-x}" != "none" ]; then
  # shellcheck disable=SC2086 # CHECK_ARGS is a list of options
  OUT=$work bash tests/gpu/h200_check.sh --build "$BUILD" ${CHECK_ARGS:-} > "$work/check.log" 2>&1 ||
    rc=1
fi
if [ $rc -eq 0 ] && [ -n "${LIBS:-}" ]; then
  OUT=$work bash bench/h200_ab.sh > /dev/null 2>&1 || rc=1
fi
if [ $rc -eq 0 ] && [ -n "${NCU_SHAPES:-}" ]; then
  # shellcheck disable=SC2086 # NCU_SHAPES is a list
  OUT=$work bash bench/ncu_compare.sh --lib "$BUILD/lib/libflashattn.so" --pass fwd --ours fa3_fwd \
    --peer 'cudnn|sdpa|fprop' $NCU_SHAPES > "$work/ncu.txt" 2>&1
fi
tar -czf "$OUT/run.tgz" -C "$work" .
[ -f "$work/check.log" ] && tail -n 30 "$work/check.log"
[ -f "$work/ncu.txt" ] && grep -E "^==|tensor_cycles_active.avg|gpu__time|sm__cycles_elapsed.avg|issue_active|stall_(wait|barrier)" "$work/ncu.txt"
[ -f "$work/${AB_TAG:-ab}.txt" ] && cat "$work/${AB_TAG:-ab}.txt"
rm -rf "$work"
echo "fa3_check_ab: rc=$rc"
exit $rc
