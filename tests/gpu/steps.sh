# steps.sh: what tests/gpu/h200_check.sh and h200_opencl.sh share, sourced by both after they
# have parsed their options (BUILD set) and moved to the repository root:
#   the output folder ($OUT, default /tmp/out) with machine.txt emptied, a temporary folder ($TMP,
#   removed on exit), the build's bin and lib folders ($BIN, $LIB; lib first on the library path,
#   since the binaries' RPATH names the folder they were built in and this copy may live
#   elsewhere), and the step table: record NAME RESULT DETAIL, banner TITLE, need_bin NAME,
#   conformance_step BACKEND SECONDS [TAG], print_steps (the table), steps_status (0 when no step
#   failed).
# shellcheck shell=bash
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
: > "$OUT/machine.txt"
BIN=$BUILD/bin
LIB=$BUILD/lib
export LD_LIBRARY_PATH="$PWD/$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
START=$(date +%s)

STEPS=()
RESULTS=()
DETAILS=()
record() { # name result detail
  STEPS+=("$1")
  RESULTS+=("$2")
  DETAILS+=("$3")
  echo "--- $1: $2${3:+ ($3)}"
}
banner() { echo; echo "=== $1 ($(($(date +%s) - START)) s)"; }
need_bin() { # name: 0 when $BIN/name exists
  [ -x "$BIN/$1" ] && return 0
  echo "$BIN/$1 is missing: build the tree first (cmake --preset release && cmake --build --preset release)"
  return 1
}
# bin/conformance --backend BACKEND with the --require list of ctest's conformance.BACKEND
# (tests/CMakeLists.txt) and --quick when QUICK=1, limited to SECONDS, its output in
# $OUT/conformance_BACKEND.log; one "conformance" record, its detail prefixed by TAG.
conformance_step() {
  local backend=$1 secs=$2 tag=${3:-} log="$OUT/conformance_$1.log" require rc tally
  local args=(--backend "$backend")
  if ! need_bin conformance; then
    record conformance FAIL "conformance not built"
    return
  fi
  require=$(grep -F "add_test([=[conformance.$backend]=]" "$BUILD/tests/CTestTestfile.cmake" \
    2>/dev/null | sed -n 's/.*"--require" "\([^"]*\)".*/\1/p' | head -1)
  [ -n "$require" ] && args+=(--require "$require")
  [ "${QUICK:-0}" -eq 1 ] && args+=(--quick)
  echo "$BIN/conformance ${args[*]}"
  timeout "$secs" "$BIN/conformance" "${args[@]}" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  tally=$(grep -E '^conformance: [0-9]+ passed' "$log" | tail -1 | sed 's/^conformance: //')
  if [ "$rc" -eq 0 ]; then
    record conformance PASS "${tag}${tally}"
  elif [ "$rc" -eq 77 ]; then
    record conformance FAIL "${tag}skipped: $(grep -m1 '^SKIP: ' "$log")"
  elif [ "$rc" -eq 124 ]; then
    record conformance FAIL "${tag}timed out after $secs s; ${tally:-no tally}"
  else
    record conformance FAIL "${tag}exit status $rc; ${tally:-no tally}; failures: grep -A8 '^FAIL' $log"
  fi
}

print_steps() {
  echo
  echo "=== summary ($(($(date +%s) - START)) s; logs in $OUT)"
  printf '%-12s %-5s %s\n' step result detail
  local i
  for i in "${!STEPS[@]}"; do
    printf '%-12s %-5s %s\n' "${STEPS[$i]}" "${RESULTS[$i]}" "${DETAILS[$i]}"
  done
}
steps_status() {
  local r
  for r in "${RESULTS[@]}"; do [ "$r" = FAIL ] && return 1; done
  return 0
}
