"""The CUDA backend's forward over sequences against the CPU backend (the oracle for these calls):
varlen packing, seqused_k, paged K/V with shuffled and shared pages, split-KV (1..64 pieces and
the backend's own choice), and fa_forward_kvcache with appends that cross page boundaries and
rotary embedding (interleaved and not). Inputs bf16, drawn fresh; the caches after an append must
be bitwise equal on both backends (the same rounding rule); outputs and LSEs within bf16's
rounding of each other (relative L2 error) and every row's LSE within 1e-3, or 4e-3 where fa3
runs at head dim 64 (it sums the bf16-rounded P: up to 2^-8, bf16's unit roundoff, relative on a
row's sum). Each call must run
the CUDA kernel it names. Then out-of-range device tables (block table entries, decreasing
cu_seqlens, cache lengths past the cache): with check_indices the call is refused naming the bad
value and writes nothing; without it, the call returns and writes nothing outside its outputs and
caches. Skipped without a GPU for PyTorch or without the cuda backend."""

from __future__ import annotations

import unittest

import torch_reference as R

R.require_torch()

import torch  # noqa: E402

import flashattn as fa  # noqa: E402


def setUpModule():
    R.require_cuda(fa)


def packed(lens_q, lens_k, d):
    """cu_seqlens of both sides and random bf16 packed q (8 heads), k and v (2 heads)."""
    cq = torch.tensor([0] + list(torch.tensor(lens_q).cumsum(0)), dtype=torch.int32)
    ck = torch.tensor([0] + list(torch.tensor(lens_k).cumsum(0)), dtype=torch.int32)
    q = torch.randn(int(cq[-1]), 8, d, dtype=torch.bfloat16)
    k = torch.randn(int(ck[-1]), 2, d, dtype=torch.bfloat16)
    return cq, ck, q, k, torch.randn_like(k)


def fa3_here():
    """Whether the cuda backend runs its fa3 kernels here: built, an sm_90 device not run as
    sm_80 (docs/backends.md)."""
    cuda = next(b for b in fa.backend_info() if b.name == "cuda")
    return ("fa3" in cuda.kernel_families and "(sm_90" in cuda.devices
            and "run as sm_80" not in cuda.devices)


def fa3_runs_sequences(max_q):
    """Whether a forward over packed sequences of max_q rows at most runs fa3 (128 rows)."""
    return fa3_here() and max_q >= 128


def rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


