"""The binding's call machinery with NumPy arrays: structs cached per signature (new data, new
strides, threads, a full cache), arrays read through DLPack beside direct ones, the varlen and
KV-cache calls, and what is refused (read-only outputs, foreign byte order)."""

from __future__ import annotations

import threading
import unittest

import numpy as np

import flashattn as fa
from flashattn import _call
from test_flashattn import assert_close, rand, reference


class _OnCuda:
    """A NumPy array exported through DLPack as if it lived in CUDA device 0's memory (the
    capsule's device rewritten): what the binding reads from a GPU array, on a machine without
    one. The library must refuse it before touching the memory."""

    def __init__(self, a):
        self.a = a

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None):
        from flashattn import _dlpack

        capsule = self.a.__dlpack__()
        m = _dlpack.DLManagedTensor.from_address(_dlpack._get_pointer(capsule, b"dltensor"))
        m.dl_tensor.device.device_type = _dlpack.kDLCUDA
        return capsule


class TestSignatureCache(unittest.TestCase):
    def test_same_signature_new_data(self):
        for _ in range(3):
            q, k, v = rand(1, 5, 2, 8), rand(1, 7, 2, 8), rand(1, 7, 2, 8)
            out = fa.attention(q, k, v, causal=True)
            assert_close(self, out, reference(q, k, v, causal=True)[0], 2e-5, "out")

    def test_same_shape_other_strides(self):
        q = rand(1, 6, 2, 8)
        base = rand(1, 2, 6, 8)
        for k in (q.copy(), base.transpose(0, 2, 1, 3), rand(1, 6, 2, 16)[..., ::2]):
            out = fa.attention(q, k, k)
            assert_close(self, out, reference(q, k, k)[0], 2e-5, "out")

    def test_parameters_are_part_of_the_signature(self):
        q = rand(1, 6, 2, 8)
        for kw, ref in (({}, {}), ({"causal": True}, {"causal": True}),
                        ({"causal": True, "softcap": 2.0}, {"causal": True, "softcap": 2.0}),
                        ({"softcap": 2.0, "causal": True}, {"causal": True, "softcap": 2.0})):
            assert_close(self, fa.attention(q, q, q, **kw), reference(q, q, q, **ref)[0], 2e-5,
                         str(kw))

    def test_tensor_keywords_in_either_order(self):
        """Two index arrays of one layout passed in both orders, with new values every call:
        each reaches its own field."""
        rng = np.random.default_rng(5)
        q, k, v = rand(9, 2, 8), rand(11, 2, 8), rand(11, 2, 8)
        for i in range(4):
            cq = np.array([0, rng.integers(1, 9), 9], np.int32)
            ck = np.array([0, rng.integers(1, 11), 11], np.int32)
            idx = {"cu_seqlens_q": cq, "cu_seqlens_k": ck}
            kw = dict(reversed(idx.items())) if i % 2 else idx
            out = fa.attention(q, k, v, max_seqlen_q=9, max_seqlen_k=11, **kw)
            for b in range(2):
                sq, sk = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
                wo = reference(q[None, sq], k[None, sk], v[None, sk])[0]
                assert_close(self, out[None, sq], wo, 2e-5, f"call {i} out {b}")

    def test_threads(self):
        """Each thread has its own structs: concurrent calls of one signature stay apart."""
        errors = []

        def work(seed):
            rng = np.random.default_rng(seed)
            try:
                for _ in range(30):
                    q = rng.standard_normal((1, 4, 2, 8)).astype(np.float32)
                    out = fa.attention(q, q, q, causal=True)
                    want = reference(q, q, q, causal=True)[0]
                    if np.max(np.abs(out - want)) > 2e-5:
                        errors.append(f"thread {seed}: wrong result")
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])

    def test_full_cache_is_cleared(self):
        saved = _call._MAX_PLANS
        _call._MAX_PLANS = 2
        try:
            for s in range(2, 7):
                q = rand(1, s, 1, 8)
                assert_close(self, fa.attention(q, q, q), reference(q, q, q)[0], 2e-5, f"s={s}")
            self.assertLessEqual(len(_call._local.plans), 2)
        finally:
            _call._MAX_PLANS = saved

    def test_dlpack_array_beside_direct_ones(self):
        """A memoryview (read through NumPy and DLPack) as alibi_slopes: built afresh."""
        q = rand(1, 5, 2, 8)
        slopes = np.array([0.5, 0.25], np.float32)
        for _ in range(2):
            out = fa.attention(q, q, q, alibi_slopes=memoryview(slopes))
            assert_close(self, out, reference(q, q, q, alibi=slopes)[0], 2e-5, "out")


