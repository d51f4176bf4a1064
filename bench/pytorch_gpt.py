#!/usr/bin/env python3
"""PyTorch peer of `troupe train --config examples/gpt.toml` for bench/tp_vs_pytorch.py.

The same GPT as kernels/gpt.cpp: learned token and position embeddings, pre-LN GPT-2 blocks
(attention with a packed qkv linear, 4C tanh-GELU MLP), a final layernorm and an untied LM head
with bias. The same init: normal(0.02) for the embeddings and the block's linears, residual
projections normal(0.02 / sqrt(2 * blocks)), zero biases, layernorms 1 / 0, PyTorch's default
for the head. The same AdamW (betas 0.9 / 0.999, eps 1e-8, decoupled weight decay on every
parameter), batch and data: the character corpus read and numbered as storage/datasets.cpp does
(extension-less files in name order, tabs to spaces, other bytes outside printable ASCII to '?',
ids in byte order, the first 90% for training, windows of `context` + 1 characters).

Meshes dp x pp x tp run as dp*pp*tp processes (torch.multiprocessing, gloo, one thread each)
over a DeviceMesh ("dp", "pp", "tp"):
- tp: `parallelize_module` with ColwiseParallel for attn.qkv and mlp.fc, RowwiseParallel for
  attn.proj and mlp.fc_proj; the token embedding RowwiseParallel (split over the vocabulary),
  the LM head ColwiseParallel with its logits left split over the vocabulary and the loss taken
  under `loss_parallel()`, as troupe's vocabulary-parallel cross-entropy. The packed qkv rows are
  laid out per tp rank as [q | k | v of that rank's heads], so the column split gives every rank
  whole heads (for tp 1 this is the usual q | k | v).
- pp: torch.distributed.pipelining, one PipelineStage per pp rank (embedding and the first
  blocks, the rest with the final layernorm and head), Schedule1F1B or ScheduleGPipe over the
  same number of microbatches.
- dp: DistributedDataParallel over the dp mesh dimension; each replica gets 1/dp of the batch.
  With --fsdp (pp 1, tp 1), FSDP2 instead: `fully_shard` on every block and then on the model.
- cp (alone: dp, pp, tp 1): DeepSpeed-Ulysses over gloo, as `troupe train --cp N --cp-mode
  all-to-all`: every rank takes the whole batch's tokens at its balanced positions (chunks c and
  2N-1-c of 2N), and each attention's q, k and v go through a differentiable all-to-all
  (torch.distributed._functional_collectives.all_to_all_single_autograd) from "my tokens, every head" to "every
  token, my heads", are put in position order for F.scaled_dot_product_attention(is_causal) and
  come back the same way; gradients average over the ranks under DDP. (torch.distributed's own
  context_parallel has no CPU path for scaled_dot_product_attention.)

Prints one JSON line: samples_per_s (steps after the warm-up), losses (per step, mean over the
global batch), vocab, torch version.
"""
import argparse
import gzip
import json
import math
import os
import socket
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---- data: storage/datasets.cpp's text corpus ----

def load_corpus(path, context, validation_fraction=0.1):
    if os.path.isdir(path):
        files = sorted(os.path.join(path, n) for n in os.listdir(path)
                       if os.path.isfile(os.path.join(path, n)) and os.path.splitext(n)[1] == "")
        if not files:
            sys.exit(f"{path}: no extension-less text files in this directory")
    else:
        files = [path]
    text = bytearray()
    for f in files:
        with open(f, "rb") as fh:
            raw = fh.read()
        text += gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    table = bytes(32 if b == 9 else b if (b == 10 or 32 <= b <= 126) else ord("?") for b in range(256))
    text = bytes(text).translate(table)
    vocab = sorted(set(text))
    id_of = bytes(vocab.index(b) if b in vocab else 0 for b in range(256))  # every id < 128
    tokens = torch.frombuffer(bytearray(text.translate(id_of)), dtype=torch.uint8).to(torch.int64)
    split = int(len(tokens) * (1.0 - validation_fraction))
    return tokens[:split], len(vocab)


