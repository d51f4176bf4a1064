#!/usr/bin/env python3
"""pytorch_oracle.py FILE: redoes in PyTorch what oracle_dump wrote troupe computed, and compares.

The same model as a torch.nn module (state_dict keys = kernels/param_names.hpp's names), run in
float64 so the reference's own rounding does not count: at each point of the file (oracle_dump.cpp
lists them) the logits, the loss and every gradient; then torch.optim.AdamW and SGD for two steps
from init, compared with troupe's parameters after each. The optimizers are fed troupe's own
gradients (checked at the point they come from): Adam's first step is about lr * sign(g), so a
rounding-level difference in a near-zero gradient would otherwise flip an update and say nothing
about the optimizer. Then one linear layer at troupe's bf16 matmul precision (the "bf16." tensors):
its products redone from the same fp32 values rounded by PyTorch's own bf16 conversion.
Error per tensor: max|troupe - torch| / max|torch|, at most 1e-5.
Exit 0: all match; 1: a tensor differs (named); 77: no PyTorch here (ctest shows it skipped).
"""
import json
import struct
import sys

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    print(f"pytorch_oracle: skipped, {e}")
    sys.exit(77)

TOLERANCE = 1e-5


def read_safetensors(path):
    """{name: float64 tensor}, metadata. By hand: Debian's torch 1.13 has no safetensors module."""
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, entry in header.items():
        if entry["dtype"] != "F32":
            raise ValueError(f"{path}: tensor {name} has dtype {entry['dtype']}")
        begin, end = entry["data_offsets"]
        values = np.frombuffer(data[8 + length + begin : 8 + length + end], dtype="<f4")
        tensors[name] = torch.from_numpy(values.reshape(entry["shape"]).astype(np.float64))
    return tensors, metadata


class Mlp(nn.Module):
    def __init__(self, inputs, hidden, classes):
        super().__init__()
        widths = [inputs] + hidden + [classes]
        mods = []
        for i in range(len(widths) - 1):
            mods += [nn.Linear(widths[i], widths[i + 1])] + ([nn.ReLU()] if i + 2 < len(widths) else [])
        self.layers = nn.Sequential(*mods)

    def forward(self, x):
        return self.layers(x)


class Attention(nn.Module):
    """Causal self-attention over one packed projection: qkv rows are q | k | v."""

    def __init__(self, channels, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(channels, 3 * channels)
        self.proj = nn.Linear(channels, channels)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in self.qkv(x).split(C, dim=-1))
        scores = q @ k.transpose(-2, -1) / (C // self.heads) ** 0.5
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        att = scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(B, T, C))


