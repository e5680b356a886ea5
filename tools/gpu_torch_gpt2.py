"""gpu_torch_gpt2.py B T STEPS — the reference tools/gpu_check.sh measures
trellis against on the same GPU in the same run: GPT-2 124M (12 layers, 12
heads, 768 channels, vocabulary 50257 padded to 50304, as trellis pads it),
trained with PyTorch's best ordinary recipe — bf16 autocast,
scaled_dot_product_attention (causal), torch.compile, fused AdamW — on
random tokens. Prints one line: tokens/s and MFU against 989 TFLOP/s dense
bf16, FLOPs counted as trellis counts the model's (6 N + 12 L T C per
token, N without the position embedding), over STEPS steps after 3 of
warm-up (compilation)."""
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

B, T, STEPS = (int(a) for a in sys.argv[1:4])
L, H, C, V = 12, 12, 768, 50304
PEAK = 989e12


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.lnf = nn.LayerNorm(C)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = F.linear(self.lnf(x), self.wte.weight)  # tied, as GPT-2
        return F.cross_entropy(logits.float().view(-1, V), targets.view(-1))


def main():
    torch.manual_seed(0)
    dev = "cuda"
    model = GPT().to(dev)
    n_params = sum(p.numel() for p in model.parameters()) - model.wpe.weight.numel()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    step = torch.compile(model)
    idx = torch.randint(0, 50257, (B, T), device=dev)
    tgt = torch.randint(0, 50257, (B, T), device=dev)

    def one():
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = step(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(3):
        one()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(STEPS):
        loss = one()
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / STEPS
    tok = B * T / dt
    flops_per_token = 6 * n_params + 12 * L * T * C
    print(
        f"pytorch: B={B} T={T}: {dt * 1e3:.1f} ms a step, {tok:.0f} tokens/s, "
        f"MFU {100 * tok * flops_per_token / PEAK:.1f}% (loss {loss.item():.3f}, "
        f"{torch.cuda.max_memory_allocated() / 2**30:.1f} GiB)"
    )
    assert math.isfinite(loss.item())


if __name__ == "__main__":
    main()
