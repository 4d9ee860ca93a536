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

A second run adds dynamic loss scaling (fp16's scheme, here on fp32) with overflows planted at
steps 2, 3 and 7: colo-train makes its gradients inf there. The replay follows
torch.cuda.amp.GradScaler's documented rule, written out here because Debian's torch runs
GradScaler on CUDA only: a step with a non-finite gradient is skipped (no optimizer.step) and
halves the scale; after `growth_interval` clean steps the scale doubles. It compares the scale
of every step exactly, and losses, norms and final weights as above.

A third run stores activations in bf16 (`--precision bf16`, emulated on the CPU). The replay
rounds to bf16 at the places colo says it stores (every operation's output and the matrices the
products read, with the gradients rounded on the way back): colo's first gradients must be within
2e-2 of it and closer to it than to the fp32 replay; the losses within 1e-3, and the weights'
movement over the 10 steps within 5e-2.

Two more runs pack documents (--document-token): a document begins at each space (GPT-2) or each
'a' (Llama), attention stays within a document and positions restart at each; the replay builds
its own mask and positions from the tokens (torch_gpt2.documents).

Then the same for model.arch=llama (a Llama block written here too: RMSNorm, rotary positions,
SwiGLU, no biases), in fp32 and bf16, and with one key and value head for the two query heads
(grouped-query attention), with a head of its own (untied), with Llama 3.1's rescaling of
the rotary frequencies (its formula written here as HF's), and with Qwen2's biases on q, k and v
and another RMSNorm epsilon (exported as Qwen2ForCausalLM), and with Qwen3's RMSNorm over each
query and key head (QK-norm, exported as Qwen3ForCausalLM), also with heads wider than C/NH
(model.head_dim, as Qwen3 0.6B's), that in fp32 and bf16; with Mistral 7B v0.1's sliding window of
attention (model.sliding_window, 5 of T=16), alone and within documents; and each llama checkpoint
exported as HuggingFace's LlamaForCausalLM (MistralForCausalLM with the window)
file and config.json, loaded into a model written under HF's names and layout: its loss on a
batch equals the colo-layout model's on the run's final weights.

Last, `--optimizer muon` (GPT-2, Llama with grouped-query attention, Llama): the blocks' weight
matrices by torch.optim.Muon's algorithm (PyTorch 2.9's, written out here as MuonRef: Debian's
torch has no Muon), each of q, k, v and gate, up orthogonalized by itself, with
adjust_lr_fn="match_rms_adamw"; the rest by torch.optim.AdamW. Losses, norms and final weights
as above.
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
from torch_gpt2 import GPT2, HFLlama, Llama  # noqa: E402

BIN = os.environ["COLO_BIN"]
torch.set_num_threads(1)
torch.manual_seed(0)

L, NH, C, T, V = 2, 2, 32, 16, 256
H_LLAMA = 128  # model.arch=llama's default MLP width at C=32: 8·32/3 rounded up to 64
B, ACCUM, STEPS = 4, 2, 10
LR, MIN_LR, WARMUP, WD, CLIP, B1, B2, EPS = 3e-3, 3e-4, 3, 0.1, 1.0, 0.9, 0.95, 1e-8
MUON_LR = 0.02  # optimizer.muon_lr of the run with adjust_lr_fn="original"


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


def colo_train(tmp, dump, extra, data=None):
    """colo-train's 10 steps with the reference dump (data: the shards' directory, else tmp);
    returns the dump's tensors"""
    subprocess.run([os.path.join(BIN, "colo-train"), "train", "--data-root", data or tmp,
                    "--train-data", "train.bin", "--val-data", "val.bin", "--eval-interval", "0",
                    "--n-layer", str(L), "--n-head", str(NH), "--n-embd", str(C), "--block-size", str(T),
                    "--batch-size", str(B), "--grad-accum", str(ACCUM), "--steps", str(STEPS),
                    "--lr", str(LR), "--min-lr", str(MIN_LR), "--warmup", str(WARMUP),
                    "--weight-decay", str(WD), "--grad-clip", str(CLIP), "--beta2", str(B2),
                    "--seed", "1234", "--threads", "2", "--quiet", "--dump-reference", dump] + extra,
                   check=True)
    return read_safetensors(dump)


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
    failures = []

    def check(what, ok, detail):
        print("%-52s %s  %s" % (what, "ok  " if ok else "FAIL", detail))
        if not ok:
            failures.append(what)

    replay(tmp, check, None)
    # prompts and completions: shards with a loss mask, the loss a mean over the completions'
    # targets of the whole batch (both micro-batches)
    with open(os.path.join(tmp, "qa.jsonl"), "w") as f:
        for i in range(200):
            a, b = (int(x) for x in rng.integers(0, 1000, 2))
            f.write(json.dumps({"prompt": "what is %d+%d? " % (a, b) + words[i] * int(rng.integers(0, 4)),
                                "completion": "%d." % (a + b)}) + "\n")
    masked = os.path.join(tmp, "masked")
    subprocess.run([os.path.join(BIN, "colo-train"), "prepare", "--input", os.path.join(tmp, "qa.jsonl"),
                    "--out", masked, "--prompt-field", "prompt", "--completion-field", "completion"],
                   check=True, stdout=subprocess.DEVNULL)
    replay(tmp, check, None, data=masked)
    replay(tmp, check, None, "llama", data=masked)
    # documents: attention within each and positions restarting at each, a document beginning at
    # each space (GPT-2: words, several to a row) or each 'a' (Llama: longer ones)
    replay(tmp, check, None, doc=32)
    replay(tmp, check, None, "llama", doc=97)
    replay(tmp, check, {"init": 1024.0, "window": 3, "planted": [2, 3, 7]})
    replay_bf16(tmp, check)
    replay(tmp, check, None, "llama")
    replay_bf16(tmp, check, "llama")
    replay(tmp, check, None, "llama-mqa")
    replay(tmp, check, None, "llama-untied")
    replay(tmp, check, None, "llama-rope3")
    replay(tmp, check, None, "qwen2")
    replay(tmp, check, None, "qwen3")
    replay(tmp, check, None, "qwen3-wide")
    replay_bf16(tmp, check, "qwen3-wide")
    replay(tmp, check, None, "mistral")
    replay(tmp, check, None, "mistral", doc=97)
    replay(tmp, check, None, optim="muon")
    replay(tmp, check, None, "llama-mqa", optim="muon")
    replay(tmp, check, None, "llama", optim="muon-original")
    # the weights' moving average (train.ema_decay) against torch's AveragedModel
    replay(tmp, check, {"init": 1024.0, "window": 3, "planted": [2, 3, 7]}, ema=0.8)
    for arch in ("llama", "llama-mqa", "llama-untied", "llama-rope3", "qwen2", "qwen3", "qwen3-wide",
                 "mistral"):
        export_llama(tmp, check, arch)
    print("%d failed" % len(failures))
    sys.exit(1 if failures else 0)


class ScalerRef:
    """torch.cuda.amp.GradScaler's update rule (growth 2, backoff 0.5)."""

    def __init__(self, init, interval):
        self.scale, self.interval, self.good = init, interval, 0

    def update(self, found_inf):
        if found_inf:
            self.scale *= 0.5
            self.good = 0
        else:
            self.good += 1
            if self.good == self.interval:
                self.scale *= 2.0
                self.good = 0


# the architectures replayed: colo-train's flags for each
ARCH_ARGS = {"gpt2": ["--arch", "gpt2"], "llama": ["--arch", "llama"],
             "llama-mqa": ["--arch", "llama", "--n-kv-head", "1"],
             "llama-untied": ["--arch", "llama", "--tie-embeddings", "false"],
             "llama-rope3": ["--arch", "llama", "--rope-scaling-factor", "8", "--rope-original-context", "32"],
             # Qwen2's block: q, k and v biases, RMSNorm eps 1e-6 (here 1e-2, where it weighs)
             "qwen2": ["--arch", "llama", "--n-kv-head", "1", "--qkv-bias", "true", "--rms-norm-eps", "1e-2"],
             # Qwen3's block: RMSNorm over each query and key head (QK-norm), eps as qwen2's
             "qwen3": ["--arch", "llama", "--n-kv-head", "1", "--qk-norm", "true", "--rms-norm-eps", "1e-2"],
             # and with heads wider than C/NH, as Qwen3 0.6B's (128 on 1024 with 16 heads): 24 of 32
             # with 2 heads, the queries 48 wide
             "qwen3-wide": ["--arch", "llama", "--n-kv-head", "1", "--qk-norm", "true", "--rms-norm-eps", "1e-2",
                            "--head-dim", "24"],
             # Mistral 7B v0.1's block: Llama's with grouped-query attention in a sliding window (its
             # 4096 of 32768 positions; here 5 of 16, so that most queries see less than their row)
             "mistral": ["--arch", "llama", "--n-kv-head", "1", "--sliding-window", "5"]}
# llama-rope3's Llama 3.1 rescaling: at head size 16 and an original context of 32, its 8
# frequencies fall in all three bands (kept, blended, divided by the factor)
ROPE3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
         "original_max_position_embeddings": 32}


def make_model(arch):
    if arch == "gpt2":
        return GPT2(L, NH, C, T, V)
    qwen = arch.startswith("qwen")
    return Llama(L, NH, C, T, V, H_LLAMA, NKV=1 if arch in ("llama-mqa", "mistral") or qwen else None,
                 untied=arch == "llama-untied", scaling=ROPE3 if arch == "llama-rope3" else None,
                 qkv_bias=arch == "qwen2", eps=1e-2 if qwen else 1e-5, qk_norm=arch.startswith("qwen3"),
                 head_dim=24 if arch == "qwen3-wide" else None, window=5 if arch == "mistral" else None)


def newton_schulz(G, steps=5, eps=1e-7):
    """torch.optim.Muon's _zeropower_via_newtonschulz (PyTorch 2.9), in fp32: the matrix (its
    transpose when taller than wide) over its Frobenius norm, then five quintic iterations"""
    a, b, c = 3.4445, -4.7750, 2.0315
    X = G.T if G.size(0) > G.size(1) else G
    X = X / X.norm().clamp(min=eps)
    for _ in range(steps):
        A = X @ X.T
        B = torch.addmm(A, A, A, beta=b, alpha=c)
        X = torch.addmm(X, B, X, beta=a)
    return X.T if G.size(0) > G.size(1) else X


class MuonRef:
    """torch.optim.Muon's step (PyTorch 2.9; Debian's torch has none) with adjust_lr_fn=
    "match_rms_adamw", nesterov: buf.lerp_(g, 1 − β); u = g.lerp(buf, β); each of the tensor's
    matrices (blocks: column ranges; q, k and v of c_attn, gate and up of Llama's c_fc)
    orthogonalized and scaled by 0.2·√max(rows, cols); p·(1 − lr·wd) − lr·that. With
    original: adjust_lr_fn="original", √max(1, A/B) of the nn.Linear (A out × B in) a block is:
    these blocks are [in][out], so out/in is columns over rows."""

    def __init__(self, params, blocks, beta, wd, original=False):
        self.params, self.blocks, self.beta, self.wd = params, blocks, beta, wd
        self.original = original
        self.buf = {n: torch.zeros_like(p) for n, p in params.items()}

    def scale(self, rows, cols):
        return math.sqrt(max(1.0, cols / rows)) if self.original else 0.2 * math.sqrt(max(rows, cols))

    @torch.no_grad()
    def step(self, lr):
        for n, p in self.params.items():
            g = p.grad
            self.buf[n].lerp_(g, 1 - self.beta)
            u = g.lerp(self.buf[n], self.beta)
            out = torch.empty_like(u)
            for c0, c1 in self.blocks[n]:
                blk = u[:, c0:c1]
                out[:, c0:c1] = newton_schulz(blk) * self.scale(*blk.shape)
            p.mul_(1 - lr * self.wd)
            p.add_(out, alpha=-lr)


def muon_blocks(model, n, arch):
    """the column ranges Muon orthogonalizes one by one in tensor n"""
    rows, cols = model.p[n].shape
    if n.endswith("attn.c_attn.weight"):  # [C][C + 2·KV]
        kv = (cols - C) // 2
        return [(0, C), (C, C + kv), (C + kv, cols)]
    if n.endswith("mlp.c_fc.weight") and arch != "gpt2":  # Llama's [C][2H]: gate, up
        return [(0, cols // 2), (cols // 2, cols)]
    return [(0, cols)]


def replay(tmp, check, ls, arch="gpt2", data=None, doc=None, optim="adamw", ema=None):
    tag = ("" if ls is None else "[loss scaling] ") + ("" if arch == "gpt2" else "[%s] " % arch) + \
        ("" if data is None else "[loss mask] ") + ("" if doc is None else "[documents] ") + \
        ("" if optim == "adamw" else "[%s] " % optim) + ("" if ema is None else "[ema] ")
    dump = os.path.join(tmp, "dump%s-%s%s%s%s%s.safetensors" % ("" if ls is None else "-ls", arch,
                                                                 "" if data is None else "-mask",
                                                                 "" if doc is None else "-doc",
                                                                 "" if optim == "adamw" else "-" + optim,
                                                                 "" if ema is None else "-ema"))
    extra = ARCH_ARGS[arch] + ([] if ls is None else [
        "--loss-scaling", "dynamic", "--loss-scale-init", str(ls["init"]),
        "--loss-scale-window", str(ls["window"]),
        "--plant-overflow", ",".join(str(x) for x in ls["planted"])]) + \
        ([] if doc is None else ["--document-token", str(doc)]) + \
        ([] if optim == "adamw" else ["--optimizer", "muon"]) + \
        (["--muon-adjust-lr", "original", "--muon-lr", str(MUON_LR)] if optim == "muon-original" else []) + \
        ([] if ema is None else ["--ema-decay", str(ema)])
    ref = colo_train(tmp, dump, extra, data)
    names = [k[len("init."):] for k in ref if k.startswith("init.")]

    model = make_model(arch)
    if doc is not None:
        model.doc_token = doc
        idx = torch.cat([ref["batch.%d.%d" % (s, m)][:B] for s in range(STEPS) for m in range(ACCUM)])
        inside = int((idx[:, 1:] == doc).sum())
        check(tag + "documents begin inside the rows", inside >= len(idx) // 4,
              "%d beginnings after a row's first token, in %d rows" % (inside, len(idx)))
    if data is not None:  # the mean over the batch's targets that count, not each micro-batch's
        model.reduction = "sum"
        tgs = [ref["batch.%d.%d" % (0, m)][B:] for m in range(ACCUM)]
        counted = sum(int((t >= 0).sum()) for t in tgs)
        check(tag + "the dump's targets: some left out, some counted", 0 < counted < ACCUM * B * T,
              "%d of %d count" % (counted, ACCUM * B * T))
    check(tag + "the same tensors, by name and shape", sorted(names) == sorted(model.names) and
          all(tuple(ref["init." + n].shape) == tuple(model.p[n].shape) for n in model.names),
          "%d tensors" % len(names))
    with torch.no_grad():
        for n in model.names:
            model.p[n].copy_(ref["init." + n])
    muon = None
    if optim.startswith("muon"):  # the blocks' matrices by Muon, the rest by AdamW
        mu = [n for n in model.names if n.startswith("transformer.h.") and model.p[n].dim() == 2]
        rest = [n for n in model.names if n not in mu]
        opt = torch.optim.AdamW([{"params": [model.p[n] for n in rest if model.p[n].dim() == 2],
                                  "weight_decay": WD},
                                 {"params": [model.p[n] for n in rest if model.p[n].dim() == 1],
                                  "weight_decay": 0.0}], lr=LR, betas=(B1, B2), eps=EPS)
        muon = MuonRef({n: model.p[n] for n in mu}, {n: muon_blocks(model, n, arch) for n in mu},
                       0.95, WD, optim == "muon-original")
        nblocks = sum(len(b) for b in muon.blocks.values())
        check(tag + "Muon's matrices", nblocks == L * (6 if arch == "gpt2" else 7),
              "%d tensors, %d matrices" % (len(mu), nblocks))
    else:
        opt = torch.optim.AdamW(model.param_groups(WD), lr=LR, betas=(B1, B2), eps=EPS)
    scaler = None if ls is None else ScalerRef(ls["init"], ls["window"])
    # the moving average: torch's AveragedModel (its first update copies the weights) over the
    # steps that changed the weights (not the skipped), each later one a lerp by 1 - decay, as
    # torch 2's get_ema_multi_avg_fn (this torch, 1.13, predates it: its avg_fn, written here)
    averaged = None if ema is None else torch.optim.swa_utils.AveragedModel(
        model, avg_fn=lambda avg, cur, n: torch.lerp(avg, cur, 1.0 - ema))

    worst_grad, worst_loss, worst_norm, scales_ok, skipped = 0.0, 0.0, 0.0, True, 0
    for step in range(STEPS):
        opt.zero_grad(set_to_none=False)
        for n in (muon.params if muon is not None else ()):
            if model.p[n].grad is not None:
                model.p[n].grad.zero_()
        scale = 1.0 if scaler is None else scaler.scale
        loss_sum = 0.0
        batches = [ref["batch.%d.%d" % (step, micro)].long() for micro in range(ACCUM)]
        # the loss's divisor: ACCUM means of B·T targets, or the batch's targets that count
        div = ACCUM if data is None else sum(int((b[B:] >= 0).sum()) for b in batches)
        for batch in batches:
            idx, tg = batch[:B], batch[B:]
            loss = model(idx, tg)
            (loss * scale / div).backward()
            loss_sum += loss.item() / div
        colo_loss = ref["losses"][step].item()
        rel = abs(loss_sum - colo_loss) / abs(loss_sum)
        worst_loss = max(worst_loss, rel)
        if step == 0:
            check(tag + "first loss (rel 1e-5)", rel <= 1e-5, "torch %.7f colo %.7f rel %.2e" % (loss_sum, colo_loss, rel))
            for n in model.names:
                g, cg = model.p[n].grad / scale, ref["grad." + n] / scale
                err = (g - cg).abs().max().item() / max(g.abs().max().item(), 1e-12)
                worst_grad = max(worst_grad, err)
                if err > 1e-4:
                    check(tag + "gradient " + n, False, "rel %.2e" % err)
            check(tag + "gradients, %d tensors (1e-4 of max |grad|)" % len(model.names), worst_grad <= 1e-4,
                  "worst %.2e" % worst_grad)
        if scaler is not None:
            if ref["loss_scales"][step].item() != scale:
                scales_ok = False
                print("step %d: colo's scale %g, torch's %g" % (step + 1, ref["loss_scales"][step].item(), scale))
            if step + 1 in ls["planted"]:  # the fault colo-train planted
                with torch.no_grad():
                    model.p[model.names[0]].grad.view(-1)[0] = float("inf")
            found_inf = any(not torch.isfinite(model.p[n].grad).all() for n in model.names)
            scaler.update(found_inf)
            if found_inf:
                skipped += 1
                continue
            with torch.no_grad():
                for n in model.names:
                    model.p[n].grad.div_(scale)  # GradScaler.unscale_
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP).item()
        nrel = abs(norm - ref["grad_norms"][step].item()) / norm
        worst_norm = max(worst_norm, nrel)
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        opt.step()
        if muon is not None:
            muon.step(lr_at(step) * (MUON_LR / LR if muon.original else 1.0))
        if averaged is not None:
            averaged.update_parameters(model)
    check(tag + "losses of %d steps (rel 1e-4)" % STEPS, worst_loss <= 1e-4, "worst %.2e" % worst_loss)
    check(tag + "gradient norms of %d taken steps (rel 1e-4)" % (STEPS - skipped), worst_norm <= 1e-4,
          "worst %.2e" % worst_norm)
    if scaler is not None:
        check(tag + "the scale of every step (exact)", scales_ok,
              "%s" % " ".join("%g" % x for x in ref["loss_scales"].tolist()))
        check(tag + "steps skipped", skipped == len(ls["planted"]), "%d" % skipped)
    worst_w = max((model.p[n].detach() - ref["final." + n]).abs().max().item() for n in model.names)
    check(tag + "weights after %d %s steps (abs 1e-4)" % (STEPS - skipped, "AdamW" if muon is None else "Muon and AdamW"),
          worst_w <= 1e-4,
          "worst %.2e" % worst_w)
    if averaged is not None:
        avg = dict(averaged.module.named_parameters())
        keys = {n: [k for k in avg if avg[k] is averaged.module.p[n]] for n in model.names}
        worst_e = max((averaged.module.p[n].detach() - ref["ema." + n]).abs().max().item()
                      for n in model.names)
        apart = max((averaged.module.p[n].detach() - model.p[n].detach()).abs().max().item()
                    for n in model.names)
        check(tag + "the moving average after %d steps (abs 1e-5)" % int(averaged.n_averaged),
              worst_e <= 1e-5 and int(averaged.n_averaged) == STEPS - skipped and
              all(keys.values()), "worst %.2e; %.2e from the weights" % (worst_e, apart))
        check(tag + "the moving average lags the weights", apart > 1e-3, "%.2e" % apart)
    moved = max((model.p[n].detach() - ref["init." + n]).abs().max().item() for n in model.names)
    check(tag + "the weights did move", moved > 1e-3, "max change %.2e" % moved)


class RoundBF16(torch.autograd.Function):
    """a stored activation: rounded to bf16 (nearest, ties to even) on the way forward, and its
    gradient on the way back"""

    @staticmethod
    def forward(ctx, x):
        return x.to(torch.bfloat16).float()

    @staticmethod
    def backward(ctx, g):
        return g.to(torch.bfloat16).float()


def grad_err(model, ref):
    return max((model.p[n].grad - ref["grad." + n]).abs().max().item() /
               max(model.p[n].grad.abs().max().item(), 1e-12) for n in model.names)


def replay_bf16(tmp, check, arch="gpt2"):
    """colo-train with bf16 activations against this GPT-2 with bf16 rounding at the same places
    (RoundBF16 on every operation's output and on the matrices the products read), and against
    it in fp32: the first gradients must be closer to the bf16 replay than to the fp32 one, so
    the rounding is where colo says it is; the losses of the 10 steps and the weights' movement
    match the bf16 replay."""
    tag = "[bf16 activations] " + ("" if arch == "gpt2" else "[%s] " % arch)
    dump = os.path.join(tmp, "dump-bf16-%s.safetensors" % arch)
    ref = colo_train(tmp, dump, ["--precision", "bf16"] + ARCH_ARGS[arch])
    models = {}
    for kind in ("bf16", "fp32"):
        m = make_model(arch)
        with torch.no_grad():
            for n in m.names:
                m.p[n].copy_(ref["init." + n])
        models[kind] = m
    store = {"bf16": RoundBF16.apply, "fp32": None}
    opts = {k: torch.optim.AdamW(models[k].param_groups(WD), lr=LR, betas=(B1, B2), eps=EPS)
            for k in models}
    worst_loss = 0.0
    for step in range(STEPS):
        for kind in ("bf16", "fp32"):
            models[kind].zero_grad(set_to_none=False)
            loss_sum = 0.0
            for micro in range(ACCUM):
                batch = ref["batch.%d.%d" % (step, micro)].long()
                loss = models[kind](batch[:B], batch[B:], store[kind])
                (loss / ACCUM).backward()
                loss_sum += loss.item() / ACCUM
            if kind == "bf16":
                worst_loss = max(worst_loss, abs(loss_sum - ref["losses"][step].item()) / loss_sum)
        if step == 0:
            e16, e32 = grad_err(models["bf16"], ref), grad_err(models["fp32"], ref)
            check(tag + "gradients: against torch bf16 (2e-2), < fp32's", e16 <= 2e-2 and e16 < e32,
                  "worst %.2e; against torch fp32 %.2e" % (e16, e32))
        for kind in ("bf16", "fp32"):
            torch.nn.utils.clip_grad_norm_(models[kind].parameters(), CLIP)
            for g in opts[kind].param_groups:
                g["lr"] = lr_at(step)
            opts[kind].step()
    check(tag + "losses of %d steps (rel 1e-3)" % STEPS, worst_loss <= 1e-3, "worst %.2e" % worst_loss)

    def moved_err(m):  # |Δw_torch − Δw_colo| / |Δw_colo| over all weights
        d = sum(((m.p[n].detach() - ref["final." + n]) ** 2).sum().item() for n in m.names)
        w = sum(((ref["final." + n] - ref["init." + n]) ** 2).sum().item() for n in m.names)
        return math.sqrt(d / w)
    e16, e32 = moved_err(models["bf16"]), moved_err(models["fp32"])
    check(tag + "weights' movement in %d steps (rel 5e-2)" % STEPS, e16 <= 5e-2,
          "rel %.2e (against the fp32 replay: %.2e)" % (e16, e32))


def export_llama(tmp, check, arch):
    """colo-train export of a llama (or qwen2) checkpoint as LlamaForCausalLM's (Qwen2ForCausalLM's) file and config: loaded into
    HFLlama, an implementation under HF's names and nn.Linear layout, its loss on a batch is the
    colo-layout model's on the same weights (the run's final ones, from its reference dump)."""
    tag = "[%s export] " % arch
    dump, ck = os.path.join(tmp, "dump-export-%s.safetensors" % arch), os.path.join(tmp, "ck-" + arch)
    ref = colo_train(tmp, dump, ARCH_ARGS[arch] + ["--ckpt-dir", ck])
    out = os.path.join(tmp, "hf-%s.safetensors" % arch)
    cfgp = os.path.join(tmp, "config-%s.json" % arch)
    subprocess.run([os.path.join(BIN, "colo-train"), "export", "--checkpoint", ck, "--out", out,
                    "--config", cfgp], check=True)
    cfg = json.load(open(cfgp))
    qwen = arch.startswith("qwen")
    hf_arch = {"qwen2": "Qwen2ForCausalLM", "mistral": "MistralForCausalLM"}.get(
        arch, "Qwen3ForCausalLM" if qwen else "LlamaForCausalLM")
    check(tag + "config.json", cfg["architectures"] == [hf_arch] and
          cfg["model_type"] == (arch[:5] if qwen else "mistral" if arch == "mistral" else "llama") and
          cfg.get("sliding_window") == (5 if arch == "mistral" else None) and
          cfg["rms_norm_eps"] == (1e-2 if qwen else 1e-5) and
          (not arch.startswith("qwen3") or
           (cfg["head_dim"] == (24 if arch == "qwen3-wide" else C // NH) and not cfg["attention_bias"])) and
          cfg["hidden_size"] == C and cfg["intermediate_size"] == H_LLAMA and
          cfg["num_hidden_layers"] == L and cfg["num_attention_heads"] == NH and
          cfg["vocab_size"] == V and cfg["tie_word_embeddings"] is (arch != "llama-untied") and
          cfg["num_key_value_heads"] == (1 if arch in ("llama-mqa", "mistral") or qwen else NH) and
          cfg.get("rope_scaling") == (ROPE3 if arch == "llama-rope3" else None),
          "%d layers, %d wide, MLP %d, %d key heads" % (cfg["num_hidden_layers"], cfg["hidden_size"],
                                                        cfg["intermediate_size"], cfg["num_key_value_heads"]))
    hf = HFLlama(cfg)
    tensors = read_safetensors(out)
    hf.load(tensors)
    ours = make_model(arch)
    with torch.no_grad():
        for n in ours.names:
            ours.p[n].copy_(ref["final." + n])
        batch = ref["batch.0.0"].long()
        a, b = ours(batch[:B], batch[B:]).item(), hf(batch[:B], batch[B:]).item()
    rel = abs(a - b) / abs(a)
    check(tag + "HF layout's loss = colo layout's (rel 1e-6)", rel <= 1e-6,
          "%d tensors; colo layout %.7f, %s layout %.7f, rel %.2e" % (len(tensors), a, cfg["architectures"][0], b, rel))


if __name__ == "__main__":
    main()
