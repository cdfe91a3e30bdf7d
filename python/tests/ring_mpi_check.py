"""ring_attention and ring_attention_backward over MPI (mpi4py), run by test_ring.py under
`mpiexec -n N`: every rank builds the same global q, k, v and dout (one seed), passes its shards
(contiguous and zig-zag, causal and not, sliding windows, GQA, ALiBi and dropout), and checks its rows of out and lse and its shards of
dq, dk and dv against the float64 reference of the whole sequence. The communicator is passed as
the mpi4py object and once as the address of its MPI_Comm. Exit status 0 when every rank passed."""

from __future__ import annotations

import os
import sys

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flashattn as fa  # noqa: E402
from test_flashattn import reference  # noqa: E402


def rows_of(layout: str, rank: int, world: int, n: int) -> np.ndarray:
    """The global token indices a rank's shard of n tokens holds (docs/ring.md)."""
    if layout == "contiguous":
        return np.arange(rank * n, (rank + 1) * n)
    c = n // 2
    return np.concatenate([np.arange(rank * c, (rank + 1) * c),
                           np.arange((2 * world - 1 - rank) * c, (2 * world - rank) * c)])


def main() -> int:
    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    failures = []
    n, b, hq, hk, d = 12, 2, 4, 2, 16
    rng = np.random.default_rng(20261205)
    q = rng.standard_normal((b, world * n, hq, d)).astype(np.float32)
    k = rng.standard_normal((b, world * n, hk, d)).astype(np.float32)
    v = rng.standard_normal((b, world * n, hk, d)).astype(np.float32)
    dout = rng.standard_normal((b, world * n, hq, d)).astype(np.float32)
    for layout in ("contiguous", "zigzag"):
        for causal, window in ((False, None), (True, None), (True, (17, 0)), (False, (5, 9))):
            kw = {"causal": causal}
            if window:
                kw.update(window_left=window[0], window_right=window[1])
            ref_out, ref_lse, (ref_dq, ref_dk, ref_dv) = reference(q, k, v, causal=causal,
                                                                   window=window, dout=dout)
            rows = rows_of(layout, rank, world, n)
            shard = [np.ascontiguousarray(x[:, rows]) for x in (q, k, v, dout)]
            c = comm if causal else MPI._addressof(comm)  # both forms of the communicator
            out, lse = fa.ring_attention(*shard[:3], comm=c, layout=layout, return_lse=True,
                                         **kw)
            dq, dk, dv = fa.ring_attention_backward(shard[3], *shard[:3], out, lse, comm=c,
                                                    layout=layout, **kw)
            what = f"rank {rank}/{world} {layout} {kw}"
            for name, got, want in (("out", out, ref_out[:, rows]),
                                    ("lse", lse, ref_lse[:, :, rows]),
                                    ("dq", dq, ref_dq[:, rows]), ("dk", dk, ref_dk[:, rows]),
                                    ("dv", dv, ref_dv[:, rows])):
                err = float(np.max(np.abs(np.asarray(got, np.float64) - want)))
                if not np.isfinite(err) or err > 1e-4:
                    failures.append(f"{what}: {name} max error {err:.3g} > 1e-4")
    # ALiBi and dropout read the tokens' global positions: against one call on the whole
    # sequence (the same Philox mask).
    slopes = np.array([0.5, 0.25, 0.125, 0.0625], np.float32)
    for layout in ("contiguous", "zigzag"):
        kw = {"causal": layout == "zigzag", "alibi_slopes": slopes, "dropout_p": 0.15,
              "dropout_seed": 5}
        one_out, one_lse = fa.attention(q, k, v, return_lse=True, **kw)
        one_grads = fa.attention_backward(dout, q, k, v, one_out, one_lse, **kw)
        rows = rows_of(layout, rank, world, n)
        shard = [np.ascontiguousarray(x[:, rows]) for x in (q, k, v, dout)]
        out, lse = fa.ring_attention(*shard[:3], comm=comm, layout=layout, return_lse=True, **kw)
        grads = fa.ring_attention_backward(shard[3], *shard[:3], out, lse, comm=comm,
                                           layout=layout, **kw)
        for name, got, want in (("out", out, one_out[:, rows]), ("lse", lse, one_lse[:, :, rows]),
                                ("dq", grads[0], one_grads[0][:, rows]),
                                ("dk", grads[1], one_grads[1][:, rows]),
                                ("dv", grads[2], one_grads[2][:, rows])):
            err = float(np.max(np.abs(np.asarray(got, np.float64) - want)))
            if not np.isfinite(err) or err > 1e-4:
                failures.append(f"rank {rank}/{world} {layout} alibi+dropout: {name} max error "
                                f"{err:.3g} > 1e-4")
    # A refusal is every rank's (the ring's agreement): seqused_k on the last rank only (refused by
    # the library), or an argument the binding refuses before the library is reached (a workspace
    # of bytes, an unknown layout), forward and backward: the other ranks return too.
    last = rank == world - 1
    for arg, bad, status in (("seqused_k", np.full(b, n, np.int32), "FA_ERR_UNSUPPORTED"),
                             ("workspace", np.zeros(64, np.uint8), "FA_ERR_INVALID_ARGUMENT"),
                             ("layout", "diagonal", "FA_ERR_INVALID_ARGUMENT")):
        for call in ("forward", "backward"):
            kw = {arg: bad} if last else {}
            x = (q[:, :n], k[:, :n], v[:, :n])
            try:
                if call == "forward":
                    fa.ring_attention(*x, comm=comm, **kw)
                else:
                    fa.ring_attention_backward(x[0], *x, x[0], np.zeros((b, hq, n), np.float32),
                                               comm=comm, **kw)
                failures.append(f"rank {rank}: {call} with {arg} on the last rank not refused")
            except fa.FlashAttnError as e:
                want = arg if last else "another rank"
                if want not in str(e) or (not last and e.status_name != status):
                    failures.append(f"rank {rank}: {call} with {arg} refused as {e}")
    everyone = comm.allgather(failures)
    if rank == 0:
        flat = [f for fs in everyone for f in fs]
        for f in flat:
            print("FAIL", f)
        print(f"ring_mpi_check: {world} ranks, {'FAILED' if flat else 'all passed'}")
    return 1 if any(everyone) else 0


if __name__ == "__main__":
    sys.exit(main())
