"""torch_llama.py THREADS STEPS — PyTorch's side of tests/bench/llama_vs_torch.sh:
the Llama of train_bench's "llama" config (12 layers, 768 channels, 12
query and 4 key/value heads, SwiGLU 2048 wide, vocabulary 32000, untied
head) as transformers' LlamaForCausalLM with SDPA attention, trained in
fp32 eager mode on the CPU with torch.optim.AdamW, B=4, T=256, random
tokens, THREADS threads. Prints one line: ms per step (mean and best of
STEPS after one of warm-up) and tokens/s."""
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

threads, steps = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(threads)
torch.manual_seed(0)
B, T = 4, 256
cfg = LlamaConfig(vocab_size=32000, hidden_size=768, intermediate_size=2048,
                  num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=4,
                  max_position_embeddings=1024, rms_norm_eps=1e-5, tie_word_embeddings=False,
                  attn_implementation="sdpa")
model = LlamaForCausalLM(cfg).float().train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8,
                        weight_decay=0.1)
x = torch.randint(0, 256, (B, T + 1))
times = []
for step in range(steps + 1):
    t0 = time.perf_counter()
    logits = model(input_ids=x[:, :T]).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 32000), x[:, 1:].reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if step:
        times.append(time.perf_counter() - t0)
mean = sum(times) / len(times)
print("pytorch  %d thread%s: %.1f ms/step (best %.1f) | %.0f tok/s (torch %s, transformers %s)"
      % (threads, "" if threads == 1 else "s", mean * 1e3, min(times) * 1e3, B * T / mean,
         torch.__version__, __import__("transformers").__version__))
