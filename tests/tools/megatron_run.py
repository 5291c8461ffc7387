#!/usr/bin/env python3
"""mgraph-run against Megatron's training loop semantics (megatron/training/training.py,
megatron/core/optimizer_param_scheduler.py):

  lr_schedules  the rate each iteration runs at is the scheduler's at step (k-1) x global
                batch (Megatron counts samples; its first warm-up iteration runs at
                --lr-warmup-init), the logged rate is the one after the step; iteration-
                and sample-based flags, --lr-warmup-fraction, cosine, linear,
                inverse-square-root and WSD.
  log_lines     the [YYYY-MM-DD HH:MM:SS.ffffff] prefix, a line after the first iteration
                and every --log-interval, throughput only with --log-throughput, the
                validation lines between rules of their length + 1, evaluation of the
                validation and test sets after training, PPL = exp(min(20, loss)).
  rampup        --rampup-batch-size: batches, consumed samples and iterations as Megatron's
                ramp code gives them (ramp_vectors.txt), the rate at the samples consumed,
                the ramp's first batch as a constant run at it, dp 2 as one rank.
  tensorboard   the event file read back with the tensorboard package: Megatron's tags,
                values equal to the metrics file's; a failed run leaves no event file.
                Skips (77), loudly, where the pinned tensorboard is missing (a
                failure under CI or tools/test.sh: tests/support/reference.py).

  megatron_run.py MGRAPH_RUN TEST_DATA WORK_DIR CASE
"""
import json
import math
import os
import re
import shutil
import subprocess
import sys

RUN, DATA, WORK, CASE = sys.argv[1:5]
TEXT = os.path.join(DATA, "tinyshakespeare.txt")
TINY = ["--text-file", TEXT, "--num-layers", "1", "--hidden-size", "16", "--num-attention-heads", "2",
        "--seq-length", "8", "--micro-batch-size", "2", "--global-batch-size", "4", "--cpu-workers", "1"]
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)


def run(tag, args, env=None, want=0):
    out = subprocess.run([RUN] + args, capture_output=True, text=True, env=env)
    if out.returncode != want:
        print(out.stdout, out.stderr)
        check(False, f"{tag}: exit {out.returncode}, want {want}")
    return out


def metrics(path):
    rows = [json.loads(l) for l in open(path)]
    return [r for r in rows if "lm_loss" in r], [r for r in rows if "val_loss" in r or "test_loss" in r]


def megatron_lr(step, lr, min_lr, warmup, decay, style, init=0.0, wsd=None, wsd_style="exponential"):
    """OptimizerParamScheduler.get_lr at num_steps = step (written out from its rules)."""
    if warmup > 0 and step <= warmup:
        return init + (lr - init) * step / warmup
    if style == "constant":
        return lr
    if step > decay:
        return min_lr
    if style == "inverse-square-root":
        return max(min_lr, lr * math.sqrt(max(warmup, 1)) / math.sqrt(max(step, 1)))
    ratio = (step - warmup) / (decay - warmup)
    if style == "linear":
        c = 1 - ratio
    elif style == "cosine":
        c = 0.5 * (math.cos(math.pi * ratio) + 1)
    else:  # WSD
        start = decay - wsd
        if step <= start:
            c = 1.0
        else:
            r = (step - start) / wsd
            c = {"linear": 1 - r, "cosine": 0.5 * (math.cos(math.pi * r) + 1),
                 "exponential": 2 * 0.5 ** r - 1, "minus_sqrt": 1 - math.sqrt(r)}[wsd_style]
    return min_lr + c * (lr - min_lr)


def close(a, b, rel=2e-6):
    return abs(a - b) <= rel * max(abs(a), abs(b)) + 1e-12