class FeedForward(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.fc = nn.Linear(channels, 4 * channels)
        self.proj = nn.Linear(4 * channels, channels)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class MixtureOfExperts(nn.Module):
    """Switch/Mixtral routing, dropless: a softmax router, each token to its top_k experts weighted by
    their probabilities renormalized over the k. Keeps the load-balancing loss of its last forward,
    coefficient * E * sum_e f_e * P_e with f_e (the share of assignments to e) held constant."""

    def __init__(self, channels, experts, top_k, coefficient):
        super().__init__()
        self.router = nn.Linear(channels, experts, bias=False)
        self.experts = nn.ModuleList(FeedForward(channels) for _ in range(experts))
        self.top_k, self.coefficient = top_k, coefficient
        self.aux_loss = 0.0

    def forward(self, x):
        flat = x.reshape(-1, x.shape[-1])
        probs = self.router(flat).softmax(dim=-1)
        gate, chosen = probs.topk(self.top_k, dim=-1)
        gate = gate / gate.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            rows, slot = (chosen == e).nonzero(as_tuple=True)
            if rows.numel():
                out = out.index_add(0, rows, gate[rows, slot].unsqueeze(-1) * expert(flat[rows]))
        E, N = len(self.experts), flat.shape[0]
        share = torch.bincount(chosen.reshape(-1), minlength=E).double() / (N * self.top_k)
        self.aux_loss = self.coefficient * E * (share.detach() * probs.mean(dim=0)).sum()
        return out.reshape(x.shape)


class Block(nn.Module):
    """GPT-2's pre-norm block; with experts, its MLP is a mixture of them."""

    def __init__(self, channels, heads, moe=None):
        super().__init__()
        self.ln1 = nn.LayerNorm(channels, eps=1e-5)
        self.attn = Attention(channels, heads)
        self.ln2 = nn.LayerNorm(channels, eps=1e-5)
        self.mlp = MixtureOfExperts(channels, *moe) if moe else FeedForward(channels)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Gpt(nn.Module):
    """Learned positions, final layernorm, an untied head with bias; no dropout."""

    def __init__(self, vocab, context, channels, heads, blocks, moe=None, moe_every=1):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, channels)
        self.pos_emb = nn.Embedding(context, channels)
        self.blocks = nn.ModuleList(Block(channels, heads, moe if moe and (b + 1) % moe_every == 0 else None)
                                    for b in range(blocks))
        self.ln_f = nn.LayerNorm(channels, eps=1e-5)
        self.head = nn.Linear(channels, vocab)

    def forward(self, tokens):
        x = self.tok_emb(tokens) + self.pos_emb(torch.arange(tokens.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))

    def aux_loss(self):
        return sum(b.mlp.aux_loss for b in self.blocks if isinstance(b.mlp, MixtureOfExperts))


def build(meta):
    i = lambda key: int(meta["model." + key])
    if meta["model.kind"] == "mlp":
        return Mlp(i("inputs"), [int(h) for h in meta["model.hidden"].split(",") if h], i("classes")).double()
    moe = None
    if int(meta.get("model.experts", "0")) > 0:
        if float(meta["model.capacity_factor"]) != 0:
            raise ValueError("the oracle's mixture of experts is dropless")
        moe = (i("experts"), i("top_k"), float(meta["model.aux_loss_coefficient"]))
    return Gpt(i("vocab"), i("context"), i("channels"), i("heads"), i("blocks"), moe,
               i("moe_every") if moe else 1).double()


def kind_of(name):
    if name.startswith("bf16."):
        return "bf16 linear"
    if name.endswith("logits") or name.endswith("loss"):
        return name.rsplit(".", 1)[-1]
    if name.startswith("grad.") or ".grad." in name:
        return "gradients"
    return "AdamW steps" if name.startswith("adamw.") else "SGD steps"


class Comparison:
    def __init__(self):
        self.rows = []  # (error, name)

    def check(self, name, troupe, torch_value):
        troupe, torch_value = troupe.detach(), torch_value.detach()
        if troupe.shape != torch_value.shape:
            self.rows.append((float("inf"), f"{name} (shape {list(troupe.shape)} vs {list(torch_value.shape)})"))
            return
        scale = max(torch_value.abs().max().item(), 1e-12) if torch_value.numel() else 1.0
        error = (troupe - torch_value).abs().max().item() / scale if troupe.numel() else 0.0
        self.rows.append((error, name))

    def report(self, path):
        worst = sorted(self.rows, reverse=True)
        print(f"pytorch_oracle: {path}: {len(worst)} tensors, error = max|troupe - torch| / max|torch|")
        print(f"  {'error':>10}  tensor")
        for error, name in worst[:12]:
            print(f"  {error:10.3e}  {name}{'   <-- over ' + str(TOLERANCE) if error > TOLERANCE else ''}")
        by_kind = {}
        for error, name in worst:
            by_kind.setdefault(kind_of(name), error)
        print("  worst by kind: " + ", ".join(f"{kind} {error:.1e}" for kind, error in by_kind.items()))
        failed = [name for error, name in worst if not error <= TOLERANCE]
        if failed:
            print(f"pytorch_oracle: FAIL: {len(failed)} tensors differ from PyTorch by more than {TOLERANCE}: "
                  + ", ".join(failed))
        else:
            print(f"pytorch_oracle: pass, worst {worst[0][0]:.3e} ({worst[0][1]})")
        return not failed


