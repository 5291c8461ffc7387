#!/usr/bin/env python3
"""Writes gpt2-small/: GPT-2's tokenizer cut to its first 639 merges.

GPT-2's vocab.json numbers the 256 byte tokens 0..255 and the result of merge i (the
i-th line after merges.txt's header) 256 + i, so the first M merges with the tokens
they make, plus <|endoftext|> renumbered to 256 + M, are a complete byte-level BPE
tokenizer: every text encodes, with the same pre-tokenizer, the same merge order and
an end-of-document token. M = 639 makes 896 tokens = 7 x 128, so padding the
vocabulary to a multiple of 64 x tp gives 896 at tp 1 and tp 2 alike (the same model).
Tests that train many short runs on documents use it: their output layer and
cross-entropy are 56 times smaller than with 50304 tokens (what dominated those runs,
the sanitizer build's most of all), and nothing they check depends on which merges exist.

  python3 tests/data/gpt2-small/make.py   (from the repository root; stdlib only)
"""
import json
import os

M = 639
here = os.path.dirname(os.path.abspath(__file__))
src = os.path.join(here, "..", "gpt2")
with open(os.path.join(src, "vocab.json"), encoding="utf-8") as f:
    vocab = json.load(f)
with open(os.path.join(src, "merges.txt"), encoding="utf-8") as f:
    merges = f.read().split("\n")
assert merges[0].startswith("#version")
for i in range(M):  # the numbering this cut relies on
    assert vocab["".join(merges[1 + i].split(" "))] == 256 + i
small = {t: i for t, i in sorted(vocab.items(), key=lambda kv: kv[1]) if i < 256 + M}
small["<|endoftext|>"] = 256 + M
with open(os.path.join(here, "vocab.json"), "w", encoding="utf-8") as f:
    json.dump(small, f, ensure_ascii=False)
with open(os.path.join(here, "merges.txt"), "w", encoding="utf-8") as f:
    f.write("\n".join(merges[: 1 + M]) + "\n")
