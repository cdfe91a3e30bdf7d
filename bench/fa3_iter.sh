#!/usr/bin/env bash
# fa3_iter.sh: one device call of the fa3 forward's measure-change loop, from a built tree:
# correctness of the configurations under test first (tests/gpu/h200_check.sh's fa3cfg/fa3san
# steps: the conformance cases of their head dims with each forced, racecheck + synccheck), then,
# only if those passed, their same-run A/B (bench/fa3_ab.sh: every shape also checked against
# SDPA-flash, FA2 and cuDNN timed beside). The tables come last.
#
#   CHECK="hd128_2x128_opx hd64_3x128_opx" SETS="128:hd128_2x176_opp,hd128_2x128_opx" \
#     SEQLENS=1024,4096 BUILD=build/lead bash bench/fa3_iter.sh
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/out}
export OUT
BUILD=${BUILD:-build/lead}
rc=0
if [ -n "${CHECK:-}" ]; then
  FA3_CHECK_CONFIGS=$CHECK bash tests/gpu/h200_check.sh --build "$BUILD" --no-conformance \
    --no-sanitize --no-sass > "$OUT/check.log" 2>&1 || rc=1
fi
if [ $rc -eq 0 ] && [ -n "${SETS:-}" ]; then
  LIB=$BUILD/lib/libflashattn.so timeout "${AB_SECONDS:-420}" bash bench/fa3_ab.sh \
    > "$OUT/ab.log" 2>&1 || rc=1
fi
[ -n "${CHECK:-}" ] && tail -n 25 "$OUT/check.log"
[ -f "$OUT/ab.log" ] && cat "$OUT/ab.log"
echo "fa3_iter: rc=$rc"
exit $rc
