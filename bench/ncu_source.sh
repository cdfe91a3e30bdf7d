#!/usr/bin/env bash
# ncu_source.sh: where one of our kernels stalls, instruction by instruction. Profiles the first
# launch of a kernel matching REGEX (default fa2_bwd_kernel) in one bench/peer_cuda.py shape with
# ncu's SourceCounters (warp-state samples per SASS instruction) and writes the per-instruction
# table as $OUT/ncu_source_<tag>.csv.gz, to be read on the development machine (bench/NOTES.md).
#
#   bench/ncu_source.sh [--regex R] [--pass fwd|bwd] HDIM:SEQLEN[:CAUSAL]
# PEER_ARGS (environment): more bench/peer_cuda.py options, e.g. PEER_ARGS="--kernel-family fa3".
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LIB=build/release/lib/libflashattn.so
PASS=bwd
RE=fa2_bwd_kernel
shape=128:4096
while [ $# -gt 0 ]; do
  case "$1" in
    --lib) LIB=$2; shift ;;
    --pass) PASS=$2; shift ;;
    --regex) RE=$2; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) shape=$1 ;;
  esac
  shift
done
IFS=: read -r hd sl causal <<< "$shape"
causal=${causal:-0}
tag="${PASS}_hd${hd}_s${sl}_c${causal}"
tmp=$(mktemp -d)
# shellcheck disable=SC2086  # PEER_ARGS is a list of options
ncu --clock-control none -k "regex:$RE" -c 1 --section SourceCounters --section WarpStateStats \
  -o "$tmp/rep" python3 bench/peer_cuda.py --lib "$LIB" --hdims "$hd" --seqlens "$sl" \
  --causal "$causal" --pass "$PASS" --warmup-ms 1 --rep-ms 1 ${PEER_ARGS:-} > "$tmp/log.txt" 2>&1 ||
  { tail -20 "$tmp/log.txt"; exit 1; }
ncu -i "$tmp/rep.ncu-rep" --page source --csv --print-source sass > "$tmp/src.csv" 2> "$tmp/err.txt" ||
  { cat "$tmp/err.txt"; exit 1; }
gzip -c "$tmp/src.csv" > "$OUT/ncu_source_${tag}.csv.gz"
echo "ncu_source: $(wc -l < "$tmp/src.csv") lines -> $OUT/ncu_source_${tag}.csv.gz"
rm -rf "$tmp"