class TestCudaSeqs(unittest.TestCase):
    TOL = 2e-2  # bf16: both backends round P and O once

    def both(self, call, *tensors, **kw):
        """call(*tensors, backend=..., **kw) on CUDA copies and on the CPU (tensor keywords moved
        too): (cuda results with the run info, cpu results, cuda tensors, cpu tensors); tensors
        are cloned so in-place caches start equal."""
        gpu = [t.cuda().clone() if torch.is_tensor(t) else t for t in tensors]
        cpu = [t.cpu().clone() if torch.is_tensor(t) else t for t in tensors]
        kg = {n: t.cuda() if torch.is_tensor(t) else t for n, t in kw.items()}
        kc = {n: t.cpu() if torch.is_tensor(t) else t for n, t in kw.items()}
        rg = call(*gpu, backend="cuda", strict=True, return_info=True, **kg)
        rc = call(*cpu, backend="cpu", strict=True, **kc)
        torch.cuda.synchronize()
        return rg, rc, gpu, cpu

    def check_out(self, rg, rc, what, family="cuda.fa2.sm80"):
        (og, lg, info), (oc, lc) = rg, rc
        self.assertLess(rel(og, oc), self.TOL, f"{what}: out")
        finite = torch.isfinite(lc)
        self.assertTrue(torch.equal(finite, torch.isfinite(lg.cpu())), f"{what}: lse -inf rows")
        lse_tol = 4e-3 if family == "cuda.fa3.sm90" else 1e-3  # the tests' fa3 calls: hd64
        self.assertLess((lg.cpu()[finite] - lc[finite]).abs().max().item(), lse_tol, f"{what}: lse")
        self.assertTrue(info.kernel.startswith(family + ".fwd.bf16"), info.kernel)
        return info

    def test_varlen(self):
        torch.manual_seed(1)
        lens_q, lens_k = [1, 100, 0, 333, 64], [7, 100, 5, 400, 1000]
        cq, ck, q, k, v = packed(lens_q, lens_k, 64)
        for causal in (False, True):
            for window in (None, (50, 0)):
                kw = dict(causal=causal, return_lse=True)
                if window:
                    kw.update(window_left=window[0], window_right=window[1])
                rg, rc, _, _ = self.both(lambda *a, **x: fa.attention_varlen(
                    *a, max(lens_q), max(lens_k), **x), q, k, v, cq, ck, **kw)
                family = "cuda.fa3.sm90" if fa3_runs_sequences(max(lens_q)) else "cuda.fa2.sm80"
                info = self.check_out(rg, rc, f"varlen causal={causal} window={window}", family)
                self.assertIn(".varlen", info.kernel)

    def test_varlen_backward(self):
        """Gradients of packed sequences (empty ones, sq > sk and sk > sq, used keys) on CUDA
        against the CPU backend, by fa_backward directly (its run info names the kernel over
        sequences) and through autograd."""
        torch.manual_seed(5)
        lens_q, lens_k = [1, 300, 0, 129, 64], [7, 260, 5, 400, 0]
        cq, ck, q, k, v = packed(lens_q, lens_k, 128)
        dout = torch.randn_like(q)
        used = torch.tensor([7, 200, 0, 400, 0], dtype=torch.int32)
        for causal, seqused in ((False, None), (True, None), (True, used)):
            what = f"varlen backward causal={causal} seqused={seqused is not None}"
            kw = dict(causal=causal, cu_seqlens_q=cq, cu_seqlens_k=ck, max_seqlen_q=max(lens_q),
                      max_seqlen_k=max(lens_k))
            if seqused is not None:
                kw["seqused_k"] = seqused
            grads = {}
            for dev in ("cuda", "cpu"):
                kd = {n: t.to(dev) if torch.is_tensor(t) else t for n, t in kw.items()}
                qd, kd_, vd, dd = (t.to(dev) for t in (q, k, v, dout))
                out, lse = fa.attention(qd, kd_, vd, return_lse=True, backend=dev, strict=True,
                                        **kd)
                res = fa.attention_backward(dd, qd, kd_, vd, out, lse, backend=dev, strict=True,
                                            return_info=True, **kd)
                grads[dev] = res[:3]
                if dev == "cuda":
                    kernel = res[3].kernel
                    family = "cuda.fa3.sm90" if fa3_here() else "cuda.fa2.sm80"
                    self.assertTrue(kernel.startswith(family + ".bwd.bf16.hd128"), kernel)
                    self.assertIn(".varlen", kernel)
            for name, g, c in zip(("dq", "dk", "dv"), grads["cuda"], grads["cpu"]):
                self.assertLess(rel(g, c), self.TOL, f"{what}: {name}")
            if seqused is not None:  # keys past the used ones: zero gradients
                dk = grads["cuda"][1].cpu()
                self.assertEqual(dk[int(ck[1]) + 200:int(ck[2])].abs().max().item(), 0.0)
        # autograd: the same gradients as fa_backward
        qg, kg, vg = (t.cuda().requires_grad_() for t in (q, k, v))
        out = fa.attention_varlen(qg, kg, vg, cq.cuda(), ck.cuda(), max(lens_q), max(lens_k),
                                  causal=True, backend="cuda", strict=True)
        out.backward(dout.cuda())
        qc, kc, vc = (t.clone().requires_grad_() for t in (q, k, v))
        ref = fa.attention_varlen(qc, kc, vc, cq, ck, max(lens_q), max(lens_k), causal=True,
                                  backend="cpu", strict=True)
        ref.backward(dout)
        for name, g, c in zip(("dq", "dk", "dv"), (qg, kg, vg), (qc, kc, vc)):
            self.assertLess(rel(g.grad, c.grad), self.TOL, f"autograd varlen: {name}")

    def test_paged_shuffled_shared(self):
        torch.manual_seed(2)
        batch, page, pages = 3, 16, 40
        kc = torch.randn(pages, page, 2, 128, dtype=torch.bfloat16)
        vc = torch.randn_like(kc)
        table = torch.randperm(pages)[:batch * 10].reshape(batch, 10).to(torch.int32)
        table[1, :4] = table[0, :4]  # a shared prefix
        used = torch.tensor([160, 70, 1], dtype=torch.int32)
        q = torch.randn(batch, 3, 8, 128, dtype=torch.bfloat16)
        for splits in (1, 3, 0):
            rg, rc, _, _ = self.both(lambda *a, **x: fa.attention(*a, **x), q, kc, vc,
                                     block_table=table, seqused_k=used, max_seqlen_k=160,
                                     page_size=page, causal=True, num_splits=splits,
                                     return_lse=True)
            info = self.check_out(rg, rc, f"paged splits={splits}")
            self.assertIn(".paged", info.kernel)

    def test_splits_equal_unsplit(self):
        torch.manual_seed(3)
        q = torch.randn(2, 1, 32, 128, dtype=torch.bfloat16).cuda()
        k = torch.randn(2, 3000, 8, 128, dtype=torch.bfloat16).cuda()
        v = torch.randn_like(k)
        one, l1 = fa.attention(q, k, v, num_splits=1, return_lse=True, backend="cuda", strict=True)
        for s in (2, 7, 16, 64, 0):
            o, l, info = fa.attention(q, k, v, num_splits=s, return_lse=True, backend="cuda",
                                      strict=True, return_info=True)
            self.assertLess(rel(o, one), self.TOL, f"splits {s}")
            self.assertLess((l - l1).abs().max().item(), 1e-4, f"splits {s}: lse")
            if s > 1:
                self.assertEqual(info.num_splits, s)

    def run_kvcache(self, paged, rotary, interleaved):
        torch.manual_seed(4 + 2 * paged + rotary)
        batch, heads, kvh, d, new = 3, 8, 2, 64, 5
        lens = torch.tensor([0, 13, 30], dtype=torch.int32)  # appends cross 16-key pages
        q = torch.randn(batch, new, heads, d, dtype=torch.bfloat16)
        kn = torch.randn(batch, new, kvh, d, dtype=torch.bfloat16)
        vn = torch.randn_like(kn)
        kw = dict(causal=True, return_lse=True)
        if paged:
            page = 16
            kc = torch.randn(12, page, kvh, d, dtype=torch.bfloat16)
            table = torch.randperm(12)[:batch * 3].reshape(batch, 3).to(torch.int32)
            kw.update(block_table=table, page_size=page)
        else:
            kc = torch.randn(batch, 48, kvh, d, dtype=torch.bfloat16)
        vc = torch.randn_like(kc)
        if rotary:
            pos = torch.arange(64, dtype=torch.float32)[:, None]
            freq = 1.0 / (10000 ** (torch.arange(0, 32, 2, dtype=torch.float32) / 32))
            kw.update(rotary_cos=torch.cos(pos * freq), rotary_sin=torch.sin(pos * freq),
                      rotary_interleaved=interleaved)
        rg, rc, g, c = self.both(lambda *a, **x: fa.attention_kvcache(*a, **x), q, kc, vc, lens,
                                 k_new=kn, v_new=vn, **kw)
        what = f"kvcache paged={paged} rotary={rotary} interleaved={interleaved}"
        info = self.check_out(rg, rc, what)
        self.assertIn(".kvcache", info.kernel)
        self.assertTrue(torch.equal(g[1].cpu(), c[1]), f"{what}: k_cache after the append")
        self.assertTrue(torch.equal(g[2].cpu(), c[2]), f"{what}: v_cache after the append")

    def test_kvcache_dense(self):
        self.run_kvcache(False, False, False)

    def test_kvcache_paged_rotary(self):
        self.run_kvcache(True, True, False)
        self.run_kvcache(True, True, True)

    def test_kvcache_dense_rotary_interleaved(self):
        self.run_kvcache(False, True, True)


