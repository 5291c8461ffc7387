#!/usr/bin/env python3
"""mgraph-run's document flags against Hugging Face transformers (reference check, not a
runtime dependency): --eod-mask-loss, --reset-position-ids, --reset-attention-mask.

  hf_documents.py MGRAPH_RUN MGRAPH_CONVERT VOCAB_JSON MERGES_TXT WORK_DIR

A random GPT2LMHeadModel (learned positions) over GPT-2's vocabulary is imported with
--from-hf. The text is documents of 1 to 6 one-letter words, each ended by
"<|endoftext|>", so the end-of-document token falls anywhere in the evaluation windows
and every window and batch keeps a different number of tokens. `mgraph-run --skip-train`
on the validation half, with each flag and without, must give transformers' loss of the
same windows computed independently of mgraph, within 1e-5 relative:
  - --eod-mask-loss: cross-entropy with Megatron's loss mask (label -100 where the input
    token is EOD), averaged over all the kept tokens of all the windows (Megatron's
    evaluation);
  - --reset-position-ids: the whole window with position_ids restarting at 0 after each
    EOD of the input (Megatron's _get_ltor_masks_and_position_ids);
  - --reset-attention-mask: each document of the window run through the model on its
    own, at its positions in the window (a token sees only its document);
  - both: each document on its own from position 0.
Each must differ visibly from the plain loss, so that the check can fail.
Exits 77 (skipped), loudly, where the pinned torch/transformers are missing; under CI or
tools/test.sh that is a failure (tests/support/reference.py).
"""
import json
import os
import random
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import reference  # noqa: E402  (tests/support/reference.py)

reference.require("torch", "transformers")
import torch
from transformers import GPT2Config, GPT2LMHeadModel

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


def documents(x):
    """[start, end) of each document of input window x: an EOD ends its own."""
    spans, a = [], 0
    for t, tok in enumerate(x.tolist()):
        if tok == EOD:
            spans.append((a, t + 1))
            a = t + 1
    if a < len(x):
        spans.append((a, len(x)))
    return spans


def window_logits(model, x, reset_positions, per_document):
    """logits [SEQ, V] of window x, computed by transformers alone."""
    if not per_document:
        pos = torch.arange(SEQ)
        if reset_positions:
            for a, e in documents(x):
                pos[a:e] = torch.arange(e - a)
        return model(x[None], position_ids=pos[None]).logits[0]
    parts = []
    for a, e in documents(x):
        pos = torch.arange(e - a) if reset_positions else torch.arange(a, e)
        parts.append(model(x[None, a:e], position_ids=pos[None]).logits[0])
    return torch.cat(parts)


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
    xent = torch.nn.functional.cross_entropy
    want = {"eod-mask-loss": xent(logits, masked.reshape(-1), ignore_index=-100).item(),
            "plain": xent(logits, labels.reshape(-1)).item()}
    for tag, reset, per_doc in (("reset-position-ids", True, False), ("reset-attention-mask", False, True),
                                ("reset-position-ids+reset-attention-mask", True, True)):
        lg = torch.cat([window_logits(hf, inputs[w], reset, per_doc) for w in range(W)]).double()
        want[tag] = xent(lg, labels.reshape(-1)).item()
hf.save_pretrained("hf", safe_serialization=True)
run([CONVERT, "--from-hf", "hf", "--save", "ck", "--make-vocab-size-divisible-by", "1", "--tokenizer-type",
     "GPT2BPETokenizer"], "mgraph-convert --from-hf")

ARGS = ["--text-file", "data.txt", "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", VOCAB, "--merge-file", MERGES,
        "--split", "50,50,0", "--num-layers", str(L), "--hidden-size", str(H), "--num-attention-heads", str(NH),
        "--seq-length", str(SEQ), "--micro-batch-size", str(MBS), "--global-batch-size", str(GBS),
        "--eval-iters", str(EVAL_ITERS), "--make-vocab-size-divisible-by", "1", "--cpu-workers", "1", "--load", "ck",
        "--skip-train"]
for tag, ref in want.items():
    flags = [] if tag == "plain" else ["--" + f for f in tag.split("+")]
    run([RUN, *ARGS, *flags, "--metrics-file", f"{tag}.jsonl"], f"mgraph-run --skip-train {' '.join(flags)}")
    vals = [json.loads(l)["val_loss"] for l in open(f"{tag}.jsonl") if "val_loss" in l]
    if len(vals) != 1:
        fail(f"{tag}: want one validation loss, got {vals}")
    rel = abs(vals[0] - ref) / abs(ref)
    moved = abs(ref - want["plain"]) / abs(want["plain"])
    print(f"{tag}: mgraph {vals[0]:.9f}, transformers {ref:.9f}, relative difference {rel:.2e}"
          + ("" if tag == "plain" else f" (the flag moves the loss by {moved:.2%})"))
    if not rel <= 1e-5:
        fail(f"{tag}: relative difference {rel:.2e} > 1e-5")
    if tag != "plain" and moved < 1e-3:
        fail(f"{tag} hardly changes the loss ({ref} against {want['plain']}): no test")
print("ok: --eod-mask-loss, --reset-position-ids and --reset-attention-mask give transformers' losses")
