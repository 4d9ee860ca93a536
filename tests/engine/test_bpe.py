#!/usr/bin/python3
"""colo-train's GPT-2 BPE tokenizer against an independent reference.

No GPT-2 vocabulary can be fetched here, so the test learns one: 400 merges on the start of
tinyshakespeare, in GPT-2's file formats (vocab.json and merges.txt as HuggingFace ships them;
encoder.json and vocab.bpe as OpenAI did), with the 256 byte tokens at shuffled ids so that
nothing may take a byte for its id. The reference encoder is GPT-2's published algorithm in
Python (pre-tokenized by GPT-2's pattern with the `regex` module's Unicode classes); colo's is
C with PCRE2. They must give the same ids, token for token, on all of tinyshakespeare and on a
text of accents, CJK, emoji, digits of other scripts, contractions, and runs of Unicode
whitespace; decoding must give the bytes back exactly. Then: `prepare --tokenizer` writes the
same tokens into llm.c shards, a model trains on them and samples through the tokenizer, and
bad input is refused with a reason.

usage: test_bpe.py [COLO_TRAIN TEXT WORKDIR]; ctest runs it with none (COLO_BIN, COLO_SRC set):
the text is ../shared/data/tinyshakespeare.txt, else the quick start's copy, else a generated one.
"""
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

import numpy
import regex

if len(sys.argv) == 4:
    COLO, TEXT, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
else:
    COLO = os.path.join(os.environ["COLO_BIN"], "colo-train")
    WORK = tempfile.mkdtemp(prefix="colo-bpe-")
    src = os.environ["COLO_SRC"]
    TEXT = next((p for p in (os.path.join(src, "..", "shared", "data", "tinyshakespeare.txt"),
                             os.path.join(src, ".colo-quickstart", "data", "tinyshakespeare.txt"))
                 if os.path.exists(p)), None)
    if TEXT is None:
        TEXT = os.path.join(WORK, "text.txt")
        r = random.Random(3)
        w = ["the", "king", "and", "queen's", "of", "night", "shall", "speak", "to", "my", "lord",
             "good", "café", "naïve", "1599,", "ROMEO:"]
        with open(TEXT, "w", encoding="utf-8") as f:
            f.write("\n".join(" ".join(r.choice(w) for _ in range(12)) for _ in range(20000)))
PAT = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = bytes_to_unicode()


def learn(text, n_merges):
    """Most frequent adjacent pair first, over the pre-tokenized words (ties: the smaller pair)."""
    words = {}
    for w in PAT.findall(text):
        key = tuple(B2U[b] for b in w.encode("utf-8"))
        words[key] = words.get(key, 0) + 1
    merges = []
    for _ in range(n_merges):
        pairs = {}
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + c
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        new = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new[tuple(out)] = new.get(tuple(out), 0) + c
        words = new
    return merges


class Reference:
    """GPT-2's encoder.py algorithm."""

    def __init__(self, vocab, merges):
        self.enc = vocab
        self.dec = {v: k for k, v in vocab.items()}
        self.ranks = {m: i for i, m in enumerate(merges)}
        self.u2b = {u: b for b, u in B2U.items()}
        self.cache = {}  # as encoder.py's: a piece's merges do not depend on its neighbours

    def bpe(self, token):
        if token in self.cache:
            return self.cache[token]
        word = tuple(token)
        while len(word) > 1:
            pairs = set(zip(word, word[1:]))
            bigram = min(pairs, key=lambda p: self.ranks.get(p, float("inf")))
            if bigram not in self.ranks:
                break
            first, second = bigram
            new, i = [], 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                except ValueError:
                    new.extend(word[i:])
                    break
                new.extend(word[i:j])
                i = j
                if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                    new.append(first + second)
                    i += 2
                else:
                    new.append(word[i])
                    i += 1
            word = tuple(new)
        self.cache[token] = word
        return word

    def encode(self, text):
        ids = []
        for piece in PAT.findall(text):
            token = "".join(B2U[b] for b in piece.encode("utf-8"))
            ids.extend(self.enc[t] for t in self.bpe(token))
        return ids

    def decode(self, ids):
        return bytes(self.u2b[c] for i in ids for c in self.dec[i])


