#!/usr/bin/env python3
"""mgraph-convert --from-megatron against Megatron-LM checkpoints written here with torch
(Megatron itself is not needed: the files are built as Megatron-LM's save_checkpoint
writes them, from its source: megatron/training/checkpointing.py, the distributed
optimizer's get_parameter_state_dp_zero and _compute_per_buffer_param_layout,
Megatron-Core's GPTModel names and layouts).

  megatron.py MGRAPH_RUN MGRAPH_CONVERT DATA_DIR WORK_DIR [CASE...]

Each case: mgraph-run trains a model under tensor 2 x pipeline 2 (4 ranks) and saves at
iteration 3; this script rewrites that checkpoint as Megatron would have saved the same
state, sharded tp 2 x pp 2 (mp_rank_TT_PPP/model_optim_rng.pt [+ distrib_optim.pt],
latest_checkpointed_iteration.txt); mgraph-convert --from-megatron converts it back; then
mgraph-run resumes it under another plan. Checked: the first resumed loss equals the one
resumed from mgraph's own checkpoint of the same weights (relative 1e-6; it is bitwise),
and iterations 4..6 follow the uninterrupted tp 2 x pp 2 run (relative 1e-5: parallel ==
serial), with the iteration and the learning rate it logs (the schedule kept).
  llama   RMSNorm, rope, SwiGLU (linear_fc1 = [gate; up] per tensor-parallel shard), grouped
          query attention (linear_qkv rows per group [q heads, k, v]), untied output layer,
          no biases; Transformer Engine's names (linear_qkv.layer_norm_weight, _extra_state);
          bf16 weights in model_optim_rng.pt and the fp32 main copy in distrib_optim.pt
          (--use-distributed-optimizer, data parallel 2 in the args, --overlap-grad-reduce
          with 3000-element buckets: several buckets, 64-element starts, lcm(dp, 128) ends);
          resumed under tensor 2 x data 2 and under 1 rank
  gpt2    LayerNorm, learned positions, biases, GELU, tied embedding (the last stage's
          output_layer.weight copy), local-spec names (input_layernorm, pre_mlp_layernorm),
          the non-distributed optimizer (torch Adam's state by index, two param groups,
          per-parameter step), the tokenizer's size from --true-vocab-size; resumed under
          pipeline 2 x data 2
  layout  (with --megatron DIR, a Megatron-LM checkout) the distributed optimizer's layout this
          script writes against Megatron-Core's own function on 300 random parameter lists
  errors  a truncated rank file, a missing rank directory, a flipped byte, unsupported args
          (--num-experts, --apply-layernorm-1p), args that do not describe the weights,
          mgraph-run --load of a Megatron checkpoint: exit 2 naming what is wrong, nothing
          written
Without the pinned torch: a loud skip (77), or a failure under tools/test.sh
(tests/support/reference.py).
"""
import argparse
import io
import json
import math
import os
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import reference  # noqa: E402  (tests/support/reference.py)

reference.require("torch", "safetensors")
import torch  # noqa: E402

RUN, CONVERT, DATA, WORK = (os.path.abspath(a) for a in sys.argv[1:5])
CASES = sys.argv[5:] or ["llama", "gpt2", "dist", "errors"]
MEGATRON = None  # --megatron DIR: a Megatron-LM checkout, for the layout case
if "--megatron" in CASES:
    i = CASES.index("--megatron")
    MEGATRON = os.path.abspath(CASES[i + 1])
    CASES = CASES[:i] + CASES[i + 2:]
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
os.chdir(WORK)
ENV = dict(os.environ, STARPU_SILENT="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
VOCAB, MERGES = f"{DATA}/gpt2-small/vocab.json", f"{DATA}/gpt2-small/merges.txt"
TEXT = f"{DATA}/tinyshakespeare.txt"
fails = 0


def fail(msg):
    global fails
    print("FAIL:", msg)
    fails += 1


def run(cmd, name, np=1, ok=True):
    full = (["mpirun", "-np", str(np)] if np > 1 else []) + cmd
    r = subprocess.run(full, capture_output=True, text=True, env=ENV)
    with open(name + ".txt", "w") as f:
        f.write(r.stdout + r.stderr)
    if ok and r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-3000:])
        raise SystemExit(f"FAIL: {name}: exit {r.returncode}")
    return r


def metrics(path):
    """iteration -> (lm_loss, lr) of the training iterations"""
    out = {}
    for line in open(path):
        j = json.loads(line)
        if "lm_loss" in j and "iteration" in j and j.get("phase", "train") == "train" and "val_loss" not in j:
            out[j["iteration"]] = (j["lm_loss"], j.get("lr"))
    return out


# ---- mgraph's checkpoint read back (io/checkpoint.c's format) -----------------------------------
def read_mgraph(d):
    from safetensors import safe_open
    idx = json.load(open(f"{d}/index.json"))
    full = {}
    for fn in idx["files"]:
        with safe_open(f"{d}/{fn}", "pt") as f:
            pieces = json.loads(f.metadata()["mgraph"])["pieces"]
            for p in pieces:
                t = full.setdefault(p["name"], torch.zeros(p["shape"], dtype=torch.float32))
                data = f.get_tensor(p["key"]).float().reshape(-1)
                view = t[tuple(slice(o, o + b) for o, b in zip(p["offset"], p["block"]))]
                blk = view.reshape(-1).clone()
                blk[p["lo"]:p["hi"]] = data
                view.copy_(blk.reshape(view.shape))
    return full, idx["meta"]


