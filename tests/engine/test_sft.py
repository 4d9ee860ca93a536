#!/usr/bin/python3
"""`colo-train prepare --prompt-field --completion-field`: prompts and completions into shards
with a loss mask, checked token for token and bit for bit against the layout computed here.

The tokenizers are made so that the expected tokens need no BPE: every byte is its own token (id
= the byte; no merges), with the special tokens after them. Three layouts:

  - GPT-2's files (vocab.json, merges.txt) with <|endoftext|> (256) and no eos_token: the
    document token also ends each completion, so a pair is `prompt completion <|endoftext|>`,
    after one <|endoftext|> at the start of each split;
  - a tokenizer.json with <|begin_of_text|> (256) and <|end_of_text|> (257) as its
    tokenizer_config.json's bos_token and eos_token: `<|begin_of_text|> prompt completion
    <|end_of_text|>`;
  - bytes as tokens: `prompt completion`, no special token.

The mask has a bit set for each completion token and its end, none for the document token and
the prompt. Validation begins at the first line at or past the split's byte. Also: a vocabulary
past 65,536 writes 32-bit tokens with the mask; colo-train trains on each; a shard cut short and
bad input are refused, naming why, with nothing written.

usage: test_sft.py; ctest runs it with COLO_BIN and COLO_SRC set.
"""
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from byte_tokenizer import bytes_to_unicode, hf_tokenizer  # noqa: E402

COLO = os.path.join(os.environ["COLO_BIN"], "colo-train")
WORK = tempfile.mkdtemp(prefix="colo-sft-")
failures = []


def fail(msg):
    print("FAIL: " + msg)
    failures.append(msg)


def run(args, want=0):
    p = subprocess.run([COLO] + args, capture_output=True)
    if p.returncode != want:
        fail("%s exited %d, expected %d: %s" % (" ".join(args), p.returncode, want,
                                               p.stderr.decode(errors="replace")))
    return p


def read_masked(path):
    """(tokens, mask bits) of a colo shard with a loss mask"""
    b = open(path, "rb").read()
    h = struct.unpack("<256i", b[:1024])
    if h[0] != 20261125 or h[1] != 1 or h[3] not in (2, 4):
        raise AssertionError("%s: header %s" % (path, h[:4]))
    n, w = h[2], h[3]
    if len(b) != 1024 + n * w + (n + 7) // 8:
        raise AssertionError("%s: %d bytes for %d tokens of %d bytes and their mask" % (path, len(b), n, w))
    tok = list(struct.unpack("<%d%s" % (n, "H" if w == 2 else "I"), b[1024:1024 + n * w]))
    m = b[1024 + n * w:]
    return tok, [m[i >> 3] >> (i & 7) & 1 for i in range(n)]


B2U = bytes_to_unicode()
byte_vocab = {B2U[b]: b for b in range(256)}

gpt2 = os.path.join(WORK, "gpt2")
os.makedirs(gpt2)
json.dump(dict(byte_vocab, **{"<|endoftext|>": 256}), open(os.path.join(gpt2, "vocab.json"), "w"))
open(os.path.join(gpt2, "merges.txt"), "w").write("#version: 0.2\n")


llama = os.path.join(WORK, "llama")
hf_tokenizer(llama)
wide = os.path.join(WORK, "wide")
hf_tokenizer(wide, extra=65536 - 258 + 8)  # 65,544 tokens: past uint16

rng = random.Random(4)
pairs = []
for i in range(120):
    a, b = rng.randint(0, 999), rng.randint(0, 999)
    pairs.append(("Q: %d+%d=? %s\n" % (a, b, "é" * rng.randint(0, 3)), "A: %d\n" % (a + b)))
qa = os.path.join(WORK, "qa.jsonl")
lines = [json.dumps({"p": p, "c": c}, ensure_ascii=False) + "\n" for p, c in pairs]
lines.insert(7, "\n")  # a blank line is skipped
open(qa, "w", encoding="utf-8").write("".join(lines))
data = open(qa, "rb").read()

