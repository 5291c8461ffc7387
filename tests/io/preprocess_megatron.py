#!/usr/bin/env python3
"""mgraph-preprocess against Megatron's tools/preprocess_data.py for the tokenizers this
test builds: HuggingFaceTokenizer (a Llama 3 style byte-level BPE with its BOS template and
a Mistral style Metaspace one, trained by tokenizers/hf_tokenizers.py), TikTokenizer (a
Megatron tiktoken vocabulary, tiktokenizer.py) and NullTokenizer (--vocab-size 70000: int32
tokens). The .bin and .idx must be byte-identical to what preprocess_data.py writes:

* by default (ctest) the expected files are packed here from the format's definition
  (MMIDIDX version 1: dtype code, sequence and document counts, int32 lengths, int64
  pointers, int64 document indices) with the ids Megatron's Encoder.encode gets: its
  tokenizer wrappers' text_to_ids (transformers' AutoTokenizer(dir)(text).input_ids;
  tiktoken built as TikTokenTokenizer; int() of the space-split text), EOD (eos id,
  </s>, vocab - 1) after every non-empty document with --append-eod, an empty document
  keeping its document-index entry, dtype uint16 below 65500 tokens else int32;
* with --megatron DIR the files Megatron-LM's own tools/preprocess_data.py writes
  (a checkout in DIR, with torch and transformers importable) are compared too:
      preprocess_megatron.py MGRAPH_PREPROCESS DATA_DIR WORK_DIR --megatron DIR
  (on Python < 3.12 Megatron needs typing.override: PYTHONPATH with a sitecustomize
  that sets it from typing_extensions).

Then mgraph-run trains two iterations on each dataset with its tokenizer (--run MGRAPH_RUN):
the vocabulary is the tokenizer's, padded as Megatron pads it.

  preprocess_megatron.py MGRAPH_PREPROCESS DATA_DIR WORK_DIR [--run MGRAPH_RUN] [--megatron DIR]
"""
import json
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import reference  # noqa: E402  (tests/support/reference.py)

reference.require("numpy", "tiktoken", "transformers")
import numpy as np
import tiktoken
from transformers import AutoTokenizer

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import hf_tokenizers  # noqa: E402
import tiktokenizer_vocab  # noqa: E402

pre, data, work = sys.argv[1:4]
megatron = sys.argv[sys.argv.index("--megatron") + 1] if "--megatron" in sys.argv else None
mgraph_run = sys.argv[sys.argv.index("--run") + 1] if "--run" in sys.argv else None
os.makedirs(work, exist_ok=True)
shakespeare = open(os.path.join(data, "tinyshakespeare.txt"), encoding="utf-8").read()
hf_tokenizers.shakespeare = shakespeare

# documents: Shakespeare's speeches, a title key, and edge cases
paras = [p for p in shakespeare.split("\n\n") if p.strip()][:1200]
docs = [{"text": p, "title": p.split("\n")[0], "sents": p.split("\n") + [""]} for p in paras]
docs += [{"text": "", "title": "empty text", "sents": []}, {"text": "<s> special </s> tokens <|begin_of_text|>", "title": "",
          "sents": ["", ""]}, {"text": "héllo wörld 日本語 😀 \u0085 tabs\tand\r\nCRLF", "title": "unicode", "sents": ["a"]},
         {"text": " " * 40, "title": "   ", "sents": [" ", "b"]}]
corpus = os.path.join(work, "docs.jsonl")
with open(corpus, "w", encoding="utf-8") as f:
    for d in docs:
        f.write(json.dumps(d, ensure_ascii=False) + "\n")
null_docs = [{"text": " ".join(str((b * 257 + i) % 70000) for i, b in enumerate(p.encode()[:300]))} for p in paras[:400]]
null_docs += [{"text": "69999 0 65535 65536"}, {"text": "7"}]
null_corpus = os.path.join(work, "ids.jsonl")
with open(null_corpus, "w") as f:
    for d in null_docs:
        f.write(json.dumps(d) + "\n")

# the tokenizers
hf_dirs = {}
for name in ("llama3", "metaspace"):
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    tok, cfg = hf_tokenizers.build(name)
    tok.save(os.path.join(d, "tokenizer.json"))
    json.dump(dict(cfg, tokenizer_class="PreTrainedTokenizerFast"), open(os.path.join(d, "tokenizer_config.json"), "w"))
    hf_dirs[name] = d
tik_vocab = tiktokenizer_vocab.vocabulary(shakespeare)
tik_path = os.path.join(work, "tiktoken_vocab.json")
json.dump(tik_vocab, open(tik_path, "w"))
tik_vocab_size = len(tik_vocab) + 1000


class HF:  # megatron/core/tokenizers/text/libraries/huggingface_tokenizer.py, default flags
    def __init__(self, d):
        self.t = AutoTokenizer.from_pretrained(d)
        self.vocab_size = len(self.t)
        self.eod = self.t.convert_tokens_to_ids(self.t.eos_token)

    def tokenize(self, text):
        return self.t(text).input_ids


class Tik:  # tiktoken_tokenizer.py with the default special tokens and pattern v2
    def __init__(self):
        self.enc = tiktokenizer_vocab.megatron_encoding(tik_path, "v2", list(tiktokenizer_vocab.SPECIAL_TOKENS), 1000,
                                                         tik_vocab_size)
        self.vocab_size = tik_vocab_size
        self.eod = 2

    def tokenize(self, text):
        return self.enc.encode(text, allowed_special="all")


