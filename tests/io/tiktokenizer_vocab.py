"""A Megatron tiktoken vocabulary made from a byte-level BPE that the tokenizers library
trains on a text, and tiktoken's Encoding built from it as Megatron's TikTokenTokenizer
builds it (tests/io/tiktokenizer.py, preprocess_megatron.py)."""
import base64
import json

import tiktoken
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

# Megatron's patterns and special tokens (tiktoken_tokenizer.py)
PATTERNS = {
    "v1": r"[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
    "v2": "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?"
          "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|"
          "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
}
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>"]


def vocabulary(shakespeare):
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tr = trainers.BpeTrainer(vocab_size=3000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    t.train_from_iterator([shakespeare], tr)
    m = json.loads(t.to_str())["model"]
    b2u = {}
    n = 0
    for b in range(256):
        printable = ord("!") <= b <= ord("~") or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF
        b2u[b] = chr(b if printable else 256 + n)
        n += not printable
    u2b = {u: b for b, u in b2u.items()}
    ranks = [bytes([b]) for b in range(256)]
    seen = set(ranks)
    for a, b in (x if isinstance(x, list) else x.split(" ") for x in m["merges"]):
        tok = bytes(u2b[c] for c in a + b)
        if tok not in seen:
            seen.add(tok)
            ranks.append(tok)
    return [{"rank": i, "token_bytes": base64.b64encode(tb).decode(), "token_str": tb.decode("utf-8", "replace")}
            for i, tb in enumerate(ranks)]


def megatron_encoding(path, pattern, special_tokens, num_special, vocab_size):
    """TikTokenTokenizer.__init__'s encoding, its lines in order."""
    special_tokens = special_tokens + [f"<SPECIAL_{i}>" for i in range(len(special_tokens), num_special)]
    vocab = json.load(open(path))[: vocab_size - num_special]
    token2id = {base64.b64decode(x["token_bytes"]): x["rank"] + num_special for x in vocab}
    return tiktoken.Encoding(name="test", pat_str=PATTERNS[pattern], mergeable_ranks=token2id,
                             special_tokens={t: i for i, t in enumerate(special_tokens)})
