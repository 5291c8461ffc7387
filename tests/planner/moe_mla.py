#!/usr/bin/env python3
"""mgraph-plan prices multi-latent attention, DeepSeek-V3's router and MoE layers,
--moe-layer-freq lists and multi-token prediction from the probe's graph.

Megatron's DeepSeek-V3 and Qwen3-30B-A3B recipes, scaled down as
tests/tools/megatron_flags.sh runs them (recipe_deepseek_v3, recipe_qwen3_30b_a3b), go
through mgraph-plan --json; each block's matrix-product and attention FLOPs per micro-batch
(forward and backward) and its parameters must equal a count made here from the widths
alone, to 1e-8 (the JSON's nine digits):

  MLA   q_a [ql, h], q_b [nh (qk + rope), ql], kv_a [kvl + rope, h], kv_b [nh (qk + v), kvl],
        o [h, nh v]; scores over qk + rope, values of v (plain attention of --kv-channels
        would give 4 h nh kc and 2 (kc + kc): the count fails if MLA were priced as that)
  GQA   q [nh kc, h], k and v [g kc, h], o [h, nh kc]
  MoE   router [E, h], top-k experts of 3 h F (SwiGLU), the shared experts' 3 h Fs
  MTP   in the output block: eh_proj [h, 2h], a layer of the last layer's kind, its logits

Attention is causal: s^2 / 2 pairs, 2 (qk + v) FLOPs each forward, 2 (3 qk + 2 v)
backward; every matrix product's backward is twice its forward. The layer kinds and how
many layers each prices follow the list, and the step's FLOPs are the blocks' sum.
Usage: moe_mla.py MGRAPH_PLAN DATA_DIR WORKDIR
"""
import json
import os
import subprocess
import sys

PLAN, DATA, WORK = sys.argv[1:4]
os.makedirs(WORK, exist_ok=True)
VOCAB = ["--vocab-file", os.path.join(DATA, "gpt2", "vocab.json"), "--merge-file", os.path.join(DATA, "gpt2", "merges.txt")]
failures = []

# tests/tools/megatron_flags.sh recipe_deepseek_v3 (without --moe-router-force-load-balancing,
# which mgraph-run refuses by name); its data files need not exist for the planner
DEEPSEEK_V3 = """--distributed-timeout-minutes 60 --tensor-model-parallel-size 1 --expert-model-parallel-size 1
 --expert-tensor-parallel-size 1 --context-parallel-size 1 --use-distributed-optimizer --overlap-grad-reduce
 --overlap-param-gather --use-mcore-models --sequence-parallel --use-flash-attn --disable-bias-linear
 --micro-batch-size 1 --global-batch-size 8 --train-samples 32 --exit-duration-in-mins 220
 --no-check-for-nan-in-loss-and-grad --manual-gc --manual-gc-interval 10 --recompute-granularity selective
 --recompute-modules mlp moe mla_up_proj layernorm --transformer-impl transformer_engine --seq-length 64
 --data-cache-path cache --data-path docs_text_document --split 99,1,0 --no-mmap-bin-files
 --no-create-attention-mask-in-dataloader --num-workers 6 --num-layers 2 --hidden-size 64
 --ffn-hidden-size 192 --num-attention-heads 8 --kv-channels 16 --max-position-embeddings 64
 --position-embedding-type rope --rotary-base 10000 --make-vocab-size-divisible-by 3232
 --normalization RMSNorm --norm-epsilon 1e-6 --swiglu --untie-embeddings-and-output-weights
 --multi-latent-attention --attention-dropout 0.0 --hidden-dropout 0.0 --clip-grad 1.0 --weight-decay 0.1
 --qk-layernorm --lr-decay-samples 24 --lr-warmup-samples 8 --lr-warmup-init 3.9e-7 --lr 3.9e-6
 --min-lr 3.9e-7 --lr-decay-style cosine --adam-beta1 0.9 --adam-beta2 0.95 --num-experts 8
 --moe-layer-freq [0]*1+[1]*1 --moe-ffn-hidden-size 24 --moe-shared-expert-intermediate-size 24
 --moe-router-load-balancing-type seq_aux_loss --moe-router-topk 2 --moe-token-dispatcher-type flex
 --moe-flex-dispatcher-backend hybridep --moe-router-pre-softmax --moe-grouped-gemm --moe-aux-loss-coeff 1e-4
 --moe-router-group-topk 2 --moe-router-num-groups 4 --moe-router-topk-scaling-factor 2.5
 --moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-bias-update-rate 1e-3
 --moe-router-dtype fp32 --moe-permute-fusion --q-lora-rank 24
 --kv-lora-rank 16 --qk-head-dim 16 --qk-pos-emb-head-dim 8 --v-head-dim 16 --rotary-scaling-factor 40
 --mscale 1.0 --mscale-all-dim 1.0 --mtp-num-layers 1 --mtp-loss-scaling-factor 0.1 --eval-iters 2
 --eval-interval 100 --auto-detect-ckpt-format --load ck --save ck --save-interval 100
 --dist-ckpt-strictness log_all --init-method-std 0.02 --log-timers-to-tensorboard
 --log-memory-to-tensorboard --log-num-zeros-in-grad --log-params-norm --log-validation-ppl-to-tensorboard
 --log-throughput --log-interval 1 --logging-level 40 --tensorboard-dir tb --bf16 --enable-experimental""".split()

