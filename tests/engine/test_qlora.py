#!/usr/bin/python3
"""QLoRA (train.lora_quant: nf4) against an NF4 written here from QLoRA's paper, and PyTorch.

NF4 here is numpy's, from the paper (Dettmers et al. 2023, appendix E) and bitsandbytes' storage
rules: each of a model's linear weights is taken in nn.Linear's [out][in] order (GPT-2's Conv1D
[in][out] transposed first, as transformers does for bitsandbytes), cut into blocks of 64
consecutive values, each block scaled by the fp32 reciprocal of its largest magnitude, each value
given the nearest of the 16 levels, and dequantized as level · absmax in fp32.

For GPT-2 and for Llama with grouped-query attention and an untied head, colo-train trains a small base and exports
it in HuggingFace's layout; numpy writes the base with its linear weights dequantized. Then:

  - LoRA with --lora-quant nf4 on the base, and LoRA without it on numpy's dequantized base: the
    same 10 steps bit for bit (every loss, gradient norm and final adapter), in fp32 and in bf16
    activations: colo's NF4 is numpy's, value for value;
  - PyTorch's loss of the dequantized base on the first batch is colo's first loss (rel 1e-5),
    and is not the base's own (the quantization is there);
  - colo-train says the matrices are in NF4, and its host memory is below the LoRA run's;
  - the manifest records quant nf4; `colo-train export` of the QLoRA checkpoint merges into the
    dequantized matrices: the same tensors as the export of the run on numpy's base (exact), and
    `eval` gives the same loss;
  - stopped at step 5 and resumed: the same step-10 checkpoint, byte for byte; resuming it without
    --lora-quant is refused with the reason;
  - two data-parallel ranks, each with the NF4 model whole, against one (losses within 1e-5
    relative, adapters within 1e-4); the NF4 model sharded by ZeRO-3 (its packed matrices in the
    pieces) against it whole, bit for bit, on one rank and two (GPT-2 in fp32, Llama in bf16);
  - two tensor-parallel ranks against one (tensor_parallel()), and their parts sharded by ZeRO-3.

Double quantization (--lora-double-quant true; QLoRA's, bitsandbytes' compress_statistics): the
dynamic map colo compiles in is bitsandbytes' create_dynamic_map() built here in PyTorch, bit for
bit; numpy double-quantizes each matrix's absmax values as bitsandbytes does (less their mean, in
blocks of 256, the nearest value of the map, back as map[q] * absmax2 + offset), and LoRA on that
model is colo's run bit for bit (fp32, bf16; GPT-2, Llama), which is not NF4's; the log says
0.516 bytes a value; export and eval merge into those values; the manifest records it and a resume
that asks otherwise is refused; ZeRO-3's pieces hold it (bytes); tp=2 quantizes each rank's part on
its own, and equals one rank on numpy's model quantized part by part.
Exit 0 when all pass.
"""
import json
import os
import re
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_init_from import write_safetensors  # noqa: E402
from test_lora import train_base, words_data  # noqa: E402
from test_torch_reference import read_safetensors  # noqa: E402
from torch_gpt2 import GPT2, Llama  # noqa: E402

COLO = os.path.join(os.environ["COLO_BIN"], "colo-train")
torch.set_num_threads(1)

L, NH, C, T, V, H_LLAMA = 2, 2, 64, 16, 256, 128
B, ACCUM, STEPS = 4, 2, 10
RANK, ALPHA = 4, 8.0

# the paper's 16 levels, as bitsandbytes tabulates them
LEVELS = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                   -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                   0.07958029955625534, 0.16093020141124725, 0.24611230194568634,
                   0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                   0.7229568362236023, 1.0], dtype=np.float32)
MIDS = ((LEVELS[:-1].astype(np.float64) + LEVELS[1:].astype(np.float64)) / 2).astype(np.float32)

failures = []


def check(what, ok, detail):
    print("%-62s %s  %s" % (what, "ok  " if ok else "FAIL", detail))
    if not ok:
        failures.append(what)


