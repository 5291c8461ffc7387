#!/usr/bin/env python3
"""HuggingFaceTokenizer against the `tokenizers` library (and transformers' AutoTokenizer,
which Megatron's HuggingFaceTokenizer calls): token streams and decoded text equal on whole
corpora, for tokenizers this test trains itself on Tiny Shakespeare (no hub access):

  bytelevel   GPT-2 style: ByteLevel pre-tokenizer with its regex, ByteLevel decoder
  neox        GPT-NeoX style: NFC, ByteLevel, normalized added tokens (runs of spaces)
  llama3      Llama 3 style: Split(Llama 3's regex) + ByteLevel(use_regex=false),
              ignore_merges, <|begin_of_text|> template, 256 reserved special tokens
  qwen2       Qwen2/3 style: NFC, Split(Qwen2's regex) + ByteLevel, non-special added <think>
  deepseek    DeepSeek-V3 style: three Splits (digits, CJK, its regex) + ByteLevel, BOS template
  metaspace   Mistral style: Metaspace(prepend_scheme first, split false), byte_fallback,
              unk + fuse_unk, Replace/ByteFallback/Fuse/Strip decoder, <s> template
  legacy_sp   Mistral v0.1's older file: Prepend + Replace normalizers, no pre-tokenizer

Corpora: the whole of Tiny Shakespeare as one text and line by line, the GPT-2 and Mistral
test vectors' texts, and edge cases (special tokens in the text, white space runs,
lstrip/rstrip/single_word tokens, NUL, CJK, emoji, combining marks).

  hf_tokenizers.py TOKENIZE_JSON DATA_DIR WORK_DIR
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import reference  # noqa: E402  (tests/support/reference.py)

if __name__ == "__main__":  # (imported by other tests for build(), which need only tokenizers)
    reference.require("tokenizers", "transformers")
import tokenizers  # noqa: E402
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tok_corpus import load_texts  # noqa: E402

shakespeare = None  # read by main() or set by a script that imports build()

ALPHABET = pre_tokenizers.ByteLevel.alphabet()
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
          r"\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
         r"\s+(?!\S)|\s+")
DEEPSEEK = (r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|"
            r" ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def bpe_train(tok, vocab, specials=()):
    tr = trainers.BpeTrainer(vocab_size=vocab, special_tokens=list(specials), initial_alphabet=ALPHABET,
                             show_progress=False)
    tok.train_from_iterator([shakespeare], tr)
    return tok


def byte_level(split=None, normalizer=None, ignore_merges=False):
    t = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if normalizer:
        t.normalizer = normalizer
    if split is None:
        t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        t.pre_tokenizer = pre_tokenizers.Sequence(split + [pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                                                      use_regex=False)])
    t.decoder = decoders.ByteLevel()
    return t


def build(name):
    """Trains the tokenizer; returns (Tokenizer, tokenizer_config dict or None)."""
    if name == "bytelevel":
        t = bpe_train(byte_level(), 1200, ["<|endoftext|>"])
        t.post_processor = processors.ByteLevel(trim_offsets=True)
        return t, {"eos_token": "<|endoftext|>", "bos_token": "<|endoftext|>"}
    if name == "neox":
        t = bpe_train(byte_level(normalizer=normalizers.NFC()), 1500, ["<|endoftext|>", "<|padding|>"])
        t.add_tokens([tokenizers.AddedToken(" " * k, normalized=True) for k in (24, 8, 4, 2)])
        t.post_processor = processors.ByteLevel(trim_offsets=True)
        return t, {"eos_token": "<|endoftext|>", "bos_token": "<|endoftext|>"}
    if name in ("llama3", "qwen2", "deepseek"):
        if name == "llama3":
            split = [pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated")]
            norm = None
        elif name == "qwen2":
            split = [pre_tokenizers.Split(Regex(QWEN2), behavior="isolated")]
            norm = normalizers.NFC()
        else:
            split = [pre_tokenizers.Split(Regex(r"\p{N}{1,3}"), behavior="isolated"),
                     pre_tokenizers.Split(Regex("[一-龥\u3040-ゟ゠-ヿ]+"), behavior="isolated"),
                     pre_tokenizers.Split(Regex(DEEPSEEK), behavior="isolated")]
            norm = normalizers.Sequence([])
        t = bpe_train(byte_level(split, norm, ignore_merges=name == "llama3"), 1500)
        if name == "llama3":
            bos, eos = "<|begin_of_text|>", "<|end_of_text|>"
            t.add_special_tokens([bos, eos] + [f"<|reserved_special_token_{i}|>" for i in range(20)])
        elif name == "qwen2":
            bos, eos = None, "<|endoftext|>"
            t.add_special_tokens([eos, "<|im_start|>", "<|im_end|>"])
            t.add_tokens([tokenizers.AddedToken("<think>", normalized=False, special=False),
                          tokenizers.AddedToken("</think>", normalized=False, special=False)])
        else:
            bos, eos = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
            t.add_special_tokens([bos, eos])
        if bos:
            bid = t.token_to_id(bos)
            t.post_processor = processors.Sequence([
                processors.ByteLevel(trim_offsets=False),
                processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, bid)])])
        else:
            t.post_processor = processors.ByteLevel(trim_offsets=False)
        cfg = {"eos_token": eos}
        if bos:
            cfg["bos_token"] = bos
        return t, cfg
    if name in ("metaspace", "legacy_sp"):
        specials = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
        t = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
        t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
        tr = trainers.BpeTrainer(vocab_size=1400, special_tokens=specials, show_progress=False, limit_alphabet=60)
        t.train_from_iterator([shakespeare], tr)
        if name == "metaspace":
            t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
        else:
            t.pre_tokenizer = None
            t.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        t.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                       decoders.Strip(" ", 1, 0)])
        t.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                         special_tokens=[("<s>", t.token_to_id("<s>"))])
        # an added token that strips white space on its left and one that is a single word
        t.add_tokens([tokenizers.AddedToken("<mask>", lstrip=True, rstrip=True, special=True),
                      tokenizers.AddedToken("word", single_word=True, normalized=False)])
        return t, {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    raise ValueError(name)


def main():
    global shakespeare
    exe, data, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    shakespeare, texts = load_texts(data)
    NAMES = ["bytelevel", "neox", "llama3", "qwen2", "deepseek", "metaspace", "legacy_sp"]
    only = sys.argv[4:] or NAMES
    inp = os.path.join(work, "texts.json")
    json.dump(texts, open(inp, "w"))
    failures = 0
    from transformers import AutoTokenizer  # required above (reference.require)

    for name in only:
        d = os.path.join(work, name)
        os.makedirs(d, exist_ok=True)
        tok, cfg = build(name)
        tok.save(os.path.join(d, "tokenizer.json"))
        if cfg is not None:
            cfg = dict(cfg, tokenizer_class="PreTrainedTokenizerFast")
            json.dump(cfg, open(os.path.join(d, "tokenizer_config.json"), "w"))
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))  # as saved
        out = os.path.join(work, name + ".out.json")
        subprocess.run([exe, inp, out, "HuggingFaceTokenizer", d], check=True)
        got = json.load(open(out))
        if "error" in got:
            print(f"FAIL {name}: mgraph refused the tokenizer: {got['error']}")
            failures += 1
            continue
        bad = 0
        ntok = 0
        for i, text in enumerate(texts):
            want = tok.encode(text).ids
            ntok += len(want)
            if got["ids"][i] != want:
                bad += 1
                if bad <= 3:
                    k = next((j for j, (a, b) in enumerate(zip(got["ids"][i], want)) if a != b), min(len(want), len(got["ids"][i])))
                    print(f"  {name}: text {i} {text[:60]!r}: ids differ at {k}: got {got['ids'][i][max(0,k-3):k+5]} "
                          f"want {want[max(0,k-3):k+5]} (lengths {len(got['ids'][i])} {len(want)}); "
                          f"error: {got['encode_errors'][i]}")
                continue
            dec = tok.decode(want, skip_special_tokens=False)
            if got["decoded"][i] != dec:
                bad += 1
                if bad <= 3:
                    print(f"  {name}: text {i} {text[:60]!r}: decoded {got['decoded'][i][:80]!r} want {dec[:80]!r}")
        # what Megatron's HuggingFaceTokenizer reads through transformers
        if AutoTokenizer is not None:
            at = AutoTokenizer.from_pretrained(d)
            for i, text in enumerate(texts[:600] + texts[-40:]):
                j = i if i < 600 else len(texts) - 40 + (i - 600)
                if at(text).input_ids != got["ids"][j]:
                    bad += 1
                    if bad <= 5:
                        print(f"  {name}: text {j} {text[:60]!r}: transformers' input_ids differ")
            eod = at.convert_tokens_to_ids(at.eos_token) if at.eos_token is not None else -1
            bos = at.convert_tokens_to_ids(at.bos_token) if at.bos_token is not None else -1
            if (got["vocab"], got["eod"], got["bos"]) != (len(at), eod, bos):
                bad += 1
                print(f"  {name}: vocab/eod/bos {got['vocab']}/{got['eod']}/{got['bos']}, transformers {len(at)}/{eod}/{bos}")
        status = "ok" if bad == 0 else f"FAIL ({bad} texts differ)"
        print(f"{name}: {len(texts)} texts, {ntok} tokens, vocab {got['vocab']}: {status}")
        failures += bad != 0

    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
