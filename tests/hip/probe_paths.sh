#!/usr/bin/env bash
# probe_paths.sh <test_hip_info> <libfa_hip.so>: the HIP plugin's other reasons, on a machine
# without an AMD GPU. test_hip_info checks the reason against what it finds itself; here it runs
# in private mount namespaces (unshare, root only) that change what it finds:
#   kfd        an empty /dev with a /dev/kfd file: the plugin loads the HIP runtime, which sees
#              no device ("no AMD device"), or finds none ("no HIP runtime")
#   no-runtime the same, with the runtime library (where installed) replaced by an empty file:
#              "no HIP runtime"
# Exits 77 (skipped) where mount namespaces are not permitted.
set -u
test_bin=$1
plugin=$2
unshare --mount true 2>/dev/null || { echo "SKIP: unshare --mount is not permitted here"; exit 77; }
fail=0
echo "=== kfd"
unshare --mount bash -c 'mount -t tmpfs none /dev && : > /dev/kfd && exec "$0" "$1"' \
  "$test_bin" "$plugin" || fail=1
rt=$(ldconfig -p | sed -n 's/.*libamdhip64\.so\.[0-9]* .*=> //p' | head -1)
if [ -n "$rt" ]; then
  echo "=== no-runtime ($rt hidden)"
  empty=$(mktemp)
  unshare --mount bash -c 'mount --bind "$2" "$(readlink -f "$3")" && mount -t tmpfs none /dev &&
    : > /dev/kfd && exec "$0" "$1"' "$test_bin" "$plugin" "$empty" "$rt" || fail=1
  rm -f "$empty"
else
  echo "=== no-runtime: no libamdhip64 installed (the kfd run above covered it)"
fi
exit $fail
