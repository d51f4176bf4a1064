#!/usr/bin/env python3
"""load_export.py FILE: a `troupe export` file loads into the PyTorch module of the same model
(pytorch_oracle.py's) with strict names and shapes, and the module computes finite logits.
Exit 0 pass, 1 fail, 77 without PyTorch."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pytorch_oracle as oracle  # exits 77 itself without torch

torch = oracle.torch


def main(path):
    tensors, meta = oracle.read_safetensors(path)
    model = oracle.build(meta)
    try:
        model.load_state_dict(tensors, strict=True)
    except RuntimeError as e:
        print(f"load_export: FAIL: {path} does not load into the PyTorch {meta['model']}: {e}")
        return 1
    torch.manual_seed(0)
    if meta["model.kind"] == "gpt":
        x = torch.randint(0, int(meta["model.vocab"]), (2, int(meta["model.context"])))
    else:
        x = torch.randn(2, int(meta["model.inputs"]), dtype=torch.float64)
    logits = model(x)
    if not torch.isfinite(logits).all():
        print(f"load_export: FAIL: the loaded {meta['model']} gives non-finite logits")
        return 1
    print(f"load_export: {path}: {len(tensors)} tensors load into the PyTorch {meta['model']} (step {meta['troupe.step']})")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: load_export.py FILE.safetensors", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
