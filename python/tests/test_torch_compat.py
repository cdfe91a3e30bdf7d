"""FlashAttention-compatible entry points and the SDPA-style call (flashattn.flash_attn_interface)
on PyTorch CPU tensors (and NumPy arrays): argument names and order, window_size, softcap, ALiBi,
GQA, varlen packing, paged keys, against the float64 reference by torch_reference's rule."""

from __future__ import annotations

import inspect
import unittest

import torch_reference as R

R.require_torch()

import numpy as np  # noqa: E402
import torch  # noqa: E402

import flashattn as fa  # noqa: E402
from flashattn import flash_attn_interface as fi  # noqa: E402


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


TAIL = ["dropout_p", "softmax_scale", "causal", "window_size", "softcap", "alibi_slopes",
        "deterministic", "return_attn_probs"]
FP8 = ["q_descale", "k_descale", "v_descale"]  # FlashAttention 3's, keyword-only here
SIGNATURES = {  # FlashAttention 2.7's argument lists
    "flash_attn_func": ["q", "k", "v"] + TAIL + FP8,
    "flash_attn_qkvpacked_func": ["qkv"] + TAIL + FP8,
    "flash_attn_kvpacked_func": ["q", "kv"] + TAIL + FP8,
    "flash_attn_varlen_func": ["q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q",
                               "max_seqlen_k"] + TAIL + ["block_table"],
    "flash_attn_varlen_qkvpacked_func": ["qkv", "cu_seqlens", "max_seqlen"] + TAIL,
    "flash_attn_varlen_kvpacked_func": ["q", "kv", "cu_seqlens_q", "cu_seqlens_k",
                                        "max_seqlen_q", "max_seqlen_k"] + TAIL,
    "flash_attn_with_kvcache": ["q", "k_cache", "v_cache", "k", "v", "rotary_cos", "rotary_sin",
                                "cache_seqlens", "cache_batch_idx", "cache_leftpad",
                                "block_table", "softmax_scale", "causal", "window_size",
                                "softcap", "rotary_interleaved", "alibi_slopes", "num_splits",
                                "return_softmax_lse"],
    "scaled_dot_product_attention": ["query", "key", "value", "attn_mask", "dropout_p",
                                     "is_causal", "scale", "enable_gqa"],
}


class TestSignatures(unittest.TestCase):
    def test_names_order_and_exports(self):
        for name, params in SIGNATURES.items():
            fn = getattr(fa, name)
            self.assertIs(fn, getattr(fi, name))
            sig = inspect.signature(fn).parameters
            self.assertEqual(list(sig), params, name)
            for p in FP8:
                if p in sig:  # after FlashAttention 2's positional arguments, kept in place
                    self.assertEqual(sig[p].kind, inspect.Parameter.KEYWORD_ONLY, f"{name}: {p}")

    def test_positional_arguments(self):
        q = randn(1, 5, 2, 8).float()
        got = fa.flash_attn_func(q, q, q, 0.0, 0.3, True, (2, -1))
        want = fa.attention(q, q, q, softmax_scale=0.3, causal=True, window_left=2)
        self.assertTrue(torch.equal(got, want))


