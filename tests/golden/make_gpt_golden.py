#!/usr/bin/env python3
"""Golden values for trellis's GPT and MLP from an independent implementation.

Writes, next to this script:
  tiny_gpt.bin          a tiny GPT-2 in llm.c's model-file format (fp32)
  tiny_gpt_golden.json  the configs, tokens and targets, the mean losses, the
                        AdamW settings, and (for reading by eye) the L2 norm
                        of every GPT gradient tensor
  tiny_gpt_grads.bin    float32, llm.c's tensor order: every element of the
                        GPT's gradient, then the parameters after one AdamW
                        step from those gradients
  tiny_mlp.bin          float32, trellis's tensor order (wte, wpe, w0, b0,
                        w1, b1): the MLP's weights, every element of its
                        gradient, then its parameters after one AdamW step
all computed by PyTorch (autograd and torch.optim.AdamW) in float64 from the
float32 weights the files hold.

The GPT is GPT-2 as llm.c's train_gpt2.c computes it: token + position
embedding; per block LayerNorm (eps 1e-5) -> causal self-attention (scale
1/sqrt(head size)) -> projection -> residual, LayerNorm -> 4x MLP with tanh
GELU -> projection -> residual; final LayerNorm; logits = x @ wte^T over the
padded vocabulary; loss = mean cross-entropy over the real vocabulary. The
sequence (T = 8) is shorter than max_seq_len (12): the position rows past it
get no gradient.

The MLP is trellis's model.kind "mlp": each token on its own, its embedding
(wte row + the one wpe row) through linear layers (x @ w^T + b) with tanh
GELU between them, the last giving the logits over the vocabulary.

AdamW as trellis runs it: decay on the tensors trellis decays (the GPT's
wte, wpe and 2-D matrices; the MLP's wte and w*), bias correction, step 1,
no clipping.

    pip install torch && python3 tests/golden/make_gpt_golden.py
"""
import json
import os
import struct

import torch

L, NH, C, V, VP, MAXT = 2, 2, 16, 37, 64, 12
B, T = 2, 8
MLP_SIZES = [16, 24, V]
LR, BETA1, BETA2, EPS, WD = 0.01, 0.9, 0.95, 1e-8, 0.1
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
GPT_DECAY = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}


def layernorm(x, w, b):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + 1e-5) * w + b


def gelu(x):
    return 0.5 * x * (1.0 + torch.tanh((2.0 / torch.pi) ** 0.5 * (x + 0.044715 * x ** 3)))


def gpt_forward(p, tokens, targets):
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


def mlp_forward(p, tokens, targets):
    x = p["wte"][tokens.reshape(-1)] + p["wpe"][0]
    n = len(MLP_SIZES) - 1
    for i in range(n):
        x = x @ p["w%d" % i].T + p["b%d" % i]
        if i + 1 < n:
            x = gelu(x)
    return torch.nn.functional.cross_entropy(x, targets.reshape(-1))


def adamw_step(params, order, decay):
    """One torch.optim.AdamW step (step 1) from the gradients; the new values."""
    groups = [{"params": [params[k] for k in order if k in decay], "weight_decay": WD},
              {"params": [params[k] for k in order if k not in decay], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=LR, betas=(BETA1, BETA2), eps=EPS)
    opt.step()
    return {k: params[k].detach().clone() for k in order}


def floats(tensors, order):
    out = []
    for name in order:
        out += tensors[name].detach().float().flatten().tolist()
    return struct.pack("<%df" % len(out), *out)


def main():
    gen = torch.Generator().manual_seed(20261129)
    params = make_weights(gen)
    tokens = torch.randint(0, V, (B, T), generator=gen)
    targets = torch.randint(0, V, (B, T), generator=gen)
    # the file holds float32: compute the golden values from exactly those weights
    params = {k: v.float().double().requires_grad_(True) for k, v in params.items()}
    loss = gpt_forward(params, tokens, targets)
    loss.backward()
    grads = {k: params[k].grad.clone() for k in ORDER}
    header = [20240326, 3, MAXT, V, L, NH, C, VP] + [0] * 248
    with open(os.path.join(HERE, "tiny_gpt.bin"), "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(floats(params, ORDER))
    # AdamW from the float32 gradients trellis is given in the test
    for k in ORDER:
        params[k].grad = grads[k].float().double()
    with torch.no_grad():
        after = adamw_step(params, ORDER, GPT_DECAY)
    with open(os.path.join(HERE, "tiny_gpt_grads.bin"), "wb") as f:
        f.write(floats(grads, ORDER))
        f.write(floats(after, ORDER))

    # the MLP
    n = len(MLP_SIZES) - 1
    mlp_order = ["wte", "wpe"] + [x for i in range(n) for x in ("w%d" % i, "b%d" % i)]
    mlp = {"wte": torch.randn(V, MLP_SIZES[0], generator=gen, dtype=torch.float64) * 0.5,
           "wpe": torch.randn(1, MLP_SIZES[0], generator=gen, dtype=torch.float64) * 0.1}
    for i in range(n):
        fan_in = MLP_SIZES[i]
        mlp["w%d" % i] = torch.randn(MLP_SIZES[i + 1], fan_in, generator=gen,
                                     dtype=torch.float64) / fan_in ** 0.5 * 1.5
        mlp["b%d" % i] = torch.randn(MLP_SIZES[i + 1], generator=gen, dtype=torch.float64) * 0.1
    mlp = {k: v.float().double().requires_grad_(True) for k, v in mlp.items()}
    mlp_tokens = torch.randint(0, V, (B, T), generator=gen)
    mlp_targets = torch.randint(0, V, (B, T), generator=gen)
    mlp_loss = mlp_forward(mlp, mlp_tokens, mlp_targets)
    mlp_loss.backward()
    mlp_grads = {k: mlp[k].grad.clone() for k in mlp_order}
    with open(os.path.join(HERE, "tiny_mlp.bin"), "wb") as f:
        f.write(floats(mlp, mlp_order))
        for k in mlp_order:
            mlp[k].grad = mlp_grads[k].float().double()
        with torch.no_grad():
            mlp_after = adamw_step(mlp, mlp_order,
                                   {"wte"} | {"w%d" % i for i in range(n)})
        f.write(floats(mlp_grads, mlp_order))
        f.write(floats(mlp_after, mlp_order))

    golden = {
        "config": {"n_layers": L, "n_heads": NH, "n_embd": C, "vocab_size": V,
                   "padded_vocab_size": VP, "max_seq_len": MAXT, "batch": B, "seq_len": T},
        "adamw": {"lr": LR, "beta1": BETA1, "beta2": BETA2, "eps": EPS, "weight_decay": WD,
                  "step": 1},
        "tokens": tokens.flatten().tolist(),
        "targets": targets.flatten().tolist(),
        "loss": loss.item(),
        "grad_norms": {name: grads[name].norm().item() for name in ORDER},
        "mlp": {"sizes": MLP_SIZES, "tokens": mlp_tokens.flatten().tolist(),
                "targets": mlp_targets.flatten().tolist(), "loss": mlp_loss.item()},
        "generator": "tests/golden/make_gpt_golden.py, PyTorch %s, float64" % torch.__version__,
    }
    with open(os.path.join(HERE, "tiny_gpt_golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    print("gpt loss %.8f, mlp loss %.8f" % (golden["loss"], golden["mlp"]["loss"]))


if __name__ == "__main__":
    main()