class Batches:
    """A seeded shuffle of the training windows per epoch, cut into global batches; replica r of dp
    takes rows [r*B/dp, (r+1)*B/dp) of each (the order differs from troupe's sampler; the windows
    and their ids are the same)."""

    def __init__(self, tokens, context, batch, seed):
        self.tokens, self.T, self.B = tokens, context, batch
        self.windows = (len(tokens) - 1) // context
        self.gen = torch.Generator().manual_seed(seed)
        self.perm, self.at = None, 0

    def next(self, rank, ranks):
        if self.perm is None or self.at + self.B > self.windows:
            self.perm, self.at = torch.randperm(self.windows, generator=self.gen), 0
        idx = self.perm[self.at:self.at + self.B][rank * self.B // ranks:(rank + 1) * self.B // ranks]
        self.at += self.B
        starts = idx * self.T
        w = self.tokens[starts[:, None] + torch.arange(self.T + 1)]
        return w[:, :-1].contiguous(), w[:, 1:].contiguous()


# ---- model: kernels/gpt.cpp ----

class Attention(nn.Module):
    def __init__(self, C, heads):
        super().__init__()
        self.head_dim = C // heads
        self.qkv = nn.Linear(C, 3 * C)  # rows: per tp rank, [q | k | v] of its heads
        self.proj = nn.Linear(C, C)

    ulysses = None  # (cp, the rows' positions, the permutation to position order): set under --cp

    def forward(self, x):
        B, T, _ = x.shape
        qkv = self.qkv(x)  # local under tp: (B, T, 3C/tp)
        if self.ulysses is not None:
            return self.proj(self.ulysses_attention(qkv))
        q, k, v = (t.view(B, T, -1, self.head_dim).transpose(1, 2) for t in qkv.split(qkv.shape[-1] // 3, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, -1))

    def ulysses_attention(self, qkv):
        import torch.distributed as dist
        from torch.distributed._functional_collectives import all_to_all_single_autograd

        def all_to_all_single(blocks):  # differentiable, along dim 0
            return all_to_all_single_autograd(blocks, None, None, dist.group.WORLD)

        cp, order, to_positions = self.ulysses
        B, T, _ = qkv.shape  # this rank's T tokens, every head
        H, d = qkv.shape[-1] // 3 // self.head_dim, self.head_dim

        def to_heads(t):  # (B, T, H*d) -> (B, cp*T, H/cp, d): every rank's tokens (rank order), my heads
            blocks = t.reshape(B, T, cp, H // cp, d).permute(2, 0, 1, 3, 4).contiguous()
            return all_to_all_single(blocks).permute(1, 0, 2, 3, 4).reshape(B, cp * T, H // cp, d)

        q, k, v = (to_heads(t)[:, to_positions].transpose(1, 2) for t in qkv.split(qkv.shape[-1] // 3, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)[:, order]  # rank order again
        blocks = y.reshape(B, cp, T, H // cp, d).permute(1, 0, 2, 3, 4).contiguous()
        back = all_to_all_single(blocks)  # (cp, B, T, H/cp, d): my tokens, rank j's heads
        return back.permute(1, 2, 0, 3, 4).reshape(B, T, H * d)


class MLP(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.fc = nn.Linear(C, 4 * C)
        self.fc_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        return self.fc_proj(F.gelu(self.fc(x), approximate="tanh"))


class MixtureOfExperts(nn.Module):
    """kernels/layers_moe.cpp's mixture, dropless: a softmax router (no bias), each token to its top_k
    experts weighted by their probabilities renormalized over the k, each expert an MLP of 4C
    (PyTorch Linear's default init, as troupe's experts). The Switch load-balancing loss of the
    last forward (coefficient * E * sum_e f_e * P_e, f_e held constant) is kept for the step's loss."""

    def __init__(self, C, experts, top_k, coefficient):
        super().__init__()
        self.router = nn.Linear(C, experts, bias=False)
        self.experts = nn.ModuleList(MLP(C) for _ in range(experts))
        self.top_k, self.coefficient, self.aux_loss = top_k, coefficient, 0.0

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
        E = len(self.experts)
        share = torch.bincount(chosen.reshape(-1), minlength=E).float() / (flat.shape[0] * self.top_k)
        self.aux_loss = self.coefficient * E * (share.detach() * probs.mean(dim=0)).sum()
        return out.reshape(x.shape)


class ExpertParallelMoE(nn.Module):
    """MixtureOfExperts over an expert group of ep ranks (DeepSpeed-MoE's and Megatron's form, on
    torch.distributed over gloo): this rank holds the router and experts [r E/ep, (r+1) E/ep) of
    the same initial model, routes its own tokens, sends each assignment's row to its expert's
    owner (all_to_all_single, with autograd), runs its experts on what it got, and sends the
    outputs back to be gate-weighted and summed. The rows per (rank, expert) go first, as counts."""

    def __init__(self, whole, group, rank, ep):
        super().__init__()
        E = len(whole.experts)
        self.local = E // ep
        self.router = whole.router
        self.experts = nn.ModuleList(whole.experts[rank * self.local:(rank + 1) * self.local])
        self.top_k, self.coefficient, self.aux_loss = whole.top_k, whole.coefficient, 0.0
        self.group, self.ep, self.E = group, ep, E

    def forward(self, x):
        import torch.distributed as dist
        from torch.distributed.nn.functional import all_to_all_single
        flat = x.reshape(-1, x.shape[-1])
        probs = self.router(flat).softmax(dim=-1)
        gate, chosen = probs.topk(self.top_k, dim=-1)
        gate = gate / gate.sum(dim=-1, keepdim=True)
        expert_of = chosen.reshape(-1)
        order = torch.argsort(expert_of, stable=True)  # assignments by expert, so by owner
        token = order // self.top_k
        per_expert = torch.bincount(expert_of, minlength=self.E)
        got = torch.empty_like(per_expert)  # (ep, local): rows each rank sends each of my experts
        dist.all_to_all_single(got, per_expert, group=self.group)
        send = per_expert.view(self.ep, self.local).sum(1).tolist()
        got = got.view(self.ep, self.local)
        recv = got.sum(1).tolist()
        rows = all_to_all_single(flat.new_empty(sum(recv), flat.shape[1]), flat[token], recv, send, group=self.group)
        # Received rows: by source rank, within each by my local expert.
        expert_ids = torch.arange(self.local).repeat(self.ep).repeat_interleave(got.reshape(-1))
        out_rows = torch.zeros_like(rows)
        for j, expert in enumerate(self.experts):
            idx = (expert_ids == j).nonzero(as_tuple=True)[0]
            if idx.numel():
                out_rows = out_rows.index_copy(0, idx, expert(rows[idx]))
        back = all_to_all_single(flat.new_empty(len(order), flat.shape[1]), out_rows, send, recv, group=self.group)
        weights = gate.reshape(-1)[order].unsqueeze(-1)
        out = torch.zeros_like(flat).index_add(0, token, weights * back)
        share = per_expert.float() / (flat.shape[0] * self.top_k)
        self.aux_loss = self.coefficient * self.E * (share.detach() * probs.mean(dim=0)).sum()
        return out.reshape(x.shape)


class Block(nn.Module):
    def __init__(self, C, heads, moe=None):
        super().__init__()
        self.ln1, self.attn, self.ln2 = nn.LayerNorm(C), Attention(C, heads), nn.LayerNorm(C)
        self.mlp = MixtureOfExperts(C, *moe) if moe else MLP(C)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """The whole model, or one pipeline stage of it (the parts it does not hold are None)."""

    def __init__(self, vocab, context, C, heads, blocks, moe=None, moe_every=1):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, C), nn.Embedding(context, C)
        self.blocks = nn.ModuleDict({str(i): Block(C, heads, moe if moe and (i + 1) % moe_every == 0 else None)
                                     for i in range(blocks)})
        self.ln_f, self.head = nn.LayerNorm(C), nn.Linear(C, vocab)
        std, proj_std = 0.02, 0.02 / math.sqrt(2 * blocks)
        for m in (self.wte, self.wpe):
            nn.init.normal_(m.weight, 0.0, std)
        for b in self.blocks.values():
            dense = [] if isinstance(b.mlp, MixtureOfExperts) else [(b.mlp.fc, std), (b.mlp.fc_proj, proj_std)]
            for lin, s in [(b.attn.qkv, std), (b.attn.proj, proj_std)] + dense:
                nn.init.normal_(lin.weight, 0.0, s)
                nn.init.zeros_(lin.bias)
        # nn.LayerNorm starts at 1 / 0 and nn.Linear's default init stays for the head.

    def keep(self, first_block, end_block, first, last):
        for i in list(self.blocks.keys()):
            if not first_block <= int(i) < end_block:
                del self.blocks[i]
        if not first:
            self.wte = self.wpe = None
        if not last:
            self.ln_f = self.head = None
        return self

    positions = None  # this rank's token positions under --cp, else 0 .. T-1

    def forward(self, x):
        if self.wte is not None:
            x = self.wte(x) + self.wpe(torch.arange(x.shape[1]) if self.positions is None else self.positions)
        for b in self.blocks.values():
            x = b(x)
        if self.head is not None:
            x = self.head(self.ln_f(x))
        return x

    def aux_loss(self):
        return sum(b.mlp.aux_loss for b in self.blocks.values() if isinstance(b.mlp, (MixtureOfExperts, ExpertParallelMoE)))


def build_model(a, vocab):
    torch.manual_seed(a.seed)  # the same full model on every rank; each then keeps its share
    moe = (a.experts, a.top_k, a.aux_loss_coef) if a.experts else None
    return GPT(vocab, a.context, a.channels, a.heads, a.blocks, moe, a.moe_every)


# ---- one rank ----

def group_qkv_by_rank(model, tp):
    """Reorders the packed qkv rows from q | k | v to [q | k | v of rank 0's heads] ... [of rank tp-1's],
    so ColwiseParallel's even split of the rows hands every rank whole heads, and the model computes
    what the unsplit one does."""
    with torch.no_grad():
        for b in model.blocks.values():
            lin = b.attn.qkv
            C = lin.in_features
            lin.weight.copy_(lin.weight.view(3, tp, C // tp, C).transpose(0, 1).reshape(3 * C, C))
            lin.bias.copy_(lin.bias.view(3, tp, C // tp).transpose(0, 1).reshape(3 * C))


def tensor_parallel(model, tp_mesh):
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    group_qkv_by_rank(model, tp_mesh.size())
    plan = {}
    if model.wte is not None:
        plan["wte"] = RowwiseParallel(input_layouts=Replicate())  # vocabulary rows; the lookups are summed
    for i in model.blocks.keys():
        plan.update({f"blocks.{i}.attn.qkv": ColwiseParallel(), f"blocks.{i}.attn.proj": RowwiseParallel(),
                     f"blocks.{i}.mlp.fc": ColwiseParallel(), f"blocks.{i}.mlp.fc_proj": RowwiseParallel()})
    if model.head is not None:
        plan["head"] = ColwiseParallel(output_layouts=Shard(-1))  # the logits stay split over the vocabulary
    return parallelize_module(model, tp_mesh, plan)


def make_loss(a, vocab, tp_mesh):
    if tp_mesh is None:
        return lambda logits, y: F.cross_entropy(logits.flatten(0, 1), y.flatten())
    from torch.distributed.tensor import DTensor, Shard

    def loss(logits, y):  # logits: this rank's vocabulary columns, (b, T, V/tp)
        b, T, _ = logits.shape
        full = DTensor.from_local(logits, tp_mesh, [Shard(2)], run_check=False, shape=torch.Size((b, T, vocab)),
                                  stride=(T * vocab, vocab, 1))
        return F.cross_entropy(full.flatten(0, 1), y.flatten())  # inside loss_parallel()
    return loss


def worker(rank, a, port, results):
    import torch.distributed as dist
    torch.set_num_threads(a.threads)
    world = a.dp * a.pp * a.tp * a.cp
    tokens, vocab = load_corpus(a.corpus, a.context)
    distributed = world > 1
    if a.cp > 1:
        return cp_worker(rank, a, port, results, tokens, vocab)
    if distributed:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh("cpu", (a.dp, a.pp, a.tp), mesh_dim_names=("dp", "pp", "tp"))
        dp_rank, pp_rank, tp_rank = (mesh.get_local_rank(d) for d in ("dp", "pp", "tp"))
    else:
        mesh, dp_rank, pp_rank, tp_rank = None, 0, 0, 0
    first, last = pp_rank == 0, pp_rank == a.pp - 1
    cuts = [0] + a.cuts + [a.blocks]
    model = build_model(a, vocab).keep(cuts[pp_rank], cuts[pp_rank + 1], first, last)
    tp_mesh = mesh["tp"] if a.tp > 1 else None
    if tp_mesh is not None:
        model = tensor_parallel(model, tp_mesh)
    if a.dp > 1 and a.fsdp:  # FSDP2: every block its own unit, then the root (embeddings, head)
        from torch.distributed.fsdp import fully_shard
        for b in model.blocks.values():
            fully_shard(b, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
    elif a.ep > 1:  # the experts shared out; DDP reduces the rest, the experts reduce apart (expert_grads)
        from torch.nn.parallel import DistributedDataParallel
        expert_grads = share_experts(model, a, dp_rank)
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
            model, [n for n, _ in model.named_parameters() if ".experts." in n])
        model = DistributedDataParallel(model, device_mesh=mesh["dp"])
    elif a.dp > 1:  # over the dp dimension of the mesh: DDP turns the tp shards into local parameters
        from torch.nn.parallel import DistributedDataParallel
        # An expert that gets no token on a rank has no gradient there: DDP must look for such.
        model = DistributedDataParallel(model, device_mesh=mesh["dp"], find_unused_parameters=bool(a.experts))
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=a.weight_decay)
    loss_fn = make_loss(a, vocab, tp_mesh)
    if a.tp > 1:
        from torch.distributed.tensor.parallel import loss_parallel
        parallel_loss = loss_parallel
    else:
        import contextlib
        parallel_loss = contextlib.nullcontext
    sched = None
    if a.pp > 1:
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
        stage = PipelineStage(model, pp_rank, a.pp, torch.device("cpu"), group=mesh["pp"].get_group())
        kind = {"1f1b": Schedule1F1B, "gpipe": ScheduleGPipe}[a.schedule]
        sched = kind(stage, n_microbatches=a.micro_batches, loss_fn=loss_fn)

    data = Batches(tokens, a.context, a.batch_size, a.seed)
    losses = []
    t0 = prof = None
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            if distributed:
                dist.barrier()
            if a.profile:
                prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
                prof.start()
            t0 = time.perf_counter()
        x, y = data.next(dp_rank, a.dp)
        opt.zero_grad(set_to_none=True)
        with parallel_loss():
            if sched is None:
                loss = loss_fn(model(x), y)
                (loss + getattr(model, "module", model).aux_loss() if a.experts else loss).backward()
                if a.ep > 1:
                    expert_grads()
                value = float((loss.full_tensor() if hasattr(loss, "full_tensor") else loss).detach())
            else:
                mb_losses = []
                if first:
                    sched.step(x)
                elif last:
                    sched.step(target=y, losses=mb_losses)
                else:
                    sched.step()
                value = (sum(float((l.full_tensor() if hasattr(l, "full_tensor") else l).detach()) for l in mb_losses)
                         / len(mb_losses)) if mb_losses else 0.0
        opt.step()
        losses.append(value)
    if distributed:
        dist.barrier()
    seconds = time.perf_counter() - t0
    comm_share = None
    if prof is not None:
        prof.stop()
        comm_share = profile_summary(prof, seconds, rank, dist if distributed else None)
    if distributed:  # the global batch's mean loss per step: dp replicas averaged, counted on tp rank 0 of the last stage
        t = torch.tensor(losses, dtype=torch.float64) * (1.0 if (last and tp_rank == 0) else 0.0) / a.dp
        dist.all_reduce(t)
        losses = t.tolist()
    if rank == 0:  # before the group's teardown, which has aborted now and then (see main)
        results.put({"samples_per_s": a.steps * a.batch_size / seconds, "seconds": seconds, "steps": a.steps,
                     "warmup": a.warmup, "losses": losses, "vocab": vocab, "torch": torch.__version__,
                     "threads": torch.get_num_threads(), "mesh": [a.dp, a.pp, a.tp], "comm_share": comm_share})
    if distributed:
        dist.barrier()
        dist.destroy_process_group()


def share_experts(model, a, dp_rank):
    """--ep: every MoE block keeps its expert group's share of the experts. Returns what reduces the
    experts' gradients after backward: summed over the replicas holding the same experts (every
    ep-th), divided by dp, as DDP's average does for the rest (each rank's loss is its own
    tokens' mean, and an owner's gradient sums its group's tokens)."""
    import warnings
    import torch.distributed as dist
    # The autograd all_to_all_single warns it is deprecated for one in a private module.
    warnings.filterwarnings("ignore", message=".*all_to_all_single is deprecated", category=FutureWarning)
    groups = [dist.new_group(list(range(g * a.ep, (g + 1) * a.ep))) for g in range(a.dp // a.ep)]
    holders = [dist.new_group(list(range(e, a.dp, a.ep))) for e in range(a.ep)]
    mine, holding = groups[dp_rank // a.ep], holders[dp_rank % a.ep]
    for b in model.blocks.values():
        if isinstance(b.mlp, MixtureOfExperts):
            b.mlp = ExpertParallelMoE(b.mlp, mine, dp_rank % a.ep, a.ep)
    params = [p for n, p in model.named_parameters() if ".experts." in n]

    def reduce():
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        if a.dp > a.ep:
            dist.all_reduce(flat, group=holding)
        flat /= a.dp
        at = 0
        for p in params:
            p.grad.copy_(flat[at:at + p.numel()].view_as(p))
            at += p.numel()
    return reduce


def balanced_positions(T, n, r):
    """kernels/ring_attention.hpp's: chunks r and 2n-1-r of 2n."""
    c = T // (2 * n)
    return list(range(r * c, (r + 1) * c)) + list(range((2 * n - 1 - r) * c, (2 * n - r) * c))


def cp_worker(rank, a, port, results, tokens, vocab):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=a.cp)
    mine = torch.tensor(balanced_positions(a.context, a.cp, rank))
    order = torch.tensor([p for r in range(a.cp) for p in balanced_positions(a.context, a.cp, r)])
    model = build_model(a, vocab)
    model.positions = mine
    for b in model.blocks.values():
        b.attn.ulysses = (a.cp, order, torch.argsort(order))
    model = DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=a.weight_decay)
    data = Batches(tokens, a.context, a.batch_size, a.seed)
    losses = []
    t0 = None
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            dist.barrier()
            t0 = time.perf_counter()
        x, y = data.next(0, 1)  # the whole batch, this rank's positions of it
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x[:, mine]).flatten(0, 1), y[:, mine].flatten())
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    dist.barrier()
    seconds = time.perf_counter() - t0
    t = torch.tensor(losses, dtype=torch.float64) / a.cp  # every rank holds 1/cp of the tokens
    dist.all_reduce(t)
    if rank == 0:
        results.put({"samples_per_s": a.steps * a.batch_size / seconds, "seconds": seconds, "steps": a.steps,
                     "warmup": a.warmup, "losses": t.tolist(), "vocab": vocab, "torch": torch.__version__,
                     "threads": torch.get_num_threads(), "cp": a.cp})
    dist.barrier()
    dist.destroy_process_group()


COMM_OPS = ("all_reduce", "allreduce", "wait", "broadcast", "all_gather", "allgather", "reduce_scatter", "send", "recv",
            "barrier", "gloo")


def profile_summary(prof, seconds, rank, dist):
    """The timed steps' operators by self time, and the share of the wall time this rank's main thread
    spent in collectives (issuing them or waiting for them), averaged over the ranks."""
    ka = prof.key_averages()
    comm = sum(e.self_cpu_time_total for e in ka if any(k in e.key.lower() for k in COMM_OPS)) / 1e6
    share = torch.tensor([comm / seconds], dtype=torch.float64)
    if dist is not None:
        dist.all_reduce(share)
        share /= dist.get_world_size()
    if rank == 0:
        print(f"rank 0: {comm:.3f} s of {seconds:.3f} s in collectives; all ranks' mean share "
              f"{100 * share.item():.1f}%", file=sys.stderr)
        print(ka.table(sort_by="self_cpu_time_total", row_limit=18, max_name_column_width=48), file=sys.stderr)
    return share.item()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dp", type=int, default=1)
    p.add_argument("--pp", type=int, default=1)
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--cp", type=int, default=1, help="context parallelism, DeepSpeed-Ulysses over gloo (dp, pp, tp 1)")
    p.add_argument("--micro-batches", type=int, default=1)
    p.add_argument("--fsdp", action="store_true", help="dp through FSDP2's fully_shard (one unit per block) instead of DDP; pp 1, tp 1")
    p.add_argument("--schedule", choices=("1f1b", "gpipe"), default="1f1b")
    p.add_argument("--cuts", default="", help="first block of each pipeline stage after the first, e.g. 2 [blocks/pp]")
    p.add_argument("--steps", type=int, default=60, help="timed steps")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps before them")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--channels", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--blocks", type=int, default=4)
    p.add_argument("--experts", type=int, default=0, help="a mixture of this many experts in every --moe-every-th block (dp only)")
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--ep", type=int, default=1, help="with --experts: share them over this many data-parallel ranks")
    p.add_argument("--moe-every", type=int, default=1)
    p.add_argument("--aux-loss-coef", type=float, default=0.01)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--corpus", default="/usr/share/games/fortunes")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--profile", action="store_true",
                   help="torch.profiler over the timed steps: rank 0's operator table and the collectives' share "
                        "(on stderr; the profiler slows the steps, so its samples/s is not the benchmark's)")
    a = p.parse_args()
    a.cuts = [int(c) for c in a.cuts.split(",") if c] or [a.blocks * s // a.pp for s in range(1, a.pp)]
    if len(a.cuts) != a.pp - 1:
        sys.exit(f"--cuts needs {a.pp - 1} entries")
    if a.heads % a.tp or a.batch_size % a.dp or (a.batch_size // a.dp) % a.micro_batches:
        sys.exit("heads must divide by tp, the batch by dp, and each replica's batch by the microbatches")
    if a.experts and (a.pp > 1 or a.tp > 1 or a.fsdp):
        sys.exit("--experts runs with --dp only (DDP)")
    if a.ep > 1 and (not a.experts or a.dp % a.ep or a.experts % a.ep or a.ep < 2 or a.dp < 2):
        sys.exit("--ep needs --experts, and must divide --dp and the experts")
    if a.cp > 1 and (a.dp > 1 or a.pp > 1 or a.tp > 1 or a.experts or a.heads % a.cp or a.context % (2 * a.cp)):
        sys.exit("--cp runs alone (dp, pp, tp 1, no experts), with heads divisible by cp and the context by 2 cp")
    world = a.dp * a.pp * a.tp * a.cp
    import torch.multiprocessing as mp
    from torch.multiprocessing.spawn import ProcessException
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    if world == 1:
        worker(0, a, 0, results)
    else:
        try:
            mp.start_processes(worker, args=(a, free_port(), results), nprocs=world, start_method="spawn")
        except ProcessException as e:
            # A rank that dies after the timed steps (seen once in a while with pipelining on gloo,
            # as "terminate called without an active exception" at exit) leaves the numbers valid.
            if results.empty():
                raise
            print(f"pytorch_gpt: a rank failed after the timed steps: {e}", file=sys.stderr)
    print(json.dumps(results.get()))


if __name__ == "__main__":
    main()
