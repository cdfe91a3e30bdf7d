#!/usr/bin/env bash
# Builds (if needed) and runs the libFuzzer target tests/fuzz/fuzz_api.c for SECONDS seconds.
#
#   tests/fuzz/run_fuzz.sh SECONDS [BUILD_DIR]
#
# BUILD_DIR defaults to build/fuzz (configured with clang, FA_FUZZ=ON, the CPU backend only).
# The seed corpus is generated here (a few inputs, one per call the target makes: a zero byte is
# always the well-formed choice, so each seed is a valid call); the corpus the run grows is kept
# in BUILD_DIR/corpus between runs. Crashes are written to BUILD_DIR/artifacts/ and make this
# script fail. The last lines of the log (executions, coverage) are what docs/RELIABILITY.md
# records. FUZZ_JOBS (default 1) runs that many fuzzing processes in parallel.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:?usage: run_fuzz.sh SECONDS [BUILD_DIR]}
build=${2:-build/fuzz}
jobs=${FUZZ_JOBS:-1}

if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=${FUZZ_CC:-clang} cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFA_FUZZ=ON \
    -DFA_BACKEND_CUDA=OFF -DFA_BACKEND_OPENCL=OFF -DBUILD_TESTING=OFF -DFA_WERROR=ON >/dev/null
fi
cmake --build "$build" --target fuzz_api fa_cpu -j 2
# Without the CPU plugin (clang found no OpenMP: apt-get install libomp-dev) every call would stop
# at "backend unavailable" and the run would test validation only.
[ -f "$build/lib/libfa_cpu.so" ] || { echo "run_fuzz.sh: $build has no CPU plugin (libomp-dev?)"; exit 1; }

corpus=$build/corpus
seeds=$build/seeds
mkdir -p "$corpus" "$seeds" "$build/artifacts"
# Byte 0 is the call (0 forward, 1 backward, 2 kvcache, 3-5 their plans, 6-7 workspace sizes),
# byte 1 the layout bits (1 varlen, 2 paged, 4 seqused_k, 8 ALiBi, 16 packed LSE, 128 huge plans).
for op in 0 1 2 3 4 5 6 7; do
  for layout in 0 1 2 3 5 8 17 128 131; do
    printf "\\x$(printf %02x "$op")\\x$(printf %02x "$layout")" >"$seeds/op${op}_l${layout}"
  done
done

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# One OpenMP thread per fuzzing process: the CPU backend's results do not depend on it, and
# libFuzzer's -timeout and RSS accounting are per process.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
log=$build/fuzz.log
echo "fuzzing for ${secs}s ($jobs job(s)); log: $log"
par=()
# Several jobs: libFuzzer forks them, each logging to fuzz-N.log in the current directory.
[ "$jobs" -gt 1 ] && par=(-jobs="$jobs" -workers="$jobs")
set +e
"$build/bin/fuzz_api" "$corpus" "$seeds" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 \
  -max_len=512 -print_final_stats=1 -artifact_prefix="$build/artifacts/" "${par[@]}" >"$log" 2>&1
rc=$?
set -e
if [ "$jobs" -gt 1 ]; then
  cat fuzz-*.log >>"$log" 2>/dev/null || true
  rm -f fuzz-*.log
fi
grep -E "^#[0-9]+ +(DONE|pulse|NEW|REDUCE)" "$log" | tail -3 || true
grep -E "^stat::|Done [0-9]+ runs" "$log" || true
if [ "$rc" -ne 0 ]; then
  grep -E "ERROR|SUMMARY|fuzz_api:|runtime error" "$log" | head -20 || true
  echo "fuzzer failed (exit $rc); crash inputs in $build/artifacts/"
  exit "$rc"
fi
echo "fuzzing: no crash, leak or sanitizer report in ${secs}s"
