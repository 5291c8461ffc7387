#!/usr/bin/env python3
"""A tiny DeepSeek-V3-like model trained by mgraph-run under each plan equals the serial run.

  deepseek_plans.py MPIEXEC MGRAPH_RUN TEXT WORK_DIR PLAN [mtp]

The model: multi-latent attention (q and k/v latents, normalised, YaRN), a dense first
layer then MoE layers (--moe-layer-freq list) of 16 experts with DeepSeek-V3's router
(sigmoid scores, expert bias stepped by the routed counts, top-4 of 2 of 4 groups, scaling
2.5), shared experts, the sequence-level balancing loss and the z-loss; dropout on, 4
micro-batches of 2 per iteration, 4 iterations. The serial run and the plan's run each
write metrics and a checkpoint; the plan must give, every iteration, the serial lm loss,
seq_load_balancing_loss and grad norm within 1e-5 relative, and in the final checkpoint
(pieces put back together by tests/support/ckpt.py) every parameter and Adam moment
within 1e-5 relative in the 2-norm (+1e-7 per element, test_equivalence's bound), and
every expert bias exactly: it is a sum of +-rate steps decided by integer token counts,
which every plan sums whole over its ranks. The biases must have moved.
PLAN: tp2_sp, ep2, ep2_tp2, pp2, cp2, dp2_distopt, ep2_cp2, etp2_ep2.
With "mtp": one multi-token prediction layer too (--mtp-num-layers 1, factor 0.3; an MoE
layer, as the last decoder layer, on the last pipeline stage), whose mtp_1 loss must match
every iteration as the other metrics, and whose expert bias must move and match too.
"""
import json
import math
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import ckpt  # noqa: E402  (tests/support/ckpt.py)

MPI, RUN, TEXT, WORK, PLAN = sys.argv[1:6]
MTP = len(sys.argv) > 6 and sys.argv[6] == "mtp"
PLANS = {
    "tp2_sp": (2, ["--tensor-model-parallel-size", "2", "--sequence-parallel"]),
    "ep2": (2, ["--expert-model-parallel-size", "2"]),
    "ep2_tp2": (4, ["--expert-model-parallel-size", "2", "--tensor-model-parallel-size", "2", "--sequence-parallel"]),
    "pp2": (2, ["--pipeline-model-parallel-size", "2", "--decoder-first-pipeline-num-layers", "1"]),
    "cp2": (2, ["--context-parallel-size", "2"]),
    "ep2_cp2": (2, ["--expert-model-parallel-size", "2", "--context-parallel-size", "2"]),
    "etp2_ep2": (4, ["--expert-model-parallel-size", "2", "--expert-tensor-parallel-size", "2"]),
    "dp2_distopt": (2, ["--use-distributed-optimizer"]),
}
MODEL = ["--num-layers", "3", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32",
         "--max-position-embeddings", "32", "--normalization", "RMSNorm", "--position-embedding-type", "rope",
         "--swiglu", "--disable-bias-linear", "--untie-embeddings-and-output-weights",
         "--multi-latent-attention", "--q-lora-rank", "24", "--kv-lora-rank", "16", "--qk-head-dim", "12",
         "--qk-pos-emb-head-dim", "8", "--v-head-dim", "10", "--qk-layernorm", "--rotary-scaling-factor", "4",
         "--mscale-all-dim", "1",
         "--num-experts", "16", "--moe-ffn-hidden-size", "16", "--moe-shared-expert-intermediate-size", "32",
         "--moe-layer-freq", "([0]+[1]*2)", "--moe-router-topk", "4", "--moe-router-score-function", "sigmoid",
         "--moe-router-enable-expert-bias", "--moe-router-bias-update-rate", "1e-2", "--moe-router-num-groups", "4",
         "--moe-router-group-topk", "2", "--moe-router-topk-scaling-factor", "2.5",
         "--moe-router-load-balancing-type", "seq_aux_loss", "--moe-aux-loss-coeff", "1e-2", "--moe-z-loss-coeff", "1e-3"]
