# steps.sh: what tests/gpu/h200_check.sh and h200_opencl.sh share, sourced by both after they
# have parsed their options (BUILD set) and moved to the repository root:
#   the output folder ($OUT, default /tmp/out) with machine.txt emptied, a temporary folder ($TMP,
#   removed on exit), the build's bin and lib folders ($BIN, $LIB; lib first on the library path,
#   since the binaries' RPATH names the folder they were built in and this copy may live
#   elsewhere), and the step table: record NAME RESULT DETAIL, banner TITLE, need_bin NAME,
#   print_steps (the table), steps_status (0 when no step failed).
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