# tests/tools/megatron_flags.sh recipe_qwen3_30b_a3b
QWEN3_30B_A3B = """--save-interval 100000 --micro-batch-size 1 --bf16 --no-masked-softmax-fusion --disable-bias-linear
 --untie-embeddings-and-output-weights --position-embedding-type rope --no-rope-fusion --normalization RMSNorm
 --swiglu --num-layers 2 --hidden-size 64 --ffn-hidden-size 192 --num-attention-heads 8
 --group-query-attention --num-query-groups 2 --kv-channels 16 --qk-layernorm --num-experts 8
 --moe-ffn-hidden-size 24 --moe-router-topk 2 --moe-router-dtype fp32 --moe-aux-loss-coeff 1e-3
 --moe-token-dispatcher-type alltoall --moe-router-load-balancing-type aux_loss --seq-length 64
 --max-position-embeddings 640 --make-vocab-size-divisible-by 1187 --use-mcore-models --rotary-percent 1.0
 --rotary-base 1000000 --no-bias-swiglu-fusion --sequence-parallel
 --data-path docs_text_document --save ck --global-batch-size 4 --train-iters 4 --lr 1e-3
 --lr-decay-style cosine --lr-warmup-iters 1 --log-interval 1 --eval-iters 0""".split()


def with_flags(recipe, **over):
    """The recipe with flags replaced (--flag value pairs; None drops the flag)."""
    out, i = [], 0
    names = {"--" + k.replace("_", "-"): v for k, v in over.items()}
    while i < len(recipe):
        f = recipe[i]
        j = i + 1
        while j < len(recipe) and not recipe[j].startswith("--"):
            j += 1
        if f in names:
            if names[f] is not None:
                out += [f, str(names[f])]
            names.pop(f)
        else:
            out += recipe[i:j]
        i = j
    for f, v in names.items():
        if v is not None:
            out += [f, str(v)]
    return out


def plan(name, args, code=0):
    r = subprocess.run([PLAN, "--cluster", "h200", "--json"] + args + VOCAB, capture_output=True, text=True)
    with open(os.path.join(WORK, name + ".json"), "w") as f:
        f.write(r.stdout)
    if r.returncode != code:
        failures.append(f"{name}: exit {r.returncode} (want {code}): {r.stderr.strip()}")
        return None
    if code:
        return r
    return json.loads(r.stdout)


def close(name, what, got, want, rel=1e-8):
    if abs(got - want) > rel * max(abs(want), 1):
        failures.append(f"{name}: {what} {got!r}, the count gives {want!r}")


def padded(v, div):
    return (v + div - 1) // div * div


def model(args):
    """The widths the count needs, from the flags."""
    a = {}
    i = 0
    while i < len(args):
        if args[i].startswith("--") and i + 1 < len(args) and not args[i + 1].startswith("--"):
            a[args[i][2:]] = args[i + 1]
        elif args[i].startswith("--"):
            a[args[i][2:]] = True
        i += 1
    return a


