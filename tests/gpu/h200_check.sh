#!/usr/bin/env bash
# h200_check.sh: the CUDA backend's checks on a GPU machine, from an already-built tree.
#
#   tests/gpu/h200_check.sh [--build DIR] [--quick] [--no-conformance] [--no-sanitize] [--no-load] [--no-sass] [--no-fa3] [--sm80-build DIR]
#
# Runs only binaries (never cmake or nvcc): the build folder (default build/release) must come
# with the repository, built with the CUDA backend. Steps, each PASS / FAIL / SKIP in the summary
# table printed last:
#   gpus         nvidia-smi -L
#   fa-info      what fa_backend_info() reports; cuda must be available
#   conformance  bin/conformance --backend cuda (every case; --quick for the subset) with the
#                --require list of ctest's conformance.cuda, log in $OUT/conformance_cuda.log
#   conformance.a100, conformance.sm86
#                the same with FA_CUDA_SMEM_LIMIT at an A100's and an sm_86/89's shared memory
#                (the compact tiles; what does not fit is refused), logs in $OUT
#   conformance.fa3
#                the same with --kernel-family fa3 (what fa3 lacks is refused: a skip), log in $OUT
#   conformance.fp8
#                bin/conformance --backend cuda --filter fp8: the FP8 forward (fa3_fp8_kernel) on
#                the FP8 cases; at least the five its rules take must pass (per_tensor, per_head,
#                rotated.hd256, e5m2.per_head, no_descale; block16x32 and rotated.window are
#                skipped: k/v descale blocks of 32 and 24 rows are no whole key tiles), log in $OUT
#   conformance.sm80jit (with --sm80-build DIR only)
#                the suite from DIR, a build whose CUDA plugin is compute_80 PTX
#                (-DFA_CUDA_ARCHS=80-virtual), with FA_CUDA_AS_SM80=1 (the device run as sm_80:
#                the driver compiles the sm_80 code for it) and an A100's shared memory: the
#                code an A100 runs (dQ by atomics, no bulk copies), executed here
#   memcheck     compute-sanitizer --tool memcheck (leak check on) on bin/cuda_smoke, three times:
#                bf16 hd64 seqlen 100 causal GQA forward + backward; f16 hd128 seqlen 200
#                non-causal deterministic; bf16 hd72 seqlen 333 with the backward in a caller
#                workspace 4 bytes off alignment
#   racecheck    compute-sanitizer --tool racecheck on the first of those, and on bf16 hd256
#                seqlen 200 causal (racecheck.hd256)
#   memcheck.compact, racecheck.compact
#                hd64 seqlen 200 causal with FA_CUDA_SMEM_LIMIT=80000: both passes' compact tiles
#   memcheck.tail, racecheck.tail
#                hd64 seqlen 600 and hd256 seqlen 700, non-causal: the backward's balanced last
#                wave with every key tile cut into pieces (fa2_tail.c)
#   synccheck    compute-sanitizer --tool synccheck on the first of those
#   memcheck.seqs, racecheck.seqs, synccheck.seqs, racecheck.seqs.grid1
#                the kernels over sequences: memcheck on bin/conformance --filter varlen (no leak
#                check), racecheck and synccheck on its varlen.tiles case, racecheck on
#                varlen.window with FA_CUDA_FA3_GRID=1 (fa3's cursor, one block taking every tile)
#   memcheck.fp8, racecheck.fp8, synccheck.fp8, racecheck.fp8.grid1
#                the FP8 forward and its pre-pass: memcheck on bin/conformance --filter fp8 (no
#                leak check), racecheck and synccheck on fp8.e4m3.per_head (hd128, causal, mixed
#                layouts), racecheck on fp8.e4m3.rotated.hd256 (per-block k and v descales, three
#                key tiles) with FA_CUDA_FA3_GRID=1 (one block takes every tile)
#   memcheck.decode, memcheck.decode.kvcache, racecheck.decode, synccheck.decode,
#   racecheck.decode.paged
#                the decoding kernel (on sm_90 its bulk-copy form above head dim 192 and over paged
#                caches above 128: each warp's own buffers and mbarriers; elsewhere K and V staged
#                as halves above 192): memcheck on the one-row cases (s1x1000, every head dim) and
#                every kvcache case, racecheck and synccheck on f16.b1.h8x1.s1x1000.d256 (GQA 8
#                rows, 16 key tiles, 3 buffers a warp), racecheck on the paged kvcache cases
#                (cp.async stages with the block table read a tile ahead at head dims 64 and 128,
#                bulk copies at 256; pages of 16, 64 and 1024)
#   memcheck.wideseqs, racecheck.wideseqs, synccheck.wideseqs, racecheck.wideseqs.grid1
#                fa3's wide backward over sequences (--kernel-family fa3, so that the masked cases
#                take it too): memcheck on the varlen.wide cases, racecheck and synccheck on
#                varlen.wide.seqused.f16, racecheck with FA_CUDA_FA3_GRID=1 (one block walks
#                every item)
#   memcheck.quantize, racecheck.quantize
#                bin/test_quantize_device cuda under memcheck (leak check on) and racecheck:
#                fa_quantize's kernels on every layout, descale layout and head dim of the test
#   memcheck.ring, racecheck.ring
#                bin/cuda_ring under memcheck and racecheck: the ring's buffer steps on the GPU
#   memcheck.tables
#                memcheck on bin/cuda_bad_tables: out-of-range block tables, cu_seqlens, seqused_k
#                and cache lengths in device memory, refused with params.check_indices and
#                harmless without it (no access outside the tensors)
#   oom          fault injection under memcheck: cuda_smoke --exhaust-memory takes the device's
#                memory first; the backward must return FA_ERR_OUT_OF_MEMORY and write nothing,
#                then succeed once the memory is back
#   load         bin/cuda_load --seconds 60: 8 threads x 4 CUDA streams of forward + backward (and fa_forward_kvcache)
#                calls (deterministic) on 8 mixed problems, every result bitwise against the same
#                call made serially first; device memory free before and after (64 MiB slack) and
#                the stream-ordered pool's bytes in use; log in $OUT/load.log
#   load.oom     bin/cuda_load --exhaust-memory --seconds 0: the forward of a causal hd128
#                problem (fa3's dynamic schedule needs a workspace) with the device's memory
#                taken must return FA_ERR_OUT_OF_MEMORY and write nothing, then succeed and match;
#                SKIP where that forward needs no workspace (no fa3 on the GPU); log appended to
#                $OUT/load.log (--no-load skips both)
#   fa3cfg.<name>, fa3san.<name>
#                every fa3 forward configuration (fa3_tile_size.h) forced by FA_CUDA_FA3_CONFIG: the
#                conformance cases of its head dims; racecheck + synccheck on cuda_smoke
#                (--no-fa3 skips them; FA3_CHECK_CONFIGS="a b" checks those only); log in
#                $OUT/fa3_configs.log
#   graph        bin/cuda_graph: fa_forward + fa_backward and a decoding step of fa_forward_kvcache
#                captured in CUDA graphs and replayed with new inputs (and, for decoding, cache
#                lengths advanced in device memory), bitwise equal to eager calls
#   ring         bin/cuda_ring --require-nccl: fa_ring_forward / fa_ring_backward on CUDA tensors,
#                one rank on the self transport and on an NCCL communicator of one rank (on the
#                legacy default stream and on a non-blocking one), against float64 and the
#                one-process calls (bitwise where a step is one block); on a machine with two GPUs
#                also a ring of two processes, one a GPU, and a communicator of another GPU than
#                the tensors' refused
#   nccl         bin/nccl_transport: the NCCL transport plugin through its table, one rank: the
#                agreement, exchanges in flight on three kinds of caller stream, every byte checked
#   seqs.hd192   bin/fa-bench --varlen at head dims 192 (twice) and 256, 4k packed tokens, both
#                passes and masks: every row must run (fa3 over sequences at 192 once faulted
#                there, depending on the allocations around the tensors), log in $OUT
#   quantize     bin/test_quantize_device cuda: fa_quantize's y and descales (FP8 and rotation-only,
#                every descale layout, strided, empty) byte for byte equal to the CPU backend's
#   sm90probe    bin/sm90_probe: TMA loads, mbarrier, wgmma with both descriptor forms vs float64
#   sm90fp8probe bin/sm90_fp8_probe: the FP8 kernel's pieces (byte TMA maps with 64- and 128-byte
#                swizzles, wgmma k32, P packed to e4m3 in place, the Vᵀ pre-pass) vs float64
#   sass         cuobjdump --dump-sass lib/libfa_cuda.so: HMMA instructions must be there; LDL/STL
#                (local-memory spills) counted, per kernel, in $OUT/sass_counts.txt; every fa3
#                kernel must have HGMMA (and the library UTMALDG) and no LDL/STL between its first
#                and last HGMMA, and a PINNED one the softmax under its P V ($OUT/fa3_sass.txt);
#                every fa3 backward kernel HGMMA, UBLKRED and STSM, no LDL/STL between its first
#                and last HGMMA ($OUT/fa3_bwd_sass.txt)
# Files in $OUT (default /tmp/out; more than a tool that fetches at most eight files keeps, so
# tests/gpu/h200_round.sh archives them): machine.txt (nvidia-smi -L, fa-info), the conformance
# logs (conformance_cuda.log, .a100, .sm86, .fa3) and conformance_cuda_skips.txt (skips counted by
# reason), sanitizer.log, sass_counts.txt, fa3_sass.txt, fa3_bwd_sass.txt, fa3_configs.log,
# load.log, summary.txt. The SASS dump itself stays in a temporary folder (tens of MB). Exit
# status: 0 when no step failed. Each step has a time limit; on the H200 the steps up to the SASS
# check took 109 s without the fa3 configurations, which took about 250 s more (2026-12-05), and
# the load steps about 70 s more (load runs for 60 s).
set -u
cd "$(dirname "$0")/../.." || exit 2

