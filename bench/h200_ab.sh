#!/usr/bin/env bash
# h200_ab.sh: a same-run A/B of several builds of the library on the GPU, each timed by
# bench/peer_cuda.py --check (so every build is also checked against SDPA-flash on every shape)
# beside FlashAttention-2 and cuDNN, in alternating rounds (build A, B, ..., then A, B, ... again)
# so that clock and temperature drift fall on every build alike.
#
#   LIBS="base=build/release/lib/libflashattn.so single=build/variant/lib/libflashattn.so" \
#   ROUNDS=2 AB_ARGS="--hdims 256 --pass fwd" bash bench/h200_ab.sh
#
# Each run times a shape once per implementation (--shape-rounds 1: the rounds here alternate the
# builds instead; AB_ARGS may override it). An entry name=lib@config runs that library with FA_CUDA_FA3_CONFIG=config (one fa3 forward
# configuration of backends/cuda/fa3_sm90/fa3_args.h, picked at run time); name=lib%VAR=value
# (after the library or its @config, one or more, %-separated) runs it with those environment
# settings, e.g. base=build/lead/lib/libflashattn.so%FA_CUDA_FA3_BWD_PERSISTENT=0.
#
# $OUT gets ab.txt (per shape: each build's median TFLOP/s over the rounds, its ratio to FA2's
# median over all of that shape's runs, and whether every check passed) and ab.tgz (the JSON and
# logs of every run); AB_TAG=name names them name.txt and name.tgz instead, so that one device
# call can hold several A/Bs. The table is printed last.
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/out}
ROUNDS=${ROUNDS:-2}
TAG=${AB_TAG:-ab}
mkdir -p "$OUT/$TAG"
rc=0
for r in $(seq 1 "$ROUNDS"); do
  for entry in $LIBS; do
    name=${entry%%=*}
    lib=${entry#*=}
    cfg=
    envs=()
    case $lib in *%*) IFS=% read -r -a envs <<< "${lib#*%}"; lib=${lib%%\%*} ;; esac
    case $lib in *@*) cfg=${lib#*@}; lib=${lib%%@*} ;; esac
    # shellcheck disable=SC2086 # AB_ARGS is a list of options
    env ${envs[@]+"${envs[@]}"} FA_CUDA_FA3_CONFIG=$cfg python3 bench/peer_cuda.py --check --lib "$lib" --shape-rounds 1 ${AB_ARGS:-} \
      --json "$OUT/$TAG/$name.$r.json" > "$OUT/$TAG/$name.$r.txt" 2>&1 || {
      echo "h200_ab: $name round $r failed (see $TAG/$name.$r.txt)"
      rc=1
    }
  done
done
python3 - "$OUT/$TAG" "$LIBS" > "$OUT/$TAG.txt" <<'EOF'
import json, os, statistics, sys
folder, libs = sys.argv[1], [e.split("=")[0] for e in sys.argv[2].split()]
runs = {}  # (shape) -> {name: [tflops], "fa2": [...], "cudnn": [...], "ok": {name: bool}}
for f in sorted(os.listdir(folder)):
    if not f.endswith(".json"):
        continue
    name = f.split(".")[0]
    for r in json.load(open(os.path.join(folder, f)))["results"]:
        key = (r["pass"], r["hdim"], r["seqlen"], r["causal"])
        s = runs.setdefault(key, {"fa2": [], "cudnn": [], "ok": {}, "kernel": {}})
        s.setdefault(name, []).append(r["ours"]["tflops"] if r["ours"].get("tflops") else 0.0)
        s["ok"][name] = s["ok"].get(name, True) and bool(r.get("check_ok", False))
        s["kernel"][name] = "%sx%s" % (r["ours"].get("tile_m"), r["ours"].get("tile_n"))
        # --ours-last: the same build timed again after the peers, as its own column
        if r.get("ours_last", {}).get("tflops"):
            s.setdefault(name + "@last", []).append(r["ours_last"]["tflops"])
            s["ok"][name + "@last"] = s["ok"][name]
            s["kernel"][name + "@last"] = s["kernel"][name]
            if name + "@last" not in libs:
                libs.append(name + "@last")
        for peer in ("fa2", "cudnn"):
            if r.get(peer) and r[peer].get("tflops"):
                s[peer].append(r[peer]["tflops"])
med = lambda xs: statistics.median(xs) if xs else float("nan")
head = "pass hd seqlen causal | " + " | ".join("%s TF/s (/FA2)" % n for n in libs) + " | FA2 | cuDNN | checks"
print(head)
for key in sorted(runs):
    s = runs[key]
    fa2 = med(s["fa2"])
    cells = ["%6.1f (%.3f) %s" % (med(s.get(n, [])), med(s.get(n, [])) / fa2, s["kernel"].get(n, "?"))
             for n in libs]
    ok = all(s["ok"].get(n, False) for n in libs)
    print("%s %d %d %d | %s | %.1f | %.1f | %s" % (key[0], key[1], key[2], key[3], " | ".join(cells),
          fa2, med(s["cudnn"]), "ok" if ok else "FAILED"))
EOF
tar -C "$OUT" -czf "$OUT/$TAG.tgz" "$TAG" && rm -rf "${OUT:?}/$TAG"
cat "$OUT/$TAG.txt"
echo "h200_ab: rc=$rc"
exit $rc
