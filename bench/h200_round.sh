#!/usr/bin/env bash
# h200_round.sh: one device call's worth of CUDA work, from a tree built on the development machine
# (carry build/release/lib, build/release/bin and build/release/tests):
#   1. tests/gpu/h200_check.sh (conformance on cuda, compute-sanitizer, SASS counts)
#   2. bench/peer_cuda.py --check over the sweep given by SWEEP_ARGS (default: the whole
#      FlashAttention sweep), JSON and PNG into $OUT
#   3. bench/ncu_compare.sh on the shapes in NCU_BWD / NCU_FWD (default none)
# then prints the check summary and the sweep's table last. $OUT keeps seven files (the device
# returns at most eight): check.txt (GPU state first), check_logs.tgz, sweep.{txt,json,png},
# ncu_bwd.txt / ncu_fwd.txt, and with NCU_SOURCE the per-instruction
# table of bench/ncu_source.sh.
#
#   COMMIT=<sha> SWEEP_ARGS="--hdims 128" NCU_BWD="128:4096" bash bench/h200_round.sh
# SWEEP=0 skips step 2; OPENCL=1 (with OPENCL_ARGS) adds tests/gpu/h200_opencl.sh.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
COMMIT=${COMMIT:-unknown}
export OUT

nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
  > "$OUT/check.txt" 2>&1
# shellcheck disable=SC2086 # CHECK_ARGS is a list of options
OUT="$OUT/check" bash tests/gpu/h200_check.sh ${CHECK_ARGS:-} >> "$OUT/check.txt" 2>&1
check_rc=$?
# One archive for the check's logs: the device returns only a few files.
tar -C "$OUT" -czf "$OUT/check_logs.tgz" check && rm -rf "$OUT/check"

sweep_rc=0
if [ "${SWEEP:-1}" = 1 ]; then
  # shellcheck disable=SC2086 # SWEEP_ARGS is a list of options
  python3 bench/peer_cuda.py --check --commit "$COMMIT" ${SWEEP_ARGS:-} --json "$OUT/sweep.json" \
    --png "$OUT/sweep.png" > "$OUT/sweep.txt" 2>&1
  sweep_rc=$?
fi
# OPENCL=1: tests/gpu/h200_opencl.sh (the OpenCL backend through NVIDIA's OpenCL), logs archived.
opencl_rc=0
if [ "${OPENCL:-0}" = 1 ]; then
  # shellcheck disable=SC2086 # OPENCL_ARGS is a list of options
  OUT="$OUT/opencl" bash tests/gpu/h200_opencl.sh ${OPENCL_ARGS:-} > "$OUT/opencl.txt" 2>&1
  opencl_rc=$?
  tar -C "$OUT" -czf "$OUT/opencl_logs.tgz" opencl && rm -rf "$OUT/opencl"
fi

[ -n "${NCU_BWD:-}" ] && bash bench/ncu_compare.sh --pass bwd $NCU_BWD > "$OUT/ncu_bwd.txt" 2>&1
[ -n "${NCU_FWD:-}" ] && bash bench/ncu_compare.sh --pass fwd $NCU_FWD > "$OUT/ncu_fwd.txt" 2>&1
# PYTHON_TESTS=1: the Python binding's tests (python/tests), here with PyTorch CUDA tensors too.
if [ "${PYTHON_TESTS:-0}" = 1 ]; then
  FLASHATTN_LIBRARY=$PWD/build/release/lib/libflashattn.so python3 python/tests/run_tests.py \
    > "$OUT/python.txt" 2>&1
  echo "python tests: exit status $?" >> "$OUT/python.txt"
fi
# NCU_SOURCE: "PASS:HDIM:SEQLEN[:CAUSAL] ..." (PASS fwd or bwd), one table each.
for src in ${NCU_SOURCE:-}; do
  bash bench/ncu_source.sh --pass "${src%%:*}" --regex "fa2_${src%%:*}_kernel" "${src#*:}" \
    >> "$OUT/ncu_bwd.txt" 2>&1
done
# Keep the tables, drop the raw ncu dumps (they would crowd out the files that come back).
rm -f "$OUT"/ncu_*_ours.* "$OUT"/ncu_*_peer.*

for f in ncu_bwd ncu_fwd; do
  [ -f "$OUT/$f.txt" ] && grep -E "^==|duration|inst_executed.sum|tensor_cycles_active.avg|issue_active|stall_(wait|short|long|barrier|mio|math)" "$OUT/$f.txt"
done
head -2 "$OUT/check.txt"
tail -17 "$OUT/check.txt"
[ -f "$OUT/python.txt" ] && tail -8 "$OUT/python.txt"
[ -f "$OUT/opencl.txt" ] && tail -25 "$OUT/opencl.txt"
[ -f "$OUT/sweep.txt" ] && tail -45 "$OUT/sweep.txt"
echo "h200_round: check rc=$check_rc sweep rc=$sweep_rc opencl rc=$opencl_rc"
