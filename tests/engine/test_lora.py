#!/usr/bin/python3
"""LoRA (train.lora_rank) against PyTorch (Debian's python3-torch).

colo-train trains a small base model, then LoRA adapters on it for 10 steps (2 micro-batches a
step, AdamW with weight decay, clipping, a warm-up and cosine schedule) with a reference dump: the
base's weights, the adapters' initial values, every batch, each step's loss and gradient norm,
the first step's adapter gradients and the final adapters and weights. The replay here is
PyTorch's own: the base model of torch_gpt2.py, frozen, each adapted weight replaced in the
forward by W + (alpha/r)·(B·A)ᵀ, a merged matrix (colo runs the update as two products of
its own and never forms it), with autograd giving A's and B's gradients and torch.optim.AdamW
and clip_grad_norm_ updating them. It checks:

  - the first loss within 1e-5 relative, and that it is the base's (B starts at zero);
  - every adapter gradient of the first step within 1e-4 of the tensor's largest;
  - the losses and gradient norms of all 10 steps within 1e-4 relative;
  - the adapters after 10 steps within 1e-4 absolute; the base's weights unchanged, bit for bit;
  - a run stopped at step 5 and resumed: its step-10 checkpoint the same, byte for byte;
  - `colo-train export` of the run's checkpoint: the base with the adapters merged, within 1e-6
    of W + (alpha/r)·(B·A)ᵀ of its adapters, computed here;
  - `colo-train eval` of the LoRA checkpoint: the merged export's loss on the same windows,
    within 1e-5 relative;
  - `colo-train export --format peft`: adapter_config.json (r, lora_alpha, target_modules,
    fan_in_fan_out, the base's path), and adapter_model.safetensors applied as PEFT applies it
    (W += (lora_alpha/r)·B·A on each module, HF's [out][in] weights; Llama's fused products split
    into q_proj, k_proj, v_proj and gate_proj, up_proj) to the base model's own export gives the
    merged export's loss within 1e-5.

For GPT-2 with every product adapted, and for Llama with grouped-query attention with the
queries/keys/values and the MLP's down projection adapted. Then data parallelism: the GPT-2 run on
two ranks (--nproc 2, half the batch each) against one, the losses within 1e-5 relative and the
adapters within 1e-4 (AdamW near zero magnifies the sums' other order). Then pipeline stages
(pipeline(): bit for bit one rank's with one micro-batch, QLoRA too) and tensor parallelism
(tensor_parallel(): within those tolerances, with sequence parallelism, GQA and dropout), each
resumed from and into other layouts. Then continued(): a LoRA run started from this one's
checkpoint goes on training its adapters on its base, as PyTorch's AdamW from them does (1e-4),
resumed in bytes, with NF4, and refused with another rank or DoRA; a run that is not LoRA starts
from the model the export merges, bit for bit (refused on tensor-parallel ranks).
Then neftune(): NEFTune's noise on the embeddings, made again in numpy, against PyTorch.
Exit 0 when all pass.
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_torch_reference import read_safetensors  # noqa: E402
from torch_gpt2 import GPT2, Llama  # noqa: E402

COLO = os.path.join(os.environ["COLO_BIN"], "colo-train")
torch.set_num_threads(1)

L, NH, C, T, V, H_LLAMA = 2, 2, 32, 16, 256, 128
B, ACCUM, STEPS = 4, 2, 10
LR, MIN_LR, WARMUP, WD, CLIP, B1, B2, EPS = 3e-3, 3e-4, 3, 0.1, 1.0, 0.9, 0.95, 1e-8
RANK, ALPHA = 4, 8.0
SCALE = ALPHA / RANK

failures = []


def check(what, ok, detail):
    print("%-58s %s  %s" % (what, "ok  " if ok else "FAIL", detail))
    if not ok:
        failures.append(what)


def colo(args, **kw):
    r = subprocess.run([COLO] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if r.returncode != 0:
        print(r.stdout)
        raise SystemExit("colo-train %s failed (%d)" % (args[0], r.returncode))
    return r.stdout


MODEL = ["--n-layer", str(L), "--n-head", str(NH), "--n-embd", str(C), "--block-size", str(T),
         "--vocab-size", str(V)]
ARCH = {"gpt2": ["--arch", "gpt2"], "llama": ["--arch", "llama", "--n-kv-head", "1"]}
TARGETS = {"gpt2": "all", "llama": "attn.c_attn,mlp.c_proj"}
MODULES = {"all": ["attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"],
           "attn.c_attn,mlp.c_proj": ["attn.c_attn", "mlp.c_proj"]}


def lr_at(step):
    if step < WARMUP:
        return LR * (step + 1) / (WARMUP + 1)
    ratio = (step - WARMUP) / (STEPS - WARMUP)
    return MIN_LR + 0.5 * (1 + math.cos(math.pi * ratio)) * (LR - MIN_LR)


def make_model(arch):
    if arch == "gpt2":
        return GPT2(L, NH, C, T, V)
    return Llama(L, NH, C, T, V, H_LLAMA, NKV=1)


class Adapted:
    """the base model, frozen, with each adapted weight W replaced by W + scale·(B·A)ᵀ"""

    def __init__(self, arch, base, modules, scale=SCALE):
        self.scale = scale
        self.m = make_model(arch)
        with torch.no_grad():
            for n in self.m.names:
                self.m.p[n].copy_(base[n])
                self.m.p[n].requires_grad_(False)
        self.base = {n: self.m.p[n] for n in self.m.names}
        self.ab = {}
        for layer in range(L):
            for mod in modules:
                for ab in "AB":
                    self.ab["transformer.h.%d.%s.lora_%s.weight" % (layer, mod, ab)] = None

    def weight(self, layer, mod):
        h = "transformer.h.%d.%s." % (layer, mod)
        A, Bm = self.ab[h + "lora_A.weight"], self.ab[h + "lora_B.weight"]
        return self.base[h + "weight"] + self.scale * (Bm @ A).t()

    def forward(self, idx, tg):
        for name in list(self.ab):
            if name.endswith("lora_A.weight"):
                layer, mod = int(name.split(".")[2]), ".".join(name.split(".")[3:5])
                self.m.p["transformer.h.%d.%s.weight" % (layer, mod)] = self.weight(layer, mod)
        return self.m(idx, tg)


def replay(forward, ref, opt, params, rates, first=None):
    """colo's STEPS steps again in PyTorch from its dump `ref`: each step's micro-batches through
    forward(idx, tg, step, micro), clipping, and opt's groups at lr_at(step) times their `rates`;
    first(loss, rel) sees the first step's gradients before clipping. Returns the worst relative
    loss and norm."""
    worst_loss = worst_norm = 0.0
    for step in range(STEPS):
        opt.zero_grad(set_to_none=False)
        loss_sum = 0.0
        for micro in range(ACCUM):
            batch = ref["batch.%d.%d" % (step, micro)].long()
            loss = forward(batch[:B], batch[B:], step, micro)
            (loss / ACCUM).backward()
            loss_sum += loss.item() / ACCUM
        rel = abs(loss_sum - ref["losses"][step].item()) / abs(loss_sum)
        worst_loss = max(worst_loss, rel if rel == rel else math.inf)  # NaN never passes
        if step == 0 and first:
            first(loss_sum, rel)
        norm = torch.nn.utils.clip_grad_norm_(params, CLIP).item()
        rel = abs(norm - ref["grad_norms"][step].item()) / norm
        worst_norm = max(worst_norm, rel if rel == rel else math.inf)
        for g, rate in zip(opt.param_groups, rates):
            g["lr"] = lr_at(step) * rate
        opt.step()
    return worst_loss, worst_norm


def train_base(tmp, arch, model):
    """a base to adapt: 30 steps of the model flags `model`, checkpoints in tmp/ARCH-base"""
    base_dir = os.path.join(tmp, arch + "-base")
    colo(["train", "--data-root", tmp, "--train-data", "train.bin", "--eval-interval", "0", "--steps", "30",
          "--batch-size", "4", "--lr", "1e-2", "--seed", "7", "--threads", "2", "--quiet",
          "--ckpt-dir", base_dir] + model)
    return base_dir


def run(tmp, arch):
    tag = "[%s] " % arch
    train_base(tmp, arch, MODEL + ARCH[arch])
    base_ckpt = os.path.join(arch + "-base", "step_00000030")  # under the data root
    dump, ckpt = os.path.join(tmp, arch + "-lora.dump"), os.path.join(tmp, arch + "-lora")
    lora_run = ["train", "--data-root", tmp, "--train-data", "train.bin", "--eval-interval", "0",
                "--batch-size", str(B), "--grad-accum", str(ACCUM), "--steps", str(STEPS),
                "--lr", str(LR), "--min-lr", str(MIN_LR), "--warmup", str(WARMUP),
                "--weight-decay", str(WD), "--grad-clip", str(CLIP), "--beta2", str(B2),
                "--seed", "1234", "--threads", "2", "--init-from", base_ckpt,
                "--lora-rank", str(RANK), "--lora-alpha", str(ALPHA), "--lora-targets", TARGETS[arch]
                ] + MODEL + ARCH[arch]
    out = colo(lora_run + ["--ckpt-dir", ckpt, "--dump-reference", dump, "--export-format", "peft"])
    # stopped halfway and resumed: the same adapters and moments, bit for bit
    halves = os.path.join(tmp, arch + "-halves")
    colo(lora_run + ["--ckpt-dir", halves, "--stop-at", str(STEPS // 2), "--quiet"])
    colo(lora_run + ["--ckpt-dir", halves, "--resume", "auto", "--quiet"])
    f = "step_%08d/rank_00000.safetensors" % STEPS
    check(tag + "stopped at step %d and resumed: the same checkpoint (bytes)" % (STEPS // 2),
          open(os.path.join(ckpt, f), "rb").read() == open(os.path.join(halves, f), "rb").read(), f)
    line = [x for x in out.splitlines() if x.startswith("lora:")]
    check(tag + "colo-train says what trains", len(line) == 1, line[0] if line else out[-300:])
    ref = read_safetensors(dump)
    modules = MODULES[TARGETS[arch]]
    model = Adapted(arch, {n: ref["init." + n] for n in make_model(arch).names}, modules)
    names = sorted(model.ab)
    got = sorted(k[len("init."):] for k in ref if k.startswith("init.") and ".lora_" in k)
    check(tag + "the adapters, by name", got == names, "%d tensors" % len(got))
    shapes_ok = True
    for n in names:
        t = ref["init." + n].clone().requires_grad_(True)
        model.ab[n] = t
        w = model.base[n.replace(".lora_A", "").replace(".lora_B", "")]
        want = (RANK, w.shape[0]) if ".lora_A" in n else (w.shape[1], RANK)
        shapes_ok &= tuple(t.shape) == want
    check(tag + "A [r][in], B [out][r]", shapes_ok, "r=%d" % RANK)
    b_zero = all(float(ref["init." + n].abs().max()) == 0.0 for n in names if ".lora_B" in n)
    a_bound = max(float(ref["init." + n].abs().max()) * math.sqrt(ref["init." + n].shape[1])
                  for n in names if ".lora_A" in n)
    check(tag + "init: B zero, A within 1/sqrt(in)", b_zero and 0.5 < a_bound <= 1.0,
          "max |A|·sqrt(in) %.3f" % a_bound)

    params = [model.ab[n] for n in names]
    opt = torch.optim.AdamW(params, lr=LR, betas=(B1, B2), eps=EPS, weight_decay=WD)

    def first(loss_sum, rel):
        with torch.no_grad():
            plain = make_model(arch)
            for n in plain.names:
                plain.p[n].copy_(model.base[n])
            base_loss = sum(plain(ref["batch.0.%d" % m].long()[:B], ref["batch.0.%d" % m].long()[B:]).item()
                            for m in range(ACCUM)) / ACCUM
        check(tag + "first loss (rel 1e-5), the base's", rel <= 1e-5 and abs(base_loss - loss_sum) <= 1e-6 * loss_sum,
              "torch %.7f colo %.7f base %.7f" % (loss_sum, ref["losses"][0].item(), base_loss))
        worst_grad = 0.0
        for n in names:
            g, cg = model.ab[n].grad, ref["grad." + n]
            worst_grad = max(worst_grad, (g - cg).abs().max().item() / max(g.abs().max().item(), 1e-12))
        check(tag + "adapter gradients, %d tensors (1e-4 of max)" % len(names), worst_grad <= 1e-4,
              "worst %.2e" % worst_grad)

    worst_loss, worst_norm = replay(lambda i, t, st, mi: model.forward(i, t), ref, opt, params, [1.0],
                                    first)
    check(tag + "losses of %d steps (rel 1e-4)" % STEPS, worst_loss <= 1e-4, "worst %.2e" % worst_loss)
    check(tag + "gradient norms of %d steps (rel 1e-4)" % STEPS, worst_norm <= 1e-4, "worst %.2e" % worst_norm)
    worst_w = max((model.ab[n].detach() - ref["final." + n]).abs().max().item() for n in names)
    moved = max((ref["final." + n] - ref["init." + n]).abs().max().item() for n in names)
    check(tag + "adapters after %d AdamW steps (abs 1e-4)" % STEPS, worst_w <= 1e-4 and moved > 1e-3,
          "worst %.2e, moved up to %.2e" % (worst_w, moved))
    frozen = all(torch.equal(ref["final." + n], ref["init." + n]) for n in model.m.names)
    check(tag + "the base's weights unchanged (exact)", frozen, "%d tensors" % len(model.m.names))

    # the checkpoint: merged by export, and evaluated as the adapted model
    last = os.path.join(ckpt, "step_%08d" % STEPS)
    man = json.load(open(os.path.join(last, "manifest.json")))
    check(tag + "manifest names the base and the adapters",
          man.get("lora", {}).get("rank") == RANK and man["lora"].get("base") == os.path.realpath(os.path.join(tmp, base_ckpt)),
          json.dumps(man.get("lora")))
    merged = os.path.join(tmp, arch + "-merged.safetensors")
    colo(["export", "--checkpoint", last, "--out", merged])
    mt = read_safetensors(merged)
    worst_m = 0.0
    if arch == "gpt2":  # (llama's export is under HF Llama's names: eval below covers it)
        with torch.no_grad():
            for n in names:
                if ".lora_A" in n:
                    h = n[: -len("lora_A.weight")]
                    want = ref["init." + h + "weight"] + SCALE * (ref["final." + h + "lora_B.weight"] @
                                                                 ref["final." + n]).t()
                    worst_m = max(worst_m, (mt[h + "weight"] - want).abs().max().item())
        check(tag + "export: W + scale·(B·A)ᵀ of its adapters (abs 1e-6)", worst_m <= 1e-6,
              "worst %.2e" % worst_m)
    peft(tmp, tag, arch, ref, last, base_ckpt, mt)
    ev = json.loads(colo(["eval", "--checkpoint", last, "--data", os.path.join(tmp, "val.bin"),
                          "--batches", "2", "--batch-size", "4", "--json"]).strip().splitlines()[-1])
    # the merged file as a checkpoint (a step at lr 1e-12 moves nothing measurable): its eval, on
    # the same fixed windows, is the adapted model's
    colo(["train", "--data-root", tmp, "--train-data", "train.bin", "--eval-interval", "0", "--steps", "1",
          "--batch-size", "4", "--lr", "1e-12", "--min-lr", "0", "--seed", "1", "--threads", "2", "--quiet",
          "--init-from", os.path.basename(merged), "--ckpt-dir", os.path.join(tmp, arch + "-merged")] + MODEL + ARCH[arch])
    ev2 = json.loads(colo(["eval", "--checkpoint", os.path.join(tmp, arch + "-merged", "step_00000001"),
                           "--data", os.path.join(tmp, "val.bin"), "--batches", "2", "--batch-size", "4",
                           "--json"]).strip().splitlines()[-1])
    rel = abs(ev["loss"] - ev2["loss"]) / ev2["loss"]
    check(tag + "eval of the adapters = eval of the merged export", rel <= 1e-5,
          "%.7f vs %.7f rel %.1e" % (ev["loss"], ev2["loss"], rel))


def peft(tmp, tag, arch, ref, last, base_ckpt, merged):
    """`colo-train export --format peft`: the adapters as HF PEFT saves them, applied here as PEFT
    applies them (W += scale·B·A on HF's [out][in] weights, or transposed under fan_in_fan_out),
    to the base model's own HF export, give the merged export's loss"""
    out = os.path.join(tmp, arch + "-peft")
    colo(["export", "--checkpoint", last, "--format", "peft", "--out", out])
    at_end = os.path.join(tmp, arch + "-lora", "adapter")  # checkpoint.export_format=peft's
    same = all(open(os.path.join(out, f), "rb").read() == open(os.path.join(at_end, f), "rb").read()
               for f in ("adapter_model.safetensors", "adapter_config.json"))
    check(tag + "peft: the run's own export (export_format) is the same", same, at_end)
    cfg = json.load(open(os.path.join(out, "adapter_config.json")))
    ad = read_safetensors(os.path.join(out, "adapter_model.safetensors"))
    want_mods = {"gpt2": ["attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"],
                 "llama": ["q_proj", "k_proj", "v_proj", "down_proj"]}[arch]
    check(tag + "peft: adapter_config.json", cfg["peft_type"] == "LORA" and cfg["r"] == RANK and
          cfg["lora_alpha"] == ALPHA and cfg["target_modules"] == want_mods and
          cfg["fan_in_fan_out"] == (arch == "gpt2") and
          cfg["base_model_name_or_path"] == os.path.realpath(os.path.join(tmp, base_ckpt)),
          "target_modules %s" % cfg["target_modules"])
    s = cfg["lora_alpha"] / cfg["r"]
    batch = ref["batch.0.0"].long()
    if arch == "gpt2":
        base = read_safetensors(os.path.join(tmp, base_ckpt, "rank_00000.safetensors"))
        m = GPT2(L, NH, C, T, V)
        with torch.no_grad():
            for n in m.names:
                m.p[n].copy_(base[n])
            plain = m(batch[:B], batch[B:]).item()
            applied = 0
            for k in ad:
                if k.endswith("lora_A.weight"):
                    mod = k[len("base_model.model."):-len(".lora_A.weight")]
                    m.p[mod + ".weight"] += s * (ad[k.replace("lora_A", "lora_B")] @ ad[k]).t()
                    applied += 1
            got = m(batch[:B], batch[B:]).item()
            for n in m.names:
                m.p[n].copy_(merged[n])
            want = m(batch[:B], batch[B:]).item()
    else:
        hf, hcfg = os.path.join(tmp, "llama-base-hf.safetensors"), os.path.join(tmp, "llama-base-config.json")
        colo(["export", "--checkpoint", os.path.join(tmp, base_ckpt), "--out", hf, "--config", hcfg])
        from torch_gpt2 import HFLlama
        m = HFLlama(json.load(open(hcfg)))
        w = read_safetensors(hf)
        applied = 0
        with torch.no_grad():
            m.load(dict(w))
            plain = m(batch[:B], batch[B:]).item()
            for k in ad:
                if k.endswith("lora_A.weight"):
                    mod = k[len("base_model.model."):-len(".lora_A.weight")]
                    w[mod + ".weight"] = w[mod + ".weight"] + s * (ad[k.replace("lora_A", "lora_B")] @ ad[k])
                    applied += 1
            m.load(w)
            got = m(batch[:B], batch[B:]).item()
            m.load(merged)
            want = m(batch[:B], batch[B:]).item()
    rel = abs(got - want) / want
    check(tag + "peft: base + adapters as PEFT applies them = merged",
          rel <= 1e-5 and applied == L * len(want_mods) and abs(plain - want) > 1e-4,
          "%d modules; loss %.7f vs %.7f rel %.1e (the base alone %.7f)" % (applied, got, want, rel, plain))


def data_parallel(tmp):
    """the same LoRA run on 2 ranks (--nproc 2, half the batch each) as on one; and with the
    frozen model sharded over the ranks (ZeRO-3), bit for bit the run that keeps it whole"""
    dumps, out = {}, {}
    for n, z in ((1, 0), (2, 0), (1, 3), (2, 3)):
        dump = os.path.join(tmp, "dp%d-z%d.dump" % (n, z))
        ck = os.path.join(tmp, "dp%d-z%d" % (n, z))
        out[n, z] = colo(["train", "--data-root", tmp, "--train-data", "train.bin",
                          "--eval-interval", "0", "--batch-size", str(B // n), "--grad-accum",
                          str(ACCUM), "--steps", str(STEPS), "--lr", str(LR), "--seed", "1234",
                          "--threads", "1", "--zero", str(z), "--ckpt-dir", ck,
                          "--ckpt-interval", str(STEPS), "--init-from",
                          os.path.join("gpt2-base", "step_00000030"), "--lora-rank", str(RANK),
                          "--dump-reference", dump] +
                         (["--nproc", "2", "--dp", "2"] if n == 2 else []) + MODEL + ARCH["gpt2"])
        dumps[n, z] = read_safetensors(dump)
    a, b = dumps[1, 0], dumps[2, 0]
    lrel = ((a["losses"] - b["losses"]).abs() / a["losses"].abs()).max().item()
    names = [k for k in a if k.startswith("final.") and ".lora_" in k]
    wabs = max((a[k] - b[k]).abs().max().item() for k in names)
    check("[data parallel] 2 ranks = 1: losses (rel 1e-5)", lrel <= 1e-5, "worst %.2e" % lrel)
    check("[data parallel] 2 ranks = 1: adapters after %d steps (abs 1e-4)" % STEPS,
          wabs <= 1e-4 and len(names) == 16, "worst %.2e over %d tensors" % (wabs, len(names)))
    for n in (1, 2):
        a, b = dumps[n, 0], dumps[n, 3]
        same = all(torch.equal(a[k], b[k]) for k in names + ["losses", "grad_norms"])
        step = "step_%08d" % STEPS
        files = sorted(os.listdir(os.path.join(tmp, "dp%d-z0" % n, step)))
        ckeq = all(open(os.path.join(tmp, "dp%d-z%d" % (n, z), step, f), "rb").read() ==
                   open(os.path.join(tmp, "dp%d-z0" % n, step, f), "rb").read()
                   for f in files if f.endswith(".safetensors") for z in (3,))
        said = "sharded over the data-parallel ranks (ZeRO-3)" in out[n, 3]
        check("[ZeRO-3] %d rank%s: the frozen model sharded = whole (bit for bit)"
              % (n, "s" if n > 1 else ""), same and ckeq and said,
              "losses, norms and %d adapters identical: %s; checkpoint files %s identical: %s; "
              "said so: %s" % (len(names), same, files, ckeq, said))


def pipeline(tmp):
    """LoRA under pipeline parallelism (--pp 2): each stage keeps the adapters of its own layers
    and the first gathers them into the checkpoint. With one micro-batch a stage computes what one
    rank does, so the checkpoint is the same byte for byte: GPT-2 in fp32 with dropout, on 2
    stages and on 2 stages × 2 data-parallel ranks (against 2 ranks), and Llama in bf16 with NF4
    (QLoRA), grouped-query attention and an untied head. With 2 micro-batches, within the
    data-parallel check's tolerances. Stopped and resumed under the pipeline, the same bytes; the
    pipeline's checkpoint resumed on one rank, the one-rank run's bytes."""
    def lora_run(ck, arch, base, n=1, extra=()):
        return colo(["train", "--data-root", tmp, "--train-data", "train.bin", "--eval-interval", "0",
                     "--batch-size", str(B // n), "--grad-accum", str(ACCUM), "--steps", str(STEPS),
                     "--lr", str(LR), "--seed", "1234", "--threads", "1", "--ckpt-dir",
                     os.path.join(tmp, ck), "--ckpt-interval", str(STEPS // 2), "--init-from", base,
                     "--lora-rank", str(RANK), "--lora-targets", TARGETS[arch]] + list(extra) +
                    MODEL + ARCH[arch])

    def same(a, b, step=STEPS):
        f = "step_%08d/rank_00000.safetensors" % step
        return open(os.path.join(tmp, a, f), "rb").read() == open(os.path.join(tmp, b, f), "rb").read()

    pp = ["--nproc", "2", "--pp", "2"]
    g2 = os.path.join("gpt2-base", "step_00000030")
    drop = ["--lora-dropout", "0.1"]
    lora_run("pp-ref", "gpt2", g2, extra=drop + ["--dump-reference", os.path.join(tmp, "pp-ref.dump")])
    out = lora_run("pp-m1", "gpt2", g2, extra=drop + pp + ["--micro-batches", "1"])
    said = [x for x in out.splitlines() if x.startswith("lora:")]
    check("[pipeline] 2 stages, 1 micro-batch = 1 rank (checkpoint bytes)",
          same("pp-ref", "pp-m1", STEPS // 2) and same("pp-ref", "pp-m1") and len(said) == 1 and
          "on this rank, of pp=2 x tp=1" in said[0], said[0] if said else out[-300:])
    lora_run("pp-m2", "gpt2", g2, extra=drop + pp + ["--micro-batches", "2", "--dump-reference",
                                                    os.path.join(tmp, "pp-m2.dump")])
    a, b = read_safetensors(os.path.join(tmp, "pp-ref.dump")), read_safetensors(os.path.join(tmp, "pp-m2.dump"))
    lrel = ((a["losses"] - b["losses"]).abs() / a["losses"].abs()).max().item()
    nrel = ((a["grad_norms"] - b["grad_norms"]).abs() / a["grad_norms"].abs()).max().item()
    f = "step_%08d/rank_00000.safetensors" % STEPS
    ca, cb = (read_safetensors(os.path.join(tmp, d, f)) for d in ("pp-ref", "pp-m2"))
    wabs = max((ca[k] - cb[k]).abs().max().item() for k in ca if k in cb)
    check("[pipeline] 2 micro-batches: losses, norms (rel 1e-5), checkpoint (abs 1e-4)",
          lrel <= 1e-5 and nrel <= 1e-5 and wabs <= 1e-4 and sorted(ca) == sorted(cb) and len(ca) == 48,
          "worst %.2e, %.2e; %d tensors (adapters and moments), worst %.2e" % (lrel, nrel, len(ca), wabs))
    lora_run("pp-halves", "gpt2", g2, extra=drop + pp + ["--micro-batches", "2", "--stop-at", str(STEPS // 2), "--quiet"])
    lora_run("pp-halves", "gpt2", g2, extra=drop + pp + ["--micro-batches", "2", "--resume", "auto", "--quiet"])
    check("[pipeline] stopped at step %d and resumed on 2 stages: the same bytes" % (STEPS // 2),
          same("pp-m2", "pp-halves"), f)
    one = os.path.join(tmp, "pp-on-one")
    os.makedirs(one)
    shutil.copytree(os.path.join(tmp, "pp-m1", "step_%08d" % (STEPS // 2)),
                    os.path.join(one, "step_%08d" % (STEPS // 2)))
    lora_run("pp-on-one", "gpt2", g2, extra=drop + ["--resume", "auto", "--quiet"])
    check("[pipeline] its step-%d checkpoint resumed on 1 rank: the 1-rank run's bytes" % (STEPS // 2),
          same("pp-ref", "pp-on-one"), f)
    lora_run("pp-dp", "gpt2", g2, n=2, extra=drop + ["--nproc", "2", "--dp", "2"])
    lora_run("pp-dp-pp", "gpt2", g2, n=2, extra=drop + ["--nproc", "4", "--dp", "2", "--pp", "2",
                                                        "--micro-batches", "1"])
    check("[pipeline] 2 stages × 2 data-parallel ranks = 2 ranks (bytes)", same("pp-dp", "pp-dp-pp"), f)
    ll = os.path.join("llama-base", "step_00000030")
    q = ["--precision", "bf16", "--lora-quant", "nf4", "--recompute", "--quiet"]
    lora_run("pp-q-ref", "llama", ll, extra=q)
    lora_run("pp-q", "llama", ll, extra=q + pp + ["--micro-batches", "1"])
    check("[pipeline] Llama, bf16, NF4: 2 stages = 1 rank (bytes)", same("pp-q-ref", "pp-q"), f)


def tensor_parallel(tmp):
    """LoRA under tensor parallelism (--tp 2): each rank holds its part of every adapter (a
    column-parallel product's B by rows, a row-parallel one's A by columns, the other whole, its
    gradient summed over the group; dropout's masks by the whole input's columns), and rank 0
    gathers them into the one checkpoint file. Against one rank: GPT-2 in fp32 with dropout on
    2 ranks, with sequence parallelism, and on tp=2 × pp=2; Llama with grouped-query attention
    and an untied head in fp32 with sequence parallelism, and in bf16 (losses within 1e-5 and the
    checkpoint within 1e-4 in fp32; bf16 within 1e-3 and 2e-2). tp=2 x dp=2 with the frozen
    model's parts sharded by ZeRO-3, the bytes of ZeRO-0's. Stopped and resumed under tp=2, the
    same bytes; one rank's checkpoint resumed on 2."""
    def lora_run(ck, base, model, extra=()):
        dump = os.path.join(tmp, ck + ".dump")
        colo(["train", "--data-root", tmp, "--train-data", "train.bin", "--eval-interval", "0",
              "--batch-size", str(B), "--grad-accum", str(ACCUM), "--steps", str(STEPS), "--lr", str(LR),
              "--seed", "1234", "--threads", "1", "--ckpt-dir", os.path.join(tmp, ck), "--ckpt-interval",
              str(STEPS // 2), "--init-from", base, "--lora-rank", str(RANK), "--lora-targets", "all",
              "--lora-dropout", "0.1", "--quiet", "--dump-reference", dump] + list(extra) + model)
        return read_safetensors(dump)

    def last(ck):
        return read_safetensors(os.path.join(tmp, ck, "step_%08d/rank_00000.safetensors" % STEPS))

    def compare(what, ref, got, ck_ref, ck, ltol, wtol):
        lrel = ((ref["losses"] - got["losses"]).abs() / ref["losses"].abs()).max().item()
        a, b = last(ck_ref), last(ck)
        wabs = max((a[k] - b[k]).abs().max().item() for k in a if k in b)
        check("[tensor parallel] %s (rel %g, abs %g)" % (what, ltol, wtol),
              lrel <= ltol and wabs <= wtol and sorted(a) == sorted(b),
              "losses %.2e, checkpoint %.2e over %d tensors" % (lrel, wabs, len(b)))

    g2, gm = os.path.join("gpt2-base", "step_00000030"), MODEL + ARCH["gpt2"]
    tp = ["--nproc", "2", "--tp", "2"]
    ref = lora_run("tp-ref", g2, gm)
    compare("GPT-2, 2 ranks = 1", ref, lora_run("tp-2", g2, gm, tp), "tp-ref", "tp-2", 1e-5, 1e-4)
    compare("GPT-2, sequence parallel = 1 rank", ref, lora_run("tp-sp", g2, gm, tp + ["--sp", "true"]),
            "tp-ref", "tp-sp", 1e-5, 1e-4)
    # context parallelism: each sequence's tokens split over the ranks, dropout's masks as the
    # whole rows' (colo_lora_set_rows)
    compare("GPT-2, cp=2 = 1 rank", ref, lora_run("cp-2", g2, gm, ["--nproc", "2", "--cp", "2"]),
            "tp-ref", "cp-2", 1e-5, 1e-4)
    f = "step_%08d/rank_00000.safetensors" % STEPS
    compare("GPT-2, tp=2 x pp=2 = 1 rank", ref,
            lora_run("tp-pp", g2, gm, ["--nproc", "4", "--tp", "2", "--pp", "2", "--micro-batches", "2"]),
            "tp-ref", "tp-pp", 1e-5, 1e-4)
    # the frozen model's tensor-parallel parts sharded again over 2 data-parallel ranks (ZeRO-3):
    # the same training, bit for bit, as each kept whole
    half = ["--batch-size", str(B // 2), "--nproc", "4", "--tp", "2", "--dp", "2"]
    lora_run("tp-dp-z0", g2, gm, half)
    lora_run("tp-dp-z3", g2, gm, half + ["--zero", "3"])
    check("[tensor parallel] tp=2 x dp=2, ZeRO-3 = ZeRO-0 (bytes)",
          open(os.path.join(tmp, "tp-dp-z0", f), "rb").read() == open(os.path.join(tmp, "tp-dp-z3", f), "rb").read(), f)
    lora_run("tp-halves", g2, gm, tp + ["--stop-at", str(STEPS // 2)])
    lora_run("tp-halves", g2, gm, tp + ["--resume", "auto"])
    check("[tensor parallel] stopped at step %d and resumed on 2 ranks: the same bytes" % (STEPS // 2),
          open(os.path.join(tmp, "tp-2", f), "rb").read() == open(os.path.join(tmp, "tp-halves", f), "rb").read(), f)
    os.makedirs(os.path.join(tmp, "tp-from-one"))
    shutil.copytree(os.path.join(tmp, "tp-ref", "step_%08d" % (STEPS // 2)),
                    os.path.join(tmp, "tp-from-one", "step_%08d" % (STEPS // 2)))
    lora_run("tp-from-one", g2, gm, tp + ["--resume", "auto"])
    a, b = last("tp-ref"), last("tp-from-one")
    wabs = max((a[k] - b[k]).abs().max().item() for k in a)
    check("[tensor parallel] one rank's step-%d checkpoint resumed on 2 (abs 1e-4)" % (STEPS // 2),
          wabs <= 1e-4, "worst %.2e" % wabs)
    # Llama: 4 query heads over 2 of keys and values, split 2 and 1 a rank; an untied head
    lm = ["--n-layer", str(L), "--n-head", "4", "--n-embd", str(C), "--block-size", str(T),
          "--vocab-size", str(V), "--arch", "llama", "--n-kv-head", "2", "--mlp-hidden", str(H_LLAMA),
          "--tie-embeddings", "false"]
    train_base(tmp, "llama-gqa", lm)
    lb = os.path.join("llama-gqa-base", "step_00000030")  # under the data root
    ref = lora_run("tp-l-ref", lb, lm)
    compare("Llama (GQA, untied head), sequence parallel = 1 rank", ref,
            lora_run("tp-l", lb, lm, tp + ["--sp", "true"]), "tp-l-ref", "tp-l", 1e-5, 1e-4)
    compare("Llama (GQA, untied head), cp=2 x tp=2 sp = 1 rank", ref,
            lora_run("cp-tp-l", lb, lm, ["--nproc", "4", "--tp", "2", "--sp", "true", "--cp", "2"]),
            "tp-l-ref", "cp-tp-l", 1e-5, 1e-4)
    bf = ["--precision", "bf16", "--recompute"]
    ref = lora_run("tp-lb-ref", lb, lm, bf)
    compare("Llama in bf16, sequence parallel = 1 rank", ref,
            lora_run("tp-lb", lb, lm, bf + tp + ["--sp", "true"]), "tp-lb-ref", "tp-lb", 1e-3, 2e-2)


M64, GOLD = (1 << 64) - 1, 0x9e3779b97f4a7c15
BITS = {"attn.c_attn": 1, "attn.c_proj": 2, "mlp.c_fc": 4, "mlp.c_proj": 8}


def mix(z):
    """splitmix64's finaliser, on Python's integers"""
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
    return z ^ (z >> 31)


def hash4(a, b, c, d):
    """colo_hash4 (core/rng.c): splitmix64 steps, each word mixed into the state"""
    x = a
    for w in (b, c, d):
        x = mix((x + GOLD) & M64) ^ w
    return mix((x + GOLD) & M64)


def dropout_scale(key, row0, n, c, p):
    """keep / (1 − p) for rows row0 … row0 + n − 1 and columns 0 … c − 1 (core/rng.h's
    colo_dropout_keep, written again here in numpy's wrapping uint64 arithmetic)"""
    u = np.uint64
    z = u(key) + (((np.arange(n, dtype=u) + u(row0))[:, None] << u(32)) +
                  np.arange(c, dtype=u)[None, :] + u(1)) * u(GOLD)
    z = (z ^ (z >> u(30))) * u(0xbf58476d1ce4e5b9)
    z = (z ^ (z >> u(27))) * u(0x94d049bb133111eb)
    keep = ((z ^ (z >> u(31))) >> u(40)) >= u(int(p * 16777216.0))
    return torch.from_numpy(np.where(keep, np.float32(1.0) / (np.float32(1.0) - np.float32(p)),
                                     np.float32(0.0)).astype(np.float32))


def dropout(tmp, dora=False):
    """LoRA dropout (--lora-dropout 0.1) on GPT-2 against PyTorch: PEFT's forward,
    W·x + b + scale·B·A·dropout(x), with colo's masks made again here from their definition (a
    hash of the seed, step, row, layer, product and column); losses, first gradients, gradient
    norms and adapters after 10 steps; the manifest and PEFT's config say 0.1; two ranks = one
    (a row's mask is its own on any rank); stopped and resumed, the same checkpoint. With dora,
    DoRA under dropout as PEFT's DoRA layer computes it: W·x + b + (g − 1)·W·xd + g·scale·B·A·xd,
    xd = dropout(x), g = m / ‖W + scale·(B·A)ᵀ‖ (the norm detached)"""
    P, tag = 0.1, "[dora dropout] " if dora else "[dropout] "
    name = "ddrop" if dora else "drop"
    ck, dump = os.path.join(tmp, name), os.path.join(tmp, name + ".dump")
    args = ["train", "--data-root", tmp, "--train-data", "train.bin", "--eval-interval", "0",
            "--grad-accum", str(ACCUM), "--steps", str(STEPS), "--lr", str(LR), "--min-lr", str(MIN_LR),
            "--warmup", str(WARMUP), "--weight-decay", str(WD), "--grad-clip", str(CLIP), "--beta2", str(B2),
            "--seed", "1234", "--threads", "2", "--init-from", os.path.join("gpt2-base", "step_00000030"),
            "--lora-rank", str(RANK), "--lora-alpha", str(ALPHA), "--lora-dropout", str(P)
            ] + (["--lora-dora", "true"] if dora else []) + MODEL + ARCH["gpt2"]
    out = colo(args + ["--batch-size", str(B), "--ckpt-dir", ck, "--dump-reference", dump])
    ref = read_safetensors(dump)
    said = [x for x in out.splitlines() if x.startswith("lora:")]
    check(tag + "colo-train says so", said and "dropout 0.1 on" in said[0], said[0] if said else out[-200:])
    names = sorted(k[len("init."):] for k in ref if k.startswith("init.") and ".lora_" in k)
    base = {n: ref["init." + n] for n in GPT2(L, NH, C, T, V).names}
    ab = {n: (base[n.replace("lora_magnitude_vector", "weight")].norm(dim=0).reshape(-1, 1)  # PEFT's
              if n.endswith("magnitude_vector") else ref["init." + n]).clone().requires_grad_(True)
          for n in names}

    def forward(idx, tg, step, micro, P=P):
        key = hash4(1234, step, 0x6c6f7261, 0)
        Bt = idx.shape[0]

        def lin(l, mod, x, b=True):
            h = "transformer.h.%d.%s." % (l, mod)
            flat = x.reshape(-1, x.shape[-1])
            mask = dropout_scale(hash4(key, l, BITS[mod], 0x64726f70), micro * Bt * T, flat.shape[0],
                                 flat.shape[1], P)
            W, A, Bm = base[h + "weight"], ab[h + "lora_A.weight"], ab[h + "lora_B.weight"]
            xd = flat * mask
            upd = SCALE * (xd @ A.t()) @ Bm.t()
            y = flat @ W + base[h + "bias"]
            if dora:
                g = ab[h + "lora_magnitude_vector"].reshape(-1) / (W + SCALE * (Bm @ A).t()).norm(dim=0).detach()
                y = y + (g - 1) * (xd @ W) + g * upd
            else:
                y = y + upd
            return y.view(*x.shape[:-1], y.shape[-1])
        p = base
        x = p["transformer.wte.weight"][idx] + p["transformer.wpe.weight"][:T]
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        for l in range(L):
            h = "transformer.h.%d." % l
            a = torch.nn.functional.layer_norm(x, (C,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], 1e-5)
            q, k, v = lin(l, "attn.c_attn", a).split(C, dim=2)
            heads = lambda t: t.view(Bt, T, NH, C // NH).transpose(1, 2)
            q, k, v = heads(q), heads(k), heads(v)
            att = ((q @ k.transpose(-2, -1)) / math.sqrt(C // NH)).masked_fill(~mask, float("-inf"))
            y = (att.softmax(dim=-1) @ v).transpose(1, 2).reshape(x.shape)
            x = x + lin(l, "attn.c_proj", y)
            m = torch.nn.functional.layer_norm(x, (C,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], 1e-5)
            m = torch.nn.functional.gelu(lin(l, "mlp.c_fc", m), approximate="tanh")
            x = x + lin(l, "mlp.c_proj", m)
        x = torch.nn.functional.layer_norm(x, (C,), p["transformer.ln_f.weight"], p["transformer.ln_f.bias"], 1e-5)
        logits = x @ p["transformer.wte.weight"].t()
        return torch.nn.functional.cross_entropy(logits.view(-1, V), tg.reshape(-1))

    params = [ab[n] for n in names]
    opt = torch.optim.AdamW(params, lr=LR, betas=(B1, B2), eps=EPS, weight_decay=WD)

    def first(loss_sum, rel):
        worst_grad = max((ab[n].grad - ref["grad." + n]).abs().max().item() /
                         max(ab[n].grad.abs().max().item(), 1e-12) for n in names)
        with torch.no_grad():  # the adapters start with B = 0: dropout shows in the gradients
            g0 = {n: ab[n].grad.clone() for n in names}
            opt.zero_grad(set_to_none=False)
        for micro in range(ACCUM):
            batch = ref["batch.0.%d" % micro].long()
            (forward(batch[:B], batch[B:], 0, micro, P=0.0) / ACCUM).backward()
        moved = max((ab[n].grad - g0[n]).abs().max().item() / g0[n].abs().max().item()
                    for n in names if ".lora_B" in n)  # (A's are zero: B is)
        with torch.no_grad():
            for n in names:
                ab[n].grad.copy_(g0[n])
        check(tag + "first step: loss (rel 1e-5), adapter gradients (1e-4 of max)",
              rel <= 1e-5 and worst_grad <= 1e-4 and moved > 1e-2,
              "torch %.7f colo %.7f; worst gradient %.2e (without dropout they differ by %.2e)"
              % (loss_sum, ref["losses"][0].item(), worst_grad, moved))

    worst_loss, worst_norm = replay(forward, ref, opt, params, [1.0], first)
    worst_w = max((ab[n].detach() - ref["final." + n]).abs().max().item() for n in names)
    check(tag + "%d steps: losses, norms (rel 1e-4), adapters (abs 1e-4)" % STEPS,
          worst_loss <= 1e-4 and worst_norm <= 1e-4 and worst_w <= 1e-4,
          "worst %.2e, %.2e, %.2e" % (worst_loss, worst_norm, worst_w))
    last = "step_%08d" % STEPS
    man = json.load(open(os.path.join(ck, last, "manifest.json")))["lora"]
    colo(["export", "--checkpoint", os.path.join(ck, last), "--format", "peft", "--out", ck + "-peft"])
    pc = json.load(open(os.path.join(ck + "-peft", "adapter_config.json")))
    check(tag + "manifest and PEFT's config: 0.1", man.get("dropout") == P and pc["lora_dropout"] == P,
          "manifest %s, adapter_config %s" % (man.get("dropout"), pc["lora_dropout"]))
    two = os.path.join(tmp, name + "2.dump")
    colo(args + ["--batch-size", str(B // 2), "--nproc", "2", "--dp", "2", "--threads", "1", "--quiet",
                 "--dump-reference", two])
    d2 = read_safetensors(two)
    lrel = ((ref["losses"] - d2["losses"]).abs() / ref["losses"]).max().item()
    check(tag + "2 ranks = 1: losses (rel 1e-5)", lrel <= 1e-5, "worst %.2e" % lrel)
    halves = os.path.join(tmp, name + "-halves")
    colo(args + ["--batch-size", str(B), "--ckpt-dir", halves, "--stop-at", str(STEPS // 2), "--quiet"])
    colo(args + ["--batch-size", str(B), "--ckpt-dir", halves, "--resume", "auto", "--quiet"])
    f = os.path.join(last, "rank_00000.safetensors")
    check(tag + "stopped at step %d and resumed: the same checkpoint" % (STEPS // 2),
          open(os.path.join(ck, f), "rb").read() == open(os.path.join(halves, f), "rb").read(), f)


def rslora(tmp):
    """rank-stabilized LoRA (--lora-rslora true): the update scaled by alpha/sqrt(r); PyTorch's
    first gradients with that scale; the manifest, PEFT's use_rslora, and the adapters applied as
    PEFT applies them (alpha/sqrt(r)) give the merged export's loss"""
    tag, s = "[rslora] ", ALPHA / math.sqrt(RANK)
    ck, dump = os.path.join(tmp, "rs"), os.path.join(tmp, "rs.dump")
    out = colo(["train", "--data-root", tmp, "--train-data", "train.bin", "--eval-interval", "0",
                "--batch-size", str(B), "--grad-accum", str(ACCUM), "--steps", "3", "--lr", str(LR),
                "--seed", "1234", "--threads", "2", "--init-from", os.path.join("gpt2-base", "step_00000030"),
                "--lora-rank", str(RANK), "--lora-alpha", str(ALPHA), "--lora-rslora", "true",
                "--ckpt-dir", ck, "--dump-reference", dump] + MODEL + ARCH["gpt2"])
    ref = read_safetensors(dump)
    model = Adapted("gpt2", {n: ref["init." + n] for n in make_model("gpt2").names}, MODULES["all"], s)
    names = sorted(model.ab)
    for n in names:  # as they started (B zero: B's gradients carry the scale)
        model.ab[n] = ref["init." + n].clone().requires_grad_(True)
    for m in range(ACCUM):
        batch = ref["batch.0.%d" % m].long()
        (model.forward(batch[:B], batch[B:]) / ACCUM).backward()
    worst = max((model.ab[n].grad - ref["grad." + n]).abs().max().item() /
                max(model.ab[n].grad.abs().max().item(), 1e-12) for n in names if ".lora_B" in n)
    said = [x for x in out.splitlines() if x.startswith("lora:")]
    check(tag + "first gradients with scale alpha/sqrt(r) (1e-4 of max)",
          worst <= 1e-4 and said and "rsLoRA" in said[0], "scale %.4f, worst %.2e" % (s, worst))
    last = os.path.join(ck, "step_00000003")
    man = json.load(open(os.path.join(last, "manifest.json")))["lora"]
    colo(["export", "--checkpoint", last, "--format", "peft", "--out", ck + "-peft"])
    colo(["export", "--checkpoint", last, "--out", ck + "-merged.safetensors"])
    cfg = json.load(open(os.path.join(ck + "-peft", "adapter_config.json")))
    ad, merged = read_safetensors(os.path.join(ck + "-peft", "adapter_model.safetensors")), read_safetensors(ck + "-merged.safetensors")
    base = read_safetensors(os.path.join(tmp, "gpt2-base", "step_00000030", "rank_00000.safetensors"))
    m = GPT2(L, NH, C, T, V)
    batch = ref["batch.0.0"].long()
    with torch.no_grad():
        for n in m.names:
            m.p[n].copy_(base[n])
        peft_s = cfg["lora_alpha"] / (math.sqrt(cfg["r"]) if cfg["use_rslora"] else cfg["r"])
        for k in ad:
            if k.endswith("lora_A.weight"):
                mod = k[len("base_model.model."):-len(".lora_A.weight")]
                m.p[mod + ".weight"] += peft_s * (ad[k.replace("lora_A", "lora_B")] @ ad[k]).t()
        got = m(batch[:B], batch[B:]).item()
        for n in m.names:
            m.p[n].copy_(merged[n])
        want = m(batch[:B], batch[B:]).item()
    rel = abs(got - want) / want
    check(tag + "manifest, use_rslora, PEFT's application = merged (rel 1e-5)",
          man.get("rslora") is True and cfg["use_rslora"] is True and rel <= 1e-5,
          "loss %.7f vs %.7f rel %.1e" % (got, want, rel))


def loraplus(tmp):
    """LoRA+ (--lora-plus-ratio 16): ten steps against PyTorch's AdamW with the A matrices in a
    group at the rate and the B matrices in one at 16 times it (PEFT's create_loraplus_optimizer),
    weight decay, clipping and the schedule as above; the losses, norms and adapters, and the
    adapters' distance from one rate's run; the manifest and coloctl's line say so"""
    tag, ratio = "[lora+] ", 16.0
    args = ["train", "--data-root", tmp, "--train-data", "train.bin", "--eval-interval", "0",
            "--batch-size", str(B), "--grad-accum", str(ACCUM), "--steps", str(STEPS), "--lr", str(LR),
            "--min-lr", str(MIN_LR), "--warmup", str(WARMUP), "--weight-decay", str(WD),
            "--grad-clip", str(CLIP), "--beta2", str(B2), "--seed", "1234", "--threads", "2",
            "--init-from", os.path.join("gpt2-base", "step_00000030"), "--lora-rank", str(RANK),
            "--lora-alpha", str(ALPHA)] + MODEL + ARCH["gpt2"]
    ck, dump = os.path.join(tmp, "plus"), os.path.join(tmp, "plus.dump")
    out = colo(args + ["--lora-plus-ratio", str(ratio), "--ckpt-dir", ck, "--dump-reference", dump])
    one = read_safetensors(os.path.join(tmp, "gpt2-lora.dump"))  # run()'s: one rate
    ref = read_safetensors(dump)
    model = Adapted("gpt2", {n: ref["init." + n] for n in make_model("gpt2").names}, MODULES["all"])
    names = sorted(model.ab)
    for n in names:
        model.ab[n] = ref["init." + n].clone().requires_grad_(True)
    a_params = [model.ab[n] for n in names if ".lora_A" in n]
    b_params = [model.ab[n] for n in names if ".lora_B" in n]
    opt = torch.optim.AdamW([{"params": a_params, "lr": LR}, {"params": b_params, "lr": LR * ratio}],
                            betas=(B1, B2), eps=EPS, weight_decay=WD)
    worst_loss, worst_norm = replay(lambda i, t, st, mi: model.forward(i, t), ref, opt,
                                    a_params + b_params, [1.0, ratio])
    # AdamW's step is lr-sized whatever the gradient: where a gradient is near zero its sign, and
    # so the step, follows the sums' order, by up to lr; B's tolerance scales with its rate
    worst_a = max((model.ab[n].detach() - ref["final." + n]).abs().max().item() for n in names if ".lora_A" in n)
    worst_b = max((model.ab[n].detach() - ref["final." + n]).abs().max().item() for n in names if ".lora_B" in n)
    apart = max((one["final." + n] - ref["final." + n]).abs().max().item() for n in names if ".lora_B" in n)
    check(tag + "10 steps: losses, norms (rel 1e-4), A (abs 1e-4), B (abs 1e-4 x 16)",
          worst_loss <= 1e-4 and worst_norm <= 1e-4 and worst_a <= 1e-4 and worst_b <= 1e-4 * ratio,
          "worst %.2e, %.2e, %.2e, %.2e" % (worst_loss, worst_norm, worst_a, worst_b))
    check(tag + "B moved otherwise than at one rate", apart > 1e-2,
          "B differs from one rate's run by up to %.2e" % apart)
    man = json.load(open(os.path.join(ck, "step_%08d" % STEPS, "manifest.json")))["lora"]
    said = [x for x in out.splitlines() if x.startswith("lora:")]
    check(tag + "manifest and colo-train say so", man.get("plus_ratio") == 16 and said and
          "LoRA+ (B at 16 x lr)" in said[0], "%s; %s" % (man, said[0] if said else out[-200:]))


class Dora(Adapted):
    """DoRA as PEFT computes it (use_dora): each adapted weight's columns (HF Conv1D's [in][out]:
    an output's weights) rescaled, W' = m / ‖W + s·(B·A)ᵀ‖ · (W + s·(B·A)ᵀ), the norm detached;
    m starts at W's column norms"""

    def __init__(self, arch, base, modules):
        super().__init__(arch, base, modules)
        for name in list(self.ab):
            if name.endswith("lora_A.weight"):
                self.ab[name.replace("lora_A.weight", "lora_magnitude_vector")] = None

    def start(self, ref):
        for n in self.ab:
            if n.endswith("lora_magnitude_vector"):  # PEFT's: the norms with B zero
                w = self.base[n.replace("lora_magnitude_vector", "weight")]
                self.ab[n] = w.norm(dim=0).reshape(-1, 1).clone().requires_grad_(True)
            else:
                self.ab[n] = ref["init." + n].clone().requires_grad_(True)

    def weight(self, layer, mod):
        h = "transformer.h.%d.%s." % (layer, mod)
        w = super().weight(layer, mod)
        return (self.ab[h + "lora_magnitude_vector"].reshape(-1) / w.norm(dim=0).detach()) * w


def dora(tmp):
    """DoRA (--lora-dora true) against PyTorch: ten steps of GPT-2 with every product adapted and
    of Llama (grouped-query c_attn and the MLP's down projection), as run() replays LoRA, with the
    magnitudes trained too; a run stopped and resumed; the merged export, PEFT's application of
    the peft export (use_dora, lora_magnitude_vector) and eval of the checkpoint agree; two
    stages and tensor parallelism against one rank; a gguf-lora export refused (dropout(): DoRA
    under dropout)"""
    for arch in ("gpt2", "llama"):
        tag = "[dora %s] " % arch
        args = ["train", "--data-root", tmp, "--train-data", "train.bin", "--eval-interval", "0",
                "--batch-size", str(B), "--grad-accum", str(ACCUM), "--steps", str(STEPS), "--lr", str(LR),
                "--min-lr", str(MIN_LR), "--warmup", str(WARMUP), "--weight-decay", str(WD),
                "--grad-clip", str(CLIP), "--beta2", str(B2), "--seed", "1234", "--threads", "2",
                "--init-from", os.path.join(arch + "-base", "step_00000030"), "--lora-rank", str(RANK),
                "--lora-alpha", str(ALPHA), "--lora-targets", TARGETS[arch], "--lora-dora", "true"
                ] + MODEL + ARCH[arch]
        ck, dump = os.path.join(tmp, arch + "-dora"), os.path.join(tmp, arch + "-dora.dump")
        out = colo(args + ["--ckpt-dir", ck, "--dump-reference", dump])
        ref = read_safetensors(dump)
        model = Dora(arch, {n: ref["init." + n] for n in make_model(arch).names}, MODULES[TARGETS[arch]])
        model.start(ref)
        names = sorted(model.ab)
        got = sorted(k[len("grad."):] for k in ref if k.startswith("grad.") and ".lora_" in k)
        check(tag + "the adapters and magnitudes, by name", got == names, "%d tensors" % len(got))
        params = [model.ab[n] for n in names]
        opt = torch.optim.AdamW(params, lr=LR, betas=(B1, B2), eps=EPS, weight_decay=WD)

        def first(loss_sum, rel):
            worst = max((model.ab[n].grad - ref["grad." + n]).abs().max().item() /
                        max(model.ab[n].grad.abs().max().item(), 1e-12) for n in names)
            worst_m = max((model.ab[n].grad - ref["grad." + n]).abs().max().item() /
                          max(model.ab[n].grad.abs().max().item(), 1e-12) for n in names if "magnitude" in n)
            check(tag + "first loss (rel 1e-5), gradients (1e-4 of max)", rel <= 1e-5 and worst <= 1e-4,
                  "loss rel %.1e; worst %.2e, magnitudes' %.2e" % (rel, worst, worst_m))

        worst_loss, worst_norm = replay(lambda i, t, st, mi: model.forward(i, t), ref, opt, params, [1.0], first)
        # a magnitude's gradient is a sum over every token of a column: where it is near zero,
        # AdamW's lr-sized step follows its rounding (see loraplus), so its tolerance is 3e-4
        worst_w, worst_n = max(((model.ab[n].detach() - ref["final." + n]).abs().max().item() /
                                (3.0 if "magnitude" in n else 1.0), n) for n in names)
        moved = max((ref["final." + n] - model.base[n.replace("lora_magnitude_vector", "weight")].norm(dim=0)
                     .reshape(-1, 1)).abs().max().item() for n in names if "magnitude" in n)
        check(tag + "10 steps: losses, norms (rel 1e-4), A, B (abs 1e-4), m (3e-4)",
              worst_loss <= 1e-4 and worst_norm <= 1e-4 and worst_w <= 1e-4 and moved > 1e-3,
              "worst %.2e, %.2e, %.2e of tolerance 1e-4 (%s); magnitudes moved up to %.2e" %
              (worst_loss, worst_norm, worst_w, worst_n.split(".", 2)[2], moved))
        if arch == "gpt2":  # LoRA+: the magnitudes at B's rate (PEFT's optimizer: 1-D tensors with B)
            ratio, pdump = 16.0, ck + "-plus.dump"
            colo(args + ["--lora-plus-ratio", str(ratio), "--quiet", "--dump-reference", pdump])
            pref = read_safetensors(pdump)
            pm = Dora(arch, {n: pref["init." + n] for n in make_model(arch).names}, MODULES[TARGETS[arch]])
            pm.start(pref)
            slow = [pm.ab[n] for n in names if ".lora_A" in n]
            fast = [pm.ab[n] for n in names if ".lora_A" not in n]
            popt = torch.optim.AdamW([{"params": slow}, {"params": fast}], lr=LR, betas=(B1, B2), eps=EPS,
                                     weight_decay=WD)
            pl, pn = replay(lambda i, t, st, mi: pm.forward(i, t), pref, popt, slow + fast, [1.0, ratio])
            pw = max((pm.ab[n].detach() - pref["final." + n]).abs().max().item() /
                     (1.0 if ".lora_A" in n else ratio * (3.0 if "magnitude" in n else 1.0)) for n in names)
            check(tag + "LoRA+ x16, magnitudes with B: losses, norms (rel 1e-4), tensors",
                  pl <= 1e-4 and pn <= 1e-4 and pw <= 1e-4,
                  "worst %.2e, %.2e, %.2e of the tolerance 1e-4 (B's x 16, m's x 48)" % (pl, pn, pw))
        said = [x for x in out.splitlines() if x.startswith("lora:")]
        last = os.path.join(ck, "step_%08d" % STEPS)
        man = json.load(open(os.path.join(last, "manifest.json")))["lora"]
        check(tag + "manifest and colo-train say so", man.get("dora") is True and said and "DoRA" in said[0],
              "%s; %s" % (man, said[0] if said else out[-200:]))
        # the merged export, PEFT's application of the peft export and eval of the adapters
        merged = ck + "-merged.safetensors"
        colo(["export", "--checkpoint", last, "--out", merged])
        colo(["export", "--checkpoint", last, "--format", "peft", "--out", ck + "-peft"])
        ev = json.loads(colo(["eval", "--checkpoint", last, "--data", os.path.join(tmp, "val.bin"),
                              "--batches", "2", "--batch-size", "4", "--json"]).strip().splitlines()[-1])
        batch = ref["batch.0.0"].long()
        with torch.no_grad():
            for n in names:
                model.ab[n].copy_(ref["final." + n])
            want = model.forward(batch[:B], batch[B:]).item()
        if arch == "gpt2":
            cfg = json.load(open(os.path.join(ck + "-peft", "adapter_config.json")))
            ad = read_safetensors(os.path.join(ck + "-peft", "adapter_model.safetensors"))
            mt = read_safetensors(merged)
            m = GPT2(L, NH, C, T, V)
            with torch.no_grad():
                for n in m.names:
                    m.p[n].copy_(model.base[n])
                s = cfg["lora_alpha"] / cfg["r"]
                for k in ad:
                    if k.endswith("lora_A.weight"):  # PEFT's merge: fan_in_fan_out, so Wᵀ is [out][in]
                        mod = k[len("base_model.model."):-len(".lora_A.weight")]
                        w = m.p[mod + ".weight"].t() + s * (ad[k.replace("lora_A.weight", "lora_B.weight")] @ ad[k])
                        mag = ad[k.replace("lora_A.weight", "lora_magnitude_vector")]
                        m.p[mod + ".weight"] = ((mag / w.norm(dim=1)).reshape(-1, 1) * w).t()
                peft_loss = m(batch[:B], batch[B:]).item()
                for n in m.names:
                    m.p[n] = mt[n]
                merged_loss = m(batch[:B], batch[B:]).item()
            mags = [k for k in ad if k.endswith("lora_magnitude_vector")]
            check(tag + "peft export (use_dora) as PEFT applies it = merged = torch (rel 1e-5)",
                  cfg.get("use_dora") is True and len(mags) == 4 * L and ad[mags[0]].dim() == 1 and
                  abs(peft_loss - want) <= 1e-5 * want and abs(merged_loss - want) <= 1e-5 * want,
                  "%d magnitudes; loss peft %.7f merged %.7f torch %.7f" % (len(mags), peft_loss, merged_loss, want))
        # eval of the adapters: the merged file as a checkpoint, evaluated on the same windows
        colo(["train", "--data-root", tmp, "--train-data", "train.bin", "--eval-interval", "0", "--steps", "1",
              "--batch-size", "4", "--lr", "1e-12", "--min-lr", "0", "--seed", "1", "--threads", "2", "--quiet",
              "--init-from", os.path.basename(merged), "--ckpt-dir", ck + "-m"] + MODEL + ARCH[arch])
        ev2 = json.loads(colo(["eval", "--checkpoint", os.path.join(ck + "-m", "step_00000001"),
                               "--data", os.path.join(tmp, "val.bin"), "--batches", "2", "--batch-size", "4",
                               "--json"]).strip().splitlines()[-1])
        rel = abs(ev["loss"] - ev2["loss"]) / ev2["loss"]
        check(tag + "eval of the adapters = eval of the merged export", rel <= 1e-5,
              "%.7f vs %.7f rel %.1e" % (ev["loss"], ev2["loss"], rel))
        # stopped and resumed; two stages (one micro-batch: one rank's bytes); tensor parallelism
        halves = ck + "-halves"
        colo(args + ["--ckpt-dir", halves, "--stop-at", str(STEPS // 2), "--quiet"])
        colo(args + ["--ckpt-dir", halves, "--resume", "auto", "--quiet"])
        f = "step_%08d/rank_00000.safetensors" % STEPS
        check(tag + "stopped at step %d and resumed: the same checkpoint (bytes)" % (STEPS // 2),
              open(os.path.join(ck, f), "rb").read() == open(os.path.join(halves, f), "rb").read(), f)
        colo(args + ["--nproc", "2", "--pp", "2", "--micro-batches", "1", "--ckpt-dir", ck + "-pp", "--quiet"])
        check(tag + "2 stages, 1 micro-batch = 1 rank (checkpoint bytes)",
              open(os.path.join(ck, f), "rb").read() == open(os.path.join(ck + "-pp", f), "rb").read(), f)
        if arch == "gpt2":  # (this Llama's one key-value head cannot be split)
            colo(args + ["--nproc", "2", "--tp", "2", "--sp", "true", "--ckpt-dir", ck + "-tp", "--quiet"])
            a, b = read_safetensors(os.path.join(ck, f)), read_safetensors(os.path.join(ck + "-tp", f))
            worst = max((a[k] - b[k]).abs().max().item() for k in a)
            check(tag + "tp=2 with sp = 1 rank (checkpoint abs 1e-4)", sorted(a) == sorted(b) and worst <= 1e-4,
                  "%d tensors, worst %.2e" % (len(a), worst))
    r = subprocess.run([COLO, "export", "--checkpoint", last, "--format", "gguf-lora", "--out", ck + ".gguf"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    check("[dora] gguf-lora export refused", r.returncode != 0 and "no DoRA magnitudes" in r.stdout
          and not os.path.exists(ck + ".gguf"), r.stdout.strip().splitlines()[-1][:150])


def continued(tmp):
    """A LoRA run started from another LoRA run's checkpoint (train.init_from, or a pipeline
    stage's init_from_job): its adapters go on training with a fresh optimizer from step 0, on the
    model they adapted (the checkpoint's base, found in its manifest). Against PyTorch: AdamW from
    those adapters on that base, 10 steps; resumed halfway: bytes; with NF4 too; refusals."""
    tag = "[continued] "
    rel = os.path.join("gpt2-lora", "step_%08d" % STEPS)  # run()'s GPT-2 LoRA checkpoint
    src = os.path.join(tmp, rel)
    base_ckpt = os.path.join(tmp, "gpt2-base", "step_00000030")
    dump, ckpt = os.path.join(tmp, "cont.dump"), os.path.join(tmp, "cont")
    cont = ["train", "--data-root", tmp, "--train-data", "train.bin", "--eval-interval", "0",
            "--batch-size", str(B), "--grad-accum", str(ACCUM), "--steps", str(STEPS),
            "--lr", str(LR), "--min-lr", str(MIN_LR), "--warmup", str(WARMUP),
            "--weight-decay", str(WD), "--grad-clip", str(CLIP), "--beta2", str(B2),
            "--seed", "99", "--threads", "2", "--init-from", rel,
            "--lora-rank", str(RANK), "--lora-alpha", str(ALPHA)] + MODEL + ARCH["gpt2"]
    out = colo(cont + ["--ckpt-dir", ckpt, "--dump-reference", dump])
    ref = read_safetensors(dump)
    have = read_safetensors(os.path.join(src, "rank_00000.safetensors"))
    base = read_safetensors(os.path.join(base_ckpt, "rank_00000.safetensors"))
    names = sorted(k[len("init."):] for k in ref if k.startswith("init.") and ".lora_" in k)
    same_ab = len(names) == 16 and all(torch.equal(ref["init." + n], have[n]) for n in names)
    same_base = all(torch.equal(ref["init." + n], base[n]) for n in make_model("gpt2").names)
    check(tag + "its adapters and base: the checkpoint's (bits)", same_ab and same_base and
          "adapters from %s (step %d of its run)" % (src, STEPS) in out and
          "initial weights from %s, which checkpoint %s" % (os.path.realpath(base_ckpt), src) in out,
          "%d adapters; base %s" % (len(names), os.path.basename(base_ckpt)))
    model = Adapted("gpt2", {n: base[n] for n in make_model("gpt2").names}, MODULES["all"])
    for n in names:
        model.ab[n] = have[n].clone().requires_grad_(True)
    params = [model.ab[n] for n in names]
    opt = torch.optim.AdamW(params, lr=LR, betas=(B1, B2), eps=EPS, weight_decay=WD)
    worst_loss, worst_norm = replay(lambda i, t, st, mi: model.forward(i, t), ref, opt, params, [1.0])
    worst_w = max((model.ab[n].detach() - ref["final." + n]).abs().max().item() for n in names)
    check(tag + "10 steps = PyTorch's AdamW from them (1e-4)",
          worst_loss <= 1e-4 and worst_norm <= 1e-4 and worst_w <= 1e-4,
          "losses %.2e, norms %.2e, adapters %.2e; loss %.5f -> %.5f" %
          (worst_loss, worst_norm, worst_w, ref["losses"][0].item(), ref["losses"][STEPS - 1].item()))
    last = os.path.join(ckpt, "step_%08d" % STEPS)
    man = json.load(open(os.path.join(last, "manifest.json")))
    check(tag + "its manifest names the checkpoint's base, not the checkpoint",
          man["lora"].get("base") == os.path.realpath(base_ckpt), json.dumps(man["lora"]))
    halves = os.path.join(tmp, "cont-halves")
    colo(cont + ["--ckpt-dir", halves, "--stop-at", str(STEPS // 2), "--quiet"])
    colo(cont + ["--ckpt-dir", halves, "--resume", "auto", "--quiet"])
    f = os.path.join("step_%08d" % STEPS, "rank_00000.safetensors")
    check(tag + "stopped at step %d and resumed: the same checkpoint (bytes)" % (STEPS // 2),
          open(os.path.join(ckpt, f), "rb").read() == open(os.path.join(halves, f), "rb").read(), f)
    ev = json.loads(colo(["eval", "--checkpoint", last, "--data", os.path.join(tmp, "val.bin"),
                          "--batches", "2", "--batch-size", "4", "--json"]).strip().splitlines()[-1])
    q = colo(cont + ["--ckpt-dir", os.path.join(tmp, "cont-nf4"), "--lora-quant", "nf4", "--quiet",
                     "--dump-reference", dump + "-nf4"])
    qd = read_safetensors(dump + "-nf4")
    check(tag + "eval of it; the same start on the model in NF4", math.isfinite(ev["loss"]) and
          all(torch.equal(qd["init." + n], have[n]) for n in names) and
          0 < abs(qd["losses"][0].item() - ref["losses"][0].item()) < 1e-2,
          "eval %.5f; first loss %.6f in NF4, %.6f" % (ev["loss"], qd["losses"][0].item(),
                                                      ref["losses"][0].item()))
    # a run that is not LoRA: the model those adapters make, merged as export merges them
    full = os.path.join(tmp, "cont-full.dump")
    out = colo(cont + ["--lora-rank", "0", "--steps", "4", "--ckpt-dir", os.path.join(tmp, "cont-full"),
                       "--dump-reference", full])
    merged = os.path.join(tmp, "cont-merged.safetensors")
    colo(["export", "--checkpoint", src, "--out", merged])
    fd, ex = read_safetensors(full), read_safetensors(merged)
    mine = {k[len("init."):]: v for k, v in fd.items() if k.startswith("init.")}
    both = [k for k in mine if k in ex or "transformer." + k in ex]
    same = all(torch.equal(mine[k], ex[k] if k in ex else ex["transformer." + k]) for k in both)
    check(tag + "a full run from it: the export's merged model (bits)",
          len(both) == len(mine) == len(make_model("gpt2").names) and same and
          "with the adapters of %s merged in" % src in out and
          abs(fd["losses"][0].item() - ref["losses"][0].item()) <= 1e-5 * ref["losses"][0].item(),
          "%d tensors; first loss %.6f, the LoRA run's from them %.6f" %
          (len(both), fd["losses"][0].item(), ref["losses"][0].item()))
    for what, extra, want in (
            ("another rank", ["--lora-rank", "8"],
             "holds LoRA adapters of rank 4, alpha 8 on attn.c_attn,attn.c_proj,mlp.c_fc,mlp.c_proj; "
             "this run's are rank 8, alpha 8"),
            ("DoRA added", ["--lora-dora", "true"], "this run's are rank 4, alpha 8 (DoRA)"),
            ("not LoRA, on 2 tensor-parallel ranks", ["--lora-rank", "0", "--nproc", "2", "--tp", "2"],
             "holds LoRA adapters: a run that is not LoRA starts from the model they make, merged, "
             "with the model whole on each rank (parallel.tp=1, pp=1, zero_stage below 3; this run "
             "has tp=2, pp=1, zero_stage=0)")):
        r = subprocess.run([COLO] + cont + ["--ckpt-dir", os.path.join(tmp, "cont-bad"), "--quiet"] + extra,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        check(tag + "refused: " + what, r.returncode != 0 and want in r.stdout and
              not os.path.exists(os.path.join(tmp, "cont-bad", "step_%08d" % STEPS)),
              r.stdout.strip().splitlines()[-1][:170] if r.stdout.strip() else "")


def neftune_noise(key, row0, n, c, mag):
    """NEFTune's noise for rows row0 … row0 + n − 1 and columns 0 … c − 1: mag · (2u − 1), u the
    top 24 bits of the hash the dropout masks take (core/rng.h's colo_noise_unit), in float32"""
    u = np.uint64
    z = u(key) + (((np.arange(n, dtype=u) + u(row0))[:, None] << u(32)) +
                  np.arange(c, dtype=u)[None, :] + u(1)) * u(GOLD)
    z = (z ^ (z >> u(30))) * u(0xbf58476d1ce4e5b9)
    z = (z ^ (z >> u(27))) * u(0x94d049bb133111eb)
    unit = ((z ^ (z >> u(31))) >> u(40)).astype(np.float32) * np.float32(1.0 / 16777216.0)
    unit = (np.float32(2.0) * unit - np.float32(1.0)).astype(np.float32)
    return torch.from_numpy((np.float32(mag) * unit).astype(np.float32))


def neftune(tmp):
    """NEFTune (--neftune-alpha 5; Transformers' neftune_noise_alpha) on run()'s GPT-2 LoRA run
    against PyTorch: uniform noise in ±5/sqrt(T·C) added to the embeddings in training, made again
    here from its definition (the hash of the seed, step, row and column): losses, norms and
    adapters after 10 steps; not the run without it; two data-parallel ranks, two tensor-parallel
    ranks with sequence parallelism and two pipeline stages against one (a row's noise is its own
    on any rank)"""
    tag, alpha = "[neftune] ", 5.0
    mag = np.float32(alpha / math.sqrt(T * C))
    args = ["train", "--data-root", tmp, "--train-data", "train.bin", "--eval-interval", "0",
            "--grad-accum", str(ACCUM), "--steps", str(STEPS), "--lr", str(LR), "--min-lr", str(MIN_LR),
            "--warmup", str(WARMUP), "--weight-decay", str(WD), "--grad-clip", str(CLIP), "--beta2", str(B2),
            "--seed", "1234", "--threads", "1", "--init-from", os.path.join("gpt2-base", "step_00000030"),
            "--lora-rank", str(RANK), "--lora-alpha", str(ALPHA), "--neftune-alpha", str(alpha)
            ] + MODEL + ARCH["gpt2"]
    dump = os.path.join(tmp, "neft.dump")
    colo(args + ["--batch-size", str(B), "--ckpt-dir", os.path.join(tmp, "neft"), "--dump-reference", dump])
    ref, plain = read_safetensors(dump), read_safetensors(os.path.join(tmp, "gpt2-lora.dump"))
    model = Adapted("gpt2", {n: ref["init." + n] for n in make_model("gpt2").names}, MODULES["all"])
    names = sorted(model.ab)
    for n in names:
        model.ab[n] = ref["init." + n].clone().requires_grad_(True)
    params = [model.ab[n] for n in names]
    opt = torch.optim.AdamW(params, lr=LR, betas=(B1, B2), eps=EPS, weight_decay=WD)

    def forward(idx, tg, step, micro):
        key = hash4(1234, step, 0x6e656674, 0)
        model.m.noise = neftune_noise(key, micro * B * T, B * T, C, mag).view(B, T, C)
        return model.forward(idx, tg)

    worst_loss, worst_norm = replay(forward, ref, opt, params, [1.0])
    worst_w = max((model.ab[n].detach() - ref["final." + n]).abs().max().item() for n in names)
    apart = abs(ref["losses"][0].item() - plain["losses"][0].item())
    check(tag + "10 steps = PyTorch with the noise made again (1e-4)",
          worst_loss <= 1e-4 and worst_norm <= 1e-4 and worst_w <= 1e-4 and apart > 1e-4,
          "losses %.2e, norms %.2e, adapters %.2e; first loss %.6f, %.6f without (magnitude %.4f)" %
          (worst_loss, worst_norm, worst_w, ref["losses"][0].item(), plain["losses"][0].item(), mag))
    two = os.path.join(tmp, "neft-dp2.dump")
    colo(args + ["--batch-size", str(B // 2), "--nproc", "2", "--dp", "2", "--ckpt-dir",
                 os.path.join(tmp, "neft-dp2"), "--dump-reference", two, "--quiet"])
    colo(args + ["--batch-size", str(B), "--nproc", "2", "--pp", "2", "--micro-batches", "1",
                 "--ckpt-dir", os.path.join(tmp, "neft-pp2"), "--quiet"])
    tpd = os.path.join(tmp, "neft-tp2.dump")
    colo(args + ["--batch-size", str(B), "--nproc", "2", "--tp", "2", "--sp", "true", "--ckpt-dir",
                 os.path.join(tmp, "neft-tp2"), "--dump-reference", tpd, "--quiet"])
    d2, dt = read_safetensors(two), read_safetensors(tpd)
    lrel = max(((d["losses"] - ref["losses"]).abs() / ref["losses"]).max().item() for d in (d2, dt))
    f = os.path.join("step_%08d" % STEPS, "rank_00000.safetensors")
    pp_same = open(os.path.join(tmp, "neft", f), "rb").read() == open(os.path.join(tmp, "neft-pp2", f), "rb").read()
    check(tag + "2 data-parallel ranks, tp=2 with sp (1e-5); 2 stages (bytes)", lrel <= 1e-5 and pp_same,
          "worst %.2e; stages: %s" % (lrel, pp_same))


def words_data(prefix):
    """a temporary folder of shards (train.bin, val.bin) of 6,000 random words of 300"""
    tmp = tempfile.mkdtemp(prefix=prefix)
    rng = np.random.default_rng(11)
    words = ["".join(chr(97 + c) for c in rng.integers(0, 26, rng.integers(1, 8))) for _ in range(300)]
    with open(os.path.join(tmp, "text.txt"), "w") as f:
        f.write(" ".join(words[i] for i in rng.integers(0, 300, 6000)) + "\n")
    colo(["prepare", "--input", os.path.join(tmp, "text.txt"), "--out", tmp])
    return tmp


def main():
    tmp = words_data("colo-lora-")
    run(tmp, "gpt2")
    run(tmp, "llama")
    data_parallel(tmp)
    pipeline(tmp)
    tensor_parallel(tmp)
    dropout(tmp)
    rslora(tmp)
    loraplus(tmp)
    dora(tmp)
    dropout(tmp, dora=True)
    continued(tmp)
    neftune(tmp)
    print("%d failed" % len(failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
