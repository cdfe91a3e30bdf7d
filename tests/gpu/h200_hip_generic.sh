#!/usr/bin/env bash
# h200_hip_generic.sh: the HIP backend's kernels (backends/hip/generic, written against
# backends/hip/portable/fa_gpu_portable.h) run on the H200, compiled by nvcc into the
# hip-generic-on-cuda test plugin (the proof of the port's indexing, masking, softmax
# and backward where no AMD GPU exists): the generic kernels, and the MFMA kernels (kernel_family
# "mfma", cdna/) with the matrix instruction itself emulated by its documented semantics
# (cdna/hg_mfma_emu.h), i.e. everything of them but the instruction. From an already-built tree:
#
#   bash tests/gpu/h200_hip_generic.sh [--build DIR] [--quick] [--no-memcheck]
#                                      [--families "generic mfma"]
#
# Runs only binaries (never cmake): the build folder (default build/release) must have been
# configured with nvcc found (it then holds lib/hip_generic_on_cuda/libfa_cuda.so). Every step
# runs with FA_PLUGIN_PATH set to lib/hip_generic_on_cuda, so the "cuda" backend the library
# loads is the test plugin (kernels "cuda.hipgen.*", kernel families "hipgen ..."); the CUDA
# backend itself is not involved. Steps, PASS / FAIL in the summary, per family F:
#   fa-info          fa_backend_info: cuda available, kernel families "hipgen ..."
#   conformance-F    bin/conformance --backend cuda --kernel-prefix cuda.hipgen[.mfma]
#                    [--kernel-family mfma] --require f16,bf16,causal,causal_top_left,gqa,mqa,
#                    lse,bwd,window,softcap,deterministic,strided_last_dim,unaligned,hd256;
#                    every case (--quick: the subset); CONF_SECS (default 200) seconds
#   conformance-lds32k-F  conformance with FA_HIPGEN_LDS=32768 (the plugin standing for a 32 KiB
#                    LDS: the tiles core/plan gives it), --quick subset, the .d64. cases
#   memcheck-F       compute-sanitizer memcheck, --quick subset, the .d256. and the .tl. cases
#   racecheck-F      compute-sanitizer racecheck, --quick subset, the s257x* cases (several tiles)
#                    (these three steps SAN_SECS each, default 60; --no-memcheck: the first only)
# Files in $OUT (default /tmp/out): machine.txt (fa-info), conformance_hipgen_F.log, the logs of
# the other steps, summary.txt. Exit status 0 when no step failed. Limits: 200 + 4 x 60 s per
# family; both families (880 s) do not fit a 600 s call: one family per call (--families mfma).
set -u
cd "$(dirname "$0")/../.." || exit 2

BUILD=build/release
QUICK=0
DO_MEMCHECK=1
FAMILIES="generic mfma"
CONF_SECS=${CONF_SECS:-200}
SAN_SECS=${SAN_SECS:-60}
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=${2:?--build needs a folder}; shift ;;
    --quick) QUICK=1 ;;
    --no-memcheck) DO_MEMCHECK=0 ;;
    --families) FAMILIES=${2:?--families needs a list}; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "h200_hip_generic: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# shellcheck source=tests/gpu/steps.sh
. tests/gpu/steps.sh
PLUGIN_DIR="$PWD/$LIB/hip_generic_on_cuda"
export FA_PLUGIN_PATH="$PLUGIN_DIR"
REQUIRE=f16,bf16,causal,causal_top_left,gqa,mqa,lse,bwd,window,softcap,deterministic
REQUIRE=$REQUIRE,strided_last_dim,unaligned,hd256

banner "fa-info (FA_PLUGIN_PATH=$PLUGIN_DIR)"
if [ ! -f "$PLUGIN_DIR/libfa_cuda.so" ]; then
  record fa-info FAIL "$PLUGIN_DIR/libfa_cuda.so missing: configure the build with nvcc found"
elif need_bin fa-info; then
  timeout 60 "$BIN/fa-info" 2>&1 | tee -a "$OUT/machine.txt"
  nvidia-smi -L >> "$OUT/machine.txt" 2>&1 || true
  if grep -Eq "^  cuda: available" "$OUT/machine.txt" && grep -Eq "kernel families +hipgen" "$OUT/machine.txt"; then
    record fa-info PASS "cuda = hip-generic-on-cuda test plugin, available"
  else
    record fa-info FAIL "the test plugin is not the available cuda backend (see machine.txt)"
  fi
