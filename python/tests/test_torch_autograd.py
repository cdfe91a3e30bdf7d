"""flashattn on PyTorch CPU tensors with autograd: forward and gradients against a float64 autograd
reference (torch_reference: within 2x the naive computation's error in the input dtype, plus a
floor), the saved LSE and dropout state, strided inputs, and the refusals that replace any silent
detach."""

from __future__ import annotations

import unittest

import torch_reference as R

R.require_torch()

import torch  # noqa: E402

import flashattn as fa  # noqa: E402
from flashattn import _dlpack  # noqa: E402

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


class TestGradients(unittest.TestCase):
    def run_case(self, shapes, ours_kw, ref_kw, dtypes=DTYPES):
        q, k, v = (randn(*s, seed=i) for i, s in enumerate(shapes))
        for dt in dtypes:
            with self.subTest(dtype=dt):
                R.compare(self, lambda q_, k_, v_: fa.attention(q_, k_, v_, **ours_kw),
                          lambda q_, k_, v_: R.reference(q_, k_, v_, **ref_kw)[0],
                          (q, k, v), dt)

    def test_plain(self):
        self.run_case(((2, 9, 3, 16), (2, 11, 3, 16), (2, 11, 3, 16)), {}, {})

    def test_causal_gqa_dv(self):
        self.run_case(((1, 6, 4, 8), (1, 10, 2, 8), (1, 10, 2, 12)), {"causal": True},
                      {"causal": True})

    def test_top_left_window_softcap_alibi_scale(self):
        slopes = torch.tensor([0.5, 0.25], dtype=torch.float32)
        self.run_case(((2, 7, 2, 8), (2, 9, 2, 8), (2, 9, 2, 8)),
                      {"causal": True, "causal_align": "top_left", "window_left": 3,
                       "softcap": 2.5, "alibi_slopes": slopes, "softmax_scale": 0.4},
                      {"causal": True, "top_left": True, "window": (3, -1), "softcap": 2.5,
                       "alibi": slopes, "scale": 0.4})

    def test_lse_is_differentiable(self):
        """return_lse=True: the loss may use the LSE; its gradient reaches q and k."""
        q, k, v = randn(2, 5, 2, 8, seed=1), randn(2, 7, 1, 8, seed=2), randn(2, 7, 1, 8, seed=3)
        for dt in (torch.float32, torch.bfloat16):
            with self.subTest(dtype=dt):
                R.compare(self,
                          lambda q_, k_, v_: fa.attention(q_, k_, v_, causal=True,
                                                          return_lse=True),
                          lambda q_, k_, v_: R.reference(q_, k_, v_, causal=True),
                          (q, k, v), dt, outputs=2)

    def test_lse_only_loss(self):
        q, k, v = (torch.randn(1, 4, 2, 8, requires_grad=True) for _ in range(3))
        out, lse = fa.attention(q, k, v, return_lse=True)
        lse.sum().backward()
        ref_in = R.leaves(q, k, v, dtype=torch.float64)
        R.reference(*ref_in)[1].sum().backward()
        for name, t, r in zip("qk", (q, k), ref_in):
            self.assertLess(R.max_error(t.grad, r.grad), 1e-5, name)
        self.assertIsNone(ref_in[2].grad)  # the LSE does not depend on v
        self.assertEqual(v.grad.abs().max().item(), 0.0)

    def test_lse_not_requested_is_not_differentiable(self):
        q = torch.randn(1, 4, 1, 8, requires_grad=True)
        out = fa.attention(q, q, q)
        self.assertTrue(out.requires_grad)
        self.assertIsNotNone(out.grad_fn)

    def test_varlen_gradients(self):
        cu_q = torch.tensor([0, 3, 8, 9], dtype=torch.int32)
        cu_k = torch.tensor([0, 4, 10, 12], dtype=torch.int32)
        q, k, v = randn(9, 2, 8, seed=4), randn(12, 1, 8, seed=5), randn(12, 1, 8, seed=6)

        def ours(q_, k_, v_):
            return fa.attention_varlen(q_, k_, v_, cu_q, cu_k, 5, 6, causal=True,
                                       return_lse=True)

        def ref(q_, k_, v_):
            outs, lses = [], []
            for b in range(3):
                sq, sk = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
                o, l_ = R.reference(q_[None, sq], k_[None, sk], v_[None, sk], causal=True)
                outs.append(o[0])
                lses.append(l_[0])
            return torch.cat(outs), torch.cat(lses, dim=1)

        for dt in (torch.float32, torch.float16):
            with self.subTest(dtype=dt):
                got, _ = R.compare(self, ours, ref, (q, k, v), dt, outputs=2)
                self.assertEqual(tuple(got[1].shape), (2, 9))

    def test_dropout_backward_rebuilds_the_mask(self):
        """The mask is read off the forward (v = identity gives P * mask / (1 - p)); the output
        and the gradients then match the reference with that mask: the backward reused the
        saved seed and offset."""
        b, sq, sk, h, d, p = 1, 6, 8, 2, 8, 0.3
        q, k, v = randn(b, sq, h, d, seed=7), randn(b, sk, h, d, seed=8), randn(b, sk, h, d, seed=9)
        kw = {"dropout_p": p, "dropout_seed": 1234, "dropout_offset": 64, "causal": True}
        eye = torch.eye(sk).expand(b, h, sk, sk).permute(0, 2, 1, 3).contiguous()
        probe = fa.attention(q.float(), k.float(), eye, **kw)  # [b, sq, h, sk]
        keep = (probe != 0).permute(0, 2, 1, 3)
        self.assertTrue(0 < keep.float().mean().item() < 1)
        R.compare(self, lambda q_, k_, v_: fa.attention(q_, k_, v_, **kw),
                  lambda q_, k_, v_: R.reference(q_, k_, v_, causal=True, keep_mask=keep,
                                                 dropout_p=p)[0],
                  (q, k, v), torch.float32)

    def test_flash_attn_func_dropout_seeded_by_torch(self):
        q = torch.randn(1, 8, 2, 8, requires_grad=True)
        torch.manual_seed(5)
        a = fa.flash_attn_func(q, q, q, dropout_p=0.5)
        torch.manual_seed(5)
        b = fa.flash_attn_func(q, q, q, dropout_p=0.5)
        c = fa.flash_attn_func(q, q, q, dropout_p=0.5)
        self.assertTrue(torch.equal(a, b))
        self.assertFalse(torch.equal(a, c))
        with torch.no_grad():  # the direct path draws the same way
            torch.manual_seed(5)
            self.assertTrue(torch.equal(fa.flash_attn_func(q, q, q, dropout_p=0.5), a))