BUILD=build/release
QUICK=0
DO_CONF=1
DO_SAN=1
DO_LOAD=1
DO_SASS=1
DO_FA3=1
SM80_BUILD=
while [ $# -gt 0 ]; do
  case "$1" in
    --sm80-build) SM80_BUILD=${2:?--sm80-build needs a folder}; shift ;;
    --build) BUILD=${2:?--build needs a folder}; shift ;;
    --quick) QUICK=1 ;;
    --no-conformance) DO_CONF=0 ;;
    --no-sanitize) DO_SAN=0 ;;
    --no-load) DO_LOAD=0 ;;
    --no-sass) DO_SASS=0 ;;
    --no-fa3) DO_FA3=0 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "h200_check: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# shellcheck source=tests/gpu/steps.sh
. tests/gpu/steps.sh
: > "$OUT/sanitizer.log"

# A CUDA tool: PATH, then the usual toolkit folders.
find_tool() {
  local t=$1 d
  if command -v "$t" >/dev/null 2>&1; then command -v "$t"; return 0; fi
  for d in /usr/local/cuda/bin /usr/local/cuda-*/bin /opt/cuda/bin /usr/local/cuda/compute-sanitizer; do
    if [ -x "$d/$t" ]; then echo "$d/$t"; return 0; fi
  done
  return 1
}


