"""PyTorch's causal attention on one GPU, the peer of bench/gpu/attention_step.cpp: the same shape
(batch 8, T 1024, 12 heads of 64 by default), F.scaled_dot_product_attention(is_causal=True)
forward and its backward, timed by CUDA events after warm-up, in fp32 with TF32 off (troupe's
arithmetic; PyTorch picks its memory-efficient kernel) and in bf16 (its flash kernel). One JSON
line per precision, with the FLOPs counted as attention_step.cpp counts them. Runs on the CPU
too (--device cpu, for a check of the script), where the numbers mean little.
"""
import argparse
import json

import torch
import torch.nn.functional as F


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--channels", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--device", default="cuda")
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device(a.device)
    hs = a.channels // a.heads
    units = a.batch * a.heads * a.context * a.context * hs
    for precision, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        g = torch.Generator(device="cpu").manual_seed(3)
        shape = (a.batch, a.heads, a.context, hs)
        q, k, v = (torch.rand(shape, generator=g).mul(2).sub(1).to(dev, dtype).requires_grad_() for _ in range(3))
        dout = torch.rand(shape, generator=g).mul(2).sub(1).to(dev, dtype)
        fwd = bwd = 0.0
        for step in range(a.warmup + a.steps):
            if dev.type == "cuda":
                e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
                e0.record()
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                e1.record()
                y.backward(dout)
                e2.record()
                e2.synchronize()
                f, b = e0.elapsed_time(e1), e1.elapsed_time(e2)
            else:
                import time
                t0 = time.perf_counter()
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                t1 = time.perf_counter()
                y.backward(dout)
                t2 = time.perf_counter()
                f, b = (t1 - t0) * 1e3, (t2 - t1) * 1e3
            q.grad = k.grad = v.grad = None
            if step >= a.warmup:
                fwd += f / a.steps
                bwd += b / a.steps
        print(json.dumps({"peer": "pytorch", "version": torch.__version__, "precision": precision,
                          "batch": a.batch, "context": a.context, "heads": a.heads, "head_size": hs,
                          "fwd_ms": round(fwd, 3), "bwd_ms": round(bwd, 3),
                          "fwd_tflops": round(2 * units / (fwd * 1e-3) / 1e12, 2),
                          "bwd_tflops": round(4 * units / (bwd * 1e-3) / 1e12, 2)}), flush=True)


if __name__ == "__main__":
    main()