class TestStrides(unittest.TestCase):
    """Strided inputs are passed with their strides (no copy) and give the contiguous result."""

    def test_transposed_sliced_and_strided_last_dim(self):
        base_q = randn(2, 3, 8, 16, seed=10)  # [b, h, s, d] memory
        base_k = randn(2, 9, 3, 24, seed=11)  # wider last dim: k = [..., :16]
        base_v = randn(2, 9, 3, 32, seed=12)  # every other element: v = [..., ::2]

        def ours(bq, bk, bv):
            q, k, v = bq.transpose(1, 2), bk[..., :16], bv[..., ::2]
            self.assertFalse(q.is_contiguous() or k.is_contiguous() or v.is_contiguous())
            return fa.attention(q, k, v, causal=True)

        def ref(bq, bk, bv):
            return R.reference(bq.transpose(1, 2), bk[..., :16], bv[..., ::2], causal=True)[0]

        for dt in DTYPES:
            with self.subTest(dtype=dt):
                R.compare(self, ours, ref, (base_q, base_k, base_v), dt)

    def test_no_copy_of_strided_input(self):
        base = torch.randn(1, 2, 6, 8)
        q = base.transpose(1, 2)
        info = fa.plan(q, q, q)
        self.assertTrue(info.kernel.startswith("cpu."))
        # The binding reads the view's own memory: writing the base changes the result.
        a = fa.attention(q, q, q)
        base.mul_(2)
        b = fa.attention(q, q, q)
        self.assertFalse(torch.equal(a, b))

    def test_broadcast_dout(self):
        """out.sum().backward() hands the backward a stride-0 dout."""
        q = torch.randn(1, 5, 2, 8, requires_grad=True)
        fa.attention(q, q, q, causal=True).sum().backward()
        r = R.leaves(q, dtype=torch.float64)[0]
        R.reference(r, r, r, causal=True)[0].sum().backward()
        self.assertLess(R.max_error(q.grad, r.grad), 1e-5)


