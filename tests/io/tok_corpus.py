"""The texts the tokenizer tests encode (tests/io/hf_tokenizers.py, tiktokenizer.py,
preprocess_megatron.py): the whole of Tiny Shakespeare, 1500 of its lines, the GPT-2 and
Mistral test vectors' texts and edge cases (special tokens in the text, white space runs,
NUL, CJK, emoji, combining marks, long runs)."""
import json
import os


def vector_texts(path):
    out = []
    for line in open(path, encoding="utf-8"):
        out.append(json.loads(line.rstrip("\n").rsplit("\t", 1)[0]))
    return out


def load_texts(data):
    shakespeare = open(os.path.join(data, "tinyshakespeare.txt"), encoding="utf-8").read()
    texts = [shakespeare] + shakespeare.split("\n")[:1500]
    texts += vector_texts(os.path.join(data, "gpt2/encode_vectors.txt"))
    texts += vector_texts(os.path.join(data, "mistral/encode_vectors.txt"))
    texts += [
        "", " ", "  ", "\n", "\n\n\n", " \t\r\n x", "a\0b", "héllo wörld", "e\u0301", "Ångström ﬁ ①", "日本語のテキスト 中文",
        "emoji 😀👍🏽 ok", "<|endoftext|>", "a<|endoftext|>b", "<|begin_of_text|>Hello", "Hello<|end_of_text|>",
        "<s>Hello</s>", " <s> x </s> ", "x <think>y</think> z", "<think>", "word<think>word", "123456789 12 1",
        "tab\tseparated\tvalues", "   three spaces", "trailing   ", "ALL CAPS AND lower", "don't I'M we'LL",
        "<|reserved_special_token_3|><|reserved_special_token_3|>", "<unk>", "<0x41>", "▁lead ▁▁", "\u00a0nbsp\u2028ls",
        "\u0085nel\u0085", "x" * 3000, " y" * 500, "line one\r\nline two\r\n",
        "</s><s><mask><SPECIAL_7><SPECIAL_999><SPECIAL_1000>", "a<sep>b<cls>", "<SPECIAL_12", "can't 9001 //path/x\r\n\r\n",
    ]
    return shakespeare, texts