# ---- Megatron's layouts -------------------------------------------------------------------------------
def qkv_megatron(q, k, v, heads, groups):
    """Megatron-Core's linear_qkv: per query group, its q heads then k then v"""
    hd = q.shape[0] // heads
    r = heads // groups
    parts = []
    for g in range(groups):
        parts += [q[g * r * hd:(g + 1) * r * hd], k[g * hd:(g + 1) * hd], v[g * hd:(g + 1) * hd]]
    return torch.cat(parts)


def pad_to(v, d):
    return (v + d - 1) // d * d


def dist_opt_layout(numels, shared, bucket_size, dp, busbw=False):
    """DistributedOptimizer._compute_per_buffer_param_layout + get_parameter_state_dp_zero's
    unpadded concatenation: each parameter's offset in the saved flat tensor, and its length"""
    div = math.lcm(dp, 128) if not busbw else math.lcm(dp, 128, 2 ** 16)
    start, bucket, buckets = {}, {}, []  # buckets: (start, unpadded)
    pstart = b0 = pend = 0
    in_bucket = 0

    def finalize(end):
        nonlocal b0
        buckets.append((b0, end - b0))
        b0 = pad_to(end, div)

    for i in reversed(range(len(numels))):
        pstart = pad_to(pstart, 64)
        if shared[i] and in_bucket:
            finalize(pstart)
            in_bucket = 0
            pstart = b0
        pend = pstart + numels[i]
        start[i], bucket[i] = pstart, len(buckets)
        in_bucket += 1
        if (bucket_size and pend - b0 >= bucket_size) or shared[i]:
            finalize(pend)
            in_bucket = 0
            pstart = b0
        else:
            pstart = pend
    if in_bucket:
        finalize(pend)
    cum, tot = [], 0
    for s, u in buckets:
        cum.append(tot)
        tot += u
    return [cum[bucket[i]] + start[i] - buckets[bucket[i]][0] for i in range(len(numels))], tot, len(buckets)


class Layout:
    """A model's Megatron tensors (logical, full) from mgraph's, and how they shard."""

    def __init__(self, kind, cfg):
        self.kind, self.c = kind, cfg

    def logical(self, mg, suffix=""):
        """{megatron name (global layer numbers): full tensor} for the value mg[name + suffix]"""
        c, out = self.c, {}
        g = lambda n: mg[n + suffix]  # noqa: E731
        if self.kind == "llama":
            out["embedding.word_embeddings.weight"] = g("model.embed_tokens.weight")
            for l in range(c["layers"]):
                p = f"model.layers.{l}."
                m = f"decoder.layers.{l}."
                out[m + "self_attention.linear_proj.weight"] = g(p + "self_attn.o_proj.weight")
                out[m + "self_attention.linear_qkv.layer_norm_weight"] = g(p + "input_layernorm.weight")
                out[m + "self_attention.linear_qkv.weight"] = qkv_megatron(
                    g(p + "self_attn.q_proj.weight"), g(p + "self_attn.k_proj.weight"), g(p + "self_attn.v_proj.weight"),
                    c["heads"], c["groups"])
                out[m + "mlp.linear_fc1.layer_norm_weight"] = g(p + "post_attention_layernorm.weight")
                out[m + "mlp.linear_fc1.weight"] = torch.cat([g(p + "mlp.gate_proj.weight"), g(p + "mlp.up_proj.weight")])
                out[m + "mlp.linear_fc2.weight"] = g(p + "mlp.down_proj.weight")
            out["decoder.final_layernorm.weight"] = g("model.norm.weight")
            out["output_layer.weight"] = g("lm_head.weight")
        else:
            out["embedding.word_embeddings.weight"] = g("wte.weight")
            out["embedding.position_embeddings.weight"] = g("wpe.weight")
            for l in range(c["layers"]):
                p, m = f"h.{l}.", f"decoder.layers.{l}."
                out[m + "input_layernorm.weight"] = g(p + "ln_1.weight")
                out[m + "input_layernorm.bias"] = g(p + "ln_1.bias")
                out[m + "self_attention.linear_proj.weight"] = g(p + "attn.c_proj.weight")
                out[m + "self_attention.linear_proj.bias"] = g(p + "attn.c_proj.bias")
                out[m + "self_attention.linear_qkv.weight"] = g(p + "attn.c_attn.weight")  # per head [q k v]
                out[m + "self_attention.linear_qkv.bias"] = g(p + "attn.c_attn.bias")
                out[m + "pre_mlp_layernorm.weight"] = g(p + "ln_2.weight")
                out[m + "pre_mlp_layernorm.bias"] = g(p + "ln_2.bias")
                out[m + "mlp.linear_fc1.weight"] = g(p + "mlp.c_fc.weight")
                out[m + "mlp.linear_fc1.bias"] = g(p + "mlp.c_fc.bias")
                out[m + "mlp.linear_fc2.weight"] = g(p + "mlp.c_proj.weight")
                out[m + "mlp.linear_fc2.bias"] = g(p + "mlp.c_proj.bias")
            out["decoder.final_layernorm.weight"] = g("ln_f.weight")
            out["decoder.final_layernorm.bias"] = g("ln_f.bias")
            out["output_layer.weight"] = g("wte.weight")  # the last stage's copy of the tied embedding
        return out

    def shard(self, name, t, tp, rank):
        """tensor-parallel rank `rank`'s part of logical tensor `name`"""
        if any(name.endswith(s) for s in ("linear_qkv.weight", "linear_qkv.bias", "word_embeddings.weight",
                                          "output_layer.weight", "linear_fc1.bias")) or \
                (name.endswith("linear_fc1.weight") and self.kind != "llama"):
            return t.chunk(tp, 0)[rank]
        if name.endswith("linear_fc1.weight"):  # [gate; up] -> [gate_r; up_r]
            gate, up = t.chunk(2, 0)
            return torch.cat([gate.chunk(tp, 0)[rank], up.chunk(tp, 0)[rank]])
        if name.endswith("linear_proj.weight") or name.endswith("linear_fc2.weight"):
            return t.chunk(tp, 1)[rank]
        return t

    def stage_keys(self, names, pp, stage):
        """the stage's names, in Megatron-Core's module order, with stage-local layer numbers;
        Transformer Engine's _extra_state where its modules have one"""
        L = self.c["layers"]
        per = L // pp
        keys = []
        if stage == 0:
            keys += [n for n in names if n.startswith("embedding.")]
        for l in range(stage * per, (stage + 1) * per):
            pre = f"decoder.layers.{l}."
            mine = [n for n in names if n.startswith(pre)]
            if self.kind == "llama":
                order = ["self_attention.core_attention._extra_state", "self_attention.linear_proj.weight",
                         "self_attention.linear_proj._extra_state", "self_attention.linear_qkv.layer_norm_weight",
                         "self_attention.linear_qkv.weight", "self_attention.linear_qkv._extra_state",
                         "mlp.linear_fc1.layer_norm_weight", "mlp.linear_fc1.weight", "mlp.linear_fc1._extra_state",
                         "mlp.linear_fc2.weight", "mlp.linear_fc2._extra_state"]
            else:
                order = ["input_layernorm.weight", "input_layernorm.bias", "self_attention.linear_proj.weight",
                         "self_attention.linear_proj.bias", "self_attention.linear_qkv.weight",
                         "self_attention.linear_qkv.bias", "pre_mlp_layernorm.weight", "pre_mlp_layernorm.bias",
                         "mlp.linear_fc1.weight", "mlp.linear_fc1.bias", "mlp.linear_fc2.weight", "mlp.linear_fc2.bias"]
            for o in order:
                if o.endswith("_extra_state") or pre + o in mine:
                    keys.append((pre + o, f"decoder.layers.{l - stage * per}." + o))
        if stage == pp - 1:
            keys += [n for n in names if n.startswith("decoder.final_layernorm")]
            if "output_layer.weight" in names and (self.c["untied"] or pp > 1):
                keys.append("output_layer.weight")
        return [k if isinstance(k, tuple) else (k, k) for k in keys]


