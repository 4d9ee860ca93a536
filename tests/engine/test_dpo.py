#!/usr/bin/python3
"""DPO (train.dpo_beta) against PyTorch (Debian's python3-torch).

`colo-train prepare --prompt-field --chosen-field --rejected-field` writes preference pairs; this
reads the shard back with numpy (header, tokens, loss mask, the table of sequences) and checks
each sequence is its line's prompt and answer, the answer alone counting; in TRL's
conversational form, through a built-in chat template and the tokenizer's own Jinja, each
sequence is what `--messages-field` writes for prompt + answer, only the answer counting. Then a LoRA run on a
small GPT-2 with --dpo-beta trains 10 steps (2 micro-batches of 2 pairs a step, AdamW with weight
decay, clipping, warm-up and cosine) with a reference dump (the base, the adapters, every batch,
each step's loss and gradient norm, the final adapters). The replay here is DPO written out in
PyTorch, as TRL's DPOTrainer computes its sigmoid loss: each answer's log-probability the sum of
its tokens' (cross-entropy with ignore_index), the reference's from the base model alone (no
adapters) under no_grad, the loss −logsigmoid(β·((π_c − ρ_c) − (π_r − ρ_r))) averaged over the
pairs, autograd for the adapters' gradients, torch.optim.AdamW and clip_grad_norm_. It checks:

  - the first loss is log 2 (B starts at zero: the model is its reference);
  - every adapter gradient of the first step within 1e-4 of the tensor's largest;
  - the losses and gradient norms of all 10 steps within 1e-4 relative; the adapters after 10
    steps within 1e-4 absolute;
  - each batch's rows are pairs of the file (chosen, rejected, one prompt), no pair twice within
    the run's first epoch;
  - the validation DPO loss, reward accuracy and margin over every validation pair at the end,
    against PyTorch's on the same pairs with colo's final adapters (1e-4);
  - a run stopped at step 5 and resumed: its step-10 checkpoint the same, byte for byte;
  - a DPO run from that run's checkpoint: its adapters go on training with the model as it starts
    (those adapters included) as the reference: the replay's reference is that adapted model (the
    first loss log 2 again; losses, norms, adapters as above), and its resume in bytes;
  - 2 data-parallel ranks (dropout on, its masks numbered by row) = 1 rank within 1e-5 (losses)
    and 1e-4 (adapters); tensor parallelism (tp=2, with sequence parallelism) likewise; 2
    pipeline stages of 2 micro-batches (the live reference a pass of its own) likewise, and the
    validation loss within 1e-4;
  - QLoRA (NF4) with DPO: the reference is the quantized model, the first loss log 2;
  - DPO of the whole model (no LoRA), its reference precomputed (a forward over every pair
    before the first step, the table carried in the checkpoints): replayed in PyTorch with a
    trainable GPT-2 and a frozen copy of its first weights as the reference (first loss log 2,
    step-1 gradients 1e-4 of max, losses and norms 1e-4 relative, weights 1e-4 absolute but for
    the attention's key biases, whose gradients are rounding noise); the validation loss; the
    checkpoint's table of every pair against PyTorch's log-probabilities on rows_of's windows (a
    sequence over T + 1 tokens keeps its first token, the prompt's end and the whole answer); a resume at step 5 in bytes, table
    included; a damaged table refused; 2 data-parallel ranks under ZeRO-3 and tp=2 with
    sequence parallelism and 2 pipeline stages = 1 rank (losses 1e-5, weights 1e-4);
  - TRL's other losses, each ten LoRA steps replayed in PyTorch as above: hinge (first loss 1),
    IPO on the mean log-probabilities per counted token (first loss (1/(2β))² = 1), the
    sigmoid loss with label smoothing 0.1 (cDPO), and without a reference SimPO (margin 0.3,
    smoothing 0.1) and ORPO (the chosen answer's NLL per token + β·the odds ratio's loss), and
    the sigmoid loss with RPO's NLL term (alpha 1);
    ORPO on the whole model computes and keeps no reference table;
  - LoRA with --dpo-precompute = the reference's forward at every step (losses 1e-5, adapters
    1e-4); resuming a checkpoint without a table that way is refused;
  - refusals, each with its message: --dpo-precompute without DPO, an unknown loss, label
    smoothing on IPO or at 0.5, a pipeline's micro-batch of an odd number of rows, an odd
    batch, a shard without pairs under DPO, pairs without DPO, a validation set without pairs.
Exit 0 when all pass.
"""
import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from byte_tokenizer import hf_tokenizer  # noqa: E402
from test_torch_reference import read_safetensors  # noqa: E402
import test_lora as tl  # noqa: E402  (its Adapted model and constants; its main does not run)

COLO = os.path.join(os.environ["COLO_BIN"], "colo-train")
torch.set_num_threads(1)

L, NH, C, T, V = tl.L, tl.NH, tl.C, tl.T, tl.V
B, ACCUM, STEPS = 4, 2, tl.STEPS  # rows: 2 pairs a micro-batch
P = B // 2
BETA = 0.5
GAMMA = 0.3  # SimPO's margin in its test
LR, MIN_LR, WARMUP, WD, CLIP, B1, B2, EPS = tl.LR, tl.MIN_LR, tl.WARMUP, tl.WD, tl.CLIP, tl.B1, tl.B2, tl.EPS
RANK, ALPHA = 4, 8.0
MODEL = ["--n-layer", str(L), "--n-head", str(NH), "--n-embd", str(C), "--block-size", str(T),
         "--vocab-size", str(V), "--arch", "gpt2"]

failures = []


def check(what, ok, detail):
    print("%-62s %s  %s" % (what, "ok  " if ok else "FAIL", detail))
    if not ok:
        failures.append(what)