TRAIN = ["--text-file", TEXT, "--micro-batch-size", "2", "--global-batch-size", "8", "--train-iters", "4",
         "--lr", "3e-3", "--adam-eps", "1e-5", "--clip-grad", "0", "--log-interval", "1", "--eval-iters", "0",
         "--cpu-workers", "1", "--seed", "7"]
ITERS = 4
if MTP:
    MODEL += ["--mtp-num-layers", "1", "--mtp-loss-scaling-factor", "0.3"]
KEYS = ("lm_loss", "seq_load_balancing_loss", "z_loss", "grad_norm") + (("mtp_1_loss",) if MTP else ())
MOE_LAYERS = 3 if MTP else 2


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def run(argv, what):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        print(p.stdout[-3000:], p.stderr[-3000:])
        fail(f"{what} exited {p.returncode}")


def metrics(path):
    rows = [json.loads(l) for l in open(path) if '"lm_loss"' in l]
    if len(rows) != ITERS:
        fail(f"{path}: {len(rows)} iterations, want {ITERS}")
    return rows


def checkpoint(d):
    """Every tensor of the checkpoint in d, whole (tests/support/ckpt.py)."""
    try:
        return ckpt.load(d, ITERS)
    except (OSError, ValueError) as e:
        fail(str(e))


os.makedirs(WORK, exist_ok=True)
os.chdir(WORK)
if PLAN not in PLANS:
    fail(f"unknown plan {PLAN}")
np_, flags = PLANS[PLAN]
for d in ("serial", PLAN):
    shutil.rmtree(d, ignore_errors=True)
run([RUN, *MODEL, *TRAIN, "--metrics-file", "serial.jsonl", "--save", "serial"], "serial run")
run([MPI, "-np", str(np_), "--oversubscribe", "--allow-run-as-root", RUN, *MODEL, *TRAIN, *flags,
     "--metrics-file", f"{PLAN}.jsonl", "--save", PLAN], f"{PLAN} run")
worst = 0.0
for a, b in zip(metrics(f"{PLAN}.jsonl"), metrics("serial.jsonl")):
    for k in KEYS:
        if k not in b or k not in a:
            fail(f"iteration {b['iteration']}: {k} missing")
        rel = abs(a[k] - b[k]) / abs(b[k])
        worst = max(worst, rel)
        if rel > 1e-5:
            fail(f"iteration {b['iteration']}: {k} {a[k]:.9g}, serial {b[k]:.9g} (relative {rel:.2e})")
ser, par = checkpoint("serial"), checkpoint(PLAN)
if ser.keys() != par.keys():
    fail(f"tensors differ: {sorted(set(ser) ^ set(par))}")
worst_t, moved = 0.0, 0
for name, s in ser.items():
    p = par[name]
    if name.endswith("router.expert_bias"):
        if p != s:
            fail(f"{name}: {p}, serial {s}")
        moved += any(x != 0 for x in s)
        continue
    diff = math.sqrt(sum((x - y) ** 2 for x, y in zip(p, s)))
    norm = math.sqrt(sum(y * y for y in s))
    err = diff / (1e-5 * norm + 1e-7 * math.sqrt(len(s)))
    worst_t = max(worst_t, err)
    if err > 1:
        fail(f"{name}: differs by {diff:.3g} (2-norm {norm:.3g}), {err:.2f} x the bound")
if moved != MOE_LAYERS:
    fail(f"{moved} of the {MOE_LAYERS} MoE layers' expert biases moved")
print(f"ok {PLAN}{' with MTP' if MTP else ''}: {ITERS} iterations, worst metric relative difference {worst:.2e}; {len(ser)} checkpoint tensors, "
      f"worst {worst_t:.3f} of the bound; expert biases equal, e.g. {ser['model.layers.2.mlp.router.expert_bias']}")
