"""Tokenizers for tests whose expected tokens need no BPE: every byte its own token (id = the
byte), special tokens after them, merges only where a test asks for them."""
import json
import os


# GPT-2's byte-to-character map, for vocab.json's keys
def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


byte_vocab = {c: b for b, c in bytes_to_unicode().items()}


def hf_tokenizer(d, extra=0, merges=(), specials=()):
    """a tokenizer.json of the bytes, <|begin_of_text|> 256, <|end_of_text|> 257 and `specials`
    after them, then `extra` ordinary tokens, then those the merges make"""
    os.makedirs(d)
    vocab = dict(byte_vocab)
    added = ["<|begin_of_text|>", "<|end_of_text|>"] + list(specials)
    for i in range(extra):
        vocab["tok%d" % i] = 256 + len(added) + i
    for a, b in merges:
        vocab[a + b] = len(added) + len(vocab)
    json.dump({"version": "1.0", "truncation": None, "padding": None,
               "added_tokens": [{"id": 256 + i, "content": t, "special": True} for i, t in enumerate(added)],
               "normalizer": None,
               "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                 "use_regex": True},
               "post_processor": None, "decoder": {"type": "ByteLevel"},
               "model": {"type": "BPE", "dropout": None, "unk_token": None, "fuse_unk": False,
                         "byte_fallback": False, "vocab": vocab, "merges": [" ".join(m) for m in merges]}},
              open(os.path.join(d, "tokenizer.json"), "w"))
    json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"},
              open(os.path.join(d, "tokenizer_config.json"), "w"))