def run(args, stdin=b"", want=0):
    p = subprocess.run([COLO] + args, input=stdin, capture_output=True)
    if p.returncode != want:
        fail("%s exited %d, expected %d: %s" % (" ".join(args), p.returncode, want,
                                               p.stderr.decode(errors="replace")))
    return p


text = open(TEXT, encoding="utf-8").read()
merges = learn(text[:120000], 400)
rng = random.Random(7)
ids = list(range(256))
rng.shuffle(ids)
vocab = {B2U[b]: ids[b] for b in range(256)}
for a, b in merges:
    vocab.setdefault(a + b, len(vocab))
vocab["<|endoftext|>"] = len(vocab)
ref = Reference(vocab, merges)

hf, oa = os.path.join(WORK, "hf"), os.path.join(WORK, "openai")
for d in (hf, oa):
    os.makedirs(d, exist_ok=True)
with open(os.path.join(hf, "vocab.json"), "w", encoding="utf-8") as f:
    json.dump(vocab, f, ensure_ascii=False)  # HuggingFace's: the characters themselves
with open(os.path.join(hf, "merges.txt"), "w", encoding="utf-8") as f:
    f.write("#version: 0.2\n" + "".join("%s %s\n" % m for m in merges))
with open(os.path.join(oa, "encoder.json"), "w") as f:
    json.dump(vocab, f)  # OpenAI's: \u escapes
with open(os.path.join(oa, "vocab.bpe"), "w", encoding="utf-8") as f:
    f.write("#version: 0.2\n" + "\n".join("%s %s" % m for m in merges) + "\n")

odd = ("Hello, wörld! It's 2026 — naïve café, 東京タワー, Ελληνικά, русский, עברית; 🎉👍🏽\n\n"
       "   three spaces\ttab\r\nCRLF and 's 't 're 've 'm 'll 'd DON'T y'all\n"
       "digits ١٢٣ ४५६ ①② x² ½ 3.14159 1,000,000\u00a0nbsp\u2003em\u3000ideographic\u2028line\n"
       "symbols: <|endoftext|> @#$%^&*()_+-=[]{}|;:,.<>/?`~ \"quotes\" \x0b\x0c\x00\x7f end  \n\n\n")
# long pieces, where the merge order matters most: a word of 3,000 letters, runs of one letter
# and of one pair, and a long run of spaces
letters = "".join(c for c in text[:20000] if c.isalpha())[:3000]
long_pieces = letters + " " + "e" * 1001 + " " + "th" * 700 + " " * 700 + "end\n"
for name, sample in (("tinyshakespeare", text), ("unicode", odd), ("long pieces", long_pieces)):
    data = sample.encode("utf-8")
    want = ref.encode(sample)
    for d in (hf, oa):
        got = [int(x) for x in run(["tokenize", "--tokenizer", d], data).stdout.split()]
        if got != want:
            k = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want)))
            fail("%s via %s: token %d is %s, the reference's %s (%d and %d tokens)" % (
                name, os.path.basename(d), k, got[k:k + 5], want[k:k + 5], len(got), len(want)))
    back = run(["tokenize", "--tokenizer", hf, "--decode"], "\n".join(map(str, want)).encode()).stdout
    if back != data or ref.decode(want) != data:
        fail("%s: decoding does not give the text back" % name)
    print("figure: %s: %d bytes -> %d tokens, the same ids as the reference; decoded back exactly"
          % (name, len(data), len(want)))

# prepare: the same tokens in llm.c's shards, the last tenth for validation
out = os.path.join(WORK, "shards")
p = run(["prepare", "--input", TEXT, "--out", out, "--tokenizer", hf])
want = ref.encode(text)