VAL = 0.2
split = len(data) - int(len(data) * VAL)
# the first line at or past the split begins validation
at, first_val = 0, None
k = 0
for ln in lines:
    if ln.strip():
        if at >= split and first_val is None:
            first_val = k
        k += 1
    at += len(ln.encode("utf-8"))


def expect(start, end, lo, hi):
    """tokens and mask of pairs [lo, hi); start: the document token, end: each completion's"""
    tok, mask = [], []
    for i in range(lo, hi):
        p, c = (x.encode("utf-8") for x in pairs[i])
        if start is not None and (i == lo or end != start):
            tok.append(start)
            mask.append(0)
        tok += list(p) + list(c)
        mask += [0] * len(p) + [1] * len(c)
        if end is not None:
            tok.append(end)
            mask.append(1)
    return tok, mask


cases = [("GPT-2's files", ["--tokenizer", gpt2], 256, 256),
         ("a tokenizer.json with bos and eos", ["--tokenizer", llama], 256, 257),
         ("bytes as tokens", [], None, None),
         ("a vocabulary past 65,536", ["--tokenizer", wide], 256, 257)]
for name, tk, start, end in cases:
    out = os.path.join(WORK, "out-" + name.split()[0].replace("'", ""))
    if name.startswith("a vocabulary"):
        out = os.path.join(WORK, "out-wide")
    p = run(["prepare", "--input", qa, "--out", out, "--prompt-field", "p", "--completion-field", "c",
             "--val-fraction", str(VAL)] + tk)
    said = p.stdout.decode()
    for part, lo, hi in (("train", 0, first_val), ("val", first_val, len(pairs))):
        want_tok, want_mask = expect(start, end, lo, hi)
        try:
            tok, mask = read_masked(os.path.join(out, part + ".bin"))
        except (AssertionError, OSError) as e:
            fail("%s: %s" % (name, e))
            continue
        if tok != want_tok:
            k = next((i for i, (x, y) in enumerate(zip(tok, want_tok)) if x != y), min(len(tok), len(want_tok)))
            fail("%s, %s: token %d is %s, expected %s (%d and %d tokens)" % (
                name, part, k, tok[k:k + 4], want_tok[k:k + 4], len(tok), len(want_tok)))
        elif mask != want_mask:
            k = next(i for i, (x, y) in enumerate(zip(mask, want_mask)) if x != y)
            fail("%s, %s: mask bit %d is %d, expected %d" % (name, part, k, mask[k], want_mask[k]))
        elif "%s.bin: %d tokens, %d of them targets of the loss" % (part, len(tok), sum(mask)) not in said:
            fail("%s: prepare did not say %d of %d %s tokens count: %s" % (name, sum(mask), len(tok), part, said))
        else:
            print("figure: %s, %s: %d pairs, %d tokens, %d of them targets, as expected"
                  % (name, part, hi - lo, len(tok), sum(mask)))
    if "%d prompts and completions" % len(pairs) not in said:
        fail("%s: prepare did not count the pairs: %s" % (name, said))

# conversations (--messages-field) in each chat template, with a tokenizer that merges: the texts
# between special tokens encoded whole (by colo-train tokenize, itself checked against the
# references in engine_bpe and engine_hf_tokenizer), the assistant's tokens that begin in its
# content counting, and llama3's contents stripped as Python's str.strip() does
U2B = {u: b for b, u in B2U.items()}
SPECIALS = ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|im_start|>", "<|im_end|>"]
chat = os.path.join(WORK, "chat")
hf_tokenizer(chat, merges=[("\u0120", "t"), ("h", "e"), ("\u0120t", "he"), ("\u010a", "\u010a"),
                           ("a", "s"), ("as", "s")], specials=SPECIALS)
cvocab = json.load(open(os.path.join(chat, "tokenizer.json")))["model"]["vocab"]
tok_bytes = {i: bytes(U2B[c] for c in t) for t, i in cvocab.items()}
sid = {t: 257 + 1 + k for k, t in enumerate(SPECIALS)}
words = ["the", "cat", "sat", "on", "mat", "assistant", "tea", "hello", "x=1", "été"]
convs = []
for i in range(40):
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": "be brief"})
    for turn in range(rng.randint(1, 3)):
        for role in ("user", "assistant"):
            text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 8)))
            pad = rng.choice(["", " ", "\n", " \t", "\u3000", "\xa0 "])
            msgs.append({"role": role, "content": pad + text + rng.choice(["", " ", "\n\n", "\u2003"])})
    convs.append({"messages": msgs, "id": i})
