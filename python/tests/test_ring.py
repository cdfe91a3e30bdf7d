"""The ring calls (ring_attention, ring_attention_backward, transport_info): a ring of this
process alone (comm None) against the float64 reference in both layouts, what is refused, and the
same calls over MPI with 2 and 4 processes (ring_mpi_check.py under mpiexec) where mpi4py, mpiexec
and the library's MPI transport are here (skipped with the reason otherwise)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import unittest

import numpy as np

import flashattn as fa
from test_flashattn import assert_close, rand, reference

HERE = os.path.dirname(os.path.abspath(__file__))


class TestRingSelf(unittest.TestCase):
    def test_forward_and_backward_match_the_reference(self):
        for layout in ("contiguous", "zigzag"):
            for causal in (False, True):
                q, k, v, dout = rand(2, 10, 4, 16), rand(2, 10, 2, 16), rand(2, 10, 2, 16), \
                    rand(2, 10, 4, 16)
                out, lse, info = fa.ring_attention(q, k, v, layout=layout, causal=causal,
                                                   return_lse=True, return_info=True)
                ref_out, ref_lse, (dq_r, dk_r, dv_r) = reference(q, k, v, causal=causal,
                                                                 dout=dout)
                what = f"{layout} causal={causal}"
                assert_close(self, out, ref_out, 2e-5, "out " + what)
                assert_close(self, lse, ref_lse, 2e-5, "lse " + what)
                self.assertEqual(info.backend, "cpu", what)
                dq, dk, dv = fa.ring_attention_backward(dout, q, k, v, out, lse, layout=layout,
                                                        causal=causal)
                assert_close(self, dq, dq_r, 2e-5, "dq " + what)
                assert_close(self, dk, dk_r, 2e-5, "dk " + what)
                assert_close(self, dv, dv_r, 2e-5, "dv " + what)

    def test_window(self):
        q, dout = rand(1, 12, 2, 8), rand(1, 12, 2, 8)
        for layout in ("contiguous", "zigzag"):
            out, lse = fa.ring_attention(q, q, q, layout=layout, causal=True, window_left=3,
                                         return_lse=True)
            ref_out, ref_lse, grads = reference(q, q, q, causal=True, window=(3, 0), dout=dout)
            assert_close(self, out, ref_out, 2e-5, "out " + layout)
            assert_close(self, lse, ref_lse, 2e-5, "lse " + layout)
            got = fa.ring_attention_backward(dout, q, q, q, out, lse, layout=layout, causal=True,
                                             window_left=3)
            for name, g, w in zip(("dq", "dk", "dv"), got, grads):
                assert_close(self, g, w, 2e-5, name + " " + layout)

    def test_alibi_and_dropout(self):
        """ALiBi against the reference; dropout (the same Philox mask at the tokens' global
        positions) against attention on the whole sequence in one call."""
        q, k, v, dout = rand(2, 12, 4, 16), rand(2, 12, 2, 16), rand(2, 12, 2, 16), \
            rand(2, 12, 4, 16)
        slopes = np.array([0.5, 0.25, 0.125, 0.0625], np.float32)
        for layout in ("contiguous", "zigzag"):
            for causal in (False, True):
                what = f"{layout} causal={causal}"
                out, lse = fa.ring_attention(q, k, v, layout=layout, causal=causal,
                                             alibi_slopes=slopes, return_lse=True)
                ref_out, ref_lse, grads = reference(q, k, v, causal=causal, alibi=slopes,
                                                    dout=dout)
                assert_close(self, out, ref_out, 2e-5, "alibi out " + what)
                assert_close(self, lse, ref_lse, 2e-5, "alibi lse " + what)
                got = fa.ring_attention_backward(dout, q, k, v, out, lse, layout=layout,
                                                 causal=causal, alibi_slopes=slopes)
                for name, g, w in zip(("dq", "dk", "dv"), got, grads):
                    assert_close(self, g, w, 2e-5, "alibi " + name + " " + what)
                kw = {"causal": causal, "dropout_p": 0.2, "dropout_seed": 11, "alibi_slopes": slopes}
                out, lse = fa.ring_attention(q, k, v, layout=layout, return_lse=True, **kw)
                one_out, one_lse = fa.attention(q, k, v, return_lse=True, **kw)
                assert_close(self, out, one_out, 2e-5, "dropout out " + what)
                assert_close(self, lse, one_lse, 2e-5, "dropout lse " + what)
                got = fa.ring_attention_backward(dout, q, k, v, out, lse, layout=layout, **kw)
                want = fa.attention_backward(dout, q, k, v, one_out, one_lse, **kw)
                for name, g, w in zip(("dq", "dk", "dv"), got, want):
                    assert_close(self, g, w, 2e-5, "dropout " + name + " " + what)

    def test_outputs_passed_in_are_written(self):
        q = rand(1, 8, 2, 8)
        out = np.full_like(q, np.nan)
        lse = np.full((1, 2, 8), np.nan, np.float32)
        got, got_lse = fa.ring_attention(q, q, q, out=out, lse=lse, return_lse=True)
        self.assertIs(got, out)
        self.assertIs(got_lse, lse)
        assert_close(self, out, reference(q, q, q)[0], 2e-5, "out=")

    def test_refusals(self):
        q = rand(1, 8, 2, 8)
        for kw, status, words in (
                ({"layout": "diagonal"}, "FA_ERR_INVALID_ARGUMENT", "layout"),
                ({"comm": "world"}, "FA_ERR_INVALID_ARGUMENT", "comm"),
                ({"comm": 0}, "FA_ERR_INVALID_ARGUMENT", "NULL"),
                ({"seqused_k": np.full(1, 8, np.int32)}, "FA_ERR_UNSUPPORTED", "seqused_k")):
            with self.assertRaises(fa.FlashAttnError, msg=str(kw)) as cm:
                fa.ring_attention(q, q, q, **kw)
            self.assertEqual(cm.exception.status_name, status, str(kw))
            self.assertIn(words, str(cm.exception), str(kw))

    def test_nccl_communicators(self):
        """NcclComm and process groups: what the binding refuses before the library, and the
        library's refusal of an NCCL ring where the transport is unavailable."""
        q = rand(1, 8, 2, 8)
        with self.assertRaises(TypeError):
            fa.NcclComm("world")
        with self.assertRaises(fa.FlashAttnError) as cm:
            fa.ring_attention(q, q, q, comm=fa.NcclComm(0))
        self.assertEqual(cm.exception.status_name, "FA_ERR_INVALID_ARGUMENT")
        self.assertIn("comm: the NCCL communicator is NULL", str(cm.exception))
        nccl = next(t for t in fa.transport_info() if t.name == "nccl")
        if not nccl.available:  # elsewhere the library would use the made-up handle
            out = np.full_like(q, np.nan)
            for call in (lambda c: fa.ring_attention(q, q, q, comm=c, out=out),
                         lambda c: fa.ring_attention_backward(q, q, q, q, q, q[:, 0, :, :1],
                                                              comm=c)):
                with self.assertRaises(fa.FlashAttnError) as cm:
                    call(fa.NcclComm(0x1000))
                self.assertEqual(cm.exception.status_name, "FA_ERR_UNSUPPORTED")
                self.assertIn("ring.transport = nccl is unavailable", str(cm.exception))
            self.assertTrue(np.isnan(out).all(), "out written by a refused call")

    def test_process_group_takes_cuda_tensors(self):
        try:
            import torch
            import torch.distributed as dist
        except ImportError:
            self.skipTest("PyTorch not installed")
        if not dist.is_available():
            self.skipTest("this PyTorch has no torch.distributed")
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            store = dist.FileStore(os.path.join(tmp, "store"), 1)
            q = torch.randn(1, 8, 2, 8)
            for group in (dist.ProcessGroupGloo(store, 0, 1),  # a backend
                          dist.ProcessGroup(store, 0, 1)):      # a group (no backend needed)
                with self.assertRaises(fa.FlashAttnError) as cm:
                    fa.ring_attention(q, q, q, comm=group)
                self.assertEqual(cm.exception.status_name, "FA_ERR_INVALID_ARGUMENT")
                self.assertIn("a process group is taken for CUDA tensors", str(cm.exception))

    def test_torch_imports_after_the_transports(self):
        """Listing the transports and running a ring leave no NCCL in a process without a CUDA
        device, so a PyTorch imported afterwards loads its own (a system libnccl loaded first
        would serve PyTorch's too, and fail it on any function it lacks)."""
        if importlib.util.find_spec("torch") is None:
            self.skipTest("PyTorch not installed")
        nccl = next(t for t in fa.transport_info() if t.name == "nccl")
        if nccl.available or not nccl.reason.startswith("no CUDA device"):
            self.skipTest(f"the NCCL transport: {nccl.reason or 'available'}")
        code = ("import numpy as np, flashattn as fa\n"
                "fa.transport_info()\n"
                "q = np.ones((1, 4, 1, 8), np.float32)\n"
                "fa.ring_attention(q, q, q)\n"
                "import torch\n"
                "print('torch', torch.__version__)\n")
        env = dict(os.environ, FLASHATTN_LIBRARY=fa.library().path,
                   PYTHONPATH=os.pathsep.join([os.path.dirname(HERE)] + sys.path))
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        self.assertIn("torch ", r.stdout)

    def test_torch_inputs_that_require_grad_are_refused(self):
        try:
            import torch
        except ImportError:
            self.skipTest("PyTorch not installed")
        q = torch.randn(1, 8, 2, 8, requires_grad=True)
        with self.assertRaises(fa.FlashAttnError) as cm:
            fa.ring_attention(q, q, q)
        self.assertEqual(cm.exception.status_name, "FA_ERR_UNSUPPORTED")
        with torch.no_grad():
            out = fa.ring_attention(q, q, q)
        assert_close(self, out.numpy(), reference(*(q.detach().numpy(),) * 3)[0], 2e-5, "torch")

    def test_transport_info(self):
        ts = {t.name: t for t in fa.transport_info()}
        self.assertTrue(ts["self"].available)
        self.assertEqual(ts["self"].memory, "cpu")
        for name in ("mpi", "nccl"):
            self.assertIn(name, ts)
            if not ts[name].available:
                self.assertTrue(ts[name].reason, name)


