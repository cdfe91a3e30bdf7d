"""The PyTorch tests' reference and error rule (imported by test_torch_*.py; needs torch).

reference() is attention with the library's conventions (api/flash_attn.h) written with plain
torch operations, differentiable by autograd: run in float64 it is the reference, run in the
inputs' dtype it is the naive computation. check() holds a result to the rule: its largest error
against the float64 reference is within 2x the naive computation's error, plus a small floor.
"""

from __future__ import annotations

import math
import os
import sys
import unittest

try:
    import torch

    _MISSING = ""
except ImportError:
    torch = None
    _MISSING = f"PyTorch is not installed for {sys.executable}"
except Exception as e:  # noqa: BLE001 - a broken installation: said in the skip reason
    torch = None
    _MISSING = f"PyTorch cannot be imported by {sys.executable}: {e!r}"


def require_torch():
    """Skips the calling test module (with the reason) when PyTorch cannot be imported; CI adds
    why it has none in FLASHATTN_TORCH_MISSING."""
    if torch is None:
        extra = os.environ.get("FLASHATTN_TORCH_MISSING")
        raise unittest.SkipTest(_MISSING + (f" ({extra})" if extra else ""))


def require_cuda(fa):
    """Skips the calling test module (with the reason) without a GPU for PyTorch or without the
    library's cuda backend (fa: the flashattn module)."""
    if not torch.cuda.is_available():
        raise unittest.SkipTest("no CUDA device for PyTorch")
    if not any(b.name == "cuda" and b.available for b in fa.backend_info()):
        raise unittest.SkipTest("the library's cuda backend is not available")


def reference(q, k, v, *, scale=None, causal=False, top_left=False, window=(-1, -1), softcap=0.0,
              alibi=None, keep_mask=None, dropout_p=0.0):
    """(out, lse) of q [b, sq, hq, d], k [b, sk, hk, d], v [b, sk, hk, dv] in their own dtype.
    keep_mask [b, hq, sq, sk] (bool): dropout's kept entries, scaled by 1 / (1 - dropout_p)."""
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    g = hq // hk
    ke, ve = k.repeat_interleave(g, dim=2), v.repeat_interleave(g, dim=2)
    scale = scale or 1.0 / math.sqrt(d)
    s = torch.einsum("bihd,bjhd->bhij", q, ke) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    shift = 0 if top_left else sk - sq
    i = torch.arange(sq)[:, None]
    j = torch.arange(sk)[None, :]
    if alibi is not None:
        slopes = alibi.to(s.dtype)
        slopes = slopes[None, :] if slopes.ndim == 1 else slopes
        s = s - slopes[:, :, None, None] * (i + shift - j).abs().to(s.dtype)
    keep = torch.ones(sq, sk, dtype=torch.bool)
    if causal:
        keep &= j <= i + shift
    left, right = window
    if left >= 0:
        keep &= j >= i + shift - left
    if right >= 0:
        keep &= j <= i + shift + right
    z = s.masked_fill(~keep, float("-inf"))
    m = z.amax(-1, keepdim=True).detach()
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(z - m)
    total = e.sum(-1, keepdim=True)
    seen = total > 0
    p = e / torch.where(seen, total, torch.ones_like(total))
    lse = torch.where(seen, torch.log(torch.where(seen, total, torch.ones_like(total))) + m,
                      torch.full_like(m, float("-inf")))[..., 0]
    if keep_mask is not None:
        p = p * keep_mask.to(p.dtype) / (1.0 - dropout_p)
    out = torch.einsum("bhij,bjhd->bihd", p, ve)
    return out, lse


def max_error(got, want) -> float:
    got = got.detach().to(torch.float64)
    want = want.detach().to(torch.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    fin = torch.isfinite(want)
    assert torch.equal(torch.isfinite(got), fin), "non-finite pattern differs"
    if not fin.any():
        return 0.0
    return (got[fin] - want[fin]).abs().max().item()


FLOOR = {torch.float32: 2e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2} if torch else {}


def check(test, name, got, want64, naive, dtype=None):
    """got within 2 * |naive - want64| + floor of want64, the floor scaled by want64's size."""
    dtype = dtype or got.dtype
    err = max_error(got, want64)
    naive_err = max_error(naive, want64)
    scale = max(1.0, want64.detach().abs().max().item()) if want64.numel() else 1.0
    bound = 2.0 * naive_err + FLOOR[dtype] * scale
    test.assertLessEqual(err, bound, f"{name}: error {err:.3g} > 2 x naive {naive_err:.3g} + "
                         f"floor {FLOOR[dtype] * scale:.3g}")


def leaves(*tensors, dtype=None):
    """Detached copies that require grad (converted to dtype when given)."""
    return [t.detach().to(dtype or t.dtype).requires_grad_() for t in tensors]


def grads_of(fn, inputs, weights):
    """(outputs, gradients of inputs) of fn(*inputs) for the loss sum(output_i * weights[i])."""
    outs = fn(*inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    loss = sum((o * w.to(o.dtype)).sum() for o, w in zip(outs, weights))
    return outs, torch.autograd.grad(loss, inputs)


def compare(test, fn_ours, fn_ref, inputs, dtype, outputs=1, seed=0, names=("q", "k", "v")):
    """Checks fn_ours(*inputs) (inputs converted to dtype) and its gradients against fn_ref in
    float64 (the reference) and fn_ref in dtype (the naive computation) by check(). The loss
    weighs the first `outputs` outputs by random tensors. Returns fn_ours' outputs and grads."""
    gen = torch.Generator().manual_seed(seed)
    ours_in = leaves(*inputs, dtype=dtype)
    ref_in = leaves(*inputs, dtype=torch.float64)
    naive_in = leaves(*inputs, dtype=dtype)
    probe = fn_ref(*ref_in)
    probe = probe if isinstance(probe, tuple) else (probe,)
    weights = [torch.randn(o.shape, generator=gen, dtype=torch.float64)
               for o in probe[:outputs]]
    got, g_got = grads_of(fn_ours, ours_in, weights)
    want, g_want = grads_of(fn_ref, ref_in, weights)
    naive, g_naive = grads_of(fn_ref, naive_in, weights)
    test.assertEqual(got[0].dtype, dtype)
    for i in range(outputs):
        check(test, f"output {i}", got[i], want[i], naive[i], dtype if i == 0 else torch.float32)
    for name, g, w, n in zip(names, g_got, g_want, g_naive):
        check(test, "d" + name, g, w, n, dtype)
    return got, g_got
