#!/usr/bin/env bash
# ncu_compare.sh: hardware counters of our CUDA kernels beside FlashAttention-2's (PyTorch SDPA's
# flash backend) on the same shape, one kernel launch each, so a gap in speed can be traced to
# instructions, stalls, shared-memory wavefronts or L2 atomics rather than guessed.
#
#   bench/ncu_compare.sh [--lib PATH] [--pass fwd|bwd] [--ours RE] [--peer RE] HDIM:SEQLEN[:CAUSAL] ...
#
# --ours / --peer: ncu kernel-name regexes (defaults: fa2_{fwd,bwd}_kernel and FA2's
# flash_{fwd,bwd}_...; e.g. --ours fa3_fwd --peer 'cudnn|sdpa|fprop' for the Hopper forward against
# cuDNN's kernel).
#
# Runs bench/peer_cuda.py for each shape under `ncu --clock-control none --set full` (the clocks are left as
# they are), once filtered to our kernel and once to FA2's, and prints one table per shape:
# metric, ours, FA2, ratio. Raw CSVs go to $OUT (default /tmp/out) as ncu_<pass>_hd<D>_s<S>_*.csv.
# PEER_ARGS (environment): more bench/peer_cuda.py options, e.g. PEER_ARGS="--kernel-family fa3".
# Needs ncu, torch and the build's lib folder (default build/release/lib).
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LIB=build/release/lib/libflashattn.so
PASS=bwd
shapes=()
while [ $# -gt 0 ]; do
  case "$1" in
    --lib) LIB=$2; shift ;;
    --pass) PASS=$2; shift ;;
    --ours) OURS_RE=$2; shift ;;
    --peer) PEER_RE=$2; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) shapes+=("$1") ;;
  esac
  shift
done
[ ${#shapes[@]} -gt 0 ] || shapes=(128:4096)

case "$PASS" in
  bwd) ours_re='regex:fa2_bwd_kernel'; peer_re='regex:flash_bwd_dq_dk_dv' ;;
  fwd) ours_re='regex:fa2_fwd_kernel'; peer_re='regex:flash_fwd_kernel' ;;
  *) echo "ncu_compare: --pass takes fwd or bwd" >&2; exit 2 ;;
esac
[ -n "${OURS_RE:-}" ] && ours_re="regex:$OURS_RE"
[ -n "${PEER_RE:-}" ] && peer_re="regex:$PEER_RE"

for shape in "${shapes[@]}"; do
  IFS=: read -r hd sl causal <<< "$shape"
  causal=${causal:-0}
  tag="${PASS}_hd${hd}_s${sl}_c${causal}"
  for who in ours peer; do
    re=$ours_re; [ "$who" = peer ] && re=$peer_re
    # shellcheck disable=SC2086  # PEER_ARGS is a list of options
    ncu --clock-control none -k "$re" -c 1 --set full --csv --page raw \
      python3 bench/peer_cuda.py --lib "$LIB" --hdims "$hd" --seqlens "$sl" --causal "$causal" \
      --pass "$PASS" --warmup-ms 1 --rep-ms 1 ${PEER_ARGS:-} > "$OUT/ncu_${tag}_${who}.txt" 2>&1
    # The CSV part: from the header line ("ID",...) on.
    awk '/^"ID"/ { on = 1 } on' "$OUT/ncu_${tag}_${who}.txt" > "$OUT/ncu_${tag}_${who}.csv"
  done
  python3 - "$OUT/ncu_${tag}_ours.csv" "$OUT/ncu_${tag}_peer.csv" "$tag" <<'EOF'
import csv, sys
def load(path):
    rows = list(csv.reader(open(path)))
    if len(rows) < 3:
        return None, {}
    head, units, vals = rows[0], rows[1], rows[2]
    return vals[head.index("Kernel Name")] if "Kernel Name" in head else "?", \
        {h: (v, u) for h, u, v in zip(head, units, vals)}
on, o = load(sys.argv[1])
pn, p = load(sys.argv[2])
print(f"== {sys.argv[3]}: ours {str(on)[:70]} | peer {str(pn)[:90]}")
def num(x):
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return None
import re
want = re.compile(r"^(gpu__time_duration.sum|sm__cycles_elapsed.avg|launch__registers_per_thread|"
                  r"launch__shared_mem_per_block_(dynamic|static)|launch__grid_size|launch__block_size|"
                  r"gpc__cycles_elapsed.avg.per_second|sm__inst_executed_pipe_xu.sum|"
                  r"lts__t_sector_hit_rate.pct|dram__throughput.avg.pct_of_peak_sustained_elapsed|"
                  r"sm__throughput.avg.pct_of_peak_sustained_elapsed|"
                  r"sm__warps_active.avg.pct_of_peak_sustained_active|smsp__inst_executed.sum|"
                  r"smsp__issue_active.avg.pct_of_peak_sustained_active|"
                  r"sm__pipe_tensor.*pct_of_peak_sustained_active|sm__inst_executed_pipe_tensor.*sum|"
                  r"smsp__inst_executed_op_ldsm.sum|l1tex__data_pipe_lsu_wavefronts_mem_shared.*sum|"
                  r"l1tex__data_bank_conflicts_pipe_lsu_mem_shared.*sum|lts__t_sectors_op_(red|atom).sum|"
                  r"dram__bytes_(read|write).sum|smsp__average_warps_issue_stalled_.*_per_issue_active.ratio|"
                  r"smsp__inst_executed_op_global_red.sum|sm__sass_inst_executed_op_shared_(ld|st).sum)$")
for k in o:
    if not want.match(k):
        continue
    a = num(o[k][0]); b = num(p.get(k, ("", ""))[0])
    if k.startswith("smsp__average_warps_issue_stalled_") and (a or 0) < 0.05 and (b or 0) < 0.05:
        continue
    r = f"{a / b:6.2f}" if a is not None and b else "   n/a"
    name = k.replace("smsp__average_warps_issue_stalled_", "stall_").replace("_per_issue_active.ratio", "")
    print(f"{name[:62]:62s} {o[k][0]:>14s} {p.get(k, ('n/a',))[0]:>14s} {r}")
EOF
done
