#!/usr/bin/env python3
"""The LLaMA-family model against Hugging Face transformers (a reference check, not a
runtime dependency).

  llama_hf.py TEST_MODELS_LLAMA WORK_DIR

For two variants (Mistral-like: GQA 8 heads / 2 groups, RMSNorm, RoPE base 10000, SwiGLU,
untied, no biases; LLaMA-3-like RoPE base 500000 with biases and a tied output layer),
`test_models_llama dump` writes mgraph's parameters (random, N(0, 0.1)), its loss and
its gradients on fixed tokens. The parameters are loaded *by name* into
LlamaForCausalLM: the names, [out, in] layouts, head order, rotate-half RoPE, GQA
grouping, RMSNorm and SwiGLU must all be Hugging Face's for the loss to agree (relative
1e-5) and every gradient (max difference <= 1e-4 of the tensor's largest entry).
Exits 77 (skipped), loudly, where the pinned torch/transformers are missing; under CI or
tools/test.sh that is a failure (tests/support/reference.py).
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import reference  # noqa: E402  (tests/support/reference.py)

reference.require("numpy", "torch", "transformers")
import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

EXE, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
failures = 0


def check(ok, msg):
    global failures
    if not ok:
        failures += 1
        print("FAIL:", msg)


for variant in (0, 1):
    d = os.path.join(WORK, f"variant{variant}")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    p = subprocess.run([EXE, "dump", d, str(variant)], capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stdout, p.stderr)
        check(False, f"test_models_llama dump {variant} exited {p.returncode}")
        continue
    cfg = LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=8, num_key_value_heads=2, rms_norm_eps=1e-5,
                      rope_theta=10000.0 if variant == 0 else 500000.0, max_position_embeddings=16,
                      tie_word_embeddings=variant == 1, attention_bias=variant == 1, mlp_bias=variant == 1,
                      attn_implementation="eager")
    model = LlamaForCausalLM(cfg).float()
    params = dict(model.named_parameters())
    ours = {}
    for line in open(os.path.join(d, "params.txt")):
        name, *shape = line.split()
        ours[name] = [int(x) for x in shape]
    check(set(ours) == set(params), f"variant {variant}: names differ: {sorted(set(ours) ^ set(params))}")
    with torch.no_grad():
        for name, shape in ours.items():
            if name not in params:
                continue
            check(list(params[name].shape) == shape, f"{name}: shape {shape}, transformers {list(params[name].shape)}")
            a = np.fromfile(os.path.join(d, name + ".bin"), dtype=np.float32).reshape(shape)
            params[name].copy_(torch.from_numpy(a))
    t = np.fromfile(os.path.join(d, "tokens.bin"), dtype=np.int32).reshape(2, 16, 2)  # [tokens|targets, s, b]
    tokens = torch.from_numpy(t[0].T.copy()).long()  # mgraph [s, b] -> transformers [b, s]
    targets = torch.from_numpy(t[1].T.copy()).long()
    logits = model(input_ids=tokens).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab_size), targets.reshape(-1))
    loss.backward()
    ref = loss.item()
    got = float(open(os.path.join(d, "loss.txt")).read())
    rel = abs(got - ref) / abs(ref)
    check(rel <= 1e-5, f"variant {variant}: loss {got:.9g}, transformers {ref:.9g} (relative {rel:.3g})")
    worst = 0.0
    for name in ours:
        if name not in params:
            continue
        g_ref = params[name].grad.numpy()
        g = np.fromfile(os.path.join(d, name + ".grad.bin"), dtype=np.float32).reshape(g_ref.shape)
        e = float(np.abs(g - g_ref).max() / max(np.abs(g_ref).max(), 1e-12))
        worst = max(worst, e)
        check(e <= 1e-4, f"variant {variant}: gradient of {name} differs by {e:.3g} of its largest entry")
    print(f"variant {variant}: loss {got:.9g}, transformers {ref:.9g} (relative {rel:.2g}); "
          f"{len(ours)} parameters, worst gradient difference {worst:.2g} of the tensor's largest entry")

sys.exit(1 if failures else 0)
