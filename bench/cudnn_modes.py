#!/usr/bin/env python3
"""cudnn_modes.py: is cuDNN's SDPA forward speed at one shape bimodal per allocation or per
process, and does its kernel change with it? Times PyTorch SDPA's cuDNN backend (bf16, inputs
(B, S, H, D) viewed as (B, H, S, D), as bench/peer_cuda.py makes them) for --rounds fresh sets of
inputs in this process, and names the kernels one call launched (torch.profiler). Run it in a few
processes to see both kinds of variation.

  python3 bench/cudnn_modes.py --hdim 128 --seqlen 4096 --causal 0 --rounds 4
"""
import argparse
import time

import torch
import torch.nn.functional as F
import triton.testing
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hdim", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--causal", type=int, default=0)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--sleep", type=float, default=0.0, help="seconds idle before each round")
    ap.add_argument("--reuse", action="store_true", help="the first round's inputs in every round")
    a = ap.parse_args()
    B, S, H, D = a.tokens // a.seqlen, a.seqlen, a.hidden // a.hdim, a.hdim
    flops = 4 * B * H * S * S * D / (2 if a.causal else 1)
    q = None
    for r in range(a.rounds):
        time.sleep(a.sleep)
        if q is None or not a.reuse:
            q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))
        with torch.no_grad(), sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            fn = lambda: F.scaled_dot_product_attention(qh, kh, vh, is_causal=bool(a.causal))  # noqa: E731
            ms = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                fn()
                torch.cuda.synchronize()
        names = sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})
        print(f"round {r}: {ms:.4f} ms {flops / ms / 1e9:.1f} TFLOP/s q@{q.data_ptr():#x} "
              f"kernels: {'; '.join(n[:140] for n in names)}", flush=True)


if __name__ == "__main__":
    main()
