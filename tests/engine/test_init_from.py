#!/usr/bin/python3
"""train.init_from: colo-train starts from GPT-2 weights in HuggingFace's safetensors layout.

The weights are drawn here, in PyTorch, and written as the files people bring:

  - the Hub's GPT2Model file: names without a prefix, F32, with the attention-mask buffers
    (h.N.attn.bias) that older exports carry;
  - a GPT2LMHeadModel file: "transformer." names and lm_head.weight (tied), in BF16;
  - the same in F16.

For each, colo-train trains one step with --init-from and a reference dump, and the test checks:

  - the weights it started from are the file's, converted to fp32, bit for bit;
  - its first loss equals the loss PyTorch's GPT-2 (tests/engine/torch_gpt2.py, HF's
    computation and Conv1D layout) computes from those weights on the same batch, within 1e-5
    relative: colo reads the file as HuggingFace does;
  - tp=2 and pp=2 runs from the same file report the same first loss as one process (1e-5);
  - a colo checkpoint directory works as init_from too: its validation loss at step 0 is the one
    the checkpoint's own run measured.

And files that must be refused, with the message: another model's shape, an untied lm_head, a
tensor GPT-2 does not have, a path that leaves the data root. Nothing is trained from them.

Then a model.arch=llama run (4 query heads, 2 key and value heads) from HuggingFace's Llama
layout, drawn here as LlamaForCausalLM's file (BF16, "model." names, lm_head tied) and as
LlamaModel's (F32, no prefix, with the rotary_emb.inv_freq buffers of older exports): its first
loss equals HFLlama's (torch_gpt2.py: HF's names, nn.Linear layout and repeat_kv) on the same
batch, also at tp=2 and pp=2 and from the same tensors in two shards with the Hub's index, and for an untied model (lm_head.weight of its own, tp=2 and pp=2
too); and refusals: an untied head for a tied model, a tied file for an untied model, another
count of key heads, a Llama file for a GPT-2 run.

Last, `colo-train hf-config`: Llama 3.2 1B's published config.json gives its shape (GQA, Llama
3's rope_scaling, tied); the small Llama's config.json gives a job file whose run from its
weights starts at the same loss as the flags'; export --config and hf-config agree on a model
with all of the options; configs colo's blocks cannot follow are refused naming the field.
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
from torch_gpt2 import GPT2, HFLlama  # noqa: E402

BIN = os.environ["COLO_BIN"]
torch.set_num_threads(1)
L, NH, C, T, V, B = 2, 2, 32, 16, 256, 4
failures = []


def check(what, ok, detail):
    print("%-58s %s  %s" % (what, "ok  " if ok else "FAIL", detail))
    if not ok:
        failures.append(what)


def write_safetensors(path, tensors):
    """tensors: name -> (dtype string, numpy array of that dtype's bytes)"""
    hdr, blobs, off = {}, [], 0
    for name, (dt, arr) in tensors.items():
        b = arr.tobytes()
        hdr[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    return {k: np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]], np.float32).reshape(v["shape"])
            for k, v in hdr.items() if k != "__metadata__"}


def encode(t, dtype):
    """a float32 torch tensor as (safetensors dtype, numpy array) and its value back in fp32"""
    if dtype == "F32":
        return ("F32", t.numpy().astype(np.float32)), t.clone()
    if dtype == "F16":
        h = t.to(torch.float16)
        return ("F16", h.numpy()), h.float()
    h = t.to(torch.bfloat16)
    return ("BF16", h.view(torch.int16).numpy()), h.float()


def colo(tmp, init, extra=(), check_rc=True):
    args = [os.path.join(BIN, "colo-train"), "train", "--data-root", tmp, "--train-data", "train.bin",
            "--val-data", "val.bin", "--n-layer", str(L), "--n-head", str(NH), "--n-embd", str(C),
            "--block-size", str(T), "--vocab-size", str(V), "--batch-size", str(B), "--steps", "1",
            "--eval-interval", "0", "--threads", "1", "--quiet", "--init-from", init] + list(extra)
    r = subprocess.run(args, capture_output=True, text=True)
    if check_rc and r.returncode != 0:
        raise SystemExit("colo-train failed: %s\n%s" % (" ".join(args), r.stderr))
    return r


def first_loss(progress):
    return [json.loads(x) for x in open(progress) if '"event":"step"' in x][0]["loss"]


