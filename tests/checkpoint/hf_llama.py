#!/usr/bin/env python3
"""mgraph-convert's LlamaForCausalLM side, and its Qwen2 / Qwen3 / Mistral variants, against
Hugging Face transformers (reference check, not a runtime dependency).

  hf_llama.py MGRAPH_RUN MGRAPH_CONVERT WORK_DIR

For five variants (Mistral-like: grouped-query attention 8 heads / 2 groups, untied output
layer, no biases, RoPE base 10000, rms_norm_eps 1e-5; LLaMA-3-like: 4 heads without
grouping, tied output layer, biases, RoPE base 500000, rms_norm_eps 1e-6,
max_position_embeddings larger than the sequence; Qwen2-like: Qwen2ForCausalLM, biases on
q, k, v only, mgraph's --disable-bias-linear --add-qkv-bias; Qwen3-like: Qwen3ForCausalLM,
each head's q and k RMS-normalised before RoPE, mgraph's --qk-layernorm; Mistral with a
sliding window: MistralForCausalLM, sliding_window 5 of the 16 tokens, mgraph's
--window-size 4,0, the window changing transformers' loss by far more than the bound):
1. A random model of the class (every weight, bias and norm perturbed, so that a wrong
   layout cannot hide behind zeros and ones) is saved with save_pretrained, imported with
   --from-hf, and `mgraph-run --skip-train` with the matching LLaMA flags gives
   transformers' loss on the same token windows (relative 1e-5); saved in shards
   (model.safetensors.index.json), it imports to the same tensors.
2. mgraph trains that checkpoint a few iterations (--save), --to-hf exports it,
   the class's from_pretrained loads it with no missing or unexpected tensor and
   gives mgraph's loss (relative 1e-5), and re-importing the export reproduces it bit for
   bit.
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

reference.require("torch", "transformers", "safetensors")
import torch
import transformers
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)
from safetensors.torch import load_file

RUN, CONVERT, WORK = (os.path.abspath(a) for a in sys.argv[1:4])
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
os.chdir(WORK)
torch.manual_seed(0)

L, H, FFN, SEQ, V = 2, 64, 96, 16, 256
MBS, GBS, EVAL_ITERS = 2, 4, 2
# Byte-level text whose validation half (--split 50,50,0) holds exactly EVAL_ITERS x GBS
# windows of SEQ + 1 tokens: --skip-train then averages over every one of them.
W = EVAL_ITERS * GBS
half = W * SEQ + 1
g = torch.Generator().manual_seed(1)
data = bytes(torch.randint(0, 256, (2 * half,), generator=g).tolist())
open("data.txt", "wb").write(data)
valid = data[half:]
windows = torch.tensor([list(valid[w * SEQ: w * SEQ + SEQ + 1]) for w in range(W)])

VARIANTS = [
    dict(name="mistral-like", heads=8, groups=2, tied=False, bias=False, theta=10000.0, eps=1e-5, positions=SEQ),
    dict(name="llama3-like", heads=4, groups=4, tied=True, bias=True, theta=500000.0, eps=1e-6, positions=4 * SEQ),
    dict(name="qwen2-like", heads=8, groups=2, tied=False, bias=False, theta=1000000.0, eps=1e-6, positions=SEQ,
         cls="qwen2"),
    dict(name="qwen3-like", heads=4, groups=2, tied=True, bias=False, theta=1000000.0, eps=1e-6, positions=SEQ,
         cls="qwen3"),
    dict(name="mistral-window", heads=8, groups=2, tied=False, bias=False, theta=10000.0, eps=1e-5, positions=SEQ,
         cls="mistral", window=5),
]


def hf_model(v):
    """A random model of the variant's class."""
    common = dict(vocab_size=V, hidden_size=H, intermediate_size=FFN, num_hidden_layers=L,
                  num_attention_heads=v["heads"], num_key_value_heads=v["groups"], rms_norm_eps=v["eps"],
                  max_position_embeddings=v["positions"], tie_word_embeddings=v["tied"], bos_token_id=None,
                  eos_token_id=None)
    cls = v.get("cls", "llama")
    if cls == "qwen2":
        cfg = Qwen2Config(**common, rope_parameters={"rope_type": "default", "rope_theta": v["theta"]})
        return Qwen2ForCausalLM._from_config(cfg, attn_implementation="eager")
    if cls == "mistral":
        cfg = MistralConfig(**common, sliding_window=v["window"],
                            rope_parameters={"rope_type": "default", "rope_theta": v["theta"]})
        return MistralForCausalLM._from_config(cfg, attn_implementation="eager")
    if cls == "qwen3":
        cfg = Qwen3Config(**common, head_dim=H // v["heads"], attention_bias=False,
                          rope_parameters={"rope_type": "default", "rope_theta": v["theta"]})
        return Qwen3ForCausalLM._from_config(cfg, attn_implementation="eager")
    cfg = LlamaConfig(**common, rope_theta=v["theta"], attention_bias=v["bias"], mlp_bias=v["bias"],
                      attn_implementation="eager")
    return LlamaForCausalLM(cfg)


