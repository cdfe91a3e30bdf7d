#!/usr/bin/env bash
# fa3_check_ab.sh: one device call for a change to the fa3 forward kernels: a hang check of the
# dynamic schedule (cuda_smoke with the persistent grid at one block), the CUDA checks
# (tests/gpu/h200_check.sh with CHECK_ARGS), a same-run A/B of two or more builds
# (bench/h200_ab.sh: LIBS, ROUNDS, AB_ARGS) and, with NCU_SHAPES set, the new build's counters
# beside cuDNN's kernel (bench/ncu_compare.sh); AB_PLAN names a file of further A/Bs (below).
# Everything goes to $OUT/run.tgz (the device returns few files); the summaries print last. An
# A/B of the plan starts only while the call has run less than BUDGET_S seconds (default 420),
# so that the results come back within the device's 10 minutes per call.
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
# AB_PLAN: a file of further A/Bs, one per line "tag;LIBS;AB_ARGS" (# starts a comment), each
# with its own builds / forced configurations and shapes.
plan_tags=
if [ $rc -eq 0 ] && [ -n "${AB_PLAN:-}" ]; then
  while IFS=';' read -r tag libs args; do
    case $tag in '' | '#'*) continue ;; esac
    plan_tags="$plan_tags $tag"
    if [ "$SECONDS" -gt "${BUDGET_S:-420}" ]; then
      echo "fa3_check_ab: $tag skipped at ${SECONDS}s (BUDGET_S)" | tee -a "$work/skipped.txt"
      continue
    fi
    AB_TAG=$tag LIBS=$libs AB_ARGS=$args OUT=$work bash bench/h200_ab.sh < /dev/null > /dev/null 2>&1 ||
      rc=1
  done < "$AB_PLAN"
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
for tag in $plan_tags; do
  [ -f "$work/$tag.txt" ] && { echo "== $tag"; cat "$work/$tag.txt"; }
done
rm -rf "$work"
echo "fa3_check_ab: rc=$rc"
exit $rc
