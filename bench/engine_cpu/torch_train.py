#!/usr/bin/python3
"""The PyTorch side of bench/engine_cpu: the same GPT-2 or Llama block (tests/engine/torch_gpt2.py), AdamW with
decay groups, gradient clipping and random windows of the same shard; full training steps.
Prints one JSON line: median step time and tokens/s over the measured steps."""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "engine"))
from torch_gpt2 import GPT2, Llama  # noqa: E402

ap = argparse.ArgumentParser()
for a in ("n-layer", "n-head", "n-embd", "block-size", "batch-size", "steps", "warmup-steps", "threads"):
    ap.add_argument("--" + a, type=int, required=True)
ap.add_argument("--data", required=True)
ap.add_argument("--arch", default="gpt2", choices=("gpt2", "llama"))
ap.add_argument("--document-token", type=int, default=None,
                help="documents: attention within each, positions restarting (torch_gpt2.documents)")
ap.add_argument("--sliding-window", type=int, default=None,
                help="llama: each query's W most recent keys only (torch_gpt2.slide: an explicit mask)")
args = ap.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(0)
raw = np.fromfile(args.data, dtype=np.uint16, offset=1024)
tokens = torch.from_numpy(raw.astype(np.int64))
T, B = args.block_size, args.batch_size
if args.arch == "llama":  # colo's default MLP width: 8C/3 rounded up to 64
    model = Llama(args.n_layer, args.n_head, args.n_embd, T, 256, (8 * args.n_embd // 3 + 63) // 64 * 64,
                  window=args.sliding_window)
    with torch.no_grad():
        for n in model.names:
            p = model.p[n]
            p.fill_(1.0) if p.dim() == 1 else p.normal_(0.0, 0.02)
else:
    model = GPT2(args.n_layer, args.n_head, args.n_embd, T, 256)
    model.init_gpt2(1337)
model.doc_token = args.document_token
opt = torch.optim.AdamW(model.param_groups(0.1), lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
g = torch.Generator().manual_seed(1)
times = []
for step in range(args.steps):
    ix = torch.randint(len(tokens) - T - 1, (B,), generator=g)
    x = torch.stack([tokens[i:i + T] for i in ix])
    y = torch.stack([tokens[i + 1:i + T + 1] for i in ix])
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = model(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    dt = time.perf_counter() - t0
    if step >= args.warmup_steps:
        times.append(dt)
times.sort()
med = times[len(times) // 2]
print(json.dumps({"impl": "pytorch", "median_ms": med * 1e3, "tokens_per_s": B * T / med,
                  "loss": loss.item(), "torch": torch.__version__}))
