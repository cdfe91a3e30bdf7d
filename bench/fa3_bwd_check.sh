#!/usr/bin/env bash
# fa3_bwd_check.sh: one device call that checks and times the FlashAttention-3 backward (issue 8):
# the conformance suite (the default, which runs fa3's backward at head dims 64 and 128 on sm_90;
# fa3 named; the deterministic cases at FA_CUDA_FA3_GRID 1, 2, 3, so that a split holds several
# key tiles), compute-sanitizer on cuda_smoke (racecheck, synccheck, memcheck; deterministic at
# grid 2), then bench/peer_cuda.py's backward timing against FlashAttention-2 and cuDNN, with
# and without --deterministic. Logs and JSONs go to $OUT/fa3_bwd_check.tgz; the tables print
# last.
#
#   BUILD=build/lead HDIMS=128,64 SEQLENS=2048,8192 bash bench/fa3_bwd_check.sh
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/out}
BUILD=${BUILD:-build/lead}
B=$BUILD/bin
W=$(mktemp -d)
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
mkdir -p "$OUT"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_throttle_reasons.active --format=csv \
  -lms 500 > "$W/smi.csv" 2>&1 &
smi=$!
conf() { # name, env assignments..., then -- and conformance options
  local name=$1 envs=()
  shift
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  env ${envs[@]+"${envs[@]}"} timeout 240 "$B/conformance" --backend cuda "$@" > "$W/$name.log" 2>&1
  echo "$name rc=$? at ${SECONDS}s: $(grep -E '^conformance: ' "$W/$name.log" | tail -1)"
  grep -h -A3 '^FAIL' "$W/$name.log" | head -8
}
conf conformance --
conf conformance.fa3 -- --kernel-family fa3
for g in 1 2 3; do conf "determ.grid$g" FA_CUDA_FA3_GRID=$g -- --filter determ; done
for t in "racecheck 128 1 --deterministic" "racecheck 64 0" "synccheck 64 1 --deterministic" \
  "synccheck 128 0" "memcheck 128 1 --deterministic" "memcheck 64 0"; do
  read -r tool hd causal det <<< "$t"
  log="$W/san_${tool}_${hd}_${causal}${det:+_det}.log"
  # shellcheck disable=SC2086  # det is one option or none
  FA_CUDA_FA3_GRID=2 timeout 60 "$SAN" --tool "$tool" --error-exitcode 86 "$B/cuda_smoke" \
    --hdim "$hd" --seqlen 300 --causal "$causal" $det > "$log" 2>&1
  echo "$tool hd$hd causal $causal ${det:-} rc=$?: $(grep -E 'SUMMARY' "$log" | tail -1)," \
    "$(grep -c FAIL "$log") FAIL"
done
for mode in default deterministic; do
  extra=()
  [ "$mode" = deterministic ] && extra=(--deterministic)
  timeout 200 python3 bench/peer_cuda.py --check "${extra[@]}" --lib "$BUILD/lib/libflashattn.so" \
    --pass bwd --hdims "${HDIMS:-128,64}" --seqlens "${SEQLENS:-2048,8192}" \
    --json "$W/bwd_$mode.json" > "$W/bwd_$mode.log" 2>&1
  echo "bwd $mode timing rc=$? at ${SECONDS}s"
done
kill "$smi" 2>/dev/null
tar -czf "$OUT/fa3_bwd_check.tgz" -C "$W" .
for mode in default deterministic; do
  echo "== $mode"
  grep -E '^ *(hd|[0-9])' "$W/bwd_$mode.log" | tail -n 12
done
rm -rf "$W"
