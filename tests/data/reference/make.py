#!/usr/bin/env python3
"""Writes the stored PyTorch / transformers references of tests/models/test_reference.c.

  make.py OUT_DIR            write OUT_DIR/<model>.safetensors for every model below
  make.py --check DIR        recompute them with the installed packages and compare with
                             DIR's (models.reference_regenerate: the stored tensors are what
                             the pinned torch/transformers give)

For each model class, a tiny model of transformers' own implementation (GPT2LMHeadModel,
LlamaForCausalLM, MixtralForCausalLM, DeepseekV3ForCausalLM dense and with DeepSeek-V3's
MoE) gets fixed parameters (numpy's
generator, seed per model: weights N(0, 0.1), norm weights 1 + N(0, 0.1), biases N(0, 0.1)),
runs one forward on fixed tokens [2, 16] in float32 on the CPU, and the mean cross-entropy
against fixed targets is differentiated. The file holds, under mgraph's names and layouts
([out, in] weights, GPT-2's c_attn rows per head [q k v]):
  param.<name>, grad.<name>   every parameter and the gradient of the loss (DeepSeek-V3's
                              expert bias, which only selects, has none)
  logits [b, s, V], loss [1], tokens / targets [b, s] (I32)
and in __metadata__: "megatron_args" (the Megatron flags that describe the same model:
test_reference.c builds it through mgraph-run's flag parser), "model" (transformers'
class), "versions" (of the packages that computed it).
The generator is deterministic: one thread, eager attention, no dropout.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
import reference  # noqa: E402  (tests/support/reference.py)

reference.require("numpy", "torch", "transformers", "safetensors")
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402

B, S, V = 2, 16, 64
COMMON = ["--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4", "--seq-length", str(S),
          "--max-position-embeddings", str(S), "--hidden-dropout", "0", "--attention-dropout", "0"]
LLAMA = ["--normalization", "RMSNorm", "--norm-epsilon", "1e-5", "--position-embedding-type", "rope",
         "--rotary-base", "10000", "--swiglu", "--ffn-hidden-size", "48", "--untie-embeddings-and-output-weights",
         "--disable-bias-linear", "--group-query-attention", "--num-query-groups", "2"]  # (GQA last: MLA has none)


def gpt2():
    cfg = transformers.GPT2Config(vocab_size=V, n_positions=S, n_embd=32, n_layer=2, n_head=4, n_inner=128,
                                  bos_token_id=None, eos_token_id=None,
                                  activation_function="gelu_new", resid_pdrop=0, embd_pdrop=0, attn_pdrop=0,
                                  layer_norm_epsilon=1e-5, attn_implementation="eager")
    return transformers.GPT2LMHeadModel(cfg), COMMON + ["--ffn-hidden-size", "128"]


def llama():
    cfg = transformers.LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5, rope_theta=10000.0,
                                   max_position_embeddings=S, tie_word_embeddings=False, attention_bias=False,
                                   mlp_bias=False, attn_implementation="eager")
    return transformers.LlamaForCausalLM(cfg), COMMON + LLAMA


def mixtral():
    cfg = transformers.MixtralConfig(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5, rope_theta=10000.0,
                                     max_position_embeddings=S, num_local_experts=4, num_experts_per_tok=2,
                                     sliding_window=None, router_jitter_noise=0.0, tie_word_embeddings=False,
                                     attn_implementation="eager")
    return transformers.MixtralForCausalLM(cfg), COMMON + LLAMA + ["--num-experts", "4", "--moe-router-topk", "2",
                                                                    "--moe-ffn-hidden-size", "48"]


def deepseek():
    # multi-latent attention with a q latent, YaRN factor 4 with mscale (Megatron's MLA
    # defaults: original length 4096, beta 32 / 1), every layer dense; norm epsilon 1e-6
    # (DeepSeek-V3's): transformers' latent norms have 1e-6 whatever rms_norm_eps says,
    # Megatron's take --norm-epsilon
    rope = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 4096,
            "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}
    cfg = transformers.DeepseekV3Config(
        vocab_size=V, hidden_size=32, intermediate_size=48, moe_intermediate_size=8, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, n_shared_experts=1, n_routed_experts=4, num_experts_per_tok=2,
        n_group=1, topk_group=1, first_k_dense_replace=2, q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=12,
        qk_rope_head_dim=8, v_head_dim=10, rms_norm_eps=1e-6, max_position_embeddings=S, rope_parameters=rope,
        rope_interleave=True, attention_bias=False, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None,
        pad_token_id=None, attn_implementation="eager")
    llama = [a if a != "1e-5" else "1e-6" for a in LLAMA[:-3]]
    return transformers.DeepseekV3ForCausalLM(cfg), COMMON + llama + [
        "--multi-latent-attention", "--q-lora-rank", "24", "--kv-lora-rank", "16", "--qk-head-dim", "12",
        "--qk-pos-emb-head-dim", "8", "--v-head-dim", "10", "--qk-layernorm", "--rotary-scaling-factor", "4",
        "--mscale", "1", "--mscale-all-dim", "1"]


def deepseek_moe():
    # DeepSeek-V3's MoE after a dense first layer: 8 routed experts in 4 groups, sigmoid
    # scores, the top 4 of the best 2 groups selected with the expert bias (aux-loss-free
    # balancing; a buffer in transformers, set below), weights normalised then scaled by 2.5,
    # one shared expert; MLA as deepseek()
    model, args = deepseek()
    c = model.config
    c.num_hidden_layers, c.first_k_dense_replace, c.n_routed_experts, c.num_experts_per_tok = 3, 1, 8, 4
    c.n_group, c.topk_group, c.routed_scaling_factor, c.norm_topk_prob = 4, 2, 2.5, True
    c.moe_intermediate_size, c.n_shared_experts = 16, 1
    args = [a if a != "2" or args[i - 1] != "--num-layers" else "3" for i, a in enumerate(args)]
    return transformers.DeepseekV3ForCausalLM(c), args + [
        "--num-experts", "8", "--moe-ffn-hidden-size", "16", "--moe-shared-expert-intermediate-size", "16",
        "--moe-layer-freq", "([0]+[1]*2)", "--moe-router-topk", "4", "--moe-router-score-function", "sigmoid",
        "--moe-router-enable-expert-bias", "--moe-router-num-groups", "4", "--moe-router-group-topk", "2",
        "--moe-router-topk-scaling-factor", "2.5"]


MODELS = {"gpt2": gpt2, "llama": llama, "mixtral": mixtral, "deepseek": deepseek, "deepseek_moe": deepseek_moe}
# mgraph's MoE names (Megatron's) -> transformers' (Mixtral's and DeepseekV3's)
RENAME = [(".mlp.router.weight", ".mlp.gate.weight"), (".mlp.router.expert_bias", ".mlp.gate.e_score_correction_bias"),
          (".mlp.experts.fc1.weight", ".mlp.experts.gate_up_proj"), (".mlp.experts.fc2.weight", ".mlp.experts.down_proj")]


def to_mgraph(model, name, t, hidden=32, heads=4):
    """transformers' name and layout -> mgraph's (None: not a parameter mgraph has)."""
    if model == "gpt2":
        if name == "lm_head.weight":
            return None, None  # tied to wte
        name = name.removeprefix("transformer.")
        if name.endswith(".weight") and t.ndim == 2 and not name.startswith(("wte", "wpe")):
            t = t.T  # Conv1D [in, out] -> [out, in]
        if "attn.c_attn" in name:  # [q; k; v] -> per head [q_h k_h v_h]
            hd = hidden // heads
            t = t.reshape(3, heads, hd, *t.shape[1:]).swapaxes(0, 1).reshape(3 * hidden, *t.shape[1:])
        return name, np.ascontiguousarray(t)
    for ours, theirs in RENAME:
        if name.endswith(theirs):
            name = name[: -len(theirs)] + ours
    return name, t


def compute(model_name):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model, args = MODELS[model_name]()
    model = model.float().eval()  # eval: no dropout, no router jitter (none is configured either)
    rng = np.random.default_rng(1234 + list(MODELS).index(model_name))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1 and ("norm" in name or "ln_" in name):
                v = 1.0 + 0.1 * rng.standard_normal(p.shape)
            else:
                v = 0.1 * rng.standard_normal(p.shape)
            p.copy_(torch.from_numpy(v.astype(np.float32)))
        # DeepSeek-V3's expert bias: a buffer (no gradient) that only selects experts
        biases = {n: b for n, b in model.named_buffers() if n.endswith("e_score_correction_bias")}
        for b in biases.values():
            b.copy_(torch.from_numpy((0.1 * rng.standard_normal(b.shape)).astype(np.float32)))
    tokens = rng.integers(0, V, size=(B, S), dtype=np.int64)
    targets = rng.integers(0, V, size=(B, S), dtype=np.int64)
    logits = model(input_ids=torch.from_numpy(tokens)).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), torch.from_numpy(targets).reshape(-1))
    loss.backward()
    out = {"logits": logits.detach().numpy().astype(np.float32), "loss": np.array([loss.item()], dtype=np.float32),
           "tokens": tokens.astype(np.int32), "targets": targets.astype(np.int32)}
    for name, p in model.named_parameters():
        mname, w = to_mgraph(model_name, name, p.detach().numpy())
        if mname is None:
            continue
        out["param." + mname] = w
        out["grad." + mname] = to_mgraph(model_name, name, p.grad.numpy())[1]
    for name, b in biases.items():  # a parameter of mgraph's without a gradient
        out["param." + to_mgraph(model_name, name, b.numpy())[0]] = b.numpy().copy()
    meta = {"megatron_args": json.dumps(args), "model": type(model).__name__,
            "versions": json.dumps({"torch": torch.__version__, "transformers": transformers.__version__,
                                    "numpy": np.__version__})}
    return {k: np.ascontiguousarray(v) for k, v in out.items()}, meta


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        bad = 0
        for m in MODELS:
            new, meta = compute(m)
            path = os.path.join(sys.argv[2], m + ".safetensors")
            old = load_file(path)
            # the Megatron flags test_reference.c builds the model from must be the ones
            # that describe it (the metadata's key order is safetensors' own, not compared)
            with safe_open(path, "np") as f:
                old_meta = f.metadata() or {}
            if old_meta.get("megatron_args") != meta["megatron_args"] or old_meta.get("model") != meta["model"]:
                print(f"FAIL {m}: stored metadata {old_meta} differs from {meta}")
                bad += 1
            if set(new) != set(old):
                print(f"FAIL {m}: tensors differ: {sorted(set(new) ^ set(old))}")
                bad += 1
                continue
            worst = 0.0
            for k in new:
                if new[k].dtype == np.int32:
                    same = np.array_equal(new[k], old[k])
                    worst = max(worst, 0.0 if same else np.inf)
                    continue
                e = float(np.abs(new[k] - old[k]).max() / max(np.abs(old[k]).max(), 1e-30))
                worst = max(worst, e)
                if e > 1e-6:
                    print(f"FAIL {m}: {k} differs from the stored reference by {e:.3g} of its largest entry")
                    bad += 1
            print(f"{m}: {len(new)} tensors recomputed with torch {torch.__version__}, transformers "
                  f"{transformers.__version__}: worst difference {worst:.2g} of a tensor's largest entry (bound 1e-6)")
        sys.exit(1 if bad else 0)
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    os.makedirs(sys.argv[1], exist_ok=True)
    for m in MODELS:
        tensors, meta = compute(m)
        path = os.path.join(sys.argv[1], m + ".safetensors")
        save_file(tensors, path + ".tmp", metadata=meta)
        os.chmod(path + ".tmp", 0o644)
        os.replace(path + ".tmp", path)
        n = sum(v.size for k, v in tensors.items() if k.startswith("param."))
        print(f"{path}: {meta['model']}, {n} parameters, loss {tensors['loss'][0]:.6f}")


if __name__ == "__main__":
    main()
