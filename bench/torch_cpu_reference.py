#!/usr/bin/env python3
"""PyTorch eager on the CPU against bench_train, the same two models (issue 15's
comparison): GPT-2 124M (12 layers, h 768, seq 64, vocab 50304, micro-batch 4, one
micro-batch per step) and mgraph-run's default model (4 layers, h 256, seq 128, vocab
256, micro-batch 4, two micro-batches per step); fp32, dropout 0.1, AdamW, THREADS
intra-op threads (default 2, as bench_train's 2 workers). Prints the median step time,
tokens/s and model GFLOP/s counted as mgraph counts them; asserts nothing. A reference,
never a dependency: run it where torch is installed.

    python3 bench/torch_cpu_reference.py [--threads 2] [--iters 5] [--model all|124m|default]
"""
import argparse
import statistics
import time

import torch

from torch_gpt import GPT, model_flops

MODELS = {  # layers, hidden, heads, seq, vocab, micro-batch, micro-batches per step
    "124m": (12, 768, 12, 64, 50304, 4, 1),
    "default": (4, 256, 4, 128, 256, 4, 2),
}


def bench(name, threads, iters):
    layers, h, heads, seq, vocab, mb, n_micro = MODELS[name]
    torch.manual_seed(0)
    model = GPT(layers, h, heads, seq, vocab, dropout=0.1)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    idx = torch.randint(0, vocab, (n_micro, mb, seq))
    tgt = torch.randint(0, vocab, (n_micro, mb, seq))

    def step():
        for i in range(n_micro):
            (model(idx[i], tgt[i]) / n_micro).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(2):
        step()
    t = []
    for _ in range(iters):
        t0 = time.perf_counter()
        step()
        t.append(time.perf_counter() - t0)
    s = statistics.median(t)
    tokens = n_micro * mb * seq
    gf = model_flops(layers, h, seq, vocab, n_micro * mb) / s / 1e9
    print(f"| PyTorch {torch.__version__} eager, {threads} threads | {name} | {1e3 * s:.1f} | {tokens / s:.0f} | "
          f"{gf:.1f} | {1e3 * min(t):.1f} |", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--model", default="all", choices=["all", "124m", "default"])
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    print("| system | model | step ms (median) | tokens/s | model GFLOP/s | fastest ms |")
    print("|---|---|---|---|---|---|")
    for m in (["124m", "default"] if a.model == "all" else [a.model]):
        bench(m, a.threads, a.iters)


if __name__ == "__main__":
    main()
