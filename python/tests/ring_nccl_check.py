"""ring_attention and ring_attention_backward over an NCCL process group of several processes, one
GPU each, run by test_torch_cuda.py (TestRingNcclRanks) once per rank:

    ring_nccl_check.py RANK WORLD STORE_PATH

Every rank draws the same global q, k, v and dout (one seed, on the CPU), passes its shards on
GPU RANK (contiguous and zig-zag, causal and not, GQA) with the torch.distributed group as comm,
and checks its rows of out and lse and its shards of dq, dk and dv against attention() and
attention_backward() of the whole sequence on its own GPU. Exit status 0 when this rank passed."""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flashattn as fa  # noqa: E402


def rows_of(layout: str, rank: int, world: int, n: int) -> torch.Tensor:
    """The global token indices a rank's shard of n tokens holds (docs/ring.md)."""
    if layout == "contiguous":
        return torch.arange(rank * n, (rank + 1) * n)
    c = n // 2
    return torch.cat([torch.arange(rank * c, (rank + 1) * c),
                      torch.arange((2 * world - 1 - rank) * c, (2 * world - rank) * c)])


def rel(got, want) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm()).item()


def main() -> int:
    rank, world, store = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    dev = torch.device("cuda", rank)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", store=dist.FileStore(store, world), rank=rank,
                            world_size=world, device_id=dev)
    failures = []
    n, b, hq, hk, d = 192, 2, 8, 2, 128
    g = torch.Generator().manual_seed(20261207)
    q, k, v, dout = (torch.randn(b, world * n, h, d, generator=g, dtype=torch.float32)
                     .to(dev, torch.bfloat16) for h in (hq, hk, hk, hq))
    for layout in ("contiguous", "zigzag"):
        for causal in (False, True):
            with torch.no_grad():
                want, want_lse = fa.attention(q, k, v, causal=causal, return_lse=True)
                grads = fa.attention_backward(dout, q, k, v, want, want_lse, causal=causal)
                rows = rows_of(layout, rank, world, n).to(dev)
                shard = [x.index_select(1, rows).contiguous() for x in (q, k, v, dout)]
                out, lse = fa.ring_attention(*shard[:3], comm=dist.group.WORLD, layout=layout,
                                             causal=causal, return_lse=True)
                dq, dk, dv = fa.ring_attention_backward(shard[3], *shard[:3], out, lse,
                                                        comm=dist.group.WORLD, layout=layout,
                                                        causal=causal)
                torch.cuda.synchronize(dev)
            what = f"rank {rank}/{world} {layout} causal={causal}"
            lse_err = (lse - want_lse.index_select(2, rows)).abs().max().item()
            if not lse_err < 1e-3:
                failures.append(f"{what}: lse max error {lse_err:.3g} >= 1e-3")
            for name, got, full, tol in (("out", out, want, 1e-2), ("dq", dq, grads[0], 2e-2),
                                         ("dk", dk, grads[1], 2e-2), ("dv", dv, grads[2], 2e-2)):
                err = rel(got, full.index_select(1, rows))
                if not err < tol:
                    failures.append(f"{what}: {name} relative error {err:.3g} >= {tol}")
    dist.destroy_process_group()
    for f in failures:
        print(f"FAIL {f}")
    print(f"rank {rank}/{world}: {'FAILED' if failures else 'all passed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
