#!/usr/bin/env bash
# h200_opencl.sh: the OpenCL backend on the H200 through NVIDIA's OpenCL, from an
# already-built tree.
#
#   bash tests/gpu/h200_opencl.sh [--build DIR] [--quick] [--no-conformance] [--variants LIST]
#
# Runs only binaries (never cmake): the build folder (default build/release) must come with the
# repository, built with the OpenCL backend (bin/fa-info, bin/conformance, bin/fa-bench,
# bin/ocl-fma-peak, lib/libfa_opencl.so). Steps, each PASS / FAIL / SKIP in the summary table:
#   icd          a vendor file naming NVIDIA's OpenCL library (/usr/local/nvidia/lib64/
#                libnvidia-opencl.so.1, else the first libnvidia-opencl.so.1 ldconfig knows) in a
#                temporary folder, beside copies of the system's vendor files (PoCL), and
#                OCL_ICD_VENDORS set to it: no change to the machine
#   fa-info      what fa_backend_info() reports; opencl must be available and list a device of
#                the 'NVIDIA CUDA' platform, whose index goes to FA_OPENCL_DEVICE for every
#                later step
#   conformance  bin/conformance --backend opencl with ctest's --require list (every case;
#                --quick for the subset), on that device
#   fma-peak     bin/ocl-fma-peak on that device: the fp32 FMA rate, the bar's denominator
#   ptx          per forward variant (below), one small fa-bench call with FA_OPENCL_DUMP_DIR and
#                FA_OPENCL_BUILD_OPTIONS=-cl-nv-verbose (retried without it if the driver refuses
#                it): NVIDIA's PTX of every program built and its build log, whose ptxas lines
#                give registers and spills; all in $OUT/ptx.tgz, the register lines in ptx.txt
#   bench        per forward variant, bin/fa-bench --backend opencl, forward bf16, head_dim 128
#                and 64, seqlen 4096, batch 4 x 16 heads (hd128: the FlashAttention sweep's shape,
#                batch x seqlen = 16k tokens, heads x head_dim = 2048), causal off and on, in one
#                process per variant; the non-causal hd128 TFLOP/s against 40% of the FMA peak;
#                then the backward at hd128, for the record
#   Variants (--variants, default "default r168 r128"): the kernels as the plugin builds them,
#                and rR = built with -cl-nv-maxrregcount R (NVIDIA's register cap; 168 lets three
#                128-work-item groups share an SM's 64K registers, 128 four). The last table: one
#                row per variant and shape.
# Without an NVIDIA OpenCL device (no library, or it lists no device) the icd/fa-info steps
# FAIL saying so and the later steps run on the default OpenCL device instead (PoCL's CPU: a
# check of this script's logic, with the bench shape cut to seqlen 1024, batch 1 x 4 heads),
# every line naming the device that ran; the exit status is then non-zero.
# Files in $OUT (default /tmp/out): machine.txt (vendor files, clinfo -l, fa-info),
# conformance_opencl.log, fma_peak.txt, bench.txt, ptx.txt, ptx.tgz, summary.txt. Exit status: 0 when
# no step failed. Time limits per step; DEADLINE (default 420 s from the start) skips the variants
# that would start later (bench: 60 s before it, ptx: 20 s), so the table still comes last; the
# --quick run takes about 3-4 minutes on the H200.
set -u
cd "$(dirname "$0")/../.." || exit 2

BUILD=build/release
QUICK=0
DO_CONF=1
VARIANTS="default r168 r128"
DEADLINE=${DEADLINE:-420} # seconds: later variants are skipped (SKIP rows) rather than overrun
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=${2:?--build needs a folder}; shift ;;
    --quick) QUICK=1 ;;
    --no-conformance) DO_CONF=0 ;;
    --variants) VARIANTS=${2:?--variants needs a list}; shift ;;
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
  conformance_step opencl 200 "${TAG}"
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

