#!/usr/bin/env python3
"""mgraph-convert's MoE, multi-latent attention, head-size and RoPE-scaling classes against
Hugging Face transformers (reference check, not a runtime dependency).

  hf_convert.py MGRAPH_RUN MGRAPH_CONVERT WORK_DIR [VARIANT...]

Variants (random tiny configs, no hub access):
  mixtral       MixtralForCausalLM: GQA, 4 experts top-2 in every layer
  qwen3_moe     Qwen3MoeForCausalLM: q/k norms, head_dim 24 (not hidden / heads), a dense layer
                (mlp_only_layers) then MoE layers of 8 experts top-2, norm_topk_prob
  qwen3_moe_pre the same with norm_topk_prob false (mgraph's --moe-router-pre-softmax)
  deepseek_v3   DeepseekV3ForCausalLM: multi-latent attention (q latent, YaRN factor 4 with
                mscale / mscale_all_dim 1), a dense first layer, then MoE layers of 8 experts in
                4 groups, top-4 of 2 groups, sigmoid scores with a random correction bias,
                scaling 2.5, a shared expert
  qwen3_headdim Qwen3ForCausalLM with head_dim 24 (--kv-channels 24)
  llama31       LlamaForCausalLM with Llama 3.1's rope_scaling (llama3, factor 8)
  llama_yarn    LlamaForCausalLM with YaRN (factor 4 over 8 positions, attention factor from mscale)
  deepseek_v3_mtp  deepseek_v3's model with one multi-token prediction layer (below)
For each but deepseek_v3_mtp:
1. A random model of the class (every weight, bias, norm and correction bias perturbed) is
   saved with save_pretrained (transformers writes each expert's matrices apart), imported
   with --from-hf, and `mgraph-run --skip-train` with the matching flags gives transformers'
   loss on the same windows (relative 1e-5); saved in shards, it imports to the same tensors.
2. mgraph trains that checkpoint 3 iterations (the expert biases move), --to-hf exports it,
   the class's from_pretrained loads it with no missing or unexpected tensor and gives
   mgraph's loss (relative 1e-5); re-importing the export reproduces it bit for bit.
deepseek_v3_mtp: multi-token prediction, DeepSeek-V3's layer model.layers.<L>.* (enorm, hnorm,
eh_proj, a decoder layer of the last layer's kind, shared_head.norm, and copies of the word
embedding and output layer). transformers' DeepseekV3ForCausalLM builds no MTP layer (it
writes num_nextn_predict_layers 1 and no such tensor; it loads one leaving its tensors
unused). So: transformers' own file imports with a note and no MTP layer; mgraph trains the
model with --mtp-num-layers 1 (3 iterations), --to-hf exports it, transformers loads it with
exactly the MTP tensors unexpected and gives mgraph's lm loss; DeepSeek-V3's MTP computed
here from the exported tensors (the decoder layer built by transformers as layer L, the
rest by hand: embedding of the tokens moved one place, enorm / hnorm, eh_proj over [e, h],
the layer, shared_head.norm, the output layer, the labels moved one place) gives mgraph's
mtp_1 loss of the next iteration (relative 1e-5); --from-hf of the export trains that
iteration to the same losses bit for bit and re-exports the same file; an embedding copy
that differs from the model's is refused by name.
Exits 77 (skipped) with a loud message when torch or transformers cannot be imported.
"""
import json
import os
import shutil
import subprocess
import sys

try:
    import torch
    import transformers
    from transformers import (DeepseekV3Config, DeepseekV3ForCausalLM, LlamaConfig, LlamaForCausalLM, MixtralConfig,
                              MixtralForCausalLM, Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)
    from safetensors.torch import load_file
except Exception as e:  # noqa: BLE001
    print("=" * 78)
    print(f"SKIPPED: torch/transformers not importable ({e}); tools/install-deps.sh installs them")
    print("=" * 78)
    sys.exit(77)

RUN, CONVERT, WORK = (os.path.abspath(a) for a in sys.argv[1:4])
ONLY = sys.argv[4:]
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
os.chdir(WORK)
torch.manual_seed(0)

