#!/usr/bin/env bash
# fa3_repeat_check.sh: one device call for the record of a build: REPEATS runs (default 5) of each
# of the sweep's closest shapes (SHAPES: "hd:causal:seqlen ...", default those below 1.03x cuDNN
# in session 23's v12 sweep), each run timing ours beside SDPA-flash and cuDNN, then
# tests/gpu/h200_check.sh on build/lead (CHECK_ARGS; the full check took ~425 s with 23 fa3
# configurations) with what is left of the call's time (CALL_S, default 570 s): a call that runs
# past 600 s returns nothing.
#
#   COMMIT=<sha> bash bench/fa3_repeat_check.sh
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/rep" # the device returns few files: the runs and the check's logs go back as tars
for shape in ${SHAPES:-64:1:1024 128:0:1024 128:0:16384 256:0:1024}; do
  IFS=: read -r hd causal seqlen <<< "$shape"
  for r in $(seq 1 "${REPEATS:-5}"); do
    python3 bench/peer_cuda.py --check --lib build/lead/lib/libflashattn.so --pass fwd \
      --hdims "$hd" --causal "$causal" --seqlens "$seqlen" --commit "${COMMIT:-unknown}" \
      --json "$OUT/rep/repeat-$hd-$causal-$seqlen-$r.json" > /dev/null 2>&1 || echo "repeat $shape run $r failed"
  done
done
python3 - "$OUT" <<'PY'
import glob, json, statistics, sys
rows = {}
for f in sorted(glob.glob(sys.argv[1] + "/rep/repeat-*.json")):
    for r in json.load(open(f))["results"]:
        k = (r["hdim"], r["causal"], r["seqlen"])
        rows.setdefault(k, []).append((r["ours"]["tflops"], r["cudnn"]["tflops"]))
for (hd, c, s), v in sorted(rows.items()):
    ratios = [o / p for o, p in v]
    print(f"hd{hd} causal {c} {s}: ours {statistics.median(o for o, _ in v):.1f} cuDNN "
          f"{statistics.median(p for _, p in v):.1f} ratio median {statistics.median(ratios):.3f} "
          f"range {min(ratios):.3f}-{max(ratios):.3f} ({len(v)} runs)")
PY
echo "repeats done at ${SECONDS}s"
mkdir -p "$OUT/c"
left=$((${CALL_S:-570} - SECONDS))
if [ "$left" -gt 60 ]; then
  # shellcheck disable=SC2086 # CHECK_ARGS is a list of options
  OUT=$OUT/c timeout -s INT "$left" bash tests/gpu/h200_check.sh --build build/lead ${CHECK_ARGS:-} \
    > "$OUT/c/check.log" 2>&1
  echo "h200_check rc=$? at ${SECONDS}s (limit ${left}s)" | tee -a "$OUT/c/check.log"
  tail -n 40 "$OUT/c/check.log"
else
  echo "h200_check not run: ${left}s left of CALL_S"
fi
tar -czf "$OUT/run.tgz" -C "$OUT" rep c && rm -rf "$OUT/rep" "$OUT/c"
