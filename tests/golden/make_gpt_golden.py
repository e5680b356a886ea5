#!/usr/bin/env python3
"""Golden values for trellis's GPT from an independent implementation.

Writes, next to this script:
  tiny_gpt.bin          a tiny GPT-2 in llm.c's model-file format (fp32)
  tiny_gpt_golden.json  tokens, targets, the mean loss and the L2 norm of the
                        gradient of every parameter tensor, computed by
                        PyTorch's autograd in float64

The model is GPT-2 as llm.c's train_gpt2.c computes it: token + position
embedding; per block LayerNorm (eps 1e-5) -> causal self-attention (scale
1/sqrt(head size)) -> projection -> residual, LayerNorm -> 4x MLP with tanh
GELU -> projection -> residual; final LayerNorm; logits = x @ wte^T over the
padded vocabulary; loss = mean cross-entropy over the real vocabulary.

    pip install torch && python3 tests/golden/make_gpt_golden.py
"""
import json
import os
import struct

import torch

L, NH, C, V, VP, MAXT = 2, 2, 16, 37, 64, 8
B, T = 2, 8
HERE = os.path.dirname(os.path.abspath(__file__))


def make_weights(gen):
    """The 16 tensors in llm.c's order, with magnitudes that give gradients of order one."""
    def normal(*shape, std=0.3):
        return torch.randn(*shape, generator=gen, dtype=torch.float64) * std

    wte = normal(VP, C)
    wte[V:] = 0.0  # padded rows are zero in llm.c's files
    return {
        "wte": wte, "wpe": normal(MAXT, C),
        "ln1w": 1.0 + normal(L, C, std=0.1), "ln1b": normal(L, C, std=0.1),
        "qkvw": normal(L, 3 * C, C), "qkvb": normal(L, 3 * C, std=0.1),
        "attprojw": normal(L, C, C), "attprojb": normal(L, C, std=0.1),
        "ln2w": 1.0 + normal(L, C, std=0.1), "ln2b": normal(L, C, std=0.1),
        "fcw": normal(L, 4 * C, C), "fcb": normal(L, 4 * C, std=0.1),
        "fcprojw": normal(L, C, 4 * C, std=0.15), "fcprojb": normal(L, C, std=0.1),
        "lnfw": 1.0 + normal(C, std=0.1), "lnfb": normal(C, std=0.1),
    }


ORDER = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b",
         "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]


def layernorm(x, w, b):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + 1e-5) * w + b


def gelu(x):
    return 0.5 * x * (1.0 + torch.tanh((2.0 / torch.pi) ** 0.5 * (x + 0.044715 * x ** 3)))


def forward(p, tokens, targets):
    x = p["wte"][tokens] + p["wpe"][:T]  # (B, T, C)
    hs = C // NH
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        h = layernorm(x, p["ln1w"][l], p["ln1b"][l])
        qkv = h @ p["qkvw"][l].T + p["qkvb"][l]  # (B, T, 3C): [Q | K | V]
        q, k, v = qkv.split(C, dim=-1)
        q = q.view(B, T, NH, hs).transpose(1, 2)
        k = k.view(B, T, NH, hs).transpose(1, 2)
        v = v.view(B, T, NH, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / hs ** 0.5
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p["attprojw"][l].T + p["attprojb"][l]
        h = layernorm(x, p["ln2w"][l], p["ln2b"][l])
        h = gelu(h @ p["fcw"][l].T + p["fcb"][l])
        x = x + h @ p["fcprojw"][l].T + p["fcprojb"][l]
    x = layernorm(x, p["lnfw"], p["lnfb"])
    logits = x @ p["wte"].T  # (B, T, VP)
    return torch.nn.functional.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))


def main():
    gen = torch.Generator().manual_seed(20261129)
    params = make_weights(gen)
    tokens = torch.randint(0, V, (B, T), generator=gen)
    targets = torch.randint(0, V, (B, T), generator=gen)
    # the file holds float32: compute the golden values from exactly those weights
    params = {k: v.float().double().requires_grad_(True) for k, v in params.items()}
    loss = forward(params, tokens, targets)
    loss.backward()
    header = [20240326, 3, MAXT, V, L, NH, C, VP] + [0] * 248
    with open(os.path.join(HERE, "tiny_gpt.bin"), "wb") as f:
        f.write(struct.pack("<256i", *header))
        for name in ORDER:
            values = params[name].detach().float().flatten().tolist()
            f.write(struct.pack("<%df" % len(values), *values))
    golden = {
        "config": {"n_layers": L, "n_heads": NH, "n_embd": C, "vocab_size": V,
                   "padded_vocab_size": VP, "max_seq_len": MAXT, "batch": B, "seq_len": T},
        "tokens": tokens.flatten().tolist(),
        "targets": targets.flatten().tolist(),
        "loss": loss.item(),
        "grad_norms": {name: params[name].grad.norm().item() for name in ORDER},
        "generator": "tests/golden/make_gpt_golden.py, PyTorch %s, float64" % torch.__version__,
    }
    with open(os.path.join(HERE, "tiny_gpt_golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    print("loss %.8f" % golden["loss"])


if __name__ == "__main__":
    main()
