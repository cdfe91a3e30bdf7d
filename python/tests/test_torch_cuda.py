"""The PyTorch integration on CUDA tensors (run where PyTorch sees a GPU and the library's cuda
backend is available; skipped otherwise): autograd and torch.compile through the cuda backend, a
broadcast incoming gradient, PyTorch's current stream, the KV-cache call, the ring over NCCL
process groups (one rank; two ranks on a machine with two GPUs), against PyTorch's SDPA in float32
(relative L2 error of bf16 results)."""

from __future__ import annotations

import os
import tempfile
import unittest

import torch_reference as R

R.require_torch()

import torch  # noqa: E402

import flashattn as fa  # noqa: E402


def setUpModule():
    R.require_cuda(fa)


def sdpa_bshd(q, k, v, causal):
    """SDPA in float32 on [batch, seqlen, heads, dim] tensors (bottom-right causal: L == S)."""
    out = torch.nn.functional.scaled_dot_product_attention(
        q.float().transpose(1, 2), k.float().transpose(1, 2), v.float().transpose(1, 2),
        is_causal=causal, enable_gqa=True)
    return out.transpose(1, 2)


def rel(got, want) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm()).item()


class TestCuda(unittest.TestCase):
    def tensors(self, seed=0, shape_q=(2, 256, 8, 128), shape_kv=(2, 256, 2, 128)):
        g = torch.Generator(device="cuda").manual_seed(seed)
        q = torch.randn(*shape_q, device="cuda", dtype=torch.bfloat16, generator=g)
        k = torch.randn(*shape_kv, device="cuda", dtype=torch.bfloat16, generator=g)
        v = torch.randn(*shape_kv, device="cuda", dtype=torch.bfloat16, generator=g)
        return [t.requires_grad_() for t in (q, k, v)]

    def check_grads(self, fn):
        q, k, v = self.tensors()
        out = fn(q, k, v)
        dout = torch.randn_like(out)
        out.backward(dout)
        qf, kf, vf = (t.detach().float().requires_grad_() for t in (q, k, v))
        ref = sdpa_bshd(qf, kf, vf, True)
        ref.backward(dout.float())
        for name, got, want in (("out", out, ref), ("dq", q.grad, qf.grad),
                                ("dk", k.grad, kf.grad), ("dv", v.grad, vf.grad)):
            self.assertLess(rel(got, want), 2e-2, name)

    def test_autograd(self):
        self.check_grads(lambda q, k, v: fa.flash_attn_func(q, k, v, causal=True))

    def test_compiled(self):
        compiled = torch.compile(lambda q, k, v: fa.flash_attn_func(q, k, v, causal=True),
                                 fullgraph=True)
        self.check_grads(compiled)

    def test_broadcast_incoming_gradient(self):
        """out.sum().backward(): autograd hands a stride-0 gradient, copied for the kernels."""
        q, k, v = self.tensors(1)
        fa.flash_attn_func(q, k, v, causal=True).float().sum().backward()
        qf, kf, vf = (t.detach().float().requires_grad_() for t in (q, k, v))
        sdpa_bshd(qf, kf, vf, True).sum().backward()
        self.assertLess(rel(q.grad, qf.grad), 2e-2)

    def test_current_stream(self):
        q, k, v = (t.detach() for t in self.tensors(2))
        want = fa.flash_attn_func(q, k, v, causal=True)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            got = fa.flash_attn_func(q, k, v, causal=True)
        torch.cuda.current_stream().wait_stream(stream)
        self.assertTrue(torch.equal(got, want))

    def test_kvcache_decode(self):
        with torch.no_grad():
            q, k, v = (t.detach() for t in self.tensors(3, (2, 1, 8, 128), (2, 1, 2, 128)))
            k_cache = torch.randn(2, 512, 2, 128, device="cuda", dtype=torch.bfloat16)
            v_cache = torch.randn_like(k_cache)
            out = fa.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=100,
                                             causal=True)
            self.assertTrue(torch.equal(k_cache[:, 100], k[:, 0]))
            want = sdpa_bshd(q, k_cache[:, :101], v_cache[:, :101], False)
            self.assertLess(rel(out, want), 2e-2)