def load(model, tensors, prefix):
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(tensors[prefix + name])


def main(path):
    tensors, meta = read_safetensors(path)
    model = build(meta)
    names = [n for n, _ in model.named_parameters()]
    inputs, targets = tensors["inputs"], tensors["targets"].long()
    if meta["model.kind"] == "gpt":
        inputs = inputs.long()
    steps = int(meta["steps"])
    points = ["", "perturbed."] + [f"{kind}.{t}." for kind in ("adamw", "sgd") for t in range(1, steps + 1)]
    expected = {"inputs", "targets"} | {p + n for p in points for n in names + ["logits", "loss"]}
    expected |= {p + "grad." + n for p in points for n in names}
    expected |= {"bf16." + n for n in ("x", "weight", "bias", "dy", "y", "dx", "grad.weight", "grad.bias")}
    if set(tensors) != expected:
        print(f"pytorch_oracle: FAIL: tensors in the file but not compared {sorted(set(tensors) - expected)}, "
              f"expected but missing {sorted(expected - set(tensors))}")
        return 1
    for name, p in model.named_parameters():
        if tensors[name].shape != p.shape:
            print(f"pytorch_oracle: FAIL: {name} is {list(tensors[name].shape)} in the file, {list(p.shape)} in PyTorch")
            return 1

    cmp = Comparison()
    for point in points:
        load(model, tensors, point)
        model.zero_grad()
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets)
        # troupe's loss is the cross-entropy; its gradients include the routers' load-balancing loss.
        (loss + (model.aux_loss() if isinstance(model, Gpt) else 0)).backward()
        cmp.check(point + "logits", tensors[point + "logits"], logits)
        cmp.check(point + "loss", tensors[point + "loss"], loss)
        for name, p in model.named_parameters():
            cmp.check(point + "grad." + name, tensors[point + "grad." + name], p.grad)

    f = lambda key: float(meta[key])
    optimizers = {
        "adamw": lambda ps: torch.optim.AdamW(ps, lr=f("adamw.lr"), betas=(f("adamw.beta1"), f("adamw.beta2")),
                                              eps=f("adamw.eps"), weight_decay=f("adamw.weight_decay")),
        "sgd": lambda ps: torch.optim.SGD(ps, lr=f("sgd.lr"), momentum=f("sgd.momentum"),
                                          weight_decay=f("sgd.weight_decay")),
    }
    for kind, make in optimizers.items():
        load(model, tensors, "")
        opt = make(model.parameters())
        for t in range(1, steps + 1):
            previous = "" if t == 1 else f"{kind}.{t - 1}."
            for name, p in model.named_parameters():
                p.grad = tensors[previous + "grad." + name].clone()
            opt.step()
            for name, p in model.named_parameters():
                cmp.check(f"{kind}.{t}.{name}", tensors[f"{kind}.{t}.{name}"], p)

    check_bf16_linear(cmp, tensors)
    return 0 if cmp.report(path) else 1


def check_bf16_linear(cmp, t):
    """troupe's bf16 products: the operands rounded to bf16 (nearest even), the products exact."""
    rounded = lambda name: t[name].float().to(torch.bfloat16).double()  # the file's values are fp32
    x, w, dy = rounded("bf16.x"), rounded("bf16.weight"), rounded("bf16.dy")
    cmp.check("bf16.y", t["bf16.y"], x @ w.T + t["bf16.bias"])
    cmp.check("bf16.dx", t["bf16.dx"], dy @ w)
    cmp.check("bf16.grad.weight", t["bf16.grad.weight"], dy.T @ x)
    cmp.check("bf16.grad.bias", t["bf16.grad.bias"], dy.sum(0))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: pytorch_oracle.py FILE.safetensors", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