def colo(args, ok=True):
    r = subprocess.run([COLO] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if ok and r.returncode != 0:
        print(r.stdout)
        raise SystemExit("colo-train %s failed (%d)" % (args[0], r.returncode))
    return r.stdout if ok else (r.returncode, r.stdout)


def dynamic_map():
    """bitsandbytes' create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8), the 8-bit
    type its double quantization stores the scales in, built in PyTorch as bitsandbytes builds it:
    for each exponent 10^(i-6), the midpoints of linspace(0.1, 1, 2^i + 1) with either sign; then
    0 and 1; sorted"""
    data = []
    for i in range(7):
        bounds = torch.linspace(0.1, 1, 2 ** i + 1, dtype=torch.float32)
        means = (bounds[:-1] + bounds[1:]) / 2.0
        data += ((10 ** (-6 + i)) * means).tolist()
        data += (-(10 ** (-6 + i)) * means).tolist()
    data += [0.0, 1.0]
    data.sort()
    return torch.tensor(data, dtype=torch.float32).numpy()


DMAP = dynamic_map()
DMIDS = ((DMAP[:-1] + DMAP[1:]) * np.float32(0.5)).astype(np.float32)


def colo_dynamic_map():
    """the table colo's nf4.h compiles in (COLO_NF4_DQ_MAP), read from its source"""
    src = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "worker",
                            "engine", "core", "nf4.h")).read()
    body = src[src.index("#define COLO_NF4_DQ_MAP"):]
    body = body[body.index("{") + 1:body.index("}")].replace("\\", "")
    return np.array([np.float32(x.strip().rstrip("f")) for x in body.split(",")], np.float32)


def double_quant(amax):
    """QLoRA's double quantization of a matrix's absmax values, as bitsandbytes'
    quantize_4bit(compress_statistics=True) then dequantize_4bit compute them: less their mean
    (the offset; here summed in order in double, and rounded once), in blocks of 256 scaled by the
    fp32 reciprocal of the block's largest magnitude, each given the nearest value of the dynamic
    map (the lower at a midpoint), and back as map[q] * absmax2 + offset, rounded after each"""
    total = 0.0
    for x in amax:
        total += float(x)
    offset = np.float32(total / amax.size)
    centred = (amax - offset).astype(np.float32)
    out = np.empty_like(amax)
    for lo in range(0, amax.size, 256):
        blk = centred[lo:lo + 256]
        a2 = np.abs(blk).max()
        if a2 > 0:
            q = ((blk * (np.float32(1.0) / a2)).astype(np.float32)[:, None] > DMIDS).sum(axis=1)
        else:
            q = np.full(blk.size, 127)
        out[lo:lo + 256] = (DMAP[q] * a2).astype(np.float32) + offset
    return out.astype(np.float32)


