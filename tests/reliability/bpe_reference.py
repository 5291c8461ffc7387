"""OpenAI's GPT-2 bpe() (encoder.py), the reference for mgraph's long-word merges.
   bpe_reference.py VOCAB_JSON MERGES_TXT WORDS_FILE  -> one line of ids per word"""
import json
import sys


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def get_pairs(word):
    return set(zip(word, word[1:]))


def bpe(token, ranks):
    word = tuple(token)
    pairs = get_pairs(word)
    while pairs:
        bigram = min(pairs, key=lambda p: ranks.get(p, float("inf")))
        if bigram not in ranks:
            break
        first, second = bigram
        new_word, i = [], 0
        while i < len(word):
            try:
                j = word.index(first, i)
            except ValueError:
                new_word.extend(word[i:])
                break
            new_word.extend(word[i:j])
            i = j
            if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                new_word.append(first + second)
                i += 2
            else:
                new_word.append(word[i])
                i += 1
        word = tuple(new_word)
        if len(word) == 1:
            break
        pairs = get_pairs(word)
    return word


vocab = json.load(open(sys.argv[1], encoding="utf-8"))
lines = open(sys.argv[2], encoding="utf-8").read().split("\n")[1:]
ranks = {tuple(l.split()): i for i, l in enumerate(lines) if l}
b2u = bytes_to_unicode()
for w in open(sys.argv[3], encoding="utf-8").read().split("\n"):
    if w:
        print(" ".join(str(vocab[t]) for t in bpe("".join(b2u[b] for b in w.encode("utf-8")), ranks)))