def counts(a, vocab=50257):
    """Per token, forward: the attention's and MLP's matrix elements (a product costs 2 x
    that), the attention's FLOPs per causal pair, parameters, for a dense and an MoE layer."""
    h, nh, f = int(a["hidden-size"]), int(a["num-attention-heads"]), int(a["ffn-hidden-size"])
    E, k, F = int(a["num-experts"]), int(a["moe-router-topk"]), int(a["moe-ffn-hidden-size"])
    Fs = int(a.get("moe-shared-expert-intermediate-size", 0))
    if "multi-latent-attention" in a:
        ql, kvl = int(a["q-lora-rank"]), int(a["kv-lora-rank"])
        qk, rope, v = int(a["qk-head-dim"]), int(a["qk-pos-emb-head-dim"]), int(a["v-head-dim"])
        attn = ql * h + nh * (qk + rope) * ql + (kvl + rope) * h + nh * (qk + v) * kvl + h * nh * v
        attn_norms = ql + kvl  # q_a_layernorm, kv_a_layernorm (--qk-layernorm)
        dq, dv = qk + rope, v
    else:
        kc, g = int(a["kv-channels"]), int(a.get("num-query-groups", nh))
        attn = nh * kc * h + 2 * g * kc * h + h * nh * kc
        attn_norms = 2 * kc  # q_norm, k_norm (--qk-layernorm)
        dq, dv = kc, kc
    dense_mlp = 3 * h * f
    moe_mlp = E * h + k * 3 * h * F + 3 * h * Fs  # router, the chosen experts, the shared experts
    V = padded(vocab, int(a["make-vocab-size-divisible-by"]))
    return dict(h=h, nh=nh, V=V, E=E, attn=attn, dq=dq, dv=dv, dense=attn + dense_mlp, moe=attn + moe_mlp,
                dense_params=attn + attn_norms + 2 * h + dense_mlp,
                # + E: the expert bias (a buffer in Megatron) is counted with the layer's weights
                moe_params=attn + attn_norms + 2 * h + E * h + 3 * h * Fs + (E if "moe-router-enable-expert-bias" in a else 0),
                expert_params=E * 3 * h * F)


def check_blocks(name, j, a, kinds, last_moe):
    """kinds: [(moe, layers, first_layer)] in the probe's order."""
    c = counts(a)
    s, b = int(a["seq-length"]), int(a["micro-batch-size"])
    T = s * b
    blocks = j["blocks_per_micro_batch"]
    got = [(x["moe"], x["layers"], x.get("first_layer")) for x in blocks["layer_kinds"]]
    if got != kinds:
        failures.append(f"{name}: layer kinds {got}, want {kinds}")
        return
    pairs = b * c["nh"] * s * s / 2
    for i, x in enumerate(blocks["layer_kinds"]):
        per_token = c["moe"] if x["moe"] else c["dense"]
        close(name, f"kind {i} forward matrix FLOPs", x["forward"]["gemm_flops"], 2 * T * per_token)
        close(name, f"kind {i} backward matrix FLOPs", x["backward"]["gemm_flops"], 4 * T * per_token)
        close(name, f"kind {i} forward attention FLOPs", x["forward"]["attention_flops"], 2 * pairs * (c["dq"] + c["dv"]))
        close(name, f"kind {i} backward attention FLOPs", x["backward"]["attention_flops"],
              2 * pairs * (3 * c["dq"] + 2 * c["dv"]))
        close(name, f"kind {i} parameters", x["params"], c["moe_params"] if x["moe"] else c["dense_params"])
        close(name, f"kind {i} expert parameters", x["expert_params"], c["expert_params"] if x["moe"] else 0)
        # the router's sigmoid, groups, bias and the norms are vector work beside the products
        for d in ("forward", "backward"):
            if not x[d]["flops"] > x[d]["gemm_flops"] + x[d]["attention_flops"]:
                failures.append(f"{name}: kind {i} {d}: no vector work beside the products")
    # the output layer (and, with multi-token prediction, eh_proj, a layer of the last
    # layer's kind and its logits over the same output layer)
    out = blocks["output"]
    mtp = int(a.get("mtp-num-layers", 0))
    per_token = c["h"] * c["V"] * (1 + mtp) + mtp * (2 * c["h"] * c["h"] + (c["moe"] if last_moe else c["dense"]))
    close(name, "output forward matrix FLOPs", out["forward"]["gemm_flops"], 2 * T * per_token)
    close(name, "output backward matrix FLOPs", out["backward"]["gemm_flops"], 4 * T * per_token)
    close(name, "output attention FLOPs", out["forward"]["attention_flops"], mtp * 2 * pairs * (c["dq"] + c["dv"]))
    h = c["h"]
    mtp_params = mtp * (3 * h + 2 * h * h + (c["moe_params"] if last_moe else c["dense_params"]))
    close(name, "output parameters", out["params"], h * c["V"] + h + mtp_params)
    close(name, "output expert parameters", out["expert_params"], mtp * c["expert_params"] if last_moe else 0)
    close(name, "embedding parameters", blocks["embedding"]["params"], h * c["V"])
    # the step is the blocks' sum: M micro-batches of every layer and the two ends
    M = j["micro_batches_per_pipeline"]
    per_mb = sum(x[d]["flops"] * x["layers"] for x in blocks["layer_kinds"] for d in ("forward", "backward"))
    per_mb += sum(blocks[e][d]["flops"] for e in ("embedding", "output") for d in ("forward", "backward"))
    close(name, "hardware FLOPs per step", j["hw_flops_per_gpu_per_step"], M * per_mb, 1e-6)
    if j["probe_layers"] != len(kinds):
        failures.append(f"{name}: probe of {j['probe_layers']} layers, want {len(kinds)}")