class TestRingNccl(unittest.TestCase):
    """ring_attention on CUDA tensors over an NCCL process group of one rank (torch.distributed,
    a FileStore): the same results as attention() on the same GPU, the communicator passed as
    the group, as its ProcessGroupNCCL and as an NcclComm."""

    def setUp(self):
        import torch.distributed as dist

        nccl = next(t for t in fa.transport_info() if t.name == "nccl")
        if not nccl.available:
            self.skipTest(f"the NCCL transport: {nccl.reason}")
        if not dist.is_available() or not dist.is_nccl_available():
            self.skipTest("this PyTorch has no NCCL process groups")
        if dist.is_initialized():
            self.skipTest("a default process group exists already")
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        dist.init_process_group("nccl", store=dist.FileStore(os.path.join(self.tmp.name, "s"), 1),
                                rank=0, world_size=1, device_id=torch.device("cuda", 0))
        self.addCleanup(dist.destroy_process_group)

    def test_forward_and_backward(self):
        import torch.distributed as dist

        group = dist.group.WORLD
        backend = group._get_backend(torch.device("cuda"))
        if not hasattr(backend, "_comm_ptr"):
            self.skipTest("this PyTorch's ProcessGroupNCCL does not give out its communicator")
        g = torch.Generator(device="cuda").manual_seed(7)
        q, k, v, dout = (torch.randn(2, 256, h, 128, device="cuda", dtype=torch.bfloat16,
                                     generator=g) for h in (8, 2, 2, 8))
        with torch.no_grad():
            want, want_lse = fa.attention(q, k, v, causal=True, return_lse=True)
            grads = fa.attention_backward(dout, q, k, v, want, want_lse, causal=True)
            ref = sdpa_bshd(q, k, v, True)
            for comm in (group, backend, fa.NcclComm(backend._comm_ptr())):
                out, lse = fa.ring_attention(q, k, v, comm=comm, causal=True, return_lse=True)
                got = fa.ring_attention_backward(dout, q, k, v, out, lse, comm=comm, causal=True)
                torch.cuda.synchronize()
                what = type(comm).__name__
                self.assertLess(rel(out, want), 1e-3, what)
                self.assertLess(rel(out, ref), 2e-2, what)
                self.assertLess((lse - want_lse).abs().max().item(), 1e-3, what)
                for name, a, b in zip(("dq", "dk", "dv"), got, grads):
                    self.assertLess(rel(a, b), 1e-2, f"{name} {what}")


class TestRingNcclRanks(unittest.TestCase):
    """ring_attention over an NCCL process group of two processes, one GPU each
    (ring_nccl_check.py per rank): each rank's rows against attention() on the whole sequence.
    Skipped on a machine with one GPU."""

    def test_two_ranks(self):
        import subprocess
        import sys

        if torch.cuda.device_count() < 2:
            self.skipTest(f"this machine has {torch.cuda.device_count()} GPU")
        nccl = next(t for t in fa.transport_info() if t.name == "nccl")
        if not nccl.available:
            self.skipTest(f"the NCCL transport: {nccl.reason}")
        here = os.path.dirname(os.path.abspath(__file__))
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(os.environ, FLASHATTN_LIBRARY=fa.library().path,
                       PYTHONPATH=os.pathsep.join([os.path.dirname(here)] + sys.path))
            procs = [subprocess.Popen([sys.executable, os.path.join(here, "ring_nccl_check.py"),
                                       str(r), "2", os.path.join(tmp, "store")], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                     for r in range(2)]
            outs = []
            for p in procs:
                try:
                    outs.append(p.communicate(timeout=300)[0])
                except subprocess.TimeoutExpired:
                    for q in procs:
                        q.kill()
                    outs.append(p.communicate()[0] + "\n(killed after 300 s)")
            for r, (p, out) in enumerate(zip(procs, outs)):
                self.assertEqual(p.returncode, 0, f"rank {r}:\n{out[-3000:]}")
                self.assertIn(f"rank {r}/2: all passed", out)


if __name__ == "__main__":
    unittest.main()
