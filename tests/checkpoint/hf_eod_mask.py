#!/usr/bin/env python3
"""mgraph-run --eod-mask-loss against Hugging Face transformers (reference check, not a
runtime dependency).

  hf_eod_mask.py MGRAPH_RUN MGRAPH_CONVERT VOCAB_JSON MERGES_TXT WORK_DIR

A random GPT2LMHeadModel over GPT-2's vocabulary is imported with --from-hf. The text is documents of 1 to 6 one-letter words, each ended by
"<|endoftext|>", so the end-of-document token falls anywhere in the evaluation windows
and every window and batch keeps a different number of tokens. `mgraph-run --skip-train
--eod-mask-loss` on the validation half must give transformers' cross-entropy with
Megatron's loss mask (label -100 where the input token is EOD), averaged over all the
kept tokens of all the windows (Megatron's evaluation), within 1e-5 relative. The
unmasked loss of the same windows must be visibly different, so that the check can fail.
Exits 77 (skipped) with a loud message when torch or transformers cannot be imported.
"""
import json
import os
import random
import shutil
import subprocess
import sys

try:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
except Exception as e:  # noqa: BLE001
    print("=" * 78)
    print(f"SKIPPED: torch/transformers not importable ({e}); tools/install-deps.sh installs them")
    print("=" * 78)
    sys.exit(77)

RUN, CONVERT, VOCAB, MERGES, WORK = (os.path.abspath(a) for a in sys.argv[1:6])
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
os.chdir(WORK)
torch.manual_seed(0)

# GPT-2's vocabulary unpadded (--make-vocab-size-divisible-by 1: no zero rows in the softmax)
L, H, NH, SEQ, V = 1, 32, 2, 16, 50257
MBS, GBS, EVAL_ITERS = 2, 4, 2
EOD = 50256

# The token stream, written as text: " a" .. " z" are single GPT-2 tokens, and the text
# of one is its id's only spelling, so the text tokenizes back to exactly this stream.
vocab = json.load(open(VOCAB, encoding="utf-8"))
letters = [(" " + c, vocab["\u0120" + c]) for c in "abcdefghijklmnopqrstuvwxyz"]
W = EVAL_ITERS * GBS
half = W * SEQ + 1  # the validation half (--split 50,50,0) holds exactly W windows
rng = random.Random(3)
ids, text = [], []
while len(ids) < 2 * half:
    for _ in range(rng.randint(1, 6)):
        s, i = rng.choice(letters)
        ids.append(i)
        text.append(s)
    ids.append(EOD)
    text.append("<|endoftext|>")
while len(ids) > 2 * half:  # end on a whole token
    ids.pop()
    text.pop()
open("data.txt", "w", encoding="utf-8").write("".join(text))
valid = ids[half:]
windows = torch.tensor([valid[w * SEQ: w * SEQ + SEQ + 1] for w in range(W)])
inputs, labels = windows[:, :-1], windows[:, 1:].clone()
masked = labels.clone()
masked[inputs == EOD] = -100
kept = [int((masked[w] != -100).sum()) for w in range(W)]
print(f"{W} windows of {SEQ} positions, kept per window: {kept}")


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def run(argv, what):
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stdout, p.stderr)
        fail(f"{what} exited {p.returncode}")
    return p.stdout


cfg = GPT2Config(vocab_size=V, n_positions=SEQ, n_embd=H, n_layer=L, n_head=NH, activation_function="gelu_new",
                 resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5, bos_token_id=None,
                 eos_token_id=None)
hf = GPT2LMHeadModel(cfg)
with torch.no_grad():
    for name, p in hf.named_parameters():
        p.copy_(torch.randn_like(p) * (0.5 if p.dim() == 1 else 0.3) + (1.0 if "ln" in name and "weight" in name else 0.0))
    hf.eval()
    logits = hf(inputs).logits.double().reshape(-1, V)
    want = torch.nn.functional.cross_entropy(logits, masked.reshape(-1), ignore_index=-100).item()
    unmasked = torch.nn.functional.cross_entropy(logits, labels.reshape(-1)).item()
hf.save_pretrained("hf", safe_serialization=True)
run([CONVERT, "--from-hf", "hf", "--save", "ck", "--make-vocab-size-divisible-by", "1", "--tokenizer-type",
     "GPT2BPETokenizer"], "mgraph-convert --from-hf")

ARGS = ["--text-file", "data.txt", "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", VOCAB, "--merge-file", MERGES,
        "--split", "50,50,0", "--num-layers", str(L), "--hidden-size", str(H), "--num-attention-heads", str(NH),
        "--seq-length", str(SEQ), "--micro-batch-size", str(MBS), "--global-batch-size", str(GBS),
        "--eval-iters", str(EVAL_ITERS), "--make-vocab-size-divisible-by", "1", "--cpu-workers", "1", "--load", "ck",
        "--skip-train"]
got = {}
for tag, extra in (("masked", ["--eod-mask-loss"]), ("unmasked", [])):
    run([RUN, *ARGS, *extra, "--metrics-file", f"{tag}.jsonl"], f"mgraph-run --skip-train ({tag})")
    vals = [json.loads(l)["val_loss"] for l in open(f"{tag}.jsonl") if "val_loss" in l]
    if len(vals) != 1:
        fail(f"{tag}: want one validation loss, got {vals}")
    got[tag] = vals[0]

for tag, ref in (("masked", want), ("unmasked", unmasked)):
    rel = abs(got[tag] - ref) / abs(ref)
    print(f"{tag}: mgraph {got[tag]:.9f}, transformers {ref:.9f}, relative difference {rel:.2e}")
    if not rel <= 1e-5:
        fail(f"{tag}: relative difference {rel:.2e} > 1e-5")
if abs(want - unmasked) / abs(unmasked) < 1e-3:
    fail(f"the mask hardly changes the loss ({want} against {unmasked}): no test")
print("ok: --eod-mask-loss gives transformers' loss with Megatron's loss mask")