def namespace(cfg, meta, ls, tp, pp, dp, dist_opt, bf16):
    m = meta["model"]
    gbs, mbs = meta["data"]["global_batch_size"], meta["data"]["micro_batch_size"]
    llama = cfg["kind"] == "llama"
    return argparse.Namespace(
        num_layers=cfg["layers"], hidden_size=m["hidden_size"], ffn_hidden_size=m["ffn_hidden_size"],
        num_attention_heads=m["num_attention_heads"], group_query_attention=llama, num_query_groups=cfg["groups"],
        kv_channels=m["hidden_size"] // m["num_attention_heads"], seq_length=m["seq_length"],
        max_position_embeddings=m["max_position_embeddings"], make_vocab_size_divisible_by=128,
        padded_vocab_size=m["padded_vocab_size"], position_embedding_type="rope" if llama else "learned_absolute",
        add_position_embedding=not llama, rotary_base=10000, rotary_percent=1.0, rotary_interleaved=False,
        use_rope_scaling=False, normalization="RMSNorm" if llama else "LayerNorm", layernorm_epsilon=1e-5,
        layernorm_zero_centered_gamma=False, swiglu=llama, squared_relu=False,
        untie_embeddings_and_output_weights=llama, add_bias_linear=not llama, add_qkv_bias=not llama,
        qk_layernorm=False, qk_l2_norm=False, bias_gelu_fusion=not llama, openai_gelu=False,
        apply_residual_connection_post_layernorm=False, multi_latent_attention=False, num_experts=None,
        hidden_dropout=0.0, attention_dropout=0.0, init_method_std=0.02, softmax_type="vanilla",
        window_size=None, window_attn_skip_freq=None,
        tokenizer_type="GPT2BPETokenizer", vocab_file=VOCAB, merge_file=MERGES, tokenizer_model=None,
        vocab_size=None, tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=None, expert_model_parallel_size=1, context_parallel_size=1,
        data_parallel_size=dp, world_size=tp * pp * dp, use_distributed_optimizer=dist_opt,
        overlap_grad_reduce=True, ddp_bucket_size=3000, ddp_num_buckets=None,
        ddp_pad_buckets_for_high_nccl_busbw=False, num_distributed_optimizer_instances=1,
        overlap_param_gather_with_optimizer_step=False, accumulate_allreduce_grads_in_fp32=True,
        global_batch_size=gbs, micro_batch_size=mbs, consumed_train_samples=meta["consumed_samples"],
        consumed_valid_samples=meta["data"]["eval_batches_done"] * gbs, seed=meta["rng"]["seed"],
        lr=ls["lr"], min_lr=ls["min_lr"], lr_decay_style=ls["style"], weight_decay=meta["optimizer"]["weight_decay"],
        adam_beta1=meta["optimizer"]["beta1"], adam_beta2=meta["optimizer"]["beta2"], adam_eps=meta["optimizer"]["eps"],
        clip_grad=meta["optimizer"]["clip_grad"], decoupled_lr=None, bf16=bf16, fp16=False,
        params_dtype=torch.bfloat16 if bf16 else torch.float32, ckpt_format="torch",
        transformer_impl="transformer_engine" if llama else "local", train_iters=6, iteration=meta["iteration"],
        no_save_optim=None, save="ckpt", load=None)


