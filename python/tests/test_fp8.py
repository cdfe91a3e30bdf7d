"""FP8 through the binding on the CPU backend: quantize_fp8 and hadamard_rotate against the rule
they state (rotation: Gram matrices and norms kept, seeded, rounded once; quantization: descale
= amax / FP8 max bit for bit, y the round-to-nearest-even FP8 value of x / descale, compared
with PyTorch's own conversion), attention on FP8 q, k, v with per-tensor, per-head and per-block
descales against float64 attention on the dequantized inputs (torch_reference's rule against a
naive bfloat16 computation, and the CPU oracle's own bound: one rounding of the output), and the
refusals (backward, float32 out, descale shapes, varlen, KV cache, gradients).

Inputs are fresh random draws on every run: a failing test prints FLASHATTN_TEST_SEED, which
replays its draws when set. Outputs given to the calls are first filled with NaN, so an element
left unwritten cannot pass.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
import unittest
import zlib

import torch_reference as R

R.require_torch()

import torch  # noqa: E402

import flashattn as fa  # noqa: E402

if not hasattr(torch, "float8_e4m3fn"):
    raise unittest.SkipTest(f"PyTorch {torch.__version__} has no FP8 dtypes")

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
FMAX = {E4M3: 448.0, E5M2: 57344.0}
NAME = {E4M3: "f8e4m3", E5M2: "f8e5m2"}
SEED = int(os.environ.get("FLASHATTN_TEST_SEED") or int.from_bytes(os.urandom(4), "little"))


class Seeded(unittest.TestCase):
    """A test whose draws come from self.gen, seeded from SEED and the test's name (so one
    test replays alone); on a failure the seed is printed."""

    def setUp(self):
        self.gen = torch.Generator().manual_seed(SEED + zlib.crc32(self.id().encode()))

    def run(self, result=None):
        result = result or self.defaultTestResult()
        before = len(result.failures) + len(result.errors)
        super().run(result)
        if len(result.failures) + len(result.errors) > before:
            print(f"\n{self.id()}: inputs drawn with FLASHATTN_TEST_SEED={SEED} (set it to "
                  f"replay them)", file=sys.stderr)
        return result

    def randn(self, *shape, scale=1.0, dtype=torch.float32):
        x = torch.randn(*shape, generator=self.gen, dtype=torch.float64) * scale
        return x.to(dtype)

    def seed64(self) -> int:
        return int(torch.randint(0, 1 << 62, (1,), generator=self.gen)) * 4 + 3  # odd, large


def nan_like(shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype)


def expand_descale(d, rows: int, seqlen: int, heads: int):
    """descale [b or 1, h or 1, blocks] -> float64 [b or 1, seqlen, heads, 1], the descale of
    every (batch, row, head)."""
    if d is None:
        return torch.ones(1, seqlen, 1, 1, dtype=torch.float64)
    blk = torch.arange(seqlen) // rows if rows > 0 else torch.zeros(seqlen, dtype=torch.long)
    e = d.to(torch.float64)[:, :, blk]  # [b, h, seqlen]
    e = e.expand(e.shape[0], heads, seqlen) if e.shape[1] == 1 else e
    return e.permute(0, 2, 1)[..., None]


def dequantize(y, d, rows: int):
    """The values FP8 y stands for: stored value x descale, in float64."""
    return y.to(torch.float64) * expand_descale(d, rows, y.shape[1], y.shape[2])


def reference_quantize(z, dtype, shape, rows: int):
    """(y, descale) by the rule, from z (float32 [b, s, h, d], already rotated): descale = amax
    of the finite |z| a descale covers / FP8 max (float32 division), 1 where that is 0; y =
    (z / descale) converted by PyTorch (round to nearest even)."""
    b, s, h, _ = z.shape
    nb, nh, nblk = shape
    finite = torch.where(torch.isfinite(z), z.abs(), torch.zeros_like(z))
    d = torch.empty(shape, dtype=torch.float32)
    for i in range(nb):
        for j in range(nh):
            for blk in range(nblk):
                t0 = blk * rows if rows > 0 else 0
                t1 = min(t0 + rows, s) if rows > 0 else s
                part = finite[(slice(i, i + 1) if nb > 1 else slice(None)), t0:t1,
                              (slice(j, j + 1) if nh > 1 else slice(None))]
                amax = part.max() if part.numel() else torch.tensor(0.0)
                scale = amax.to(torch.float32) / torch.tensor(FMAX[dtype], dtype=torch.float32)
                d[i, j, blk] = scale if scale > 0 else 1.0
    e = expand_descale(d, rows, s, h).to(torch.float32)
    q = z / e
    q = torch.where(torch.isinf(q), torch.sign(q) * FMAX[dtype], q)  # saturated, as documented
    return q.to(dtype), d


def assert_fp8_equal(test, got, want, what):
    """Bitwise equality of two FP8 tensors, NaN matching any NaN code."""
    g, w = got.view(torch.uint8), want.view(torch.uint8)
    gn, wn = torch.isnan(got.to(torch.float32)), torch.isnan(want.to(torch.float32))
    test.assertTrue(torch.equal(gn, wn), f"{what}: NaN positions differ")
    bad = (g != w) & ~wn
    if bad.any():
        i = tuple(int(n) for n in bad.nonzero()[0])
        test.fail(f"{what}: {int(bad.sum())} elements differ, first at {i}: got "
                  f"{float(got[i].to(torch.float32))}, want {float(want[i].to(torch.float32))}")


class TestHadamardRotate(Seeded):
    def test_gram_matrix_and_norms_kept(self):
        for d in (8, 64, 128):
            with self.subTest(head_dim=d):
                x = self.randn(2, 9, 3, d)
                out = nan_like(x.shape, torch.float32)
                got = fa.hadamard_rotate(x, self.seed64(), out=out)
                self.assertIs(got, out)
                self.assertTrue(torch.isfinite(got).all())
                x64, r64 = x.to(torch.float64), got.to(torch.float64)
                # (xM)(xM)^T = x x^T for the rows of each (batch, head); fp32's error grows with
                # the log2(d) butterfly stages
                gx = torch.einsum("bihd,bjhd->bhij", x64, x64)
                gr = torch.einsum("bihd,bjhd->bhij", r64, r64)
                n = x64.norm(dim=-1).permute(0, 2, 1)  # [b, h, s]
                tol = 8 * math.log2(d) * 2.0 ** -24 * n[..., :, None] * n[..., None, :]
                self.assertTrue(((gx - gr).abs() <= tol).all(),
                                f"Gram matrix: max error {(gx - gr).abs().max():.3g}")
                nr = r64.norm(dim=-1).permute(0, 2, 1)
                self.assertTrue(((nr - n).abs() <= 4 * math.log2(d) * 2.0 ** -24 * n).all())
                self.assertGreater((r64 - x64).abs().max().item(), 0.1)  # not the identity

    def test_seeded(self):
        x = self.randn(1, 5, 2, 32)
        s = self.seed64()
        a = fa.hadamard_rotate(x, s)
        b = fa.hadamard_rotate(x, s)
        c = fa.hadamard_rotate(x, s + 1)
        self.assertTrue(torch.equal(a, b), "one seed, two results")
        self.assertFalse(torch.equal(a, c), "two seeds, one result")
        # q and k rotated with one seed keep their scores
        k = self.randn(1, 7, 2, 32)
        kr = fa.hadamard_rotate(k, s)
        sc = torch.einsum("bihd,bjhd->bhij", x.double(), k.double())
        sr = torch.einsum("bihd,bjhd->bhij", a.double(), kr.double())
        self.assertLess((sc - sr).abs().max().item(), 1e-4)
        # seeds are uint64: the top bit is a seed like any other
        top = fa.hadamard_rotate(x, (1 << 64) - 1)
        self.assertTrue(torch.equal(top, fa.hadamard_rotate(x, -1)))

    def test_half_types_rounded_once(self):
        """bf16 / f16 x: widened exactly, rotated in fp32, rounded once to the output's dtype."""
        for dt in (torch.bfloat16, torch.float16):
            with self.subTest(dtype=dt):
                x = self.randn(2, 6, 2, 16, dtype=dt)
                s = self.seed64()
                f32 = fa.hadamard_rotate(x.float(), s)
                got = fa.hadamard_rotate(x, s, out=nan_like(x.shape, dt))
                self.assertEqual(got.dtype, dt)
                self.assertTrue(torch.equal(got, f32.to(dt)))
                wide = fa.hadamard_rotate(x, s, out=nan_like(x.shape, torch.float32))
                self.assertTrue(torch.equal(wide, f32))

    def test_strided_input(self):
        base = self.randn(2, 3, 7, 32)  # [b, h, s, d] memory viewed as [b, s, h, d]
        x = base.permute(0, 2, 1, 3)
        s = self.seed64()
        want = fa.hadamard_rotate(x.contiguous(), s)
        self.assertTrue(torch.equal(fa.hadamard_rotate(x, s), want))

    def test_refusals(self):
        with self.assertRaises(fa.FlashAttnError) as cm:
            fa.hadamard_rotate(self.randn(1, 4, 1, 12), 1)
        self.assertEqual(cm.exception.status_name, "FA_ERR_UNSUPPORTED")
        self.assertIn("power of two", cm.exception.message)
        with self.assertRaises(fa.FlashAttnError) as cm:
            fa.hadamard_rotate(self.randn(4, 1, 8), 1)
        self.assertIn("[batch, seqlen, heads, head_dim]", cm.exception.message)
        with self.assertRaises(fa.FlashAttnError) as cm:
            fa.hadamard_rotate(self.randn(1, 4, 1, 8).requires_grad_(), 1)
        self.assertEqual(cm.exception.status_name, "FA_ERR_UNSUPPORTED")