def shard(path):
    b = open(path, "rb").read()
    head = struct.unpack("<256i", b[:1024])
    assert head[0] == 20240520 and head[1] == 1 and head[2] * 2 == len(b) - 1024, head[:3]
    return list(struct.unpack("<%dH" % head[2], b[1024:]))


def shard_np(path):
    b = open(path, "rb").read()
    head = numpy.frombuffer(b[:1024], dtype="<i4")
    assert head[0] == 20240520 and head[1] == 1 and head[2] * 2 == len(b) - 1024, head[:3]
    return numpy.frombuffer(b[1024:], dtype="<u2")


def first_piece(data, p):
    """where the first piece of GPT-2's pre-tokenizer at or after byte p begins"""
    at = 0
    for w in PAT.findall(data.decode("utf-8")):
        if at >= p:
            return at
        at += len(w.encode("utf-8"))
    return at


def cut(data, frac):
    """where prepare splits: the first piece at or after the byte"""
    return first_piece(data, len(data) - int(len(data) * frac))


tr, va = shard(out + "/train.bin"), shard(out + "/val.bin")
data = text.encode("utf-8")
p_cut = cut(data, 0.1)
if tr + va != want or tr != ref.encode(data[:p_cut].decode()):
    fail("prepare --tokenizer: the shards hold other tokens than the reference's")
if "the model's vocab_size must be at least %d" % len(vocab) not in p.stdout.decode():
    fail("prepare did not say the vocabulary's size: " + p.stdout.decode())
print("figure: prepare --tokenizer: train %d + val %d tokens (split at byte %d of %d), the "
      "reference's" % (len(tr), len(va), p_cut, len(data)))
# --json: the same figures for a script
j = json.loads(run(["prepare", "--input", TEXT, "--out", out + "-json", "--tokenizer", hf,
                    "--json"]).stdout)
got = (j["train"]["tokens"], j["val"]["tokens"], j["train"]["path"], j["vocab_size"], j["bytes"],
       j["uint32"], j["masked"], j["train"]["targets"])
if got != (len(tr), len(va), out + "-json/train.bin", len(vocab), len(data), False, False, len(tr)):
    fail("prepare --json: %s" % j)

# documents: every file a pattern matches, in name order, each after <|endoftext|>; the split
# falls inside the third, where a piece begins
docs = os.path.join(WORK, "docs")
os.makedirs(docs, exist_ok=True)
parts = [data[:300000], odd.encode("utf-8"), data[300000:600000]]
for i, d in enumerate(parts):
    open(os.path.join(docs, "doc%d.txt" % i), "wb").write(d)
p = run(["prepare", "--input", os.path.join(docs, "*.txt"), "--out", os.path.join(WORK, "docshards"),
         "--tokenizer", hf])
eot = vocab["<|endoftext|>"]
N = sum(map(len, parts))
at = first_piece(parts[2], N - int(N * 0.1) - len(parts[0]) - len(parts[1]))
want_tr = [eot] + ref.encode(parts[0].decode()) + [eot] + ref.encode(parts[1].decode()) + [eot] + \
    ref.encode(parts[2][:at].decode())
want_va = ref.encode(parts[2][at:].decode())
got_tr, got_va = shard(WORK + "/docshards/train.bin"), shard(WORK + "/docshards/val.bin")
if got_tr != want_tr or got_va != want_va:
    fail("prepare of three documents: not <|endoftext|> + each document's tokens, split at byte %d "
         "of the third" % at)
if "3 documents of %d bytes, each after the <|endoftext|> token" % N not in p.stdout.decode():
    fail("prepare of documents did not say so: " + p.stdout.decode())
run(["prepare", "--input", os.path.join(docs, "*.txt"), "--out", os.path.join(WORK, "docbytes")])
gb = shard(WORK + "/docbytes/train.bin") + shard(WORK + "/docbytes/val.bin")
if bytes(gb) != b"".join(parts) or len(shard(WORK + "/docbytes/val.bin")) != int(N * 0.1):
    fail("prepare of three documents as bytes: not their bytes, split at the byte")
