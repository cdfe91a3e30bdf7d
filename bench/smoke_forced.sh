#!/usr/bin/env bash
# smoke_forced.sh: a fast hang and correctness check of named fa3 configurations before longer
# runs: cuda_smoke with each forced (FA_CUDA_FA3_CONFIG), at its full grid and at a grid of one
# block, causal and not, each under a short timeout (a deadlocked protocol fails in seconds).
#   BUILD=build/lead bash bench/smoke_forced.sh hd256_2x80_opdos ...
set -u
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build/lead}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
rc=0
for cfg in "$@"; do
  hd=${cfg%%_*}
  hd=${hd#hd}
  for grid in "" 1; do
    for causal in 0 1; do
      if FA_CUDA_FA3_CONFIG=$cfg FA_CUDA_FA3_GRID=$grid timeout 30 "$BUILD/bin/cuda_smoke" \
        --hdim "$hd" --seqlen 700 --causal $causal > "$log" 2>&1; then
        echo "smoke_forced: $cfg grid ${grid:-full} causal $causal ok"
      else
        echo "smoke_forced: $cfg grid ${grid:-full} causal $causal FAILED"
        tail -5 "$log"
        rc=1
      fi
    done
  done
done
exit $rc