# --- gpus ------------------------------------------------------------------------------------
banner "nvidia-smi -L"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi -L 2>&1 | tee "$TMP/nvidia_smi.txt"
  rc=${PIPESTATUS[0]}
  cat "$TMP/nvidia_smi.txt" >> "$OUT/machine.txt"
  if [ "$rc" -eq 0 ] && grep -q '^GPU ' "$TMP/nvidia_smi.txt"; then
    record gpus PASS "$(grep -c '^GPU ' "$TMP/nvidia_smi.txt") GPU(s): $(sed -n '1s/ (UUID.*//p' "$TMP/nvidia_smi.txt")"
  else
    record gpus FAIL "nvidia-smi -L listed no GPU"
  fi
else
  record gpus FAIL "nvidia-smi not found"
fi

# --- fa-info ---------------------------------------------------------------------------------
banner "fa-info"
if need_bin fa-info; then
  timeout 30 "$BIN/fa-info" 2>&1 | tee "$TMP/fa_info.txt"
  rc=${PIPESTATUS[0]}
  { echo; cat "$TMP/fa_info.txt"; } >> "$OUT/machine.txt"
  # The cuda block of fa-info names it available or gives the reason it is not.
  cuda_line=$(grep -m1 -E '^  cuda: ' "$TMP/fa_info.txt" | sed 's/^  cuda: //')
  if [ "$rc" -ne 0 ]; then
    record fa-info FAIL "exit status $rc"
  elif [ "$cuda_line" != available ]; then
    record fa-info FAIL "cuda: ${cuda_line:-not listed}"
  else
    record fa-info PASS "cuda: available, $(grep -A3 -E '^  cuda: ' "$TMP/fa_info.txt" | sed -n 's/^ *devices *//p')"
  fi
else
  record fa-info FAIL "fa-info not built"
fi

# --- conformance -----------------------------------------------------------------------------
# conformance_env NAME SECONDS DETAIL WANT BINARY [VAR=VALUE ...]: BINARY --backend cuda under
# those variables, recorded as NAME (DETAIL before the tally); with WANT set, the log must also
# contain it (the device line that shows the mode asked for really ran). CONF_ARGS: more options.
conformance_env() {
  local name=$1 secs=$2 detail=$3 want=$4 bin=$5 log="$OUT/$1.log" rc tally
  shift 5
  echo "$* $bin --backend cuda ${CONF_ARGS:-}"
  # shellcheck disable=SC2086 # CONF_ARGS is a list of options
  env "$@" timeout "$secs" "$bin" --backend cuda ${CONF_ARGS:-} > "$log" 2>&1
  rc=$?
  tally=$(grep -E '^conformance: [0-9]+ passed' "$log" | tail -1 | sed 's/^conformance: //')
  tail -3 "$log"
  if [ "$rc" -ne 0 ]; then
    record "$name" FAIL "${detail}exit status $rc: ${tally:-no tally} (see $log)"
  elif [ -n "$want" ] && ! grep -qF "$want" "$log"; then
    record "$name" FAIL "${detail}the log does not show '$want'"
  else
    record "$name" PASS "${detail}${tally}"
  fi
}
if [ "$DO_CONF" -eq 1 ]; then
  banner "conformance --backend cuda"
  conformance_step cuda 150
  # Skips by reason (what the backend refused), for the record.
  if [ -f "$OUT/conformance_cuda.log" ]; then
    grep '^SKIP ' "$OUT/conformance_cuda.log" | sed 's/^SKIP [^:]*: \([^(]*\) not supported.*/\1/' |
      sort | uniq -c | sort -rn > "$OUT/conformance_cuda_skips.txt"
  fi
  # The compact tiles: the suite again with the shared memory of an A100 (163 KiB) and of an
  # sm_86/89 GPU (99 KiB); shapes whose compact tiles do not fit either are refused (skipped).
  for limit in 166912:a100 101376:sm86; do
    conformance_env "conformance.${limit#*:}" 150 "${limit%%:*} B: " "" "$BIN/conformance" \
      FA_CUDA_SMEM_LIMIT="${limit%%:*}"
  done
  # fa3 by name (kernel_family fa3): every case again with the family named; what fa3 does not
  # run (other head dims, deterministic, softcap) is refused and skipped. (fa2's backward at the
  # head dims fa3 runs is checked by the two runs above: fa3's does not fit there.)
  CONF_ARGS="--kernel-family fa3" conformance_env conformance.fa3 150 "kernel_family fa3: " "" \
    "$BIN/conformance"
  # The FP8 forward: its cases must run, not only not fail (a refusal is a skip in the suite).
  CONF_ARGS="--filter fp8" conformance_env conformance.fp8 60 "" "" "$BIN/conformance"
  fp8_pass=$(grep -c '^PASS fp8\.' "$OUT/conformance.fp8.log" 2>/dev/null)
  if [ "${fp8_pass:-0}" -ge 5 ]; then
    record conformance.fp8.ran PASS "$fp8_pass FP8 cases passed on cuda"
  else
    record conformance.fp8.ran FAIL "${fp8_pass:-0} FP8 cases passed on cuda (5 expected): $(grep -m3 -E '^(SKIP|FAIL) fp8' "$OUT/conformance.fp8.log" | tr '\n' ' ')"
  fi
  if [ -n "$SM80_BUILD" ]; then
    banner "conformance --backend cuda, sm_80 code (compute_80 PTX from $SM80_BUILD)"
    conformance_env conformance.sm80jit 400 "" "run as sm_80" "$SM80_BUILD/bin/conformance" \
      FA_PLUGIN_PATH="$PWD/$SM80_BUILD/lib" LD_LIBRARY_PATH="$PWD/$SM80_BUILD/lib" \
      FA_CUDA_AS_SM80=1 FA_CUDA_SMEM_LIMIT=166912
  fi
else
  for s in conformance conformance.a100 conformance.sm86 conformance.fa3 conformance.fp8 conformance.fp8.ran; do record "$s" SKIP "--no-conformance"; done
fi