def write_megatron(cfg, src, out, tp, pp, dp, dist_opt, bf16):
    """src: an mgraph checkpoint's iteration directory, or its (tensors, meta)"""
    mg, meta = read_mgraph(src) if isinstance(src, str) else src
    lay = Layout(cfg["kind"], cfg)
    vals = [lay.logical(mg, s) for s in ("", ".exp_avg", ".exp_avg_sq")]
    it = meta["iteration"]
    step = it - meta["optimizer_start"]
    ls = meta["lr_schedule"]
    sched = {"max_lr": ls["lr"], "lr_warmup_steps": ls["warmup_steps"], "num_steps": ls["num_steps"],
             "lr_decay_style": ls["style"], "lr_decay_steps": ls["decay_steps"], "min_lr": ls["min_lr"],
             "start_wd": meta["optimizer"]["weight_decay"], "end_wd": meta["optimizer"]["weight_decay"],
             "wd_incr_style": "constant", "wd_incr_steps": 6 * meta["data"]["global_batch_size"]}
    args = namespace(cfg, meta, ls, tp, pp, dp, dist_opt, bf16)
    it_dir = f"{out}/iter_{it:07d}"
    n_buckets = 0
    for p in range(pp):
        keys = lay.stage_keys(list(vals[0]), pp, p)
        for t in range(tp):
            d = f"{it_dir}/mp_rank_{t:02d}" + (f"_{p:03d}" if pp > 1 else "")
            os.makedirs(d)
            model, params = {}, []
            for full, local in keys:
                if full.endswith("_extra_state"):  # Transformer Engine's: bytes, or an empty tensor
                    model[local] = io.BytesIO(b"te extra state") if "core_attention" in full else torch.zeros(0, dtype=torch.uint8)
                    continue
                w = lay.shard(full, vals[0][full], tp, t).contiguous()
                model[local] = w.to(torch.bfloat16) if bf16 else w.clone()
                params.append((full, local, w, lay.shard(full, vals[1][full], tp, t), lay.shard(full, vals[2][full], tp, t)))
            groups = [{"wd_mult": 1.0, "lr_mult": 1.0, "is_expert_parallel": False, "default_config": True,
                       "is_decoupled_lr": False, "max_lr": ls["lr"], "min_lr": ls["min_lr"], "lr": 0.0,
                       "betas": (meta["optimizer"]["beta1"], meta["optimizer"]["beta2"]), "eps": meta["optimizer"]["eps"],
                       "weight_decay": meta["optimizer"]["weight_decay"], "amsgrad": False},
                      {"wd_mult": 0.0, "lr_mult": 1.0, "is_expert_parallel": False, "default_config": False,
                       "is_decoupled_lr": False, "max_lr": ls["lr"], "min_lr": ls["min_lr"], "lr": 0.0,
                       "betas": (meta["optimizer"]["beta1"], meta["optimizer"]["beta2"]), "eps": meta["optimizer"]["eps"],
                       "weight_decay": 0.0, "amsgrad": False}]
            nowd = lambda local, w: w.dim() == 1 or local.endswith(".bias")  # noqa: E731
            if dist_opt:
                for g in groups:
                    g["step"] = step
                optimizer = {"optimizer": {"param_groups": groups}}
                shared = [pp > 1 and not cfg["untied"] and
                          ((p == 0 and local == "embedding.word_embeddings.weight") or
                           (p == pp - 1 and local == "output_layer.weight")) for _, local, *_ in params]
                offs, tot, nb = dist_opt_layout([x[2].numel() for x in params], shared,
                                                3000 if p == 0 else None, dp)
                n_buckets = max(n_buckets, nb)
                flat = {k: torch.zeros(tot) for k in ("param", "exp_avg", "exp_avg_sq")}
                for (full, local, w, ea, eas), o in zip(params, offs):
                    for k, v in (("param", w), ("exp_avg", ea), ("exp_avg_sq", eas)):
                        flat[k][o:o + v.numel()] = v.reshape(-1)
                dtype_key = (torch.bfloat16 if bf16 else torch.float32, torch.float32)
                torch.save({"buckets_coalesced": True, 0: {dtype_key: dict(flat, numel_unpadded=tot)}},
                           f"{d}/distrib_optim.pt")
            else:
                ids = {}
                for gi, g in enumerate(groups):
                    g["params"] = []
                order = [x for x in params if not nowd(x[1], x[2])] + [x for x in params if nowd(x[1], x[2])]
                for i, x in enumerate(order):
                    ids[x[1]] = i
                    groups[1 if nowd(x[1], x[2]) else 0]["params"].append(i)
                state = {ids[local]: {"step": torch.tensor(float(step)), "exp_avg": ea.clone(), "exp_avg_sq": eas.clone()}
                         for _, local, w, ea, eas in params}
                optimizer = {"state": dict(sorted(state.items())), "param_groups": groups}
            torch.save({"args": args, "checkpoint_version": 3.0, "iteration": it, "model": model,
                        "optimizer": optimizer, "opt_param_scheduler": sched,
                        "rng_state": [{"random_rng_state": (3, tuple(range(5)), None), "np_rng_state": ("MT19937",),
                                       "torch_rng_state": torch.zeros(8, dtype=torch.uint8),
                                       "cuda_rng_state": torch.zeros(8, dtype=torch.uint8),
                                       "rng_tracker_states": {}}],
                        "num_floating_point_operations_so_far": 12345.0}, f"{d}/model_optim_rng.pt")
    with open(f"{out}/latest_checkpointed_iteration.txt", "w") as f:
        f.write(str(it))
    return n_buckets