HF_CLASS = {"llama": LlamaForCausalLM, "qwen2": Qwen2ForCausalLM, "qwen3": Qwen3ForCausalLM,
            "mistral": MistralForCausalLM}


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def run(argv, what):
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stdout, p.stderr)
        fail(f"{what} exited {p.returncode}")
    return p.stdout


def mgraph_args(v):
    a = ["--text-file", "data.txt", "--split", "50,50,0", "--num-layers", str(L), "--hidden-size", str(H),
         "--ffn-hidden-size", str(FFN), "--num-attention-heads", str(v["heads"]), "--seq-length", str(SEQ),
         "--max-position-embeddings", str(v["positions"]), "--micro-batch-size", str(MBS), "--global-batch-size",
         str(GBS), "--eval-iters", str(EVAL_ITERS), "--cpu-workers", "1", "--normalization", "RMSNorm",
         "--position-embedding-type", "rope", "--swiglu", "--rotary-base", str(v["theta"]), "--norm-epsilon", str(v["eps"])]
    if v["groups"] != v["heads"]:
        a += ["--group-query-attention", "--num-query-groups", str(v["groups"])]
    if not v["tied"]:
        a += ["--untie-embeddings-and-output-weights"]
    if not v["bias"]:
        a += ["--disable-bias-linear"]
    a += {"qwen2": ["--add-qkv-bias"], "qwen3": ["--qk-layernorm"]}.get(v.get("cls"), [])
    if v.get("window"):
        a += ["--window-size", f"{v['window'] - 1},0"]
    return a


def hf_loss(model):
    model.eval()
    with torch.no_grad():
        logits = model(windows[:, :-1]).logits.double()
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1)).item()


def mgraph_loss(v, ckpt, tag):
    run([RUN, *mgraph_args(v), "--load", ckpt, "--skip-train", "--metrics-file", f"{tag}.jsonl"],
        f"mgraph-run --skip-train ({tag})")
    vals = [json.loads(l)["val_loss"] for l in open(f"{tag}.jsonl") if "val_loss" in l]
    if len(vals) != 1:
        fail(f"{tag}: want one validation loss, got {vals}")
    return vals[0]


def close(a, b, what):
    rel = abs(a - b) / abs(b)
    print(f"{what}: mgraph {a:.9f}, transformers {b:.9f}, relative difference {rel:.2e}")
    if not rel <= 1e-5:
        fail(f"{what}: relative difference {rel:.2e} > 1e-5")


