#!/usr/bin/env python3
"""mgraph's DeepSeek-V3-class model against Hugging Face transformers' DeepseekV3ForCausalLM
(a reference check, not a runtime dependency).

  deepseek_hf.py TEST_MODELS_DEEPSEEK WORK_DIR

For each variant `test_models_deepseek dump DIR VARIANT` writes mgraph's parameters (random,
norms perturbed from one), its loss and its gradients on fixed tokens, and the config it
used. The parameters are loaded *by name* into DeepseekV3ForCausalLM (random tiny config
from the same numbers, no hub access): the names, [out, in] layouts, per-head [nope, rope]
and [k_nope, v] splits, the shared RoPE key, the interleaved RoPE pairing, YaRN's
frequencies, cos/sin factor and softmax scale must all be transformers' for the loss to
agree (relative 1e-5) and every gradient (max difference <= 1e-4 of the tensor's largest
entry).
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

reference.require("numpy", "torch", "transformers")
import numpy as np
import torch
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

EXE, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
VARIANTS = {0: "MLA, q latent, YaRN factor 4 with mscale", 1: "MLA, q from the hidden state, unscaled RoPE",
            2: "MLA, a dense layer, then DeepSeek-V3's MoE: sigmoid routing with the expert bias, 4 of 2 of 4 groups, "
               "scaling 2.5, a shared expert"}
# mgraph's MoE names (Megatron's) -> DeepseekV3's; the expert bias is a buffer there
RENAME = [(".mlp.router.weight", ".mlp.gate.weight"), (".mlp.router.expert_bias", ".mlp.gate.e_score_correction_bias"),
          (".mlp.experts.fc1.weight", ".mlp.experts.gate_up_proj"), (".mlp.experts.fc2.weight", ".mlp.experts.down_proj")]


def hf_name(name):
    for a, b in RENAME:
        if name.endswith(a):
            return name[: -len(a)] + b
    return name
failures = 0


def check(ok, msg):
    global failures
    if not ok:
        failures += 1
        print("FAIL:", msg)


def hf_config(c):
    rope = {"rope_type": "default", "rope_theta": c["rope_theta"]}
    if c["rope_factor"] != 1.0:
        rope = {"rope_type": "yarn", "rope_theta": c["rope_theta"], "factor": c["rope_factor"],
                "original_max_position_embeddings": c["rope_original_max_position_embeddings"],
                "beta_fast": 32.0, "beta_slow": 1.0, "mscale": c["rope_mscale"], "mscale_all_dim": c["rope_mscale_all_dim"]}
    return DeepseekV3Config(
        vocab_size=c["vocab_size"], hidden_size=c["hidden_size"], intermediate_size=c["intermediate_size"],
        moe_intermediate_size=c["moe_intermediate_size"] or 8, num_hidden_layers=c["num_hidden_layers"],
        num_attention_heads=c["num_attention_heads"], num_key_value_heads=c["num_attention_heads"], n_shared_experts=1,
        n_routed_experts=c["n_routed_experts"] or 4, num_experts_per_tok=c["num_experts_per_tok"],
        n_group=c["n_group"] or 1, topk_group=c["topk_group"] or 1, norm_topk_prob=True,
        routed_scaling_factor=c["routed_scaling_factor"] or 1.0, first_k_dense_replace=c["first_k_dense_replace"],
        q_lora_rank=c["q_lora_rank"] or None, kv_lora_rank=c["kv_lora_rank"], qk_nope_head_dim=c["qk_nope_head_dim"],
        qk_rope_head_dim=c["qk_rope_head_dim"], v_head_dim=c["v_head_dim"], rms_norm_eps=c["rms_norm_eps"],
        max_position_embeddings=c["max_position_embeddings"], rope_parameters=rope, rope_interleave=True,
        attention_bias=False, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        attn_implementation="eager")


for variant, what in VARIANTS.items():
    d = os.path.join(WORK, f"variant{variant}")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    p = subprocess.run([EXE, "dump", d, str(variant)], capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stdout, p.stderr)
        check(False, f"test_models_deepseek dump {variant} exited {p.returncode}")
        continue
    c = json.load(open(os.path.join(d, "config.json")))
    model = DeepseekV3ForCausalLM(hf_config(c)).float()
    params = dict(model.named_parameters())
    params.update({k: v for k, v in model.named_buffers() if k.endswith("e_score_correction_bias")})
    ours = {}
    for line in open(os.path.join(d, "params.txt")):
        name, *shape = line.split()
        ours[hf_name(name)] = ([int(x) for x in shape], name)
    check(set(ours) == set(params), f"variant {variant}: names differ: {sorted(set(ours) ^ set(params))}")
    with torch.no_grad():
        for name, (shape, ours_name) in ours.items():
            if name not in params:
                continue
            check(list(params[name].shape) == shape, f"{name}: shape {shape}, transformers {list(params[name].shape)}")
            a = np.fromfile(os.path.join(d, ours_name + ".bin"), dtype=np.float32).reshape(shape)
            params[name].copy_(torch.from_numpy(a))
    s, b = c["seq_length"], c["batch"]
    t = np.fromfile(os.path.join(d, "tokens.bin"), dtype=np.int32).reshape(2, s, b)  # [tokens|targets, s, b]
    tokens = torch.from_numpy(t[0].T.copy()).long()  # mgraph [s, b] -> transformers [b, s]
    targets = torch.from_numpy(t[1].T.copy()).long()
    logits = model(input_ids=tokens).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, c["vocab_size"]), targets.reshape(-1))
    loss.backward()
    ref = loss.item()
    got = float(open(os.path.join(d, "loss.txt")).read())
    rel = abs(got - ref) / abs(ref)
    check(rel <= 1e-5, f"variant {variant}: loss {got:.9g}, transformers {ref:.9g} (relative {rel:.3g})")
    worst = 0.0
    for name, (shape, ours_name) in ours.items():
        if name not in params or not params[name].requires_grad:
            continue
        g_ref = params[name].grad.numpy()
        g = np.fromfile(os.path.join(d, ours_name + ".grad.bin"), dtype=np.float32).reshape(g_ref.shape)
        e = float(np.abs(g - g_ref).max() / max(np.abs(g_ref).max(), 1e-12))
        worst = max(worst, e)
        check(e <= 1e-4, f"variant {variant}: gradient of {name} differs by {e:.3g} of its largest entry")
    if variant == 2:  # the expert bias takes part: transformers without it routes otherwise
        with torch.no_grad():
            for name, b in model.named_buffers():
                if name.endswith("e_score_correction_bias"):
                    b.zero_()
            unbiased = torch.nn.functional.cross_entropy(model(input_ids=tokens).logits.reshape(-1, c["vocab_size"]),
                                                         targets.reshape(-1)).item()
        check(abs(unbiased - ref) > 1e-4 * abs(ref), f"variant 2: the expert bias changes transformers' loss by too "
                                                     f"little ({unbiased:.9g} without it) for the check to mean anything")
    print(f"variant {variant} ({what}): loss {got:.9g}, transformers {ref:.9g} (relative {rel:.2g}); "
          f"{len(ours)} parameters, worst gradient difference {worst:.2g} of the tensor's largest entry")

sys.exit(1 if failures else 0)
