#!/usr/bin/python3
"""colo-train against an independent PyTorch GPT-2 (Debian's python3-torch).

colo-train trains a small model for 10 steps and writes a reference dump (safetensors): its
initial weights, every batch it drew, the loss and gradient norm of every step, the first step's
gradients and the final weights. This script builds its own GPT-2 in PyTorch (written here, not
taken from colo), loads the initial weights, replays the same batches with torch.optim.AdamW,
the same learning-rate schedule and torch.nn.utils.clip_grad_norm_, and compares:

  - the first loss within 1e-5 relative;
  - every gradient tensor within 1e-4 (max |diff| / max |grad| of the tensor);
  - the gradient norms and losses of all 10 steps within 1e-4 relative;
  - the final weights after 10 AdamW steps within 1e-4 absolute.
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt2 import GPT2  # noqa: E402

BIN = os.environ["COLO_BIN"]
torch.set_num_threads(1)
torch.manual_seed(0)

L, NH, C, T, V = 2, 2, 32, 16, 256
B, ACCUM, STEPS = 4, 2, 10
LR, MIN_LR, WARMUP, WD, CLIP, B1, B2, EPS = 3e-3, 3e-4, 3, 0.1, 1.0, 0.9, 0.95, 1e-8


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in hdr.items():
        if name == "__metadata__":
            continue
        assert meta["dtype"] == "F32", (name, meta["dtype"])
        b, e = meta["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(data[b:e], dtype=np.float32).copy()).reshape(meta["shape"])
    return out


def lr_at(step):
    if step < WARMUP:
        return LR * (step + 1) / (WARMUP + 1)
    ratio = (step - WARMUP) / (STEPS - WARMUP)
    return MIN_LR + 0.5 * (1 + math.cos(math.pi * ratio)) * (LR - MIN_LR)


def main():
    tmp = tempfile.mkdtemp(prefix="colo-torch-")
    # a text of its own: deterministic pseudo-words over a few hundred distinct bytes' worth
    rng = np.random.default_rng(5)
    words = ["".join(chr(97 + c) for c in rng.integers(0, 26, rng.integers(1, 8))) for _ in range(300)]
    text = " ".join(words[i] for i in rng.integers(0, 300, 6000)) + "\n"
    with open(os.path.join(tmp, "text.txt"), "w") as f:
        f.write(text)
    subprocess.run([os.path.join(BIN, "colo-train"), "prepare", "--input", os.path.join(tmp, "text.txt"),
                    "--out", tmp], check=True, stdout=subprocess.DEVNULL)
    dump = os.path.join(tmp, "dump.safetensors")
    subprocess.run([os.path.join(BIN, "colo-train"), "train", "--data-root", tmp,
                    "--train-data", "train.bin", "--val-data", "val.bin", "--eval-interval", "0",
                    "--n-layer", str(L), "--n-head", str(NH), "--n-embd", str(C), "--block-size", str(T),
                    "--batch-size", str(B), "--grad-accum", str(ACCUM), "--steps", str(STEPS),
                    "--lr", str(LR), "--min-lr", str(MIN_LR), "--warmup", str(WARMUP),
                    "--weight-decay", str(WD), "--grad-clip", str(CLIP), "--beta2", str(B2),
                    "--seed", "1234", "--threads", "2", "--quiet", "--dump-reference", dump], check=True)
    ref = read_safetensors(dump)

    model = GPT2(L, NH, C, T, V)
    with torch.no_grad():
        for n in model.names:
            model.p[n].copy_(ref["init." + n])
    opt = torch.optim.AdamW(model.param_groups(WD), lr=LR, betas=(B1, B2), eps=EPS)
    failures = []

    def check(what, ok, detail):
        print("%-44s %s  %s" % (what, "ok  " if ok else "FAIL", detail))
        if not ok:
            failures.append(what)

    worst_grad, worst_loss, worst_norm = 0.0, 0.0, 0.0
    for step in range(STEPS):
        opt.zero_grad(set_to_none=False)
        loss_sum = 0.0
        for micro in range(ACCUM):
            batch = ref["batch.%d.%d" % (step, micro)].long()
            idx, tg = batch[:B], batch[B:]
            loss = model(idx, tg)
            (loss / ACCUM).backward()
            loss_sum += loss.item() / ACCUM
        colo_loss = ref["losses"][step].item()
        rel = abs(loss_sum - colo_loss) / abs(loss_sum)
        worst_loss = max(worst_loss, rel)
        if step == 0:
            check("first loss (rel 1e-5)", rel <= 1e-5, "torch %.7f colo %.7f rel %.2e" % (loss_sum, colo_loss, rel))
            for n in model.names:
                g, cg = model.p[n].grad, ref["grad." + n]
                err = (g - cg).abs().max().item() / max(g.abs().max().item(), 1e-12)
                worst_grad = max(worst_grad, err)
                if err > 1e-4:
                    check("gradient " + n, False, "rel %.2e" % err)
            check("gradients, %d tensors (1e-4 of max |grad|)" % len(model.names), worst_grad <= 1e-4,
                  "worst %.2e" % worst_grad)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP).item()
        nrel = abs(norm - ref["grad_norms"][step].item()) / norm
        worst_norm = max(worst_norm, nrel)
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        opt.step()
    check("losses of %d steps (rel 1e-4)" % STEPS, worst_loss <= 1e-4, "worst %.2e" % worst_loss)
    check("gradient norms of %d steps (rel 1e-4)" % STEPS, worst_norm <= 1e-4, "worst %.2e" % worst_norm)
    worst_w = max((model.p[n].detach() - ref["final." + n]).abs().max().item() for n in model.names)
    check("weights after %d AdamW steps (abs 1e-4)" % STEPS, worst_w <= 1e-4, "worst %.2e" % worst_w)
    moved = max((model.p[n].detach() - ref["init." + n]).abs().max().item() for n in model.names)
    check("the weights did move", moved > 1e-3, "max change %.2e" % moved)
    print("%d passed, %d failed" % (6 - len(failures), len(failures)))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
