#!/usr/bin/env bash
# fa3_profile.sh: one device call that says where the fa3 forward's time goes beside cuDNN's
# attention kernel: the peer's kernel names (torch profiler), hardware counters of both kernels on
# each shape (bench/ncu_compare.sh: tensor-pipe and MUFU use, issue rate, stall reasons, launch
# shape, clocks, L2 hit rate) and our kernel's per-instruction stall samples (bench/ncu_source.sh,
# read by bench/ncu_stalls.py). Everything lands in $OUT/profile.tgz; the tables print last.
#
# PASS=bwd profiles the backward (with OURS_RE=fa3_bwd, PEER_RE=<cuDNN's dgrad kernel>,
# PEER_ARGS="--kernel-family fa3").
#   SHAPES="128:8192:0 64:1024:1" SOURCE="128:8192:0" BUILD=build/lead bash bench/fa3_profile.sh
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/out}
BUILD=${BUILD:-build/lead}
LIB=$BUILD/lib/libflashattn.so
work=$(mktemp -d)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > "$work/smi.txt" 2>&1
python3 - "${PASS:-fwd}" > "$work/peer_kernels.txt" 2>&1 <<'PY'
import sys, torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
bwd = sys.argv[1] == "bwd"
def run(q, k, v, causal):
    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    if bwd:
        o.backward(torch.randn_like(o))
for causal in (False, True):
    q, k, v = (torch.randn(2, 16, 8192, 128, device="cuda", dtype=torch.bfloat16,
                           requires_grad=bwd) for _ in range(3))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        run(q, k, v, causal)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as p:
            run(q, k, v, causal)
            torch.cuda.synchronize()
    print("causal", causal, sorted({e.name for e in p.events() if e.device_type.name == "CUDA"}))
PY
# shellcheck disable=SC2086  # SHAPES and PEER_ARGS are lists
OUT=$work bash bench/ncu_compare.sh --lib "$LIB" --pass "${PASS:-fwd}" --ours "${OURS_RE:-fa3_fwd}" \
  --peer "${PEER_RE:-cudnn|sdpa|fprop}" ${SHAPES:-128:8192:0} > "$work/compare.txt" 2>&1
for s in ${SOURCE:-}; do
  OUT=$work bash bench/ncu_source.sh --lib "$LIB" --pass "${PASS:-fwd}" --regex "${OURS_RE:-fa3_fwd}" "$s" \
    >> "$work/source.log" 2>&1
done
for f in "$work"/ncu_source_*.csv.gz; do
  [ -f "$f" ] || continue
  { echo "=== $f"; python3 bench/ncu_stalls.py "$f" -n 25; } >> "$work/stalls.txt" 2>&1
done
tar -czf "$OUT/profile.tgz" -C "$work" .
cat "$work/smi.txt" "$work/peer_kernels.txt"
[ -f "$work/source.log" ] && tail -n 5 "$work/source.log"
[ -f "$work/stalls.txt" ] && head -c 5000 "$work/stalls.txt"
cat "$work/compare.txt"
rm -rf "$work"