def lr_schedules():
    gbs = 4
    cases = [  # flags, iterations, schedule in samples
        (["--train-iters", "8", "--lr", "1e-3", "--min-lr", "1e-4", "--lr-warmup-iters", "2",
          "--lr-decay-style", "cosine"], 8, dict(lr=1e-3, min_lr=1e-4, warmup=8, decay=32, style="cosine")),
        (["--train-samples", "34", "--lr", "1e-3", "--lr-warmup-samples", "6", "--lr-decay-samples", "30"], 8,
         dict(lr=1e-3, min_lr=0.0, warmup=6, decay=30, style="linear")),
        (["--train-iters", "8", "--lr", "1e-3", "--min-lr", "1e-5", "--lr-warmup-fraction", "0.25",
          "--lr-decay-iters", "6", "--lr-decay-style", "inverse-square-root"], 8,
         dict(lr=1e-3, min_lr=1e-5, warmup=0.25 * 24, decay=24, style="inverse-square-root")),
        (["--train-iters", "8", "--lr", "1e-3", "--lr-warmup-iters", "1", "--lr-warmup-init", "1e-4",
          "--lr-decay-style", "WSD", "--lr-wsd-decay-iters", "4"], 8,
         dict(lr=1e-3, min_lr=0.0, warmup=4, decay=32, style="WSD", init=1e-4, wsd=16)),
        (["--train-iters", "8", "--lr", "1e-3", "--lr-decay-style", "WSD", "--lr-wsd-decay-iters", "3",
          "--lr-wsd-decay-style", "minus_sqrt"], 8,
         dict(lr=1e-3, min_lr=0.0, warmup=0, decay=32, style="WSD", wsd=12, wsd_style="minus_sqrt")),
    ]
    for n, (flags, iters, sched) in enumerate(cases):
        mf = os.path.join(WORK, f"lr{n}.jsonl")
        out = run(f"schedule {n}", TINY + flags + ["--eval-iters", "0", "--log-interval", "1", "--metrics-file", mf])
        if not os.path.exists(mf):
            continue
        train, _ = metrics(mf)
        check(len(train) == iters, f"schedule {n}: {len(train)} iterations, want {iters}")
        logged = [float(x) for x in re.findall(r"learning rate: ([0-9.E+-]+) \|", out.stdout)]
        check(len(logged) == iters, f"schedule {n}: {len(logged)} log lines")
        for k, row in enumerate(train, start=1):
            want = megatron_lr((k - 1) * gbs, **sched)
            check(close(row["lr"], want), f"schedule {n}: iteration {k} ran at {row['lr']:.9e}, Megatron {want:.9e}")
            if k <= len(logged):
                after = megatron_lr(k * gbs, **sched)
                check(abs(logged[k - 1] - after) <= 5e-7 * max(after, 1e-12) + 1e-12,
                      f"schedule {n}: iteration {k} logged {logged[k - 1]:.6E}, Megatron logs {after:.6E}")
        check(close(train[0]["lr"], sched.get("init", 0.0)) or sched["warmup"] == 0,
              f"schedule {n}: the first warm-up iteration ran at {train[0]['lr']}")
    # Megatron's scheduler assertions, all in one run
    out = run("bad schedule", TINY + ["--train-iters", "4", "--lr-warmup-iters", "4", "--dry-run"], want=2)
    check("must be shorter than the decay span" in out.stderr, "warmup >= decay accepted: " + out.stderr)
    out = run("bad combination", TINY + ["--train-iters", "4", "--train-samples", "16", "--lr-warmup-fraction", "0.1",
                                         "--lr-warmup-iters", "1", "--lr-decay-style", "WSD"], want=2)
    for want in ["not both", "one of --lr-warmup-fraction", "WSD needs --lr-wsd-decay"]:
        check(want in out.stderr, f"combination: stderr lacks '{want}': {out.stderr}")


