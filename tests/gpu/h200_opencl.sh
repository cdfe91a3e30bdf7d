#!/usr/bin/env bash
# h200_opencl.sh: the OpenCL backend on the H200 through NVIDIA's OpenCL (issue 6), from an
# already-built tree.
#
#   bash tests/gpu/h200_opencl.sh [--build DIR] [--quick] [--no-conformance]
#
# Runs only binaries (never cmake): the build folder (default build/release) must come with the
# repository, built with the OpenCL backend (bin/fa-info, bin/conformance, bin/fa-bench,
# bin/ocl-fma-peak, lib/libfa_opencl.so). Steps, each PASS / FAIL / SKIP in the summary table:
#   icd          a vendor file naming NVIDIA's OpenCL library (/usr/local/nvidia/lib64/
#                libnvidia-opencl.so.1, else the first libnvidia-opencl.so.1 ldconfig knows) in a
#                temporary folder, beside copies of the system's vendor files (PoCL), and
#                OCL_ICD_VENDORS set to it: no change to the machine (../shared/GPU-MACHINE.md)
#   fa-info      what fa_backend_info() reports; opencl must be available and list a device of
#                the 'NVIDIA CUDA' platform, whose index goes to FA_OPENCL_DEVICE for every
#                later step
#   conformance  bin/conformance --backend opencl with ctest's --require list (every case;
#                --quick for the subset), on that device
#   fma-peak     bin/ocl-fma-peak on that device: the fp32 FMA rate, the bar's denominator
#   bench        bin/fa-bench --backend opencl, forward bf16 head_dim 128, seqlen 4096, batch 4 x
#                16 heads (the FlashAttention sweep's shape: batch x seqlen = 16k tokens, heads x
#                head_dim = 2048), causal off and on; the non-causal TFLOP/s against 40% of the
#                FMA peak (issue 6's bar); then the backward at the same shape, for the record
# Without an NVIDIA OpenCL device (no library, or it lists no device) the icd/fa-info steps
# FAIL saying so and the later steps run on the default OpenCL device instead (PoCL's CPU: a
# check of this script's logic, with the bench shape cut to seqlen 1024, batch 1 x 4 heads),
# every line naming the device that ran; the exit status is then non-zero.
# Files in $OUT (default /tmp/out): machine.txt (vendor files, clinfo -l, fa-info),
# conformance_opencl.log, fma_peak.txt, bench.txt, summary.txt. Exit status: 0 when no step
# failed. Time limits per step (together under 9 minutes).
set -u
cd "$(dirname "$0")/../.." || exit 2

BUILD=build/release
QUICK=0
DO_CONF=1
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=${2:?--build needs a folder}; shift ;;
    --quick) QUICK=1 ;;
    --no-conformance) DO_CONF=0 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "h200_opencl: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# shellcheck source=tests/gpu/steps.sh
. tests/gpu/steps.sh

# --- icd ---------------------------------------------------------------------------------------
banner "OpenCL vendor files"
NV_LIB=""
for cand in /usr/local/nvidia/lib64/libnvidia-opencl.so.1 \
            $(ldconfig -p 2>/dev/null | awk '/libnvidia-opencl\.so\.1 /{print $NF}'); do
  if [ -e "$cand" ]; then NV_LIB=$cand; break; fi
