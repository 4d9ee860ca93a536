#!/usr/bin/python3
"""Multiple-choice evaluation (HellaSwag's, as llm.c and lm-evaluation-harness score it) against
PyTorch (Debian's python3-torch).

Questions are made from tinyshakespeare's lines (../shared/data; a fixed text without it): the
context a line's first words, the right ending the rest of that line, the wrong ones the ends of
other lines, some of them with characters past ASCII, one context longer than the block. Then:

  - `colo-train prepare --endings-field` writes choices.bin; read back with numpy (header,
    tokens, loss mask, the sequence table, the questions, the endings' characters), each
    sequence is the context's bytes then " " + the ending's, the ending's alone counting, each
    question's number of endings and label as the line's (an integer, a string, a letter), each
    ending's length in characters (code points, not bytes);
  - a small GPT-2 trained here on the text, its checkpoint exported to HuggingFace's layout and
    loaded into an independent PyTorch GPT-2 (tests/engine/torch_gpt2.py): `eval --choices
    --samples` gives each ending's log-probability within 1e-4 (relative) of PyTorch's
    log_softmax summed over the ending's tokens, on lm-evaluation-harness's window (the last
    block + 1 tokens of a longer sequence), its counted tokens PyTorch's, and acc, acc_norm
    (per character) and acc_token (per token) those of PyTorch's log-probabilities (questions
    whose two best are within 1e-3 of each other left out of the picks' comparison, counted);
    eval --limit 10 gives the first 10 questions' samples and scores, and a run with
    --choice-questions 10 the scores eval --limit 10 gives its checkpoint;
    eval reads the model as a HuggingFace directory too (export --config: config.json and
    model.safetensors), giving the checkpoint's samples to the digit; on the (emulated) GPU,
    each log-probability the CPU's within 1e-5;
  - a run with --choice-set reports at each evaluation the scores `eval --choices` gives its
    checkpoint at that step, and so does it on 2 data-parallel ranks, under ZeRO-3, on tp=2
    with and without sequence parallelism, and on 2 pipeline stages of 2 micro-batches (each
    layout's progress record against one process's; batches narrower than the block but under
    sequence parallelism);
  - other sets' shapes: PIQA's (--endings-field sol1,sol2), ARC's (--context-template,
    --endings-field choices.text, --label-names-field choices.label), each sequence read back;
  - refusals, each with its message and no file left: a line without endings, with one ending,
    not an object, without a context, with a label out of range or not among the names, an
    empty ending, a template's field not there; --context-field with --context-template; a choice shard as training or validation data;
    eval --choices on a shard of text; --samples without --choices; a choice set without
    evaluations; --choice-questions without a set; --limit without --choices; a bad name.
Exit 0 when all pass.
"""
import json
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
from test_torch_reference import read_safetensors  # noqa: E402
from torch_gpt2 import GPT2  # noqa: E402