# --- compute-sanitizer -----------------------------------------------------------------------
sanitize() { # step tool log args... (of bin/cuda_smoke, or of bin/$SAN_PROG)
  local step=$1 tool=$2 log=$3 prog=${SAN_PROG:-cuda_smoke}
  shift 3
  local extra=()
  [ "$tool" = memcheck ] && [ -z "${SAN_NO_LEAK:-}" ] && extra=(--leak-check full)
  # The fault-injection run fails CUDA calls on purpose: those API errors are its subject (the
  # program checks how each is handled), not sanitizer findings; memory errors still count.
  [ "$step" = oom ] && extra+=(--report-api-errors no)
  # NCCL's communicator set-up probes its kernels with cudaFuncGetAttributes and handles the
  # "no kernel image" answers itself: API errors of a library not ours (memory errors count).
  [ "$prog" = cuda_ring ] && extra+=(--report-api-errors no)
  local cmd="$SANITIZER --tool $tool ${extra[*]} $BIN/$prog $*"
  echo "$cmd"
  timeout 70 "$SANITIZER" --tool "$tool" "${extra[@]}" --error-exitcode 86 \
    "$BIN/$prog" "$@" > "$TMP/$log" 2>&1
  local rc=$?
  { echo "=== $step: $cmd (exit status $rc)"; cat "$TMP/$log"; echo; } >> "$OUT/sanitizer.log"
  tail -25 "$TMP/$log"
  local summary
  summary=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY' "$TMP/$log" | tail -2 | sed 's/^========= //' | tr '\n' ' ')
  if [ "$rc" -eq 0 ]; then
    record "$step" PASS "${summary:-no errors}"
  elif [ "$rc" -eq 86 ]; then
    record "$step" FAIL "sanitizer errors: ${summary} (see $OUT/sanitizer.log)"
  elif [ "$rc" -eq 124 ]; then
    record "$step" FAIL "timed out after 70 s (see $OUT/sanitizer.log)"
  else
    record "$step" FAIL "$prog exit status $rc: $(grep -m1 -E '^(FAIL|SKIP)' "$TMP/$log") (see $OUT/sanitizer.log)"
  fi
}
if [ "$DO_SAN" -eq 1 ]; then
  banner "compute-sanitizer"
  SANITIZER=$(find_tool compute-sanitizer)
  if [ -z "$SANITIZER" ]; then
    for s in memcheck memcheck.det memcheck.ws memcheck.compact memcheck.tail racecheck racecheck.hd256 racecheck.compact racecheck.tail synccheck oom memcheck.tables memcheck.seqs racecheck.seqs synccheck.seqs racecheck.seqs.grid1 memcheck.fp8 racecheck.fp8 synccheck.fp8 racecheck.fp8.grid1 memcheck.decode memcheck.decode.kvcache racecheck.decode synccheck.decode racecheck.decode.paged memcheck.wideseqs racecheck.wideseqs synccheck.wideseqs racecheck.wideseqs.grid1 memcheck.quantize racecheck.quantize; do record "$s" FAIL "compute-sanitizer not found"; done
  elif ! need_bin cuda_smoke; then
    for s in memcheck memcheck.det memcheck.ws memcheck.compact memcheck.tail racecheck racecheck.hd256 racecheck.compact racecheck.tail synccheck oom memcheck.tables memcheck.seqs racecheck.seqs synccheck.seqs racecheck.seqs.grid1 memcheck.fp8 racecheck.fp8 synccheck.fp8 racecheck.fp8.grid1 memcheck.decode memcheck.decode.kvcache racecheck.decode synccheck.decode racecheck.decode.paged memcheck.wideseqs racecheck.wideseqs synccheck.wideseqs racecheck.wideseqs.grid1 memcheck.quantize racecheck.quantize; do record "$s" FAIL "cuda_smoke not built"; done
  else
    "$SANITIZER" --version | tail -1
    sanitize memcheck memcheck memcheck.log
    sanitize memcheck.det memcheck memcheck_det.log --dtype f16 --hdim 128 --seqlen 200 --causal 0 --deterministic
    sanitize memcheck.ws memcheck memcheck_ws.log --hdim 72 --seqlen 333 --workspace-offset 4
    # The compact tiles of both passes (80000 B: below the wide hd64 forward, above the compact
    # hd64 backward).
    FA_CUDA_SMEM_LIMIT=80000 sanitize memcheck.compact memcheck memcheck_compact.log --hdim 64 \
      --seqlen 200 --causal 1
    # The balanced last wave (fa2_tail.c): no mask and few key tiles, so every tile is cut into
    # pieces whose dK/dV sums meet in the workspace.
    sanitize memcheck.tail memcheck memcheck_tail.log --hdim 64 --seqlen 600 --causal 0
    sanitize racecheck racecheck racecheck.log
    sanitize racecheck.tail racecheck racecheck_tail.log --hdim 256 --seqlen 700 --causal 0
    # The widest kernels (their own tile shapes and K/V pipeline), several key tiles, causal.
    sanitize racecheck.hd256 racecheck racecheck_hd256.log --hdim 256 --seqlen 200 --causal 1
    FA_CUDA_SMEM_LIMIT=80000 sanitize racecheck.compact racecheck racecheck_compact.log --hdim 64 \
      --seqlen 200 --causal 1
    sanitize synccheck synccheck synccheck.log
    sanitize oom memcheck oom.log --exhaust-memory
    # Out-of-range device index tensors, with and without params.check_indices.
    if need_bin cuda_bad_tables; then
      SAN_PROG=cuda_bad_tables sanitize memcheck.tables memcheck memcheck_tables.log
    else
      record memcheck.tables FAIL "cuda_bad_tables not built"
    fi
    # The ring over CUDA tensors: its buffer steps (fill, copy, add, the LSE merge a warp a row).
    if need_bin cuda_ring; then
      SAN_PROG=cuda_ring sanitize memcheck.ring memcheck memcheck_ring.log
      SAN_PROG=cuda_ring sanitize racecheck.ring racecheck racecheck_ring.log
    else
      record memcheck.ring FAIL "cuda_ring not built"
    fi
    # fa_quantize's kernels (a warp a run of rows, a thread block a descale block; a block a row
    # for the other head dims): the test's every layout and head dim.
    if need_bin test_quantize_device; then
      SAN_PROG=test_quantize_device sanitize memcheck.quantize memcheck memcheck_quantize.log cuda
      SAN_PROG=test_quantize_device sanitize racecheck.quantize racecheck racecheck_quantize.log \
        cuda
    else
      record memcheck.quantize FAIL "test_quantize_device not built"
      record racecheck.quantize FAIL "test_quantize_device not built"
    fi
    # The kernels over sequences (fa3's on sm_90 where its conformance cases reach them, fa2's
    # elsewhere): the suite's varlen cases under memcheck (device leaks are cuda_smoke's steps'
    # concern), racecheck and synccheck on several tiles of several sequences, and racecheck with
    # fa3's persistent grid cut to one block (the cursor over the sequences' tiles and items).
    if need_bin conformance; then
      SAN_PROG=conformance SAN_NO_LEAK=1 sanitize memcheck.seqs memcheck memcheck_seqs.log \
        --backend cuda --filter varlen
      SAN_PROG=conformance sanitize racecheck.seqs racecheck racecheck_seqs.log --backend cuda \
        --filter varlen.tiles
      SAN_PROG=conformance sanitize synccheck.seqs synccheck synccheck_seqs.log --backend cuda \
        --filter varlen.tiles
      SAN_PROG=conformance FA_CUDA_FA3_GRID=1 sanitize racecheck.seqs.grid1 racecheck \
        racecheck_seqs_grid1.log --backend cuda --filter varlen.window
      # The FP8 forward and its pre-pass (the transposed V in the workspace).
      SAN_PROG=conformance SAN_NO_LEAK=1 sanitize memcheck.fp8 memcheck memcheck_fp8.log \
        --backend cuda --filter fp8
      SAN_PROG=conformance sanitize racecheck.fp8 racecheck racecheck_fp8.log --backend cuda \
        --filter fp8.e4m3.per_head
      SAN_PROG=conformance sanitize synccheck.fp8 synccheck synccheck_fp8.log --backend cuda \
        --filter fp8.e4m3.per_head
      SAN_PROG=conformance FA_CUDA_FA3_GRID=1 sanitize racecheck.fp8.grid1 racecheck \
        racecheck_fp8_grid1.log --backend cuda --filter fp8.e4m3.rotated.hd256
      # The decoding kernel (its buffers' reuse: barriers, or each warp's mbarriers on sm_90).
      SAN_PROG=conformance SAN_NO_LEAK=1 sanitize memcheck.decode \
        memcheck memcheck_decode.log --backend cuda --filter s1x1000
      SAN_PROG=conformance SAN_NO_LEAK=1 sanitize memcheck.decode.kvcache \
        memcheck memcheck_decode_kvcache.log --backend cuda --filter kvcache
      SAN_PROG=conformance sanitize racecheck.decode racecheck \
        racecheck_decode.log --backend cuda --filter f16.b1.h8x1.s1x1000.d256
      SAN_PROG=conformance sanitize synccheck.decode synccheck \
        synccheck_decode.log --backend cuda --filter f16.b1.h8x1.s1x1000.d256
      SAN_PROG=conformance sanitize racecheck.decode.paged racecheck \
        racecheck_decode_paged.log --backend cuda --filter kvcache.paged
      # fa3's wide backward over sequences (each role walks the items with its own cursor), named
      # so that it also runs the masked cases.
      SAN_PROG=conformance SAN_NO_LEAK=1 sanitize memcheck.wideseqs memcheck \
        memcheck_wideseqs.log --backend cuda --kernel-family fa3 --filter varlen.wide
      SAN_PROG=conformance sanitize racecheck.wideseqs racecheck racecheck_wideseqs.log \
        --backend cuda --kernel-family fa3 --filter varlen.wide.seqused.f16
      SAN_PROG=conformance sanitize synccheck.wideseqs synccheck synccheck_wideseqs.log \
        --backend cuda --kernel-family fa3 --filter varlen.wide.seqused.f16
      SAN_PROG=conformance FA_CUDA_FA3_GRID=1 sanitize racecheck.wideseqs.grid1 racecheck \
        racecheck_wideseqs_grid1.log --backend cuda --kernel-family fa3 --filter varlen.wide.f16
    else
      for s in memcheck.seqs racecheck.seqs synccheck.seqs racecheck.seqs.grid1 memcheck.fp8 racecheck.fp8 synccheck.fp8 racecheck.fp8.grid1 memcheck.decode memcheck.decode.kvcache racecheck.decode synccheck.decode racecheck.decode.paged memcheck.wideseqs racecheck.wideseqs synccheck.wideseqs racecheck.wideseqs.grid1; do
        record "$s" FAIL "conformance not built"
      done
    fi
  fi
