"""PyTorch's GPT training step on one GPU, the peer of bench/gpu/gpt_step.cpp: the same model
(embedding + learned positions, pre-LN blocks with GELU (tanh), a final layernorm, an untied lm
head with bias), batch, AdamW and timing (CUDA events over the timed steps after warm-up). Two
precisions: fp32 with TF32 off (troupe's arithmetic) and bf16 autocast with flash attention
(what a PyTorch user runs). Prints one JSON line per precision, with MFU against the same peak.
"""
import argparse
import json
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, c, nh):
        super().__init__()
        self.nh = nh
        self.ln1 = nn.LayerNorm(c)
        self.qkv = nn.Linear(c, 3 * c)
        self.proj = nn.Linear(c, c)
        self.ln2 = nn.LayerNorm(c)
        self.fc = nn.Linear(c, 4 * c)
        self.fc_proj = nn.Linear(4 * c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.nh, c // self.nh).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, context, c, nh, blocks):
        super().__init__()
        self.wte = nn.Embedding(vocab, c)
        self.wpe = nn.Embedding(context, c)
        self.blocks = nn.ModuleList(Block(c, nh) for _ in range(blocks))
        self.ln_f = nn.LayerNorm(c)
        self.head = nn.Linear(c, vocab)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


def run(a, precision):
    torch.manual_seed(7)
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = GPT(a.vocab, a.context, a.channels, a.heads, a.blocks).to(dev)
    n = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01, fused=True)
    x = torch.randint(0, a.vocab, (a.batch, a.context), device=dev)
    y = torch.randint(0, a.vocab, (a.batch, a.context), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
            logits = model(x)
        loss = F.cross_entropy(logits.float().view(-1, a.vocab), y.view(-1))
        loss.backward()
        opt.step()
        return loss.detach()

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    losses = [step() for _ in range(a.steps)]
    stop.record()
    torch.cuda.synchronize()
    step_ms = start.elapsed_time(stop) / a.steps
    tokens = a.batch * a.context
    flops = tokens * (6.0 * n + 12.0 * a.blocks * a.context * a.channels)  # as gpt_step.cpp counts
    tflops = flops / (step_ms * 1e-3) / 1e12
    out = {"peer": "pytorch", "version": torch.__version__, "precision": precision, "params": n,
           "batch": a.batch, "context": a.context, "step_ms": round(step_ms, 3),
           "tokens_per_s": round(tokens / (step_ms * 1e-3)), "tflops": round(tflops, 2),
           "mfu": round(tflops / a.peak_tflops, 4), "peak_tflops": a.peak_tflops,
           "first_loss": round(losses[0].item(), 4), "last_loss": round(losses[-1].item(), 4)}
    print(json.dumps(out), flush=True)
    assert math.isfinite(out["last_loss"]), out


def main():
    p = argparse.ArgumentParser()
    for k, v in [("batch", 8), ("context", 1024), ("channels", 768), ("heads", 12), ("blocks", 12),
                 ("vocab", 50304), ("warmup", 3), ("steps", 10)]:
        p.add_argument("--" + k, type=int, default=v)
    p.add_argument("--peak-tflops", type=float, default=989.0)
    a = p.parse_args()
    for precision in ("fp32", "bf16"):
        run(a, precision)


if __name__ == "__main__":
    main()