def nf4(w, dq=False):
    """w [out][in] float32 -> its NF4 values, dequantized (float32, same shape); with dq, its
    scales double-quantized"""
    x = w.reshape(-1)
    n = x.size
    nb = -(-n // 64)
    blocks = np.zeros(nb * 64, np.float32)
    blocks[:n] = x
    blocks = blocks.reshape(nb, 64)
    amax = np.abs(blocks).max(axis=1)
    inv = np.zeros_like(amax)
    inv[amax > 0] = np.float32(1.0) / amax[amax > 0]
    normed = (blocks * inv[:, None]).astype(np.float32)
    q = (normed[..., None] > MIDS).sum(axis=-1)
    q[amax == 0] = 7
    if dq:
        amax = double_quant(amax)
    return (LEVELS[q] * amax[:, None]).astype(np.float32).reshape(-1)[:n].reshape(w.shape)


LINEAR = {"gpt2": re.compile(r"\.(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.weight$"),
          "llama": re.compile(r"\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)\.weight$")}
MODEL = ["--n-layer", str(L), "--n-head", str(NH), "--n-embd", str(C), "--block-size", str(T),
         "--vocab-size", str(V)]
ARCH = {"gpt2": ["--arch", "gpt2"],
        "llama": ["--arch", "llama", "--n-kv-head", "1", "--mlp-hidden", str(H_LLAMA),
                  "--tie-embeddings", "false"]}


def nf4_model(w, arch, tp=1, dq=False):
    """the base's tensors with its linear weights as colo keeps them in NF4: each product's matrix
    quantized as one (GPT-2's Conv1D as its transpose; Llama's q, k and v as one, as its gate and
    up: colo's c_attn and c_fc), and on tp tensor-parallel ranks each rank's part of it on its own
    (the column-parallel products' rows of each of q, k, v or of gate and up; the row-parallel
    ones' columns). Which differs from the whole matrix's only in double quantization's offset
    and blocks: NF4's own blocks are whole in each part. Returns the tensors and how many
    linear weights changed."""
    out, count = dict(w), 0
    if arch == "gpt2":
        for k, v in w.items():
            if LINEAR[arch].search(k):
                out[k], count = nf4(v.T, dq).T.copy(), count + 1
        return out, count
    layers = sorted({int(m.group(1)) for m in (re.match(r"model\.layers\.(\d+)\.", k) for k in w) if m})
    for layer in layers:
        p = "model.layers.%d." % layer
        groups = ((["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"], 0),
                  (["mlp.gate_proj", "mlp.up_proj"], 0), (["self_attn.o_proj"], 1), (["mlp.down_proj"], 1))
        for names, by_cols in groups:
            names = [p + n + ".weight" for n in names]
            for n in names:
                out[n], count = w[n].copy(), count + 1
            for r in range(tp):
                if by_cols:
                    c = w[names[0]].shape[1] // tp
                    out[names[0]][:, r * c:(r + 1) * c] = nf4(w[names[0]][:, r * c:(r + 1) * c], dq)
                    continue
                cuts = [(n, w[n].shape[0] // tp) for n in names]
                d = nf4(np.vstack([w[n][r * k:(r + 1) * k] for n, k in cuts]), dq)
                at = 0
                for n, k in cuts:
                    out[n][r * k:(r + 1) * k] = d[at:at + k]
                    at += k
    return out, count


def run(tmp, arch):
    tag = "[%s] " % arch
    base_dir = train_base(tmp, arch, MODEL + ARCH[arch])
    base = os.path.join(tmp, arch + "-base.safetensors")
    colo(["export", "--checkpoint", os.path.join(base_dir, "step_00000030"), "--out", base])
    w = {k: v.numpy() for k, v in read_safetensors(base).items()}
    deq, count = nf4_model(w, arch)
    check(tag + "numpy quantized every linear weight", count == L * (4 if arch == "gpt2" else 7),
          "%d of them; largest change %.3e" % (count, max(np.abs(deq[k] - w[k]).max() for k in w)))
    deqq = nf4_model(w, arch, dq=True)[0]
    check(tag + "numpy's double quantization moves the scales a little",
          0 < max(np.abs(deqq[k] - deq[k]).max() for k in w) < 0.02 * max(np.abs(w[k]).max() for k in w),
          "largest change from NF4's %.3e" % max(np.abs(deqq[k] - deq[k]).max() for k in w))
    for name, d in (("deq", deq), ("deqq", deqq)):
        write_safetensors(os.path.join(tmp, "%s-%s.safetensors" % (arch, name)),
                          {k: ("F32", np.ascontiguousarray(v, np.float32)) for k, v in d.items()})

    def lora(init, extra, name):
        ck, dump = os.path.join(tmp, name), os.path.join(tmp, name + ".dump")
        out = colo(["train", "--data-root", tmp, "--train-data", "train.bin", "--eval-interval", "0",
                    "--batch-size", str(B), "--grad-accum", str(ACCUM), "--steps", str(STEPS),
                    "--lr", "3e-3", "--warmup", "3", "--weight-decay", "0.1", "--seed", "1234",
                    "--threads", "2", "--init-from", init, "--lora-rank", str(RANK),
                    "--lora-alpha", str(ALPHA), "--ckpt-dir", ck, "--dump-reference", dump]
                   + extra + MODEL + ARCH[arch])
        return out, read_safetensors(dump), ck

    for prec in ("fp32", "bf16"):
        p = ["--precision", prec]
        qout, q, qck = lora(arch + "-base.safetensors", p + ["--lora-quant", "nf4"], arch + "-q-" + prec)
        rout, r, rck = lora(arch + "-deq.safetensors", p, arch + "-r-" + prec)
        names = sorted(k for k in r if k.startswith("final.") and ".lora_" in k)
        same = all(torch.equal(q[k], r[k]) for k in ["losses", "grad_norms"] + names)
        moved = max((r[k] - r["init." + k[len("final."):]]).abs().max().item() for k in names)
        check(tag + "%s: nf4 on the base = LoRA on numpy's NF4 (bit for bit)" % prec,
              same and len(names) == 2 * 4 * L and moved > 1e-3,
              "losses %.6f .. %.6f, norms and %d adapters identical: %s" %
              (q["losses"][0].item(), q["losses"][STEPS - 1].item(), len(names), same))
        # DoRA (QDoRA): the columns' norms from the dequantized matrices, the same bits again
        qd = lora(arch + "-base.safetensors", p + ["--lora-quant", "nf4", "--lora-dora", "true"],
                  arch + "-qd-" + prec)[1]
        rd = lora(arch + "-deq.safetensors", p + ["--lora-dora", "true"], arch + "-rd-" + prec)[1]
        dn = sorted(k for k in rd if k.startswith("final.") and ".lora_" in k)
        check(tag + "%s: DoRA, nf4 on the base = on numpy's NF4 (bit for bit)" % prec,
              all(torch.equal(qd[k], rd[k]) for k in ["losses", "grad_norms"] + dn) and
              len(dn) == 3 * 4 * L and not torch.equal(qd["losses"], q["losses"]),
              "losses %.6f .. %.6f, %d tensors" % (qd["losses"][0].item(), qd["losses"][STEPS - 1].item(), len(dn)))
        said = [x for x in qout.splitlines() if x.startswith("lora:")]
        mem = [float(re.search(r"host memory ([0-9.]+) MiB", o).group(1)) for o in (qout, rout)]
        check(tag + "%s: says NF4; host memory below LoRA's" % prec,
              len(said) == 1 and "matrices in NF4" in said[0] and mem[0] < mem[1],
              "%.1f MiB against %.1f" % (mem[0], mem[1]))
        # double quantization: the scales in a byte each; the same bits as LoRA on numpy's
        qqout, qq, qqck = lora(arch + "-base.safetensors",
                               p + ["--lora-quant", "nf4", "--lora-double-quant", "true"], arch + "-qq-" + prec)
        rq = lora(arch + "-deqq.safetensors", p, arch + "-rq-" + prec)[1]
        check(tag + "%s: double-quantized nf4 = LoRA on numpy's (bit for bit), not NF4's" % prec,
              all(torch.equal(qq[k], rq[k]) for k in ["losses", "grad_norms"] + names) and
              not torch.equal(qq["losses"], q["losses"]),
              "losses %.6f .. %.6f (NF4's %.6f .. %.6f)" % (qq["losses"][0].item(), qq["losses"][STEPS - 1].item(),
                                                            q["losses"][0].item(), q["losses"][STEPS - 1].item()))
        per = [float(re.search(r"MiB for \d+ values, ([0-9.]+) bytes each", o).group(1)) for o in (qout, qqout)]
        check(tag + "%s: says double quantization, 0.516 bytes a value where NF4 takes 0.5625" % prec,
              "(QLoRA, double quantization)" in qqout and per[0] == 0.5625 and 0.515 < per[1] < 0.517,
              "%.4f and %.4f bytes a value" % tuple(per))
        if prec != "fp32":
            continue
        # PyTorch: the dequantized base's loss on the first batch (B is zero: it is colo's)
        model = GPT2(L, NH, C, T, V) if arch == "gpt2" else Llama(L, NH, C, T, V, H_LLAMA, NKV=1, untied=True)
        losses = []
        for weights in (r, read_safetensors(os.path.join(base_dir, "step_00000030", "rank_00000.safetensors"))):
            with torch.no_grad():
                for n in model.names:
                    model.p[n].copy_(weights[("init." if weights is r else "") + n])
                losses.append(sum(model(r["batch.0.%d" % m].long()[:B], r["batch.0.%d" % m].long()[B:]).item()
                                  for m in range(ACCUM)) / ACCUM)
        rel = abs(losses[0] - q["losses"][0].item()) / losses[0]
        check(tag + "torch: the NF4 model's first loss (rel 1e-5), not the base's",
              rel <= 1e-5 and abs(losses[1] - losses[0]) > 1e-4,
              "torch %.7f colo %.7f; the base unquantized %.7f" % (losses[0], q["losses"][0].item(), losses[1]))
        last = "step_%08d" % STEPS
        man = json.load(open(os.path.join(qck, last, "manifest.json")))
        mq = json.load(open(os.path.join(qqck, last, "manifest.json")))
        check(tag + "manifest: lora.quant nf4 (and double_quant)", man["lora"].get("quant") == "nf4" and
              "double_quant" not in man["lora"] and mq["lora"].get("double_quant") is True and
              "quant" not in json.load(open(os.path.join(rck, last, "manifest.json")))["lora"],
              json.dumps(man["lora"]) + " " + json.dumps(mq["lora"]))
        rqck = os.path.join(tmp, arch + "-rq-" + prec)
        for what, pair in (("", (qck, rck)), (" (double-quantized)", (qqck, rqck))):
            ex = []
            for ck in pair:
                colo(["export", "--checkpoint", os.path.join(ck, last), "--out", ck + "-merged.safetensors"])
                ex.append(read_safetensors(ck + "-merged.safetensors"))
            same = sorted(ex[0]) == sorted(ex[1]) and all(torch.equal(ex[0][k], ex[1][k]) for k in ex[0])
            check(tag + "export merges into the dequantized matrices%s (exact)" % what, same,
                  "%d tensors" % len(ex[0]))
            ev = [json.loads(colo(["eval", "--checkpoint", os.path.join(ck, last), "--data",
                                   os.path.join(tmp, "val.bin"), "--batches", "2", "--batch-size", "4",
                                   "--json"]).strip().splitlines()[-1])["loss"] for ck in pair]
            check(tag + "eval of the QLoRA checkpoint%s = of the LoRA one" % what, ev[0] == ev[1],
                  "%.7f %.7f" % tuple(ev))
        # stopped halfway and resumed
        halves = os.path.join(tmp, arch + "-halves")
        common = ["train", "--data-root", tmp, "--train-data", "train.bin", "--eval-interval", "0",
                  "--batch-size", str(B), "--grad-accum", str(ACCUM), "--steps", str(STEPS), "--lr", "3e-3",
                  "--warmup", "3", "--weight-decay", "0.1", "--seed", "1234", "--threads", "2",
                  "--init-from", arch + "-base.safetensors", "--lora-rank", str(RANK), "--lora-alpha",
                  str(ALPHA), "--ckpt-dir", halves, "--quiet"] + MODEL + ARCH[arch]
        colo(common + ["--lora-quant", "nf4", "--stop-at", str(STEPS // 2)])
        rc, msg = colo(common + ["--resume", "auto"], ok=False)
        want = ("holds LoRA adapters trained on the model in NF4; this run keeps it as loaded "
                "(train.lora_quant, train.lora_double_quant)")
        check(tag + "resuming without --lora-quant: refused", rc != 0 and want in msg, msg.strip()[-160:])
        rc, msg = colo(common + ["--lora-quant", "nf4", "--lora-double-quant", "true", "--resume", "auto"], ok=False)
        want = ("holds LoRA adapters trained on the model in NF4; this run keeps it in NF4 with double "
                "quantization (train.lora_quant, train.lora_double_quant)")
        check(tag + "resuming with double quantization added: refused", rc != 0 and want in msg,
              msg.strip()[-160:])
        colo(common + ["--lora-quant", "nf4", "--resume", "auto"])
        f = os.path.join(last, "rank_00000.safetensors")
        check(tag + "stopped at step %d and resumed: the same checkpoint" % (STEPS // 2),
              open(os.path.join(qck, f), "rb").read() == open(os.path.join(halves, f), "rb").read(), f)


def data_parallel(tmp):
    """QLoRA on 2 ranks (--nproc 2, half the batch each), each with the whole NF4 model, against
    one: as test_lora.py's LoRA; and the NF4 model sharded over the ranks by ZeRO-3 (its packed
    matrices in the pieces), bit for bit the run that keeps it whole, on 1 and 2 ranks, Llama in
    bf16 too"""
    d, out = {}, {}
    for arch, prec in (("gpt2", "fp32"), ("llama", "bf16")):
        for n, z in ((1, 0), (2, 0), (1, 3), (2, 3)):
            if arch == "llama" and n == 1 and z == 3:
                continue
            tag = "%s-%d-%d" % (arch, n, z)
            dump = os.path.join(tmp, "q-dp%s.dump" % tag)
            out[arch, n, z] = colo(
                ["train", "--data-root", tmp, "--train-data", "train.bin", "--eval-interval", "0",
                 "--batch-size", str(B // n), "--grad-accum", str(ACCUM), "--steps", str(STEPS),
                 "--lr", "3e-3", "--seed", "1234", "--threads", "1", "--init-from", arch + "-base.safetensors",
                 "--lora-rank", str(RANK), "--lora-quant", "nf4", "--zero", str(z), "--precision", prec,
                 "--ckpt-dir", os.path.join(tmp, "q-dp" + tag), "--dump-reference", dump] +
                (["--nproc", "2", "--dp", "2"] if n == 2 else []) + MODEL + ARCH[arch])
            d[arch, n, z] = read_safetensors(dump)
    a, b = d["gpt2", 1, 0], d["gpt2", 2, 0]
    lrel = ((a["losses"] - b["losses"]).abs() / a["losses"].abs()).max().item()
    names = [k for k in a if k.startswith("final.") and ".lora_" in k]
    wabs = max((a[k] - b[k]).abs().max().item() for k in names)
    check("[data parallel] QLoRA, 2 ranks = 1: losses (rel 1e-5), adapters (abs 1e-4)",
          lrel <= 1e-5 and wabs <= 1e-4 and len(names) == 16,
          "worst %.2e and %.2e over %d tensors" % (lrel, wabs, len(names)))
    f = os.path.join("step_%08d" % STEPS, "rank_00000.safetensors")
    for arch, n in (("gpt2", 1), ("gpt2", 2), ("llama", 2)):
        a, b = d[arch, n, 0], d[arch, n, 3]
        same = all(torch.equal(a[k], b[k]) for k in names + ["losses", "grad_norms"])
        ck = [open(os.path.join(tmp, "q-dp%s-%d-%d" % (arch, n, z), f), "rb").read() for z in (0, 3)]
        said = "in NF4 (QLoRA): " in out[arch, n, 3] and "sharded over the data-parallel ranks (ZeRO-3)" in out[arch, n, 3]
        check("[ZeRO-3] QLoRA, %s, %d rank%s: NF4 pieces = the model whole (bit for bit)"
              % (arch, n, "s" if n > 1 else ""), same and ck[0] == ck[1] and said,
              "losses, norms, adapters identical: %s; checkpoint identical: %s; said so: %s"
              % (same, ck[0] == ck[1], said))
    # double quantization's packed matrices (a byte a scale, then absmax2 and the offset) in the
    # pieces: the same again
    for z in (0, 3):
        colo(["train", "--data-root", tmp, "--train-data", "train.bin", "--eval-interval", "0",
              "--batch-size", str(B // 2), "--grad-accum", str(ACCUM), "--steps", str(STEPS), "--lr", "3e-3",
              "--seed", "1234", "--threads", "1", "--init-from", "gpt2-base.safetensors", "--lora-rank",
              str(RANK), "--lora-quant", "nf4", "--lora-double-quant", "true", "--zero", str(z),
              "--ckpt-dir", os.path.join(tmp, "qq-dp-%d" % z), "--quiet", "--nproc", "2", "--dp", "2"]
             + MODEL + ARCH["gpt2"])
    ck = [open(os.path.join(tmp, "qq-dp-%d" % z, f), "rb").read() for z in (0, 3)]
    check("[ZeRO-3] double-quantized QLoRA, gpt2, 2 ranks: pieces = whole (bytes)", ck[0] == ck[1],
          "step %d checkpoint, %d bytes" % (STEPS, len(ck[0])))


def tensor_parallel(tmp):
    """QLoRA on 2 tensor-parallel ranks (with sequence parallelism): each rank quantizes its part
    of each matrix, which holds whole NF4 blocks when n_embd/tp and the MLP's width/tp are
    multiples of 64, so the model is the one rank's NF4 model: losses within 1e-5 and the
    checkpoint within 1e-4 of one rank's (the products' sums in another order); on tp=2 x dp=2
    the parts' packed NF4 sharded by ZeRO-3, bit for bit ZeRO-0's. A width that would split
    blocks is refused with the reason."""
    lm = ["--n-layer", "2", "--n-head", "4", "--n-embd", "128", "--block-size", str(T),
          "--vocab-size", str(V), "--arch", "llama", "--n-kv-head", "2", "--mlp-hidden", "256",
          "--tie-embeddings", "false"]
    train_base(tmp, "llama-wide", lm)
    base = os.path.join("llama-wide-base", "step_00000030")

    def q(ck, extra=(), ok=True, model=lm, init=base, quant=("--lora-quant", "nf4")):
        return colo(["train", "--data-root", tmp, "--train-data", "train.bin", "--eval-interval", "0",
                     "--grad-accum", str(ACCUM), "--steps", str(STEPS), "--lr", "3e-3", "--seed", "1234",
                     "--threads", "1", "--init-from", init, "--lora-rank", str(RANK), *quant,
                     "--lora-dropout", "0.1", "--ckpt-dir", os.path.join(tmp, ck), "--dump-reference",
                     os.path.join(tmp, ck + ".dump")] + list(extra) + model, ok)

    def last(ck):
        return read_safetensors(os.path.join(tmp, ck, "step_%08d" % STEPS, "rank_00000.safetensors"))

    q("qtp-1", ["--batch-size", str(B)])
    q("qtp-2", ["--batch-size", str(B), "--nproc", "2", "--tp", "2", "--sp", "true"])
    a, b = read_safetensors(os.path.join(tmp, "qtp-1.dump")), read_safetensors(os.path.join(tmp, "qtp-2.dump"))
    lrel = ((a["losses"] - b["losses"]).abs() / a["losses"].abs()).max().item()
    ca, cb = last("qtp-1"), last("qtp-2")
    wabs = max((ca[k] - cb[k]).abs().max().item() for k in ca)
    check("[tensor parallel] QLoRA, tp=2 with sp = 1 rank: losses (rel 1e-5), checkpoint (abs 1e-4)",
          lrel <= 1e-5 and wabs <= 1e-4 and sorted(ca) == sorted(cb),
          "worst %.2e and %.2e over %d tensors" % (lrel, wabs, len(cb)))
    # double quantization: each rank's part has its own offset and blocks of 256 scales (as
    # bitsandbytes would quantize a sharded layer), so tp=2 is one rank on numpy's model quantized
    # part by part, within the same tolerances; and not the model double-quantized whole
    hf = os.path.join(tmp, "llama-wide-base.safetensors")
    colo(["export", "--checkpoint", os.path.join(tmp, base), "--out", hf])
    w = {k: v.numpy() for k, v in read_safetensors(hf).items()}
    for name, tp in (("llama-wide-parts", 2), ("llama-wide-whole", 1)):
        write_safetensors(os.path.join(tmp, name + ".safetensors"),
                          {k: ("F32", np.ascontiguousarray(v, np.float32))
                           for k, v in nf4_model(w, "llama", tp=tp, dq=True)[0].items()})
    dq = ("--lora-quant", "nf4", "--lora-double-quant", "true")
    q("qqtp-2", ["--batch-size", str(B), "--nproc", "2", "--tp", "2", "--sp", "true"], quant=dq)
    q("qqtp-1", ["--batch-size", str(B)], quant=dq)
    q("qqtp-ref", ["--batch-size", str(B)], init="llama-wide-parts.safetensors", quant=())
    q("qqtp-whole", ["--batch-size", str(B)], init="llama-wide-whole.safetensors", quant=())
    d = {k: read_safetensors(os.path.join(tmp, k + ".dump")) for k in ("qqtp-2", "qqtp-1", "qqtp-ref", "qqtp-whole")}
    lrel = ((d["qqtp-ref"]["losses"] - d["qqtp-2"]["losses"]).abs() / d["qqtp-ref"]["losses"].abs()).max().item()
    ca, cb = last("qqtp-ref"), last("qqtp-2")
    wabs = max((ca[k] - cb[k]).abs().max().item() for k in ca)
    apart = ((d["qqtp-1"]["losses"] - d["qqtp-2"]["losses"]).abs() / d["qqtp-1"]["losses"].abs()).max().item()
    check("[tensor parallel] double-quantized QLoRA, tp=2 = 1 rank on numpy's parts (1e-5, 1e-4)",
          lrel <= 1e-5 and wabs <= 1e-4 and sorted(ca) == sorted(cb) and apart > 0 and
          torch.equal(d["qqtp-1"]["losses"], d["qqtp-whole"]["losses"]),
          "worst %.2e and %.2e over %d tensors; from one rank's double quantization of the whole "
          "matrices: losses %.2e apart (one rank = numpy's whole: bits)" % (lrel, wabs, len(cb), apart))
    half = ["--batch-size", str(B // 2), "--nproc", "4", "--tp", "2", "--dp", "2", "--precision", "bf16"]
    q("qtp-z0", half)
    q("qtp-z3", half + ["--zero", "3"])
    f = os.path.join(tmp, "%s", "step_%08d" % STEPS, "rank_00000.safetensors")
    check("[tensor parallel] QLoRA on tp=2 x dp=2 in bf16, ZeRO-3 = ZeRO-0 (bytes)",
          open(f % "qtp-z0", "rb").read() == open(f % "qtp-z3", "rb").read(), "step %d" % STEPS)
    kv = lm.index("--n-kv-head") + 1  # 4 key heads, which 4 ranks split
    rc, out = q("qtp-bad", ["--batch-size", str(B), "--nproc", "4", "--tp", "4"], ok=False,
                model=lm[:kv] + ["4"] + lm[kv + 1:])
    check("[tensor parallel] QLoRA whose parts would split NF4's blocks: refused",
          rc != 0 and "train.lora_quant=nf4 with parallel.tp=4 needs model.n_embd/tp (32) and the "
          "MLP's width/tp (64) to be multiples of 64" in out, "exit %d: %s" % (rc, out.strip()[-200:]))


def main():
    mine, theirs = colo_dynamic_map(), DMAP
    check("colo's dynamic map = bitsandbytes' create_dynamic_map() in PyTorch (bits)",
          mine.shape == (256,) and mine.tobytes() == theirs.tobytes(),
          "256 values, %.9g .. %.9g, %d distinct" % (theirs[0], theirs[-1], len(set(theirs.tolist()))))
    tmp = words_data("colo-qlora-")
    run(tmp, "gpt2")
    run(tmp, "llama")
    data_parallel(tmp)
    tensor_parallel(tmp)
    print("%d failed" % len(failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
