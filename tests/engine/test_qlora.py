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


def nf4(w):
    """w [out][in] float32 -> its NF4 values, dequantized (float32, same shape)"""
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
    return (LEVELS[q] * amax[:, None]).astype(np.float32).reshape(-1)[:n].reshape(w.shape)


LINEAR = {"gpt2": re.compile(r"\.(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.weight$"),
          "llama": re.compile(r"\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)\.weight$")}
MODEL = ["--n-layer", str(L), "--n-head", str(NH), "--n-embd", str(C), "--block-size", str(T),
         "--vocab-size", str(V)]
ARCH = {"gpt2": ["--arch", "gpt2"],
        "llama": ["--arch", "llama", "--n-kv-head", "1", "--mlp-hidden", str(H_LLAMA),
                  "--tie-embeddings", "false"]}


def run(tmp, arch):
    tag = "[%s] " % arch
    base_dir = train_base(tmp, arch, MODEL + ARCH[arch])
    base = os.path.join(tmp, arch + "-base.safetensors")
    colo(["export", "--checkpoint", os.path.join(base_dir, "step_00000030"), "--out", base])
    w = {k: v.numpy() for k, v in read_safetensors(base).items()}
    deq, count = {}, 0
    for k, v in w.items():
        if LINEAR[arch].search(k):  # GPT-2's Conv1D is [in][out]: quantized as its transpose
            deq[k] = nf4(v.T).T.copy() if arch == "gpt2" else nf4(v)
            count += 1
        else:
            deq[k] = v
    check(tag + "numpy quantized every linear weight", count == L * (4 if arch == "gpt2" else 7),
          "%d of them; largest change %.3e" % (count, max(np.abs(deq[k] - w[k]).max() for k in w)))
    write_safetensors(os.path.join(tmp, arch + "-deq.safetensors"),
                      {k: ("F32", np.ascontiguousarray(v, np.float32)) for k, v in deq.items()})

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
        check(tag + "manifest: lora.quant nf4", man["lora"].get("quant") == "nf4" and
              "quant" not in json.load(open(os.path.join(rck, last, "manifest.json")))["lora"],
              json.dumps(man["lora"]))
        ex = []
        for ck in (qck, rck):
            colo(["export", "--checkpoint", os.path.join(ck, last), "--out", ck + "-merged.safetensors"])
            ex.append(read_safetensors(ck + "-merged.safetensors"))
        same = sorted(ex[0]) == sorted(ex[1]) and all(torch.equal(ex[0][k], ex[1][k]) for k in ex[0])
        check(tag + "export merges into the dequantized matrices (exact)", same, "%d tensors" % len(ex[0]))
        ev = [json.loads(colo(["eval", "--checkpoint", os.path.join(ck, last), "--data",
                               os.path.join(tmp, "val.bin"), "--batches", "2", "--batch-size", "4",
                               "--json"]).strip().splitlines()[-1])["loss"] for ck in (qck, rck)]
        check(tag + "eval of the QLoRA checkpoint = of the LoRA one", ev[0] == ev[1], "%.7f %.7f" % tuple(ev))
        # stopped halfway and resumed
        halves = os.path.join(tmp, arch + "-halves")
        common = ["train", "--data-root", tmp, "--train-data", "train.bin", "--eval-interval", "0",
                  "--batch-size", str(B), "--grad-accum", str(ACCUM), "--steps", str(STEPS), "--lr", "3e-3",
                  "--warmup", "3", "--weight-decay", "0.1", "--seed", "1234", "--threads", "2",
                  "--init-from", arch + "-base.safetensors", "--lora-rank", str(RANK), "--lora-alpha",
                  str(ALPHA), "--ckpt-dir", halves, "--quiet"] + MODEL + ARCH[arch]
        colo(common + ["--lora-quant", "nf4", "--stop-at", str(STEPS // 2)])
        rc, msg = colo(common + ["--resume", "auto"], ok=False)
        want = "holds LoRA adapters trained on the model in NF4; this run keeps it as loaded (train.lora_quant)"
        check(tag + "resuming without --lora-quant: refused", rc != 0 and want in msg, msg.strip()[-160:])
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

    def q(ck, extra=(), ok=True, model=lm):
        return colo(["train", "--data-root", tmp, "--train-data", "train.bin", "--eval-interval", "0",
                     "--grad-accum", str(ACCUM), "--steps", str(STEPS), "--lr", "3e-3", "--seed", "1234",
                     "--threads", "1", "--init-from", base, "--lora-rank", str(RANK), "--lora-quant", "nf4",
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
    tmp = words_data("colo-qlora-")
    run(tmp, "gpt2")
    run(tmp, "llama")
    data_parallel(tmp)
    tensor_parallel(tmp)
    print("%d failed" % len(failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
