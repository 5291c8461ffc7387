# Generates gpt2_extra_vectors.txt: OpenAI's original GPT-2 encoder algorithm (encoder.py,
# with the 'regex' module from PyPI) on whitespace/Unicode edge cases and random strings.
# Usage: python3 gen_gpt2_extra_vectors.py [OUT]  (reads tests/data/gpt2)
import regex, json, sys
def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~")+1))+list(range(ord("¡"), ord("¬")+1))+list(range(ord("®"), ord("ÿ")+1))
    cs = bs[:]; n = 0
    for b in range(2**8):
        if b not in bs: bs.append(b); cs.append(2**8+n); n += 1
    return dict(zip(bs, [chr(n) for n in cs]))
import os
D=os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'data', 'gpt2') + '/'
enc=json.load(open(D+'vocab.json'))
merges=[tuple(l.split()) for l in open(D+'merges.txt',encoding='utf-8').read().split('\n')[1:-1]]
ranks=dict(zip(merges,range(len(merges))))
be=bytes_to_unicode()
pat=regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
def bpe(token):
    word=tuple(token)
    while len(word)>1:
        pairs=set(zip(word,word[1:]))
        b=min(pairs,key=lambda p: ranks.get(p,float('inf')))
        if b not in ranks: break
        f,s=b; nw=[]; i=0
        while i<len(word):
            try: j=word.index(f,i); nw.extend(word[i:j]); i=j
            except ValueError: nw.extend(word[i:]); break
            if word[i]==f and i<len(word)-1 and word[i+1]==s: nw.append(f+s); i+=2
            else: nw.append(word[i]); i+=1
        word=tuple(nw)
    return word
def encode(text):
    out=[]
    for t in regex.findall(pat,text):
        t=''.join(be[b] for b in t.encode('utf-8'))
        out.extend(enc[x] for x in bpe(t))
    return out
cases=['a\x85b','a\x85\x85b',' \x85 x','a\x1c\x1cb','\x1c\x1c b','a \u2028\u2028 b','x\u00a0\u00a0y','a\u200b\u200bb','a\u180e\u180eb','  \u3000\u3000x', 'tab\t\t\tx', '\r\n\r\n  y', "don't I'LL", "x\u2003\u2003 y", "\u00b2\u00b3 \u2167\u2167", "a\u0301\u0301b", "\U0001F600\U0001F600 x"]
import random
random.seed(1)
alpha=['a','b',' ','  ','\n','\t','\x85','\xa0','\u3000','é','1','22','!',"'s","'",'\u2028','\x1c','ü','中','😀','\u200b','\r']
for i in range(300): cases.append(''.join(random.choice(alpha) for _ in range(random.randint(1,12))))
with open(sys.argv[1] if len(sys.argv) > 1 else "gpt2_extra_vectors.txt", "w", encoding="utf-8") as f:
    for c in cases:
        f.write(json.dumps(c,ensure_ascii=False)+'\t'+' '.join(map(str,encode(c)))+'\n')
print(len(cases))