def rampup():
    """--rampup-batch-size: the batch of every iteration, the samples consumed and the
    iterations trained are those of Megatron's own ramp code (ramp_vectors.txt, written by
    gen_ramp_vectors.py), the learning rate is the scheduler's at the samples consumed;
    the iterations at the ramp's first batch are those of a run at that batch; dp 2 under
    mpirun trains as one rank does."""
    vec = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ramp_vectors.txt")
    line = next(l for l in open(vec) if l.startswith("32 4 4 4 100 500 |"))
    iters = int(line.split("|")[1])
    batches = [int(b) for run_ in line.split("|")[2].split() for b in [run_.split("x")[0]] * int(run_.split("x")[1])]
    sched = ["--lr", "1e-3", "--min-lr", "1e-4", "--lr-decay-style", "cosine", "--lr-warmup-samples", "50",
             "--train-samples", "500", "--eval-iters", "0", "--log-interval", "1"]
    ramp = TINY + sched + ["--global-batch-size", "32", "--rampup-batch-size", "4", "4", "100"]
    mf = os.path.join(WORK, "ramp.jsonl")
    out = run("ramp", ramp + ["--metrics-file", mf])
    if not os.path.exists(mf):
        return
    train, _ = metrics(mf)
    check(len(train) == iters, f"{len(train)} iterations, Megatron trains {iters}")
    got_b = [int(x) for x in re.findall(r"global batch size: +(\d+) \|", out.stdout)]
    check(got_b == batches, f"batches {got_b}, Megatron's {batches}")
    consumed = [int(x) for x in re.findall(r"consumed samples: +(\d+) \|", out.stdout)]
    before = [sum(batches[:k]) for k in range(len(batches) + 1)]
    check(consumed == before[1:], f"consumed samples {consumed}, want {before[1:]}")
    for k, row in enumerate(train):
        want = megatron_lr(before[k], 1e-3, 1e-4, 50, 500, "cosine")
        check(close(row["lr"], want), f"iteration {k + 1} ran at {row['lr']:.9e}, Megatron {want:.9e} (step {before[k]})")
    # the ramp's first batch (4, 4 iterations) is a run at --global-batch-size 4
    mf4 = os.path.join(WORK, "const4.jsonl")
    run("constant 4", TINY + sched + ["--global-batch-size", "4", "--metrics-file", mf4])
    if os.path.exists(mf4):
        const, _ = metrics(mf4)
        first = batches.count(4)
        for k in range(first):
            check(const[k]["lm_loss"] == train[k]["lm_loss"] and const[k]["lr"] == train[k]["lr"],
                  f"iteration {k + 1} at batch 4: ramp {train[k]}, constant {const[k]}")
        check(const[first]["lm_loss"] != train[first]["lm_loss"], "the ramp's batch 8 trained like batch 4")
    # data parallel: the same ramp on 2 ranks (each batch split over them) as on one
    mf2 = os.path.join(WORK, "ramp_dp2.jsonl")
    p = subprocess.run(["mpirun", "-np", "2", RUN] + ramp + ["--metrics-file", mf2], capture_output=True, text=True)
    check(p.returncode == 0, f"dp 2: exit {p.returncode}: {p.stderr[-2000:]}")
    if p.returncode == 0:
        dp2, _ = metrics(mf2)
        check(len(dp2) == iters, f"dp 2: {len(dp2)} iterations")
        for a, b in zip(train, dp2):
            check(close(a["lm_loss"], b["lm_loss"], 1e-5), f"dp 2 iteration {a['iteration']}: {b['lm_loss']} vs {a['lm_loss']}")
    # Megatron's rules, every one reported in one run each
    out = run("ramp by iterations", TINY + ["--train-iters", "4", "--rampup-batch-size", "2", "2", "8", "--dry-run"], want=2)
    check("--rampup-batch-size needs --train-samples" in out.stderr, "ramp with --train-iters: " + out.stderr)
    out = run("ramp not divisible", TINY + sched + ["--global-batch-size", "32", "--micro-batch-size", "4",
                                                    "--rampup-batch-size", "4", "2", "100", "--dry-run"], want=2)
    check("multiples of --micro-batch-size x data-parallel size" in out.stderr, "increment 2 with mbs 4: " + out.stderr)
    out = run("ramp no increments", TINY + sched + ["--global-batch-size", "8", "--rampup-batch-size", "8", "4", "100",
                                                    "--dry-run"], want=2)
    check("less than the global batch size" in out.stderr, "start = global batch accepted: " + out.stderr)
    print(f"ramp: {iters} iterations, batches {sorted(set(batches))}")


LINE = re.compile(r"^ \[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6})\] iteration +(\d+)/ +(\d+) \| consumed samples: +(\d+) \| "
                  r"elapsed time per iteration \(ms\): [0-9.]+ \|( throughput per GPU \(TFLOP/s/GPU\): \d+\.\d \|)? "
                  r"learning rate: [0-9.]+E[+-]\d\d \| global batch size: +4 \| lm loss: [0-9.]+E[+-]\d\d \| "
                  r"loss scale: 1\.0 \| grad norm: [0-9.]+ \| number of skipped iterations: +0 \| "
                  r"number of nan iterations: +0 \|$")