done
ICD_DIR="$TMP/vendors"
mkdir -p "$ICD_DIR"
# The system's vendor files too, so PoCL stays listed as it is without this script.
for f in /etc/OpenCL/vendors/*.icd; do [ -e "$f" ] && cp "$f" "$ICD_DIR/"; done
if [ -n "$NV_LIB" ]; then
  echo "$NV_LIB" > "$ICD_DIR/nvidia.icd"
  record icd PASS "nvidia.icd -> $NV_LIB"
else
  record icd FAIL "no libnvidia-opencl.so.1 (not at /usr/local/nvidia/lib64, not known to ldconfig)"
fi
export OCL_ICD_VENDORS="$ICD_DIR"
{
  echo "OCL_ICD_VENDORS=$ICD_DIR:"
  for f in "$ICD_DIR"/*.icd; do [ -e "$f" ] && echo "  $(basename "$f"): $(cat "$f")"; done
} | tee -a "$OUT/machine.txt"
if command -v clinfo >/dev/null 2>&1; then
  { echo; echo "clinfo -l:"; timeout 30 clinfo -l 2>&1; } | tee -a "$OUT/machine.txt"
fi

# --- fa-info -----------------------------------------------------------------------------------
banner "fa-info"
NV_DEV=""
DEV_DESC="the default OpenCL device"
if need_bin fa-info; then
  timeout 60 "$BIN/fa-info" 2>&1 | tee "$TMP/fa_info.txt"
  rc=${PIPESTATUS[0]}
  { echo; cat "$TMP/fa_info.txt"; } >> "$OUT/machine.txt"
  ocl_line=$(grep -m1 -E '^  opencl: ' "$TMP/fa_info.txt" | sed 's/^  opencl: //')
  # The opencl block's device list: "N: ocl0 (default): NAME (VENDOR; platform P; ...); ocl1: ..."
  devices=$(grep -A4 -E '^  opencl: ' "$TMP/fa_info.txt" | sed -n 's/^ *devices *//p')
  echo "$devices" | grep -oE 'ocl[0-9]+( \(default\))?: [^;]*; platform [^;]*' > "$TMP/devices.txt"
  NV_DEV=$(awk '/platform NVIDIA/ { sub(/^ocl/, ""); sub(/[ :].*/, ""); print; exit }' "$TMP/devices.txt")
  if [ "$rc" -ne 0 ]; then
    record fa-info FAIL "exit status $rc"
  elif [ "$ocl_line" != available ]; then
    record fa-info FAIL "opencl: ${ocl_line:-not listed}"
  elif [ -z "$NV_DEV" ]; then
    record fa-info FAIL "opencl lists no NVIDIA device: $(tr '\n' ' ' < "$TMP/devices.txt")"
  else
    DEV_DESC=$(grep -E "^ocl${NV_DEV}[ :]" "$TMP/devices.txt")
    record fa-info PASS "FA_OPENCL_DEVICE=$NV_DEV: $DEV_DESC"
  fi
else
  record fa-info FAIL "fa-info not built"
fi
if [ -n "$NV_DEV" ]; then
  export FA_OPENCL_DEVICE=$NV_DEV
  ON_GPU=1
else
  unset FA_OPENCL_DEVICE
  ON_GPU=0
  DEV_DESC=$(grep -m1 '(default)' "$TMP/devices.txt" 2>/dev/null || echo "the default OpenCL device (")
  echo "No NVIDIA OpenCL device: the steps below run on $DEV_DESC, to check this script only."
fi
TAG=$([ "$ON_GPU" -eq 1 ] && echo "" || echo "NOT the GPU: ")

# --- conformance -------------------------------------------------------------------------------
if [ "$DO_CONF" -eq 1 ]; then
  banner "conformance --backend opencl ($DEV_DESC)"
  echo "FA_OPENCL_DEVICE=${FA_OPENCL_DEVICE:-}"
  conformance_step opencl 330 "$TAG"
else
  record conformance SKIP "--no-conformance"
fi

# --- fma-peak ----------------------------------------------------------------------------------
banner "ocl-fma-peak ($DEV_DESC)"
PEAK=""
if need_bin ocl-fma-peak; then
  timeout 60 "$BIN/ocl-fma-peak" ${FA_OPENCL_DEVICE:+--device "$FA_OPENCL_DEVICE"} 2>&1 | tee "$OUT/fma_peak.txt"
  rc=${PIPESTATUS[0]}
  PEAK=$(sed -n 's/^fma_peak_gflops=\([0-9.]*\).*/\1/p' "$OUT/fma_peak.txt" | tail -1)
  if [ "$rc" -eq 0 ] && [ -n "$PEAK" ]; then
    record fma-peak PASS "${TAG}$PEAK GFLOP/s fp32 FMA"
  else
    record fma-peak FAIL "exit status $rc: $(tail -1 "$OUT/fma_peak.txt")"
  fi