def layouts_match(tmp, label, args, base):
    """tp=2, pp=2 and ZeRO-3 runs from the file label.safetensors start at one process's first
    loss (ZeRO-3's ranks each read only the parts of the file their pieces keep)"""
    for lay, extra in [("tp=2", ["--nproc", "2", "--tp", "2"]),
                       ("pp=2", ["--nproc", "2", "--pp", "2", "--micro-batches", "2"]),
                       ("dp=2 ZeRO-3", ["--nproc", "2", "--dp", "2", "--zero", "3",
                                        "--batch-size", str(B // 2)])]:
        p2 = os.path.join(tmp, "%s-%s.jsonl" % (label, lay[:4].replace(" ", "")))
        colo(tmp, label + ".safetensors", args + extra + ["--progress", p2])
        l2 = first_loss(p2)
        rel = abs(l2 - base) / abs(base)
        check("%s: %s first loss against one process (rel 1e-5)" % (label, lay), rel <= 1e-5,
              "%.7f vs %.7f rel %.2e" % (l2, base, rel))


def refused(tmp, label, args, tensors, want):
    """a file of these tensors is refused with the message want, and nothing is trained"""
    write_safetensors(os.path.join(tmp, label + ".safetensors"), tensors)
    prog = os.path.join(tmp, label + ".jsonl")
    r = colo(tmp, label + ".safetensors", args + ["--progress", prog], check_rc=False)
    steps = sum('"event":"step"' in x for x in open(prog)) if os.path.exists(prog) else 0
    check("refused: %s" % label, r.returncode != 0 and want in r.stderr and steps == 0,
          "rc %d: %s" % (r.returncode, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""))


def main():
    tmp = tempfile.mkdtemp(prefix="colo-init-")
    rng = np.random.default_rng(11)
    words = ["".join(chr(97 + c) for c in rng.integers(0, 26, rng.integers(1, 8))) for _ in range(200)]
    with open(os.path.join(tmp, "text.txt"), "w") as f:
        f.write(" ".join(words[i] for i in rng.integers(0, 200, 4000)) + "\n")
    subprocess.run([os.path.join(BIN, "colo-train"), "prepare", "--input", os.path.join(tmp, "text.txt"),
                    "--out", tmp], check=True, stdout=subprocess.DEVNULL)

    # weights unlike colo's own initialisation: every tensor random, LayerNorms included
    torch.manual_seed(3)
    ref = GPT2(L, NH, C, T, V)
    w = {n: torch.randn(ref.p[n].shape) * (0.3 if "ln_" in n else 0.05) + (1.0 if n.endswith("ln_1.weight") or
         n.endswith("ln_2.weight") or n.endswith("ln_f.weight") else 0.0) for n in ref.names}

    files = {}
    for label, dtype, hub in [("hub-f32", "F32", True), ("lmhead-bf16", "BF16", False), ("lmhead-f16", "F16", False)]:
        tensors, values = {}, {}
        for n in ref.names:
            enc, val = encode(w[n], dtype)
            tensors[n[len("transformer."):] if hub else n] = enc
            values[n] = val
        if hub:  # the mask buffers of older exports
            for l in range(L):
                tensors["h.%d.attn.bias" % l] = ("F32", np.tril(np.ones((T, T), np.float32)).reshape(1, 1, T, T))
        else:
            tensors["lm_head.weight"] = tensors["transformer.wte.weight"]
        write_safetensors(os.path.join(tmp, label + ".safetensors"), tensors)
        files[label] = values

    for label, values in files.items():
        dump, prog = os.path.join(tmp, label + ".dump"), os.path.join(tmp, label + ".jsonl")
        colo(tmp, label + ".safetensors", ["--dump-reference", dump, "--progress", prog])
        d = {k: torch.from_numpy(v.copy()) for k, v in read_safetensors(dump).items()}
        same = all(torch.equal(d["init." + n], values[n]) for n in ref.names)
        check("%s: the initial weights are the file's, bit for bit" % label, same, "%d tensors" % len(ref.names))
        with torch.no_grad():
            for n in ref.names:
                ref.p[n].copy_(values[n])
            batch = d["batch.0.0"].long()
            tl = ref(batch[:B], batch[B:]).item()
        cl = d["losses"][0].item()
        rel = abs(tl - cl) / abs(tl)
        check("%s: first loss against PyTorch (rel 1e-5)" % label, rel <= 1e-5,
              "torch %.7f colo %.7f rel %.2e" % (tl, cl, rel))
        if label == "lmhead-bf16":
            layouts_match(tmp, label, [], first_loss(prog))

    # a checkpoint directory: trained here for 20 steps, then the start of a new run
    ck = os.path.join(tmp, "ck")
    subprocess.run([os.path.join(BIN, "colo-train"), "train", "--data-root", tmp, "--train-data", "train.bin",
                    "--val-data", "val.bin", "--n-layer", str(L), "--n-head", str(NH), "--n-embd", str(C),
                    "--block-size", str(T), "--batch-size", str(B), "--steps", "20", "--eval-interval", "20",
                    "--threads", "1", "--quiet", "--ckpt-dir", ck, "--ckpt-interval", "10",
                    "--progress", os.path.join(tmp, "ck.jsonl")],
                   check=True)
    os.symlink(os.path.join(ck, "step_00000020"), os.path.join(tmp, "pretrained"))
    before = [json.loads(x) for x in open(os.path.join(tmp, "ck.jsonl")) if '"eval"' in x][-1]["val_loss"]
    colo(tmp, "pretrained", ["--eval-interval", "1", "--progress", os.path.join(tmp, "again.jsonl")])
    after = [json.loads(x) for x in open(os.path.join(tmp, "again.jsonl")) if '"eval"' in x][0]
    check("checkpoint directory: validation loss at step 0 is its run's", after["step"] == 0 and
          after["val_loss"] == before, "%.6f, its run measured %.6f" % (after["val_loss"], before))

    average(tmp, ck)

    # refused, with the reason
    good = {n[len("transformer."):]: encode(w[n], "F32")[0] for n in ref.names}
    bad = {
        "untied": dict(good, **{"lm_head.weight": ("F32", np.ones((V, C), np.float32))}),
        "extra": dict(good, **{"h.0.attn.rotary": ("F32", np.ones((4,), np.float32))}),
        "deeper": dict(good, **{"h.2." + k[4:]: v for k, v in good.items() if k.startswith("h.1.")}),
        "f64": dict(good, **{"wpe.weight": ("F64", w["transformer.wpe.weight"].double().numpy())}),
    }
    want = {
        "untied": "untied.safetensors: lm_head.weight differs from wte.weight; colo's GPT-2 ties the two",
        "extra": "extra.safetensors: tensor h.0.attn.rotary is not part of a GPT-2 model",
        "deeper": "deeper.safetensors holds a GPT-2 of 3 layers, width 32, vocab 256 and block 16; this "
                  "run's model has 2, 32, 256 and 16 (model.n_layer, n_embd, vocab_size, block_size)",
        "f64": "f64.safetensors: tensor wpe.weight is F64, not F32, F16 or BF16",
    }
    for label, tensors in bad.items():
        refused(tmp, label, [], tensors, want[label])
    llama(tmp)
    hf_config(tmp)
    r = colo(tmp, "../hub-f32.safetensors", check_rc=False)
    check("refused: a path outside the data root", r.returncode != 0 and
          'train.init_from "../hub-f32.safetensors" must be a path relative to the data root' in r.stderr,
          r.stderr.strip())
    print("%d failed" % len(failures))
    sys.exit(1 if failures else 0)


def average(tmp, ck):
    """colo-train average: the mean of checkpoints' weights, as numpy takes it of their exports"""
    ct = os.path.join(BIN, "colo-train")
    run = lambda *a: subprocess.run([ct] + list(a), capture_output=True, text=True)
    ex = {}
    for s in (10, 20):
        out = os.path.join(tmp, "ex%d.safetensors" % s)
        subprocess.run([ct, "export", "--checkpoint", os.path.join(ck, "step_%08d" % s), "--out", out],
                       check=True, capture_output=True)
        ex[s] = read_safetensors(out)
    avg = os.path.join(tmp, "avg", "model.safetensors")  # its folder made as needed
    r = run("average", "--checkpoint", ck, "--last", "2", "--out", avg, "--config",
            os.path.join(tmp, "avg", "config.json"))
    got = read_safetensors(avg) if r.returncode == 0 else {}
    same = sorted(got) == sorted(ex[10]) and all(np.array_equal(
        got[k], ((ex[10][k].astype(np.float64) + ex[20][k].astype(np.float64)) / 2).astype(np.float32))
        for k in got)
    check("average --last 2: the mean of steps 10 and 20, bit for bit", same,
          r.stdout.strip() + r.stderr.strip()[-200:])
    check("average: each checkpoint named as it is read, oldest first",
          r.stderr.index("[1/2] %s/step_00000010" % ck) < r.stderr.index("[2/2] %s/step_00000020" % ck)
          if r.returncode == 0 else False, r.stderr)
    wavg = os.path.join(tmp, "wavg.safetensors")
    r = run("average", "--checkpoint", os.path.join(ck, "step_00000010"), "--checkpoint",
            os.path.join(ck, "step_00000020"), "--weights", "1,3", "--out", wavg)
    got = read_safetensors(wavg) if r.returncode == 0 else {}
    check("average --weights 1,3: (step 10 + 3 step 20) / 4, bit for bit", sorted(got) == sorted(ex[10]) and all(
        np.array_equal(got[k], ((ex[10][k].astype(np.float64) + 3 * ex[20][k].astype(np.float64)) / 4)
                       .astype(np.float32)) for k in got), r.stdout.strip() + r.stderr.strip()[-200:])
    # the average is a model train.init_from and eval take
    dump = os.path.join(tmp, "avg.dump")
    colo(tmp, "avg/model.safetensors", ["--dump-reference", dump])
    d = read_safetensors(dump)
    mean = read_safetensors(avg)
    strip = lambda k: k[len("transformer."):] if k.startswith("transformer.") else k
    init = {strip(k[len("init."):]): v for k, v in d.items() if k.startswith("init.")}
    check("the average as train.init_from: the run's initial weights, bit for bit",
          len(init) > 0 and all(np.array_equal(init[strip(k)], v) for k, v in mean.items() if strip(k) in init)
          and all(strip(k) in init for k in mean), "%d tensors" % len(init))
    r = run("eval", "--checkpoint", os.path.join(tmp, "avg"), "--data", os.path.join(tmp, "val.bin"))
    check("eval --checkpoint of the average's directory (config.json beside it)",
          r.returncode == 0 and "val loss" in r.stdout, r.stdout.strip() + r.stderr.strip()[-200:])
    # refused, with nothing written
    small = os.path.join(tmp, "ck-small")
    subprocess.run([ct, "train", "--data-root", tmp, "--train-data", "train.bin", "--n-layer", "1",
                    "--n-head", str(NH), "--n-embd", str(C), "--block-size", str(T), "--batch-size", str(B),
                    "--steps", "1", "--eval-interval", "0", "--threads", "1", "--quiet", "--ckpt-dir", small],
                   check=True)
    bad = os.path.join(tmp, "bad.safetensors")
    for label, args, rc, want in [
            ("another model", ["--checkpoint", os.path.join(ck, "step_00000020"), "--checkpoint",
                               os.path.join(small, "step_00000001")], 1,
             "colo-train average: %s/step_00000001 is a gpt2 of 1 layers, %d heads, width %d, vocab %d, "
             "block %d (or otherwise configured), %s/step_00000020 a gpt2 of %d layers, %d heads, width %d, "
             "vocab %d, block %d: checkpoints average only with those of the same model" %
             (small, NH, C, V, T, ck, L, NH, C, V, T)),
            ("--last beyond the checkpoints", ["--checkpoint", ck, "--last", "3"], 1,
             "colo-train average: --last 3: %s holds 2 complete checkpoints, not 3" % ck),
            ("a weight short", ["--checkpoint", ck, "--last", "2", "--weights", "1"], 2,
             "colo-train average: --weights gives 1 weight for 2 checkpoints; try 'colo-train average --help'"),
            ("a weight of 0", ["--checkpoint", ck, "--last", "2", "--weights", "1,0"], 2,
             "colo-train average: --weights must be numbers above 0, comma-separated; try "
             "'colo-train average --help'")]:
        r = run("average", *args, "--out", bad)
        check("average refused: " + label, r.returncode == rc and r.stderr.strip().splitlines()[-1] == want and
              not os.path.exists(bad) and not os.path.exists(bad + ".tmp"), r.stderr.strip())


def llama(tmp):
    NHL, NKV, H = 4, 2, 128
    cfg = {"model_type": "llama", "hidden_size": C, "intermediate_size": H, "num_hidden_layers": L,
           "num_attention_heads": NHL, "num_key_value_heads": NKV, "vocab_size": V,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0}
    hf = HFLlama(cfg)
    torch.manual_seed(5)
    w = {n: torch.randn(s) * (0.3 if len(s) == 1 else 0.05) + (1.0 if len(s) == 1 else 0.0)
         for n, s in hf.shapes.items()}
    w["lm_head.weight"] = torch.randn(V, C) * 0.05  # for the untied model
    args = ["--arch", "llama", "--n-head", str(NHL), "--n-kv-head", str(NKV)]
    for label, dtype, prefix in [("llama-bf16", "BF16", True), ("llamamodel-f32", "F32", False),
                                 ("llama-untied", "F32", True)]:
        untied = label == "llama-untied"
        hf = HFLlama(dict(cfg, tie_word_embeddings=not untied))
        tensors, values = {}, {}
        for n in hf.shapes:
            enc, values[n] = encode(w[n], dtype)
            tensors[n if prefix else n[len("model."):]] = enc
        if prefix and not untied:
            tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
        if not prefix:
            for l in range(L):
                tensors["layers.%d.self_attn.rotary_emb.inv_freq" % l] = ("F32", np.ones(4, np.float32))
        write_safetensors(os.path.join(tmp, label + ".safetensors"), tensors)
        dump, prog = os.path.join(tmp, label + ".dump"), os.path.join(tmp, label + ".jsonl")
        a = args + (["--tie-embeddings", "false"] if untied else [])
        colo(tmp, label + ".safetensors", a + ["--dump-reference", dump, "--progress", prog])
        d = {k: torch.from_numpy(v.copy()) for k, v in read_safetensors(dump).items()}
        hf.load(values)
        with torch.no_grad():
            batch = d["batch.0.0"].long()
            tl = hf(batch[:B], batch[B:]).item()
        cl = d["losses"][0].item()
        rel = abs(tl - cl) / abs(tl)
        check("%s: first loss against HF's Llama layout (rel 1e-5)" % label, rel <= 1e-5,
              "torch %.7f colo %.7f rel %.2e" % (tl, cl, rel))
        if label == "llama-bf16":  # the Hub's layout for large models: shards and an index
            names = sorted(tensors)
            halves = {"shard-1.safetensors": names[::2], "shard-2.safetensors": names[1::2]}
            for fn, part in halves.items():
                write_safetensors(os.path.join(tmp, fn), {n: tensors[n] for n in part})
            with open(os.path.join(tmp, "model.safetensors.index.json"), "w") as f:
                json.dump({"metadata": {}, "weight_map": {n: fn for fn, part in halves.items() for n in part}}, f)
            p2 = os.path.join(tmp, "sharded.jsonl")
            colo(tmp, "model.safetensors.index.json", a + ["--progress", p2])
            l1, l2 = first_loss(prog), first_loss(p2)
            check("%s in 2 shards with an index: the same first loss" % label, l2 == l1,
                  "%.7f vs %.7f" % (l2, l1))
            with open(os.path.join(tmp, "escape.index.json"), "w") as f:
                json.dump({"weight_map": {"model.norm.weight": "../shard-1.safetensors"}}, f)
            r = colo(tmp, "escape.index.json", a, check_rc=False)
            check("refused: an index naming a file elsewhere", r.returncode != 0 and
                  'tensor model.norm.weight maps to "../shard-1.safetensors", not a file beside the index'
                  in r.stderr, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "")
        if prefix:
            layouts_match(tmp, label, a, cl)
        if untied:  # Phi-3's layout: the same weights with q, k, v and gate, up fused
            phi3(tmp, w, a, first_loss(prog), tl, hf)
    longrope(tmp, cfg, w, args)
    hf = HFLlama(cfg)
    good = {n: encode(w[n], "F32")[0] for n in hf.shapes}
    bad = {"untied-for-tied": (args, dict(good, **{"lm_head.weight": ("F32", np.ones((V, C), np.float32))})),
           "llama-kv4": (args[:-2], good),
           "llama-for-gpt2": ([], good),
           "llama-tied-for-untied": (args + ["--tie-embeddings", "false"], good)}
    want = {"untied-for-tied": "untied-for-tied.safetensors: lm_head.weight differs from model.embed_tokens.weight, "
                               "and this run's model ties its head to the embedding (model.tie_embeddings=false "
                               "takes the file's head)",
            "llama-kv4": "llama-kv4.safetensors has 16 rows of keys and an MLP 128 wide; this run's model has 32 "
                         "(n_kv_head 4 of n_head 4) and 128 (model.n_kv_head, mlp_hidden)",
            "llama-for-gpt2": "llama-for-gpt2.safetensors: tensor model.embed_tokens.weight is not part of a "
                              "GPT-2 model",
            "llama-tied-for-untied": "llama-tied-for-untied.safetensors has no lm_head.weight: its head is tied "
                                     "to the embedding, and this run's model is not (model.tie_embeddings=false)"}
    for label, (a, tensors) in bad.items():
        refused(tmp, label, a, tensors, want[label])
    # Qwen2's layout: Llama's with biases on q, k and v, RMSNorm eps 1e-6
    qcfg = dict(cfg, model_type="qwen2", rms_norm_eps=1e-6)
    wq = dict(w, **{n: torch.randn(s) * 0.3 for n, s in HFLlama(qcfg).shapes.items() if n.endswith(".bias")})
    tensors = hf_layout(tmp, "qwen2", qcfg, wq, args + ["--qkv-bias", "true", "--rms-norm-eps", "1e-6"],
                        "qwen2 (q, k, v biases, eps 1e-6)", "Qwen2")
    refused(tmp, "qwen2-for-llama", args, tensors,
            "qwen2-for-llama.safetensors: tensor model.layers.0.self_attn.q_proj.bias: the file's queries, "
            "keys and values have biases (Qwen2's); this run's model has none (model.qkv_bias)")
    # Qwen3's layout: Llama's with RMSNorm over each query and key head (self_attn.q_norm and
    # k_norm, head_dim values each), RMSNorm eps 1e-6
    q3cfg = dict(cfg, model_type="qwen3", rms_norm_eps=1e-6, head_dim=C // NHL)
    w3 = dict(w, **{n: torch.randn(s) * 0.3 + 1.0 for n, s in HFLlama(q3cfg).shapes.items() if "_norm." in n})
    q3a = args + ["--qk-norm", "true", "--rms-norm-eps", "1e-6"]
    tensors = hf_layout(tmp, "qwen3", q3cfg, w3, q3a, "qwen3 (QK-norm, eps 1e-6)", "Qwen3")
    refused(tmp, "qwen3-for-llama", args, tensors,
            "qwen3-for-llama.safetensors: tensor model.layers.0.self_attn.q_norm.weight: the file's query and "
            "key heads are normalized (Qwen3's QK-norm); this run's model is not (model.qk_norm)")
    refused(tmp, "llama-for-qwen3", q3a, good,
            "llama-for-qwen3.safetensors: no tensor model.layers.0.self_attn.q_norm.weight")
    # and its heads wider than hidden_size / num_attention_heads (Qwen3 0.6B's 128 on 1024 with 16
    # heads): here 12 on 32 with 4, q_proj [48, 32] and o_proj [32, 48] (model.head_dim)
    q3w = dict(q3cfg, head_dim=12)
    w3w = {n: torch.randn(s) * 0.3 + 1.0 if len(s) == 1 else torch.randn(s) * 0.05
           for n, s in HFLlama(q3w).shapes.items()}
    tensors = hf_layout(tmp, "qwen3-wide", q3w, w3w, q3a + ["--head-dim", "12"],
                        "qwen3 with heads of 12 on 32 (head_dim)", "Qwen3")
    refused(tmp, "qwen3-wide-for-qwen3", q3a, tensors,
            "qwen3-wide-for-qwen3.safetensors has 48 rows of queries; this run's model has 32 (n_head 4 "
            "heads of 8: model.head_dim)")


def phi3(tmp, w, args, ll, tl, hf):
    """Phi3ForCausalLM's file: self_attn.qkv_proj [Q + 2KV][C] (q, k, v stacked) and
    mlp.gate_up_proj [2H][C] (gate, then up) in place of Llama's five, the head untied. colo's
    first loss from it is the Llama layout's of the same weights, bit for bit (so HF's Llama's too),
    at tp=2, pp=2 and ZeRO-3 as well; and another count of key heads is refused"""
    tensors = {n: encode(w[n], "F32")[0] for n in hf.shapes
               if not any(x in n for x in ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"))}
    for l in range(L):
        h = "model.layers.%d." % l
        tensors[h + "self_attn.qkv_proj.weight"] = encode(
            torch.cat([w[h + "self_attn.%s_proj.weight" % x] for x in "qkv"]), "F32")[0]
        tensors[h + "mlp.gate_up_proj.weight"] = encode(
            torch.cat([w[h + "mlp.gate_proj.weight"], w[h + "mlp.up_proj.weight"]]), "F32")[0]
    write_safetensors(os.path.join(tmp, "phi3.safetensors"), tensors)
    prog = os.path.join(tmp, "phi3.jsonl")
    colo(tmp, "phi3.safetensors", args + ["--progress", prog])
    pl = first_loss(prog)
    check("phi3 (fused qkv_proj, gate_up_proj): the Llama layout's first loss", pl == ll,
          "phi3 %.7f llama %.7f (HF's Llama %.7f)" % (pl, ll, tl))
    layouts_match(tmp, "phi3", args, pl)
    # export in Phi-3's layout (model.hf_layout: phi3, as hf-config writes it for a phi3 config):
    # the same training with and without it, whole and as LoRA adapters; Phi-3's fused tensors are
    # the Llama export's q, k, v and gate, up, stacked, bit for bit
    ct = os.path.join(BIN, "colo-train")
    out = {}
    for lay in ("llama", "phi3"):
        extra = ["--hf-layout", "phi3"] if lay == "phi3" else []
        for kind, more in (("full", []), ("lora", ["--lora-rank", "4", "--lora-targets", "all"])):
            ck = os.path.join(tmp, "phi3-export-%s-%s" % (lay, kind))
            colo(tmp, "phi3.safetensors", args + extra + more + ["--ckpt-dir", ck])
            o = os.path.join(tmp, "phi3-export-%s-%s.out" % (lay, kind))
            fmt = ["--format", "peft"] if kind == "lora" else ["--config", o + ".json"]
            subprocess.run([ct, "export", "--checkpoint", os.path.join(ck, "step_00000001"), "--out", o]
                           + fmt, check=True, stdout=subprocess.DEVNULL)
            out[lay, kind] = o
    ll = read_safetensors(out["llama", "full"])
    ph = read_safetensors(out["phi3", "full"])
    h, same = "model.layers.%d.", True
    for l in range(L):
        p = h % l
        same &= np.array_equal(ph[p + "self_attn.qkv_proj.weight"], np.concatenate(
            [ll[p + "self_attn.%s_proj.weight" % x] for x in "qkv"]))
        same &= np.array_equal(ph[p + "mlp.gate_up_proj.weight"], np.concatenate(
            [ll[p + "mlp.gate_proj.weight"], ll[p + "mlp.up_proj.weight"]]))
    same &= not any("q_proj" in n or "gate_proj" in n for n in ph) and len(ph) == len(ll) - 3 * L
    pc = json.load(open(out["phi3", "full"] + ".json"))
    check("export in Phi-3's layout: qkv_proj and gate_up_proj are the Llama export's, stacked",
          same and pc["architectures"] == ["Phi3ForCausalLM"] and pc["model_type"] == "phi3",
          "%d tensors against %d; %s" % (len(ph), len(ll), pc["architectures"]))
    sec = json.loads(subprocess.run([ct, "hf-config", out["phi3", "full"] + ".json", "--json"],
                                    capture_output=True, text=True).stdout)
    check("export in Phi-3's layout: hf-config reads it back as phi3", sec.get("hf_layout") == "phi3",
          json.dumps(sec))
    la = read_safetensors(os.path.join(out["llama", "lora"], "adapter_model.safetensors"))
    pa = read_safetensors(os.path.join(out["phi3", "lora"], "adapter_model.safetensors"))
    pre, same = "base_model.model.model.layers.%d.", True
    for l in range(L):
        p = pre % l
        same &= np.array_equal(pa[p + "self_attn.qkv_proj.lora_A.weight"],
                               la[p + "self_attn.q_proj.lora_A.weight"])
        same &= np.array_equal(pa[p + "self_attn.qkv_proj.lora_B.weight"], np.concatenate(
            [la[p + "self_attn.%s_proj.lora_B.weight" % x] for x in "qkv"]))
        same &= np.array_equal(pa[p + "mlp.gate_up_proj.lora_B.weight"], np.concatenate(
            [la[p + "mlp.%s_proj.lora_B.weight" % x] for x in ("gate", "up")]))
    tm = json.load(open(os.path.join(out["phi3", "lora"], "adapter_config.json")))["target_modules"]
    check("PEFT adapters in Phi-3's layout: on qkv_proj and gate_up_proj, the Llama ones' stacked",
          same and sorted(tm) == ["down_proj", "gate_up_proj", "o_proj", "qkv_proj"], json.dumps(tm))
    kv4 = [x for x in args]
    kv4[kv4.index("--n-kv-head") + 1] = "4"
    refused(tmp, "phi3-kv4", kv4, tensors,
            "phi3-kv4.safetensors has 64 rows of queries, keys and values (Phi-3's qkv_proj) and 256 of "
            "gate and up (gate_up_proj); this run's model has 96 (4 query heads and 4 key heads of 8: "
            "model.n_kv_head, head_dim) and 256 (2 x mlp_hidden)")


def longrope(tmp, cfg, w, args):
    """LongRoPE (Phi-3.5 mini's rope_scaling, rope_type longrope): hf-config's section of a config
    with a divisor for each of a head's 4 rotated pairs, as the job, over the Llama weights: colo's
    first loss is HF's (transformers' frequencies 1 / (ext · theta^(2i/hs)), cos and sin times the
    attention factor), with the short divisors where the block (16) is within the original context
    and the long ones past it, and at tp=2, pp=2 and ZeRO-3 too; export --config gives hf-config
    the same section back"""
    ct = os.path.join(BIN, "colo-train")
    for label, orig, af in [("short", 32, None), ("long", 8, None), ("given", 8, 1.25)]:
        rs = {"rope_type": "longrope", "short_factor": [1.0, 1.5, 3.0, 7.5],
              "long_factor": [1.25, 4.0, 11.0, 40.0]}
        if af:
            rs["attention_factor"] = af
        hcfg = dict(cfg, rope_scaling=rs, original_max_position_embeddings=orig,
                    max_position_embeddings=128, hidden_act="silu", tie_word_embeddings=True)
        path = os.path.join(tmp, "longrope-%s.json" % label)
        json.dump(hcfg, open(path, "w"))
        r = subprocess.run([ct, "hf-config", path, "--block-size", str(T)], capture_output=True,
                           text=True)
        job = os.path.join(tmp, "longrope-%s.yaml" % label)
        with open(job, "w") as f:
            f.write("name: longrope\n" + r.stdout)
        want_af = af or math.sqrt(1 + math.log(128 / orig) / math.log(orig))
        sec = json.loads(subprocess.run([ct, "hf-config", path, "--block-size", str(T), "--json"],
                                        capture_output=True, text=True).stdout)
        check("hf-config: LongRoPE (%s): divisors, original context, attention factor" % label,
              sec.get("rope_short_factor") == rs["short_factor"] and
              sec.get("rope_long_factor") == rs["long_factor"] and
              sec.get("rope_original_context") == orig and
              abs(sec.get("rope_attention_factor", 0) - want_af) < 1e-7, json.dumps(sec))
        hf_layout(tmp, "longrope-" + label, hcfg, w, args + ["--job", job],
                  "LongRoPE, %s divisors, attention factor %.4f" % (label if label != "given" else "long",
                                                                    want_af), "LongRoPE")
    def step_and_export(name, job, *extra):
        """one step of the job into tmp/name, exported as name-export.safetensors and its config;
        returns the checkpoint's folder and the config's path"""
        ck = os.path.join(tmp, name)
        subprocess.run([ct, "train", "--job", job, "--data-root", tmp, "--train-data", "train.bin",
                        "--batch-size", "2", "--steps", "1", "--eval-interval", "0", "--threads",
                        "1", "--quiet", "--ckpt-dir", ck] + list(extra), check=True)
        cj = os.path.join(tmp, name + "-export.json")
        subprocess.run([ct, "export", "--checkpoint", os.path.join(ck, "step_00000001"), "--out",
                        os.path.join(tmp, name + "-export.safetensors"), "--config", cj], check=True,
                       stdout=subprocess.DEVNULL)
        return ck, cj

    # export: the run's rotation back in HF's config
    ck, cj = step_and_export("longrope-ckpt", job)
    back = json.loads(subprocess.run([ct, "hf-config", cj, "--json"], capture_output=True,
                                     text=True).stdout)
    check("LongRoPE: hf-config of export --config is the job's section", back == sec,
          json.dumps(back))
    # resumed with another attention factor (the long case's computed one): refused, naming it
    r = subprocess.run([ct, "train", "--job", os.path.join(tmp, "longrope-long.yaml"), "--data-root",
                        tmp, "--train-data", "train.bin", "--batch-size", "2", "--steps", "2",
                        "--eval-interval", "0", "--threads", "1", "--quiet", "--ckpt-dir", ck,
                        "--resume", "auto"], capture_output=True, text=True)
    check("LongRoPE: a checkpoint resumed with another attention factor is refused",
          r.returncode != 0 and "and another rotation" in r.stderr and "rope_*_factor" in r.stderr,
          r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "")
    # in Phi-3's layout the factor is max_position_embeddings' (Phi3Config takes three fields):
    # a factor no whole number of positions gives (1.25 over 8) is refused, nothing written;
    # Phi-3.5 mini's (131072 over 4096) is written as Phi-3.5's config has it
    ck3 = os.path.join(tmp, "longrope-phi3")
    subprocess.run([ct, "train", "--job", job, "--hf-layout", "phi3", "--data-root", tmp,
                    "--train-data", "train.bin", "--batch-size", "2", "--steps", "1",
                    "--eval-interval", "0", "--threads", "1", "--quiet", "--ckpt-dir", ck3], check=True)
    r = subprocess.run([ct, "export", "--checkpoint", os.path.join(ck3, "step_00000001"), "--out",
                        os.path.join(tmp, "lr-phi3.safetensors"), "--config",
                        os.path.join(tmp, "lr-phi3.json")], capture_output=True, text=True)
    check("LongRoPE in Phi-3's layout: a factor no whole max_position_embeddings gives is refused",
          r.returncode != 0 and "the nearest, 26, gives 1.2517" in r.stderr and
          not os.path.exists(os.path.join(tmp, "lr-phi3.json")) and
          not os.path.exists(os.path.join(tmp, "lr-phi3.safetensors")), r.stderr.strip()[-200:])
    p35 = os.path.join(tmp, "phi35-small.json")
    json.dump(dict(cfg, model_type="phi3", rope_scaling={"type": "longrope", "short_factor": rs["short_factor"],
                                                           "long_factor": rs["long_factor"]},
                   original_max_position_embeddings=4096, max_position_embeddings=131072,
                   hidden_act="silu", tie_word_embeddings=True), open(p35, "w"))
    job35 = os.path.join(tmp, "phi35-small.yaml")
    with open(job35, "w") as f:
        f.write("name: phi35\n" + subprocess.run([ct, "hf-config", p35, "--block-size", str(T)],
                                                 capture_output=True, text=True).stdout)
    e = json.load(open(step_and_export("phi35-ckpt", job35)[1]))
    check("LongRoPE in Phi-3's layout: rope_scaling's three fields, 131072 positions over 4096",
          sorted(e["rope_scaling"]) == ["long_factor", "short_factor", "type"] and
          e["max_position_embeddings"] == 131072 and e["original_max_position_embeddings"] == 4096 and
          e["architectures"] == ["Phi3ForCausalLM"], json.dumps({k: e[k] for k in (
              "architectures", "max_position_embeddings", "original_max_position_embeddings")}))
    r = subprocess.run([ct, "export", "--checkpoint", os.path.join(ck, "step_00000001"), "--out",
                        os.path.join(tmp, "longrope.gguf"), "--format", "gguf"], capture_output=True,
                       text=True)
    check("LongRoPE: GGUF export refused", r.returncode != 0 and "LongRoPE" in r.stderr and
          not os.path.exists(os.path.join(tmp, "longrope.gguf")), r.stderr.strip())


def hf_layout(tmp, label, hcfg, w, args, what, layout):
    """HF's layout hcfg with weights w, written as label.safetensors: colo's first loss from it
    is HFLlama's on the same batch, and tp=2, pp=2 and ZeRO-3 start where one process does;
    returns the tensors written"""
    h = HFLlama(hcfg)
    tensors, values = {}, {}
    for n in h.shapes:
        tensors[n], values[n] = encode(w[n], "F32")
    write_safetensors(os.path.join(tmp, label + ".safetensors"), tensors)
    dump = os.path.join(tmp, label + ".dump")
    colo(tmp, label + ".safetensors", args + ["--dump-reference", dump, "--progress",
                                              os.path.join(tmp, label + ".jsonl")])
    d = {k: torch.from_numpy(v.copy()) for k, v in read_safetensors(dump).items()}
    h.load(values)
    with torch.no_grad():
        batch = d["batch.0.0"].long()
        tl = h(batch[:B], batch[B:]).item()
    cl = d["losses"][0].item()
    rel = abs(tl - cl) / abs(tl)
    check("%s: first loss against HF's %s layout (rel 1e-5)" % (what, layout), rel <= 1e-5,
          "torch %.7f colo %.7f rel %.2e" % (tl, cl, rel))
    layouts_match(tmp, label, args, cl)
    return tensors


def hf_config(tmp):
    """colo-train hf-config: a transformers config.json as a job file's model section"""
    ct = os.path.join(BIN, "colo-train")

    def section(path, *extra):
        r = subprocess.run([ct, "hf-config", path, "--json"] + list(extra), capture_output=True,
                           text=True)
        if r.returncode != 0:
            raise SystemExit("hf-config %s: %s" % (path, r.stderr))
        return json.loads(r.stdout)

    # Llama 3.2 1B's published config.json
    l32 = {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "head_dim": 64,
           "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 8192,
           "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama",
           "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
           "rms_norm_eps": 1e-05, "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0,
                                                   "low_freq_factor": 1.0,
                                                   "original_max_position_embeddings": 8192,
                                                   "rope_type": "llama3"},
           "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
           "vocab_size": 128256}
    d = os.path.join(tmp, "llama32")
    os.makedirs(d, exist_ok=True)
    json.dump(l32, open(os.path.join(d, "config.json"), "w"))
    want = {"arch": "llama", "n_layer": 16, "n_head": 32, "n_kv_head": 8, "n_embd": 2048,
            "mlp_hidden": 8192, "vocab_size": 128256, "block_size": 1024, "rope_theta": 500000,
            "rope_scaling_factor": 32, "rope_low_freq_factor": 1, "rope_high_freq_factor": 4,
            "rope_original_context": 8192, "tie_embeddings": True}
    got = section(d)
    check("hf-config: Llama 3.2 1B's config.json", got == want, json.dumps(got))
    check("hf-config --block-size 0: the file's 131072 positions",
          section(d, "--block-size", "0")["block_size"] == 131072, "")

    # the YAML section is a job file: with the small Llama's config.json beside its weights, a run
    # from it starts at the loss of the same model given by flags (llama-bf16.jsonl)
    cfg = {"model_type": "llama", "hidden_size": C, "intermediate_size": 128, "num_hidden_layers": L,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": V,
           "max_position_embeddings": T, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "hidden_act": "silu", "tie_word_embeddings": True}
    json.dump(cfg, open(os.path.join(tmp, "config.json"), "w"))
    r = subprocess.run([ct, "hf-config", os.path.join(tmp, "config.json")], capture_output=True,
                       text=True)
    job = os.path.join(tmp, "from-config.yaml")
    with open(job, "w") as f:
        f.write("name: from-config\n" + r.stdout)
    prog = os.path.join(tmp, "from-config.jsonl")
    r = subprocess.run([ct, "train", "--job", job, "--data-root", tmp, "--train-data", "train.bin",
                        "--val-data", "val.bin", "--batch-size", str(B), "--steps", "1",
                        "--eval-interval", "0", "--threads", "1", "--quiet", "--init-from",
                        "llama-bf16.safetensors", "--progress", prog], capture_output=True, text=True)
    ok = r.returncode == 0 and first_loss(prog) == first_loss(os.path.join(tmp, "llama-bf16.jsonl"))
    check("hf-config's section as the job: the flags' first loss", ok,
          r.stderr.strip().splitlines()[-1] if r.returncode else "%.7f" % first_loss(prog))

    # export --config and hf-config agree: GQA, an untied head, Llama 3's rescaling
    ck = os.path.join(tmp, "rt-ckpt")
    subprocess.run([ct, "train", "--data-root", tmp, "--train-data", "train.bin", "--arch", "llama",
                    "--n-layer", "2", "--n-head", "4", "--n-kv-head", "2", "--n-embd", "32",
                    "--block-size", "16", "--vocab-size", "256", "--mlp-hidden", "96",
                    "--tie-embeddings", "false", "--rope-theta", "50000", "--rope-scaling-factor", "8",
                    "--rope-low-freq-factor", "2", "--rope-high-freq-factor", "8",
                    "--rope-original-context", "64", "--batch-size", "2", "--steps", "1",
                    "--eval-interval", "0", "--threads", "1", "--quiet", "--ckpt-dir", ck], check=True)
    cj = os.path.join(tmp, "rt-config.json")
    subprocess.run([ct, "export", "--checkpoint", os.path.join(ck, "step_00000001"), "--out",
                    os.path.join(tmp, "rt.safetensors"), "--config", cj], check=True,
                   stdout=subprocess.DEVNULL)
    want = {"arch": "llama", "n_layer": 2, "n_head": 4, "n_kv_head": 2, "n_embd": 32,
            "mlp_hidden": 96, "vocab_size": 256, "block_size": 16, "rope_theta": 50000,
            "rope_scaling_factor": 8, "rope_low_freq_factor": 2, "rope_high_freq_factor": 8,
            "rope_original_context": 64, "tie_embeddings": False}
    got = section(cj)
    check("hf-config of export --config: the run's model", got == want, json.dumps(got))

    # what colo's blocks cannot be, refused naming the field
    # Qwen2.5 0.5B's published config.json: its shape, with qkv_bias and its eps
    q25 = {"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
           "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
           "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24,
           "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24,
           "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
           "sliding_window": 32768, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
           "transformers_version": "4.40.1", "use_cache": True, "use_sliding_window": False,
           "vocab_size": 151936}
    mistral = {"architectures": ["MistralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
               "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
               "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
               "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
               "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": None,
               "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 32768}
    # Qwen3 1.7B's published config.json: QK-norm, head_dim 128 = 2048 / 16, no biases
    q3 = {"architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
          "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
          "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144,
          "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
          "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
          "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None,
          "tie_word_embeddings": True, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
          "use_cache": True, "use_sliding_window": False, "vocab_size": 151936}
    # Phi-3 mini 4k instruct's published config.json: Llama's block (fused in its files), untied,
    # a window of 2047 of its 4096 positions
    phi3 = {"architectures": ["Phi3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
            "auto_map": {"AutoConfig": "configuration_phi3.Phi3Config",
                         "AutoModelForCausalLM": "modeling_phi3.Phi3ForCausalLM"},
            "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu",
            "hidden_size": 3072, "initializer_range": 0.02, "intermediate_size": 8192,
            "max_position_embeddings": 4096, "model_type": "phi3", "num_attention_heads": 32,
            "num_hidden_layers": 32, "num_key_value_heads": 32, "original_max_position_embeddings": 4096,
            "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05, "rope_scaling": None,
            "rope_theta": 10000.0, "sliding_window": 2047, "tie_word_embeddings": False,
            "torch_dtype": "bfloat16", "transformers_version": "4.40.2", "use_cache": True,
            "vocab_size": 32064}
    # Phi-3.5 mini's shape: Phi-3 mini's with LongRoPE from 4096 to 131072 positions (divisors of
    # our own here, 48 of each for heads of 96), its window (262144) longer than its positions
    phi35 = dict(phi3, max_position_embeddings=131072, sliding_window=262144,
                 rope_scaling={"type": "longrope", "short_factor": [1.0 + 0.05 * i for i in range(48)],
                               "long_factor": [1.5 + 0.25 * i for i in range(48)]})
    f32 = lambda xs: [float(np.float32(x)) for x in xs]  # as floats, which hf-config prints exactly
    for label, conf, block, want in [
            ("Phi-3.5 mini (LongRoPE)", phi35, 4096,
             {"n_layer": 32, "n_head": 32, "n_embd": 3072, "mlp_hidden": 8192, "vocab_size": 32064,
              "rope_theta": 10000, "tie_embeddings": False, "rope_original_context": 4096,
              "rope_short_factor": f32(phi35["rope_scaling"]["short_factor"]),
              "rope_long_factor": f32(phi35["rope_scaling"]["long_factor"]),
              "rope_attention_factor": float(np.float32(math.sqrt(1 + math.log(32) / math.log(4096)))),
              "hf_layout": "phi3"}),
            ("Phi-3 mini 4k", phi3, 4096, {"n_layer": 32, "n_head": 32, "n_embd": 3072,
                                           "mlp_hidden": 8192, "vocab_size": 32064, "rope_theta": 10000,
                                           "sliding_window": 2047, "tie_embeddings": False,
                                           "hf_layout": "phi3"}),
            ("Qwen2.5 0.5B", q25, 2048, {"n_layer": 24, "n_head": 14, "n_kv_head": 2, "n_embd": 896,
                                         "mlp_hidden": 4864, "qkv_bias": True}),
            ("Qwen3 1.7B", q3, 4096, {"n_layer": 28, "n_head": 16, "n_kv_head": 8, "n_embd": 2048,
                                      "mlp_hidden": 6144, "qk_norm": True}),
            # Mistral 7B v0.3's shape (Llama's block, untied, its window gone: sliding_window null)
            ("Mistral 7B", mistral, 4096, {"n_layer": 32, "n_head": 32, "n_kv_head": 8, "n_embd": 4096,
                                           "mlp_hidden": 14336, "vocab_size": 32768, "tie_embeddings": False}),
            # Mistral-Nemo 12B's: heads of 128 on a 5120-wide stream, its 2^17 tokens
            ("Mistral-Nemo 12B", dict(mistral, hidden_size=5120, num_hidden_layers=40, head_dim=128,
                                      vocab_size=131072, max_position_embeddings=1024000), 4096,
             {"n_layer": 40, "n_head": 32, "n_kv_head": 8, "n_embd": 5120, "head_dim": 128,
              "mlp_hidden": 14336, "vocab_size": 131072, "tie_embeddings": False}),
            # Mistral 7B v0.1's: attention within a sliding window of 4096 of its 32768 positions
            ("Mistral 7B v0.1", dict(mistral, sliding_window=4096, rope_theta=10000.0, vocab_size=32000),
             8192, {"n_layer": 32, "n_head": 32, "n_kv_head": 8, "n_embd": 4096, "mlp_hidden": 14336,
                    "vocab_size": 32000, "rope_theta": 10000, "sliding_window": 4096,
                    "tie_embeddings": False}),
            # Qwen2.5 0.5B with its window on from layer 0 (use_sliding_window, max_window_layers 0)
            ("Qwen2.5 0.5B windowed", dict(q25, use_sliding_window=True, sliding_window=1024,
                                           max_window_layers=0), 2048,
             {"n_layer": 24, "n_head": 14, "n_kv_head": 2, "n_embd": 896, "mlp_hidden": 4864,
              "qkv_bias": True, "sliding_window": 1024}),
            # Qwen3 0.6B: heads of 128 on a 1024-wide stream (16 of them: queries 2048 wide)
            ("Qwen3 0.6B", dict(q3, hidden_size=1024, intermediate_size=3072), 4096,
             {"n_layer": 28, "n_head": 16, "n_kv_head": 8, "n_embd": 1024, "head_dim": 128,
              "mlp_hidden": 3072, "qk_norm": True})]:
        d = os.path.join(tmp, label.replace(" ", "-"))  # the model's folder, as the Hub's
        os.makedirs(d)
        json.dump(conf, open(os.path.join(d, "config.json"), "w"))
        got = section(os.path.join(d, "config.json"), "--block-size", str(block))
        want = dict(dict(arch="llama", vocab_size=151936, block_size=block, rope_theta=1000000,
                         rms_norm_eps=1e-06, tie_embeddings=True), **want)
        if conf["model_type"] in ("mistral", "phi3"):  # RMSNorm's 1e-5, the default, is left out
            del want["rms_norm_eps"]
        for k in ("rope_short_factor", "rope_long_factor"):  # the printed digits, read as floats
            if k in got:
                got[k] = f32(got[k])
        if "rope_attention_factor" in got:
            got["rope_attention_factor"] = f32([got["rope_attention_factor"]])[0]
        check("hf-config: %s's config.json" % label, got == want, json.dumps(got))
    bad = {"mixtral": (dict(l32, model_type="mixtral"),
                       "model_type mixtral; colo reads llama's, mistral's, qwen2's, qwen3's, phi3's and gpt2's"),
           # Phi-4 mini rotates three quarters of each head; Phi-3.5 mini rescales with LongRoPE
           "partial-rotary": (dict(phi3, partial_rotary_factor=0.75),
                              "partial_rotary_factor 0.75 (Phi-4 mini's): colo rotates each head whole"),
           "longrope": (dict(phi35, rope_scaling=dict(phi35["rope_scaling"], short_factor=[1.0] * 47)),
                        "rope_scaling's short_factor has 47 values; LongRoPE wants one for each of "
                        "the 48 rotated pairs of a head of 96"),
           "no-head-width": (dict({k: v for k, v in l32.items() if k != "head_dim"}, hidden_size=2050),
                             "hidden_size 2050 is not a multiple of num_attention_heads 32, and no "
                             "head_dim says the heads' width"),
           # Qwen's window on the upper layers only: colo's is every layer's or none
           "sliding": (dict(q25, use_sliding_window=True, sliding_window=4096, max_window_layers=12),
                       "use_sliding_window from layer 12 of 24 (max_window_layers): the layers below it "
                       "attend every earlier key, the rest 4096; colo's window is every layer's"),
           "gelu": (dict(l32, hidden_act="gelu"), "hidden_act gelu; colo's llama MLP is SwiGLU (silu)"),
           "eps": (dict(l32, rms_norm_eps=0.5), "rms_norm_eps 0.5; colo's is above 0, at most 0.01"),
           "bias": (dict(l32, attention_bias=True), "biases (attention_bias or mlp_bias); colo's llama has none"),
           "linear": (dict(l32, rope_scaling={"type": "linear", "factor": 2.0}),
                      "rope_scaling of type linear; colo reads Llama 3's (llama3)"),
           "no-width": ({k: v for k, v in l32.items() if k != "hidden_size"}, "no hidden_size"),
           "gpt2-untied": ({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 2, "n_positions": 64,
                            "vocab_size": 256, "tie_word_embeddings": False},
                           "tie_word_embeddings false; colo's gpt2 head is tied")}
    for label, (c, msg) in bad.items():
        path = os.path.join(tmp, "bad-%s.json" % label)
        json.dump(c, open(path, "w"))
        r = subprocess.run([ct, "hf-config", path], capture_output=True, text=True)
        check("hf-config refuses: %s" % label, r.returncode == 1 and r.stdout == "" and
              "colo-train hf-config: %s: %s" % (path, msg) in r.stderr, r.stderr.strip())


if __name__ == "__main__":
    main()
