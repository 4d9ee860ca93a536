#!/usr/bin/python3
"""The PyTorch side of bench/engine_gpu/ops.c: PyTorch's kernels for the same operations of a
training step, at the same shapes, timed the same way (a warm-up of two calls, then `iters` calls
in a row and a synchronisation: the wall time a call). bf16 tensors, as autocast hands them to the
kernels; the attention is F.scaled_dot_product_attention (causal), the optimizer the fused AdamW
over GPT-2's tensors. Backward operations are timed through torch.autograd.grad on a graph kept
between calls (retain_graph), or as the explicit products autograd makes for a linear layer.
Prints one JSON line an operation, named as ops.c names it; on a machine without CUDA
(--device cpu, the dry run) the same on the CPU."""
import argparse
import json
import time

import torch
import torch.nn.functional as F

ap = argparse.ArgumentParser()
for a, d in (("n-layer", 12), ("n-head", 12), ("n-embd", 768), ("block-size", 1024), ("batch-size", 8),
             ("vocab-size", 50304), ("iters", 20)):
    ap.add_argument("--" + a, type=int, default=d)
ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
args = ap.parse_args()
if args.device == "cuda" and not torch.cuda.is_available():
    print(json.dumps({"impl": "pytorch", "error": "this PyTorch (%s) has no CUDA" % torch.__version__}))
    raise SystemExit(0)
dev = torch.device(args.device)
L, NH, C, T, B, V = args.n_layer, args.n_head, args.n_embd, args.block_size, args.batch_size, args.vocab_size
N, HS, bf = B * T, C // NH, torch.bfloat16
torch.manual_seed(0)


def sync():
    if dev.type == "cuda":
        torch.cuda.synchronize()


def op(name, fn, grad=False):
    if not grad:  # a forward, or explicit products: no graph
        fn = torch.no_grad()(fn)
    for _ in range(2):
        fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(args.iters):
        fn()
    sync()
    print(json.dumps({"op": name, "ms": (time.perf_counter() - t0) * 1e3 / args.iters}), flush=True)


def sdpa(q, k, v):
    """causal attention: PyTorch's fused kernels, or (Debian's PyTorch 1.13, the dry run) the
    explicit product, mask and softmax"""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    s = (q @ k.transpose(-1, -2)) * HS ** -0.5
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=dev).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v


def rnd(*shape, scale=1.0, dtype=bf, grad=False):
    return (torch.randn(*shape, device=dev) * scale).to(dtype).requires_grad_(grad)


print(json.dumps({"impl": "pytorch", "torch": torch.__version__, "device": str(dev),
                  "attention": "sdpa" if hasattr(F, "scaled_dot_product_attention") else "explicit"}),
      flush=True)
x, y, dy = rnd(N, C), rnd(N, C), rnd(N, C)
w_qkv, w_ap, w_fc, w_fp = rnd(C, 3 * C, scale=0.02), rnd(C, C, scale=0.02), rnd(C, 4 * C, scale=0.02), rnd(4 * C, C, scale=0.02)
b = {k: rnd(k * C, scale=0.02) for k in (1, 3, 4)}
dw = {s: torch.zeros(s, device=dev) for s in ((C, 3 * C), (C, C), (C, 4 * C), (4 * C, C))}
db = {k: torch.zeros(k * C, device=dev) for k in (1, 3, 4)}
lnw, lnb = rnd(C), rnd(C, scale=0.02)


def linear_bwd(dout, inp, w, k, dinp=True):
    """what autograd makes of a linear layer under autocast: the input's gradient, and the
    weight's and bias's, added to fp32 gradients"""
    d = dout @ w.t() if dinp else None
    dw[tuple(w.shape)].add_(inp.t() @ dout)
    db[k].add_(dout.sum(0, dtype=torch.float32))
    return d