# The build options of a forward variant: default, or rR -> -cl-nv-maxrregcount R.
variant_env() { # label extra-build-options -> prints "FA_OPENCL_BUILD_OPTIONS=.."
  local l=$1 r="" opts=$2
  [ "${l#r}" != "$l" ] && r=${l#r}
  # The cap's spelling: "-cl-nv-maxrregcount N" in the current extension text, "=N" in older
  # drivers' (RREG_EQ=1, set by the ptx step when the first spelling fails to build).
  if [ -n "$r" ] && [ "${RREG_EQ:-0}" = 1 ]; then
    opts="${opts:+$opts }-cl-nv-maxrregcount=$r"
  elif [ -n "$r" ]; then
    opts="${opts:+$opts }-cl-nv-maxrregcount $r"
  fi
  printf 'FA_OPENCL_BUILD_OPTIONS=%s\n' "$opts"
}
run_variant() { # label extra-options cmd...: the command under the variant's environment
  local label=$1 extra=$2 opts
  shift 2
  opts=$(variant_env "$label" "$extra" | sed -n 's/^FA_OPENCL_BUILD_OPTIONS=//p')
  FA_OPENCL_BUILD_OPTIONS=$opts "$@"
}

# --- bench -------------------------------------------------------------------------------------
banner "fa-bench --backend opencl, forward variants $VARIANTS ($DEV_DESC)"
FWD_TF=""
ROWS=()
if need_bin fa-bench; then
  if [ "$ON_GPU" -eq 1 ]; then
    shape=(--hdims 128,64 --seqlens 4096 --batch 4 --heads 16)
    iters=10
  else
    shape=(--hdims 128,64 --seqlens 1024 --batch 1 --heads 4)
    iters=3
  fi
  : > "$OUT/bench.txt"
  bench_fail=""
  for var in $VARIANTS; do
    if [ $(($(date +%s) - START)) -gt $((DEADLINE - 60)) ]; then
      echo "[$var] skipped: past DEADLINE - 60 s" | tee -a "$OUT/bench.txt"
      bench_fail="$bench_fail $var(skipped)"
      continue
    fi
    echo "[$var] $(variant_env "$var" "" | tr '\n' ' ')" | tee -a "$OUT/bench.txt"
    echo "fa-bench --backend opencl --dtype bf16 ${shape[*]} --causal 0,1 --pass fwd --iters $iters" | tee -a "$OUT/bench.txt"
    run_variant "$var" "" timeout 90 "$BIN/fa-bench" --backend opencl --dtype bf16 "${shape[@]}" \
      --causal 0,1 --pass fwd --iters "$iters" > "$TMP/bench_$var.txt" 2>&1
    rc=$?
    if [ "$rc" -ne 0 ] && [ "$var" != "${var%%r*}" ] && [ "${RREG_EQ:-0}" = 0 ]; then
      echo "[$var] failed (exit $rc): again with -cl-nv-maxrregcount=N" | tee -a "$OUT/bench.txt"
      cat "$TMP/bench_$var.txt" >> "$OUT/bench.txt"
      RREG_EQ=1
      run_variant "$var" "" timeout 90 "$BIN/fa-bench" --backend opencl --dtype bf16 "${shape[@]}" \
        --causal 0,1 --pass fwd --iters "$iters" > "$TMP/bench_$var.txt" 2>&1
      rc=$?
      [ "$rc" -eq 0 ] || RREG_EQ=0
    fi
    cat "$TMP/bench_$var.txt" | tee -a "$OUT/bench.txt"
    echo | tee -a "$OUT/bench.txt"
    # Rows: "causal hdim seqlen batch heads | fwd ms TFLOP/s | ..."
    while IFS= read -r row; do ROWS+=("$var $row"); done < <(awk -F'|' '
      $1 ~ /^[01] +[0-9]+ / { split($1, k, " "); split($2, a, " ");
                              printf "%s %s %s %s\n", k[2], k[1], a[1], a[2] }' "$TMP/bench_$var.txt")
    tf=$(awk -F'|' '$1 ~ /^0 +128 / { split($2, a, " "); print a[2]; exit }' "$TMP/bench_$var.txt")
    [[ $tf =~ ^[0-9.]+$ ]] || tf="" # "-" when the call failed
    [ "$rc" -eq 0 ] && [ -n "$tf" ] || bench_fail="$bench_fail $var(exit $rc)"
    # The bar's figure: the default variant, else the first that ran.
    if [ -n "$tf" ] && { [ "$var" = default ] || [ -z "$FWD_TF" ]; }; then
      FWD_TF=$tf
      FWD_VAR=$var
    fi
  done
  if [ -z "$bench_fail" ]; then
    record bench PASS "${TAG}forward bf16 hd128 non-causal ($FWD_VAR): $FWD_TF TFLOP/s"
  else
    record bench FAIL "${TAG}failed:$bench_fail"
  fi
  if [ $(($(date +%s) - START)) -le $((DEADLINE - 60)) ]; then
    echo "fa-bench --backend opencl --dtype bf16 ${shape[*]/128,64/128} --causal 0 --pass bwd --iters 2" | tee -a "$OUT/bench.txt"
    bshape=("${shape[@]}")
    bshape[1]=128
    timeout 60 "$BIN/fa-bench" --backend opencl --dtype bf16 "${bshape[@]}" --causal 0 \
      --pass bwd --iters 2 2>&1 | tee -a "$OUT/bench.txt"
  else
    echo "backward: skipped (past DEADLINE - 60 s)" | tee -a "$OUT/bench.txt"
  fi
else
  record bench FAIL "fa-bench not built"
fi

# --- ptx ---------------------------------------------------------------------------------------
banner "ptx: NVIDIA's program binaries and build logs ($DEV_DESC)"
if need_bin fa-bench; then
  mkdir -p "$TMP/ptx"
  : > "$OUT/ptx.txt"
  ptx_fail=""
  for var in $VARIANTS; do
    if [ $(($(date +%s) - START)) -gt $((DEADLINE - 20)) ]; then
      echo "== $var: skipped (past DEADLINE - 20 s)" | tee -a "$OUT/ptx.txt"
      ptx_fail="$ptx_fail $var(skipped)"
      continue
    fi
    d="$TMP/ptx/$var"
    mkdir -p "$d"
    small=(--backend opencl --dtype bf16 --hdims 64,128 --seqlens 256 --batch 1 --heads 2
           --causal 0 --pass fwd --warmup 0 --iters 1)
    verbose="-cl-nv-verbose"
    [ "$ON_GPU" -eq 1 ] || verbose=""
    FA_OPENCL_DUMP_DIR=$d run_variant "$var" "$verbose" timeout 60 "$BIN/fa-bench" "${small[@]}" \
      > "$d/fa_bench.txt" 2>&1
    rc=$?
    if [ "$rc" -ne 0 ] && [ "$var" != "${var%%r*}" ] && [ "${RREG_EQ:-0}" = 0 ]; then
      echo "$var: fa-bench failed (exit $rc); again with -cl-nv-maxrregcount=N" | tee -a "$OUT/ptx.txt"
      RREG_EQ=1
      FA_OPENCL_DUMP_DIR=$d run_variant "$var" "$verbose" timeout 60 "$BIN/fa-bench" "${small[@]}" \
        >> "$d/fa_bench.txt" 2>&1
      rc=$?
      [ "$rc" -eq 0 ] || RREG_EQ=0
    fi
    if [ "$rc" -ne 0 ] && [ -n "$verbose" ]; then
      echo "$var: fa-bench failed with $verbose (exit $rc); again without it" | tee -a "$OUT/ptx.txt"
      FA_OPENCL_DUMP_DIR=$d run_variant "$var" "" timeout 60 "$BIN/fa-bench" "${small[@]}" \
        >> "$d/fa_bench.txt" 2>&1
      rc=$?
    fi
    [ "$rc" -eq 0 ] || ptx_fail="$ptx_fail $var(exit $rc)"
    {
      echo "== $var: $(ls "$d" | tr '\n' ' ')"
      for f in "$d"/*.log; do
        [ -e "$f" ] || continue
        echo "-- $(basename "$f"): $(head -1 "$f")"
        grep -E "Compiling entry|registers|spill|stack frame" "$f"
      done
    } | tee -a "$OUT/ptx.txt"
  done
  tar -C "$TMP" -czf "$OUT/ptx.tgz" ptx
  n_bin=$(find "$TMP/ptx" -name '*.bin' | wc -l)
  if [ -z "$ptx_fail" ] && [ "$n_bin" -gt 0 ]; then
    record ptx PASS "${TAG}$n_bin program binaries in ptx.tgz; register lines in ptx.txt"
  else
    record ptx FAIL "${TAG}failed:${ptx_fail:- none}; $n_bin binaries"
  fi
else
  record ptx FAIL "fa-bench not built"
fi

# --- the bar -----------------------------------------------------------------------------------
banner "forward bf16 against the fp32 FMA peak"
{
  echo "${TAG}device: $DEV_DESC)"
  printf '%-34s %s\n' "fp32 FMA peak (ocl-fma-peak)" "${PEAK:-?} GFLOP/s"
  printf '%-8s %-6s %-6s %10s %9s %8s\n' variant hdim causal "fwd ms" TFLOP/s "% peak"
  for r in "${ROWS[@]}"; do
    set -- $r
    pct="?"
    [ -n "$PEAK" ] && [[ $5 =~ ^[0-9.]+$ ]] && pct=$(awk -v f="$5" -v p="$PEAK" 'BEGIN { printf "%.1f", 100.0 * f * 1000.0 / p }')
    printf '%-8s %-6s %-6s %10s %9s %8s\n' "$1" "$2" "$3" "$4" "$5" "$pct"
  done
  if [ -n "$PEAK" ] && [ -n "$FWD_TF" ]; then
    pct=$(awk -v f="$FWD_TF" -v p="$PEAK" 'BEGIN { printf "%.1f", 100.0 * f * 1000.0 / p }')
    printf 'bar: %s hd128 non-causal %s TFLOP/s = %s%% of the FMA peak (the bar: >= 40%%)\n' \
      "${FWD_VAR:-?}" "$FWD_TF" "$pct"
  else
    echo "bar: ? (a measurement is missing)"
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
