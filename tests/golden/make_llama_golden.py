#!/usr/bin/env python3
"""Golden values for trellis's Llama from Hugging Face transformers.

For each case below, writes tests/golden/llama/<case>/:
  hf/                 a small random LlamaForCausalLM, saved by transformers'
                      save_pretrained (config.json, model.safetensors); the
                      "tf4" cases have their config.json rewritten in the
                      form transformers 4 writes (rope_theta and
                      rope_scaling instead of rope_parameters)
  tokens.bin          an llm.c token file: 3 batches of B sequences of T + 1
                      tokens, laid out as trellis's loader reads them
                      (batch k, sequence b starts at k*B*T + b*T)
  grads.safetensors   transformers' gradients of step 1's mean loss, under
                      the model's own tensor names (fp32)
  logits.safetensors  "before": the logits of step 1's inputs at the saved
                      weights; "after": at the weights after 3 AdamW steps
  golden.json         the batch shape, the optimizer settings and the
                      3 steps' mean losses

Everything is computed by transformers' own modules in fp32 (eager
attention), with torch.optim.AdamW: decay on the 2-D weights, none on the
norms, constant learning rate, no clipping — what the trellis config the
test writes asks for. The loss is the mean cross-entropy of each position's
next token over B * T positions, as trellis computes it.

    pip install torch transformers safetensors
    python3 tests/golden/make_llama_golden.py

With trellis built (bazel build //launcher:trellis), it then trains each
case with `trellis train ... --export DIR`, as the test's config does, loads
DIR with transformers' LlamaForCausalLM.from_pretrained and prints how far
its logits are from transformers' own after its 3 steps ("after"): the
check, by transformers itself, that trellis's export is a model it reads.
"""
import json
import os
import shutil
import struct
import subprocess
import tempfile

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llama")

CASES = [
    # grouped-query attention (2 query heads a key/value head), untied head
    dict(name="gqa_untied", vocab=96, hidden=32, inter=64, layers=2, heads=4, kv=2, maxpos=32,
         theta=10000.0, scaling=None, tie=False, eps=1e-5, B=2, T=16, seed=1, tf4=False),
    # multi-query, Llama 3.1's rope scaling (an original context of 48, so
    # that of the head's 8 frequencies one is kept, one interpolated and
    # the rest slowed by the factor), a tied head, config.json as
    # transformers 4 writes it
    dict(name="mqa_tied_llama3", vocab=72, hidden=48, inter=80, layers=3, heads=3, kv=1,
         maxpos=64, theta=500000.0,
         scaling=dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                      original_max_position_embeddings=48),
         tie=True, eps=1e-6, B=3, T=12, seed=2, tf4=True),
]
STEPS, LR, WD, BETAS, EPS = 3, 3e-3, 0.1, (0.9, 0.95), 1e-8


def write_tokens(path, tokens):
    header = [0] * 256
    header[0], header[1], header[2] = 20240520, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%dH" % len(tokens), *tokens))


def batch(tokens, k, B, T):
    seqs = [tokens[k * B * T + b * T: k * B * T + b * T + T + 1] for b in range(B)]
    x = torch.tensor([s[:T] for s in seqs])
    y = torch.tensor([s[1:] for s in seqs])
    return x, y


def mean_loss(model, x, y):
    logits = model(input_ids=x).logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)), logits


