#!/usr/bin/env python3
"""gqa_cuda.py: the CUDA forward on GQA shapes with few query rows per head (decode, speculative
decoding, short prefill against a long cache), where fa3 packs the query heads of a K/V head into
one tile. Times the library (one or more builds, name=path) beside PyTorch SDPA's FlashAttention-2
and cuDNN backends in the same process, after checking each build's output against SDPA-flash.
The peers get K and V expanded to every query head (SDPA's flash and cuDNN paths take equal head
counts); the expansion is done before timing.

  python3 bench/gqa_cuda.py --lib new=build/lead/lib/libflashattn.so old=/tmp/old/libflashattn.so \
      --shapes 32x1x4096,32x16x4096 --heads 32:4 --hdim 128 --causal 0,1

Prints per shape and implementation the median microseconds and the K/V read rate (bytes of K and
V once, over the time): decode is bound by reading the cache.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_cuda as pc  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", nargs="+", required=True,
                    help="name=path of libflashattn.so (one or more); name=path@fa2 asks for that "
                         "kernel family")
    ap.add_argument("--shapes", default="32x1x4096,32x16x4096,16x64x8192,8x256x8192",
                    help="batch x seqlen_q x seqlen_k, comma-separated")
    ap.add_argument("--heads", default="32:4", help="heads_q:heads_kv (default 32:4)")
    ap.add_argument("--hdim", type=int, default=128)
    ap.add_argument("--causal", default="0,1", help="0,1 (bottom-right aligned, as a cache is)")
    ap.add_argument("--tol", type=float, default=2e-2)
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    pc.torch, pc.F = torch, F
    libs = []
    for entry in args.lib:
        name, _, path = entry.partition("=")
        path, _, family = path.partition("@")
        libs.append((name, pc.FlashAttnLib(path), family.encode() or None))
    dev = torch.device("cuda", torch.cuda.current_device())
    timer = pc.Timer("cuda", 25, 100, 5)
    hq, hkv = (int(x) for x in args.heads.split(":"))
    D = args.hdim
    peers = [("FA2", SDPBackend.FLASH_ATTENTION), ("cuDNN", SDPBackend.CUDNN_ATTENTION)]
    print(f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}, heads {hq}:{hkv}, hd {D}")
    rows = []
    bad = 0
    for shape in args.shapes.split(","):
        B, SQ, SK = (int(x) for x in shape.split("x"))
        for causal in (int(c) for c in args.causal.split(",")):
            gen = torch.Generator(device=dev)
            gen.manual_seed(B * 7919 + SQ * 131 + SK + causal)

            def randn(*s):
                return torch.randn(*s, generator=gen, device=dev, dtype=torch.float32).to(torch.bfloat16)

            q, k, v = randn(B, SQ, hq, D), randn(B, SK, hkv, D), randn(B, SK, hkv, D)
            qh = q.transpose(1, 2)
            kx = k.repeat_interleave(hq // hkv, dim=2).transpose(1, 2)
            vx = v.repeat_interleave(hq // hkv, dim=2).transpose(1, 2)
            # SDPA's is_causal is top-left; a cache's queries are its last rows: an explicit mask.
            mask = None
            if causal:
                i = torch.arange(SQ, device=dev).view(-1, 1)
                j = torch.arange(SK, device=dev).view(1, -1)
                mask = j <= i + (SK - SQ)
            with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
                ref = F.scaled_dot_product_attention(qh.float(), kx.float(), vx.float(),
                                                     attn_mask=mask).transpose(1, 2)
            kv_bytes = 2 * B * SK * hkv * D * 2
            row = {"shape": f"{B}x{SQ}x{SK}", "causal": causal, "cells": []}
            for name, lib, family in libs:
                out = torch.full_like(q, float("nan"))
                p = lib.params()
                p.causal = causal
                p.causal_align = pc.FA_CAUSAL_BOTTOM_RIGHT
                p.backend = lib.backend_id("cuda")
                p.strict = 1
                p.kernel_family = family
                p.stream = torch.cuda.current_stream().cuda_stream
                tq, tk, tv, to = (pc.torch_fa_tensor(t, pc.FA_DEVICE_CUDA, dev.index) for t in (q, k, v, out))
                info = lib.run_info()
                ptr = ctypes.pointer
                call = pc.Call(lib, "fa_forward", lib.dll.fa_forward,
                               (ptr(p), ptr(tq), ptr(tk), ptr(tv), ptr(to), None, ptr(info)))
                try:
                    call()
                    torch.cuda.synchronize()
                    chk = pc.compare("out", out, ref, args.tol)
                    us = timer(call) * 1e3
                    kern = pc.info_dict(info).get("kernel", "?")
                    row["cells"].append((name, us, kv_bytes / (us * 1e-6) / 1e12, chk["ok"], kern))
                    bad += 0 if chk["ok"] else 1
                except Exception as e:  # noqa: BLE001
                    row["cells"].append((name, float("nan"), float("nan"), False, pc.fmt_err(e)))
                    bad += 1
            for name, backend in peers:
                try:
                    with torch.no_grad(), sdpa_kernel(backend):
                        bias = causal_lower_right(SQ, SK) if causal else None

                        def fn():
                            return F.scaled_dot_product_attention(qh, kx, vx, attn_mask=bias)
                        fn()
                        us = timer(fn) * 1e3
                    row["cells"].append((name, us, kv_bytes / (us * 1e-6) / 1e12, True, ""))
                except Exception as e:  # noqa: BLE001
                    row["cells"].append((name, float("nan"), float("nan"), True, pc.fmt_err(e)[:60]))
            rows.append(row)
    print()
    for row in rows:
        cells = " | ".join(f"{n} {us:8.1f} us {tb:5.2f} TB/s{'' if ok else ' CHECK FAILED'}"
                           for n, us, tb, ok, _ in row["cells"])
        print(f"{row['shape']:>12} causal {row['causal']} | {cells}")
        for n, _, _, _, kern in row["cells"]:
            if kern:
                print(f"{'':>22} {n}: {kern}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