print("figure: prepare of 3 documents (%d bytes): <|endoftext|> before each, train %d + val %d "
      "tokens, the reference's" % (N, len(got_tr), len(got_va)))

# streamed: a text larger than prepare's 16 MiB buffer (the text REPS times, just over 20 MiB:
# its tokens REPS times, as it ends a line and begins with a letter), split over shards of
# 1,000,000 tokens; then fewer, larger shards in the same place, whose run removes the earlier
# run's extra files. No more copies than that: under the sanitizers each of the five prepares of
# the whole takes seconds (tinyshakespeare: 19 copies).
REPS = (20 << 20) // len(data) + 1
if data.endswith(b"\n") and 0x20 < data[0] < 0x7f:
    big = os.path.join(WORK, "big.txt")
    with open(big, "wb") as f:
        for _ in range(REPS):
            f.write(data)
    bo = os.path.join(WORK, "bigshards")
    run(["prepare", "--input", big, "--out", bo, "--tokenizer", hf, "--shard-tokens", "1000000",
         "--val-fraction", "0.1"])
    files = {k: sorted(x for x in os.listdir(bo) if x.startswith(k + "_")) for k in ("train", "val")}
    got = {k: [shard_np(os.path.join(bo, x)) for x in files[k]] for k in files}
    for k in got:
        sizes = [len(x) for x in got[k]]
        if any(n != 1000000 for n in sizes[:-1]) or not 0 < sizes[-1] <= 1000000:
            fail("prepare --shard-tokens: %s shards of %s tokens" % (k, sizes))
    whole = numpy.concatenate(got["train"] + got["val"])
    if not numpy.array_equal(whole, numpy.tile(numpy.array(want, dtype="<u2"), REPS)):
        fail("prepare of a %dx text through the buffer: not the text's tokens %d times" % (REPS, REPS))
    bc = cut(data * REPS, 0.1)
    ntr = sum(len(x) for x in got["train"])
    if ntr != len(want) * (bc // len(data)) + len(ref.encode(data[:bc % len(data)].decode())):
        fail("prepare of a %dx text: the split is not at byte %d" % (REPS, bc))
    # one encoding thread gives the same files as the machine's many
    run(["prepare", "--input", big, "--out", bo + "-1", "--tokenizer", hf, "--shard-tokens",
         "1000000", "--val-fraction", "0.1", "--threads", "1"])
    for k in files:
        for x in files[k]:
            if open(os.path.join(bo, x), "rb").read() != open(os.path.join(bo + "-1", x), "rb").read():
                fail("prepare --threads 1: %s differs from the default threads' file" % x)
    # bytes as tokens through the same buffer: the bytes themselves, split at the exact byte
    run(["prepare", "--input", big, "--out", bo + "-bytes", "--shard-tokens", "10000000"])
    tb = [shard_np(os.path.join(bo + "-bytes", x)) for x in sorted(os.listdir(bo + "-bytes"))
          if x.startswith("train_")]
    vb = [shard_np(os.path.join(bo + "-bytes", x)) for x in sorted(os.listdir(bo + "-bytes"))
          if x.startswith("val_")]
    nb = len(data) * REPS
    allb = numpy.concatenate(tb + vb)
    if not numpy.array_equal(allb, numpy.frombuffer(data * REPS, dtype="u1")) or \
            sum(map(len, vb)) != int(nb * 0.1):
        fail("prepare of a %dx text as bytes: not its bytes, or not split at the byte" % REPS)
    run(["prepare", "--input", big, "--out", bo, "--tokenizer", hf, "--shard-tokens", "5000000",
         "--val-fraction", "0.1"])
    left = sorted(x for x in os.listdir(bo) if x.startswith("train_"))
    if len(left) != (ntr + 4999999) // 5000000:
        fail("a second prepare left the first one's extra shards: %s" % left)
    # a byte that is not UTF-8 past the first buffer: named at its place in the whole text
    with open(big, "ab") as f:
        f.write(b"\xff\n")
    e = run(["prepare", "--input", big, "--out", bo + "-bad", "--tokenizer", hf], want=1).stderr.decode()
    if "%s: the text is not UTF-8 at byte %d" % (big, nb) not in e:
        fail("invalid UTF-8 after %d MB: " % (nb >> 20) + e)
    if os.path.exists(bo + "-bad") and os.listdir(bo + "-bad"):
        fail("a refused prepare left files: %s" % os.listdir(bo + "-bad"))
    print("figure: prepare streamed %d bytes into %d + %d shards of 1,000,000 tokens: the text's "
          "tokens %d times, split at byte %d" % (len(data) * REPS, len(files["train"]),
                                                 len(files["val"]), REPS, bc))

# a model trains on them and samples through the tokenizer
ck = os.path.join(WORK, "ckpt")
V = (len(vocab) + 127) // 128 * 128
run(["train", "--data-root", out, "--train-data", "train.bin", "--val-data", "val.bin",
     "--n-layer", "1", "--n-head", "2", "--n-embd", "32", "--block-size", "32", "--vocab-size", str(V),
     "--batch-size", "4", "--steps", "20", "--eval-interval", "0", "--ckpt-dir", ck, "--quiet"])
s = run(["sample", "--checkpoint", ck + "/step_00000020", "--tokenizer", hf, "--prompt", "ROMEO:",
         "--tokens", "30", "--temperature", "0"]).stdout
if not s.startswith(b"ROMEO:") or len(s) <= len("ROMEO:\n"):
    fail("sample --tokenizer: %r" % s)
print("figure: sample --tokenizer after 20 steps: %r" % s.decode("utf-8", "replace")[:60])
# a model that learned "ROMEO:" then <|endoftext|> stops there: the sample is the prompt alone
eo = os.path.join(WORK, "eot")
os.makedirs(eo, exist_ok=True)
seq = (ref.encode("ROMEO:") + [vocab["<|endoftext|>"]]) * 600
with open(os.path.join(eo, "train.bin"), "wb") as f:
    f.write(struct.pack("<3i", 20240520, 1, len(seq)) + b"\0" * 1012 +
            struct.pack("<%dH" % len(seq), *seq))
run(["train", "--data-root", eo, "--train-data", "train.bin", "--n-layer", "1", "--n-head", "2",
     "--n-embd", "32", "--block-size", "32", "--vocab-size", str(V), "--batch-size", "4",
     "--steps", "30", "--warmup", "1", "--lr", "1e-2", "--eval-interval", "0", "--ckpt-dir", eo + "/ck",
     "--quiet"])
s = run(["sample", "--checkpoint", eo + "/ck/step_00000030", "--tokenizer", hf, "--prompt", "ROMEO:",
         "--tokens", "20", "--temperature", "0"]).stdout
if s != b"ROMEO:\n":
    fail("sample should stop at <|endoftext|>: %r" % s)
small = os.path.join(WORK, "small")
run(["train", "--data-root", out, "--train-data", "train.bin", "--val-data", "val.bin",
     "--n-layer", "1", "--n-head", "2", "--n-embd", "32", "--block-size", "32", "--vocab-size", "256",
     "--batch-size", "4", "--steps", "1", "--eval-interval", "0", "--ckpt-dir", small, "--quiet"],
    want=78)  # tokens past the model's vocabulary: the job cannot run as written
run(["prepare", "--input", TEXT, "--out", os.path.join(WORK, "bytes")])
run(["train", "--data-root", os.path.join(WORK, "bytes"), "--train-data", "train.bin",
     "--val-data", "val.bin", "--n-layer", "1", "--n-head", "2", "--n-embd", "32", "--block-size",
     "32", "--vocab-size", "256", "--batch-size", "4", "--steps", "1", "--eval-interval", "0",
     "--ckpt-dir", small, "--quiet"])
e = run(["sample", "--checkpoint", small + "/step_00000001", "--tokenizer", hf], want=1).stderr.decode()
if "the tokenizer's %d tokens do not fit this model's vocabulary of 256" % len(vocab) not in e:
    fail("sample with a tokenizer larger than the model: " + e)

# the text zstd'd (*.zst), in two frames as `cat a.zst b.zst` makes: the same shards as the
# plain text's (the split counted in bytes of text); a zstd file cut short, and one that is not
# zstd's, are refused before anything is written
zd = os.path.join(WORK, "zst")
os.makedirs(zd, exist_ok=True)
half = len(data) // 2
for i, part in enumerate((data[:half], data[half:])):
    open(os.path.join(zd, "%d.txt" % i), "wb").write(part)
    subprocess.run(["zstd", "-q", "-f", os.path.join(zd, "%d.txt" % i)], check=True)
zst = os.path.join(zd, "text.txt.zst")
open(zst, "wb").write(b"".join(open(os.path.join(zd, "%d.txt.zst" % i), "rb").read() for i in (0, 1)))
run(["prepare", "--input", zst, "--out", os.path.join(zd, "out"), "--tokenizer", hf])
for k in ("train.bin", "val.bin"):
    if open(os.path.join(out, k), "rb").read() != open(os.path.join(zd, "out", k), "rb").read():
        fail("prepare of the text zstd'd in two frames: %s differs from the plain text's" % k)
whole = open(zst, "rb").read()
open(zst, "wb").write(whole[:len(whole) * 3 // 4])
e = run(["prepare", "--input", zst, "--out", os.path.join(zd, "cut")], want=1).stderr.decode()
if "%s: the zstd stream is cut short" % zst not in e or os.path.exists(os.path.join(zd, "cut")):
    fail("a zstd file cut short: " + e)
open(zst, "wb").write(b"plain text in a .zst")
e = run(["prepare", "--input", zst, "--out", os.path.join(zd, "bad")], want=1).stderr.decode()
if "%s: zstd: Unknown frame descriptor" % zst not in e:
    fail("a .zst that is not zstd's: " + e)
print("figure: prepare of the text zstd'd in two frames (%d bytes): the plain text's shards"
      % len(whole))

# refusals, each with its reason
bad = os.path.join(WORK, "bad.txt")
open(bad, "wb").write("good text, then ".encode() + b"\xff\xfe" + b" bad")
e = run(["prepare", "--input", bad, "--out", os.path.join(WORK, "b"), "--tokenizer", hf], want=1).stderr.decode()
if "%s: the text is not UTF-8 at byte 16" % bad not in e:
    fail("invalid UTF-8: " + e)
if os.path.exists(os.path.join(WORK, "b", "train.bin")):
    fail("a refused prepare left a shard behind")
e = run(["tokenize", "--tokenizer", WORK], want=1).stderr.decode()
if "has no tokenizer.json (HuggingFace's), vocab.json and merges.txt" not in e:
    fail("no tokenizer files: " + e)
broken = os.path.join(WORK, "broken")
os.makedirs(broken, exist_ok=True)
with open(os.path.join(broken, "vocab.json"), "w", encoding="utf-8") as f:
    json.dump(vocab, f, ensure_ascii=False)
with open(os.path.join(broken, "merges.txt"), "w", encoding="utf-8") as f:
    f.write("#version: 0.2\n%s %s\nzq xj\n" % merges[0])
e = run(["tokenize", "--tokenizer", broken], b"x", want=1).stderr.decode()
if "merges.txt:3: \"zq xj\": a part or the merged token is not in the vocabulary" not in e:
    fail("a merge outside the vocabulary: " + e)
e = run(["tokenize", "--tokenizer", hf, "--decode"], b"5 99999", want=1).stderr.decode()
if "99999 is not a token of this vocabulary" not in e:
    fail("decoding an unknown id: " + e)
print("engine_bpe: %d merges learned; ids equal to the reference on %d texts; refusals named" %
      (len(merges), 3))
if len(sys.argv) != 4:
    subprocess.run(["rm", "-rf", WORK])