class TestRingMpi(unittest.TestCase):
    def missing(self, why: str) -> None:
        """Skips, saying why; fails instead where FLASHATTN_REQUIRE_RING_MPI is set (CI sets it
        once mpi4py is installed)."""
        if os.environ.get("FLASHATTN_REQUIRE_RING_MPI"):
            self.fail(f"ring over MPI required but not run: {why}")
        self.skipTest(why)

    def test_two_and_four_processes(self):
        if importlib.util.find_spec("mpi4py") is None:
            self.missing("mpi4py not installed")
        mpiexec = shutil.which("mpiexec")
        if not mpiexec:
            self.missing("mpiexec not found")
        mpi = next(t for t in fa.transport_info() if t.name == "mpi")
        if not mpi.available:
            self.missing(f"the MPI transport: {mpi.reason}")
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1",
                   FLASHATTN_LIBRARY=fa.library().path,
                   PYTHONPATH=os.pathsep.join([os.path.dirname(HERE)] + sys.path))
        for n in (2, 4):
            r = subprocess.run([mpiexec, "-n", str(n), sys.executable,
                                os.path.join(HERE, "ring_mpi_check.py")],
                               env=env, capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, f"{n} processes:\n{r.stdout[-3000:]}"
                                              f"\n{r.stderr[-3000:]}")
            self.assertIn(f"{n} ranks, all passed", r.stdout)


if __name__ == "__main__":
    unittest.main()