def dist_shards(lay, name, full, tp, L):
    """Megatron-Core's sharded tensor of logical tensor `name` (global layer numbers) under
    tp: (key, global shape, [(offsets, chunk)]) -- a layer's tensors stacked on a prepended
    layer axis, a gated linear_fc1 as [gate; up] with each rank's halves at their places
    (apply_swiglu_sharded_factory)"""
    layer = None
    if name.startswith("decoder.layers."):
        layer = int(name.split(".")[2])
        key = "decoder.layers." + name.split(".", 3)[3]
    else:
        key = name
    pieces = []
    if name.endswith("linear_fc1.weight") and lay.kind == "llama":
        f = full.shape[0] // 2
        for t in range(tp):
            both = lay.shard(name, full, tp, t)
            gate, up = both.chunk(2, 0)
            pieces += [((t * (f // tp), 0), gate), ((f + t * (f // tp), 0), up)]
    else:
        for t in range(tp):
            part = lay.shard(name, full, tp, t)
            if part is full:
                pieces = [((0,) * full.dim(), full)]
                break
            if part.shape[0] != full.shape[0]:
                pieces.append(((t * part.shape[0],) + (0,) * (full.dim() - 1), part))
            else:
                pieces.append(((0, t * part.shape[1]), part))
    if layer is None:
        return key, tuple(full.shape), pieces
    return key, (L,) + tuple(full.shape), [((layer,) + o, c.unsqueeze(0)) for o, c in pieces]


def write_megatron_dist(cfg, src, out, tp, pp, dp, bf16, optim):
    """--ckpt-format torch_dist: metadata.json, PyTorch Distributed Checkpoint's .metadata and
    .distcp files (dcp.save, two writer threads), the common state as Megatron-Core >= 0.15
    stores it (a "common_state" object); the optimizer in model space
    (--dist-ckpt-optim-fully-reshardable), or in dp_reshardable flat buffers (optim "flat")"""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed._shard.sharded_tensor import Shard, ShardMetadata, init_from_local_shards
    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method=f"file://{WORK}/pg-store", rank=0, world_size=1)
    mg, meta = read_mgraph(src) if isinstance(src, str) else src
    lay = Layout(cfg["kind"], cfg)
    vals = [lay.logical(mg, x) for x in ("", ".exp_avg", ".exp_avg_sq")]
    if not cfg["untied"]:
        for v in vals:  # a tied output layer is the embedding's copy: not a tensor of its own
            v.pop("output_layer.weight", None)
    it = meta["iteration"]
    ls = meta["lr_schedule"]
    L = cfg["layers"]
    acc = {}  # key -> (global shape, [(offsets, chunk)])

    def add(key, shape, pieces, dtype):
        got = acc.setdefault(key, (shape, []))
        got[1].extend((o, c.to(dtype).contiguous()) for o, c in pieces)

    for name in vals[0]:
        key, shape, pieces = dist_shards(lay, name, vals[0][name], tp, L)
        add(key, shape, pieces, torch.bfloat16 if bf16 else torch.float32)
        if optim == "model_space":
            for k, v in (("param", vals[0]), ("exp_avg", vals[1]), ("exp_avg_sq", vals[2])):
                _, _, pc = dist_shards(lay, name, v[name], tp, L)
                add(f"optimizer.state.{k}.{key}", shape, pc, torch.float32)
    sd = {}
    for key, (shape, pieces) in acc.items():
        shards = [Shard(c, ShardMetadata(list(o), list(c.shape), "rank:0/cpu")) for o, c in pieces]
        sd[key] = init_from_local_shards(shards, *shape)
    if optim == "flat":  # (what it holds does not matter: the converter refuses it without --no-load-optim)
        sd["optimizer.distributed.dp_group_idx_0.gbuf_idx_0.dtype_(torch.float32, torch.float32).bucket_idx_0.exp_avg"] = \
            torch.zeros(100)
    def obj(x):
        b = io.BytesIO()
        torch.save([x], b)
        b.seek(0)
        return b
    step = it - meta["optimizer_start"]
    sched = {"max_lr": ls["lr"], "lr_warmup_steps": ls["warmup_steps"], "num_steps": ls["num_steps"],
             "lr_decay_style": ls["style"], "lr_decay_steps": ls["decay_steps"], "min_lr": ls["min_lr"],
             "start_wd": meta["optimizer"]["weight_decay"], "end_wd": meta["optimizer"]["weight_decay"],
             "wd_incr_style": "constant", "wd_incr_steps": 6 * meta["data"]["global_batch_size"]}
    args = namespace(cfg, meta, ls, tp, pp, dp, True, bf16)
    args.ckpt_format = "torch_dist"
    common = {"args": args, "checkpoint_version": 3.0, "iteration": it, "opt_param_scheduler": sched,
              "num_floating_point_operations_so_far": 1.0,
              "optimizer": {"optimizer": {"param_groups": [{"step": step, "wd_mult": 1.0}, {"step": step, "wd_mult": 0.0}]},
                            "param_state_sharding_type": "fully_reshardable" if optim == "model_space" else "dp_reshardable"}}
    sd["common_state/shard_0_1"] = obj(common)
    sd["decoder.layers.self_attention.core_attention._extra_state/shard_0_4"] = obj(io.BytesIO(b"te"))
    sd["rng_state/shard_0_4"] = obj({"random_rng_state": (3, (1, 2), None)})
    d = f"{out}/iter_{it:07d}"
    class Planner(dcp.DefaultSavePlanner):  # Megatron's MCoreSavePlanner: objects already serialized
        def transform_object(self, write_item, object):  # noqa: A002
            return object

    dcp.save(sd, storage_writer=dcp.FileSystemWriter(d, thread_count=2), planner=Planner())
    json.dump({"sharded_backend": "torch_dist", "sharded_backend_version": 1, "common_backend": "torch",
               "common_backend_version": 1}, open(f"{d}/metadata.json", "w"))
    with open(f"{out}/latest_checkpointed_iteration.txt", "w") as f:
        f.write(str(it))
    return sorted(os.listdir(d))


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def compare(name, got, want, it0, first_ref=None):
    """got / want: iteration -> (loss, lr)"""
    its = sorted(k for k in got if k > it0)
    if not its or its[0] != it0 + 1:
        fail(f"{name}: resumed iterations {its}, want from {it0 + 1}")
        return
    if first_ref is not None:
        r = rel(got[its[0]][0], first_ref)
        print(f"  {name}: first loss {got[its[0]][0]!r} vs mgraph's own checkpoint {first_ref!r}: relative {r:.2e}")
        if r > 1e-6:
            fail(f"{name}: first loss differs from the run from the same weights by {r:.2e} > 1e-6")
    worst = 0.0
    for i in its:
        if i not in want:
            fail(f"{name}: no reference iteration {i}")
            return
        worst = max(worst, rel(got[i][0], want[i][0]))
        if got[i][1] is not None and want[i][1] is not None and rel(got[i][1], want[i][1]) > 1e-6:
            fail(f"{name}: iteration {i}: lr {got[i][1]} vs {want[i][1]} (the schedule was not kept)")
    print(f"  {name}: iterations {its[0]}..{its[-1]} within {worst:.2e} of the uninterrupted run")
    if worst > 1e-5:
        fail(f"{name}: losses differ from the uninterrupted run by {worst:.2e} > 1e-5")


BASE = ["--text-file", TEXT, "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", VOCAB, "--merge-file", MERGES,
        "--num-layers", "4", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32",
        "--micro-batch-size", "2", "--global-batch-size", "8", "--eval-interval", "1000", "--eval-iters", "0",
        "--log-interval", "1", "--lr", "2e-3", "--min-lr", "2e-4", "--lr-warmup-iters", "2", "--lr-decay-iters", "6",
        "--lr-decay-style", "cosine", "--weight-decay", "0.1", "--hidden-dropout", "0", "--attention-dropout", "0",
        "--cpu-workers", "1", "--train-iters", "6"]
LLAMA = ["--normalization", "RMSNorm", "--position-embedding-type", "rope", "--swiglu", "--disable-bias-linear",
         "--untie-embeddings-and-output-weights", "--group-query-attention", "--num-query-groups", "2",
         "--ffn-hidden-size", "96"]
TP2PP2 = ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"]


def case(kind):
    print(f"== {kind}")
    extra = LLAMA if kind == "llama" else []
    cfg = {"kind": kind, "layers": 4, "heads": 4, "groups": 2 if kind == "llama" else 4, "untied": kind == "llama"}
    d = kind
    os.makedirs(d)
    run([RUN] + BASE + extra + TP2PP2 + ["--save", f"{d}/ck", "--save-interval", "3", "--metrics-file",
                                         f"{d}/full.jsonl"], f"{d}/full", np=4)
    full = metrics(f"{d}/full.jsonl")
    dist = kind == "llama"
    nb = write_megatron(cfg, f"{d}/ck/iter_0000003", f"{d}/meg", tp=2, pp=2, dp=2, dist_opt=dist, bf16=kind == "llama")
    if dist:
        print(f"  distributed optimizer: the first stage's buffer in {nb} buckets")
        if nb < 2:
            fail("the test's buffer layout has one bucket: it does not exercise bucketing")
    conv = [CONVERT, "--from-megatron", f"{d}/meg", "--save", f"{d}/conv"]
    if kind == "gpt2":
        conv += ["--true-vocab-size", "896"]
    r = run(conv, f"{d}/convert")
    print("  " + r.stdout.strip())
    conv_meta = json.load(open(f"{d}/conv/iter_0000003/index.json"))["meta"]
    own_meta = json.load(open(f"{d}/ck/iter_0000003/index.json"))["meta"]
    for k in ("model", "iteration", "consumed_samples", "lr_schedule", "optimizer_start"):
        if conv_meta.get(k) != own_meta.get(k):
            fail(f"{kind}: converted meta {k} = {conv_meta.get(k)} vs mgraph's {own_meta.get(k)}")
    # the converted state equals mgraph's own, tensor by tensor (bitwise: fp32 throughout)
    a, _ = read_mgraph(f"{d}/conv/iter_0000003")
    b, _ = read_mgraph(f"{d}/ck/iter_0000003")
    if set(a) != set(b):
        fail(f"{kind}: converted tensors {sorted(set(a) ^ set(b))[:6]} differ in name")
    else:
        bad = [n for n in a if not torch.equal(a[n], b[n])]
        print(f"  {len(a)} tensors (parameters and both moments) equal to mgraph's own checkpoint: {len(a) - len(bad)}")
        if bad:
            fail(f"{kind}: {len(bad)} converted tensors differ, e.g. {bad[:4]}")
    plans = {"llama": [("tp2_dp2", ["--tensor-model-parallel-size", "2", "--use-distributed-optimizer"], 4),
                       ("serial", [], 1)],
             "gpt2": [("pp2_dp2", ["--pipeline-model-parallel-size", "2", "--use-distributed-optimizer"], 4)]}[kind]
    for name, plan, np in plans:
        vocab = ["--make-vocab-size-divisible-by", "256"] if "--tensor-model-parallel-size" not in plan else []
        own = run([RUN] + BASE + extra + plan + vocab + ["--load", f"{d}/ck/iter_0000003", "--metrics-file", f"{d}/own_{name}.jsonl"],
                  f"{d}/own_{name}", np=np)
        res = run([RUN] + BASE + extra + plan + vocab + ["--load", f"{d}/conv", "--metrics-file", f"{d}/res_{name}.jsonl"],
                  f"{d}/res_{name}", np=np)
        if "at iteration 3" not in res.stdout + res.stderr:
            fail(f"{kind} {name}: the resumed run does not say it loaded iteration 3")
        o = metrics(f"{d}/own_{name}.jsonl")
        compare(f"{kind} {name}", metrics(f"{d}/res_{name}.jsonl"), full, 3, o.get(4, (None,))[0])


def case_dist():
    """llama as torch_dist, from the llama case's mgraph checkpoint (run it first) or a new run"""
    print("== llama_dist")
    cfg = {"kind": "llama", "layers": 4, "heads": 4, "groups": 2, "untied": True}
    d = "llama_dist"
    os.makedirs(d)
    src = "llama/ck/iter_0000003"
    if not os.path.isdir(src):
        run([RUN] + BASE + LLAMA + TP2PP2 + ["--save", f"{d}/ck", "--save-interval", "3", "--metrics-file",
                                             f"{d}/full.jsonl"], f"{d}/full", np=4)
        src, full = f"{d}/ck/iter_0000003", metrics(f"{d}/full.jsonl")
    else:
        full = metrics("llama/full.jsonl")
    files = write_megatron_dist(cfg, src, f"{d}/meg", tp=2, pp=2, dp=2, bf16=True, optim="model_space")
    print(f"  torch_dist files: {files}")
    r = run([CONVERT, "--from-megatron", f"{d}/meg", "--save", f"{d}/conv"], f"{d}/convert")
    print("  " + r.stdout.strip())
    a, _ = read_mgraph(f"{d}/conv/iter_0000003")
    b, own_meta = read_mgraph(src)
    conv_meta = json.load(open(f"{d}/conv/iter_0000003/index.json"))["meta"]
    for k in ("model", "iteration", "consumed_samples", "lr_schedule", "optimizer_start"):
        if conv_meta.get(k) != own_meta.get(k):
            fail(f"llama_dist: converted meta {k} = {conv_meta.get(k)} vs mgraph's {own_meta.get(k)}")
    bad = [n for n in b if n not in a or not torch.equal(a[n], b[n])]
    print(f"  {len(a)} tensors equal to mgraph's own checkpoint: {len(a) - len(bad)}")
    if bad or set(a) != set(b):
        fail(f"llama_dist: {len(bad)} converted tensors differ, e.g. {bad[:4]}")
    res = run([RUN] + BASE + LLAMA + ["--make-vocab-size-divisible-by", "256", "--load", f"{d}/conv", "--metrics-file",
                                      f"{d}/res.jsonl"], f"{d}/res")
    compare("llama_dist serial", metrics(f"{d}/res.jsonl"), full, 3)
    # the default dp_reshardable optimizer state: refused unless --no-load-optim (model, iteration, schedule)
    write_megatron_dist(cfg, src, f"{d}/flat", tp=2, pp=2, dp=2, bf16=False, optim="flat")
    expect2("torch_dist with dp_reshardable optimizer state", [CONVERT, "--from-megatron", f"{d}/flat", "--save",
                                                               f"{d}/o1"], "--no-load-optim", f"{d}/o1")
    r = run([CONVERT, "--from-megatron", f"{d}/flat", "--save", f"{d}/model_only", "--no-load-optim"], f"{d}/model_only")
    m = json.load(open(f"{d}/model_only/iter_0000003/index.json"))["meta"]
    if m.get("optimizer_state") is not False or m.get("iteration") != 3:
        fail(f"llama_dist --no-load-optim: meta {m.get('optimizer_state')}, iteration {m.get('iteration')}")
    else:
        print("  --no-load-optim: the model, iteration 3 and the schedule, no moments")


def expect2(name, cmd, want, out=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    if r.returncode != 2 or want not in r.stderr:
        fail(f"{name}: exit {r.returncode}, stderr {r.stderr.strip()!r}; want exit 2 and '{want}'")
    elif out and os.path.exists(out):
        fail(f"{name}: a failed conversion left {out}")
    else:
        print(f"  ok {name}: {r.stderr.strip()}")


def errors():
    print("== errors")
    # a random GPT-2 (4 layers, hidden 64, vocabulary 896 padded to 1024) at iteration 3, as
    # mgraph's checkpoint would hold it, written the Megatron way: no training needed here
    g = torch.Generator().manual_seed(5)
    rnd = lambda *shape: torch.randn(*shape, generator=g) * 0.02  # noqa: E731
    H, F, L = 64, 256, 4
    mg = {"wte.weight": rnd(1024, H), "wpe.weight": rnd(32, H), "ln_f.weight": 1 + rnd(H), "ln_f.bias": rnd(H)}
    for l in range(L):
        for n, shp in (("ln_1.weight", (H,)), ("ln_1.bias", (H,)), ("attn.c_attn.weight", (3 * H, H)),
                       ("attn.c_attn.bias", (3 * H,)), ("attn.c_proj.weight", (H, H)), ("attn.c_proj.bias", (H,)),
                       ("ln_2.weight", (H,)), ("ln_2.bias", (H,)), ("mlp.c_fc.weight", (F, H)), ("mlp.c_fc.bias", (F,)),
                       ("mlp.c_proj.weight", (H, F)), ("mlp.c_proj.bias", (H,))):
            mg[f"h.{l}.{n}"] = rnd(*shp)
    for n in list(mg):
        mg[n + ".exp_avg"], mg[n + ".exp_avg_sq"] = rnd(*mg[n].shape), rnd(*mg[n].shape).abs()
    meta = {"model": {"hidden_size": H, "ffn_hidden_size": F, "num_attention_heads": 4, "seq_length": 32,
                      "max_position_embeddings": 32, "padded_vocab_size": 1024},
            "iteration": 3, "optimizer_start": 0, "consumed_samples": 24,
            "data": {"global_batch_size": 8, "micro_batch_size": 2, "eval_batches_done": 0}, "rng": {"seed": 1234},
            "optimizer": {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.1, "clip_grad": 1.0},
            "lr_schedule": {"lr": 2e-3, "min_lr": 2e-4, "warmup_steps": 16, "decay_steps": 48, "style": "cosine",
                            "num_steps": 24}}
    src = "e/meg"
    write_megatron({"kind": "gpt2", "layers": L, "heads": 4, "groups": 4, "untied": False}, (mg, meta), src, 2, 2, 2,
                   False, False)
    r = run([CONVERT, "--from-megatron", src, "--save", "e/ok", "--true-vocab-size", "896"], "e/ok")
    print("  the unbroken checkpoint converts: " + r.stdout.strip())
    rank = f"{src}/iter_0000003/mp_rank_01_001/model_optim_rng.pt"

    def variant(name, edit):
        d = f"bad_{name}"
        shutil.copytree(src, d)
        edit(d)
        return d

    def truncate(d):
        p = d + rank[len(src):]
        b = open(p, "rb").read()
        open(p, "wb").write(b[: len(b) * 2 // 3])

    expect2("truncated rank file", [CONVERT, "--from-megatron", variant("trunc", truncate), "--save", "o1"],
            "model_optim_rng.pt", "o1")
    expect2("missing rank directory", [CONVERT, "--from-megatron",
                                       variant("missing", lambda d: shutil.rmtree(f"{d}/iter_0000003/mp_rank_01_000")),
                                       "--save", "o2"], "rank directories", "o2")

    def flip(d):
        p = d + rank[len(src):]
        b = bytearray(open(p, "rb").read())
        import zipfile
        with zipfile.ZipFile(p) as z:
            info = [i for i in z.infolist() if "/data/" in i.filename][-1]
        h = info.header_offset
        o = h + 30 + int.from_bytes(b[h + 26:h + 28], "little") + int.from_bytes(b[h + 28:h + 30], "little")
        b[o] ^= 1
        open(p, "wb").write(bytes(b))

    expect2("flipped byte", [CONVERT, "--from-megatron", variant("flip", flip), "--save", "o3"], "CRC-32", "o3")

    def edit_args(**kw):
        def f(d):
            for r in os.listdir(f"{d}/iter_0000003"):
                p = f"{d}/iter_0000003/{r}/model_optim_rng.pt"
                sd = torch.load(p, weights_only=False)
                for k, v in kw.items():
                    setattr(sd["args"], k, v)
                torch.save(sd, p)
        return f

    expect2("MoE args", [CONVERT, "--from-megatron", variant("moe", edit_args(num_experts=8)), "--save", "o4"],
            "--num-experts", "o4")
    expect2("apply-layernorm-1p", [CONVERT, "--from-megatron", variant("ln1p", edit_args(layernorm_zero_centered_gamma=True)),
                                   "--save", "o5"], "--apply-layernorm-1p", "o5")
    expect2("args that do not fit", [CONVERT, "--from-megatron", variant("ffn", edit_args(ffn_hidden_size=128)),
                                     "--save", "o6", "--true-vocab-size", "896"], "shape", "o6")
    expect2("no vocabulary size", [CONVERT, "--from-megatron", variant("vocab", edit_args(vocab_file="/nonexistent")),
                                   "--save", "o7"], "--true-vocab-size", "o7")
    expect2("not a Megatron checkpoint", [CONVERT, "--from-megatron", WORK, "--save", "o8"], "not a Megatron", "o8")
    expect2("mgraph-run --load of a Megatron checkpoint", [RUN] + BASE + ["--train-iters", "4", "--load", src],
            "mgraph-convert --from-megatron")


def layout():
    """dist_opt_layout (which mgraph's C reader mirrors) against Megatron-Core's own
    DistributedOptimizer._compute_per_buffer_param_layout, from a checkout (--megatron DIR)"""
    import random
    import types
    import warnings
    print("== layout")
    if not MEGATRON:
        print("  (no --megatron DIR: skipped)")
        return
    warnings.filterwarnings("ignore")
    sys.path.insert(0, MEGATRON)
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer
    rng = random.Random(0)
    bad = multi = 0
    for _ in range(300):
        n = rng.randint(1, 30)
        numels = [rng.choice([1, 7, 64, 100, 257, 4096, 3000, 65]) * rng.randint(1, 5) for _ in range(n)]
        shared = [False] * n
        shared[0] = rng.random() < 0.5
        shared[-1] = shared[-1] or rng.random() < 0.5
        bs, dp, busbw = rng.choice([None, 500, 3000, 10000]), rng.choice([1, 2, 3, 8]), rng.random() < 0.2
        params = []
        for k, sh in zip(numels, shared):
            p = torch.nn.Parameter(torch.empty(k))
            if sh:
                p.shared_embedding = True
            params.append(p)
        lay = DistributedOptimizer._compute_per_buffer_param_layout(
            params, bs, dp, types.SimpleNamespace(pad_buckets_for_high_nccl_busbw=busbw))
        cum, tot = [], 0
        for u in lay.per_bucket_numel_unpadded:
            cum.append(tot)
            tot += u
        want = []
        for p in params:
            s0, _, b = lay.param_index_map[p]
            want.append(cum[b] + s0 - lay.bucket_indices[b][0])
        got, gtot, nb = dist_opt_layout(numels, shared, bs, dp, busbw)
        multi += nb > 1
        bad += got != want or gtot != tot
    print(f"  300 random layouts ({multi} with several buckets): {bad} differ from Megatron-Core's")
    if bad:
        fail(f"{bad} layouts differ from Megatron-Core's")


for c in CASES:
    {"llama": lambda: case("llama"), "gpt2": lambda: case("gpt2"), "errors": errors, "layout": layout,
     "dist": case_dist}[c]()
print("FAILED" if fails else "passed", f"({fails} failures)")
sys.exit(1 if fails else 0)
