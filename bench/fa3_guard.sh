#!/usr/bin/env bash
# fa3_guard.sh: a quick guard for new fa3 forward configurations before a device call times
# them: for each configuration named, the conformance cases of its head dim at full grid and
# with FA_CUDA_FA3_GRID=2 (persistent blocks looping over many tiles, tiles without keys
# included; a TAILSPLIT configuration, ending in k, at 4 and 5 too), then racecheck and
# synccheck on cuda_smoke at grid 1 (TAILSPLIT: and at 3 and 5, without a mask), each with a
# short time limit, so that a deadlock costs a minute rather than the call. Progress goes to $OUT/guard.txt line by
# line (it comes back even when the call runs out of time); stops at the first failure.
#
#   bash bench/fa3_guard.sh hd64_2x128_opdqo3l1 hd64_3x128_oppqo3l1
#
# SAN="a b" runs the sanitizers on those configurations only (default: all of them).
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/out}
BIN=${BUILD:-build/lead}/bin
SANITIZER=$(command -v compute-sanitizer)
for t in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer \
  /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
  [ -z "$SANITIZER" ] && [ -x "$t" ] && SANITIZER=$t
done
log=$OUT/guard.txt
mkdir -p "$OUT"
fail() {
  echo "FAIL $*" | tee -a "$log"
  exit 1
}
for cfg in "$@"; do
  hd=${cfg%%_*}
  hd=${hd#hd}
  grids="full 2"
  caps=1
  case $cfg in *k) grids="full 2 4 5" caps="1 3 5" ;; esac # TAILSPLIT: grids that cut a last round
  for grid in $grids; do
    [ "$grid" = full ] && grid=
    start=$SECONDS
    FA_CUDA_FA3_CONFIG=$cfg FA_CUDA_FA3_GRID=$grid timeout 90 "$BIN/conformance" --backend cuda \
      --filter ".d$hd." > "$OUT/guard_last.log" 2>&1 || fail "$cfg conformance grid=${grid:-full}"
    echo "ok $cfg conformance grid=${grid:-full}: $(grep -E '^conformance: ' "$OUT/guard_last.log" | tail -1) ($((SECONDS - start)) s)" >> "$log"
  done
  [ -n "$SANITIZER" ] || continue
  case " ${SAN-$*} " in *" $cfg "*) ;; *) continue ;; esac
  for cap in $caps; do
    causal=1
    [ "$cap" = 1 ] || causal=0 # TAILSPLIT cuts only without a mask
    for tool in racecheck synccheck; do
      FA_CUDA_FA3_CONFIG=$cfg FA_CUDA_FA3_GRID=$cap timeout 60 "$SANITIZER" --tool "$tool" \
        --error-exitcode 86 "$BIN/cuda_smoke" --hdim "$hd" --seqlen 300 --causal $causal \
        > "$OUT/guard_last.log" 2>&1 || fail "$cfg $tool grid=$cap"
      echo "ok $cfg $tool grid=$cap" >> "$log"
    done
  done
done
rm -f "$OUT/guard_last.log"
cat "$log"