# 1. the DeepSeek-V3 recipe: a dense layer then an MoE one, MLA, sigmoid groups, expert
#    bias, shared expert, one MTP layer (of the MoE kind)
j = plan("deepseek_v3", DEEPSEEK_V3)
if j:
    check_blocks("deepseek_v3", j, model(DEEPSEEK_V3), [(False, 1, 0), (True, 1, 1)], True)
    # sanity of the count itself: plain attention of 8 heads x --kv-channels 16 differs
    a = model(DEEPSEEK_V3)
    plain = dict(a)
    del plain["multi-latent-attention"]
    assert counts(plain)["attn"] != counts(a)["attn"]

# 2. a list ending on dense layers in Megatron's other spelling: kinds MoE (layers 0-2)
#    then dense (3-4); the MTP layer is dense, as the last layer
r = with_flags(DEEPSEEK_V3, num_layers=5, moe_layer_freq="[1,1,1,0,0]")
j = plan("deepseek_v3_moe_first", r)
if j:
    check_blocks("deepseek_v3_moe_first", j, model(r), [(True, 3, 0), (False, 2, 3)], False)

# 3. DeepSeek-V3's shape of list, ([0]*3+[1]*58)-style, 61 layers at these widths
r = with_flags(DEEPSEEK_V3, num_layers=61, moe_layer_freq="([0]*3+[1]*58)", max_position_embeddings=64)
j = plan("deepseek_v3_61", r)
if j:
    check_blocks("deepseek_v3_61", j, model(r), [(False, 3, 0), (True, 58, 3)], True)

# 4. the Qwen3-30B-A3B recipe: every layer MoE, grouped-query attention of --kv-channels 16
j = plan("qwen3_30b_a3b", QWEN3_30B_A3B)
if j:
    check_blocks("qwen3_30b_a3b", j, model(QWEN3_30B_A3B), [(True, 2, 0)], True)

# 5. a list and a window period together: kinds (dense, MoE) x (windowed, full)
r = with_flags(QWEN3_30B_A3B, num_layers=4, moe_layer_freq="[0]*1+[1]*3", window_size="16,0", window_attn_skip_freq=2)
j = plan("qwen3_window_list", r)
if j:
    kinds = j["blocks_per_micro_batch"]["layer_kinds"]
    got = [(x["moe"], x["layers"]) for x in kinds]
    if got != [(False, 1), (False, 0), (True, 1), (True, 2)]:
        failures.append(f"qwen3_window_list: layer kinds {got}")
    else:
        c = counts(model(r))
        for i, x in enumerate(kinds):
            close("qwen3_window_list", f"kind {i} forward matrix FLOPs", x["forward"]["gemm_flops"],
                  2 * 64 * (c["moe"] if x["moe"] else c["dense"]))
        full = 2 * 8 * 64 * 64 / 2 * 32
        close("qwen3_window_list", "full layers' attention", kinds[3]["forward"]["attention_flops"], full)
        if not kinds[2]["forward"]["attention_flops"] < 0.6 * full:
            failures.append("qwen3_window_list: the windowed MoE layer's attention is not priced over its window")

# 6. a list that does not match the layers: the usage error, nothing on stdout
r = plan("bad_list", with_flags(DEEPSEEK_V3, num_layers=3), code=2)
if r is not None and ("--moe-layer-freq" not in r.stderr or r.stdout):
    failures.append(f"bad_list: stderr {r.stderr.strip()!r}, stdout {len(r.stdout)} bytes")

for f in failures:
    print("FAIL:", f)
print(f"{6 - len({f.split(':')[0] for f in failures})} passed, {len({f.split(':')[0] for f in failures})} failed")
sys.exit(1 if failures else 0)