else
  for s in memcheck memcheck.det memcheck.ws memcheck.compact memcheck.tail racecheck racecheck.hd256 racecheck.compact racecheck.tail synccheck oom memcheck.tables memcheck.seqs racecheck.seqs synccheck.seqs racecheck.seqs.grid1 memcheck.fp8 racecheck.fp8 synccheck.fp8 racecheck.fp8.grid1 memcheck.decode memcheck.decode.kvcache racecheck.decode synccheck.decode racecheck.decode.paged memcheck.wideseqs racecheck.wideseqs synccheck.wideseqs racecheck.wideseqs.grid1 memcheck.quantize racecheck.quantize; do record "$s" SKIP "--no-sanitize"; done
fi

# --- load ------------------------------------------------------------------------------------
# load_step NAME SECONDS ARGS...: bin/cuda_load ARGS under a time limit, its output appended to
# $OUT/load.log. The CUDA backend must be available (77 is a failure here); a SKIP line of the
# program (the OOM check where the forward needs no workspace) makes the step a SKIP.
load_step() {
  local name=$1 secs=$2 log="$OUT/load.log" rc skipped
  shift 2
  echo "$BIN/cuda_load $*"
  timeout "$secs" "$BIN/cuda_load" "$@" > "$TMP/$name.log" 2>&1
  rc=$?
  { echo "=== $name: cuda_load $* (exit status $rc)"; cat "$TMP/$name.log"; echo; } >> "$log"
  tail -12 "$TMP/$name.log"
  skipped=$(grep -m1 '^SKIP forward without device memory' "$TMP/$name.log" | sed 's/^SKIP //')
  if [ "$rc" -eq 124 ]; then
    record "$name" FAIL "timed out after $secs s (see $log)"
  elif [ "$rc" -eq 77 ]; then
    record "$name" FAIL "skipped: $(grep -m1 '^SKIP' "$TMP/$name.log")"
  elif [ "$rc" -ne 0 ]; then
    record "$name" FAIL "exit status $rc: $(grep -m1 '^FAIL' "$TMP/$name.log") (see $log)"
  elif [ -n "$skipped" ]; then
    record "$name" SKIP "$skipped"
  elif [ "$name" = load ]; then
    record "$name" PASS "$(grep -m1 '^load: ' "$TMP/$name.log" | sed 's/^load: //')"
  else
    record "$name" PASS "$(grep -c '^PASS' "$TMP/$name.log") checks passed: $(grep -m1 '^PASS forward without device memory' "$TMP/$name.log" | sed 's/^PASS //')"
  fi
}
if [ "$DO_LOAD" -eq 1 ]; then
  banner "cuda_load"
  : > "$OUT/load.log"
  if need_bin cuda_load; then
    load_step load 100 --seconds 60
    load_step load.oom 60 --exhaust-memory --seconds 0
  else
    for s in load load.oom; do record "$s" FAIL "cuda_load not built"; done
  fi