else
  record fa-info FAIL "fa-info not built"
fi

# compute-sanitizer from PATH or the CUDA toolkit's usual folders (as h200_check.sh finds it).
SANITIZER=$(command -v compute-sanitizer 2>/dev/null)
for d in /usr/local/cuda/bin /usr/local/cuda-*/bin /opt/cuda/bin /usr/local/cuda/compute-sanitizer; do
  [ -z "$SANITIZER" ] && [ -x "$d/compute-sanitizer" ] && SANITIZER=$d/compute-sanitizer
done

for fam in $FAMILIES; do
  case $fam in
    generic) fargs=(--kernel-prefix cuda.hipgen) ;;
    mfma) fargs=(--kernel-family mfma --kernel-prefix cuda.hipgen.mfma) ;;
    *) record "conformance-$fam" FAIL "unknown family (generic, mfma)"; continue ;;
  esac
  banner "conformance-$fam (hip kernels through nvcc)"
  log="$OUT/conformance_hipgen_$fam.log"
  if need_bin conformance; then
    args=(--backend cuda "${fargs[@]}" --require "$REQUIRE")
    [ "$QUICK" -eq 1 ] && args+=(--quick)
    echo "FA_PLUGIN_PATH=$FA_PLUGIN_PATH $BIN/conformance ${args[*]}"
    timeout "$CONF_SECS" "$BIN/conformance" "${args[@]}" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    tally=$(grep -E '^conformance: [0-9]+ passed' "$log" | tail -1 | sed 's/^conformance: //')
    case $rc in
      0) record "conformance-$fam" PASS "$tally" ;;
      77) record "conformance-$fam" FAIL "skipped: $(grep -m1 '^SKIP: ' "$log")" ;;
      124) record "conformance-$fam" FAIL "timed out after $CONF_SECS s; ${tally:-no tally}" ;;
      *) record "conformance-$fam" FAIL "exit status $rc; ${tally:-no tally}; grep -A8 '^FAIL' $log" ;;
    esac
  else
    record "conformance-$fam" FAIL "conformance not built"
  fi

  # conformance-lds32k: the tiles core/plan gives only a smaller LDS than the plugin's (the
  # backward's 32x32 at head dim 64, hip.bwd_tiles), the plugin standing for a 32 KiB LDS.
  # memcheck (out-of-bounds accesses of the tile loops) on the head-dim-256 and top-left causal
  # cases, racecheck (shared-memory hazards: the barriers around the K/V, Q/dO, score and dS
  # tiles, and the MFMA emulation's per-wave barriers) on the cases with 257 query rows (several
  # query and key tiles). All on the --quick subset.
  runs=("conformance-lds32k .d64.")
  [ "$DO_MEMCHECK" -eq 1 ] && runs+=("memcheck .d256." "memcheck .tl." "racecheck s257x")
  for run in "${runs[@]}"; do
    set -- $run
    tool=$1 filter=$2
    banner "$tool, $fam (--quick --filter $filter)"
    mlog="$OUT/${tool}_hipgen_${fam}${filter//./_}.log"
    if [ "$tool" = conformance-lds32k ]; then
      pre=(env FA_HIPGEN_LDS=32768)
    elif [ -z "$SANITIZER" ]; then
      record "$tool-$fam" FAIL "compute-sanitizer not found"
      continue
    else
      pre=("$SANITIZER" --tool "$tool" --error-exitcode 99)
    fi
    if need_bin conformance; then
      timeout "$SAN_SECS" "${pre[@]}" "$BIN/conformance" \
        --backend cuda "${fargs[@]}" --quick --filter "$filter" > "$mlog" 2>&1
      mrc=$?
      tally=$(grep -E '^conformance: [0-9]+ passed' "$mlog" | tail -1 | sed 's/^conformance: //')
      hazards=$(grep -cE '^========= (Invalid|Error|Race|Program hit)' "$mlog")
      case $mrc in
        0) record "$tool-$fam" PASS "$filter: ${tally:-no tally}, no errors" ;;
        124) record "$tool-$fam" FAIL "$filter: timed out after $SAN_SECS s; ${tally:-no tally}" ;;
        *) record "$tool-$fam" FAIL "$filter: exit status $mrc, $hazards error lines; see $mlog" ;;
      esac
    else
      record "$tool-$fam" FAIL "conformance not built"
    fi
  done
done

print_steps | tee "$OUT/summary.txt"
steps_status