else
  record fma-peak FAIL "ocl-fma-peak not built"
fi

# --- bench -------------------------------------------------------------------------------------
banner "fa-bench --backend opencl ($DEV_DESC)"
FWD_TF=""
if need_bin fa-bench; then
  if [ "$ON_GPU" -eq 1 ]; then
    shape=(--hdims 128 --seqlens 4096 --batch 4 --heads 16)
    iters=10
  else
    shape=(--hdims 128 --seqlens 1024 --batch 1 --heads 4)
    iters=3
  fi
  : > "$OUT/bench.txt"
  echo "fa-bench --backend opencl --dtype bf16 ${shape[*]} --causal 0,1 --pass fwd --iters $iters" | tee -a "$OUT/bench.txt"
  timeout 120 "$BIN/fa-bench" --backend opencl --dtype bf16 "${shape[@]}" --causal 0,1 \
    --pass fwd --iters "$iters" 2>&1 | tee "$TMP/bench_fwd.txt"
  rc=${PIPESTATUS[0]}
  cat "$TMP/bench_fwd.txt" >> "$OUT/bench.txt"
  # Rows: "causal hdim seqlen batch heads | fwd ms TFLOP/s | ..."
  FWD_MS=$(awk -F'|' '$1 ~ /^0 / { split($2, a, " "); print a[1]; exit }' "$TMP/bench_fwd.txt")
  FWD_TF=$(awk -F'|' '$1 ~ /^0 / { split($2, a, " "); print a[2]; exit }' "$TMP/bench_fwd.txt")
  CAUSAL_TF=$(awk -F'|' '$1 ~ /^1 / { split($2, a, " "); print a[2]; exit }' "$TMP/bench_fwd.txt")
  if [ "$rc" -ne 0 ] || [ -z "$FWD_TF" ]; then
    record bench FAIL "${TAG}fa-bench exit status $rc: $(grep -m1 -E 'failed|error' "$TMP/bench_fwd.txt")"
  else
    record bench PASS "${TAG}forward bf16 hd128: $FWD_TF TFLOP/s ($FWD_MS ms), causal $CAUSAL_TF TFLOP/s"
  fi
  echo | tee -a "$OUT/bench.txt"
  echo "fa-bench --backend opencl --dtype bf16 ${shape[*]} --causal 0 --pass bwd --iters 3" | tee -a "$OUT/bench.txt"
  timeout 120 "$BIN/fa-bench" --backend opencl --dtype bf16 "${shape[@]}" --causal 0 \
    --pass bwd --iters 3 2>&1 | tee -a "$OUT/bench.txt"
else
  record bench FAIL "fa-bench not built"
fi

# --- the bar -----------------------------------------------------------------------------------
banner "forward bf16 hd128 against the fp32 FMA peak"
{
  echo "${TAG}device: $DEV_DESC)"
  printf '%-34s %s\n' "fp32 FMA peak (ocl-fma-peak)" "${PEAK:-?} GFLOP/s"
  printf '%-34s %s\n' "fa forward bf16 hd128 (non-causal)" "${FWD_TF:-?} TFLOP/s"
  if [ -n "$PEAK" ] && [ -n "$FWD_TF" ]; then
    pct=$(awk -v f="$FWD_TF" -v p="$PEAK" 'BEGIN { printf "%.1f", 100.0 * f * 1000.0 / p }')
    printf '%-34s %s%% (issue 6 asks for >= 40%% on the H200)\n' "percent of peak" "$pct"
  else
    printf '%-34s %s\n' "percent of peak" "? (a measurement is missing)"
  fi
} | tee "$TMP/bar.txt"

# --- summary -----------------------------------------------------------------------------------
{
  print_steps
  echo
  cat "$TMP/bar.txt"
} | tee "$OUT/summary.txt"
steps_status
exit $?
