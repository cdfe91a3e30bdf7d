#!/usr/bin/env bash
# h200_round.sh: the GPU checks and the peer sweep in one run on a GPU machine, from a tree built
# elsewhere (carry the build's lib/, bin/ and tests/CTestTestfile.cmake):
#   1. tests/gpu/h200_check.sh --build $BUILD $CHECK_ARGS      -> check.txt, check_logs.tgz
#   2. with PYTHON=1: python/tests/run_tests.py (the PyTorch CUDA tests included) and
#      examples/torch_train_step.py cuda                         -> python.txt
#   3. with SWEEP=1: bench/peer.py --check $SWEEP_ARGS           -> sweep.txt, sweep.json, sweep.png
#   4. with DECODE=1: decoding against the peers (bench/peer.py --seqlen-q 1: GQA 32:8 and MHA,
#      head dims 64/128/256, batch 1/8/64, 4k-128k keys, %bw against peer.py's read probe;
#      DECODE_SHAPES="opts;opts" for other batch / kv-heads choices) and fa-bench --decode on
#      dense and paged caches (page sizes 16 and 64), fa-bench --varlen (packed against padded prefill)
#                                                                -> decode.txt
#   5. with CPU=1: the CPU backend on the machine's host CPU (all its cores; AMX where it has it):
#      fa-info, the conformance suite's quick subset with the default build, the peak probes
#      (cpu-amx-peak, cpu-fma-peak), fa-bench bf16 per build (avx512, avx512bf16, amx) and the
#      default build at 1, 2, 4, ... threads, then bench/cpu_peers.py against PyTorch (prefill
#      forward and backward, decoding); CPU=quick: without the per-build fa-bench rows and
#      cpu_peers.py                                              -> cpu.txt
#   6. with EXTRA="cmd": that command's output                   -> extra.txt
# then prints the summaries last. Files in $OUT: at most the eight above.
#
#   BUILD=build/dev CHECK_ARGS="--no-fa3" PYTHON=1 SWEEP=1 bash tests/gpu/h200_round.sh
set -u
cd "$(dirname "$0")/../.." || exit 2
OUT=${OUT:-/tmp/out}
BUILD=${BUILD:-build/release}
mkdir -p "$OUT"
export OUT

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
  --format=csv > "$OUT/check.txt" 2>&1
start=$(date +%s)
check_rc=0
if [ "${CHECK:-1}" = 1 ]; then
  # shellcheck disable=SC2086 # CHECK_ARGS is a list of options
  OUT="$OUT/check" bash tests/gpu/h200_check.sh --build "$BUILD" ${CHECK_ARGS:-} >> "$OUT/check.txt" 2>&1
  check_rc=$?
  tar -C "$OUT" -czf "$OUT/check_logs.tgz" check && rm -rf "$OUT/check"
fi
echo "check: $(($(date +%s) - start)) s" >> "$OUT/check.txt"

lib=$PWD/$BUILD/lib/libflashattn.so
py_rc=0
if [ "${PYTHON:-0}" = 1 ]; then
  {
    FLASHATTN_LIBRARY=$lib timeout 300 python3 python/tests/run_tests.py 2>&1
    echo "python tests: exit status $?"
    FLASHATTN_LIBRARY=$lib PYTHONPATH=$PWD/python timeout 120 python3 examples/torch_train_step.py cuda 2>&1
    echo "torch_train_step cuda: exit status $?"
  } > "$OUT/python.txt"
  grep -q "exit status [1-9]" "$OUT/python.txt" && py_rc=1
fi

sweep_rc=0
if [ "${SWEEP:-0}" = 1 ]; then
  # shellcheck disable=SC2086 # SWEEP_ARGS is a list of options
  PYTHONUNBUFFERED=1 timeout 420 python3 bench/peer.py --check --host-time --lib "$lib" ${SWEEP_ARGS:-} \
    --json "$OUT/sweep.json" --png "$OUT/sweep.png" > "$OUT/sweep.txt" 2>&1
  sweep_rc=$?
fi

if [ "${DECODE:-0}" = 1 ]; then
  {
    IFS=';' read -r -a shapes <<< "${DECODE_SHAPES:---batch 8 --kv-heads 8;--batch 8 --kv-heads 32;--batch 1 --kv-heads 8;--batch 1 --kv-heads 32;--batch 64 --kv-heads 8}"
    for shape in "${shapes[@]}"; do
      # shellcheck disable=SC2086 # shape is a list of options
      PYTHONUNBUFFERED=1 timeout 200 python3 bench/peer.py --check --host-time --lib "$lib" --pass fwd \
        --seqlen-q 1 --heads 32 --hdims 64,128,256 --causal 0 \
        --seqlens 4096,8192,32768,131072 $shape 2>&1 | grep -E "^ *(64|128|256) |FAIL|rror|read probe|%bw"
    done
    for page in 0 64 16; do
      LD_LIBRARY_PATH="$PWD/$BUILD/lib" timeout 120 "$BUILD/bin/fa-bench" --backend cuda --decode \
        --hdims 128 --seqlens 8192,32768,131072 --heads 32 --kv-heads 8 --batch 8 \
        --page-size "$page" 2>&1 | grep -E "^ *128 |failed"
    done
    LD_LIBRARY_PATH="$PWD/$BUILD/lib" timeout 200 "$BUILD/bin/fa-bench" --backend cuda --varlen \
      --pass fwd,bwd --hdims 64,128,256 --seqlens 1024,8192 2>&1 | grep -E "^ *(64|128|256) |failed"
  } > "$OUT/decode.txt" 2>&1
