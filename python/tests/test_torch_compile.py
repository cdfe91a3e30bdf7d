"""torch.compile(fullgraph=True) over flashattn's PyTorch operators on CPU tensors: a training
step through Inductor whose gradients match SDPA's (torch_reference's rule), and through
aot_eager: the KV-cache call's in-place append, varlen, dropout, the LSE output, the SDPA-style
call and dynamic shapes. fullgraph=True makes any graph break an error."""

from __future__ import annotations

import os
import sysconfig
import unittest

import torch_reference as R

R.require_torch()

import torch  # noqa: E402

import flashattn as fa  # noqa: E402


def randn(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


class Block(torch.nn.Module):
    """x [b, s, model] -> causal self-attention (GQA: 4 query, 2 KV heads) -> [b, s, model]."""

    def __init__(self, attend, model=32, heads=4, kv_heads=2):
        super().__init__()
        self.attend, self.heads, self.kv_heads = attend, heads, kv_heads
        self.dim = model // heads
        self.qkv = torch.nn.Linear(model, (heads + 2 * kv_heads) * self.dim, bias=False)
        self.proj = torch.nn.Linear(model, model, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        qkv = self.qkv(x).view(b, s, self.heads + 2 * self.kv_heads, self.dim)
        q, k, v = qkv.split([self.heads, self.kv_heads, self.kv_heads], dim=2)  # strided views
        return self.proj(self.attend(q, k, v).reshape(b, s, -1))


def flash(q, k, v):
    return fa.flash_attn_func(q, k, v, causal=True)


def sdpa(q, k, v):
    out = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=True)
    return out.transpose(1, 2)


class TestCompile(unittest.TestCase):
    def setUp(self):
        torch._dynamo.reset()

    def test_training_step_inductor(self):
        """A training step through flash_attn_func, its loss compiled by Inductor (AOTAutograd
        compiles the backward graph too); its gradients against SDPA's (float64 eager: the
        reference; float32 eager: the naive computation)."""
        include = sysconfig.get_path("include")
        if not os.path.exists(os.path.join(include, "Python.h")):
            self.skipTest(f"Inductor builds C++ kernels against Python.h, not in {include} "
                          f"(Debian: apt-get install python3-dev)")
        torch.manual_seed(0)
        ours = Block(flash)
        ref64 = Block(sdpa).double()
        naive = Block(sdpa)
        for m in (ref64, naive):
            m.load_state_dict(ours.state_dict())
        x = randn(2, 12, 32, seed=1)
        w = randn(2, 12, 32, seed=2)

        def loss_of(model, inp):
            return (model(inp) * w.to(inp.dtype)).sum()

        compiled = torch.compile(loss_of, fullgraph=True)
        results = []
        for model, dt in ((ours, torch.float32), (ref64, torch.float64), (naive, torch.float32)):
            inp = x.detach().to(dt).requires_grad_()
            loss = (compiled if model is ours else loss_of)(model, inp)
            loss.backward()
            results.append((loss, inp.grad, model.qkv.weight.grad, model.proj.weight.grad))
        for i, name in enumerate(("loss", "dx", "dW_qkv", "dW_proj")):
            R.check(self, name, results[0][i], results[1][i], results[2][i], torch.float32)

    def test_graph_holds_the_operators(self):
        graphs = []

        def backend(gm, example_inputs):
            graphs.append(gm)
            return gm.forward

        q = torch.randn(1, 6, 2, 8, requires_grad=True)
        torch.compile(lambda t: fa.flash_attn_func(t, t, t).sum(), backend=backend,
                      fullgraph=True)(q).backward()
        code = "".join(m.code for gm in graphs for m in gm.modules() if hasattr(m, "code"))
        self.assertIn("flashattn.fwd", code)

    def aot(self, fn):
        return torch.compile(fn, backend="aot_eager", fullgraph=True)

    def test_kvcache_append(self):
        q, kn, vn = randn(2, 1, 4, 8, seed=3), randn(2, 1, 2, 8, seed=4), randn(2, 1, 2, 8, seed=5)
        caches = [randn(2, 10, 2, 8, seed=6).float(), randn(2, 10, 2, 8, seed=7).float()]
        lens = torch.tensor([3, 6], dtype=torch.int32)

        def decode(q_, kc, vc, k_, v_, n):
            return fa.flash_attn_with_kvcache(q_, kc, vc, k_, v_, cache_seqlens=n, causal=True,
                                              return_softmax_lse=True)

        eager = [c.clone() for c in caches]
        want = decode(q.float(), *eager, kn.float(), vn.float(), lens)
        got = self.aot(decode)(q.float(), *caches, kn.float(), vn.float(), lens)
        for g, w in zip(got + tuple(caches), want + tuple(eager)):
            self.assertTrue(torch.equal(g, w))

    def test_varlen_lse_and_sdpa_style(self):
        cu = torch.tensor([0, 3, 8], dtype=torch.int32)
        q = torch.randn(8, 2, 8, requires_grad=True)

        def varlen(t):
            out, lse = fa.attention_varlen(t, t, t, cu, cu, 5, 5, causal=True, return_lse=True)
            return out.square().sum() + lse.sum()

        def sdpa_style(t):
            b = t.view(1, 8, 2, 8).transpose(1, 2)
            return fa.scaled_dot_product_attention(b, b, b, is_causal=True).square().sum()

        for fn in (varlen, sdpa_style):
            with self.subTest(fn=fn.__name__):
                (g_eager,) = torch.autograd.grad(fn(q), q)
                (g_comp,) = torch.autograd.grad(self.aot(fn)(q), q)
                self.assertTrue(torch.allclose(g_eager, g_comp, rtol=1e-6, atol=1e-6))

    def test_dropout_traced(self):
        q = torch.randn(1, 8, 2, 8, requires_grad=True)

        def fn(t):
            return fa.flash_attn_func(t, t, t, dropout_p=0.4)

        torch.manual_seed(3)
        a = self.aot(fn)(q)
        torch.manual_seed(3)
        b = self.aot(fn)(q)
        self.assertTrue(torch.equal(a, b))  # the seed comes from torch's generator, in graph
        self.assertFalse(torch.equal(a, fa.flash_attn_func(q, q, q)))
        a.sum().backward()
        self.assertTrue(torch.isfinite(q.grad).all())

    def test_dynamic_shapes(self):
        fn = torch.compile(lambda t: fa.flash_attn_func(t, t, t, causal=True), backend="aot_eager",
                           fullgraph=True, dynamic=True)
        for s in (5, 9, 13):
            q = torch.randn(1, s, 2, 8)
            self.assertTrue(torch.equal(fn(q), fa.flash_attn_func(q, q, q, causal=True)))


if __name__ == "__main__":
    unittest.main()