def colo(args, expect=0):
    r = subprocess.run([COLO] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if (r.returncode == 0) != (expect == 0):
        print(r.stdout)
        raise SystemExit("colo-train %s exited %d" % (args[0], r.returncode))
    return r.stdout


def make_pairs(tmp):
    """sums with a right and a wrong answer; a few long prompts that the block cuts"""
    rnd = random.Random(5)
    lines = []
    for i in range(200):
        a, b = rnd.randint(0, 99), rnd.randint(0, 99)
        prompt = "%d+%d=" % (a, b) if i % 25 else "what is the sum of %d and %d? " % (a, b)
        lines.append({"prompt": prompt, "chosen": str(a + b), "rejected": str(a + b + rnd.randint(1, 9)),
                      "id": i})
    with open(os.path.join(tmp, "pairs.jsonl"), "w") as f:
        for x in lines:
            f.write(json.dumps(x) + "\n")
    return lines


def read_pairs_shard(path):
    b = open(path, "rb").read()
    h = np.frombuffer(b[:1024], dtype=np.int32)
    n, w, S = int(h[2]), int(h[3]), int(h[4])
    tok = np.frombuffer(b[1024:1024 + w * n], dtype=np.uint16 if w == 2 else np.uint32)
    m0 = 1024 + w * n
    bits = np.unpackbits(np.frombuffer(b[m0:m0 + (n + 7) // 8], dtype=np.uint8), bitorder="little")[:n]
    at = (m0 + (n + 7) // 8 + 7) // 8 * 8
    seq = np.frombuffer(b[at:at + 8 * S], dtype=np.uint64).astype(np.int64)
    ends = list(seq[1:]) + [n]
    return h, [(tok[a:e], bits[a:e]) for a, e in zip(seq, ends)], len(b) - (at + 8 * S)


def prepare(tmp, lines):
    out = colo(["prepare", "--input", os.path.join(tmp, "pairs.jsonl"), "--out", os.path.join(tmp, "d"),
                "--prompt-field", "prompt", "--chosen-field", "chosen", "--rejected-field", "rejected",
                "--val-fraction", "0.1", "--json"])
    js = json.loads(out)
    h, seqs, extra = read_pairs_shard(os.path.join(tmp, "d", "train.bin"))
    _, vseqs, _ = read_pairs_shard(os.path.join(tmp, "d", "val.bin"))
    ntrain = len(seqs) // 2
    ok = h[0] == 20261128 and h[1] == 1 and extra == 0 and len(seqs) % 2 == 0
    ok &= js["train"]["pairs"] == ntrain and js["val"]["pairs"] == len(vseqs) // 2
    ok &= ntrain + len(vseqs) // 2 == len(lines)
    for i, x in enumerate(lines):  # train's pairs, then val's, in the file's order
        s = seqs if i < ntrain else vseqs
        k = i if i < ntrain else i - ntrain
        for j, ans in ((0, x["chosen"]), (1, x["rejected"])):
            t, m = s[2 * k + j]
            want = (x["prompt"] + ans).encode()
            ok &= bytes(t.astype(np.uint8)) == want
            ok &= list(m) == [0] * len(x["prompt"]) + [1] * len(ans)
    check("prepare: pairs, sequences and masks as the lines say", bool(ok),
          "%d train pairs, %d val, %d tokens" % (ntrain, len(vseqs) // 2, h[2]))
    return seqs, vseqs


CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def conversational(tmp):
    """TRL's conversational pairs (a multi-turn prompt, answers as a string or a list of the
    assistant's messages) through a chat template: each sequence the tokens `--messages-field`
    writes for the conversation prompt + answer, its mask that one's with only the last
    assistant message counting (the prompt's own assistant turn not)"""
    tok = os.path.join(tmp, "chat-tok")
    hf_tokenizer(tok, specials=["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                                "<|im_start|>", "<|im_end|>"])
    cfg = json.load(open(os.path.join(tok, "tokenizer_config.json")))
    cfg["chat_template"] = CHATML
    json.dump(cfg, open(os.path.join(tok, "tokenizer_config.json"), "w"))
    rnd = random.Random(9)
    pairs, convs = [], []
    for i in range(30):
        a, b = rnd.randint(0, 99), rnd.randint(0, 99)
        prompt = [{"role": "user", "content": "add %d and %d" % (a, b)}]
        if i % 3 == 0:
            prompt = [{"role": "system", "content": "be brief"}] + prompt + \
                [{"role": "assistant", "content": "which order?"}, {"role": "user", "content": "any"}]
        chosen = str(a + b)
        rejected = [{"role": "assistant", "content": "maybe %d" % (a + b + 1)}]
        pairs.append({"prompt": prompt, "chosen": chosen, "rejected": rejected})
        convs.append({"messages": prompt + [{"role": "assistant", "content": chosen}]})
        convs.append({"messages": prompt + rejected})
    for name, rows in (("conv-pairs.jsonl", pairs), ("conv-sft.jsonl", convs)):
        with open(os.path.join(tmp, name), "w") as f:
            f.write("".join(json.dumps(x) + "\n" for x in rows))
    for template in ("llama3", None):  # built in, and the tokenizer's own (Jinja)
        tpl = ["--chat-template", template] if template else []
        d, ds = os.path.join(tmp, "cp-%s" % template), os.path.join(tmp, "cs-%s" % template)
        said = colo(["prepare", "--input", os.path.join(tmp, "conv-pairs.jsonl"), "--out", d, "--tokenizer", tok,
                     "--prompt-field", "prompt", "--chosen-field", "chosen", "--rejected-field", "rejected",
                     "--val-fraction", "0"] + tpl)
        colo(["prepare", "--input", os.path.join(tmp, "conv-sft.jsonl"), "--out", ds, "--tokenizer", tok,
              "--messages-field", "messages", "--val-fraction", "0"] + tpl)
        _, seqs, _ = read_pairs_shard(os.path.join(d, "train.bin"))
        b = open(os.path.join(ds, "train.bin"), "rb").read()
        n = struct.unpack("<i", b[8:12])[0]
        t = np.frombuffer(b[1024:1024 + 2 * n], dtype=np.uint16)
        m = np.unpackbits(np.frombuffer(b[1024 + 2 * n:1024 + 2 * n + (n + 7) // 8], dtype=np.uint8),
                          bitorder="little")[:n]
        starts = [i for i in range(n) if t[i] == 256] + [n]
        ok = len(starts) - 1 == len(seqs) == 2 * len(pairs)
        for k in range(len(seqs) if ok else 0):
            a0, a1 = starts[k], starts[k + 1]
            want = m[a0:a1].copy()
            ones = [i for i in range(1, len(want)) if want[i] and not want[i - 1]]
            want[:ones[-1]] = 0  # the last assistant message's run alone
            ok &= list(seqs[k][0]) == list(t[a0:a1]) and list(seqs[k][1]) == list(want)
        check("conversational pairs (%s): the conversations' tokens, the answers alone counting"
              % (template or "the tokenizer's Jinja"), bool(ok),
              "%d sequences; %s" % (len(seqs), said.splitlines()[0]))


def rows_of(seqs, k):
    """sequence k as colo's row: inputs, targets (−1 where the mask leaves it out), padded; one
    longer than T + 1 tokens keeps its first token and the prompt's end before the whole answer
    (TRL's prompt truncation), or, an answer of T tokens or more, the answer's start"""
    t, m = seqs[k]
    t, m = [int(x) for x in t], [int(x) for x in m]
    if len(t) > T + 1:
        c = next((i for i in range(1, len(t)) if m[i]), len(t))  # the answer's first token
        start = len(t) - T if len(t) - c <= T - 1 else max(c - 1, 1)
        keep = [0] + list(range(start, start + T))
        t, m = [t[i] for i in keep], [m[i] for i in keep]
    inp, tg = [0] * T, [-1] * T
    for i in range(T):
        if i + 1 <= len(t):
            inp[i] = t[i]
        if i + 1 < len(t) and m[i + 1]:
            tg[i] = t[i + 1]
    return inp, tg


def logps(model_fwd, idx, tg):
    ce = model_fwd(idx, tg)  # reduction none: [rows·T], 0 where ignored
    return -ce.view(idx.shape[0], T).sum(1)


def dpo_loss(pol, ref, kind="sigmoid", eps=0.0, counts=None, rpo=0.0):
    """dpo_loss_of, plus RPO's rpo times the chosen answers' mean NLL per counted token"""
    loss, z = dpo_loss_of(pol, ref, kind, eps, counts)
    if rpo:
        loss = loss + rpo * (-pol[0::2] / counts[0::2].clamp(min=1)).mean()
    return loss, z


def dpo_loss_of(pol, ref, kind="sigmoid", eps=0.0, counts=None):
    """TRL's losses of the pairs (rows 2i, 2i + 1) and z: sigmoid (with label smoothing eps),
    hinge, and ipo, simpo and orpo on the mean log-probabilities per counted token (counts: each
    row's; an answer cut away entirely counts as 1, as colo takes it), simpo and orpo without the
    reference"""
    if kind in ("simpo", "orpo"):
        lp = pol.double() / counts.clamp(min=1)
        lc, lr = lp[0::2], lp[1::2]
        z = BETA * (lc - lr)
        if kind == "simpo":
            zs = z - GAMMA
            return (-(1 - eps) * F.logsigmoid(zs) - eps * F.logsigmoid(-zs)).mean(), z
        odds = lambda x: x - torch.log1p(-torch.clamp(torch.exp(x), max=1 - 1e-12))  # noqa: E731
        return (-lc - BETA * F.logsigmoid(odds(lc) - odds(lr))).mean(), z
    if kind == "ipo":
        pol, ref = pol / counts.clamp(min=1), ref / counts.clamp(min=1)
    z = BETA * ((pol[0::2] - ref[0::2]) - (pol[1::2] - ref[1::2]))
    if kind == "hinge":
        return torch.relu(1 - z).mean(), z
    if kind == "ipo":
        return ((z / BETA - 1 / (2 * BETA)) ** 2).mean(), z
    return (-(1 - eps) * F.logsigmoid(z) - eps * F.logsigmoid(-z)).mean(), z


def run_args(tmp, extra=(), steps=STEPS, b=B):
    return (["train", "--data-root", tmp, "--train-data", "d/train.bin", "--val-data", "d/val.bin",
             "--eval-interval", str(steps), "--eval-batches", "0", "--batch-size", str(b),
             "--grad-accum", str(ACCUM), "--steps", str(steps), "--lr", str(LR), "--min-lr", str(MIN_LR),
             "--warmup", str(WARMUP), "--weight-decay", str(WD), "--grad-clip", str(CLIP), "--beta2", str(B2),
             "--seed", "1234", "--threads", "2", "--init-from", os.path.join("base", "step_00000040"),
             "--lora-rank", str(RANK), "--lora-alpha", str(ALPHA), "--dpo-beta", str(BETA)]
            + MODEL + list(extra))


def replay(tag, ref, reference=None, kind="sigmoid", eps=0.0, rpo=0.0):
    """colo's STEPS steps of dump `ref` again in PyTorch, from its initial adapters; the reference
    the base alone, or with the adapters `reference` (a continued run's first). Returns the
    adapted model (its adapters the replay's last), the base alone, and the adapters' names."""
    base = {n: ref["init." + n] for n in tl.make_model("gpt2").names}
    model = tl.Adapted("gpt2", base, tl.MODULES["all"], scale=ALPHA / RANK)
    model.m.reduction = "none"
    plain = tl.make_model("gpt2")
    plain.reduction = "none"
    with torch.no_grad():
        for n in plain.names:
            plain.p[n].copy_(base[n])
    names = sorted(model.ab)
    rmodel = None
    if reference:
        rmodel = tl.Adapted("gpt2", base, tl.MODULES["all"], scale=ALPHA / RANK)
        rmodel.m.reduction = "none"
        for n in names:
            rmodel.ab[n] = reference[n].clone()
    for n in names:
        model.ab[n] = ref["init." + n].clone().requires_grad_(True)
    params = [model.ab[n] for n in names]
    opt = torch.optim.AdamW(params, lr=LR, betas=(B1, B2), eps=EPS, weight_decay=WD)

    def forward(idx, tg, step, micro):
        with torch.no_grad():
            rho = logps(rmodel.forward if rmodel else plain, idx, tg)
        return dpo_loss(logps(model.forward, idx, tg), rho, kind, eps, (tg >= 0).sum(1), rpo)[0]

    z0 = None if rpo else {"sigmoid": math.log(2), "hinge": 1.0, "ipo": (1 / (2 * BETA)) ** 2}.get(kind)

    def first(total, rel):
        colo_loss = ref["losses"][0].item()
        if z0 is None:  # no reference: the loss of the model as it is
            check(tag + "first loss (1e-6 relative)", rel <= 1e-6, "colo %.7f torch %.7f" % (colo_loss, total))
        else:
            check(tag + "first loss: %.6f, z = 0 (the model is its reference)" % z0,
                  abs(colo_loss - z0) <= 1e-6 and abs(total - z0) <= 1e-6,
                  "colo %.7f torch %.7f" % (colo_loss, total))
        worst_grad = max((model.ab[n].grad - ref["grad." + n]).abs().max().item() /
                         max(model.ab[n].grad.abs().max().item(), 1e-12) for n in names)
        check(tag + "adapter gradients of step 1, %d tensors (1e-4 of max)" % len(names),
              worst_grad <= 1e-4, "worst %.2e" % worst_grad)

    # test_lora's replay: the same batches (its B rows, ACCUM micro-batches, STEPS steps), clipping
    # and schedule
    assert (tl.B, tl.ACCUM) == (B, ACCUM)
    worst_loss, worst_norm = tl.replay(forward, ref, opt, params, [1.0], first)
    check(tag + "DPO losses of %d steps (rel 1e-4)" % STEPS, worst_loss <= 1e-4,
          "worst %.2e; last colo %.6f" % (worst_loss, ref["losses"][STEPS - 1].item()))
    check(tag + "gradient norms of %d steps (rel 1e-4)" % STEPS, worst_norm <= 1e-4, "worst %.2e" % worst_norm)
    worst_w = max((model.ab[n].detach() - ref["final." + n]).abs().max().item() for n in names)
    moved = max((ref["final." + n] - ref["init." + n]).abs().max().item() for n in names)
    check(tag + "adapters after %d steps (abs 1e-4)" % STEPS, worst_w <= 1e-4 and moved > 1e-3,
          "worst %.2e, moved up to %.2e" % (worst_w, moved))
    return model, plain, names


def whole_args(tmp, extra=(), b=B):
    """run_args without LoRA: the whole model trains"""
    a = run_args(tmp, extra, b=b)
    i = a.index("--lora-rank")
    return a[:i] + a[i + 4:]


def export(tmp, ck):
    """a checkpoint of any mesh as whole tensors (colo-train export)"""
    out = ck + ".safetensors"
    colo(["export", "--checkpoint", ck, "--out", out])
    return read_safetensors(out)


def apart(a, b, names):
    """the largest difference of tensors `names` in a and b, without the attention's key biases
    (c_attn.bias[C:2C]): softmax does not see them, so their gradients are rounding noise, which
    AdamW's first steps turn into steps of the learning rate's size, different in each run"""
    worst = 0.0
    for n in names:
        d = (a[n] - b[n]).abs()
        if n.endswith("attn.c_attn.bias"):
            d = torch.cat([d[:C], d[2 * C:]])
        worst = max(worst, d.max().item())
    return worst


def val_of(out):
    line = [x for x in out.splitlines() if x.startswith("step %6d | val loss" % STEPS)]
    return float(line[0].split()[5]) if line else float("nan")


def step_losses(out):
    return torch.tensor([float(x.split("| loss ")[1].split()[0]) for x in out.splitlines()
                         if x.startswith("step ") and "| loss " in x])


def whole_model(tmp, seqs, vseqs):
    """DPO of the whole model, its reference precomputed: replayed in PyTorch (a trainable GPT-2,
    the reference a frozen copy of its first weights); a resume; data and tensor parallelism;
    ZeRO-3; a damaged table"""
    f = "step_%08d" % STEPS
    dump, ck = os.path.join(tmp, "whole.dump"), os.path.join(tmp, "whole")
    out = colo(whole_args(tmp, ["--ckpt-dir", ck, "--dump-reference", dump]))
    said = [x for x in out.splitlines() if x.startswith("dpo:")]
    check("[whole] colo-train says the reference is precomputed, and over how many pairs",
          len(said) == 3 and "precomputed: a forward over every pair" in said[0]
          and "of 200 pairs (180 training, 20 validation) computed in" in said[2], " / ".join(said))
    ref = read_safetensors(dump)
    model, frozen = tl.make_model("gpt2"), tl.make_model("gpt2")
    model.reduction = frozen.reduction = "none"
    with torch.no_grad():
        for n in model.names:
            model.p[n].copy_(ref["init." + n])
            frozen.p[n].copy_(ref["init." + n])
    params = [model.p[n] for n in model.names]
    opt = torch.optim.AdamW(model.param_groups(WD), lr=LR, betas=(B1, B2), eps=EPS)

    def forward(idx, tg, step, micro):
        with torch.no_grad():
            rho = logps(frozen, idx, tg)
        return dpo_loss(logps(model, idx, tg), rho)[0]

    def first(total, rel):
        colo_loss = ref["losses"][0].item()
        check("[whole] first loss: log 2 (the model is its reference)",
              abs(colo_loss - math.log(2)) <= 1e-6 and abs(total - math.log(2)) <= 1e-6,
              "colo %.7f torch %.7f" % (colo_loss, total))
        worst = max((model.p[n].grad - ref["grad." + n]).abs().max().item() /
                    max(model.p[n].grad.abs().max().item(), 1e-12) for n in model.names)
        check("[whole] gradients of step 1, %d tensors (1e-4 of max)" % len(model.names),
              worst <= 1e-4, "worst %.2e" % worst)

    worst_loss, worst_norm = tl.replay(forward, ref, opt, params, [1.0, 1.0], first)
    check("[whole] DPO losses of %d steps (rel 1e-4)" % STEPS, worst_loss <= 1e-4,
          "worst %.2e; last colo %.6f" % (worst_loss, ref["losses"][STEPS - 1].item()))
    check("[whole] gradient norms of %d steps (rel 1e-4)" % STEPS, worst_norm <= 1e-4,
          "worst %.2e" % worst_norm)
    mine = {"final." + n: model.p[n].detach() for n in model.names}
    worst_w = apart(mine, ref, mine)
    moved = max((ref["final." + n] - ref["init." + n]).abs().max().item() for n in model.names)
    check("[whole] weights after %d steps, key biases aside (abs 1e-4)" % STEPS,
          worst_w <= 1e-4 and moved > 1e-3, "worst %.2e, moved up to %.2e; key biases %.2e" %
          (worst_w, moved, max((mine[n] - ref[n]).abs().max().item() for n in mine if "c_attn.bias" in n)))
    with torch.no_grad():
        for n in model.names:
            model.p[n].copy_(ref["final." + n])
        rows = [rows_of(vseqs, k) for k in range(len(vseqs))]
        idx, tg = torch.tensor([r[0] for r in rows]), torch.tensor([r[1] for r in rows])
        vloss, z = dpo_loss(logps(model, idx, tg), logps(frozen, idx, tg))
    line = [x for x in out.splitlines() if x.startswith("step %6d | val loss" % STEPS)]
    got = float(line[0].split()[5]) if line else float("nan")
    check("[whole] validation: DPO loss over every val pair (1e-4)", abs(got - vloss.item()) <= 1e-4,
          "colo %.4f torch %.6f" % (got, vloss.item()))
    first_eval = [x for x in out.splitlines() if x.startswith("step      0 | val loss")]
    check("[whole] validation at step 0: log 2, accuracy 0, margin 0 (the table is the model)",
          first_eval and "val loss 0.6931 | reward accuracy 0.0000, margin 0.0000" in first_eval[0],
          first_eval[0] if first_eval else "")

    # the table in the checkpoint: every training and validation pair's reference, as PyTorch's
    # on rows_of's windows (the long prompts' pairs kept to their end and the whole answer)
    tab = read_safetensors(os.path.join(ck, f, "dpo_reference.safetensors"))
    with torch.no_grad():
        want = logps(frozen, idx, tg).view(-1, 2)
        trows = [rows_of(seqs, k) for k in range(len(seqs))]
        want_t = logps(frozen, torch.tensor([r[0] for r in trows]), torch.tensor([r[1] for r in trows])).view(-1, 2)
    terr = max((tab["val.0"] - want).abs().max().item(), (tab["train"] - want_t).abs().max().item())
    longs = sum(len(x[0]) > T + 1 for x in seqs)
    check("[whole] checkpoint's table: every pair's reference as PyTorch's (1e-4), long prompts cut",
          sorted(tab) == ["train", "val.0"] and tuple(tab["train"].shape) == (180, 2) and terr <= 1e-4
          and longs > 0, "%s, worst %.2e; %d training sequences over T + 1 tokens" %
          ({k: tuple(v.shape) for k, v in tab.items()}, terr, longs))

    # stopped at step 5 and resumed: the table read back, the same checkpoint
    halves = os.path.join(tmp, "whole-halves")
    colo(whole_args(tmp, ["--ckpt-dir", halves, "--stop-at", "5", "--quiet"]))
    r = colo(whole_args(tmp, ["--ckpt-dir", halves, "--resume", "auto"]))
    same = all(open(os.path.join(ck, f, x), "rb").read() == open(os.path.join(halves, f, x), "rb").read()
               for x in ("rank_00000.safetensors", "dpo_reference.safetensors"))
    check("[whole] stopped at step 5 and resumed: the same checkpoint, table too (bytes)",
          same and "log-probabilities of 200 pairs read from" in r,
          [x for x in r.splitlines() if "read from" in x][0] if "read from" in r else r[-200:])

    # a damaged table: the checkpoint does not verify
    bad = os.path.join(tmp, "whole-bad")
    shutil.copytree(os.path.join(halves, "step_00000005"), os.path.join(bad, "step_00000005"))
    with open(os.path.join(bad, "step_00000005", "dpo_reference.safetensors"), "r+b") as fh:
        fh.seek(-4, 2)
        fh.write(b"\x00\x00\x80\x7f")
    r = colo(whole_args(tmp, ["--ckpt-dir", bad, "--resume", os.path.join(bad, "step_00000005")]),
             expect=1)
    check("[whole] a damaged table is refused", "dpo_reference.safetensors does not match its sha256" in r,
          r.strip().splitlines()[-1][:160])

    # layouts: 2 data-parallel ranks under ZeRO-3 (the parameters in pieces: the table's forward
    # gathers them), tp=2 with sequence parallelism; the losses as printed, the weights exported
    whole = export(tmp, os.path.join(ck, f))
    for name, tag, extra, b in (
            ("whole-z3", "[whole] 2 data-parallel ranks, ZeRO-3 = 1 rank",
             ["--nproc", "2", "--dp", "2", "--zero", "3"], B // 2),
            ("whole-tp", "[whole] tp=2 with sequence parallelism = 1 rank",
             ["--nproc", "2", "--tp", "2", "--sp", "true"], B),
            ("whole-cp", "[whole] cp=2 (each sequence's tokens split; the table through them) = 1 rank",
             ["--nproc", "2", "--cp", "2"], B),
            ("whole-pp", "[whole] 2 pipeline stages (2 micro-batches; the table through them) = 1 rank",
             ["--nproc", "2", "--pp", "2", "--micro-batches", "2"], B)):
        c = os.path.join(tmp, name)
        lo = step_losses(colo(whole_args(tmp, ["--ckpt-dir", c] + extra, b=b)))
        other = export(tmp, os.path.join(c, f))
        lrel = ((lo - ref["losses"]).abs() / ref["losses"].abs()).max().item() if len(lo) == STEPS else 1
        wabs = apart(whole, other, whole)
        check(tag + " (losses 1e-5, weights 1e-4)", lrel <= 1e-5 and wabs <= 1e-4 and sorted(whole) == sorted(other),
              "losses %.2e, weights %.2e over %d tensors" % (lrel, wabs, len(whole)))


def precomputed_lora(tmp, ref):
    """LoRA with --dpo-precompute: the table in place of the reference's forward, the same run"""
    f = "step_%08d" % STEPS
    d, c = os.path.join(tmp, "pre.dump"), os.path.join(tmp, "pre")
    out = colo(run_args(tmp, ["--dpo-precompute", "true", "--dump-reference", d, "--ckpt-dir", c]))
    pre = read_safetensors(d)
    lrel = ((pre["losses"] - ref["losses"]).abs() / ref["losses"].abs()).max().item()
    wabs = max((pre[n] - ref[n]).abs().max().item() for n in ref if n.startswith("final.") and ".lora_" in n)
    check("[lora] --dpo-precompute = the reference's forward at every step",
          "precomputed: a forward over every pair" in out and lrel <= 1e-5 and wabs <= 1e-4,
          "losses %.2e, adapters %.2e" % (lrel, wabs))
    # a run that did not precompute has no table to resume with
    r = colo(run_args(tmp, ["--dpo-precompute", "true", "--resume", os.path.join(tmp, "dpo", f),
                            "--steps", str(STEPS + 2)]), expect=1)
    check("[lora] resuming a checkpoint without a table, precomputing, is refused",
          "holds no table of DPO's reference log-probabilities" in r, r.strip().splitlines()[-1][:160])


def losses(tmp):
    """TRL's other losses: hinge, IPO, and the sigmoid loss with label smoothing (cDPO), each ten
    LoRA steps replayed in PyTorch"""
    for kind, eps, rpo, flags, want in (
            ("hinge", 0.0, 0.0, ["--dpo-loss", "hinge"], "(hinge loss"),
            ("ipo", 0.0, 0.0, ["--dpo-loss", "ipo"], "(IPO loss"),
            ("sigmoid", 0.1, 0.0, ["--dpo-label-smoothing", "0.1"], "(sigmoid loss, label smoothing 0.1)"),
            ("simpo", 0.1, 0.0, ["--dpo-loss", "simpo", "--dpo-simpo-gamma", str(GAMMA), "--dpo-label-smoothing",
                                 "0.1"],
             "(SimPO loss: mean log-probabilities per token, margin gamma 0.3, label smoothing 0.1), no reference"),
            ("orpo", 0.0, 0.0, ["--dpo-loss", "orpo"], "(ORPO loss"),
            ("sigmoid", 0.0, 1.0, ["--dpo-rpo-alpha", "1"],
             "beta 0.5 + RPO: 1 x the chosen answer's NLL per token, reference")):
        d = os.path.join(tmp, "loss-%s-%g.dump" % (kind, rpo))
        out = colo(run_args(tmp, flags + ["--dump-reference", d]))
        said = [x for x in out.splitlines() if x.startswith("dpo: beta")]
        tag = "[%s%s%s] " % (kind, ", eps %g" % eps if eps else "", ", RPO alpha %g" % rpo if rpo else "")
        check(tag + "colo-train names the loss", said and want in said[0], said[0] if said else out[-200:])
        replay(tag, read_safetensors(d), kind=kind, eps=eps, rpo=rpo)
    # the whole model with ORPO: no reference computed, none kept
    c = os.path.join(tmp, "orpo-whole")
    out = colo(whole_args(tmp, ["--dpo-loss", "orpo", "--steps", "4", "--eval-interval", "4", "--ckpt-dir", c]))
    said = [x for x in out.splitlines() if x.startswith("dpo:")]
    kinds = [f.get("kind") for f in json.load(open(os.path.join(c, "step_00000004", "manifest.json")))["files"]]
    check("[orpo] the whole model: no reference computed, no table kept",
          said and ", no reference (this loss has none);" in said[0] and len(said) == 2 and kinds == [None],
          "%s; files %s" % (said[0] if said else out[-200:], kinds))


def main():
    tmp = tempfile.mkdtemp(prefix="colo-dpo-")
    try:
        lines = make_pairs(tmp)
        seqs, vseqs = prepare(tmp, lines)
        conversational(tmp)
        # a base that has learnt a little: 40 steps on the pairs written as text
        with open(os.path.join(tmp, "text.txt"), "w") as f:
            for x in lines:
                f.write(x["prompt"] + x["chosen"] + "\n")
        colo(["prepare", "--input", os.path.join(tmp, "text.txt"), "--out", os.path.join(tmp, "t")])
        colo(["train", "--data-root", tmp, "--train-data", "t/train.bin", "--eval-interval", "0",
              "--steps", "40", "--batch-size", "8", "--lr", "1e-2", "--seed", "7", "--threads", "2",
              "--quiet", "--ckpt-dir", os.path.join(tmp, "base")] + MODEL)

        dump, ck = os.path.join(tmp, "dpo.dump"), os.path.join(tmp, "dpo")
        out = colo(run_args(tmp, ["--ckpt-dir", ck, "--dump-reference", dump]))
        said = [x for x in out.splitlines() if x.startswith("dpo:")]
        check("colo-train says DPO, its pairs and the cut sequences",
              len(said) == 2 and "beta 0.5" in said[0] and "180 pairs" in said[0]
              and "their prompts lose their earliest tokens after the first (0, whose answer" in said[1],
              " / ".join(said))
        ref = read_safetensors(dump)

        # every batch: pairs of the file, one prompt each; none twice in the first epoch
        key = {}
        for k in range(0, len(seqs), 2):
            a, ta = rows_of(seqs, k)
            key[tuple(a) + tuple(ta)] = k // 2
        seen, ok = [], True
        for step in range(STEPS):
            for micro in range(ACCUM):
                bt = ref["batch.%d.%d" % (step, micro)].long()
                for p in range(P):
                    c = bt[2 * p].tolist() + bt[B + 2 * p].tolist()
                    r = bt[2 * p + 1].tolist() + bt[B + 2 * p + 1].tolist()
                    i = key.get(tuple(c))
                    ok &= i is not None and (r[:T], r[T:]) == tuple(map(list, rows_of(seqs, 2 * i + 1)))
                    seen.append(i)
        check("batches: each pair's chosen and rejected rows, from the file", bool(ok),
              "%d pairs read" % len(seen))
        check("batches: no pair twice within the first epoch", len(set(seen)) == len(seen),
              "%d distinct of %d" % (len(set(seen)), len(seen)))

        model, plain, names = replay("", ref)
        # validation over every val pair with the final adapters
        with torch.no_grad():
            for n in names:
                model.ab[n] = ref["final." + n]
            rows = [rows_of(vseqs, k) for k in range(len(vseqs))]
            idx = torch.tensor([r[0] for r in rows])
            tg = torch.tensor([r[1] for r in rows])
            vloss, z = dpo_loss(logps(model.forward, idx, tg), logps(plain, idx, tg))
        line = [x for x in out.splitlines() if x.startswith("step %6d | val loss" % STEPS)]
        parts = line[0].split() if line else []
        got = float(parts[5]) if line else float("nan")
        acc = float(parts[9].rstrip(",")) if line else float("nan")
        marg = float(parts[11]) if line else float("nan")
        check("validation: DPO loss over every val pair (1e-4)",
              abs(got - vloss.item()) <= 1e-4 and "over %d pairs" % (len(vseqs) // 2) in line[0],
              "colo %.4f torch %.6f: %s" % (got, vloss.item(), line[0] if line else out[-300:]))
        check("validation: reward accuracy and margin",
              abs(acc - (z > 0).float().mean().item()) <= 1e-4 and abs(marg - z.mean().item()) <= 1e-4,
              "colo %.4f, %.4f; torch %.4f, %.4f" % (acc, marg, (z > 0).float().mean().item(), z.mean().item()))
        first = [x for x in out.splitlines() if x.startswith("step      0 | val loss")]
        check("validation at step 0: log 2, margin 0", first and "val loss 0.6931" in first[0]
              and "margin 0.0000" in first[0], first[0] if first else "")

        # stopped at step 5 and resumed: the same checkpoint
        halves = os.path.join(tmp, "halves")
        colo(run_args(tmp, ["--ckpt-dir", halves, "--stop-at", "5", "--quiet"]))
        colo(run_args(tmp, ["--ckpt-dir", halves, "--resume", "auto", "--quiet"]))
        f = "step_%08d/rank_00000.safetensors" % STEPS
        check("stopped at step 5 and resumed: the same checkpoint (bytes)",
              open(os.path.join(ck, f), "rb").read() == open(os.path.join(halves, f), "rb").read(), f)

        # a DPO run from this one's checkpoint: its adapters go on training, and the reference is
        # the model as that run starts (those adapters included)
        cont = os.path.join(tmp, "cont.dump")
        out2 = colo(run_args(tmp, ["--init-from", os.path.join("dpo", "step_%08d" % STEPS),
                                   "--dump-reference", cont]))
        said = [x for x in out2.splitlines() if x.startswith("dpo:")]
        check("[continued] colo-train names the reference's adapters",
              said and "dpo/step_%08d)" % STEPS in said[0] and "with the adapters of " in said[0],
              said[0] if said else "")
        cargs = run_args(tmp, ["--init-from", os.path.join("dpo", "step_%08d" % STEPS), "--quiet"])
        colo(cargs + ["--ckpt-dir", os.path.join(tmp, "cont")])
        colo(cargs + ["--ckpt-dir", os.path.join(tmp, "cont-halves"), "--stop-at", "5"])
        colo(cargs + ["--ckpt-dir", os.path.join(tmp, "cont-halves"), "--resume", "auto"])
        check("[continued] stopped at step 5 and resumed: the same checkpoint (bytes)",
              open(os.path.join(tmp, "cont", f), "rb").read() ==
              open(os.path.join(tmp, "cont-halves", f), "rb").read(), f)
        last = read_safetensors(os.path.join(ck, f))
        replay("[continued] ", read_safetensors(cont),
               {n: last[n] for n in last if ".lora_" in n})

        # layouts: 2 data-parallel ranks with dropout; tensor parallelism with sp
        def layout(name, extra, b=B):
            d, c = os.path.join(tmp, name + ".dump"), os.path.join(tmp, name)
            colo(run_args(tmp, ["--dump-reference", d, "--ckpt-dir", c, "--quiet"] + extra, b=b))
            return read_safetensors(d), read_safetensors(os.path.join(c, f))
        drop = ["--lora-dropout", "0.1"]
        one, two = layout("d1", drop), layout("d2", drop + ["--nproc", "2", "--dp", "2"], b=B // 2)
        tp = layout("tp", ["--nproc", "2", "--tp", "2", "--sp", "true"])
        cp = layout("cp", drop + ["--nproc", "2", "--cp", "2"])
        whole = (ref, read_safetensors(os.path.join(ck, f)))
        for tag, (a, ca), (b, cb) in (("2 data-parallel ranks (dropout 0.1) = 1", one, two),
                                      ("tp=2 with sequence parallelism = 1 rank", whole, tp),
                                      ("cp=2 (dropout 0.1) = 1 rank", one, cp)):
            lrel = ((a["losses"] - b["losses"]).abs() / a["losses"].abs()).max().item()
            wabs = max((ca[k] - cb[k]).abs().max().item() for k in ca)
            check(tag, lrel <= 1e-5 and wabs <= 1e-4 and sorted(ca) == sorted(cb),
                  "losses %.2e, checkpoint %.2e over %d tensors" % (lrel, wabs, len(ca)))
        # 2 pipeline stages of 2 micro-batches (a pair each): the live reference a pass of its own
        # through the stages, the last stage weighting each micro-batch's backward
        pout = colo(run_args(tmp, ["--ckpt-dir", os.path.join(tmp, "pp"), "--nproc", "2", "--pp", "2",
                                   "--micro-batches", "2"]))
        lo, cpp, c1 = step_losses(pout), read_safetensors(os.path.join(tmp, "pp", f)), whole[1]
        lrel = ((lo - ref["losses"]).abs() / ref["losses"].abs()).max().item() if len(lo) == STEPS else 1
        wabs = max((c1[k] - cpp[k]).abs().max().item() for k in c1)
        v1, v2 = val_of(out), val_of(pout)
        check("2 pipeline stages (2 micro-batches) = 1 rank: losses 1e-5, adapters and val 1e-4",
              lrel <= 1e-5 and wabs <= 1e-4 and sorted(c1) == sorted(cpp) and abs(v1 - v2) <= 1e-4,
              "losses %.2e, adapters %.2e; val %.4f and %.4f" % (lrel, wabs, v1, v2))
        one = one[0]
        dmoved = (one["losses"] - ref["losses"]).abs().max().item()
        check("dropout changes the run (the reference has none)", dmoved > 1e-6, "losses apart %.2e" % dmoved)

        q = colo(run_args(tmp, ["--lora-quant", "nf4", "--steps", "4", "--eval-interval", "0"]))
        s1 = [x for x in q.splitlines() if x.startswith("step      1/4")]
        check("QLoRA: the reference is the NF4 model (first loss log 2)",
              s1 and "loss 0.693147 " in s1[0], s1[0] if s1 else q[-300:])

        losses(tmp)
        whole_model(tmp, seqs, vseqs)
        precomputed_lora(tmp, ref)

        refusals = [
            (run_args(tmp, ["--dpo-beta", "0", "--dpo-precompute", "true"]),
             "train.dpo_precompute computes DPO's reference once: it needs train.dpo_beta > 0"),
            (run_args(tmp, ["--dpo-loss", "kto"]), "train.dpo_loss \"kto\" must be sigmoid, hinge, ipo, simpo or orpo"),
            (run_args(tmp, ["--dpo-loss", "ipo", "--dpo-label-smoothing", "0.1"]),
             "train.dpo_label_smoothing=0.1 smooths the sigmoid loss"),
            (run_args(tmp, ["--dpo-loss", "orpo", "--dpo-precompute", "true"]),
             "train.dpo_precompute computes DPO's reference, and train.dpo_loss=orpo has none"),
            (run_args(tmp, ["--dpo-loss", "orpo", "--dpo-rpo-alpha", "1"]),
             "train.dpo_rpo_alpha=1 adds the chosen answer's NLL to DPO's loss"),
            (run_args(tmp, ["--dpo-label-smoothing", "0.5"]),
             "train.dpo_label_smoothing=0.5 must be at least 0 and below 0.5"),
            (run_args(tmp, ["--nproc", "2", "--pp", "2", "--micro-batches", "4"]),
             "each micro-batch of 1 rows must hold whole pairs"),
            (run_args(tmp, b=3), "needs an even train.batch_size (3)"),
            (run_args(tmp, ["--train-data", "t/train.bin"]), "data.train_path is not a preference shard"),
            (run_args(tmp, ["--val-data", "t/val.bin"]), "not a preference shard: a DPO run"),
            (run_args(tmp, ["--dpo-beta", "0"]), "holds preference pairs (two answers to each prompt)"),
            (run_args(tmp, ["--dpo-beta", "1000"]), "train.dpo_beta=1000 must be between 0 and 100"),
        ]
        refusals.append((["eval", "--checkpoint", os.path.join(ck, "step_%08d" % STEPS),
                          "--data", os.path.join(tmp, "d", "val.bin")],
                         "holds preference pairs: colo-train eval measures"))
        pf = ["prepare", "--input", os.path.join(tmp, "pairs.jsonl"), "--out", os.path.join(tmp, "none"),
              "--chosen-field", "chosen", "--rejected-field", "rejected"]
        refusals += [(pf + ["--prompt-field", "prompt", "--shard-tokens", "100"],
                      "--shard-tokens cuts a stream of tokens; preference pairs are written whole"),
                     (pf, "preference pairs need a prompt, a chosen and a rejected field")]
        for args, want in refusals:
            r = colo(args, expect=1)
            check("refused: " + want[:50], want in r, r.strip().splitlines()[-1][:150] if r.strip() else "")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failed" % len(failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
