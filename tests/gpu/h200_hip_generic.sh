#!/usr/bin/env bash
# h200_hip_generic.sh: the HIP backend's generic kernels (backends/hip/generic, written against
# backends/hip/portable/fa_gpu_portable.h) run on the H200, compiled by nvcc into the
# hip-generic-on-cuda test plugin (issue 9: the proof of the port's indexing, masking, softmax
# and backward where no AMD GPU exists). From an already-built tree:
#
#   bash tests/gpu/h200_hip_generic.sh [--build DIR] [--quick] [--no-memcheck]
#
# Runs only binaries (never cmake): the build folder (default build/release) must have been
# configured with nvcc found (it then holds lib/hip_generic_on_cuda/libfa_cuda.so and
# bin/conformance_hipgen). Every step runs with FA_PLUGIN_PATH set to lib/hip_generic_on_cuda,
# so the "cuda" backend the library loads is the test plugin (kernels "cuda.hipgen.*", kernel
# family "hipgen"); the CUDA backend itself is not involved. Steps, PASS / FAIL in the summary:
#   fa-info      fa_backend_info: cuda available, kernel families "hipgen"
#   conformance  bin/conformance_hipgen --backend cuda (tests/conformance.c with the test
#                plugin's kernel-name prefix, see backends/hip/on_cuda/hgc_conformance.cmake)
#                --require f16,bf16,causal,causal_top_left,gqa,mqa,lse,bwd,window,softcap,
#                deterministic,strided_last_dim,unaligned,hd256; every case (--quick: the subset)
#   memcheck     compute-sanitizer memcheck, --quick subset, the .d256. and the .tl. cases
#   racecheck    compute-sanitizer racecheck, --quick subset, the s257x* cases (several tiles)
# Files in $OUT (default /tmp/out): machine.txt (fa-info), conformance_hipgen.log, the sanitizer
# logs, summary.txt. Exit status 0 when no step failed. Under 9 minutes (280 s + 3 x 90 s).
set -u
cd "$(dirname "$0")/../.." || exit 2

BUILD=build/release
QUICK=0
DO_MEMCHECK=1
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=${2:?--build needs a folder}; shift ;;
    --quick) QUICK=1 ;;
    --no-memcheck) DO_MEMCHECK=0 ;;
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

banner "conformance (hip generic kernels through nvcc)"
log="$OUT/conformance_hipgen.log"
if need_bin conformance_hipgen; then
  args=(--backend cuda --require "$REQUIRE")
  [ "$QUICK" -eq 1 ] && args+=(--quick)
  echo "FA_PLUGIN_PATH=$FA_PLUGIN_PATH $BIN/conformance_hipgen ${args[*]}"
  timeout 280 "$BIN/conformance_hipgen" "${args[@]}" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  tally=$(grep -E '^conformance: [0-9]+ passed' "$log" | tail -1 | sed 's/^conformance: //')
  case $rc in
    0) record conformance PASS "$tally" ;;
    77) record conformance FAIL "skipped: $(grep -m1 '^SKIP: ' "$log")" ;;
    124) record conformance FAIL "timed out after 280 s; ${tally:-no tally}" ;;
    *) record conformance FAIL "exit status $rc; ${tally:-no tally}; grep -A8 '^FAIL' $log" ;;
  esac
else
  record conformance FAIL "conformance_hipgen not built"
fi

if [ "$DO_MEMCHECK" -eq 1 ]; then
  # memcheck (out-of-bounds accesses of the tile loops) on the head-dim-256 and top-left causal
  # cases, racecheck (shared-memory hazards: the barriers around the K/V, Q/dO and dS tiles) on
  # the cases with 257 query rows (several query and key tiles); --quick subset, 90 s each.
  # compute-sanitizer from PATH or the CUDA toolkit's usual folders (as h200_check.sh finds it).
  SANITIZER=$(command -v compute-sanitizer 2>/dev/null)
  for d in /usr/local/cuda/bin /usr/local/cuda-*/bin /opt/cuda/bin /usr/local/cuda/compute-sanitizer; do
    [ -z "$SANITIZER" ] && [ -x "$d/compute-sanitizer" ] && SANITIZER=$d/compute-sanitizer
  done
  for run in "memcheck .d256." "memcheck .tl." "racecheck s257x"; do
    set -- $run
    tool=$1 filter=$2
    banner "compute-sanitizer $tool (--quick --filter $filter)"
    mlog="$OUT/${tool}_hipgen${filter//./_}.log"
    if [ -z "$SANITIZER" ]; then
      record "$tool" FAIL "compute-sanitizer not found"
    elif need_bin conformance_hipgen; then
      timeout 90 "$SANITIZER" --tool "$tool" --error-exitcode 99 "$BIN/conformance_hipgen" \
        --backend cuda --quick --filter "$filter" > "$mlog" 2>&1
      mrc=$?
      tally=$(grep -E '^conformance: [0-9]+ passed' "$mlog" | tail -1 | sed 's/^conformance: //')
      hazards=$(grep -cE '^========= (Invalid|Error|Race|Program hit)' "$mlog")
      case $mrc in
        0) record "$tool" PASS "$filter: ${tally:-no tally}, no errors" ;;
        124) record "$tool" FAIL "$filter: timed out after 90 s; ${tally:-no tally}" ;;
        *) record "$tool" FAIL "$filter: exit status $mrc, $hazards error lines; see $mlog" ;;
      esac
    else
      record "$tool" FAIL "conformance_hipgen not built"
    fi
  done
fi

print_steps | tee "$OUT/summary.txt"
steps_status