else
  for s in load load.oom; do record "$s" SKIP "--no-load"; done
fi

# --- fa3 configurations -------------------------------------------------------------------
# Every FlashAttention-3 forward configuration of fa3_tile_size.h (the picks ran in the steps
# above), forced with the test knob FA_CUDA_FA3_CONFIG: the conformance cases of its head dims
# (fa3cfg.<name>), then racecheck and synccheck on cuda_smoke at that head dim, 300 keys (three or
# more key tiles: the K/V ring wraps), non-causal (fa3san.<name>). A persistent configuration (all
# but *_low_smem) runs both again with FA_CUDA_FA3_GRID capping its grid (conformance: 2 blocks;
# sanitizers: 1), so that every block loops over many tiles (Q buffer reuse, the dynamic
# schedule's hand-over), which the suite's small cases would not make it do on 132 SMs. Logs in
# $OUT/fa3_configs.log.
if [ "$DO_FA3" -eq 1 ]; then
  banner "fa3 configurations"
  : > "$OUT/fa3_configs.log"
  SANITIZER=${SANITIZER:-$(find_tool compute-sanitizer)}
  for cfg in ${FA3_CHECK_CONFIGS:-$(sed -n 's/^ *X(\(hd[0-9]*[a-z0-9_]*\),.*/\1/p' backends/cuda/fa3_sm90/fa3_tile_size.h)}; do
    hd=${cfg%%_*}
    hd=${hd#hd}
    dims=$hd
    [ "$hd" = 128 ] && dims="96 128"
    [ "$hd" = 256 ] && dims="192 256"
    ok=1
    tally=
    grids="full 2"
    san_caps="full 1"
    case $cfg in *_low_smem) grids=full san_caps=full ;; esac
    for grid in $grids; do
      cap=
      [ "$grid" != full ] && cap=$grid
      for d in $dims; do
        FA_CUDA_FA3_CONFIG=$cfg FA_CUDA_FA3_GRID=$cap timeout 300 "$BIN/conformance" \
          --backend cuda --filter ".d$d." > "$TMP/fa3cfg.log" 2>&1 || ok=0
        { echo "=== $cfg d$d grid $grid"; cat "$TMP/fa3cfg.log"; } >> "$OUT/fa3_configs.log"
        tally="$tally d$d${cap:+/grid$cap}: $(grep -E '^conformance: [0-9]+ passed' "$TMP/fa3cfg.log" | tail -1 | sed 's/^conformance: //')"
      done
    done
    [ "$ok" -eq 1 ] && record "fa3cfg.$cfg" PASS "$tally" || record "fa3cfg.$cfg" FAIL "$tally (see fa3_configs.log)"
    if [ -n "$SANITIZER" ]; then
      san_ok=1
      for grid in $san_caps; do
        cap=
        [ "$grid" != full ] && cap=$grid
        # cuda_smoke runs f16/bf16; an FP8 configuration runs the suite's FP8 cases instead
        san_cmd=("$BIN/cuda_smoke" --hdim "$hd" --seqlen 300 --causal 0)
        case $cfg in *_fp8) san_cmd=("$BIN/conformance" --backend cuda --filter fp8) ;; esac
        for tool in racecheck synccheck; do
          FA_CUDA_FA3_CONFIG=$cfg FA_CUDA_FA3_GRID=$cap timeout 90 "$SANITIZER" --tool "$tool" \
            --error-exitcode 86 "${san_cmd[@]}" > "$TMP/fa3san.log" 2>&1 || san_ok=0
          { echo "=== $cfg $tool grid ${cap:-full}"; cat "$TMP/fa3san.log"; } >> "$OUT/fa3_configs.log"
        done
      done
      [ "$san_ok" -eq 1 ] && record "fa3san.$cfg" PASS "racecheck, synccheck clean" || record "fa3san.$cfg" FAIL "see fa3_configs.log"
    fi
  done
