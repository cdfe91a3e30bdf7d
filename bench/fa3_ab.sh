#!/usr/bin/env bash
# fa3_ab.sh: same-run A/B of the fa3 forward configurations (fa3_args.h) of one build, per head
# dim, through bench/h200_ab.sh (each configuration picked by FA_CUDA_FA3_CONFIG, timed beside
# SDPA's FlashAttention-2 and cuDNN, every shape checked against SDPA-flash).
#
#   LIB=build/lead/lib/libflashattn.so ROUNDS=1 SEQLENS=1024,4096,16384 \
#     SETS="128:hd128_2x128_v0,hd128_2x128_o 64:hd64_2x128_op" bash bench/fa3_ab.sh
#
# $OUT gets ab<hd>.txt and ab<hd>.tgz per group; the tables are printed last.
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/out}
export OUT
LIB=${LIB:-build/release/lib/libflashattn.so}
rc=0
for group in ${SETS:?SETS=\"hd:cfg,cfg ...\"}; do
  hd=${group%%:*}
  libs=
  for cfg in $(echo "${group#*:}" | tr , ' '); do libs="$libs $cfg=$LIB@$cfg"; done
  LIBS=$libs ROUNDS=${ROUNDS:-1} AB_TAG=ab$hd \
    AB_ARGS="--pass fwd --hdims $hd --seqlens ${SEQLENS:-1024,4096,16384} ${EXTRA_ARGS:-}" \
    bash bench/h200_ab.sh > /dev/null 2>&1 || rc=1
done
for group in $SETS; do
  echo "=== head dim ${group%%:*}"
  cat "$OUT/ab${group%%:*}.txt"
done
exit $rc