class TestFlashAttnFunc(unittest.TestCase):
    def run_case(self, shapes, fa_kw, ref_kw, dtypes=(torch.float32, torch.bfloat16)):
        q, k, v = (randn(*s, seed=i) for i, s in enumerate(shapes))
        for dt in dtypes:
            with self.subTest(dtype=dt):
                R.compare(self, lambda q_, k_, v_: fa.flash_attn_func(q_, k_, v_, **fa_kw),
                          lambda q_, k_, v_: R.reference(q_, k_, v_, **ref_kw)[0], (q, k, v), dt)

    def test_window_size(self):
        shapes = ((2, 7, 2, 8), (2, 10, 2, 8), (2, 10, 2, 8))
        self.run_case(shapes, {"window_size": (2, 1)}, {"window": (2, 1)})
        self.run_case(shapes, {"window_size": (-1, 0)}, {"causal": True})
        self.run_case(shapes, {"window_size": (3, -1), "causal": True},
                      {"window": (3, -1), "causal": True})

    def test_softcap_alibi_gqa_scale(self):
        slopes = torch.tensor([0.3, 0.1, 0.2, 0.05], dtype=torch.float32)
        self.run_case(((2, 6, 4, 16), (2, 9, 2, 16), (2, 9, 2, 16)),
                      {"softcap": 3.0, "alibi_slopes": slopes, "softmax_scale": 0.2,
                       "causal": True},
                      {"softcap": 3.0, "alibi": slopes, "scale": 0.2, "causal": True})
        per_batch = torch.tensor([[0.3, 0.1], [0.2, 0.4]], dtype=torch.float32)
        self.run_case(((2, 5, 2, 8), (2, 5, 1, 8), (2, 5, 1, 8)), {"alibi_slopes": per_batch},
                      {"alibi": per_batch}, dtypes=(torch.float32,))

    def test_deterministic(self):
        q = randn(1, 6, 2, 8).float()
        a = fa.flash_attn_func(q, q, q, deterministic=True)
        self.assertTrue(torch.equal(a, fa.flash_attn_func(q, q, q, deterministic=True)))

    def test_packed(self):
        qkv = randn(2, 6, 3, 2, 8, seed=3)
        kv = randn(2, 9, 2, 1, 8, seed=4)
        q = randn(2, 6, 2, 8, seed=5)
        R.compare(self, lambda t: fa.flash_attn_qkvpacked_func(t, causal=True),
                  lambda t: R.reference(t[:, :, 0], t[:, :, 1], t[:, :, 2], causal=True)[0],
                  (qkv,), torch.float32, names=("qkv",))
        R.compare(self, lambda a, b: fa.flash_attn_kvpacked_func(a, b, window_size=(2, 2)),
                  lambda a, b: R.reference(a, b[:, :, 0], b[:, :, 1], window=(2, 2))[0],
                  (q, kv), torch.float32, names=("q", "kv"))

    def test_refusals(self):
        q = randn(1, 4, 1, 8).float()
        for fn, text in (
            (lambda: fa.flash_attn_func(q, q, q, return_attn_probs=True), "return_attn_probs"),
            (lambda: fa.flash_attn_func(q, q, q, softmax_scale=0.0), "softmax_scale=0.0"),
        ):
            with self.assertRaises(fa.FlashAttnError) as cm:
                fn()
            self.assertEqual(cm.exception.status_name, "FA_ERR_UNSUPPORTED")
            self.assertIn(text, cm.exception.message)

    def test_numpy(self):
        q, k, v = (randn(1, 5, 2, 8, seed=i).float().numpy() for i in range(3))
        out = fa.flash_attn_func(q, k, v, causal=True, window_size=(1, -1))
        self.assertIsInstance(out, np.ndarray)
        want = R.reference(*(torch.from_numpy(x).double() for x in (q, k, v)), causal=True,
                           window=(1, -1))[0]
        self.assertLess(R.max_error(torch.from_numpy(out), want), 2e-6)


CU_Q = [0, 3, 8, 9]
CU_K = [0, 4, 10, 12]


def per_sequence(q, k, v, cu_q, cu_k, **kw):
    outs = []
    for b in range(len(cu_q) - 1):
        sq, sk = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        outs.append(R.reference(q[None, sq], k[None, sk], v[None, sk], **kw)[0][0])
    return torch.cat(outs)