else
  record fa3cfg SKIP "--no-fa3"
fi

# --- test programs -------------------------------------------------------------------------
# program_step STEP PROGRAM SECONDS MISSING [ARGS...]: bin/PROGRAM ARGS under a time limit; PASS
# with its last line, else FAIL with its first FAIL or SKIP line; MISSING (SKIP or FAIL) where it
# is not built.
program_step() {
  local step=$1 prog=$2 secs=$3 missing=$4 log="$TMP/$2.txt"
  shift 4
  if [ ! -x "$BIN/$prog" ]; then
    record "$step" "$missing" "bin/$prog not built"
    return
  fi
  banner "$prog"
  if timeout "$secs" "$BIN/$prog" "$@" > "$log" 2>&1; then
    record "$step" PASS "$(tail -1 "$log")"
  else
    record "$step" FAIL "$(grep -m1 -E '^(FAIL|SKIP)' "$log")"
  fi
  cat "$log"
}
# bin/sm90_probe: TMA, mbarrier and wgmma (K-major and MN-major descriptors) vs float64 (built
# only with an sm_90a-capable toolkit).
program_step sm90probe sm90_probe 60 SKIP
# bin/sm90_fp8_probe: the FP8 forward's TMA byte maps, wgmma k32 descriptors, P packed in place
# and the Vᵀ pre-pass vs float64, at head dims 64, 128, 256.
program_step sm90fp8probe sm90_fp8_probe 60 SKIP
# bin/cuda_graph: the calls captured in CUDA graphs and replayed against eager calls.
program_step graph cuda_graph 120 FAIL
# bin/cuda_ring: the ring calls on CUDA tensors (self, one-rank NCCL, two ranks on two GPUs)
# against float64 and the one-process calls.
program_step ring cuda_ring 180 FAIL --require-nccl
# bin/nccl_transport: the NCCL transport's table on one GPU (exchanges in flight, a 2.5 GiB message).
program_step nccl nccl_transport 120 FAIL
# bin/test_quantize_device cuda: fa_quantize on the GPU byte for byte against the CPU backend.
program_step quantize test_quantize_device 300 FAIL cuda

# fa3 over sequences at head dim 192 on packed tensors of 4k tokens, several problems in one
# process, both passes, both masks: a load of the wholly out-of-range column box through a
# sequence's view faulted here, depending on the allocations around the tensors
# (fa3_col_boxes.cuh); the conformance cases' tensors are too small to show it.
if need_bin fa-bench; then
  banner "fa-bench --varlen, head dims 192 and 256"
  timeout 120 "$BIN/fa-bench" --backend cuda --varlen --hdims 192,192,256 --seqlens 1024,8192 \
    --tokens 4096 --iters 2 --progress -1 > "$OUT/seqs_hd192.log" 2>&1
  rc=$?
  tail -3 "$OUT/seqs_hd192.log"
  if [ "$rc" -eq 0 ] && grep -q '^0 rows failed' "$OUT/seqs_hd192.log"; then
    record seqs.hd192 PASS "$(grep -c 'cuda\.fa3\.sm90\.[a-z]*\.bf16\.hd192' "$OUT/seqs_hd192.log") rows on fa3 at hd192, every row ran"
  else
    record seqs.hd192 FAIL "exit status $rc: $(grep -m1 'failed:' "$OUT/seqs_hd192.log" | sed 's/.*| //')"
  fi
else
  record seqs.hd192 FAIL "fa-bench not built"
fi

