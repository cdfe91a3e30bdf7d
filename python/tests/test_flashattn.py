"""Tests of the flashattn Python binding on the CPU backend with NumPy inputs, against a float64
NumPy reference (python/tests/run_tests.py runs them; CTest: python.binding)."""

from __future__ import annotations

import math
import unittest

import numpy as np

import flashattn as fa

RNG = np.random.default_rng(20261130)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def reference(q, k, v, *, scale=None, causal=False, top_left=False, window=None, softcap=0.0,
              alibi=None, dout=None):
    """float64 attention with the library's conventions (api/flash_attn.h, core/math/mask.h,
    core/math/score.h); returns out, lse and, with dout, (dq, dk, dv)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    g = hq // hk
    ke, ve = np.repeat(k, g, axis=2), np.repeat(v, g, axis=2)  # query head h reads KV head h // g
    scale = 1.0 / math.sqrt(d) if not scale else scale
    raw = np.einsum("bihd,bjhd->bhij", q, ke)
    z = raw * scale
    if softcap:
        t = np.tanh(z / softcap)
        z = softcap * t
    shift = 0 if top_left else sk - sq
    i = np.arange(sq)[:, None]
    j = np.arange(sk)[None, :]
    if alibi is not None:
        z = z - np.asarray(alibi, np.float64)[None, :, None, None] * np.abs(i + shift - j)
    keep = np.ones((sq, sk), bool)
    if causal:
        keep &= j <= i + shift
    if window is not None:
        left, right = window
        if left >= 0:
            keep &= j >= i + shift - left
        if right >= 0:
            keep &= j <= i + shift + right
    z = np.where(keep, z, -np.inf)
    m = z.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(z - m)
    s = e.sum(axis=-1, keepdims=True)
    p = np.where(s > 0, e / np.where(s > 0, s, 1), 0.0)
    out = np.einsum("bhij,bjhd->bihd", p, ve)
    lse = np.where(s[..., 0] > 0, np.log(np.where(s > 0, s, 1))[..., 0] + m[..., 0], -np.inf)
    if dout is None:
        return out, lse
    do = np.asarray(dout, np.float64)
    dv = np.einsum("bhij,bihd->bjhd", p, do)
    dp = np.einsum("bihd,bjhd->bhij", do, ve)
    dd = (do * out).sum(-1).transpose(0, 2, 1)[..., None]  # D = rowsum(dO * O) [b, h, i, 1]
    ds = p * (dp - dd)
    if softcap:
        ds = ds * (1 - t * t)
    ds = ds * scale
    dq = np.einsum("bhij,bjhd->bihd", ds, ke)
    dk = np.einsum("bhij,bihd->bjhd", ds, q)
    dk = dk.reshape(b, sk, hk, g, d).sum(3)
    dv = dv.reshape(b, sk, hk, g, v.shape[3]).sum(3)
    return out, lse, (dq, dk, dv)


def assert_close(test, got, want, tol, what):
    got = np.asarray(got, np.float64)
    test.assertEqual(got.shape, want.shape, what)
    fin = np.isfinite(want)
    test.assertTrue(np.array_equal(np.isfinite(got), fin), f"{what}: non-finite pattern differs")
    err = np.max(np.abs(got[fin] - want[fin]), initial=0.0)
    test.assertLess(err, tol, f"{what}: max abs error {err:.3g} >= {tol}")


class TestBackendInfo(unittest.TestCase):
    def test_cpu_listed_and_available(self):
        infos = fa.backend_info()
        self.assertTrue(all(isinstance(b, fa.BackendInfo) for b in infos))
        names = [b.name for b in infos]
        self.assertEqual(names, ["cpu", "cuda", "hip", "opencl"])
        cpu = infos[0]
        self.assertTrue(cpu.available, cpu.reason)
        self.assertIn("fwd", cpu.features)
        self.assertIn("f32", cpu.dtypes)
        self.assertTrue(cpu.plugin_path.endswith("libfa_cpu.so"))
        for b in infos:
            if not b.available:
                self.assertTrue(b.reason, f"{b.name}: unavailable without a reason")

    def test_version(self):
        self.assertRegex(fa.version(), r"^\d+\.\d+\.\d+$")


class TestForward(unittest.TestCase):
    def check(self, q, k, v, tol=2e-5, ref_kw=None, **params):
        out, lse, info = fa.attention(q, k, v, return_lse=True, return_info=True, **params)
        self.assertIsInstance(out, np.ndarray)
        self.assertEqual(out.dtype, q.dtype)
        self.assertEqual(lse.dtype, np.float32)
        want_out, want_lse = reference(q, k, v, **(ref_kw or {}))
        assert_close(self, out, want_out, tol, "out")
        assert_close(self, lse, want_lse, 1e-4, "lse")
        self.assertIsInstance(info, fa.RunInfo)
        self.assertEqual(info.backend, "cpu")
        self.assertTrue(info.kernel.startswith("cpu."), info.kernel)
        return out, info

    def test_plain(self):
        out, info = self.check(rand(2, 9, 3, 16), rand(2, 11, 3, 16), rand(2, 11, 3, 16))
        self.assertNotIn("causal", info.kernel)

    def test_causal_bottom_right_and_top_left_gqa(self):
        q, k, v = rand(1, 6, 4, 8), rand(1, 10, 2, 8), rand(1, 10, 2, 8)
        _, info = self.check(q, k, v, causal=True, ref_kw={"causal": True})
        self.assertIn("causal", info.kernel)
        self.check(q, k, v, causal=True, causal_align="top_left",
                   ref_kw={"causal": True, "top_left": True})

    def test_window_softcap_alibi_scale(self):
        q, k, v = rand(2, 7, 2, 8), rand(2, 7, 2, 8), rand(2, 7, 2, 12)  # dv != dk
        slopes = np.array([0.5, 0.25], np.float32)
        self.check(q, k, v, window_left=2, window_right=1, softcap=3.0, alibi_slopes=slopes,
                   softmax_scale=0.3,
                   ref_kw={"window": (2, 1), "softcap": 3.0, "alibi": slopes, "scale": 0.3})
        self.check(q, k, v, window_left=1, ref_kw={"window": (1, -1)})

    def test_float16(self):
        q, k, v = (rand(1, 16, 2, 32, dtype=np.float16) for _ in range(3))
        out, _ = self.check(q, k, v, tol=2e-3)
        self.assertEqual(out.dtype, np.float16)

    def test_strided_views_and_given_outputs(self):
        base = rand(2, 3, 8, 16)  # [b, h, s, d] memory, viewed as [b, s, h, d]
        q = base.transpose(0, 2, 1, 3)
        k, v = rand(2, 5, 3, 16), rand(2, 5, 3, 16)
        out = np.full((2, 8, 3, 16), np.nan, np.float32)
        lse = np.full((2, 3, 8), np.nan, np.float32)
        got = fa.attention(q, k, v, out=out, lse=lse)
        self.assertIs(got, out)
        want_out, want_lse = reference(q, k, v)
        assert_close(self, out, want_out, 2e-5, "out (given)")
        assert_close(self, lse, want_lse, 1e-4, "lse (given)")

    def test_read_only_arrays_and_lists(self):
        q = rand(1, 3, 1, 4)
        q.setflags(write=False)
        out = fa.attention(q, q, q)
        assert_close(self, out, reference(q, q, q)[0], 2e-5, "out")
        # A list goes through numpy.asarray: float64 here, refused (no silent cast).
        with self.assertRaises(fa.FlashAttnError) as cm:
            fa.attention(q, q.tolist(), q)
        self.assertIn("k: dtype", cm.exception.message)

    def test_varlen(self):
        lens_q, lens_k = [3, 5], [4, 6]
        cq = np.array([0, 3, 8], np.int32)
        ck = np.array([0, 4, 10], np.int32)
        q, k, v = rand(8, 2, 8), rand(10, 2, 8), rand(10, 2, 8)
        out, lse = fa.attention(q, k, v, cu_seqlens_q=cq, cu_seqlens_k=ck, max_seqlen_q=5,
                                max_seqlen_k=6, causal=True, return_lse=True)
        self.assertEqual(lse.shape, (2, 8))
        for b in range(2):
            sq = slice(cq[b], cq[b + 1])
            sk = slice(ck[b], ck[b + 1])
            wo, wl = reference(q[None, sq], k[None, sk], v[None, sk], causal=True)
            assert_close(self, out[None, sq], wo, 2e-5, f"out of sequence {b}")
            assert_close(self, lse[:, sq], wl[0], 1e-4, f"lse of sequence {b}")
        self.assertEqual((lens_q, lens_k), ([3, 5], [4, 6]))
        # Host index arrays are checked on every call: check_indices changes nothing here.
        again = fa.attention(q, k, v, cu_seqlens_q=cq, cu_seqlens_k=ck, max_seqlen_q=5,
                             max_seqlen_k=6, causal=True, check_indices=True)
        np.testing.assert_array_equal(again, out)
        for check in (False, True):
            with self.assertRaises(fa.FlashAttnError) as cm:
                fa.attention(q, k, v, cu_seqlens_q=np.array([0, 5, 3], np.int32),
                             cu_seqlens_k=ck, max_seqlen_q=5, max_seqlen_k=6,
                             check_indices=check)
            self.assertIn("params.cu_seqlens_q[2] = 3 is less than", cm.exception.message)

    def test_dropout_reproducible(self):
        q, k, v = rand(1, 8, 2, 8), rand(1, 8, 2, 8), rand(1, 8, 2, 8)
        a = fa.attention(q, k, v, dropout_p=0.3, dropout_seed=7, dropout_offset=0)
        b = fa.attention(q, k, v, dropout_p=0.3, dropout_seed=7, dropout_offset=0)
        c = fa.attention(q, k, v, dropout_p=0.3, dropout_seed=8, dropout_offset=0)
        np.testing.assert_array_equal(a, b)
        self.assertFalse(np.array_equal(a, c))

    def test_every_param_is_a_keyword(self):
        import ctypes

        from flashattn import _capi

        fields = [f for f, _ in _capi.FaParams._fields_ if f != "struct_size"]
        self.assertEqual(sorted(fields), sorted(fa.PARAMS))
        q = rand(1, 4, 1, 8)
        ws = np.zeros(1 << 16, np.uint8).view(np.float32)
        out = fa.attention(q, q, q, backend="cpu", strict=True, deterministic=True, num_splits=1,
                           kernel_family=None, workspace=ws, stream=None, window_enabled=False)
        assert_close(self, out, reference(q, q, q)[0], 2e-5, "out")
        self.assertGreater(ctypes.sizeof(_capi.FaParams), 0)

    def test_plan(self):
        info = fa.plan(rand(1, 4, 2, 8), rand(1, 4, 2, 8), rand(1, 4, 2, 8), causal=True)
        self.assertTrue(info.kernel.startswith("cpu.") and "causal" in info.kernel, info.kernel)


class TestBackward(unittest.TestCase):
    def check(self, q, k, v, tol=5e-5, ref_kw=None, **params):
        out, lse = fa.attention(q, k, v, return_lse=True, **params)
        dout = rand(*out.shape)
        dq, dk, dv, info = fa.attention_backward(dout, q, k, v, out, lse, return_info=True,
                                                 **params)
        self.assertIn("bwd", info.kernel)
        _, _, (wq, wk, wv) = reference(q, k, v, dout=dout, **(ref_kw or {}))
        assert_close(self, dq, wq, tol, "dq")
        assert_close(self, dk, wk, tol, "dk")
        assert_close(self, dv, wv, tol, "dv")

    def test_plain_gqa(self):
        self.check(rand(2, 6, 4, 8), rand(2, 9, 2, 8), rand(2, 9, 2, 8))

    def test_causal_softcap(self):
        self.check(rand(1, 8, 2, 16), rand(1, 8, 2, 16), rand(1, 8, 2, 16), causal=True,
                   softcap=2.0, ref_kw={"causal": True, "softcap": 2.0})


class TestErrors(unittest.TestCase):
    def test_shape_mismatch_names_the_argument(self):
        q, k = rand(1, 4, 2, 8), rand(1, 4, 2, 4)
        with self.assertRaises(fa.FlashAttnError) as cm:
            fa.attention(q, k, k)
        e = cm.exception
        self.assertEqual(e.status, 1)
        self.assertEqual(e.status_name, "FA_ERR_INVALID_ARGUMENT")
        self.assertIn("k.shape[3]", e.message)
        self.assertEqual(e.call, "fa_forward")

    def test_unsupported_dtype(self):
        q = rand(1, 4, 1, 8).astype(np.float64)
        with self.assertRaises(fa.FlashAttnError) as cm:
            fa.attention(q, q, q)
        self.assertEqual(cm.exception.status_name, "FA_ERR_UNSUPPORTED")
        self.assertIn("q: dtype", cm.exception.message)

    def test_unknown_keyword_and_bad_backend_name(self):
        q = rand(1, 4, 1, 8)
        with self.assertRaises(TypeError):
            fa.attention(q, q, q, casual=True)
        with self.assertRaises(fa.FlashAttnError) as cm:
            fa.attention(q, q, q, backend="tpu")
        self.assertEqual(cm.exception.status_name, "FA_ERR_INVALID_ARGUMENT")

    def test_strict_unavailable_backend(self):
        unavailable = [b.name for b in fa.backend_info() if not b.available]
        if not unavailable:
            self.skipTest("every backend is available here")
        q = rand(1, 4, 1, 8)
        with self.assertRaises(fa.FlashAttnError) as cm:
            fa.attention(q, q, q, backend=unavailable[0], strict=True)
        self.assertIn(cm.exception.status_name,
                      ("FA_ERR_BACKEND_UNAVAILABLE", "FA_ERR_UNSUPPORTED"))
        self.assertTrue(cm.exception.message)

    def test_invalid_value_leaves_given_output_untouched(self):
        q = rand(1, 4, 1, 8)
        out = np.full_like(q, 7.0)
        with self.assertRaises(fa.FlashAttnError) as cm:
            fa.attention(q, q, q, out=out, dropout_p=1.5)
        self.assertIn("dropout_p", cm.exception.message)
        self.assertTrue(np.all(out == 7.0))

    def test_backward_missing_lse_shape(self):
        q = rand(1, 4, 1, 8)
        out, lse = fa.attention(q, q, q, return_lse=True)
        with self.assertRaises(fa.FlashAttnError) as cm:
            fa.attention_backward(out, q, q, q, out, lse[:, :, :2])
        self.assertEqual(cm.exception.call, "fa_backward")


class TestTorch(unittest.TestCase):
    """With PyTorch installed: CPU tensors in, torch tensors out (CUDA is tested on a GPU machine)."""

    def test_torch_cpu(self):
        try:
            import torch
        except ImportError:
            self.skipTest("PyTorch not installed")
        q = torch.randn(1, 5, 2, 8)
        out = fa.attention(q, q, q, causal=True)
        self.assertIsInstance(out, torch.Tensor)
        want, _ = reference(q.numpy(), q.numpy(), q.numpy(), causal=True)
        assert_close(self, out.numpy(), want, 2e-5, "out")

    def test_torch_cuda_against_sdpa(self):
        """On a GPU machine: CUDA tensors through the cuda backend, against PyTorch's SDPA."""
        try:
            import torch
        except ImportError:
            self.skipTest("PyTorch not installed")
        if not torch.cuda.is_available():
            self.skipTest("no CUDA device for PyTorch")
        if not any(b.name == "cuda" and b.available for b in fa.backend_info()):
            self.skipTest("the cuda backend is not available")
        torch.manual_seed(1234)
        shape = (2, 300, 4, 128)  # (batch, seqlen, heads, head_dim); 300: not a tile multiple
        q, k, v, dout = (torch.randn(*shape, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        out, lse, info = fa.attention(q, k, v, causal=True, backend="cuda", strict=1,
                                      return_lse=True, return_info=True)
        self.assertIsInstance(out, torch.Tensor)
        self.assertTrue(out.is_cuda)
        self.assertTrue(info.kernel.startswith("cuda."), info.kernel)
        dq, dk, dv = fa.attention_backward(dout, q, k, v, out, lse, causal=True, backend="cuda",
                                           strict=1)
        # The reference: SDPA in float32 on (batch, heads, seqlen, head_dim) views.
        qf, kf, vf = (t.float().transpose(1, 2).requires_grad_() for t in (q, k, v))
        ref = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=True)
        ref.backward(dout.float().transpose(1, 2))
        torch.cuda.synchronize()
        for name, got, want in (("out", out, ref.transpose(1, 2)), ("dq", dq, qf.grad.transpose(1, 2)),
                                ("dk", dk, kf.grad.transpose(1, 2)),
                                ("dv", dv, vf.grad.transpose(1, 2))):
            err = ((got.float() - want).norm() / want.norm()).item()
            self.assertTrue(err < 2e-2, f"{name}: relative L2 error {err:.3e}")
            self.assertTrue(torch.isfinite(got.float()).all().item(), f"{name}: not finite")


if __name__ == "__main__":
    unittest.main()