H, SEQ, V = 64, 16, 256
MBS, GBS, EVAL_ITERS = 2, 4, 2
W = EVAL_ITERS * GBS
half = W * SEQ + 1
g = torch.Generator().manual_seed(1)
data = bytes(torch.randint(0, 256, (2 * half,), generator=g).tolist())
open("data.txt", "wb").write(data)
valid = data[half:]
windows = torch.tensor([list(valid[w * SEQ: w * SEQ + SEQ + 1]) for w in range(W)])
COMMON = dict(vocab_size=V, hidden_size=H, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None,
              pad_token_id=None, rms_norm_eps=1e-6)
LLAMA_FLAGS = ["--normalization", "RMSNorm", "--position-embedding-type", "rope", "--swiglu", "--disable-bias-linear",
               "--untie-embeddings-and-output-weights", "--norm-epsilon", "1e-6", "--hidden-size", str(H),
               "--seq-length", str(SEQ)]


def variant(name):
    """(transformers model, its class, mgraph-run's model flags)"""
    if name == "mixtral":
        cfg = MixtralConfig(**COMMON, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=SEQ,
                            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
        flags = ["--num-layers", "2", "--num-attention-heads", "4", "--group-query-attention", "--num-query-groups", "2",
                 "--ffn-hidden-size", "48", "--num-experts", "4", "--moe-router-topk", "2", "--rotary-base", "1000000",
                 "--max-position-embeddings", str(SEQ)]
        return MixtralForCausalLM._from_config(cfg, attn_implementation="eager"), MixtralForCausalLM, flags
    if name.startswith("qwen3_moe"):
        pre = name.endswith("_pre")
        cfg = Qwen3MoeConfig(**COMMON, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
                             num_attention_heads=4, num_key_value_heads=2, head_dim=24, num_experts=8, num_experts_per_tok=2,
                             norm_topk_prob=not pre, mlp_only_layers=[0], decoder_sparse_step=1, max_position_embeddings=SEQ,
                             rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
        flags = ["--num-layers", "3", "--num-attention-heads", "4", "--group-query-attention", "--num-query-groups", "2",
                 "--kv-channels", "24", "--qk-layernorm", "--ffn-hidden-size", "96", "--num-experts", "8",
                 "--moe-ffn-hidden-size", "32", "--moe-router-topk", "2", "--moe-layer-freq", "([0]+[1]*2)",
                 "--rotary-base", "1000000", "--max-position-embeddings", str(SEQ)] + (["--moe-router-pre-softmax"] if pre else [])
        return Qwen3MoeForCausalLM._from_config(cfg, attn_implementation="eager"), Qwen3MoeForCausalLM, flags
    if name == "deepseek_v3":
        cfg = DeepseekV3Config(**COMMON, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
                               num_attention_heads=4, num_key_value_heads=4, n_shared_experts=1, n_routed_experts=8,
                               num_experts_per_tok=4, n_group=4, topk_group=2, routed_scaling_factor=2.5,
                               norm_topk_prob=True, first_k_dense_replace=1, q_lora_rank=24, kv_lora_rank=16,
                               qk_nope_head_dim=12, qk_rope_head_dim=8, v_head_dim=10, max_position_embeddings=SEQ,
                               rope_interleave=True,
                               rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                                "original_max_position_embeddings": 4096, "beta_fast": 32.0,
                                                "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0})
        flags = ["--num-layers", "3", "--num-attention-heads", "4", "--ffn-hidden-size", "96", "--multi-latent-attention",
                 "--q-lora-rank", "24", "--kv-lora-rank", "16", "--qk-head-dim", "12", "--qk-pos-emb-head-dim", "8",
                 "--v-head-dim", "10", "--qk-layernorm", "--rotary-scaling-factor", "4", "--mscale", "1",
                 "--mscale-all-dim", "1", "--num-experts", "8", "--moe-ffn-hidden-size", "32",
                 "--moe-shared-expert-intermediate-size", "32", "--moe-layer-freq", "([0]+[1]*2)", "--moe-router-topk", "4",
                 "--moe-router-score-function", "sigmoid", "--moe-router-enable-expert-bias",
                 "--moe-router-bias-update-rate", "1e-2", "--moe-router-num-groups", "4", "--moe-router-group-topk", "2",
                 "--moe-router-topk-scaling-factor", "2.5", "--max-position-embeddings", str(SEQ)]
        return DeepseekV3ForCausalLM._from_config(cfg, attn_implementation="eager"), DeepseekV3ForCausalLM, flags
    if name == "qwen3_headdim":
        cfg = Qwen3Config(**COMMON, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                          head_dim=24, attention_bias=False, max_position_embeddings=SEQ,
                          rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
        flags = ["--num-layers", "2", "--num-attention-heads", "4", "--group-query-attention", "--num-query-groups", "2",
                 "--kv-channels", "24", "--qk-layernorm", "--ffn-hidden-size", "96", "--rotary-base", "1000000",
                 "--max-position-embeddings", str(SEQ)]
        return Qwen3ForCausalLM._from_config(cfg, attn_implementation="eager"), Qwen3ForCausalLM, flags
    if name == "llama31":
        cfg = LlamaConfig(**COMMON, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                          max_position_embeddings=4 * SEQ, attention_bias=False, mlp_bias=False,
                          rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                           "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                           "original_max_position_embeddings": 8192})
        flags = ["--num-layers", "2", "--num-attention-heads", "4", "--group-query-attention", "--num-query-groups", "2",
                 "--ffn-hidden-size", "96", "--rotary-base", "500000", "--use-rope-scaling", "--rope-scaling-factor", "8",
                 "--max-position-embeddings", str(4 * SEQ)]
        return LlamaForCausalLM._from_config(cfg, attn_implementation="eager"), LlamaForCausalLM, flags
    if name == "llama_yarn":
        cfg = LlamaConfig(**COMMON, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                          max_position_embeddings=4 * SEQ, attention_bias=False, mlp_bias=False,
                          rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                           "original_max_position_embeddings": 8, "beta_fast": 32.0, "beta_slow": 1.0,
                                           "attention_factor": 1.0 + 0.1 * 0.7 * 1.3862943611198906})
        flags = ["--num-layers", "2", "--num-attention-heads", "4", "--ffn-hidden-size", "96", "--position-embedding-type",
                 "yarn", "--rotary-scaling-factor", "4", "--yarn-original-max-position-embeddings", "8", "--mscale", "0.7",
                 "--max-position-embeddings", str(4 * SEQ)]
        return LlamaForCausalLM._from_config(cfg, attn_implementation="eager"), LlamaForCausalLM, flags
    raise SystemExit(f"unknown variant {name}")


VARIANTS = ["mixtral", "qwen3_moe", "qwen3_moe_pre", "deepseek_v3", "qwen3_headdim", "llama31", "llama_yarn",
            "deepseek_v3_mtp"]


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def run(argv, what):
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stdout[-4000:], p.stderr[-4000:])
        fail(f"{what} exited {p.returncode}")
    return p.stdout


def mgraph_args(flags):
    args = ["--text-file", "data.txt", "--split", "50,50,0", "--micro-batch-size", str(MBS), "--global-batch-size",
            str(GBS), "--eval-iters", str(EVAL_ITERS), "--cpu-workers", "1", *LLAMA_FLAGS, *flags]
    if "--position-embedding-type" in flags:  # (the variant's own, yarn)
        i = args.index("--position-embedding-type")
        del args[i:i + 2]
    return args


def hf_loss(model):
    model.eval()
    with torch.no_grad():
        logits = model(windows[:, :-1]).logits.double()
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1)).item()


def mgraph_loss(flags, ckpt, tag):
    run([RUN, *mgraph_args(flags), "--load", ckpt, "--skip-train", "--metrics-file", f"{tag}.jsonl"],
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


def metrics(path):
    return [json.loads(l) for l in open(path) if l.strip()]


def deepseek_v3_mtp():
    n = "deepseek_v3_mtp"
    hf, cls, flags = variant("deepseek_v3")
    L = 3
    # transformers' own file: num_nextn_predict_layers 1, no MTP tensor; imported without
    hf.float().save_pretrained(f"{n}-hf0", safe_serialization=True)
    if json.load(open(f"{n}-hf0/config.json")).get("num_nextn_predict_layers") != 1:
        fail(f"{n}: transformers no longer writes num_nextn_predict_layers 1")
    p = subprocess.run([CONVERT, "--from-hf", f"{n}-hf0", "--save", f"{n}-ck0"], capture_output=True, text=True)
    if p.returncode != 0 or "the files hold 0 multi-token prediction layers" not in p.stderr:
        fail(f"{n}: transformers' file: exit {p.returncode}, {p.stderr}")
    if "mtp_num_layers" in open(f"{n}-ck0/iter_0000000/index.json").read():
        fail(f"{n}: transformers' file imported with an MTP layer")
    # every training sample the same window (a period of SEQ tokens), whatever the order
    period = bytes(torch.randint(0, 256, (SEQ,), generator=torch.Generator().manual_seed(7)).tolist())
    open("periodic.txt", "wb").write(period * 64)
    mflags = flags + ["--mtp-num-layers", "1", "--mtp-loss-scaling-factor", "0.1", "--hidden-dropout", "0",
                      "--attention-dropout", "0"]
    args = [a if a != "data.txt" else "periodic.txt" for a in mgraph_args(mflags)]
    run([RUN, *args, "--train-iters", "3", "--save", f"{n}-trained", "--lr", "1e-3", "--lr-warmup-iters", "0",
         "--eval-iters", "0"], f"{n}: mgraph-run training with an MTP layer")
    run([CONVERT, "--load", f"{n}-trained", "--to-hf", f"{n}-hf"], f"{n}: --to-hf")
    sd = load_file(f"{n}-hf/model.safetensors")
    mtp_keys = {k for k in sd if k.startswith(f"model.layers.{L}.")}
    for k in ("enorm", "hnorm", "eh_proj", "shared_head.norm", "embed_tokens", "shared_head.head", "self_attn.kv_b_proj",
              "mlp.gate.e_score_correction_bias", "mlp.experts.7.down_proj", "mlp.shared_experts.up_proj"):
        if f"model.layers.{L}.{k}" not in mtp_keys and f"model.layers.{L}.{k}.weight" not in mtp_keys:
            fail(f"{n}: the export lacks model.layers.{L}.{k}")
    if not torch.equal(sd[f"model.layers.{L}.embed_tokens.weight"], sd["model.embed_tokens.weight"]) or \
            not torch.equal(sd[f"model.layers.{L}.shared_head.head.weight"], sd["lm_head.weight"]):
        fail(f"{n}: the MTP layer's embedding / head copies differ from the model's")
    if json.load(open(f"{n}-hf/config.json")).get("num_nextn_predict_layers") != 1:
        fail(f"{n}: config.json's num_nextn_predict_layers is not 1")
    model, info = cls.from_pretrained(f"{n}-hf", output_loading_info=True, attn_implementation="eager")
    unexpected = set(info.get("unexpected_keys") or ())  # (named after transformers' own conversions: fused experts)
    if info.get("missing_keys") or info.get("mismatched_keys") or any(not k.startswith(f"model.layers.{L}.") for k in unexpected):
        fail(f"{n}: transformers loaded the export with {info}")
    print(f"{n}: transformers' DeepseekV3ForCausalLM loads the export leaving the {len(mtp_keys)} MTP tensors unused "
          f"({len(unexpected)} reported unexpected)")
    # the MTP layer's decoder layer as transformers builds layer L of an (L + 1)-layer model
    shutil.copytree(f"{n}-hf", f"{n}-hf-big")
    cfg = json.load(open(f"{n}-hf-big/config.json"))
    json.dump({**cfg, "num_hidden_layers": L + 1, "num_nextn_predict_layers": 0}, open(f"{n}-hf-big/config.json", "w"))
    big = cls.from_pretrained(f"{n}-hf-big", attn_implementation="eager").float().eval()
    model = model.float().eval()
    # the next iteration: mgraph's lm and mtp_1 losses on the loaded weights
    run([RUN, *args, "--load", f"{n}-trained", "--train-iters", "4", "--lr", "1e-3", "--lr-warmup-iters", "0",
         "--eval-iters", "0", "--override-opt-param-scheduler", "--metrics-file", f"{n}-next.jsonl"],
        f"{n}: mgraph-run one more iteration")
    last = metrics(f"{n}-next.jsonl")[-1]
    window = torch.tensor([list(period) + [period[0]]] * MBS)
    inp, labels = window[:, :-1], window[:, 1:]
    captured = {}
    hook = model.model.layers[L - 1].register_forward_pre_hook(lambda m, a, kw: captured.update(kw), with_kwargs=True)
    with torch.no_grad():
        out = model.model(inp, use_cache=False)
        hook.remove()
        lm = torch.nn.functional.cross_entropy(model.lm_head(out.last_hidden_state).double().reshape(-1, V),
                                               labels.reshape(-1)).item()
        close(last["lm_loss"], lm, f"{n}: lm loss of the iteration after the checkpoint")

        def rms(x, w):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

        w = lambda k: sd[f"model.layers.{L}.{k}.weight"].float()  # noqa: E731
        moved = torch.cat([inp[:, 1:], torch.zeros_like(inp[:, :1])], 1)  # tokens i + 1 at place i, 0 past the end
        e = torch.nn.functional.embedding(moved, w("embed_tokens"))
        x = torch.cat([rms(e, w("enorm")), rms(out.last_hidden_state, w("hnorm"))], -1) @ w("eh_proj").T
        kw = {k: v for k, v in captured.items() if k != "hidden_states"}
        x = big.model.layers[L](x, **kw)
        x = x[0] if isinstance(x, tuple) else x
        logits = rms(x, w("shared_head.norm")) @ w("shared_head.head").T
        mtp = torch.nn.functional.cross_entropy(logits[:, :-1].double().reshape(-1, V), labels[:, 1:].reshape(-1)).item()
    close(last["mtp_1_loss"], mtp, f"{n}: mtp_1 loss from DeepSeek-V3's MTP on the exported tensors")
    # back: the import trains the same iteration to the same losses, and re-exports the same file
    run([CONVERT, "--from-hf", f"{n}-hf", "--save", f"{n}-back"], f"{n}: --from-hf of the export")
    run([RUN, *args, "--load", f"{n}-back", "--train-iters", "1", "--lr", "1e-3", "--lr-warmup-iters", "0",
         "--eval-iters", "0", "--metrics-file", f"{n}-back.jsonl"], f"{n}: mgraph-run on the import")
    back = metrics(f"{n}-back.jsonl")[-1]
    if (back["lm_loss"], back["mtp_1_loss"]) != (last["lm_loss"], last["mtp_1_loss"]):
        fail(f"{n}: the import's losses {back} differ from the checkpoint's {last}")
    run([CONVERT, "--load", f"{n}-back", "--to-hf", f"{n}-hf3"], f"{n}: --to-hf of the import")
    sd3 = load_file(f"{n}-hf3/model.safetensors")
    if sd.keys() != sd3.keys() or any(not torch.equal(sd[k], sd3[k]) for k in sd):
        fail(f"{n}: round trip --to-hf -> --from-hf -> --to-hf changed tensors")
    print(f"{n}: round trip: the same {len(sd)} tensors, lm {back['lm_loss']:.9f} mtp_1 {back['mtp_1_loss']:.9f} bit-equal")
    # an MTP layer's embedding copy that is not the model's cannot be mgraph's
    shutil.copytree(f"{n}-hf", "bad-mtp-hf")
    sd[f"model.layers.{L}.embed_tokens.weight"] = sd[f"model.layers.{L}.embed_tokens.weight"].clone() + 1
    from safetensors.torch import save_file
    save_file(sd, "bad-mtp-hf/model.safetensors", metadata={"format": "pt"})
    p = subprocess.run([CONVERT, "--from-hf", "bad-mtp-hf", "--save", "bad-mtp-ck"], capture_output=True, text=True)
    if p.returncode != 2 or f"model.layers.{L}.embed_tokens.weight differs" not in p.stderr or os.path.exists("bad-mtp-ck"):
        fail(f"{n}: a differing MTP embedding copy: exit {p.returncode}, {p.stderr}")
    print(f"{n}: a differing MTP embedding copy is refused")


for n in ONLY or VARIANTS:
    if n == "deepseek_v3_mtp":
        deepseek_v3_mtp()
        continue
    hf, cls, flags = variant(n)
    hf = hf.float()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            p.copy_(torch.randn_like(p) * (0.3 if p.dim() == 1 else 0.15) + (1.0 if "norm" in name else 0.0))
        for name, b in hf.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(torch.rand_like(b) * 0.6)  # selects, does not weigh
    hf.save_pretrained(f"{n}-hf", safe_serialization=True)
    run([CONVERT, "--from-hf", f"{n}-hf", "--save", f"{n}-ck"], f"{n}: mgraph-convert --from-hf")
    close(mgraph_loss(flags, f"{n}-ck", f"{n}-imported"), hf_loss(hf), f"{n}: imported {cls.__name__}")
    if n == "deepseek_v3":  # what mgraph's model cannot be is refused (exit 2) naming the key
        base = json.load(open(f"{n}-hf/config.json"))
        for key, value, want in [("rope_interleave", False, "rope_interleave"), ("topk_group", 1, "n_group / topk_group"),
                                 ("attention_bias", True, "attention_bias"), ("norm_topk_prob", False, "norm_topk_prob"),
                                 ("num_key_value_heads", 2, "num_key_value_heads"), ("scoring_func", "softmax", "scoring_func")]:
            shutil.rmtree("bad-hf", ignore_errors=True)
            shutil.copytree(f"{n}-hf", "bad-hf")
            json.dump({**base, key: value}, open("bad-hf/config.json", "w"))
            p = subprocess.run([CONVERT, "--from-hf", "bad-hf", "--save", "bad-ck"], capture_output=True, text=True)
            if p.returncode != 2 or want not in p.stderr or os.path.exists("bad-ck"):
                fail(f"{n}: {key} = {value} not refused naming {want}: exit {p.returncode}, {p.stderr}")
        print(f"{n}: 6 configs mgraph's model cannot be refused by name")
    hf.save_pretrained(f"{n}-hf-sharded", safe_serialization=True, max_shard_size="64KB")
    if not os.path.exists(f"{n}-hf-sharded/model.safetensors.index.json"):
        fail(f"{n}: save_pretrained wrote no shards")
    run([CONVERT, "--from-hf", f"{n}-hf-sharded", "--save", f"{n}-ck-sharded"], f"{n}: --from-hf (shards)")
    run([CONVERT, "--load", f"{n}-ck-sharded", "--to-hf", f"{n}-hf-unsharded"], f"{n}: --to-hf (shards)")
    ref, got = load_file(f"{n}-hf/model.safetensors"), load_file(f"{n}-hf-unsharded/model.safetensors")
    if ref.keys() != got.keys() or any(not torch.equal(ref[k], got[k]) for k in ref):
        fail(f"{n}: the sharded import differs from transformers' tensors: {sorted(set(ref) ^ set(got))[:10]}")
    print(f"{n}: {len(got)} tensors of the sharded import equal transformers' own file")
    # 2. mgraph (trained) -> transformers
    run([RUN, *mgraph_args(flags), "--load", f"{n}-ck", "--train-iters", "3", "--save", f"{n}-trained", "--lr", "1e-3",
         "--lr-warmup-iters", "0"], f"{n}: mgraph-run training the import")
    run([CONVERT, "--load", f"{n}-trained", "--to-hf", f"{n}-hf2"], f"{n}: mgraph-convert --to-hf")
    hf2, info = cls.from_pretrained(f"{n}-hf2", output_loading_info=True, attn_implementation="eager")
    bad = {k: info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys") if info.get(k)}
    if bad:
        fail(f"{n}: transformers loaded the export with {bad}")
    before, after = load_file(f"{n}-hf/model.safetensors"), load_file(f"{n}-hf2/model.safetensors")
    moved = [k for k in before if "e_score_correction_bias" in k and not torch.equal(before[k], after[k])]
    if n == "deepseek_v3" and len(moved) != 2:
        fail(f"{n}: {len(moved)} of the 2 MoE layers' correction biases moved in training")
    close(mgraph_loss(flags, f"{n}-trained", f"{n}-trained"), hf_loss(hf2), f"{n}: trained mgraph checkpoint in transformers")
    run([CONVERT, "--from-hf", f"{n}-hf2", "--save", f"{n}-back"], f"{n}: --from-hf (round trip)")
    run([CONVERT, "--load", f"{n}-back", "--to-hf", f"{n}-hf3"], f"{n}: --to-hf (round trip)")
    a, b = load_file(f"{n}-hf2/model.safetensors"), load_file(f"{n}-hf3/model.safetensors")
    if a.keys() != b.keys() or any(not torch.equal(a[k], b[k]) for k in a):
        fail(f"{n}: round trip --to-hf -> --from-hf -> --to-hf changed tensors")
print(f"ok: transformers {transformers.__version__}, torch {torch.__version__}")