class Null:  # null_tokenizer.py
    vocab_size = 70000
    eod = 69999

    def tokenize(self, text):
        return [int(x) for x in text.split(" ")]


def expected(tok, path, keys):
    """preprocess_data.py's Encoder.encode and IndexedDatasetBuilder, from the format."""
    dtype = np.uint16 if tok.vocab_size < 65500 else np.int32
    code = {np.uint16: 8, np.int32: 4}[dtype]
    out = {}
    for key in keys:
        bin_parts, lengths, doc_idx = [], [], [0]
        for line in open(path, encoding="utf-8"):
            text = json.loads(line)[key]
            doc_ids, sentence_lens = [], []
            for sentence in text if isinstance(text, list) else [text]:
                ids = tok.tokenize(sentence)
                if len(ids) > 0:
                    doc_ids.extend(ids)
                    sentence_lens.append(len(ids))
            if len(doc_ids) > 0:  # --append-eod
                doc_ids.append(tok.eod)
                sentence_lens[-1] += 1
            bin_parts.append(np.array(doc_ids, dtype=dtype).tobytes())
            lengths.extend(sentence_lens)
            doc_idx.append(len(lengths))
        isz = np.dtype(dtype).itemsize
        pointers = np.concatenate([[0], np.cumsum(np.array(lengths, dtype=np.int64) * isz)[:-1]]) if lengths else []
        idx = b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", code)
        idx += struct.pack("<Q", len(lengths)) + struct.pack("<Q", len(doc_idx))
        idx += np.array(lengths, dtype=np.int32).tobytes() + np.array(pointers, dtype=np.int64).tobytes()
        idx += np.array(doc_idx, dtype=np.int64).tobytes()
        out[key] = (b"".join(bin_parts), idx)
    return out


def run_mgraph(prefix, args, path, keys):
    cmd = [pre, "--input", path, "--output-prefix", prefix, "--append-eod", "--workers", "2", "--json-keys"] + keys + args
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        print(r.stderr)
        raise SystemExit(f"FAIL: mgraph-preprocess exited {r.returncode}: {' '.join(cmd)}")


def run_megatron(prefix, args, path, keys):
    cmd = [sys.executable, os.path.join(megatron, "tools/preprocess_data.py"), "--input", path, "--output-prefix",
           prefix, "--append-eod", "--workers", "2", "--json-keys"] + keys + args
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=work)
    if r.returncode:
        print(r.stderr[-3000:])
        raise SystemExit(f"FAIL: Megatron's preprocess_data.py exited {r.returncode}")


cases = [
    ("hf_llama3", HF(hf_dirs["llama3"]), ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", hf_dirs["llama3"]],
     corpus, ["text", "title"]),
    ("hf_metaspace", HF(hf_dirs["metaspace"]),
     ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", hf_dirs["metaspace"]], corpus, ["text", "sents"]),
    ("tiktoken", Tik(), ["--tokenizer-type", "TikTokenizer", "--tokenizer-model", tik_path, "--vocab-size",
                         str(tik_vocab_size)], corpus, ["text", "title", "sents"]),
    ("null", Null(), ["--tokenizer-type", "NullTokenizer", "--vocab-size", "70000"], null_corpus, ["text"]),
]
failures = 0
for name, tok, args, path, keys in cases:
    prefix = os.path.join(work, "mg_" + name)
    run_mgraph(prefix, args, path, keys)
    want = expected(tok, path, keys)
    if megatron:
        mprefix = os.path.join(work, "megatron_" + name)
        run_megatron(mprefix, args, path, keys)
    for key in keys:
        for ext, k in ((".bin", 0), (".idx", 1)):
            got = open(f"{prefix}_{key}_document{ext}", "rb").read()
            ok = got == want[key][k]
            print(f"{name} {key}{ext}: {len(got)} bytes, {'identical to' if ok else 'DIFFERS from'} "
                  f"preprocess_data.py's format and ids")
            failures += not ok
            if megatron:
                theirs = open(f"{mprefix}_{key}_document{ext}", "rb").read()
                ok = got == theirs
                print(f"{name} {key}{ext}: {'identical to' if ok else 'DIFFERS from'} Megatron-LM's own output "
                      f"({len(theirs)} bytes)")
                failures += not ok
    if mgraph_run:
        # the dataset trains with its tokenizer: ids checked against the vocabulary, padded to 128
        padded = (tok.vocab_size + 127) // 128 * 128
        cmd = [mgraph_run, "--data-path", f"{prefix}_{keys[0]}_document", "--split", "90,10,0", "--num-layers", "1",
               "--hidden-size", "32", "--num-attention-heads", "2", "--seq-length", "32", "--micro-batch-size", "2",
               "--global-batch-size", "2", "--train-iters", "2", "--eval-iters", "1", "--eval-interval", "2",
               "--lr", "1e-3", "--eod-mask-loss"] + args
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=work,
                           env=dict(os.environ, STARPU_SILENT="1", STARPU_HOME=os.path.join(work, "starpu")))
        ok = r.returncode == 0 and f"vocab {padded} (padded)" in r.stdout
        print(f"{name}: mgraph-run trains on it, vocab {tok.vocab_size} -> {padded}: {'ok' if ok else 'FAIL'}")
        if not ok:
            print(r.stdout[-2000:], r.stderr[-2000:])
        failures += not ok
sys.exit(1 if failures else 0)
