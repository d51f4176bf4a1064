#!/usr/bin/env python3
"""decode_export.py FILE CORPUS METRICS EVAL_WINDOWS: an exported GPT is usable by itself.

From the export alone (its tensors, its model fields and "model.vocabulary") and the corpus
file, PyTorch (pytorch_oracle.py's module, float64):
  1. rebuilds the held-out windows as troupe reads them (tab as space, other bytes outside
     printable ASCII as '?', tokens by the exported characters, the last 10% held out, windows
     of context + 1 tokens at a stride of context, the first EVAL_WINDOWS of them) and gets the
     test loss troupe logged last in METRICS (metrics.jsonl) to its printed digits;
  2. continues the held-out text's first window greedily and decodes the new tokens into
     characters with the exported vocabulary: they must be the text that follows in the corpus.
Exit 0 pass, 1 fail, 77 without PyTorch."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pytorch_oracle as oracle  # exits 77 itself without torch

torch = oracle.torch
F = oracle.F


def corpus_text(path):
    text = open(path, "rb").read().decode("latin-1")
    return "".join(" " if c == "\t" else c if c == "\n" or 32 <= ord(c) <= 126 else "?" for c in text)


def main(path, corpus, metrics, eval_windows):
    tensors, meta = oracle.read_safetensors(path)
    vocabulary = meta.get("model.vocabulary", "")
    if len(vocabulary) != int(meta["model.vocab"]):
        print(f"decode_export: FAIL: model.vocabulary has {len(vocabulary)} characters, model.vocab is {meta['model.vocab']}")
        return 1
    model = oracle.build(meta)
    model.load_state_dict(tensors, strict=True)
    model.eval()
    T = int(meta["model.context"])
    id_of = {c: i for i, c in enumerate(vocabulary)}
    tokens = [id_of[c] for c in corpus_text(corpus)]
    held_out = torch.tensor(tokens[int(len(tokens) * (1.0 - 0.1)):])
    windows = min((len(held_out) - 1) // T, eval_windows)
    x = torch.stack([held_out[i * T:i * T + T] for i in range(windows)])
    y = torch.stack([held_out[i * T + 1:i * T + T + 1] for i in range(windows)])
    with torch.no_grad():
        loss = F.cross_entropy(model(x).reshape(-1, len(vocabulary)), y.reshape(-1)).item()
    logged = [json.loads(l)["test_loss"] for l in open(metrics) if '"test_loss"' in l][-1]
    print(f"decode_export: test loss over {windows} windows: PyTorch {loss:.7f}, troupe {logged:.7f}")
    ok = abs(loss - logged) < 5e-5  # half the last digit troupe prints (test loss {:.4f})
    # Greedy continuation of the first held-out window, decoded by the exported characters.
    context = held_out[:T].tolist()
    new = []
    with torch.no_grad():
        for _ in range(2 * T):
            nxt = int(model(torch.tensor([context[-T:]]))[0, -1].argmax())
            context.append(nxt)
            new.append(nxt)
    prompt = "".join(vocabulary[t] for t in held_out[:T].tolist())
    got = "".join(vocabulary[t] for t in new)
    want = "".join(vocabulary[t] for t in held_out[T:3 * T].tolist())
    print(f"decode_export: after {prompt!r} the model writes {got!r}; the corpus goes on {want!r}")
    if got != want:
        ok = False
    if not ok:
        print("decode_export: FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 5:
        print("usage: decode_export.py FILE.safetensors CORPUS METRICS EVAL_WINDOWS", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