class TestNoSilentDetach(unittest.TestCase):
    def setUp(self):
        self.q = torch.randn(1, 4, 2, 8, requires_grad=True)

    def test_attention_builds_the_graph(self):
        out = fa.attention(self.q, self.q, self.q)
        self.assertIsNotNone(out.grad_fn)
        out.sum().backward()
        self.assertIsNotNone(self.q.grad)

    def test_no_grad_mode_records_nothing(self):
        with torch.no_grad():
            out = fa.attention(self.q, self.q, self.q)
        self.assertFalse(out.requires_grad)
        with torch.inference_mode():
            out = fa.flash_attn_func(self.q, self.q, self.q)
        self.assertFalse(out.requires_grad)

    def assert_refused(self, fn, text):
        with self.assertRaises(fa.FlashAttnError) as cm:
            fn()
        self.assertEqual(cm.exception.status_name, "FA_ERR_UNSUPPORTED")
        self.assertIn(text, cm.exception.message)

    def test_what_the_graph_path_cannot_do_is_refused(self):
        q = self.q
        self.assert_refused(lambda: fa.attention(q, q, q, out=torch.empty(1, 4, 2, 8)), "out=")
        self.assert_refused(lambda: fa.attention(q, q, q, return_info=True), "return_info")
        self.assert_refused(lambda: fa.attention(q, q, q, stream=0), "stream=")
        self.assert_refused(lambda: fa.attention(q, q, q, check_indices=True), "check_indices=")
        slopes = torch.ones(2, requires_grad=True)
        p = q.detach()
        self.assert_refused(lambda: fa.attention(p, p, p, alibi_slopes=slopes), "alibi_slopes")

    def test_grad_requiring_output_refused(self):
        p = self.q.detach()
        out = torch.empty(1, 4, 2, 8, requires_grad=True)
        self.assert_refused(lambda: fa.attention(p, p, p, out=out), "out: the tensor requires grad")
        with torch.no_grad():
            self.assertIs(fa.attention(p, p, p, out=out), out)

    def test_backward_and_kvcache_refuse_grad(self):
        q = self.q
        with torch.no_grad():
            out, lse = fa.attention(q, q, q, return_lse=True)
        self.assert_refused(lambda: fa.attention_backward(out, q, q, q, out, lse),
                            "not differentiable")
        cache = torch.zeros(1, 8, 2, 8)
        lens = torch.zeros(1, dtype=torch.int32)
        self.assert_refused(lambda: fa.attention_kvcache(q, cache, cache.clone(), lens,
                                                         k_new=q, v_new=q), "no backward")
        self.assert_refused(lambda: fa.flash_attn_with_kvcache(q, cache, cache.clone(), k=q, v=q,
                                                               cache_seqlens=0), "no backward")
        with torch.no_grad():
            dq, dk, dv = fa.attention_backward(out, q, q, q, out, lse)
        self.assertEqual(dq.shape, q.shape)

    def test_dlpack_view_refuses_a_grad_tensor(self):
        with self.assertRaises(_dlpack.ViewError) as cm:
            _dlpack.as_array(self.q, "q")
        self.assertIn("requires grad", str(cm.exception))
        with torch.no_grad():
            self.assertFalse(_dlpack.as_array(self.q, "q").requires_grad)

    def test_double_backward_is_refused(self):
        q = self.q
        for loss in (lambda o: o.square().sum(), lambda o: o.sum()):  # dout with/without grad
            out = fa.attention(q, q, q)
            (g,) = torch.autograd.grad(loss(out), q, create_graph=True)
            self.assertIsNotNone(g.grad_fn)
            with self.assertRaises(fa.FlashAttnError) as cm:
                g.sum().backward()
            self.assertIn("double backward", cm.exception.message)

    def test_under_a_dispatch_mode(self):
        """A dispatch mode watching (FlopCounterMode): the operators with their autograd
        formula, the same gradients as the eager path."""
        from torch.utils.flop_counter import FlopCounterMode

        q = self.q
        fa.flash_attn_func(q, q, q, causal=True).square().sum().backward()
        want, q.grad = q.grad, None
        with FlopCounterMode(display=False):
            out = fa.flash_attn_func(q, q, q, causal=True)
            out.square().sum().backward()
        self.assertTrue(torch.equal(q.grad, want))

    def test_custom_op_direct_call_is_differentiable(self):
        from flashattn import _torch_ops as ops

        q = self.q
        args = ops.op_arguments({"causal": True}, "test")
        out, lse = torch.ops.flashattn.fwd(q, q, q, **args, return_lse=False)
        out.sum().backward()
        r = R.leaves(q, dtype=torch.float64)[0]
        R.reference(r, r, r, causal=True)[0].sum().backward()
        self.assertLess(R.max_error(q.grad, r.grad), 1e-5)

    def test_op_arguments_looked_up_not_shared(self):
        """Plain keywords are translated once: a repeated call gets equal arguments that the
        caller may change without changing the next call's; refusals still raise every time;
        tensor-valued keywords and dropout are translated afresh."""
        from flashattn import _torch_ops as ops

        ops.op_arguments({"causal": True, "softcap": 5.0}, "test")  # translated and kept
        first = ops.op_arguments({"causal": True, "softcap": 5.0}, "test")  # looked up
        first["rng_state"] = "changed"
        first.pop("causal")
        again = ops.op_arguments({"softcap": 5.0, "causal": True}, "test")
        self.assertIsNone(again["rng_state"])
        self.assertTrue(again["causal"])
        self.assertEqual(again["softcap"], 5.0)
        for _ in range(2):
            with self.assertRaises(TypeError):
                ops.op_arguments({"no_such_parameter": 1}, "test")
            with self.assertRaises(fa.FlashAttnError):
                ops.op_arguments({"check_indices": True}, "test")
        slopes = torch.ones(self.q.shape[2])
        self.assertIs(ops.op_arguments({"alibi_slopes": slopes}, "test")["alibi_slopes"], slopes)
        d1 = ops.op_arguments({"dropout_p": 0.1, "dropout_seed": 1}, "test")["rng_state"]
        d2 = ops.op_arguments({"dropout_p": 0.1, "dropout_seed": 2}, "test")["rng_state"]
        self.assertFalse(torch.equal(d1, d2))


if __name__ == "__main__":
    unittest.main()
