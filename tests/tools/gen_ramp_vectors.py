#!/usr/bin/env python3
"""Writes tests/tools/ramp_vectors.txt with Megatron-LM's own batch-size ramp code.

Runs, unchanged, megatron/core/num_microbatches_calculator.py (the whole module: its
RampupBatchsizeNumMicroBatchesCalculator) and update_train_iters of
megatron/training/training.py, as of Megatron-LM 0b9bc2088b6d6c858275d02638064cc7e0bf8b70,
the last commit before #4411 deprecated --rampup-batch-size in favour of
--step-batch-size-schedule. The training loop around them is Megatron's: before each
iteration update_num_microbatches(consumed_samples, consistency_check=True), then
consumed_samples += get_current_global_batch_size().

  gen_ramp_vectors.py MEGATRON_LM_GIT_DIR > tests/tools/ramp_vectors.txt

Each line: global batch, micro-batch x data-parallel size, ramp start, increment, ramp-up
samples, train samples, then "|" the iterations update_train_iters sets, then "|" the
batch of every one of those iterations, run-length coded as BATCHxCOUNT.
"""
import ast
import subprocess
import sys
import types

COMMIT = "0b9bc2088b6d6c858275d02638064cc7e0bf8b70"
root = sys.argv[1]


def show(path):
    return subprocess.run(["git", "-C", root, "show", f"{COMMIT}:{path}"], capture_output=True, text=True,
                          check=True).stdout


calc = types.ModuleType("num_microbatches_calculator")
exec(compile(show("megatron/core/num_microbatches_calculator.py"), "num_microbatches_calculator.py", "exec"),
     calc.__dict__)
src = show("megatron/training/training.py")
fn = next(n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name == "update_train_iters")
env = {"update_num_microbatches": calc.update_num_microbatches,
       "get_current_global_batch_size": calc.get_current_global_batch_size, "print_rank_0": lambda *a: None}
exec(ast.get_source_segment(src, fn), env)

# global batch, micro-batch x dp, start, increment, ramp-up samples, train samples
CASES = [
    (32, 1, 4, 4, 100, 500),
    (32, 4, 4, 4, 100, 500),
    (24, 1, 6, 6, 7, 100),        # 2.33 samples per increment: boundaries between samples
    (1000, 1, 1, 3, 1000, 3000),  # 333 increments of 3.003 samples: several per iteration
    (64, 8, 8, 8, 1000, 5000),    # 142.86 samples per increment
    (30, 1, 3, 3, 1000, 1600),    # 111.1 per increment: 1000 / 9 x 9 lands on the ramp's end
    (10, 1, 1, 1, 1000, 50),      # --train-samples ends inside the ramp
    (10, 1, 1, 1, 1000, 1000),
    (1536, 32, 32, 32, 20000, 60000),   # GPT-3's ramp (32 32 ...) at a smaller scale
    (1024, 8, 16, 8, 300000, 400000),   # the docstring's example
    (8, 2, 2, 2, 3, 3),
    (16, 1, 8, 8, 1, 40),
]
print(f"# Megatron-LM {COMMIT}: global batch, micro-batch x dp, start, increment, ramp samples, train samples"
      " | train iterations | batch of each iteration (BATCHxCOUNT). Written by tests/tools/gen_ramp_vectors.py.")
for gbs, mbdp, start, inc, ramp, train_samples in CASES:
    calc.destroy_num_microbatches_calculator()
    calc.init_num_microbatches_calculator(0, [start, inc, ramp], gbs, mbdp, 1, False)
    args = types.SimpleNamespace(train_iters=None, train_samples=train_samples, rampup_batch_size=[start, inc, ramp],
                                 global_batch_size=gbs)
    env["update_train_iters"](args)
    consumed, runs = 0, []
    for _ in range(args.train_iters):
        calc.update_num_microbatches(consumed, consistency_check=True)
        b = calc.get_current_global_batch_size()
        if runs and runs[-1][0] == b:
            runs[-1][1] += 1
        else:
            runs.append([b, 1])
        consumed += b
    print(gbs, mbdp, start, inc, ramp, train_samples, "|", args.train_iters, "|",
          " ".join(f"{b}x{k}" for b, k in runs))
