#!/usr/bin/env python3
"""mgraph-generate against Hugging Face transformers' generate (reference check, not a
runtime dependency).

  generate_hf.py MGRAPH_GENERATE MGRAPH_CONVERT WORK_DIR CASE

Small random models (every weight, bias and norm perturbed, so that a wrong layout cannot
hide behind zeros and ones) imported with mgraph-convert --from-hf --tokenizer-type
NullTokenizer (the prompts are token ids).

  transformers  GPT2LMHeadModel, and LlamaForCausalLM with grouped-query attention (8 heads,
         2 groups, untied), saved with save_pretrained: mgraph-generate --greedy gives
         generate(do_sample=False)'s 32 new tokens for each of three prompts, and each
         token's log-probability within 1e-4 of transformers' (output_scores); at least 8
         distinct tokens, so that a degenerate model cannot pass by repeating one.
  transformers_moe  the same for MixtralForCausalLM (GQA, 4 experts top-2) and
         DeepseekV3ForCausalLM (multi-latent attention with a q latent and YaRN, a dense
         layer then MoE layers of 8 experts, group-limited sigmoid routing with a random
         correction bias, a shared expert), their key/value cache against --no-kv-cache, and
         tensor parallelism 2 against one rank.
         (mgraph-run's samples of a model with multi-token prediction: tools.megatron_logging.)
  tp     under mpirun, --tensor-model-parallel-size 2 gives the one-rank run's tokens and
         log-probabilities within 1e-5 (GPT-2 and LLaMA with GQA written without torch;
         greedy, sampled, --no-kv-cache; Mixtral and DeepseekV3 in transformers_moe); a
         size other than the launch's exits 2.
  cache  the key/value cache against recomputing the whole sequence for every token
         (--no-kv-cache): the same tokens, log-probabilities within 3e-5 (GPT-2 and
         LLaMA with GQA written without torch; greedy and sampled).
  seed   sampling (--temperature 0.8 --top-k 20 --top-p 0.9) with one seed twice gives the
         same tokens, another seed others; the stop at the end-of-document token
         (--null-tokenizer-eod-id) and --ignore-eos.
  errors bad input exits 2 with a message and prints nothing: no --load, a missing,
         corrupt, truncated or non-checkpoint directory, a wrong tokenizer or vocabulary,
         a prompt too long for the positions, bad numbers, unknown flags, an id outside
         the vocabulary, a missing or empty prompt file; --prompt-file's prompts are
         --prompt's.
Only `transformers` and `transformers_moe` need torch: it exits 77 (skipped), loudly, where the pinned torch/transformers are missing; under CI or
tools/test.sh that is a failure (tests/support/reference.py).
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import reference  # noqa: E402  (tests/support/reference.py)

GEN, CONVERT, WORK = (os.path.abspath(a) for a in sys.argv[1:4])
CASE = sys.argv[4]
if CASE in ("transformers", "transformers_moe"):
    reference.require("torch", "transformers")
    import torch
    torch.manual_seed(0)

shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
os.chdir(WORK)

V, POS, NEW = 256, 64, 32
PROMPTS = [[3, 17, 42, 100, 7], [200, 1, 99], [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]]


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def run(argv, what, code=0):
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != code:
        print(p.stdout, p.stderr)
        fail(f"{what} exited {p.returncode}, want {code}")
    return p


def write_hf(kind, seed, layers=2, H=64, NH=8, G=2, F=96):
    """A random Hugging Face model directory written without torch (safetensors by hand):
    GPT2LMHeadModel or LlamaForCausalLM with grouped-query attention, untied. Norm weights
    around 1, everything else normal(0, 0.2) (vectors 0.1)."""
    import random
    import struct
    rnd = random.Random(seed)
    hd = H // NH
    if kind == "gpt2":
        t = {"wte.weight": [V, H], "wpe.weight": [POS, H], "ln_f.weight": [H], "ln_f.bias": [H]}
        for i in range(layers):
            for n, shp in (("ln_1.weight", [H]), ("ln_1.bias", [H]), ("attn.c_attn.weight", [H, 3 * H]),
                           ("attn.c_attn.bias", [3 * H]), ("attn.c_proj.weight", [H, H]), ("attn.c_proj.bias", [H]),
                           ("ln_2.weight", [H]), ("ln_2.bias", [H]), ("mlp.c_fc.weight", [H, 4 * H]),
                           ("mlp.c_fc.bias", [4 * H]), ("mlp.c_proj.weight", [4 * H, H]), ("mlp.c_proj.bias", [H])):
                t[f"h.{i}.{n}"] = shp
        cfg = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": V, "n_positions": POS,
               "n_embd": H, "n_layer": layers, "n_head": NH, "n_inner": None, "activation_function": "gelu_new",
               "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True}
    else:
        t = {"model.embed_tokens.weight": [V, H], "model.norm.weight": [H], "lm_head.weight": [V, H]}
        for i in range(layers):
            for n, shp in (("input_layernorm.weight", [H]), ("self_attn.q_proj.weight", [NH * hd, H]),
                           ("self_attn.k_proj.weight", [G * hd, H]), ("self_attn.v_proj.weight", [G * hd, H]),
                           ("self_attn.o_proj.weight", [H, NH * hd]), ("post_attention_layernorm.weight", [H]),
                           ("mlp.gate_proj.weight", [F, H]), ("mlp.up_proj.weight", [F, H]),
                           ("mlp.down_proj.weight", [H, F])):
                t[f"model.layers.{i}.{n}"] = shp
        cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": V, "hidden_size": H,
               "intermediate_size": F, "num_hidden_layers": layers, "num_attention_heads": NH,
               "num_key_value_heads": G, "rms_norm_eps": 1e-5, "max_position_embeddings": POS,
               "tie_word_embeddings": False, "rope_theta": 10000.0, "attention_bias": False, "mlp_bias": False,
               "hidden_act": "silu"}
    header, off, blobs = {}, 0, []
    for k, shp in t.items():
        n = 1
        for d in shp:
            n *= d
        norm = ("ln" in k or "norm" in k) and k.endswith("weight")
        vals = [rnd.gauss(1.0 if norm else 0.0, 0.1 if len(shp) == 1 else 0.2) for _ in range(n)]
        header[k] = {"dtype": "F32", "shape": shp, "data_offsets": [off, off + 4 * n]}
        blobs.append(struct.pack(f"<{n}f", *vals))
        off += 4 * n
    hj = json.dumps(header).encode()
    hj += b" " * (-len(hj) % 8)
    d = f"hf_{kind}"
    os.makedirs(d)
    with open(f"{d}/model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj + b"".join(blobs))
    json.dump(cfg, open(f"{d}/config.json", "w"))
    run([CONVERT, "--from-hf", d, "--save", f"ck_{kind}", "--tokenizer-type", "NullTokenizer"],
        f"mgraph-convert --from-hf ({kind})")
    return f"ck_{kind}"


def perturb(model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            norm = ("ln" in name or "norm" in name) and "weight" in name
            p.copy_(torch.randn_like(p) * (0.1 if p.dim() == 1 else 0.2) + (1.0 if norm else 0.0))
    model.eval()
    return model


def gpt2_model():
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(vocab_size=V, n_positions=POS, n_embd=64, n_layer=2, n_head=4, activation_function="gelu_new",
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None, eos_token_id=None)
    return perturb(GPT2LMHeadModel(cfg))


def llama_model():
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=8,
                      num_key_value_heads=2, rms_norm_eps=1e-5, max_position_embeddings=POS, tie_word_embeddings=False,
                      rope_theta=10000.0, attention_bias=False, mlp_bias=False, bos_token_id=None, eos_token_id=None,
                      attn_implementation="eager")
    return perturb(LlamaForCausalLM(cfg))


MOE_COMMON = dict(vocab_size=V, hidden_size=64, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None,
                  pad_token_id=None, rms_norm_eps=1e-6, max_position_embeddings=POS)


def mixtral_model():
    """MixtralForCausalLM: GQA (4 heads, 2 groups), 4 experts top-2 in both layers."""
    from transformers import MixtralConfig, MixtralForCausalLM
    cfg = MixtralConfig(**MOE_COMMON, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
                        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    return perturb(MixtralForCausalLM._from_config(cfg, attn_implementation="eager"))


def deepseek_model():
    """DeepseekV3ForCausalLM: multi-latent attention (q latent, YaRN factor 4, mscale 1), a
    dense first layer, then 2 MoE layers of 8 experts in 4 groups (top-4 of 2 groups),
    sigmoid scores with a random correction bias, scaling 2.5, a shared expert; and one
    multi-token-prediction layer in mgraph's checkpoint, which sampling must ignore."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
    cfg = DeepseekV3Config(**MOE_COMMON, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
                           num_attention_heads=4, num_key_value_heads=4, n_shared_experts=1, n_routed_experts=8,
                           num_experts_per_tok=4, n_group=4, topk_group=2, routed_scaling_factor=2.5,
                           norm_topk_prob=True, first_k_dense_replace=1, q_lora_rank=24, kv_lora_rank=16,
                           qk_nope_head_dim=12, qk_rope_head_dim=8, v_head_dim=10, rope_interleave=True,
                           rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                            "original_max_position_embeddings": 4096, "beta_fast": 32.0,
                                            "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0})
    model = perturb(DeepseekV3ForCausalLM._from_config(cfg, attn_implementation="eager"))
    with torch.no_grad():
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(torch.rand_like(b) * 0.6)  # selects experts, does not weigh them
    return model


def imported(model, name):
    model.save_pretrained(f"hf_{name}", safe_serialization=True)
    run([CONVERT, "--from-hf", f"hf_{name}", "--save", f"ck_{name}", "--tokenizer-type", "NullTokenizer"],
        f"mgraph-convert --from-hf ({name})")
    return f"ck_{name}"


def generate(ck, prompts, *flags, code=0):
    argv = [GEN, "--load", ck, "--vocab-size", str(V), "--json", "--max-new-tokens", str(NEW), *flags]
    for p in prompts:
        argv += ["--prompt", " ".join(map(str, p))]
    p = run(argv, "mgraph-generate " + " ".join(flags), code)
    if code:
        return p
    print(p.stderr.strip())
    out = [json.loads(line) for line in p.stdout.splitlines()]
    if len(out) != len(prompts):
        fail(f"{len(out)} results for {len(prompts)} prompts")
    for o, pr in zip(out, prompts):
        if o["prompt_tokens"] != pr:
            fail(f"prompt tokens {o['prompt_tokens']} != {pr}")
    return out


def mpirun(np_):
    """mpirun's argv for np_ ranks (tests/tools/CMakeLists.txt passes MPIEXEC and the environment)."""
    return [os.environ.get("MG_MPIEXEC", "mpirun"), "-np", str(np_)]


def tp_equals_serial(ck, name, serial, *flags):
    """mgraph-generate --tensor-model-parallel-size 2 under mpirun: the serial run's tokens,
    log-probabilities within 1e-5."""
    argv = [*mpirun(2), GEN, "--load", ck, "--vocab-size", str(V), "--json", "--max-new-tokens", str(NEW),
            "--tensor-model-parallel-size", "2", *flags]
    for p in PROMPTS:
        argv += ["--prompt", " ".join(map(str, p))]
    p = run(argv, f"{name}: mpirun -np 2 mgraph-generate --tensor-model-parallel-size 2 {' '.join(flags)}")
    out = [json.loads(line) for line in p.stdout.splitlines()]
    if [o["tokens"] for o in out] != [o["tokens"] for o in serial]:
        fail(f"{name} tp 2 {flags}: {[o['tokens'] for o in out]} != serial {[o['tokens'] for o in serial]}")
    gap = max(abs(a - b) for x, y in zip(out, serial) for a, b in zip(x["logprobs"], y["logprobs"]))
    print(f"{name} tp 2 {list(flags)}: the serial run's {sum(len(o['tokens']) for o in out)} tokens, "
          f"log-probabilities within {gap:.2e} (bound 1e-5); {p.stderr.strip().splitlines()[-1]}")
    if not gap <= 1e-5:
        fail(f"{name} tp 2: log-probabilities differ by {gap:.2e}")


def against_transformers(model, name, no_cache_too=False):
    ck = imported(model, name)
    # (the end-of-document token is NullTokenizer's default, the last id: transformers stops there too)
    out = generate(ck, PROMPTS, "--greedy")
    if no_cache_too:  # the key/value cache against recomputing the whole sequence for every token
        again = generate(ck, PROMPTS, "--greedy", "--no-kv-cache")
        if [o["tokens"] for o in out] != [o["tokens"] for o in again]:
            fail(f"{name}: cache {[o['tokens'] for o in out]} != recomputed {[o['tokens'] for o in again]}")
        gap = max(abs(p - q) for x, y in zip(out, again) for p, q in zip(x["logprobs"], y["logprobs"]))
        print(f"{name}: --no-kv-cache gives the same tokens, log-probabilities within {gap:.2e} (bound 3e-5)")
        if not gap <= 3e-5:
            fail(f"{name}: --no-kv-cache log-probabilities differ by {gap:.2e}")
        tp_equals_serial(ck, name, out, "--greedy")
    worst, distinct = 0.0, set()
    for o, pr in zip(out, PROMPTS):
        with torch.no_grad():
            r = model.generate(torch.tensor([pr]), max_new_tokens=NEW, do_sample=False, eos_token_id=V - 1,
                               pad_token_id=0, output_scores=True, return_dict_in_generate=True)
        want = r.sequences[0, len(pr):].tolist()
        if o["tokens"] != want:
            fail(f"{name} prompt {pr}: mgraph {o['tokens']} != transformers {want}")
        lp = [torch.log_softmax(s[0].double(), -1)[t].item() for s, t in zip(r.scores, want)]
        worst = max(worst, max(abs(a - b) for a, b in zip(o["logprobs"], lp)))
        distinct |= set(want)
        print(f"{name} prompt {pr}: {len(want)} tokens equal ({o['stop']})")
    print(f"{name}: worst log-probability difference {worst:.2e} (bound 1e-4); {len(distinct)} distinct tokens")
    if not worst <= 1e-4:
        fail(f"{name}: log-probabilities differ by {worst:.2e} > 1e-4")
    if len(distinct) < 8:
        fail(f"{name}: only {len(distinct)} distinct tokens: the model is too degenerate to check anything")


if CASE == "transformers":
    against_transformers(gpt2_model(), "gpt2")
    against_transformers(llama_model(), "llama")
elif CASE == "transformers_moe":
    against_transformers(mixtral_model(), "mixtral", no_cache_too=True)
    against_transformers(deepseek_model(), "deepseek_v3", no_cache_too=True)
elif CASE == "cache":
    for name in ("gpt2", "llama"):
        ck = write_hf(name, 5)
        for flags in (["--greedy"], ["--temperature", "1.5", "--seed", "7"]):
            a = generate(ck, PROMPTS, *flags)
            b = generate(ck, PROMPTS, *flags, "--no-kv-cache")
            worst = 0.0
            for x, y in zip(a, b):
                if x["tokens"] != y["tokens"]:
                    fail(f"{name} {flags}: cache {x['tokens']} != recomputed {y['tokens']}")
                worst = max(worst, max(abs(p - q) for p, q in zip(x["logprobs"], y["logprobs"])))
            n = sum(len(x["tokens"]) for x in a)
            print(f"{name} {flags}: {n} tokens equal, worst log-probability difference {worst:.2e} (bound 3e-5)")
            if not worst <= 3e-5:
                fail(f"{name} {flags}: log-probabilities differ by {worst:.2e}")
            if n < 60:
                fail(f"{name} {flags}: only {n} tokens generated")
elif CASE == "tp":
    for name in ("gpt2", "llama"):
        ck = write_hf(name, 9)
        for flags in (["--greedy"], ["--temperature", "1.5", "--seed", "7"]):
            tp_equals_serial(ck, name, generate(ck, PROMPTS, *flags), *flags)
        tp_equals_serial(ck, name, generate(ck, PROMPTS, "--greedy"), "--greedy", "--no-kv-cache")
    # the plan must be the launch's: exit 2 before anything is read
    for argv, want in (([GEN, "--tensor-model-parallel-size", "2"], "on 1 rank"),
                       ([*mpirun(2), GEN, "--tensor-model-parallel-size", "1"], "on 2 ranks")):
        p = run([*argv, "--load", ck, "--vocab-size", str(V), "--prompt", "1 2"], " ".join(argv[-3:]), 2)
        if p.stdout or want not in p.stderr:
            fail(f"{argv}: {p.stdout!r} / {p.stderr!r}: want exit 2 naming '{want}'")
        print(f"{' '.join(argv[-3:])}: exit 2, {p.stderr.strip().splitlines()[-1]}")
elif CASE == "seed":
    ck = write_hf("gpt2", 3)
    s = ["--temperature", "0.8", "--top-k", "20", "--top-p", "0.9"]
    a = generate(ck, PROMPTS, *s, "--seed", "11")
    b = generate(ck, PROMPTS, *s, "--seed", "11")
    c = generate(ck, PROMPTS, *s, "--seed", "12")
    g = generate(ck, PROMPTS, "--greedy")
    if [x["tokens"] for x in a] != [x["tokens"] for x in b]:
        fail("the same seed gave different tokens")
    if [x["tokens"] for x in a] == [x["tokens"] for x in c]:
        fail("another seed gave the same tokens")
    if [x["tokens"] for x in a] == [x["tokens"] for x in g]:
        fail("sampling gave the greedy tokens")
    print("same seed: same tokens; another seed and greedy: others")
    # stopping at the end-of-document token: make the greedy run's 5th token the EOD id
    stop_at = g[0]["tokens"][4]
    e = generate(ck, PROMPTS[:1], "--greedy", "--null-tokenizer-eod-id", str(stop_at))
    first = g[0]["tokens"].index(stop_at)
    if e[0]["stop"] != "eos" or e[0]["tokens"] != g[0]["tokens"][:first + 1]:
        fail(f"--null-tokenizer-eod-id {stop_at}: {e[0]} (want the greedy tokens up to the first {stop_at})")
    f = generate(ck, PROMPTS[:1], "--greedy", "--null-tokenizer-eod-id", str(stop_at), "--ignore-eos")
    if f[0]["tokens"] != g[0]["tokens"] or f[0]["stop"] != "length":
        fail("--ignore-eos did not generate the whole length")
    print(f"stops at the end-of-document token {stop_at} after {first + 1} tokens; --ignore-eos goes on")
elif CASE == "errors":
    shutil.copytree(write_hf("gpt2", 1, layers=1, H=8, NH=2), "ck")
    ok = run([GEN, "--load", "ck", "--vocab-size", str(V), "--prompt", "1 2 3", "--max-new-tokens", "4", "--greedy"],
             "a good run")
    if len(ok.stdout.split()) != 7 or "tokens/s" not in ok.stderr:
        fail(f"good run printed {ok.stdout!r} / {ok.stderr!r}")
    # a corrupt copy: a rank file's bytes changed (its checksum), and one truncated
    shutil.copytree("ck", "ck_corrupt")
    shutil.copytree("ck", "ck_short")
    it = [d for d in os.listdir("ck") if d.startswith("iter_")][0]
    rf = os.path.join("ck_corrupt", it, "rank_00000.safetensors")
    data = bytearray(open(rf, "rb").read())
    data[-5] ^= 0xFF
    open(rf, "wb").write(bytes(data))
    sf = os.path.join("ck_short", it, "rank_00000.safetensors")
    open(sf, "r+b").truncate(os.path.getsize(sf) - 100)
    os.makedirs("not_a_ckpt")
    open("empty.txt", "w").write("\n\n")
    base = ["--vocab-size", str(V), "--prompt", "1 2 3"]
    cases = [
        ("no --load", [GEN, "--prompt", "1 2"], "--load"),
        ("no prompt", [GEN, "--load", "ck", "--vocab-size", str(V)], "--prompt"),
        ("missing checkpoint", [GEN, "--load", "nowhere", *base], "nowhere"),
        ("not a checkpoint", [GEN, "--load", "not_a_ckpt", *base], "not_a_ckpt"),
        ("corrupt checkpoint", [GEN, "--load", "ck_corrupt", *base], "checksum"),
        ("truncated checkpoint", [GEN, "--load", "ck_short", *base], "rank_00000"),
        ("tokenizer without its vocabulary", [GEN, "--load", "ck", "--prompt", "1 2"], "--vocab-size"),
        ("another vocabulary", [GEN, "--load", "ck", "--vocab-size", "300", "--prompt", "1 2"], "vocabulary"),
        ("another tokenizer", [GEN, "--load", "ck", "--tokenizer-type", "ByteLevelTokenizer", "--prompt", "ab"],
         "--tokenizer-type"),
        ("prompt too long", [GEN, "--load", "ck", *base, "--max-new-tokens", str(POS)], "positions"),
        ("id outside the vocabulary", [GEN, "--load", "ck", "--vocab-size", str(V), "--prompt", "1 999"], "999"),
        ("bad temperature", [GEN, "--load", "ck", *base, "--temperature", "-1"], "--temperature"),
        ("bad top-p", [GEN, "--load", "ck", *base, "--top-p", "1.5"], "--top-p"),
        ("bad top-k", [GEN, "--load", "ck", *base, "--top-k", "x"], "--top-k"),
        ("zero new tokens", [GEN, "--load", "ck", *base, "--max-new-tokens", "0"], "--max-new-tokens"),
        ("unknown flag", [GEN, "--load", "ck", *base, "--lr", "1"], "--lr"),
        ("missing value", [GEN, "--load", "ck", *base, "--seed"], "--seed"),
        ("missing prompt file", [GEN, "--load", "ck", "--vocab-size", str(V), "--prompt-file", "none.txt"], "none.txt"),
        ("empty prompt file", [GEN, "--load", "ck", "--vocab-size", str(V), "--prompt-file", "empty.txt"], "no prompt"),
    ]
    for what, argv, needle in cases:
        p = run(argv, what, 2)
        if p.stdout:
            fail(f"{what}: printed {p.stdout!r} before failing")
        if needle not in p.stderr or "error" not in p.stderr:
            fail(f"{what}: the message {p.stderr!r} does not name {needle!r}")
        print(f"{what}: exit 2, {p.stderr.strip().splitlines()[-1]}")
    # the prompt file's prompts are the --prompt ones
    open("prompts.txt", "w").write("1 2 3\n\n4 5\n")
    a = run([GEN, "--load", "ck", "--vocab-size", str(V), "--prompt-file", "prompts.txt", "--greedy",
             "--max-new-tokens", "3"], "prompt file").stdout
    b = run([GEN, "--load", "ck", "--vocab-size", str(V), "--prompt", "1 2 3", "--prompt", "4 5", "--greedy",
             "--max-new-tokens", "3"], "prompts").stdout
    if a != b or len(a.splitlines()) != 2:
        fail(f"--prompt-file {a!r} != --prompt {b!r}")
    print("--prompt-file: the same as --prompt, blank lines skipped")
else:
    fail(f"unknown case {CASE}")
print("PASS")