if __name__ == "__main__":
    unittest.main()


class TestCudaBadTables(unittest.TestCase):
    """Out-of-range values in device-resident tables (which the library cannot read on the host)
    must not corrupt memory: the call returns, and nothing outside the outputs and caches changes
    (guard rows around them keep their pattern). Run under compute-sanitizer memcheck on a GPU
    machine this also shows no out-of-bounds access."""

    G = 4  # guard rows on each side

    def guarded(self, shape, fill=None):
        """A tensor of shape inside a buffer with G guard rows of a pattern on each side of dim
        0: (tensor, check) where check() says whether the guards kept their pattern."""
        g = self.G
        base = torch.full((shape[0] + 2 * g,) + tuple(shape[1:]), 7.0, dtype=torch.bfloat16,
                          device="cuda")
        t = base[g:g + shape[0]]
        if fill is not None:
            t.copy_(fill)

        def check():
            torch.cuda.synchronize()
            return bool((base[:g] == 7.0).all() and (base[g + shape[0]:] == 7.0).all())
        return t, check

    def refused(self, call, expect, *outputs):
        """call(check_indices=True) raises FA_ERR_INVALID_ARGUMENT naming expect and leaves the
        outputs (tensors, with their guards' checks) bitwise as they were."""
        before = [t.clone() for t in outputs]
        with self.assertRaises(fa.FlashAttnError) as cm:
            call(check_indices=True)
        self.assertEqual(cm.exception.status_name, "FA_ERR_INVALID_ARGUMENT")
        self.assertIn(expect, str(cm.exception))
        torch.cuda.synchronize()
        for t, b in zip(outputs, before):
            self.assertTrue(torch.equal(t, b), f"check mode changed an output ({expect})")

    def test_block_table_out_of_range(self):
        torch.manual_seed(5)
        kc, kgood = self.guarded((6, 16, 2, 64), torch.randn(6, 16, 2, 64))
        vc, vgood = self.guarded((6, 16, 2, 64), torch.randn(6, 16, 2, 64))
        table = torch.tensor([[0, -5, 1], [6, 2, 1 << 30]], dtype=torch.int32, device="cuda")
        q = torch.randn(2, 1, 4, 64, dtype=torch.bfloat16, device="cuda")
        kn = torch.randn(2, 20, 2, 64, dtype=torch.bfloat16, device="cuda")
        lens = torch.tensor([10, 20], dtype=torch.int32, device="cuda")
        out, check_out = self.guarded((2, 1, 4, 64))

        def append(**kw):
            fa.attention_kvcache(q, kc, vc, lens, k_new=kn, v_new=kn.clone(), block_table=table,
                                 page_size=16, causal=True, out=out, backend="cuda", strict=True,
                                 **kw)
        self.refused(append, "params.block_table[0][1] = -5", kc, vc, out)
        append()
        self.assertTrue(kgood() and vgood() and check_out(), "a write outside the caches or out")
        out2, check2 = self.guarded((2, 1, 4, 64))

        def paged(**kw):
            fa.attention(q, kc, vc, block_table=table, page_size=16, max_seqlen_k=48,
                         seqused_k=torch.tensor([48, 40], dtype=torch.int32, device="cuda"),
                         out=out2, backend="cuda", strict=True, **kw)
        self.refused(paged, "params.block_table[0][1] = -5", out2)
        paged()
        self.assertTrue(check2() and kgood() and vgood())

    def test_cu_seqlens_decreasing(self):
        torch.manual_seed(6)
        q = torch.randn(80, 4, 64, dtype=torch.bfloat16, device="cuda")
        k = torch.randn(90, 2, 64, dtype=torch.bfloat16, device="cuda")
        cq = torch.tensor([0, 50, 20, 80], dtype=torch.int32, device="cuda")
        ck = torch.tensor([0, 90, -7, 1 << 30], dtype=torch.int32, device="cuda")
        out, check = self.guarded((80, 4, 64))
        for splits in (1, 3):
            def varlen(**kw):
                fa.attention_varlen(q, k, k.clone(), cq, ck, 60, 90, out=out, num_splits=splits,
                                    backend="cuda", strict=True, **kw)
            self.refused(varlen, "params.cu_seqlens_q[2] = 20 is less than", out)
            varlen()
            self.assertTrue(check(), f"splits {splits}: a write outside out")

    def test_cache_lengths_past_the_cache(self):
        torch.manual_seed(7)
        kc, kgood = self.guarded((2, 32, 2, 64), torch.randn(2, 32, 2, 64))
        vc, vgood = self.guarded((2, 32, 2, 64), torch.randn(2, 32, 2, 64))
        q = torch.randn(2, 3, 4, 64, dtype=torch.bfloat16, device="cuda")
        kn = torch.randn(2, 3, 2, 64, dtype=torch.bfloat16, device="cuda")
        lens = torch.tensor([31, -100], dtype=torch.int32, device="cuda")
        def append(**kw):
            fa.attention_kvcache(q, kc, vc, lens, k_new=kn, v_new=kn.clone(), causal=True,
                                 backend="cuda", strict=True, **kw)
        self.refused(append, "kv.cache_seqlens[0] = 31", kc, vc)
        append()
        self.assertTrue(kgood() and vgood(), "an append wrote outside the caches")