class TestVarlen(unittest.TestCase):
    def test_varlen_func(self):
        cq, ck = (torch.tensor(c, dtype=torch.int32) for c in (CU_Q, CU_K))
        q, k, v = randn(9, 4, 8, seed=1), randn(12, 2, 8, seed=2), randn(12, 2, 8, seed=3)
        for dt in (torch.float32, torch.float16):
            with self.subTest(dtype=dt):
                R.compare(self,
                          lambda a, b, c: fa.flash_attn_varlen_func(a, b, c, cq, ck, 5, 6,
                                                                    causal=True, softcap=4.0),
                          lambda a, b, c: per_sequence(a, b, c, CU_Q, CU_K, causal=True,
                                                       softcap=4.0),
                          (q, k, v), dt)

    def test_varlen_packed(self):
        cu = torch.tensor(CU_Q, dtype=torch.int32)
        qkv = randn(9, 3, 2, 8, seed=4)
        R.compare(self, lambda t: fa.flash_attn_varlen_qkvpacked_func(t, cu, 5, causal=True),
                  lambda t: per_sequence(t[:, 0], t[:, 1], t[:, 2], CU_Q, CU_Q, causal=True),
                  (qkv,), torch.float32, names=("qkv",))
        cq, ck = (torch.tensor(c, dtype=torch.int32) for c in (CU_Q, CU_K))
        q, kv = randn(9, 2, 8, seed=5), randn(12, 2, 1, 8, seed=6)
        R.compare(self, lambda a, b: fa.flash_attn_varlen_kvpacked_func(a, b, cq, ck, 5, 6),
                  lambda a, b: per_sequence(a, b[:, 0], b[:, 1], CU_Q, CU_K),
                  (q, kv), torch.float32, names=("q", "kv"))

    def test_varlen_paged_keys(self):
        """block_table: the keys of sequence b are pages block_table[b] (lengths from cu_k)."""
        page, heads, d = 4, 2, 8
        lens_k = [4, 6, 2]
        table = torch.tensor([[3, 0], [1, 5], [2, 4]], dtype=torch.int32)
        k_pages, v_pages = randn(6, page, heads, d, seed=7), randn(6, page, heads, d, seed=8)
        q = randn(9, heads, 8, seed=9)
        cq = torch.tensor(CU_Q, dtype=torch.int32)
        ck = torch.tensor([0, 4, 10, 12], dtype=torch.int32)
        out = fa.flash_attn_varlen_func(q.float(), k_pages.float(), v_pages.float(), cq, ck, 5, 6,
                                        causal=True, block_table=table)
        ks = torch.cat([k_pages[table[b].long()].reshape(-1, heads, d)[:lens_k[b]]
                        for b in range(3)])
        vs = torch.cat([v_pages[table[b].long()].reshape(-1, heads, d)[:lens_k[b]]
                        for b in range(3)])
        want = per_sequence(q, ks, vs, CU_Q, [0, 4, 10, 12], causal=True)
        self.assertLess(R.max_error(out, want), 2e-6)

    def test_numpy_varlen(self):
        q, k, v = (randn(*s, seed=i).float().numpy() for i, s in
                   enumerate(((9, 2, 8), (12, 2, 8), (12, 2, 8))))
        cq, ck = np.array(CU_Q, np.int32), np.array(CU_K, np.int32)
        out = fa.flash_attn_varlen_func(q, k, v, cq, ck, 5, 6, causal=True)
        want = per_sequence(*(torch.from_numpy(x).double() for x in (q, k, v)), CU_Q, CU_K,
                            causal=True)
        self.assertLess(R.max_error(torch.from_numpy(out), want), 2e-6)


class TestSdpa(unittest.TestCase):
    def run_case(self, shapes, kw, dtypes=(torch.float32, torch.bfloat16)):
        sdpa = torch.nn.functional.scaled_dot_product_attention
        q, k, v = (randn(*s, seed=i) for i, s in enumerate(shapes))
        for dt in dtypes:
            with self.subTest(dtype=dt, **{k_: str(v_) for k_, v_ in kw.items()}):
                R.compare(self, lambda a, b, c: fa.scaled_dot_product_attention(a, b, c, **kw),
                          lambda a, b, c: sdpa(a, b, c, **kw), (q, k, v), dt)

    def test_against_torch_sdpa(self):
        # is_causal with L != S: top-left aligned, as PyTorch's.
        self.run_case(((2, 3, 6, 8), (2, 3, 9, 8), (2, 3, 9, 8)), {"is_causal": True})
        self.run_case(((2, 4, 6, 8), (2, 2, 6, 8), (2, 2, 6, 16)),
                      {"enable_gqa": True, "scale": 0.25})
        self.run_case(((3, 5, 8), (3, 7, 8), (3, 7, 8)), {"is_causal": True})

    def test_views_not_copies(self):
        q = torch.randn(1, 2, 5, 8)
        out = fa.scaled_dot_product_attention(q, q, q)
        self.assertEqual(out.shape, (1, 2, 5, 8))
        self.assertEqual(out.stride(), (80, 8, 16, 1))  # [b, L, h, d] memory seen as [b, h, L, d]

    def test_refusals(self):
        q = torch.randn(1, 2, 5, 8)
        with self.assertRaises(fa.FlashAttnError) as cm:
            fa.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(5, 5, dtype=bool))
        self.assertEqual(cm.exception.status_name, "FA_ERR_UNSUPPORTED")
        with self.assertRaises(fa.FlashAttnError) as cm:
            fa.scaled_dot_product_attention(q, q[:, :1], q[:, :1])
        self.assertIn("enable_gqa", cm.exception.message)


if __name__ == "__main__":
    unittest.main()