# --- SASS ------------------------------------------------------------------------------------
if [ "$DO_SASS" -eq 1 ]; then
  banner "SASS of $LIB/libfa_cuda.so"
  CUOBJDUMP=$(find_tool cuobjdump)
  if [ -z "$CUOBJDUMP" ]; then
    record sass FAIL "cuobjdump not found"
  elif [ ! -f "$LIB/libfa_cuda.so" ]; then
    record sass FAIL "$LIB/libfa_cuda.so missing (built without the CUDA backend?)"
  elif ! timeout 60 "$CUOBJDUMP" --dump-sass "$LIB/libfa_cuda.so" > "$TMP/sass.txt" 2> "$TMP/sass.err"; then
    record sass FAIL "cuobjdump failed: $(head -1 "$TMP/sass.err")"
  else
    hmma=$(grep -c HMMA "$TMP/sass.txt")
    ldl=$(grep -cE '\bLDL(\.|\s)' "$TMP/sass.txt")
    stl=$(grep -cE '\bSTL(\.|\s)' "$TMP/sass.txt")
    # Per kernel (and per architecture, as cuobjdump lists them): HMMA, LDL, STL lines.
    awk '/^[[:space:]]*arch = /{arch=$3}
         /Function : /{fn=$NF; key=arch " " fn; order[++n]=key}
         /HMMA/{h[key]++} /HGMMA/{g[key]++} /UTMALDG/{u[key]++}
         /[[:space:]]LDL[. ]/{l[key]++} /[[:space:]]STL[. ]/{s[key]++}
         END{printf "%-6s %6s %6s %6s %6s %7s  %s\n", "arch", "HMMA", "LDL", "STL", "HGMMA",
               "UTMALDG", "function";
             for(i=1;i<=n;i++){k=order[i]; split(k, a, " ");
               printf "%-6s %6d %6d %6d %6d %7d  %s\n", a[1], h[k], l[k], s[k], g[k], u[k], a[2]}}' \
      "$TMP/sass.txt" > "$OUT/sass_counts.txt"
    echo "HMMA lines: $hmma, LDL lines: $ldl, STL lines: $stl (per kernel: $OUT/sass_counts.txt)"
    echo "kernels with local-memory traffic:"
    awk 'NR > 1 && ($3 > 0 || $4 > 0)' "$OUT/sass_counts.txt" | sort -k3,3nr | head -20
    # The fa3 kernels: warpgroup MMA (HGMMA; the FP8 kernels, fa3_fp8_kernel: QGMMA) and TMA
    # loads there, and no local memory in the
    # main loop (no LDL/STL between a kernel's first and last HGMMA; a spill in the per-tile
    # set-up is listed in fa3_sass.txt but allowed). Column 5: the MUFU.EX2 between the main
    # loop's wait for S (DEPBAR.LE gsb0, 0x1) and the next wait, i.e. the softmax under the
    # previous P V; a kernel with FA3_PINNED_SOFTMAX in its flags (the template's last argument)
    # must have some (NOPIN otherwise: ptxas hoisted the wait after all).
    pinned=$(sed -n 's/^#define FA3_PINNED_SOFTMAX \([0-9]*\).*/\1/p' backends/cuda/fa3_sm90/fa3_tile_size.h)
    awk -v pinned="${pinned:-0}" 'function flags_of(f, s) { s = f; sub(/EEv12fa3_fwd_args.*/, "", s); sub(/.*Li/, "", s);
           return s + 0 }
         /Function : /{if (fn ~ /fa3_(fwd|fp8)_kernel/) report(); fn=$NF; n=0; first=0; last=0; w1=0;
           mu=0; under=0; delete ls}
         function report(  st) { loop=0; for (i in ls) if (i + 0 > first && i + 0 < last) loop++;
           st = first > 0 ? "ok" : "NOHG";
           if (st == "ok" && (pinned == 0 || int(flags_of(fn) / pinned) % 2 == 1) && under == 0)
             st = "NOPIN";
           printf "%-6s %6d %6d %6d %6d  %s\n", st, hg, length(ls), loop, under, fn;
           hg=0 }
         fn ~ /fa3_(fwd|fp8)_kernel/ { n++; if ($0 ~ /[HQ]GMMA/) { hg++; if (!first) first=n; last=n }
           if ($0 ~ /[[:space:]](LDL|STL)[. ]/) ls[n]=1
           if (w1 == 0 && $0 ~ /WARPGROUP\.DEPBAR\.LE gsb0, 0x1/) w1 = 1
           else if (w1 == 1 && $0 ~ /WARPGROUP\.DEPBAR/) { w1 = 2; under = mu }
           else if (w1 == 1 && $0 ~ /MUFU\.EX2/) mu++ }
         END{if (fn ~ /fa3_(fwd|fp8)_kernel/) report()}' "$TMP/sass.txt" > "$OUT/fa3_sass.txt"
    # The backward kernels (fa3_bwd_kernel): HGMMA, the dQ bulk reduction (UBLKRED: the narrow
    # kernels, head dims 64 and 128; the wide one adds dQ from registers) and dS by stmatrix (STSM)
    # present, no LDL/STL between the first and last HGMMA (the consumers' loop;
    # the producer's code after it may spill a word). Columns: status, HGMMA, UBLKRED, STSM,
    # LDL/STL in the loop, kernel.
    awk '/Function : /{if (fn ~ /fa3_bwd_kernel/) report(); fn=$NF; n=0; first=0; last=0;
           hg=0; red=0; stsm=0; delete ls}
         function report(  st, loop, wide) { loop=0; for (i in ls) if (i + 0 > first && i + 0 < last) loop++;
           wide = fn ~ /Li256E/;
           st = hg > 0 && (red > 0 || wide) && stsm > 0 ? "ok" : "MISSING";
           printf "%-7s %6d %4d %4d %4d  %s\n", st, hg, red, stsm, loop, fn }
         fn ~ /fa3_bwd_kernel/ { n++; if ($0 ~ /HGMMA/) { hg++; if (!first) first=n; last=n }
           if ($0 ~ /UBLKRED/) red++; if ($0 ~ /STSM/) stsm++
           if ($0 ~ /[[:space:]](LDL|STL)[. ]/) ls[n]=1 }
         END{if (fn ~ /fa3_bwd_kernel/) report()}' "$TMP/sass.txt" > "$OUT/fa3_bwd_sass.txt"
    fa3_n=$(wc -l < "$OUT/fa3_sass.txt")
    fa3_bad=$(awk '$1 != "ok" || $4 > 0' "$OUT/fa3_sass.txt" | wc -l)
    fa3_bad=$((fa3_bad + $(awk '$1 != "ok" || $5 > 0' "$OUT/fa3_bwd_sass.txt" | wc -l)))
    [ -s "$OUT/fa3_bwd_sass.txt" ] || fa3_bad=$((fa3_bad + 1))
    grep -q UTMALDG "$TMP/sass.txt" || fa3_bad=$((fa3_bad + 1))
    if [ "$fa3_bad" -gt 0 ]; then
      record sass FAIL "$fa3_bad of $fa3_n fa3 forward kernels and the backward ones lack HGMMA (or no UTMALDG; backward: UBLKRED, STSM), spill in the main loop or lost their pinned softmax (fa3_sass.txt, fa3_bwd_sass.txt)"
    elif [ "$hmma" -gt 0 ]; then
      record sass PASS "HMMA $hmma, LDL $ldl, STL $stl; $fa3_n fa3 forward kernels: HGMMA, UTMALDG, no LDL/STL in the main loop, pinned softmax under P V; $(wc -l < "$OUT/fa3_bwd_sass.txt") backward kernels: HGMMA, UBLKRED, STSM, no LDL/STL in the consumers' loop"
    else
      record sass FAIL "no HMMA instruction (LDL $ldl, STL $stl)"
    fi
  fi
else
  record sass SKIP "--no-sass"
fi

# --- summary ---------------------------------------------------------------------------------
print_steps | tee "$OUT/summary.txt"
steps_status
exit $?
