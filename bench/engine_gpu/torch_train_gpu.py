#!/usr/bin/python3
"""The PyTorch side of bench/engine_gpu: the same GPT-2 (tests/engine/torch_gpt2.py) on the same
GPU, full training steps (forward, backward, clipping, fused AdamW) on the same token shard.
--dtype fp32|tf32|bf16 (bf16: autocast, fp32 master weights); --compile uses torch.compile;
--attention sdpa|explicit (sdpa, the default: F.scaled_dot_product_attention, causal).
Prints one JSON line: median step time, tokens/s, peak memory; or {"error": ...} when this
PyTorch has no CUDA (Debian's python3-torch is built without it)."""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "engine"))
from torch_gpt2 import GPT2  # noqa: E402

ap = argparse.ArgumentParser()
for a in ("n-layer", "n-head", "n-embd", "block-size", "batch-size", "vocab-size", "steps", "warmup-steps"):
    ap.add_argument("--" + a, type=int, required=True)
ap.add_argument("--data", required=True)
ap.add_argument("--dtype", choices=("fp32", "tf32", "bf16"), default="bf16")
ap.add_argument("--compile", action="store_true")
ap.add_argument("--attention", choices=("sdpa", "explicit"), default="sdpa",
                help="sdpa: F.scaled_dot_product_attention (fused; the default); explicit: the "
                "T×T product, mask and softmax of the correctness tests' model")
args = ap.parse_args()
if not torch.cuda.is_available():
    print(json.dumps({"impl": "pytorch", "error": "this PyTorch (%s) has no CUDA" % torch.__version__}))
    sys.exit(0)
torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = args.dtype != "fp32"
torch.backends.cudnn.allow_tf32 = args.dtype != "fp32"
dev = torch.device("cuda")
raw = np.fromfile(args.data, dtype=np.uint16, offset=1024)
tokens = torch.from_numpy(raw.astype(np.int64)).to(dev)
T, B = args.block_size, args.batch_size
model = GPT2(args.n_layer, args.n_head, args.n_embd, T, args.vocab_size)
model.init_gpt2(1337)
model.sdpa = args.attention == "sdpa"
model = model.to(dev)
opt = torch.optim.AdamW(model.param_groups(0.1), lr=1e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
step_fn = torch.compile(model) if args.compile else model
g = torch.Generator(device=dev).manual_seed(1)
times = []
for step in range(args.steps):
    ix = torch.randint(len(tokens) - T - 1, (B,), generator=g, device=dev)
    x = torch.stack([tokens[i:i + T] for i in ix])
    y = torch.stack([tokens[i + 1:i + T + 1] for i in ix])
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.dtype == "bf16"):
        loss = step_fn(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    if step >= args.warmup_steps:
        times.append(dt)
times.sort()
med = times[len(times) // 2]
print(json.dumps({"impl": "pytorch", "dtype": args.dtype, "compile": args.compile, "attention": args.attention,
                  "median_ms": med * 1e3, "tokens_per_s": B * T / med, "loss": loss.item(),
                  "peak_bytes": torch.cuda.max_memory_allocated(), "torch": torch.__version__}))
