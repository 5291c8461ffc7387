#!/usr/bin/env python3
"""TikTokenizer against tiktoken, built as Megatron's TikTokenTokenizer builds it
(megatron/core/tokenizers/text/libraries/tiktoken_tokenizer.py: special tokens first,
ranks shifted by num_special_tokens, encode(text, allowed_special="all"), decode with
UTF-8 replacement): token streams and decoded text equal on the corpora of tok_corpus.py,
with patterns v1 and v2, Megatron's seven special tokens and 1000 special ids, and with
given special tokens and 100 ids.

The vocabulary is Megatron's JSON list of {rank, token_bytes, token_str}, made here from a
byte-level BPE the tokenizers library trains on Tiny Shakespeare: the 256 bytes, then each
merge's token in merge order (tiktoken's ranks order merges as BPE training made them).

  tiktokenizer.py TOKENIZE_JSON DATA_DIR WORK_DIR
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import reference  # noqa: E402  (tests/support/reference.py)

reference.require("tiktoken", "tokenizers")
import tiktoken  # noqa: F401
import tokenizers  # noqa: F401

exe, data, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tok_corpus import load_texts  # noqa: E402

shakespeare, texts = load_texts(data)

from tiktokenizer_vocab import SPECIAL_TOKENS, megatron_encoding, vocabulary  # noqa: E402

vocab = vocabulary(shakespeare)
path = os.path.join(work, "tiktoken_vocab.json")
json.dump(vocab, open(path, "w"))
inp = os.path.join(work, "texts.json")
json.dump(texts, open(inp, "w"))
failures = 0
cases = [("v2", SPECIAL_TOKENS, 1000, []), ("v1", SPECIAL_TOKENS, 1000, []),
         ("v2", ["<sep>", "<cls>", "<pad>", "<mask>", "</s>", "<s>", "<unk>", "<|im_start|>", "<|im_end|>"], 100,
          ["special=<sep> <cls> <pad> <mask> </s> <s> <unk> <|im_start|> <|im_end|>"])]
for pattern, specials, nspec, extra in cases:
    vocab_size = len(vocab) + nspec
    enc = megatron_encoding(path, pattern, list(specials), nspec, vocab_size)
    out = os.path.join(work, f"out_{pattern}_{nspec}.json")
    subprocess.run([exe, inp, out, "TikTokenizer", path, f"pattern={pattern}", f"num_special={nspec}",
                    f"vocab_size={vocab_size}"] + extra, check=True)
    got = json.load(open(out))
    if "error" in got:
        print(f"FAIL {pattern}: {got['error']}")
        failures += 1
        continue
    bad = ntok = 0
    for i, text in enumerate(texts):
        want = enc.encode(text, allowed_special="all")
        ntok += len(want)
        if got["ids"][i] != want:
            bad += 1
            if bad <= 3:
                k = next((j for j, (a, b) in enumerate(zip(got["ids"][i], want)) if a != b), min(len(want), len(got["ids"][i])))
                print(f"  text {i} {text[:50]!r}: differ at {k}: got {got['ids'][i][max(0,k-3):k+4]} want "
                      f"{want[max(0,k-3):k+4]}; {got['encode_errors'][i]}")
            continue
        if got["decoded"][i] != enc.decode(want):
            bad += 1
            if bad <= 3:
                print(f"  text {i} {text[:50]!r}: decoded differently")
    eod, bos = specials.index("</s>"), specials.index("<s>")
    if (got["vocab"], got["eod"], got["bos"]) != (vocab_size, eod, bos):
        bad += 1
        print(f"  vocab/eod/bos {got['vocab']}/{got['eod']}/{got['bos']}, Megatron's {vocab_size}/{eod}/{bos}")
    print(f"pattern {pattern}, {nspec} special ids: {len(texts)} texts, {ntok} tokens: "
          f"{'ok' if not bad else f'FAIL ({bad})'}")
    failures += bad != 0
sys.exit(1 if failures else 0)