BIN = os.environ["COLO_BIN"]
COLO = os.path.join(BIN, "colo-train")
SRC = os.environ.get("COLO_SRC", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TEXT = os.path.join(SRC, "..", "shared", "data", "tinyshakespeare.txt")
L, NH, C, T, V = 2, 2, 48, 96, 256
B = 8
torch.set_num_threads(1)

passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print("ok   " + name)
    else:
        failed += 1
        print("FAIL " + name + ("  " + detail if detail else ""))


def run(args, ok=True):
    r = subprocess.run([COLO] + args, capture_output=True, text=True)
    if ok and r.returncode != 0:
        print(r.stdout + r.stderr)
        raise SystemExit("colo-train %s failed" % args[0])
    return r


def corpus():
    if os.path.exists(TEXT):
        return open(TEXT, encoding="utf-8").read()
    words = ("the king is dead long live the queen where art thou romeo o fortune thou fool "
             "what light through yonder window breaks").split()
    rnd = random.Random(5)
    return "\n".join(" ".join(rnd.choice(words) for _ in range(rnd.randint(5, 11)))
                     for _ in range(4000)) + "\n"


def make_questions(text, n):
    rnd = random.Random(11)
    lines = [l for l in text.split("\n") if len(l.split()) >= 6]
    qs = []
    for i in range(n):
        w = rnd.choice(lines).split()
        cut = rnd.randint(2, len(w) - 3)
        K = 2 + i % 3  # 2, 3 or 4 endings
        wrong = [" ".join(rnd.choice(lines).split()[-3:]) for _ in range(K - 1)]
        if i % 7 == 3:
            wrong[0] = wrong[0] + " café naïve"  # characters past ASCII: 2 bytes each
        ends = wrong[:]
        label = rnd.randrange(K)
        ends.insert(label, " ".join(w[cut:]))
        ctx = " ".join(w[:cut])
        if i == 5:  # longer than the block: the window keeps the sequence's last T + 1 tokens
            ctx = " ".join(rnd.choice(lines) for _ in range(4))
        lab = [label, str(label), "ABCD"[label]][i % 3]
        qs.append({"ctx": ctx, "endings": ends, "label": lab, "right": label})
    return qs


def read_choices(path):
    raw = open(path, "rb").read()
    hdr = struct.unpack("<256i", raw[:1024])
    n, width, S, Q = hdr[2], hdr[3], hdr[4], hdr[5]
    tok = np.frombuffer(raw, dtype=np.uint16 if width == 2 else np.uint32, count=n, offset=1024)
    at = 1024 + n * width
    bits = np.unpackbits(np.frombuffer(raw, dtype=np.uint8, count=(n + 7) // 8, offset=at),
                         bitorder="little")[:n]
    at = (at + (n + 7) // 8 + 7) // 8 * 8
    seq = np.frombuffer(raw, dtype=np.uint64, count=S, offset=at)
    at += 8 * S
    quest = np.frombuffer(raw, dtype=np.uint32, count=2 * Q, offset=at).reshape(Q, 2)
    at += 8 * Q
    chars = np.frombuffer(raw, dtype=np.uint32, count=S, offset=at)
    check("choices.bin: its size is what the header says", at + 4 * S == len(raw),
          "%d != %d" % (at + 4 * S, len(raw)))
    return hdr, tok, bits, seq, quest, chars


def window(seq):
    """lm-evaluation-harness's: a sequence over T + 1 tokens keeps its last T + 1"""
    return seq[-(T + 1):] if len(seq) > T + 1 else seq


def torch_logprobs(model, seqs):
    """each (tokens, counts) sequence's log-probability of its counted tokens, and their number"""
    out = []
    with torch.no_grad():
        for toks, cnt in seqs:
            toks, cnt = window(toks), window(cnt)
            n = len(toks) - 1
            idx = torch.zeros(1, T, dtype=torch.long)
            tg = torch.full((1, T), -1, dtype=torch.long)
            idx[0, :n] = torch.tensor(toks[:-1])
            for t in range(n):
                if cnt[t + 1]:
                    tg[0, t] = toks[t + 1]
            model.reduction = "none"
            nll = model(idx, tg)
            out.append((-float(nll.double().sum()), int((tg >= 0).sum())))
    return out


def picks(lps, chars, cnts):
    return [int(np.argmax(lps)), int(np.argmax(np.array(lps) / np.array(chars))),
            int(np.argmax(np.array(lps) / np.array(cnts)))]


def main():
    work = tempfile.mkdtemp(prefix="colo-choices-")
    try:
        text = corpus()
        open(os.path.join(work, "text.txt"), "w", encoding="utf-8").write(text[:400000])
        run(["prepare", "--input", os.path.join(work, "text.txt"), "--out", work])
        qs = make_questions(text, 60)
        qpath = os.path.join(work, "q.jsonl")
        with open(qpath, "w", encoding="utf-8") as f:
            for q in qs:
                f.write(json.dumps({k: q[k] for k in ("ctx", "endings", "label")},
                                   ensure_ascii=False) + "\n")
            f.write("\n")  # a blank line is skipped
        cdir = os.path.join(work, "hs")
        r = run(["prepare", "--input", qpath, "--out", cdir, "--endings-field", "endings", "--json"])
        st = json.loads(r.stdout)
        cpath = os.path.join(cdir, "choices.bin")
        check("prepare --json: 60 questions, their endings", st["questions"] == 60 and
              st["sequences"] == sum(len(q["endings"]) for q in qs), r.stdout)

        # the file, read back
        hdr, tok, bits, seq, quest, chars = read_choices(cpath)
        check("choices.bin: magic 20261129, version 1, uint16", hdr[:2] == (20261129, 1) and hdr[3] == 2)
        ok_seq = ok_q = ok_c = True
        s = 0
        seqs = []
        ends = list(seq[1:]) + [len(tok)]
        for qi, q in enumerate(qs):
            ok_q &= tuple(quest[qi]) == (len(q["endings"]), q["right"])
            for e in q["endings"]:
                want = list(q["ctx"].encode()) + list((" " + e).encode())
                wcnt = [0] * len(q["ctx"].encode()) + [1] * len((" " + e).encode())
                got = list(tok[seq[s]:ends[s]])
                gcnt = list(bits[seq[s]:ends[s]])
                ok_seq &= got == want and gcnt == wcnt
                ok_c &= int(chars[s]) == len(" " + e)
                seqs.append((want, wcnt))
                s += 1
        check("choices.bin: each sequence the context's bytes then ' ' + the ending's, the ending counting", ok_seq)
        check("choices.bin: each question's endings and label (integer, string, letter)", ok_q)
        check("choices.bin: each ending's length in characters (code points, not bytes)",
              ok_c and any(len(e.encode()) != len(e) for q in qs for e in q["endings"]))

        # other sets' shapes: PIQA's (an ending a field), ARC's (the endings and their names
        # in an object, the label one of the names), the context from a template
        piqa = [{"goal": "Open a jar", "sol1": "twist the lid.", "sol2": "eat the lid.", "label": 0},
                {"goal": "Dry a cup", "sol1": "use water.", "sol2": "use a towel.", "label": 1}]
        arc = [{"question": "Which is a gas?", "choices": {"text": ["ice", "steam", "rock"],
                                                          "label": ["A", "B", "C"]}, "answerKey": "B"},
               {"question": "2 + 2?", "choices": {"text": ["3", "4"], "label": ["1", "2"]},
                "answerKey": "2"}]
        def prepared(lines, flags):
            p = os.path.join(work, "other.jsonl")
            open(p, "w").write("".join(json.dumps(x) + "\n" for x in lines))
            d = os.path.join(work, "other")
            run(["prepare", "--input", p, "--out", d] + flags)
            h, tk, bt, sq, qu, _ = read_choices(os.path.join(d, "choices.bin"))
            ends = list(sq[1:]) + [len(tk)]
            texts = [(bytes(tk[sq[i]:ends[i]][bt[sq[i]:ends[i]] == 0].astype(np.uint8)).decode(),
                      bytes(tk[sq[i]:ends[i]][bt[sq[i]:ends[i]] == 1].astype(np.uint8)).decode())
                     for i in range(len(sq))]
            return texts, [tuple(x) for x in qu]
        texts, qu = prepared(piqa, ["--context-field", "goal", "--endings-field", "sol1,sol2"])
        check("PIQA's shape: an ending a field (--endings-field sol1,sol2)",
              texts == [("Open a jar", " twist the lid."), ("Open a jar", " eat the lid."),
                        ("Dry a cup", " use water."), ("Dry a cup", " use a towel.")] and
              qu == [(2, 0), (2, 1)], "%s %s" % (texts, qu))
        texts, qu = prepared(arc, ["--context-template", "Question: {question}\\nAnswer:",
                                   "--endings-field", "choices.text", "--label-field", "answerKey",
                                   "--label-names-field", "choices.label"])
        check("ARC's shape: a template, a path into an object, the label among names",
              texts == [("Question: Which is a gas?\nAnswer:", " ice"),
                        ("Question: Which is a gas?\nAnswer:", " steam"),
                        ("Question: Which is a gas?\nAnswer:", " rock"),
                        ("Question: 2 + 2?\nAnswer:", " 3"), ("Question: 2 + 2?\nAnswer:", " 4")] and
              qu == [(3, 1), (2, 1)], "%s %s" % (texts, qu))

        # a small model trained on the text, scored by colo and by PyTorch
        base = ["train", "--data-root", work, "--train-data", "train.bin", "--val-data", "val.bin",
                "--n-layer", str(L), "--n-head", str(NH), "--n-embd", str(C), "--block-size", str(T),
                "--vocab-size", str(V), "--batch-size", str(B), "--steps", "40", "--lr", "3e-3",
                "--eval-interval", "20", "--eval-batches", "2", "--seed", "7", "--threads", "2",
                "--choice-set", "hs=hs/choices.bin"]
        ck = os.path.join(work, "ck")
        prog = os.path.join(work, "p1.jsonl")
        r = run(base + ["--ckpt-dir", ck, "--ckpt-interval", "20", "--progress", prog])
        check("the run's log names the set's scores", "| hs acc " in r.stdout, r.stdout[-400:])
        evals = [json.loads(l) for l in open(prog) if '"event":"eval"' in l]
        check("evaluations at steps 0, 20, 40 with the set's scores",
              [e["step"] for e in evals] == [0, 20, 40] and all("hs" in e.get("choices", {}) for e in evals),
              str(evals))
        smp = os.path.join(work, "samples.jsonl")
        r = run(["eval", "--checkpoint", os.path.join(ck, "step_00000040"), "--choices", cpath,
                 "--samples", smp, "--json", "--batch-size", "5"])
        got = json.loads(r.stdout)
        samples = [json.loads(l) for l in open(smp)]
        last = evals[-1]["choices"]["hs"]
        check("the run's scores at step 40 = eval --choices on its checkpoint",
              all(abs(last[k] - got[k]) < 1e-6 for k in ("acc", "acc_norm", "acc_token")) and
              last["questions"] == 60, "%s %s" % (last, got))
        # train.steps=0: the checkpoint evaluated, not trained, without training data: the run's
        # own last evaluation, to the digit
        ev = [a for a in base if a not in ("--train-data", "train.bin")]
        ev[ev.index("--steps") + 1] = "0"
        p0 = os.path.join(work, "p0.jsonl")
        r = run(ev + ["--init-from", "ck/step_00000040", "--progress", p0])
        e0 = [json.loads(l) for l in open(p0) if '"event":"eval"' in l]
        check("train.steps=0 from the step-40 checkpoint: one evaluation, at step 0, with the "
              "run's validation loss and scores at step 40",
              len(e0) == 1 and e0[0]["step"] == 0 and e0[0]["val_loss"] == evals[-1]["val_loss"] and
              e0[0]["choices"] == evals[-1]["choices"] and
              "train.steps=0: the model is evaluated, not trained" in r.stdout and
              not any(l.startswith("checkpoint ") for l in r.stdout.splitlines()),
              "%s %s %s" % (e0, evals[-1], r.stdout[-300:]))
        # train.best_metric: a choice set's score, higher better, ranks the checkpoints (keep_best
        # and eval --best, by the manifests) and counts early stopping, in place of the loss
        ckb = os.path.join(work, "ckb")
        pb = os.path.join(work, "pb.jsonl")
        run(base + ["--ckpt-dir", ckb, "--ckpt-interval", "10", "--ckpt-keep", "1",
                    "--ckpt-keep-best", "true", "--best-metric", "hs.acc_norm", "--progress", pb])
        recs = [json.loads(l) for l in open(pb)]
        evb = {e["step"]: e for e in recs if e.get("event") == "eval"}
        ckev = [e for e in recs if e.get("event") == "checkpoint"]
        sc = {k: evb[k]["choices"]["hs"]["acc_norm"] for k in (10, 20, 30, 40) if k in evb}
        best = max(sc, key=lambda k: (sc[k], k)) if len(sc) == 4 else -1  # the newest of equals
        low = min(sc, key=lambda k: (evb[k]["val_loss"], -k)) if len(sc) == 4 else -1
        kept = sorted(int(d[5:]) for d in os.listdir(ckb) if d.startswith("step_"))
        check("--best-metric hs.acc_norm --ckpt-keep 1 --ckpt-keep-best: the newest (40) and the "
              "highest acc_norm (step %d; the lowest loss at step %d) kept: %s" % (best, low, kept),
              kept == sorted({40, best}))
        check("each checkpoint's record carries its step's acc_norm as its score",
              [e["step"] for e in ckev] == [10, 20, 30, 40] and
              all(abs(e["score"] - sc[e["step"]]) < 1e-6 for e in ckev), str(ckev))
        man = json.load(open(os.path.join(ckb, "step_%08d" % best, "manifest.json")))
        check("the best's manifest: score {metric: hs.acc_norm, value}",
              man.get("score", {}).get("metric") == "hs.acc_norm" and
              abs(man["score"]["value"] - sc[best]) < 1e-6, str(man.get("score")))
        r = run(["eval", "--checkpoint", ckb, "--best", "--data", os.path.join(work, "val.bin"),
                 "--batches", "1"])
        check("eval --best picks the highest score's", "step_%08d" % best in r.stderr, r.stderr)
        pe = os.path.join(work, "pe.jsonl")
        r = run(base + ["--eval-interval", "5", "--early-stop", "2", "--best-metric", "hs.acc",
                        "--progress", pe])
        recs = [json.loads(l) for l in open(pe)]
        eve = [e for e in recs if e.get("event") == "eval"]
        hi, at, since, stop, counts = -1.0, -1, 0, None, True
        for e in eve:  # the count as the engine keeps it: a new highest by more than 0
            if stop is not None:
                counts = False  # evaluations after the stop
            a = e["choices"]["hs"]["acc"]
            if a > hi:
                hi, at, since = a, e["step"], 0
            else:
                since += 1
            counts &= abs(e.get("best_score", -9) - hi) < 1e-6 and e.get("best_step") == at and \
                e.get("evals_since_best") == since and "best_val_loss" not in e
            if since >= 2 and stop is None:
                stop = e["step"]
        es = [e for e in recs if e.get("event") == "early_stop"]
        check("--early-stop 2 --best-metric hs.acc: each evaluation's count (best_score, "
              "best_step, evals_since_best) as the scores give it; stopped at step %s" % stop,
              counts and (stop is None) == (not es) and
              (stop is None or (es[0]["step"] == stop and abs(es[0]["best_score"] - hi) < 1e-6 and
                                "hs.acc has not risen above" in es[0]["message"])),
              "%s %s" % ([(e["step"], e["choices"]["hs"]["acc"]) for e in eve], es))
        hfdir = os.path.join(work, "hf")
        os.mkdir(hfdir)
        out = os.path.join(hfdir, "model.safetensors")
        run(["export", "--checkpoint", os.path.join(ck, "step_00000040"), "--out", out,
             "--config", os.path.join(hfdir, "config.json")])
        smp_hf = os.path.join(work, "samples-hf.jsonl")
        r = run(["eval", "--checkpoint", hfdir, "--choices", cpath, "--samples", smp_hf, "--json",
                 "--batch-size", "5"])
        check("eval --choices of the model as HuggingFace's directory (config.json, "
              "model.safetensors): the checkpoint's samples, to the digit",
              open(smp_hf).read() == open(smp).read() and json.loads(r.stdout)["acc"] == got["acc"])
        # the first 10 questions alone (eval --limit; train.choice_questions in a run)
        smp10 = os.path.join(work, "samples10.jsonl")
        r = run(["eval", "--checkpoint", os.path.join(ck, "step_00000040"), "--choices", cpath,
                 "--samples", smp10, "--json", "--batch-size", "5", "--limit", "10"])
        got10, s10 = json.loads(r.stdout), [json.loads(l) for l in open(smp10)]
        check("eval --limit 10: the first 10 questions' samples, and their scores",
              got10["questions"] == 10 and len(s10) == 10 and
              [x["pred_norm"] for x in s10] == [x["pred_norm"] for x in samples[:10]] and
              all(abs(a - b) <= 1e-5 * max(1.0, abs(b)) for x, y in zip(s10, samples)
                  for a, b in zip(x["logprobs"], y["logprobs"])) and
              abs(got10["acc_norm"] - sum(x["pred_norm"] == x["label"] for x in s10) / 10) < 1e-12,
              r.stdout)
        p10 = os.path.join(work, "p10.jsonl")
        run(base + ["--choice-questions", "10", "--progress", p10, "--ckpt-dir",
                    os.path.join(work, "ck10"), "--ckpt-interval", "40"])
        last10 = [json.loads(l) for l in open(p10) if '"event":"eval"' in l][-1]["choices"]["hs"]
        r = run(["eval", "--checkpoint", os.path.join(work, "ck10"), "--choices", cpath, "--json",
                 "--limit", "10"])
        e10 = json.loads(r.stdout)
        check("a run with --choice-questions 10 scores the first 10: eval --limit 10's scores",
              last10["questions"] == 10 and
              all(abs(last10[k] - e10[k]) < 1e-6 for k in ("acc", "acc_norm", "acc_token")),
              "%s %s" % (last10, e10))

        # the GPU path (the emulated GPU here: the CPU dressed as one; a real one with a GPU)
        smp_gpu = os.path.join(work, "samples-gpu.jsonl")
        env = dict(os.environ, COLO_CUDA_EMULATE="1")
        r = subprocess.run([COLO, "eval", "--checkpoint", os.path.join(ck, "step_00000040"),
                            "--choices", cpath, "--samples", smp_gpu, "--batch-size", "5",
                            "--device", "gpu"], capture_output=True, text=True, env=env)
        gs = [json.loads(l) for l in open(smp_gpu)] if r.returncode == 0 else []
        if "built without the CUDA backend" in r.stderr:
            print("skip eval --choices --device gpu: this colo-train has no CUDA backend")
        else:
            check("eval --choices --device gpu (emulated): each log-probability the CPU's within 1e-5",
                  len(gs) == len(samples) and all(
                      abs(a - b) <= 1e-5 * max(1.0, abs(b)) for g, c in zip(gs, samples)
                      for a, b in zip(g["logprobs"], c["logprobs"])), r.stderr[-300:])
        w = read_safetensors(out)
        model = GPT2(L, NH, C, T, V)
        with torch.no_grad():
            for n in model.names:
                model.p[n].copy_(w[n])
        ref = torch_logprobs(model, seqs)
        worst, cnt_ok, s = 0.0, True, 0
        pk = [0, 0, 0]
        agree, close = True, 0
        right = [0, 0, 0]
        for qi, q in enumerate(qs):
            K = len(q["endings"])
            lp = [ref[s + k][0] for k in range(K)]
            cn = [ref[s + k][1] for k in range(K)]
            ch = [len(" " + e) for e in q["endings"]]
            sm = samples[qi]
            for k in range(K):
                worst = max(worst, abs(sm["logprobs"][k] - lp[k]) / max(1.0, abs(lp[k])))
            cnt_ok &= sm["tokens"] == cn and sm["chars"] == ch and sm["label"] == q["right"]
            p = picks(lp, ch, cn)
            for m, key in enumerate(("pred", "pred_norm", "pred_token")):
                right[m] += p[m] == q["right"]
                vals = sorted([lp, np.array(lp) / ch, np.array(lp) / cn][m], reverse=True)
                if vals[0] - vals[1] < 1e-3:
                    close += 1
                    continue
                agree &= sm[key] == p[m]
            s += K
        check("eval --choices: each ending's log-probability within 1e-4 of PyTorch's (worst %.2e)" % worst,
              worst < 1e-4)
        check("eval --choices: counted tokens, characters and labels PyTorch's", cnt_ok)
        check("eval --choices: the picks PyTorch's (%d near-ties left out)" % close, agree and close < 20)
        want = [x / 60 for x in right]
        check("eval --choices: acc, acc_norm, acc_token from PyTorch's log-probabilities %s" % want,
              close > 0 or all(abs(got[k] - want[m]) < 1e-9 for m, k in enumerate(("acc", "acc_norm", "acc_token"))),
              str(got))
        print("scores at step 40: acc %.4f, acc_norm %.4f, acc_token %.4f (chance about %.3f)" %
              (got["acc"], got["acc_norm"], got["acc_token"],
               sum(1 / len(q["endings"]) for q in qs) / 60))

        # the layouts: their progress records' scores = one process's (two data-parallel ranks
        # against one accumulating two micro-batches: the same global batch)
        def scores(extra):
            pp = os.path.join(work, "pl.jsonl")
            if os.path.exists(pp):
                os.unlink(pp)
            run(base + extra + ["--progress", pp])
            return [json.loads(l)["choices"]["hs"] for l in open(pp) if '"event":"eval"' in l]
        one = [e["choices"]["hs"] for e in evals]
        accum = scores(["--grad-accum", "2"])
        for name, extra in [("2 data-parallel ranks", ["--nproc", "2", "--dp", "2"]),
                            ("ZeRO-3 over 2 ranks", ["--nproc", "2", "--dp", "2", "--zero", "3"]),
                            ("tp=2", ["--nproc", "2", "--tp", "2"]),
                            ("tp=2 with sequence parallelism", ["--nproc", "2", "--tp", "2", "--sp", "true"]),
                            ("cp=2 (each sequence's tokens split)", ["--nproc", "2", "--cp", "2"]),
                            ("2 pipeline stages, 2 micro-batches", ["--nproc", "2", "--pp", "2",
                                                                    "--micro-batches", "2"])]:
            ev = scores(extra)
            want = accum if "--dp" in extra else one
            same = len(ev) == len(want) and all(
                abs(a[k] - b[k]) < 1e-9 for a, b in zip(ev, want) for k in ("acc", "acc_norm", "acc_token"))
            check("%s: the scores at each evaluation = one process's" % name, same,
                  "%s vs %s" % (ev, want))

        # refusals
        def refused(lines, why, name, flags=()):
            p = os.path.join(work, "bad.jsonl")
            open(p, "w").write("".join(json.dumps(x) + "\n" for x in lines))
            d = os.path.join(work, "bad")
            r = run(["prepare", "--input", p, "--out", d, "--endings-field", "endings"] + list(flags),
                    ok=False)
            check("refused: " + name, r.returncode == 1 and why in r.stderr and
                  not os.path.exists(os.path.join(d, "choices.bin")) and
                  not os.path.exists(os.path.join(d, "choices.bin.tmp")), r.stderr)
        good = {"ctx": "a b", "endings": ["c", "d"], "label": 0}
        refused([good, {"ctx": "a"}], 'bad.jsonl:2: "endings" is not there: 2 endings or more',
                "a line without endings")
        refused([{"ctx": "a", "endings": ["x"], "label": 0}],
                'bad.jsonl:1: "endings" is a list of 1: 2 endings or more', "one ending")
        refused([good, [1, 2]], "bad.jsonl:2: not a JSON object", "a line that is not an object")
        refused([{"endings": ["x", "y"], "label": 0}], 'bad.jsonl:1: "ctx" is not a string',
                "a line without a context")
        refused([{"ctx": "a", "endings": ["x", "y"], "label": 2}],
                'bad.jsonl:1: "label" is not the number of one of the 2 endings', "a label out of range")
        refused([{"ctx": "a", "endings": ["x", ""], "label": 1}],
                "bad.jsonl:1: ending 1 is not a string of text", "an empty ending")
        refused([{"q": "a", "endings": ["x", "y"], "label": 1}],
                "bad.jsonl:1: the context template's {question} is not a string of the line",
                "a template's field not there", ["--context-template", "Q: {question}"])
        refused([{"ctx": "a", "endings": ["x", "y"], "key": "C", "names": ["A", "B"]}],
                'bad.jsonl:1: "key" is not one of the names in "names" of the 2 endings',
                "a label not among the names", ["--label-field", "key", "--label-names-field", "names"])
        r = run(["prepare", "--input", qpath, "--out", os.path.join(work, "bad"), "--context-field",
                 "ctx", "--context-template", "{ctx}"], ok=False)
        check("refused: --context-field with --context-template", r.returncode == 2 and
              "--context-field and --context-template do not go together" in r.stderr, r.stderr)
        r = run(base[:1] + ["--data-root", work, "--train-data", "hs/choices.bin", "--eval-interval", "0",
                            "--steps", "1", "--n-layer", "1", "--n-head", "1", "--n-embd", "16",
                            "--block-size", "8"], ok=False)
        check("refused: a choice shard as training data", r.returncode != 0 and
              "holds multiple-choice questions: a run scores its model on them" in r.stderr, r.stderr)
        r = run(base[:1] + ["--data-root", work, "--train-data", "train.bin", "--val-data", "hs/choices.bin",
                            "--steps", "1", "--n-layer", "1", "--n-head", "1", "--n-embd", "16",
                            "--block-size", "8"], ok=False)
        check("refused: a choice shard as validation data", r.returncode != 0 and
              "holds multiple-choice questions: name it in data.choice_sets" in r.stderr, r.stderr)
        r = run(["eval", "--checkpoint", ck, "--choices", os.path.join(work, "val.bin")], ok=False)
        check("refused: eval --choices on a shard of text", r.returncode == 1 and
              "is not a multiple-choice shard" in r.stderr, r.stderr)
        r = run(["eval", "--checkpoint", ck, "--data", os.path.join(work, "val.bin"), "--samples", "x"], ok=False)
        check("refused: --samples without --choices", r.returncode == 2 and
              "--samples and --limit go with --choices" in r.stderr, r.stderr)
        r = run(base + ["--eval-interval", "0"], ok=False)
        check("refused: a choice set without evaluations", r.returncode != 0 and
              "data.choice_sets are scored at each evaluation" in r.stderr, r.stderr)
        r = run(base[:base.index("--choice-set")] + ["--choice-questions", "5"], ok=False)
        check("refused: --choice-questions without a choice set", r.returncode != 0 and
              "train.choice_questions=5 limits the questions of data.choice_sets, and the job "
              "names none" in r.stderr, r.stderr)
        r = run(["eval", "--checkpoint", ck, "--data", os.path.join(work, "val.bin"), "--limit", "3"],
                ok=False)
        check("refused: --limit without --choices", r.returncode == 2 and
              "--samples and --limit go with --choices" in r.stderr, r.stderr)
        r = run(base + ["--choice-set", "two words=hs/choices.bin"], ok=False)
        check("refused: a bad name", r.returncode != 0 and
              'data.choice_sets[1].name "two words" must be 1 to 64 characters' in r.stderr, r.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