class TestCalls(unittest.TestCase):
    def test_attention_varlen(self):
        cq = np.array([0, 3, 8], np.int32)
        q, k, v = rand(8, 2, 8), rand(8, 1, 8), rand(8, 1, 8)
        out, lse = fa.attention_varlen(q, k, v, cq, cq, 5, 5, causal=True, return_lse=True)
        self.assertEqual(lse.shape, (2, 8))
        for b in range(2):
            s = slice(cq[b], cq[b + 1])
            wo, wl = reference(q[None, s], k[None, s], v[None, s], causal=True)
            assert_close(self, out[None, s], wo, 2e-5, f"out {b}")
            assert_close(self, lse[:, s], wl[0], 1e-4, f"lse {b}")

    def test_attention_kvcache_given_outputs(self):
        q = rand(2, 1, 2, 8)
        kc, vc = rand(2, 6, 2, 8), rand(2, 6, 2, 8)
        kn, vn = rand(2, 1, 2, 8), rand(2, 1, 2, 8)
        lens = np.array([2, 4], np.int32)
        out = np.full((2, 1, 2, 8), np.nan, np.float32)
        lse = np.full((2, 2, 1), np.nan, np.float32)
        got = fa.attention_kvcache(q, kc, vc, lens, k_new=kn, v_new=vn, out=out, lse=lse)
        self.assertIs(got, out)
        for b in range(2):
            n = lens[b]
            np.testing.assert_array_equal(kc[b, n], kn[b, 0])
            wo, wl = reference(q[b:b + 1], kc[b:b + 1, :n + 1], vc[b:b + 1, :n + 1])
            assert_close(self, out[b:b + 1], wo, 2e-5, f"out {b}")
            assert_close(self, lse[b:b + 1], wl, 1e-4, f"lse {b}")

    def test_stream_on_the_cpu(self):
        q = rand(1, 4, 1, 8)
        assert_close(self, fa.attention(q, q, q, stream=0), reference(q, q, q)[0], 2e-5, "out")
        with self.assertRaises(fa.FlashAttnError) as cm:  # the CPU backend takes no stream
            fa.attention(q, q, q, stream=5)
        self.assertIn("stream", cm.exception.message)

    def test_read_only_output_refused(self):
        q = rand(1, 4, 1, 8)
        out = np.zeros_like(q)
        out.setflags(write=False)
        with self.assertRaises(fa.FlashAttnError) as cm:
            fa.attention(q, q, q, out=out)
        self.assertIn("out: the array is read-only", cm.exception.message)

    def test_foreign_byte_order_refused(self):
        q = rand(1, 4, 1, 8).astype(">f4")
        with self.assertRaises(fa.FlashAttnError) as cm:
            fa.attention(q, q, q)
        self.assertEqual(cm.exception.status_name, "FA_ERR_UNSUPPORTED")
        self.assertIn("q: dtype", cm.exception.message)

    def test_workspace_in_other_memory_refused(self):
        """params.workspace is a bare address: one in another device's memory than the tensors'
        is refused before the library runs, for each call that takes it; the outputs and the
        workspace keep their bytes."""
        q = rand(1, 4, 1, 8)
        calls = (lambda out, w: fa.attention(q, q, q, out=out, workspace=w),
                 lambda out, w: fa.attention_backward(q, q, q, q, q, np.zeros((1, 1, 4), np.float32),
                                                      dq=out, workspace=w),
                 lambda out, w: fa.attention_kvcache(q, q.copy(), q.copy(), np.array([4], np.int32),
                                                     out=out, workspace=w))
        for i, call in enumerate(calls):
            out, ws = np.full_like(q, np.nan), np.full(1 << 14, 7, np.int32)
            with self.assertRaises(fa.FlashAttnError) as cm:
                call(out, _OnCuda(ws))
            self.assertEqual(cm.exception.status_name, "FA_ERR_INVALID_ARGUMENT", i)
            self.assertIn("params.workspace is in cuda:0 memory but the call's tensors are in "
                          "cpu:0 memory", cm.exception.message)
            self.assertTrue(np.isnan(out).all(), i)
            self.assertTrue((ws == 7).all(), i)
            call(out, ws)  # the same call with the workspace in the tensors' memory runs
            self.assertFalse(np.isnan(out).any(), i)

    def test_numpy_flash_attn_dropout_uses_numpy_seed(self):
        q = rand(1, 8, 2, 8)
        np.random.seed(3)
        a = fa.flash_attn_func(q, q, q, dropout_p=0.5)
        np.random.seed(3)
        b = fa.flash_attn_func(q, q, q, dropout_p=0.5)
        np.testing.assert_array_equal(a, b)


if __name__ == "__main__":
    unittest.main()