VAL = re.compile(r"^ validation loss at (.*) \| lm loss value: ([0-9.]+E[+-]\d\d) \| lm loss PPL: ([0-9.]+E[+-]\d\d) \| $")


def log_lines():
    for throughput in (False, True):
        args = TINY + ["--train-iters", "7", "--log-interval", "3", "--eval-interval", "3", "--eval-iters", "1",
                       "--split", "80,10,10", "--lr", "1e-3"] + (["--log-throughput"] if throughput else [])
        out = run("log", args)
        lines = out.stdout.splitlines()
        its = [LINE.match(l) for l in lines if " iteration " in l and "validation" not in l]
        check(all(its), f"log lines that do not parse: {[l for l in lines if ' iteration ' in l and not LINE.match(l)]}")
        check([int(m.group(2)) for m in its if m] == [1, 3, 6], f"log lines at {[m.group(2) for m in its if m]}")
        check(all(bool(m.group(5)) == throughput for m in its if m), f"throughput shown={throughput} not honoured")
        vals = []
        for i, l in enumerate(lines):
            m = VAL.match(l)
            if not m:
                continue
            vals.append(m.group(1))
            rule = "-" * (len(l) + 1)
            check(i > 0 and i + 1 < len(lines) and lines[i - 1] == rule and lines[i + 1] == rule,
                  f"rules around '{l}' are not {len(l) + 1} dashes")
            loss, ppl = float(m.group(2)), float(m.group(3))
            check(close(ppl, math.exp(min(20, loss)), 1e-6), f"PPL {ppl} for loss {loss}")
        check(vals == ["iteration 3", "iteration 6", "iteration 7 on validation set", "iteration 7 on test set"],
              f"evaluations: {vals}")
    # PPL is capped at exp(20): a model whose loss is far above 20
    out = run("ppl cap", TINY + ["--train-iters", "1", "--lr", "0", "--init-method-std", "50", "--eval-iters", "1",
                                 "--no-check-for-nan-in-loss-and-grad"])
    m = [VAL.match(l) for l in out.stdout.splitlines() if VAL.match(l)]
    check(m and float(m[0].group(2)) > 20, f"loss not above 20: {m and m[0].group(0)}")
    check(m and m[0].group(3) == "4.851652E+08", f"PPL not capped at exp(20) = 4.851652E+08: {m and m[0].group(0)}")