for v in VARIANTS:
    n = v["name"]
    # 1. transformers -> mgraph
    hf = hf_model(v).float()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            p.copy_(torch.randn_like(p) * (0.3 if p.dim() == 1 else 0.15) + (1.0 if "norm" in name else 0.0))
    hf.save_pretrained(f"{n}-hf", safe_serialization=True)
    run([CONVERT, "--from-hf", f"{n}-hf", "--save", f"{n}-ck"], f"{n}: mgraph-convert --from-hf")
    close(mgraph_loss(v, f"{n}-ck", f"{n}-imported"), hf_loss(hf), f"{n}: imported {type(hf).__name__}")
    if v.get("window"):  # the window matters: transformers without it is far off
        with_window = hf_loss(hf)
        hf.config.sliding_window = None
        whole = hf_loss(hf)
        hf.config.sliding_window = v["window"]
        print(f"{n}: transformers' loss with the window {with_window:.6f}, without {whole:.6f}")
        if not abs(whole - with_window) > 1e-3 * abs(with_window):
            fail(f"{n}: the window changes transformers' loss by too little for the check to mean anything")
    # the same model saved in shards (model.safetensors.index.json) imports to the same tensors
    hf.save_pretrained(f"{n}-hf-sharded", safe_serialization=True, max_shard_size="64KB")
    if not os.path.exists(f"{n}-hf-sharded/model.safetensors.index.json"):
        fail(f"{n}: save_pretrained wrote no shards: {os.listdir(f'{n}-hf-sharded')}")
    run([CONVERT, "--from-hf", f"{n}-hf-sharded", "--save", f"{n}-ck-sharded"], f"{n}: mgraph-convert --from-hf (shards)")
    run([CONVERT, "--load", f"{n}-ck-sharded", "--to-hf", f"{n}-hf-unsharded"], f"{n}: mgraph-convert --to-hf (shards)")
    ref = {k: t for k, t in hf.state_dict().items() if not (v["tied"] and k == "lm_head.weight")}
    got = load_file(f"{n}-hf-unsharded/model.safetensors")
    if ref.keys() != got.keys() or any(not torch.equal(ref[k], got[k]) for k in ref):
        fail(f"{n}: the sharded import differs from transformers' tensors: {sorted(set(ref) ^ set(got))}")
    print(f"{n}: {sum(f.endswith('.safetensors') for f in os.listdir(f'{n}-hf-sharded'))} shards imported, {len(got)} tensors equal")

    # 2. mgraph (trained) -> transformers
    run([RUN, *mgraph_args(v), "--load", f"{n}-ck", "--train-iters", "3", "--save", f"{n}-trained", "--lr", "1e-3",
         "--lr-warmup-iters", "0"], f"{n}: mgraph-run training the import")
    run([CONVERT, "--load", f"{n}-trained", "--to-hf", f"{n}-hf2"], f"{n}: mgraph-convert --to-hf")
    hf2, info = HF_CLASS[v.get("cls", "llama")].from_pretrained(f"{n}-hf2", output_loading_info=True,
                                                                 attn_implementation="eager")
    bad = {k: info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys") if info.get(k)}
    if bad:
        fail(f"{n}: transformers loaded the export with {bad}")
    tied = hf2.lm_head.weight.data_ptr() == hf2.model.embed_tokens.weight.data_ptr()
    if tied != v["tied"]:
        fail(f"{n}: exported lm_head tied {tied}, want {v['tied']}")
    if (hf2.config.num_key_value_heads != v["groups"] or hf2.config.rms_norm_eps != v["eps"] or
            getattr(hf2.config, "sliding_window", None) != v.get("window")):
        fail(f"{n}: exported config {hf2.config}")
    if torch.equal(hf2.model.layers[0].self_attn.k_proj.weight, hf.model.layers[0].self_attn.k_proj.weight):
        fail(f"{n}: training changed nothing")
    close(mgraph_loss(v, f"{n}-trained", f"{n}-trained"), hf_loss(hf2), f"{n}: trained mgraph checkpoint in transformers")
    # and back: the export re-imported holds the same bits
    run([CONVERT, "--from-hf", f"{n}-hf2", "--save", f"{n}-back"], f"{n}: mgraph-convert --from-hf (round trip)")
    run([CONVERT, "--load", f"{n}-back", "--to-hf", f"{n}-hf3"], f"{n}: mgraph-convert --to-hf (round trip)")
    a, b = load_file(f"{n}-hf2/model.safetensors"), load_file(f"{n}-hf3/model.safetensors")
    if a.keys() != b.keys() or any(not torch.equal(a[k], b[k]) for k in a):
        fail(f"{n}: round trip --to-hf -> --from-hf -> --to-hf changed tensors")
print(f"ok: transformers {transformers.__version__}, torch {torch.__version__}")