fi

if [ "${CPU:-0}" = 1 ] || [ "${CPU:-0}" = quick ]; then
  # cpu_run THREADS CMD...: CMD on THREADS OpenMP threads, one a core, with the build's lib/
  cpu_run() {
    LD_LIBRARY_PATH="$PWD/$BUILD/lib" OMP_NUM_THREADS=$1 OMP_PROC_BIND=close OMP_PLACES=cores \
      "${@:2}"
  }
  {
    bin=$BUILD/bin
    cores=$(nproc)
    lscpu | grep -E "Model name|^CPU\(s\)|Thread|L3"
    grep -o -w -E "amx_[a-z0-9]+|avx512_bf16|avx512_fp16" /proc/cpuinfo | sort -u | tr '\n' ' '
    echo
    cpu_run "$cores" "$bin/fa-info" 2>&1 | grep -A4 "^  cpu:"
    # the first failures with their reasons, then the count
    cpu_run "$cores" timeout 120 "$bin/conformance" --backend cpu --quick 2>&1 |
      awk '/^FAIL/ && n < 5 { n++; print; getline; print } /^conformance: .* passed/ { print }'
    cpu_run "$cores" "$bin/cpu-amx-peak" 2>&1 | tail -1
    cpu_run "$cores" "$bin/cpu-fma-peak" | tail -1
    # shellcheck disable=SC2054 # the commas separate the values of one option
    shapes=(--dtype bf16 --hdims 64,128 --seqlens 1024,4096 --tokens 4096 --hidden 1024
      --causal 0,1 --pass fwd,bwd --iters 3 --progress -1)
    isas="avx512 avx512bf16 amx"
    [ "$CPU" = quick ] && isas=""
    for isa in $isas; do
      echo "== fa-bench FA_CPU_ISA=$isa, $cores threads"
      FA_CPU_ISA=$isa cpu_run "$cores" timeout 120 "$bin/fa-bench" --backend cpu "${shapes[@]}" \
        2>&1 | grep -E "^[01] |failed|refused"
    done
    for t in 1 2 4 8 16 32 64; do
      [ "$t" -gt "$cores" ] && break
      echo "== fa-bench default build, $t threads, hd128 4k"
      cpu_run "$t" timeout 120 "$bin/fa-bench" --backend cpu --dtype bf16 --hdims 128 \
        --seqlens 4096 --tokens 4096 --hidden 1024 --causal 0 --pass fwd,bwd --iters 2 \
        --progress -1 2>&1 | grep -E "^0 |failed"
    done
    if [ "$CPU" = 1 ]; then
      cpu_run "$cores" timeout 300 python3 bench/cpu_peers.py --mode prefill --peers torch \
        --pass fwd,bwd --dtypes bf16 --torch-dtypes bf16,f32 --threads "$cores" --lib "$lib" \
        --rounds 3 2>&1 | tail -22
      cpu_run "$cores" timeout 200 python3 bench/cpu_peers.py --mode decode --peers torch \
        --dtypes f16,bf16 --torch-dtypes bf16 --threads "$cores" \
        --seqlens 4096,16384,65536,131072 --kv-heads 8 --lib "$lib" --rounds 3 2>&1 | tail -12
    fi
  } > "$OUT/cpu.txt" 2>&1
fi

if [ -n "${EXTRA:-}" ]; then
  LD_LIBRARY_PATH="$PWD/$BUILD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" bash -c "$EXTRA" > "$OUT/extra.txt" 2>&1
  echo "extra: exit status $?" >> "$OUT/extra.txt"
fi

head -2 "$OUT/check.txt"
tail -40 "$OUT/check.txt"
[ -f "$OUT/python.txt" ] && grep -E "^(Ran|OK|FAILED|FAIL:|ERROR:)|exit status|skipped" "$OUT/python.txt" | head -30
[ -f "$OUT/extra.txt" ] && tail -30 "$OUT/extra.txt"
[ -f "$OUT/decode.txt" ] && cat "$OUT/decode.txt"
[ -f "$OUT/cpu.txt" ] && cat "$OUT/cpu.txt"
[ -f "$OUT/sweep.txt" ] && tail -50 "$OUT/sweep.txt"
echo "h200_round: check rc=$check_rc python rc=$py_rc sweep rc=$sweep_rc"