class TestQuantize(Seeded):
    def quantize_case(self, x, dtype, rotate=False, **kw):
        """quantize_fp8 (into NaN-filled outputs) against reference_quantize; returns (y,
        descale)."""
        b, s, h, _ = x.shape
        rows = kw.get("block_rows", 0)
        shape = (1, 1, 1) if kw.get("per_tensor") else (b, h, -(-s // rows) if rows else 1)
        y0 = torch.full(x.shape, float("nan")).to(dtype)
        d0 = nan_like(shape, torch.float32)
        seed = self.seed64()
        y, d, info = fa.quantize_fp8(x, dtype=dtype, rotate=rotate, seed=seed, out=(y0, d0),
                                     return_info=True, **kw)
        self.assertIs(y, y0)
        self.assertIs(d, d0)
        self.assertEqual(info.backend, "cpu")
        self.assertIn(NAME[dtype], info.kernel)
        z = fa.hadamard_rotate(x, seed, out=torch.empty(x.shape)) if rotate else x.float()
        want_y, want_d = reference_quantize(z, dtype, shape, rows)
        self.assertTrue(torch.equal(d, want_d),
                        f"descale: max difference {(d - want_d).abs().max():.3g}")
        assert_fp8_equal(self, y, want_y, "y")
        # the form the rule states: y x descale is the FP8 rounding of x, scaled back
        e = expand_descale(d, rows, s, h).to(torch.float32)
        fin = torch.isfinite(want_y.float())
        self.assertTrue(torch.equal((y.float() * e)[fin], (want_y.float() * e)[fin]))
        # and the allocated form gives the same bits
        y2, d2 = fa.quantize_fp8(x, dtype=dtype, rotate=rotate, seed=seed, **kw)
        self.assertEqual(y2.dtype, dtype)
        self.assertEqual(tuple(d2.shape), shape)
        self.assertTrue(torch.equal(d2, d))
        assert_fp8_equal(self, y2, y, "y (allocated)")
        return y, d

    def test_granularities(self):
        for dtype in (E4M3, E5M2):
            for kw in ({"per_tensor": True}, {}, {"block_rows": 3}, {"block_rows": 16}):
                with self.subTest(dtype=dtype, **kw):
                    scale = float(torch.rand(1, generator=self.gen)) * 50
                    x = self.randn(2, 10, 3, 16, scale=scale)
                    self.quantize_case(x, dtype, **kw)

    def test_half_inputs_and_tiny_and_zero_blocks(self):
        x = self.randn(2, 9, 2, 8, dtype=torch.bfloat16)
        x[0, 0:3, 1] = 0  # a whole block of zeros: descale 1
        x[1, 3:6] *= 1e-30  # tiny values: a tiny descale, the FP8 codes as for any values
        x[1, 6:9, 0] *= 1e6  # one head's block large, the other's not
        y, d = self.quantize_case(x, E4M3, block_rows=3)
        self.assertEqual(d[0, 1, 0].item(), 1.0)
        self.quantize_case(self.randn(1, 7, 2, 8, dtype=torch.float16), E5M2, block_rows=2)

    def test_nan_and_inf_left_out_of_amax(self):
        x = self.randn(1, 6, 2, 8)
        x[0, 1, 0, 3] = float("nan")
        x[0, 4, 1, 5] = float("inf")
        x[0, 2, 1, 0] = -float("inf")
        for dtype in (E4M3, E5M2):
            with self.subTest(dtype=dtype):
                y, d = self.quantize_case(x, dtype)
                self.assertTrue(torch.isnan(y[0, 1, 0, 3].float()))
                self.assertEqual(y[0, 4, 1, 5].float().item(), FMAX[dtype])
                self.assertEqual(y[0, 2, 1, 0].float().item(), -FMAX[dtype])
                self.assertTrue(torch.isfinite(d).all())

    def test_rotated(self):
        for d in (16, 64):
            for dtype in (E4M3, E5M2):
                with self.subTest(head_dim=d, dtype=dtype):
                    x = self.randn(2, 8, 2, d)
                    x[..., 0] *= 40  # an outlier channel, spread by the rotation
                    self.quantize_case(x, dtype, rotate=True, block_rows=4)
        self.quantize_case(self.randn(1, 5, 3, 32, dtype=torch.bfloat16), E4M3, rotate=True,
                           per_tensor=True)

    def test_strided_input(self):
        base = self.randn(2, 2, 12, 16)
        x = base.permute(0, 2, 1, 3)
        y, d = fa.quantize_fp8(x, block_rows=5)
        y2, d2 = fa.quantize_fp8(x.contiguous(), block_rows=5)
        self.assertTrue(torch.equal(d, d2))
        assert_fp8_equal(self, y, y2, "y of a strided x")

    def test_dtype_names(self):
        x = self.randn(1, 4, 1, 8)
        for name, dt in (("e4m3", E4M3), ("float8_e4m3fn", E4M3), ("e5m2", E5M2),
                         (E5M2, E5M2), (None, E4M3)):
            self.assertEqual(fa.quantize_fp8(x, dtype=name)[0].dtype, dt)

    def test_refusals(self):
        x = self.randn(1, 4, 2, 8)
        with self.assertRaises(ValueError):
            fa.quantize_fp8(x, per_tensor=True, block_rows=2)
        with self.assertRaises(ValueError):
            fa.quantize_fp8(x, dtype=torch.float16)
        with self.assertRaises(fa.FlashAttnError) as cm:
            fa.quantize_fp8(x, out=(torch.empty(x.shape, dtype=E4M3), torch.empty(1, 2, 1)),
                            block_rows=2)
        self.assertIn("descale", cm.exception.message)
        with self.assertRaises(fa.FlashAttnError) as cm:
            fa.quantize_fp8(x.requires_grad_())
        self.assertEqual(cm.exception.status_name, "FA_ERR_UNSUPPORTED")
        with self.assertRaises(fa.FlashAttnError) as cm:
            fa.quantize_fp8(x.detach().to(torch.float64))
        self.assertIn("x: dtype", cm.exception.message)


def quantized(case, shape, dtype, rows=0, per_tensor=False, scale=1.0):
    """(x float32, y, descale) of fresh random x."""
    x = case.randn(*shape, scale=scale)
    y, d = fa.quantize_fp8(x, dtype=dtype, block_rows=rows, per_tensor=per_tensor)
    return x, y, d


class TestAttention(Seeded):
    def attention_case(self, dtype=E4M3, b=2, sq=9, sk=11, hq=4, hk=2, d=16, rows_q=0,
                       rows_k=0, per_tensor=False, causal=False, out_dtype=torch.bfloat16,
                       drop=(), view=None, **params):
        """FP8 attention (into NaN-filled out and lse) against float64 attention on the
        dequantized inputs. drop: descales left out (then the FP8 values stand for
        themselves). view: a function applied to q, k, v before the call."""
        _, q, qs = quantized(self, (b, sq, hq, d), dtype, rows_q, per_tensor, 2.0)
        _, k, ks = quantized(self, (b, sk, hk, d), dtype, rows_k, per_tensor, 2.0)
        _, v, vs = quantized(self, (b, sk, hk, d), dtype, rows_k, per_tensor)
        if view is not None:
            q, k, v = view(q), view(k), view(v)
        ds = {"q_descale": qs, "k_descale": ks, "v_descale": vs}
        for name in drop:
            ds[name] = None
        out = nan_like(q.shape[:-1] + (v.shape[-1],), out_dtype)
        lse = nan_like((b, hq, sq), torch.float32)
        got, got_lse, info = fa.attention(q, k, v, out=out, lse=lse, return_lse=True,
                                          return_info=True, descale_rows_q=rows_q,
                                          descale_rows_k=rows_k, causal=causal, **ds, **params)
        self.assertIs(got, out)
        self.assertIs(got_lse, lse)
        self.assertEqual(info.backend, "cpu")
        self.assertIn(NAME[dtype], info.kernel)
        qd = dequantize(q, ds["q_descale"], rows_q)
        kd = dequantize(k, ds["k_descale"], rows_k)
        vd = dequantize(v, ds["v_descale"], rows_k)
        ref_kw = {"causal": causal, "scale": params.get("softmax_scale")}
        want, want_lse = R.reference(qd, kd, vd, **ref_kw)
        naive, _ = R.reference(*(t.to(torch.bfloat16) for t in (qd, kd, vd)), **ref_kw)
        R.check(self, "out", got, want, naive, torch.bfloat16)
        # The CPU oracle dequantizes into float32, runs the float32 forward and rounds once:
        # within one rounding of out's dtype (and float32's error) of the reference.
        ulp = 2.0 ** -8 if out_dtype == torch.bfloat16 else 2.0 ** -11
        scale = max(1.0, want.abs().max().item())
        bound = ulp * want.abs() + 1e-5 * scale
        err = (got.to(torch.float64) - want).abs()
        self.assertTrue((err <= bound).all(), f"out: error {err.max():.3g} beyond one rounding")
        lse_err = R.max_error(got_lse, want_lse)
        self.assertLess(lse_err, 1e-4 * max(1.0, want_lse[torch.isfinite(want_lse)].abs().max()))
        # an out allocated by the call: bfloat16, the same values
        if out_dtype == torch.bfloat16 and view is None:
            again = fa.attention(q, k, v, descale_rows_q=rows_q, descale_rows_k=rows_k,
                                 causal=causal, **ds, **params)
            self.assertEqual(again.dtype, torch.bfloat16)
            self.assertTrue(torch.equal(again, got))
        return got

    def test_per_tensor(self):
        self.attention_case(per_tensor=True)
        self.attention_case(per_tensor=True, dtype=E5M2, hq=2, hk=2)

    def test_per_head(self):
        self.attention_case()
        self.attention_case(causal=True, sq=7, sk=13, out_dtype=torch.float16)

    def test_per_block(self):
        self.attention_case(rows_q=3, rows_k=4)
        self.attention_case(rows_q=2, rows_k=5, causal=True, hq=6, hk=2, d=32, dtype=E5M2)
        self.attention_case(rows_q=64, rows_k=1, causal=True, hq=3, hk=1)  # MQA, one-row blocks

    def test_descales_left_out(self):
        self.attention_case(drop=("k_descale",), per_tensor=True)
        self.attention_case(drop=("q_descale", "k_descale", "v_descale"))

    def test_mask_features(self):
        slopes = torch.rand(4, generator=self.gen)
        out = self.attention_case(rows_q=4, softmax_scale=0.3)
        self.assertEqual(out.shape, (2, 9, 4, 16))
        # window and ALiBi reach the float32 pass unchanged: compared with the float32 forward
        # on the dequantized values, which the CPU oracle runs
        _, q, qs = quantized(self, (1, 8, 4, 16), E4M3, 3)
        _, k, ks = quantized(self, (1, 8, 4, 16), E4M3)
        _, v, vs = quantized(self, (1, 8, 4, 16), E4M3)
        kw = {"causal": True, "window_left": 2, "softcap": 3.0, "alibi_slopes": slopes}
        got = fa.attention(q, k, v, q_descale=qs, k_descale=ks, v_descale=vs, descale_rows_q=3,
                           **kw)
        f32 = fa.attention(dequantize(q, qs, 3).float(), dequantize(k, ks, 0).float(),
                           dequantize(v, vs, 0).float(), **kw)
        self.assertTrue(torch.equal(got, f32.to(torch.bfloat16)))

    def test_seqused_k(self):
        """Dense FP8 keys with seqused_k: sequence b sees its first seqused_k[b] keys, eager and
        traced alike."""
        _, q, qs = quantized(self, (2, 5, 2, 16), E4M3, 2)
        _, k, ks = quantized(self, (2, 9, 2, 16), E4M3, 4)
        _, v, vs = quantized(self, (2, 9, 2, 16), E4M3, 4)
        used = torch.tensor([4, 9], dtype=torch.int32)
        kw = {"descale_rows_q": 2, "descale_rows_k": 4, "causal": True}

        def run(q_, k_, v_, qs_, ks_, vs_, **extra):
            return fa.attention(q_, k_, v_, q_descale=qs_, k_descale=ks_, v_descale=vs_, **kw,
                                **extra)

        got = run(q, k, v, qs, ks, vs, seqused_k=used)
        for b in range(2):
            n = int(used[b])
            nblk = -(-n // 4)
            one = slice(b, b + 1)
            want = run(q[one], k[one, :n], v[one, :n], qs[one], ks[one, :, :nblk],
                       vs[one, :, :nblk])
            self.assertTrue(torch.equal(got[one], want), f"sequence {b}")
        torch._dynamo.reset()
        compiled = torch.compile(lambda *t: run(*t, seqused_k=used), fullgraph=True,
                                 backend="aot_eager")(q, k, v, qs, ks, vs)
        self.assertTrue(torch.equal(compiled, got))

    def test_descales_rebound_per_call(self):
        """The structs cached for a signature take each call's descale arrays: doubling v's
        descales doubles out exactly; doubling k's changes it."""
        _, q, qs = quantized(self, (1, 6, 2, 16), E4M3, 3)
        _, k, ks = quantized(self, (1, 6, 2, 16), E4M3)
        _, v, vs = quantized(self, (1, 6, 2, 16), E4M3)
        kw = {"descale_rows_q": 3}
        base = fa.attention(q, k, v, q_descale=qs, k_descale=ks, v_descale=vs, **kw)
        double_v = fa.attention(q, k, v, q_descale=qs, k_descale=ks, v_descale=vs * 2, **kw)
        self.assertTrue(torch.equal(double_v, base * 2))
        double_k = fa.attention(q, k, v, q_descale=qs, k_descale=ks * 2, v_descale=vs, **kw)
        self.assertFalse(torch.equal(double_k, base))
        self.assertTrue(torch.equal(fa.attention(q, k, v, q_descale=qs, k_descale=ks,
                                                 v_descale=vs, **kw), base))

    def test_strided_fp8_views(self):
        self.attention_case(view=lambda t: t[:, :, :, ::2], d=32, rows_q=4)

    def test_dlpack_path(self):
        """FP8 arrays read through DLPack (codes kDLFloat8_e4m3fn / kDLFloat8_e5m2)."""

        class Wrapped:
            def __init__(self, t):
                self.t = t

            def __dlpack__(self, stream=None):
                return self.t.__dlpack__()

            def __dlpack_device__(self):
                return self.t.__dlpack_device__()

        for dtype in (E4M3, E5M2):
            _, q, qs = quantized(self, (1, 6, 2, 8), dtype, 2)
            _, k, ks = quantized(self, (1, 6, 2, 8), dtype)
            out = nan_like((1, 6, 2, 8), torch.bfloat16)
            fa.attention(Wrapped(q), Wrapped(k), Wrapped(k), q_descale=Wrapped(qs), k_descale=ks,
                         v_descale=ks, descale_rows_q=2, out=out)
            want = fa.attention(q, k, k, q_descale=qs, k_descale=ks, v_descale=ks,
                                descale_rows_q=2)
            self.assertTrue(torch.equal(out, want))

    def test_flash_attn_func_fa3_descales(self):
        """FlashAttention 3's descales [batch, heads_kv]: query head h takes KV head h // g's."""
        b, hq, hk = 2, 6, 2
        q = self.randn(b, 5, hq, 16).to(E4M3)
        k = self.randn(b, 7, hk, 16).to(E4M3)
        v = self.randn(b, 7, hk, 16).to(E4M3)
        qs, ks, vs = (torch.rand(b, hk, generator=self.gen) + 0.5 for _ in range(3))
        got = fa.flash_attn_func(q, k, v, causal=True, q_descale=qs, k_descale=ks, v_descale=vs)
        self.assertEqual(got.dtype, torch.bfloat16)
        want = fa.attention(q, k, v, causal=True, q_descale=qs.repeat_interleave(3, 1)[..., None],
                            k_descale=ks[..., None], v_descale=vs[..., None])
        self.assertTrue(torch.equal(got, want))
        # the library's own 3-D form passes as it is
        got3 = fa.flash_attn_func(q, k, v, causal=True, q_descale=qs.repeat_interleave(3, 1)[
            ..., None], k_descale=ks[..., None], v_descale=vs[..., None])
        self.assertTrue(torch.equal(got3, want))

    def test_compiled(self):
        """torch.compile(fullgraph=True): quantize_fp8, hadamard_rotate and FP8 attention
        through their operators give the eager results."""
        x = [self.randn(2, 8, 2, 16) for _ in range(3)]
        s = self.seed64()

        def step(q, k, v):
            qf, qs = fa.quantize_fp8(q, block_rows=4, rotate=True, seed=s)
            kf, ks = fa.quantize_fp8(k, rotate=True, seed=s)
            vf, vs = fa.quantize_fp8(v, dtype=E5M2, per_tensor=True)
            out = fa.attention(qf.to(E5M2), kf.to(E5M2), vf, q_descale=qs, k_descale=ks,
                               v_descale=vs, descale_rows_q=4, causal=True)
            return out, fa.hadamard_rotate(q, s)

        torch._dynamo.reset()
        eager = step(*x)
        compiled = torch.compile(step, fullgraph=True, backend="aot_eager")(*x)
        for name, a, c in zip(("out", "rotated"), eager, compiled):
            self.assertEqual(a.dtype, c.dtype, name)
            self.assertTrue(torch.equal(a, c), name)


class TestErrors(Seeded):
    def fp8(self, *shape, dtype=E4M3):
        return self.randn(*shape).to(dtype)

    def test_backward_refused(self):
        q = self.fp8(1, 4, 2, 8)
        out, lse = fa.attention(q, q, q, return_lse=True)
        with self.assertRaises(fa.FlashAttnError) as cm:
            fa.attention_backward(out, q, q, q, out, lse)
        self.assertIn("FP8", cm.exception.message)
        self.assertEqual(cm.exception.status_name, "FA_ERR_UNSUPPORTED")
        # autograd: FP8 leaves that require grad are refused, never detached
        for fn in (lambda t: fa.attention(t, t, t), lambda t: fa.flash_attn_func(t, t, t)):
            with self.assertRaises(fa.FlashAttnError) as cm:
                fn(q.detach().requires_grad_())
            self.assertIn("FP8", cm.exception.message)
            self.assertIn("backward", cm.exception.message)
        with torch.no_grad():
            fa.attention(q.detach().requires_grad_(), q, q)
        # descales that require grad: no gradient would reach them
        d = torch.ones(1, 1, 1, requires_grad=True)
        for fn in (lambda: fa.attention(q, q, q, k_descale=d),
                   lambda: fa.flash_attn_func(q, q, q, v_descale=d)):
            with self.assertRaises(fa.FlashAttnError) as cm:
                fn()
            self.assertIn("descale", cm.exception.message)
            self.assertIn("requires grad", cm.exception.message)

    def test_out_dtype(self):
        q = self.fp8(1, 4, 2, 8)
        for dt in (torch.float32, E4M3):
            with self.assertRaises(fa.FlashAttnError) as cm:
                fa.attention(q, q, q, out=torch.empty(1, 4, 2, 8, dtype=dt))
            self.assertIn("out.dtype", cm.exception.message)

    def test_descale_shapes(self):
        q, k = self.fp8(2, 6, 4, 8), self.fp8(2, 6, 2, 8)
        cases = (
            ("q_descale", torch.ones(2, 3, 1), {}),  # heads neither 1 nor heads_q
            ("q_descale", torch.ones(2, 4, 2), {"descale_rows_q": 4}),  # 2 blocks: ceil(6/4) ok
            ("q_descale", torch.ones(2, 4, 1), {"descale_rows_q": 4}),  # 1 block, 2 needed
            ("k_descale", torch.ones(2, 4, 1), {}),  # heads_q where heads_kv is asked
            ("v_descale", torch.ones(3, 2, 1), {}),
            ("q_descale", torch.ones(2, 4), {}),
            ("q_descale", torch.ones(2, 4, 1, dtype=torch.float16), {}),
        )
        for name, d, kw in cases:
            with self.subTest(name=name, shape=tuple(d.shape), **kw):
                if name == "q_descale" and kw and d.shape[2] == 2:
                    fa.attention(q, k, k, q_descale=d, **kw)  # the valid one
                    continue
                with self.assertRaises(fa.FlashAttnError) as cm:
                    fa.attention(q, k, k, **{name: d}, **kw)
                self.assertIn("params." + name, cm.exception.message)

    def test_varlen_and_kvcache_refused(self):
        q = self.fp8(9, 2, 8)
        cu = torch.tensor([0, 4, 9], dtype=torch.int32)
        with self.assertRaises(fa.FlashAttnError) as cm:
            fa.attention_varlen(q, q, q, cu, cu, 5, 5)
        self.assertIn("cu_seqlens_q", cm.exception.message)
        self.assertIn("FP8", cm.exception.message)
        qd = self.fp8(2, 1, 2, 8)
        cache = self.fp8(2, 6, 2, 8)
        with self.assertRaises(fa.FlashAttnError) as cm:
            fa.attention_kvcache(qd, cache, cache, torch.tensor([3, 6], dtype=torch.int32))
        self.assertIn("FP8", cm.exception.message)

    def test_mixed_dtypes_and_descales_without_fp8(self):
        q = self.fp8(1, 4, 2, 8)
        with self.assertRaises(fa.FlashAttnError) as cm:
            fa.attention(q, q.float().to(E5M2), q)
        self.assertIn("k.dtype", cm.exception.message)
        x = self.randn(1, 4, 2, 8)
        for fn in (lambda: fa.attention(x, x, x, q_descale=torch.ones(1, 1, 1)),
                   lambda: fa.attention(x.requires_grad_(), x, x,
                                        k_descale=torch.ones(1, 1, 1))):
            with self.assertRaises(fa.FlashAttnError) as cm:
                fn()
            self.assertIn("descale", cm.exception.message)


class TestNumPy(Seeded):
    """NumPy arrays of ml_dtypes' FP8 types (skipped without ml_dtypes): the same bits as the
    torch tensors of the same values."""

    def setUp(self):
        super().setUp()
        if importlib.util.find_spec("ml_dtypes") is None:
            self.skipTest(f"ml_dtypes is not installed for {sys.executable}")

    def test_quantize_and_attention(self):
        import ml_dtypes
        import numpy as np

        x = [self.randn(2, 7, 2, 16) for _ in range(3)]
        s = self.seed64()
        for dtype, np_dtype in ((E4M3, ml_dtypes.float8_e4m3fn), (E5M2, ml_dtypes.float8_e5m2)):
            with self.subTest(dtype=dtype):
                ty = [fa.quantize_fp8(t, dtype=dtype, block_rows=3, rotate=True, seed=s)
                      for t in x]
                ny = [fa.quantize_fp8(t.numpy(), dtype=np_dtype, block_rows=3, rotate=True,
                                      seed=s) for t in x]
                for (a, ad), (b, bd) in zip(ty, ny):
                    self.assertEqual(b.dtype, np.dtype(np_dtype))
                    self.assertTrue(np.array_equal(a.view(torch.uint8).numpy(), b.view(np.uint8)))
                    self.assertTrue(np.array_equal(ad.numpy(), bd))
                kw = {"descale_rows_q": 3, "descale_rows_k": 3, "causal": True}
                t_out = fa.attention(ty[0][0], ty[1][0], ty[2][0], q_descale=ty[0][1],
                                     k_descale=ty[1][1], v_descale=ty[2][1], **kw)
                n_out = fa.attention(ny[0][0], ny[1][0], ny[2][0], q_descale=ny[0][1],
                                     k_descale=ny[1][1], v_descale=ny[2][1], **kw)
                self.assertEqual(n_out.dtype, np.dtype(ml_dtypes.bfloat16))
                self.assertTrue(np.array_equal(t_out.view(torch.int16).numpy(),
                                               n_out.view(np.int16)))


if __name__ == "__main__":
    unittest.main()
