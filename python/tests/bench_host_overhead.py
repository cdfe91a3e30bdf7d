#!/usr/bin/env python3
"""Host overhead of the Python binding, in microseconds per call (not run by CI).

    FLASHATTN_LIBRARY=build/release/lib/libflashattn.so python3 python/tests/bench_host_overhead.py

Back-to-back calls on a tiny problem (default q, k, v [1, 4, 1, 16] float32, CPU backend), each
figure the best of --repeats means over --calls calls:

  C fa_forward         the library call alone: ctypes' call of fa_forward with structs built once
                       (what the binding's cached plan passes), output preallocated
  C fa_plan_forward    the same for fa_plan_forward (validation and backend choice, no compute)
  attention(numpy)     flashattn.attention on NumPy arrays (allocates out)
  attention(torch)     flashattn.attention on torch tensors (allocates out)
  flash_attn_func      on torch tensors without gradients (the direct path)
  flash_attn_func+grad on tensors that require grad: the custom operator and autograd's record
  plan(numpy)          flashattn.plan (compared with C fa_plan_forward)
  torch SDPA           torch.nn.functional.scaled_dot_product_attention, same problem

The binding's overhead is the binding's figure minus the C call's (fa_forward for the calls,
fa_plan_forward for plan()): the ctypes call itself is in both.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import flashattn as fa  # noqa: E402
from flashattn import _call, _capi as C, _tensors as T  # noqa: E402


def per_call_us(fn, calls: int, repeats: int) -> float:
    for _ in range(min(calls, 500)):
        fn()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t) / calls * 1e6)
    return best


def raw_calls(q):
    """fa_forward and fa_plan_forward through ctypes with structs built once (q = k = v)."""
    keep: list = []
    key, addr = T.describe(q, "q", keep)
    tq = C.FaTensor.from_buffer_copy(T.template(key, "q"))
    tq.data = addr
    out = np.empty_like(q)
    key_o, addr_o = T.describe(out, "out", keep)
    tout = C.FaTensor.from_buffer_copy(T.template(key_o, "out"))
    tout.data = addr_o
    lib = _call.library()
    p = C.FaParams()
    lib.dll.fa_params_init(ctypes.byref(p))
    info = C.FaRunInfo()
    lib.dll.fa_run_info_init(ctypes.byref(info))
    r = ctypes.byref
    args = (r(p), r(tq), r(tq), r(tq), r(tout), None, r(info))
    fwd, plan = lib.dll.fa_forward, lib.dll.fa_plan_forward
    assert fwd(*args) == C.FA_OK, lib.last_error()

    def forward():
        fwd(*args)

    def planned():
        plan(*args)

    return forward, planned, (out, keep)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="1,4,1,16", help="batch,seqlen,heads,head_dim")
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    shape = tuple(int(x) for x in a.shape.split(","))
    q = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    rows = []

    def add(name, fn, base=None):
        us = per_call_us(fn, a.calls, a.repeats)
        rows.append((name, us, base))
        return us

    forward, planned, _alive = raw_calls(q)
    c_fwd = add("C fa_forward", forward)
    c_plan = add("C fa_plan_forward", planned)
    add("attention(numpy)", lambda: fa.attention(q, q, q), c_fwd)
    add("plan(numpy)", lambda: fa.plan(q, q, q), c_plan)
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        tq = torch.from_numpy(q)
        tg = tq.clone().requires_grad_()
        th = tq.transpose(1, 2)
        sdpa = torch.nn.functional.scaled_dot_product_attention
        add("attention(torch)", lambda: fa.attention(tq, tq, tq), c_fwd)
        add("flash_attn_func", lambda: fa.flash_attn_func(tq, tq, tq), c_fwd)
        add("flash_attn_func+grad", lambda: fa.flash_attn_func(tg, tg, tg), c_fwd)
        add("torch SDPA", lambda: sdpa(th, th, th))
    threads = os.environ.get("OMP_NUM_THREADS", "default")
    print(f"shape {shape} float32, CPU backend, OMP_NUM_THREADS={threads}, "
          f"best of {a.repeats} x {a.calls} calls")
    print(f"{'call':24s} {'us/call':>9s} {'binding overhead (us)':>22s}")
    for name, us, base in rows:
        over = f"{us - base:22.2f}" if base is not None else ""
        print(f"{name:24s} {us:9.2f} {over}")


if __name__ == "__main__":
    main()
