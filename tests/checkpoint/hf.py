#!/usr/bin/env python3
"""mgraph-convert against Hugging Face transformers (reference check, not a runtime dependency).

  hf.py MGRAPH_RUN MGRAPH_CONVERT WORK_DIR

1. A small random GPT2LMHeadModel (every weight, bias and norm perturbed, so that a wrong
   layout cannot hide behind zeros and ones) is saved with save_pretrained, imported with
   --from-hf, and `mgraph-run --skip-train` gives transformers' loss on the same token
   windows (relative 1e-5).
2. mgraph trains that checkpoint a few iterations (--save), --to-hf exports it,
   transformers loads it as GPT2LMHeadModel and gives mgraph's loss (relative 1e-5), and
   re-importing the export reproduces the checkpoint's tensors bit for bit.
3. With activation_function "gelu" (the exact GELU, not GPT-2's tanh approximation): the
   import needs --no-bias-gelu-fusion (exit 2 naming it without), then gives transformers'
   loss, ten times closer than the tanh twin's, and exports as "gelu".
Exits 77 (skipped), loudly, where the pinned torch/transformers are missing; under CI or
tools/test.sh that is a failure (tests/support/reference.py).
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import reference  # noqa: E402  (tests/support/reference.py)

reference.require("torch", "transformers")
import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel

RUN, CONVERT, WORK = (os.path.abspath(a) for a in sys.argv[1:4])
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
os.chdir(WORK)
torch.manual_seed(0)

L, H, NH, SEQ, V = 2, 64, 4, 16, 256
MBS, GBS, EVAL_ITERS = 2, 4, 2
# Byte-level text whose validation half (--split 50,50,0) holds exactly EVAL_ITERS x GBS
# windows of SEQ + 1 tokens: --skip-train then averages over every one of them, whatever
# order it draws them in.
W = EVAL_ITERS * GBS
half = W * SEQ + 1
g = torch.Generator().manual_seed(1)
data = bytes(torch.randint(0, 256, (2 * half,), generator=g).tolist())
open("data.txt", "wb").write(data)
valid = data[half:]
windows = torch.tensor([list(valid[w * SEQ: w * SEQ + SEQ + 1]) for w in range(W)])
ARGS = ["--text-file", "data.txt", "--split", "50,50,0", "--num-layers", str(L), "--hidden-size", str(H),
        "--num-attention-heads", str(NH), "--seq-length", str(SEQ), "--micro-batch-size", str(MBS),
        "--global-batch-size", str(GBS), "--eval-iters", str(EVAL_ITERS), "--cpu-workers", "1"]


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def run(argv, what):
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stdout, p.stderr)
        fail(f"{what} exited {p.returncode}")
    return p.stdout


def hf_loss(model):
    model.eval()
    with torch.no_grad():
        logits = model(windows[:, :-1]).logits.double()
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1)).item()


def mgraph_loss(ckpt, tag):
    run([RUN, *ARGS, "--load", ckpt, "--skip-train", "--metrics-file", f"{tag}.jsonl"], f"mgraph-run --skip-train ({tag})")
    vals = [json.loads(l)["val_loss"] for l in open(f"{tag}.jsonl") if "val_loss" in l]
    if len(vals) != 1:
        fail(f"{tag}: want one validation loss, got {vals}")
    return vals[0]


def close(a, b, what):
    rel = abs(a - b) / abs(b)
    print(f"{what}: mgraph {a:.9f}, transformers {b:.9f}, relative difference {rel:.2e}")
    if not rel <= 1e-5:
        fail(f"{what}: relative difference {rel:.2e} > 1e-5")


# 1. transformers -> mgraph
cfg = GPT2Config(vocab_size=V, n_positions=SEQ, n_embd=H, n_layer=L, n_head=NH, activation_function="gelu_new",
                 resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5, bos_token_id=None, eos_token_id=None)
hf = GPT2LMHeadModel(cfg)
with torch.no_grad():
    for name, p in hf.named_parameters():
        p.copy_(torch.randn_like(p) * (0.5 if p.dim() == 1 else 0.15) + (1.0 if "ln" in name and "weight" in name else 0.0))
hf.save_pretrained("hf", safe_serialization=True)
run([CONVERT, "--from-hf", "hf", "--save", "ck"], "mgraph-convert --from-hf")
close(mgraph_loss("ck", "imported"), hf_loss(hf), "imported GPT-2")

# 2. mgraph (trained) -> transformers
run([RUN, *ARGS, "--load", "ck", "--train-iters", "3", "--save", "trained", "--lr", "1e-3",
     "--lr-warmup-iters", "0"], "mgraph-run training the import")
run([CONVERT, "--load", "trained", "--to-hf", "hf2"], "mgraph-convert --to-hf")
hf2 = GPT2LMHeadModel.from_pretrained("hf2")
if hf2.transformer.wte.weight.data_ptr() != hf2.lm_head.weight.data_ptr() and not torch.equal(hf2.transformer.wte.weight, hf2.lm_head.weight):
    fail("exported model's output layer is not tied to wte")
if torch.equal(hf2.transformer.h[0].attn.c_attn.weight, hf.transformer.h[0].attn.c_attn.weight):
    fail("training changed nothing")
close(mgraph_loss("trained", "trained"), hf_loss(hf2), "trained mgraph checkpoint in transformers")
# and back: the export re-imported holds the same bits
run([CONVERT, "--from-hf", "hf2", "--save", "back"], "mgraph-convert --from-hf (round trip)")
run([CONVERT, "--load", "back", "--to-hf", "hf3"], "mgraph-convert --to-hf (round trip)")
from safetensors.torch import load_file  # noqa: E402  (installed with transformers)
a, b = load_file("hf2/model.safetensors"), load_file("hf3/model.safetensors")
if a.keys() != b.keys() or any(not torch.equal(a[k], b[k]) for k in a):
    fail("round trip --to-hf -> --from-hf -> --to-hf changed tensors")

# 3. the exact GELU (transformers' "gelu", torch's F.gelu; Megatron's unfused MLP): imported,
# it needs --no-bias-gelu-fusion, evaluates as transformers does, and exports as "gelu"
cfg3 = GPT2Config(vocab_size=V, n_positions=SEQ, n_embd=H, n_layer=L, n_head=NH, activation_function="gelu",
                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5, bos_token_id=None,
                  eos_token_id=None)
hf3 = GPT2LMHeadModel(cfg3)
with torch.no_grad():  # larger weights: the MLP's inputs reach where the two GELUs differ most
    for name, p in hf3.named_parameters():
        p.copy_(torch.randn_like(p) * (0.5 if p.dim() == 1 else 0.3) + (1.0 if "ln" in name and "weight" in name else 0.0))
hf3.save_pretrained("hf_erf", safe_serialization=True)
tanh_twin = GPT2LMHeadModel(GPT2Config(**{**cfg3.to_dict(), "activation_function": "gelu_new"}))
tanh_twin.load_state_dict(hf3.state_dict())
exact, approx = hf_loss(hf3), hf_loss(tanh_twin)
print(f"transformers on the same weights: gelu {exact:.9f}, gelu_new {approx:.9f}, relative difference "
      f"{abs(exact - approx) / exact:.2e}")
run([CONVERT, "--from-hf", "hf_erf", "--save", "ck_erf"], "mgraph-convert --from-hf (gelu)")
p = subprocess.run([RUN, *ARGS, "--load", "ck_erf", "--skip-train"], capture_output=True, text=True)
if p.returncode != 2 or "--no-bias-gelu-fusion" not in p.stderr:
    fail(f"loading an exact-GELU import without --no-bias-gelu-fusion: exit {p.returncode}, {p.stderr}")
ARGS += ["--no-bias-gelu-fusion"]
got = mgraph_loss("ck_erf", "erf")
close(got, exact, "imported GPT-2 with the exact GELU")
if not abs(got - exact) < abs(exact - approx) / 10:
    fail("the two GELUs differ too little here to tell which one mgraph applied")
run([CONVERT, "--load", "ck_erf", "--to-hf", "hf_erf2"], "mgraph-convert --to-hf (gelu)")
if json.load(open("hf_erf2/config.json"))["activation_function"] != "gelu":
    fail("the export of an exact-GELU checkpoint does not say activation_function gelu")
print(f"ok: transformers {transformers.__version__}, torch {torch.__version__}")