cj = os.path.join(WORK, "chat.jsonl")
open(cj, "w", encoding="utf-8").write("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in convs))


def segments(template, msgs):
    """[(special id) or (text, counts from byte or None)] of a conversation, after the
    document token"""
    out = []
    for m in msgs:
        learn = m["role"] == "assistant"
        if template == "llama3":
            out += [sid["<|start_header_id|>"], (m["role"], None), sid["<|end_header_id|>"],
                    ("\n\n" + m["content"].strip(), 2 if learn else None), (sid["<|eot_id|>"], learn)]
        else:
            out += [sid["<|im_start|>"], (m["role"] + "\n" + m["content"], len(m["role"].encode()) + 1 if learn else None),
                    (sid["<|im_end|>"], learn), ("\n", None)]
    return out


for template in ("llama3", "chatml"):
    segs = [segments(template, c["messages"]) for c in convs]
    texts = [x[0] for sg in segs for x in sg if isinstance(x, tuple) and isinstance(x[0], str)]
    files = []
    for k, t in enumerate(texts):
        files.append(os.path.join(WORK, "seg-%s-%d.txt" % (template, k)))
        open(files[-1], "w", encoding="utf-8").write(t)
    lines_ = run(["tokenize", "--tokenizer", chat] + files).stdout.decode().split("\n")
    enc = iter([[int(x) for x in ln.split()] for ln in lines_[:len(texts)]])
    want_tok, want_mask = [], []
    for sg in segs:
        want_tok.append(256)  # <|begin_of_text|>, the document token
        want_mask.append(0)
        for x in sg:
            if isinstance(x, int):  # a special token that never counts
                want_tok.append(x)
                want_mask.append(0)
            elif isinstance(x[0], int):  # the end of a message: counts with the assistant's
                want_tok.append(x[0])
                want_mask.append(1 if x[1] else 0)
            else:
                ids, at = next(enc), 0
                for t in ids:
                    want_tok.append(t)
                    want_mask.append(1 if x[1] is not None and at >= x[1] else 0)
                    at += len(tok_bytes[t])
    out = os.path.join(WORK, "out-chat-" + template)
    p = run(["prepare", "--input", cj, "--out", out, "--tokenizer", chat, "--messages-field", "messages",
             "--chat-template", template, "--val-fraction", "0"])
    tok, mask = read_masked(os.path.join(out, "train.bin"))
    merged = sum(1 for t in tok if t > 256 + len(SPECIALS) + 1)
    if tok != want_tok:
        k = next((i for i, (x, y) in enumerate(zip(tok, want_tok)) if x != y), min(len(tok), len(want_tok)))
        fail("chat %s: token %d is %s, expected %s (%d and %d tokens)" % (
            template, k, tok[k:k + 4], want_tok[k:k + 4], len(tok), len(want_tok)))
    elif mask != want_mask:
        k = next(i for i, (x, y) in enumerate(zip(mask, want_mask)) if x != y)
        fail("chat %s: mask bit %d is %d, expected %d" % (template, k, mask[k], want_mask[k]))
    elif "%d conversations" % len(convs) not in p.stdout.decode() or merged == 0:
        fail("chat %s: %s (%d merged tokens)" % (template, p.stdout.decode(), merged))
    else:
        print("figure: chat %s: %d conversations, %d tokens (%d of them merges), %d targets, as expected"
              % (template, len(convs), len(tok), merged, sum(mask)))

# colo-train inspect: a shard's tokens as text with what counts marked ([[ ]] off a terminal), and
# --json a token a line; both as the shard holds them
tok, mask = read_masked(os.path.join(WORK, "out-chat-chatml", "train.bin"))
p = run(["inspect", "--data", os.path.join(WORK, "out-chat-chatml", "train.bin"), "--tokenizer", chat,
         "--from", "5", "--tokens", "300", "--json"])
rows = [json.loads(x) for x in p.stdout.decode().splitlines()]
want_rows = [{"at": 5 + k, "id": t, "counts": bool(m)} for k, (t, m) in enumerate(zip(tok[5:305], mask[5:305]))]
if [{k: r[k] for k in ("at", "id", "counts")} for r in rows] != want_rows or \
        any((r["text"].encode() if "text" in r else bytes(r["bytes"])) != tok_bytes[r["id"]]
            for r in rows if r["id"] in tok_bytes):
    fail("inspect --json: %s..." % rows[:3])
p = run(["inspect", "--data", os.path.join(WORK, "out-chat-chatml", "train.bin"), "--tokenizer", chat,
         "--tokens", "400"])
want, inside = b"", 0
for t, m in zip(tok[:400], mask[:400]):
    if m != inside:
        want += b"[[" if m else b"]]"
        inside = m
    want += tok_bytes[t] if t in tok_bytes else [k for k, v in sid.items() if v == t][0].encode() if t in sid.values() else b"<|begin_of_text|>"
want += (b"]]" if inside else b"") + b"\n"
if p.stdout != want:
    fail("inspect: %r, expected %r" % (p.stdout[:200], want[:200]))
else:
    print("figure: inspect: 400 tokens of a chatml shard as text, its %d runs that count between [[ ]]; "
          "--json: 300 tokens' ids and bits as the shard holds them" % p.stdout.count(b"[["))
e = run(["inspect", "--data", os.path.join(WORK, "out-chat-chatml", "train.bin"), "--from", "99999999"], want=1).stderr.decode()
if "holds %d tokens" % len(tok) not in e:
    fail("inspect --from past the end: " + e)

# ShareGPT's form ({"from": "human" | "gpt" | "system", "value"}) of the same conversations, under
# "conversations": the same shards byte for byte
SG = {"user": "human", "assistant": "gpt", "system": "system"}
sj = os.path.join(WORK, "sharegpt.jsonl")
open(sj, "w", encoding="utf-8").write("".join(json.dumps(
    {"conversations": [{"from": SG[m["role"]], "value": m["content"]} for m in c["messages"]]},
    ensure_ascii=False) + "\n" for c in convs))
for template in ("llama3", "chatml"):
    out = os.path.join(WORK, "out-sharegpt-" + template)
    run(["prepare", "--input", sj, "--out", out, "--tokenizer", chat, "--messages-field", "conversations",
         "--chat-template", template, "--val-fraction", "0"])
    a = open(os.path.join(WORK, "out-chat-" + template, "train.bin"), "rb").read()
    b = open(os.path.join(out, "train.bin"), "rb").read()
    if a != b:
        fail("ShareGPT %s: the shard differs from the role and content form's" % template)
    else:
        print("figure: ShareGPT %s: %d conversations, the same %d bytes of shard as role and content" % (
            template, len(convs), len(b)))

# the same templates written in Jinja (Llama 3 Instruct's chat_template, ChatML's), run by colo's
# Jinja (--chat-template FILE, and --chat-template tokenizer with the template in the tokenizer's
# tokenizer_config.json): the same shards, byte for byte, as the built-in templates write; the
# assistant's tokens found by rendering the conversation up to each message, not by knowing the
# template
JINJA = {
    "llama3": "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
              "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
              "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
              "{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant"
              "<|end_header_id|>\n\n' }}{% endif %}",
    "chatml": "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
              "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
              "{% endif %}",
}
for template, src in JINJA.items():
    tf = os.path.join(WORK, template + ".jinja")
    open(tf, "w").write(src)
    own = os.path.join(WORK, "chat-own-" + template)  # the tokenizer with the template in its config
    os.makedirs(own)
    open(os.path.join(own, "tokenizer.json"), "w").write(open(os.path.join(chat, "tokenizer.json")).read())
    cfg = json.load(open(os.path.join(chat, "tokenizer_config.json")))
    cfg["chat_template"] = src
    json.dump(cfg, open(os.path.join(own, "tokenizer_config.json"), "w"))
    a = open(os.path.join(WORK, "out-chat-" + template, "train.bin"), "rb").read()
    for how, tokdir, name in (("a Jinja file", chat, tf), ("the tokenizer's own", own, "tokenizer"),
                              ("the tokenizer's own by default", own, None)):
        out = os.path.join(WORK, "out-jinja-%s-%s" % (template, name and os.path.basename(name)))
        p = run(["prepare", "--input", cj, "--out", out, "--tokenizer", tokdir, "--messages-field", "messages",
                 "--val-fraction", "0"] + (["--chat-template", name] if name else []))
        b = open(os.path.join(out, "train.bin"), "rb").read() if p.returncode == 0 else b""
        if a != b:
            fail("%s's template as %s: the shard differs from the built-in template's (%d and %d bytes)"
                 % (template, how, len(b), len(a)))
        else:
            print("figure: %s's template as %s (Jinja): %d conversations, the same %d bytes of shard as "
                  "the built-in template" % (template, how, len(convs), len(b)))

# the loop closed: a small model trained on conversations whose assistant always answers "ok
# then" answers so to `sample --chat-template` (the prompt written out as training saw it), and
# stops at the template's end of a message
okc = os.path.join(WORK, "ok.jsonl")
with open(okc, "w") as f:
    for i in range(300):
        f.write(json.dumps({"messages": [{"role": "user", "content": " ".join(rng.choice(words) for _ in range(rng.randint(1, 6)))},
                                         {"role": "assistant", "content": "ok then"}]}) + "\n")
for template in ("llama3", "chatml"):
    d = os.path.join(WORK, "ok-" + template)
    run(["prepare", "--input", okc, "--out", d, "--tokenizer", chat, "--messages-field", "messages",
         "--chat-template", template])
    run(["train", "--data-root", d, "--train-data", "train.bin", "--val-data", "val.bin", "--n-layer", "2",
         "--n-head", "2", "--n-embd", "64", "--block-size", "64", "--vocab-size", "384", "--batch-size", "8",
         "--steps", "150", "--lr", "3e-3", "--eval-interval", "0", "--threads", "2", "--quiet",
         "--ckpt-dir", os.path.join(d, "ck")])
    said = run(["sample", "--checkpoint", os.path.join(d, "ck"), "--tokenizer", chat, "--chat-template", template,
                "--prompt", "the cat sat", "--temperature", "0", "--tokens", "40"]).stdout.decode()
    if said != "ok then\n":
        fail("sample --chat-template %s after training on its conversations: %r" % (template, said))
    else:
        print("figure: sample --chat-template %s: %r, as trained" % (template, said))
    said = run(["sample", "--checkpoint", os.path.join(d, "ck"), "--tokenizer", chat, "--chat-template",
                os.path.join(WORK, template + ".jinja"), "--prompt", "the cat sat", "--temperature", "0",
                "--tokens", "40"]).stdout.decode()
    if said != "ok then\n":
        fail("sample --chat-template %s.jinja after training on its conversations: %r" % (template, said))
    else:
        print("figure: sample --chat-template %s.jinja (Jinja): %r, as trained" % (template, said))

    # a conversation (--interactive): each line the user's next message, the answers in turn, the
    # conversation so far in each prompt; the decoding cache kept across turns gives what running
    # the whole window for each token gives (--full-forward)
    for tpl in (template, os.path.join(WORK, template + ".jinja")):
        turns = "the cat sat\n\nhello on the mat\n/reset\ntea\n"
        outs = []
        for extra in ([], ["--full-forward"]):
            p = subprocess.run([COLO, "sample", "--checkpoint", os.path.join(d, "ck"), "--tokenizer", chat,
                                "--chat-template", tpl, "--interactive", "--temperature", "0", "--tokens", "40"]
                               + extra, input=turns.encode(), capture_output=True)
            outs.append(p.stdout.decode() if p.returncode == 0 else "exit %d: %s" % (p.returncode, p.stderr.decode()))
        if outs[0] != "ok then\n" * 3 or outs[1] != outs[0]:
            fail("sample --interactive --chat-template %s: %r (with --full-forward %r)" % (os.path.basename(tpl), outs[0], outs[1]))
        else:
            print("figure: sample --interactive --chat-template %s: 3 turns (one after /reset) answered %r, "
                  "the same with --full-forward" % (os.path.basename(tpl), outs[0]))
    # drawn at temperature 1.5 the answers vary, and must still be the same text both ways
    hot = []
    for extra in ([], ["--full-forward"]):
        p = subprocess.run([COLO, "sample", "--checkpoint", os.path.join(d, "ck"), "--tokenizer", chat,
                            "--chat-template", template, "--interactive", "--temperature", "1.5", "--seed", "7",
                            "--tokens", "30"] + extra,
                           input=b"the cat sat\nhello on the mat\nmore tea\nsat on\n", capture_output=True)
        hot.append(p.stdout.decode(errors="replace") if p.returncode == 0 else "exit %d: %s" % (p.returncode, p.stderr.decode(errors="replace")))
    if hot[0] != hot[1] or hot[0].count("\n") != 4 or hot[0] == "ok then\n" * 4:
        fail("sample --interactive at temperature 1.5, %s: %r, with --full-forward %r" % (template, hot[0], hot[1]))
    else:
        print("figure: sample --interactive at temperature 1.5, %s: 4 answers, %d bytes, the same text with "
              "--full-forward" % (template, len(hot[0])))
e = run(["sample", "--checkpoint", os.path.join(WORK, "ok-llama3", "ck"), "--system", "be kind"], want=2).stderr.decode()
if "--system goes with --chat-template" not in e:
    fail("--system without a template: " + e)

# refusals of conversations: a message without its content (named), a template the tokenizer has
# no tokens for, no template, bytes as tokens
badc = os.path.join(WORK, "badc.jsonl")
open(badc, "w").write('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant"}]}\n')
e = run(["prepare", "--input", badc, "--out", os.path.join(WORK, "c1"), "--tokenizer", chat,
         "--messages-field", "messages", "--chat-template", "llama3"], want=1).stderr.decode()
if '%s:1: message 2 is not an object with strings "role" and "content" (or ShareGPT\'s "from" and "value")' % badc not in e:
    fail("a message without its content: " + e)
open(badc, "w").write('{"c": [{"from": "human", "value": "hi"}, {"from": "observation", "value": "x"}]}\n')
e = run(["prepare", "--input", badc, "--out", os.path.join(WORK, "c1"), "--tokenizer", chat,
         "--messages-field", "c", "--chat-template", "chatml"], want=1).stderr.decode()
if '%s:1: message 2 is from "observation": ShareGPT\'s "human", "gpt" and "system" are known' % badc not in e:
    fail("a ShareGPT message from an unknown speaker: " + e)
e = run(["prepare", "--input", cj, "--out", os.path.join(WORK, "c2"), "--tokenizer", llama,
         "--messages-field", "messages", "--chat-template", "chatml"], want=1).stderr.decode()
if "chat template chatml: the tokenizer has no <|im_start|> token" not in e:
    fail("a template the tokenizer has no tokens for: " + e)
e = run(["prepare", "--input", cj, "--out", os.path.join(WORK, "c3"), "--messages-field", "messages"],
        want=2).stderr.decode()
if "--messages-field needs a --tokenizer and a chat template (its own, or --chat-template)" not in e:
    fail("--messages-field without a tokenizer: " + e)
e = run(["prepare", "--input", cj, "--out", os.path.join(WORK, "c3"), "--messages-field", "messages",
         "--tokenizer", chat], want=2).stderr.decode()
if "--messages-field: the tokenizer has no chat template of its own" not in e:
    fail("--messages-field with a tokenizer of no template: " + e)
e = run(["prepare", "--input", cj, "--out", os.path.join(WORK, "c3"), "--chat-template", "chatml",
         "--tokenizer", chat], want=2).stderr.decode()
if "--chat-template goes with --messages-field" not in e:
    fail("--chat-template alone: " + e)
e = run(["prepare", "--input", cj, "--out", os.path.join(WORK, "c4"), "--messages-field", "messages",
         "--chat-template", "llama3"], want=1).stderr.decode()
if "a chat template needs a --tokenizer with its special tokens" not in e:
    fail("a chat template without a tokenizer: " + e)
for d in ("c1", "c2", "c3", "c4"):
    if os.path.exists(os.path.join(WORK, d, "train.bin")):
        fail("a refused prepare left a shard in " + d)

# colo-train trains on each kind of masked shard (16- and 32-bit tokens)
for out, vocab in ((os.path.join(WORK, "out-GPT-2s"), 384), (os.path.join(WORK, "out-wide"), 65600)):
    p = run(["train", "--data-root", out, "--train-data", "train.bin", "--val-data", "val.bin", "--n-layer", "1", "--n-head", "2", "--n-embd", "16",
             "--block-size", "32", "--batch-size", "4", "--steps", "3", "--eval-interval", "3",
             "--vocab-size", str(vocab), "--threads", "2", "--progress", os.path.join(out, "p.jsonl")])
    ev = [json.loads(x) for x in open(os.path.join(out, "p.jsonl")) if '"eval"' in x]
    if not ev or not all(e["val_loss"] > 0 for e in ev):
        fail("training on %s: no evaluation with a loss" % out)
    else:
        print("figure: trained on %s (vocab %d): val loss %.4f at step 3" % (os.path.basename(out), vocab, ev[-1]["val_loss"]))

# a masked shard cut short is refused at the start, naming the file
cut = os.path.join(WORK, "cut")
os.makedirs(cut)
b = open(os.path.join(WORK, "out-GPT-2s", "train.bin"), "rb").read()
open(os.path.join(cut, "train.bin"), "wb").write(b[:-3])
open(os.path.join(cut, "val.bin"), "wb").write(open(os.path.join(WORK, "out-GPT-2s", "val.bin"), "rb").read())
e = run(["train", "--data-root", cut, "--train-data", "train.bin", "--val-data", "val.bin", "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "32",
         "--vocab-size", "384", "--steps", "1"], want=78).stderr.decode()
if "train.bin: truncated: the header says %d tokens and their loss mask" % struct.unpack("<i", b[8:12])[0] not in e:
    fail("a masked shard cut short: " + e)

# refusals: a line without both fields (named), the flags alone or with --text-field, and input
# that is not JSON lines; nothing written
bad = os.path.join(WORK, "bad.jsonl")
open(bad, "w").write('{"p": "x", "c": "y"}\n{"p": "only a prompt"}\n')
e = run(["prepare", "--input", bad, "--out", os.path.join(WORK, "b1"), "--prompt-field", "p",
         "--completion-field", "c"], want=1).stderr.decode()
if '%s:2: not a JSON object with strings "p" and "c"' % bad not in e:
    fail("a line without its completion: " + e)
if os.path.exists(os.path.join(WORK, "b1", "train.bin")):
    fail("a refused prepare left a shard")
e = run(["prepare", "--input", qa, "--out", os.path.join(WORK, "b2"), "--prompt-field", "p"], want=2).stderr.decode()
if "--prompt-field and --completion-field go together" not in e:
    fail("--prompt-field alone: " + e)
e = run(["prepare", "--input", qa, "--out", os.path.join(WORK, "b2"), "--prompt-field", "p",
         "--completion-field", "c", "--text-field", "t"], want=2).stderr.decode()
if "--text-field is for documents of text, not with --prompt-field" not in e:
    fail("--text-field with --prompt-field: " + e)
txt = os.path.join(WORK, "plain.txt")
open(txt, "w").write("some text\n")
e = run(["prepare", "--input", txt, "--out", os.path.join(WORK, "b3"), "--prompt-field", "p",
         "--completion-field", "c"], want=1).stderr.decode()
if "%s: prompts and completions come in JSON lines (*.jsonl, *.ndjson)" % txt not in e:
    fail("prompts and completions from a text file: " + e)
if os.path.exists(os.path.join(WORK, "b3", "train.bin")):
    fail("a refused prepare left a shard")

print("engine_sft: %d failed" % len(failures))
if not failures:
    subprocess.run(["rm", "-rf", WORK])
sys.exit(1 if failures else 0)