def tensorboard():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
    import reference  # tests/support/reference.py: the pinned package, or a skip (a failure under CI)

    reference.require("tensorboard", "torch")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    tb, mf = os.path.join(WORK, "tb"), os.path.join(WORK, "tb.jsonl")
    out = run("tensorboard", TINY + ["--train-iters", "4", "--eval-interval", "2", "--eval-iters", "1", "--lr", "1e-3",
                                     "--lr-warmup-iters", "1", "--log-interval", "2", "--tensorboard-dir", tb,
                                     "--log-timers-to-tensorboard", "--log-throughput",
                                     "--log-validation-ppl-to-tensorboard", "--log-world-size-to-tensorboard",
                                     "--metrics-file", mf])
    files = [f for f in os.listdir(tb) if f.startswith("events.out.tfevents.")] if os.path.isdir(tb) else []
    check(len(files) == 1, f"want one event file in {tb}: {files}")
    if not files:
        return
    acc = EventAccumulator(tb, size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    want = {"lm loss", "learning-rate", "grad-norm", "batch-size", "loss-scale", "lm loss validation",
            "lm loss validation ppl", "iteration-time", "throughput"}
    want |= {t + " vs samples" for t in ["lm loss", "learning-rate", "grad-norm", "batch-size", "loss-scale",
                                          "lm loss validation", "lm loss validation ppl"]}
    check(want <= tags, f"missing tags: {sorted(want - tags)} (have {sorted(tags)})")
    train, evals = metrics(mf)
    import struct

    def f32(x):
        return struct.unpack("f", struct.pack("f", x))[0]

    loss = {e.step: e.value for e in acc.Scalars("lm loss")}
    check(sorted(loss) == [1, 2, 3, 4], f"lm loss steps {sorted(loss)}")
    for r in train:
        check(loss.get(r["iteration"]) == f32(r["lm_loss"]), f"lm loss at {r['iteration']}: tb {loss.get(r['iteration'])}"
              f" vs metrics {r['lm_loss']}")
    vs = {e.step: e.value for e in acc.Scalars("lm loss vs samples")}
    check(sorted(vs) == [4, 8, 12, 16], f"'lm loss vs samples' steps {sorted(vs)}")
    lr = {e.step: e.value for e in acc.Scalars("learning-rate")}
    for k in range(1, 5):
        want_lr = megatron_lr(k * 4, 1e-3, 0.0, 4, 16, "linear")
        check(k in lr and abs(lr[k] - want_lr) <= 1e-6 * want_lr + 1e-12, f"learning-rate at {k}: {lr.get(k)} vs {want_lr}")
    check(all(e.value == 4 for e in acc.Scalars("batch-size")), "batch-size not 4")
    val = [(e.step, e.value) for e in acc.Scalars("lm loss validation")]
    mval = [(r["iteration"], f32(r["val_loss"])) for r in evals if "val_loss" in r]
    check(val == mval, f"lm loss validation {val} vs metrics {mval}")
    ppl = [e.value for e in acc.Scalars("lm loss validation ppl")]
    check(len(ppl) == len(val) and all(close(p, math.exp(min(20, v)), 1e-5) for p, (_, v) in zip(ppl, val)), "ppl")
    check([e.step for e in acc.Scalars("iteration-time")] == [2, 4], "iteration-time only at log lines after the first")
    check([(e.step, e.value) for e in acc.Scalars("world-size")] == [(k, 1.0) for k in range(1, 5)], "world-size")
    # Megatron's write_args_to_tensorboard: every argument as a text summary, str() of its value,
    # byte for byte what torch's SummaryWriter.add_text writes
    texts = {t[: -len("/text_summary")]: acc.Tensors(t) for t in acc.Tags()["tensors"] if t.endswith("/text_summary")}
    want_args = {"num_layers": TINY[TINY.index("--num-layers") + 1], "lr": "0.001", "lr_warmup_iters": "1",
                 "log_interval": "2", "tensorboard_dir": tb, "use_distributed_optimizer": "False",
                 "log_throughput": "True", "adam_eps": "1e-08", "min_lr": "0.0", "data_path": "None"}
    for name, value in want_args.items():
        ev = texts.get(name)
        got = ev[0].tensor_proto.string_val[0].decode() if ev else None
        check(got == value and ev[0].step == 0, f"argument {name}: text {got!r} (step {ev and ev[0].step}), want {value!r}")
    check(len(texts) > 150, f"only {len(texts)} arguments as text summaries")
    from torch.utils.tensorboard.summary import text as tb_text
    with open(os.path.join(tb, files[0]), "rb") as f:
        raw = f.read()
    check(tb_text("num_layers", want_args["num_layers"]).SerializeToString() in raw,
          "the num_layers text summary is not SummaryWriter.add_text's bytes")
    # a run that fails leaves no event file (and never touches what was there)
    tb2 = os.path.join(WORK, "tb2")
    os.makedirs(tb2, exist_ok=True)
    open(os.path.join(tb2, "keep.txt"), "w").write("mine\n")
    env = dict(os.environ, MGRAPH_TEST_NAN_AT="0:2")
    run("failed run", TINY + ["--train-iters", "3", "--tensorboard-dir", tb2, "--eval-iters", "0"], env=env, want=1)
    check(sorted(os.listdir(tb2)) == ["keep.txt"], f"a failed run left {sorted(os.listdir(tb2))}")
    print(f"tensorboard read {len(tags)} tags back; lm loss, learning-rate and validation equal the run's")


shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
{"lr_schedules": lr_schedules, "log_lines": log_lines, "tensorboard": tensorboard, "rampup": rampup}[CASE]()
if failures:
    sys.exit(1)
print("ok", CASE)
