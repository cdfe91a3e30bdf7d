"""One training step through flashattn.flash_attn_func under torch.compile, its gradients held to
SDPA's: error against a float64 reference at most 2x that of SDPA in the same dtype (float32 on
the CPU, bf16 on CUDA), plus 1e-6.
On CUDA tensors when a GPU is there (argument cpu or cuda to choose). Exit 0 when it holds."""
import sys

try:
    import torch
except ImportError:
    print("needs PyTorch")
    sys.exit(77)  # CTest's skip

import flashattn

dev = sys.argv[1] if len(sys.argv) > 1 else ("cuda" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)
x = torch.randn(2, 256, 8, 64, dtype=torch.float64, device=dev)  # [batch, seqlen, heads, dim]
w = torch.randn(64, 64, dtype=torch.float64, device=dev)


def step(attend, dtype):
    xi, wi = (t.detach().to(dtype).requires_grad_() for t in (x, w))
    q = xi @ wi
    loss = (attend(q, xi, xi) ** 2).sum()
    loss.backward()
    return xi.grad.double(), wi.grad.double()


def sdpa(q, k, v):
    t = [a.transpose(1, 2) for a in (q, k, v)]
    return torch.nn.functional.scaled_dot_product_attention(*t, is_causal=True).transpose(1, 2)


# The input dtype: float32 on the CPU; the GPU kernels take bf16 (and f16).
dtype = torch.float32 if dev == "cpu" else torch.bfloat16
ours = step(torch.compile(lambda q, k, v: flashattn.flash_attn_func(q, k, v, causal=True),
                          fullgraph=True), dtype)
ref, naive = step(sdpa, torch.float64), step(sdpa, dtype)
ok = True
for name, o, r, n in zip(("dx", "dW"), ours, ref, naive):
    err, bound = (o - r).abs().max().item(), 2 * (n - r).abs().max().item() + 1e-6
    ok &= err <= bound
    print(f"{name}: max error {err:.3g}, bound {bound:.3g} ({'ok' if err <= bound else 'FAIL'})")
print(f"{dev}: {'gradients match SDPA' if ok else 'gradients DIFFER from SDPA'}")
sys.exit(0 if ok else 1)