xl = x.detach().requires_grad_(True)
wl, bl = lnw.detach().requires_grad_(True), lnb.detach().requires_grad_(True)
ln_out = F.layer_norm(xl, (C,), wl, bl)
op("layernorm_fwd", lambda: F.layer_norm(x, (C,), lnw, lnb))
op("matmul_fwd qkv", lambda: torch.addmm(b[3], x, w_qkv))
qkv = torch.addmm(b[3], x, w_qkv).view(B, T, 3, NH, HS)
q, k, v = (qkv[:, :, i].transpose(1, 2).contiguous().requires_grad_(True) for i in range(3))
att = sdpa(q, k, v)
op("attention_fwd", lambda: sdpa(q, k, v))
op("matmul_fwd attproj", lambda: torch.addmm(b[1], x, w_ap))
op("add", lambda: x + y)
pre = torch.addmm(b[4], x, w_fc)
gl = F.gelu(pre, approximate="tanh")
op("matmul_gelu_fwd fc", lambda: F.gelu(torch.addmm(b[4], x, w_fc), approximate="tanh"))
op("matmul_fwd fcproj", lambda: torch.addmm(b[1], gl, w_fp))
op("gelu_fwd (recomputation only)", lambda: F.gelu(pre, approximate="tanh"))
dyf = rnd(N, 4 * C)


def gelu_bwd():
    d = dy @ w_fp.t()
    linear_bwd(dy, gl, w_fp, 1, dinp=False)
    return torch.ops.aten.gelu_backward(d, pre, approximate="tanh")


op("matmul_gelu_bwd fcproj", gelu_bwd)
op("matmul_bwd fc", lambda: linear_bwd(dyf, x, w_fc, 4))
op("layernorm_bwd", lambda: torch.autograd.grad(ln_out, (xl, wl, bl), dy, retain_graph=True), grad=True)
op("matmul_bwd attproj", lambda: linear_bwd(dy, x, w_ap, 1))
do = rnd(B, NH, T, HS)
op("attention_bwd", lambda: torch.autograd.grad(att, (q, k, v), do, retain_graph=True), grad=True)
dq = rnd(N, 3 * C)
op("matmul_bwd qkv", lambda: linear_bwd(dq, x, w_qkv, 3))

tok = torch.randint(0, V, (B, T), device=dev)
wte, wpe = rnd(V, C, scale=0.02, dtype=torch.float32), rnd(T, C, scale=0.01, dtype=torch.float32)
pos = torch.arange(T, device=dev)
op("encoder_fwd", lambda: (wte[tok] + wpe[pos]).to(bf))
wte_a = wte.to(bf)
op("lmhead_fwd", lambda: x @ wte_a.t())
logits = (x @ wte_a.t()).detach().requires_grad_(True)
tgt = tok.view(-1)
op("crossentropy_fused", lambda: torch.autograd.grad(F.cross_entropy(logits.float(), tgt), logits), grad=True)
dl = (torch.randn(N, V, device=dev) * 1e-4).to(bf)
dwte, dwpe = torch.zeros(V, C, device=dev), torch.zeros(T, C, device=dev)


def lmhead_bwd():
    d = dl @ wte_a
    dwte.add_(dl.t() @ x)
    return d


op("lmhead_bwd", lmhead_bwd)


def encoder_bwd():
    dwte.index_add_(0, tgt, dy.float())
    dwpe.add_(dy.view(B, T, C).sum(0, dtype=torch.float32))


op("encoder_bwd", encoder_bwd)

# GPT-2's tensors: the embeddings, each block's twelve, the final LayerNorm
shapes = [(V, C), (T, C)] + [s for _ in range(L) for s in (
    (C,), (C,), (C, 3 * C), (3 * C,), (C, C), (C,), (C,), (C,), (C, 4 * C), (4 * C,), (4 * C, C), (C,))] + [(C,), (C,)]
params = [torch.zeros(s, device=dev, requires_grad=True) for s in shapes]
for p in params:
    p.grad = torch.randn_like(p) * 1e-3
mats = [p for p in params if p.dim() == 2]
op("to_act (the matrices' compute copies)", lambda: [p.detach().to(bf) for p in mats])
op("zero (the gradients)", lambda: [p.grad.zero_() for p in params])
for p in params:
    p.grad = torch.randn_like(p) * 1e-3
op("sumsq (the gradients' norm)", lambda: torch.nn.utils.get_total_norm([p.grad for p in params])
   if hasattr(torch.nn.utils, "get_total_norm") else
   torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params])))
groups = [{"params": [p for p in params if p.dim() == 2], "weight_decay": 0.1},
          {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
fused = {"fused": True} if dev.type == "cuda" else {}  # (Debian's 1.13 has no fused AdamW)
opt = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, **fused)
op("adamw (%d tensors)" % len(params), opt.step, grad=True)
