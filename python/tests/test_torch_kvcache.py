"""The KV-cache calls (flashattn.attention_kvcache, flash_attn_with_kvcache) on PyTorch CPU
tensors and NumPy arrays: appending to the cache in place, rotary embeddings (interleaved or
not, q at the right positions), paged caches, cache_seqlens as int/None, the LSE, and the
refusals, against a float64 reference by torch_reference's rule."""

from __future__ import annotations

import unittest

import torch_reference as R

R.require_torch()

import numpy as np  # noqa: E402
import torch  # noqa: E402

import flashattn as fa  # noqa: E402


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def rotate(x, cos, sin, pos, interleaved):
    """x [b, s, h, d] rotated at positions pos [b, s] by tables [max_pos, rotary_dim / 2]."""
    rd = 2 * cos.shape[1]
    c, s = cos[pos][:, :, None, :].to(x.dtype), sin[pos][:, :, None, :].to(x.dtype)
    xr = x[..., :rd]
    if interleaved:
        x0, x1 = xr[..., 0::2], xr[..., 1::2]
        r = torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], -1).flatten(-2)
    else:
        x0, x1 = xr[..., :rd // 2], xr[..., rd // 2:]
        r = torch.cat([x0 * c - x1 * s, x0 * s + x1 * c], -1)
    return torch.cat([r, x[..., rd:]], -1)


def kvcache_reference(q, k_cache, v_cache, lens, k_new=None, v_new=None, cos=None, sin=None,
                      interleaved=True, causal=False, window=(-1, -1)):
    """(out, lse, k_cache', v_cache') in q's dtype, caches [b, capacity, h, d]."""
    kc, vc = k_cache.clone(), v_cache.clone()
    b, sq = q.shape[:2]
    sn = 0 if k_new is None else k_new.shape[1]
    lens = [int(x) for x in lens]
    if k_new is not None:
        if cos is not None:
            pos = torch.tensor([[lens[i] + t for t in range(sn)] for i in range(b)])
            k_new = rotate(k_new, cos, sin, pos, interleaved)
        for i in range(b):
            kc[i, lens[i]:lens[i] + sn] = k_new[i]
            vc[i, lens[i]:lens[i] + sn] = v_new[i]
    if cos is not None:
        moving = causal or window != (-1, -1)
        pos = torch.tensor([[lens[i] + (t if moving else 0) for t in range(sq)] for i in range(b)])
        q = rotate(q, cos, sin, pos, interleaved)
    outs, lses = [], []
    for i in range(b):
        n = lens[i] + sn
        o, l_ = R.reference(q[i:i + 1], kc[i:i + 1, :n], vc[i:i + 1, :n], causal=causal,
                            window=window)
        outs.append(o)
        lses.append(l_)
    return torch.cat(outs), torch.cat(lses), kc, vc


class TestKvcache(unittest.TestCase):
    def setUp(self):
        self.b, self.cap, self.hq, self.hk, self.d = 2, 16, 4, 2, 16
        self.q = randn(2, 3, 4, 16, seed=1)
        self.kc, self.vc = randn(2, 16, 2, 16, seed=2), randn(2, 16, 2, 16, seed=3)
        self.kn, self.vn = randn(2, 3, 2, 16, seed=4), randn(2, 3, 2, 16, seed=5)
        angles = torch.arange(32, dtype=torch.float64)[:, None] * \
            torch.tensor([1.0, 0.3, 0.1, 0.03])[None, :]
        self.cos, self.sin = angles.cos(), angles.sin()  # rotary_dim 8 < head_dim 16
        self.lens = [5, 9]

    def run_case(self, interleaved, causal, window=(-1, -1), dtype=torch.float32):
        f = lambda t: t.to(dtype)  # noqa: E731
        kc, vc = f(self.kc), f(self.vc)
        lens = torch.tensor(self.lens, dtype=torch.int32)
        out, lse = fa.flash_attn_with_kvcache(
            f(self.q), kc, vc, f(self.kn), f(self.vn), self.cos.float(), self.sin.float(),
            cache_seqlens=lens, causal=causal, window_size=window,
            rotary_interleaved=interleaved, return_softmax_lse=True)
        args = dict(cos=self.cos, sin=self.sin, interleaved=interleaved, causal=causal,
                    window=window)
        want = kvcache_reference(self.q, self.kc, self.vc, self.lens, self.kn, self.vn, **args)
        naive = kvcache_reference(f(self.q), f(self.kc), f(self.vc), self.lens, f(self.kn),
                                  f(self.vn), **args)
        for name, got, w, n, dt in (("out", out, want[0], naive[0], dtype),
                                    ("lse", lse, want[1], naive[1], torch.float32),
                                    ("k_cache", kc, want[2], naive[2], dtype),
                                    ("v_cache", vc, want[3], naive[3], dtype)):
            R.check(self, name, got, w, n, dt)
        self.assertEqual(tuple(lse.shape), (2, 4, 3))

    def test_append_rotary(self):
        for interleaved in (True, False):
            for causal, window in ((True, (-1, -1)), (False, (-1, -1)), (False, (4, 0))):
                with self.subTest(interleaved=interleaved, causal=causal, window=window):
                    self.run_case(interleaved, causal, window)
        self.run_case(True, True, dtype=torch.bfloat16)

    def test_cache_untouched_outside_the_append(self):
        kc = self.kc.float()
        before = kc.clone()
        fa.flash_attn_with_kvcache(self.q.float(), kc, self.vc.float(), self.kn.float(),
                                   self.vn.float(), cache_seqlens=torch.tensor(self.lens,
                                                                               dtype=torch.int32))
        for i, n in enumerate(self.lens):
            self.assertTrue(torch.equal(kc[i, :n], before[i, :n]))
            self.assertTrue(torch.equal(kc[i, n + 3:], before[i, n + 3:]))
            self.assertTrue(torch.equal(kc[i, n:n + 3], self.kn[i].float()))

    def test_cache_seqlens_int_and_none(self):
        q, kc, vc = self.q.float(), self.kc.float(), self.vc.float()
        out = fa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=7, causal=True)
        want = kvcache_reference(self.q, self.kc, self.vc, [7, 7], causal=True)[0]
        self.assertLess(R.max_error(out, want), 2e-6)
        out = fa.flash_attn_with_kvcache(q, kc, vc)  # None: the whole cache
        want = kvcache_reference(self.q, self.kc, self.vc, [16, 16])[0]
        self.assertLess(R.max_error(out, want), 2e-6)

    def test_paged(self):
        page = 4
        table = torch.tensor([[3, 0, 6, 1], [2, 7, 5, 4]], dtype=torch.int32)
        logical_k, logical_v = self.kc, self.vc  # [b, 16, h, d] = 4 pages per sequence
        k_pages = torch.zeros(8, page, 2, 16, dtype=torch.float64)
        v_pages = torch.zeros_like(k_pages)
        for i in range(2):
            k_pages[table[i].long()] = logical_k[i].reshape(4, page, 2, 16)
            v_pages[table[i].long()] = logical_v[i].reshape(4, page, 2, 16)
        kp, vp = k_pages.float(), v_pages.float()
        out = fa.flash_attn_with_kvcache(
            self.q.float(), kp, vp, self.kn.float(), self.vn.float(),
            cache_seqlens=torch.tensor(self.lens, dtype=torch.int32), block_table=table,
            causal=True)
        want, _, wk, wv = kvcache_reference(self.q, self.kc, self.vc, self.lens, self.kn, self.vn,
                                            causal=True)
        self.assertLess(R.max_error(out, want), 2e-6)
        for i in range(2):
            self.assertLess(R.max_error(kp[table[i].long()].reshape(16, 2, 16), wk[i]), 1e-6)
            self.assertLess(R.max_error(vp[table[i].long()].reshape(16, 2, 16), wv[i]), 1e-6)

    def test_plain_binding_numpy_and_torch(self):
        lens = [5, 9]
        for lib in ("numpy", "torch"):
            with self.subTest(lib=lib):
                conv = (lambda t: t.float().numpy().copy()) if lib == "numpy" else \
                    (lambda t: t.float().clone())
                kc, vc = conv(self.kc), conv(self.vc)
                seqlens = np.array(lens, np.int32) if lib == "numpy" else \
                    torch.tensor(lens, dtype=torch.int32)
                out, lse, info = fa.attention_kvcache(
                    conv(self.q), kc, vc, seqlens, k_new=conv(self.kn), v_new=conv(self.vn),
                    rotary_cos=conv(self.cos), rotary_sin=conv(self.sin),
                    rotary_interleaved=False, causal=True, return_lse=True, return_info=True)
                self.assertTrue(info.kernel.startswith("cpu.") and "kvcache" in info.kernel,
                                info.kernel)
                want, wl, wk, _ = kvcache_reference(
                    self.q, self.kc, self.vc, lens, self.kn, self.vn, cos=self.cos, sin=self.sin,
                    interleaved=False, causal=True)
                self.assertLess(R.max_error(torch.as_tensor(out), want), 5e-6)
                self.assertLess(R.max_error(torch.as_tensor(lse), wl), 5e-6)
                self.assertLess(R.max_error(torch.as_tensor(kc), wk), 1e-6)
                plan = fa.plan_kvcache(conv(self.q), kc, vc, seqlens, causal=True)
                self.assertEqual(plan.backend, "cpu")

    def test_refusals(self):
        q, kc, vc = self.q.float(), self.kc.float(), self.vc.float()
        for kw, text in (({"cache_batch_idx": torch.tensor([1, 0], dtype=torch.int32)},
                          "cache_batch_idx"),
                         ({"cache_leftpad": torch.tensor([0, 1], dtype=torch.int32)},
                          "cache_leftpad")):
            with self.assertRaises(fa.FlashAttnError) as cm:
                fa.flash_attn_with_kvcache(q, kc, vc, **kw)
            self.assertEqual(cm.exception.status_name, "FA_ERR_UNSUPPORTED")
            self.assertIn(text, cm.exception.message)
        with self.assertRaises(fa.FlashAttnError) as cm:  # the library's own check
            fa.flash_attn_with_kvcache(q, kc, vc, self.kn.float(), self.vn.float(),
                                       cache_seqlens=15)
        self.assertIn("cache_seqlens", cm.exception.message)

    def test_read_only_numpy_cache_is_refused(self):
        kc = self.kc.float().numpy().copy()
        kc.setflags(write=False)
        with self.assertRaises(fa.FlashAttnError) as cm:
            fa.attention_kvcache(self.q.float().numpy(), kc, self.vc.float().numpy().copy(),
                                 np.array([1, 1], np.int32))
        self.assertIn("k_cache: the array is read-only", cm.exception.message)


if __name__ == "__main__":
    unittest.main()