def make(case):
    out = os.path.join(HERE, case["name"])
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    torch.manual_seed(case["seed"])
    rope = {"rope_type": "default", "rope_theta": case["theta"]}
    if case["scaling"]:
        rope = dict(case["scaling"], rope_type="llama3", rope_theta=case["theta"])
    cfg = LlamaConfig(vocab_size=case["vocab"], hidden_size=case["hidden"],
                      intermediate_size=case["inter"], num_hidden_layers=case["layers"],
                      num_attention_heads=case["heads"], num_key_value_heads=case["kv"],
                      max_position_embeddings=case["maxpos"], rms_norm_eps=case["eps"],
                      rope_parameters=rope, tie_word_embeddings=case["tie"],
                      attn_implementation="eager", bos_token_id=None, eos_token_id=None)
    model = LlamaForCausalLM(cfg).float()
    # weights large enough for attention that is not uniform and gradients
    # of order one; norms not all ones
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                std = 0.5 / p.shape[-1] ** 0.5  # a tied embedding is also the head: smaller
                if "embed" in name:
                    std = 0.3 if case["tie"] else 1.0
                p.copy_(torch.randn_like(p) * std)
    hf = os.path.join(out, "hf")
    model.save_pretrained(hf, safe_serialization=True)
    if case["tf4"]:  # rope_theta and rope_scaling, as transformers 4 writes them
        with open(os.path.join(hf, "config.json")) as f:
            c = json.load(f)
        params = c.pop("rope_parameters")
        c["rope_theta"] = params.pop("rope_theta")
        c["rope_scaling"] = params if params.get("rope_type") != "default" else None
        c["transformers_version"] = "4.46.0"
        with open(os.path.join(hf, "config.json"), "w") as f:
            json.dump(c, f, indent=2, sort_keys=True)
    gen = torch.Generator().manual_seed(100 + case["seed"])
    B, T = case["B"], case["T"]
    tokens = torch.randint(0, case["vocab"], (STEPS * B * T + 1,), generator=gen).tolist()
    write_tokens(os.path.join(out, "tokens.bin"), tokens)

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS)
    losses, grads, logits = [], {}, {}
    for step in range(STEPS):
        x, y = batch(tokens, step, B, T)
        opt.zero_grad()
        loss, lg = mean_loss(model, x, y)
        loss.backward()
        losses.append(loss.item())
        if step == 0:
            logits["before"] = lg.detach().contiguous()
            grads = {n: p.grad.detach().clone().contiguous() for n, p in model.named_parameters()}
        opt.step()
    with torch.no_grad():
        x, _ = batch(tokens, 0, B, T)
        logits["after"] = model(input_ids=x).logits.contiguous()
    if case["tie"]:
        grads.pop("lm_head.weight", None)
    save_file(grads, os.path.join(out, "grads.safetensors"))
    save_file(logits, os.path.join(out, "logits.safetensors"))
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump({"batch": B, "seq_len": T, "steps": STEPS, "lr": LR, "weight_decay": WD,
                   "beta1": BETAS[0], "beta2": BETAS[1], "eps": EPS, "losses": losses}, f,
                  indent=2)
    print(case["name"], "losses", losses)


def check_export(case):
    """trellis trains the case and exports it; transformers loads the export."""
    trellis = os.path.join(os.path.dirname(HERE), "..", "..", "bazel-bin", "launcher", "trellis")
    if not os.path.exists(trellis):
        print("(trellis is not built: the export is not checked)")
        return
    out = os.path.join(HERE, case["name"])
    with open(os.path.join(out, "golden.json")) as f:
        g = json.load(f)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = {"model": {"init_from": os.path.join(out, "hf")},
               "train": {"steps": g["steps"], "batch_size": g["batch"], "seq_len": g["seq_len"],
                         "lr": g["lr"], "lr_schedule": "constant", "warmup_steps": 0,
                         "beta1": g["beta1"], "beta2": g["beta2"], "eps": g["eps"],
                         "weight_decay": g["weight_decay"], "grad_clip": 0, "sample_tokens": 0},
               "data": {"train": os.path.join(out, "tokens.bin")}, "device": {"threads": 1}}
        path = os.path.join(tmp, "config.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        export = os.path.join(tmp, "export")
        subprocess.run([trellis, "train", path, "--export", export], check=True,
                       stdout=subprocess.DEVNULL)
        model = LlamaForCausalLM.from_pretrained(export, attn_implementation="eager").float()
        with open(os.path.join(out, "tokens.bin"), "rb") as f:
            f.seek(1024)
            raw = f.read()
        tokens = list(struct.unpack("<%dH" % (len(raw) // 2), raw))
        x, _ = batch(tokens, 0, g["batch"], g["seq_len"])
        from safetensors.torch import load_file
        want = load_file(os.path.join(out, "logits.safetensors"))["after"]
        with torch.no_grad():
            got = model(input_ids=x).logits
        err = (got - want).abs().max().item() / want.abs().max().item()
        print(case["name"], "trellis's export, loaded by transformers: logits within %.2g of "
              "transformers' own after 3 steps" % err)


if __name__ == "__main__":
    for c in CASES:
        make(c)
    for c in CASES:
        check_export(c)
