#!/usr/bin/env python3
"""PyTorch reference for tools/gpu-check.sh's benchmark, on the same GPU in the same run.

The same GPT as mgraph-run's benchmark (pre-LN, learned positions, GELU MLP of 4h, tied
embeddings, fp32 master weights, AdamW), trained with bf16 autocast, PyTorch's flash
attention (scaled_dot_product_attention, causal) and fused AdamW, eager mode. Prints the
median step time and model TFLOP/s counted exactly as mgraph-run counts them
(models/gpt_config.c: mg_gpt_flops), and cuBLAS's bf16 GEMM rate through PyTorch
(8192^3), the ceiling a GEMM-bound step can approach. A reference, never a dependency:
gpu-check.sh runs it only where torch and a GPU are present.

    python3 bench/gpu_torch_reference.py --layers 24 --hidden 2048 --heads 16 --seq 2048 \
        --micro-batch 2 --vocab 50304 --iters 8
"""
import argparse
import statistics
import time

import torch

from torch_gpt import GPT, model_flops


def timed(fn, warm, reps):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--iters", type=int, default=8)
    a = p.parse_args()
    dev = "cuda"
    torch.manual_seed(0)

    n = 8192
    x, y = (torch.randn(n, n, device=dev, dtype=torch.bfloat16) for _ in range(2))
    g = timed(lambda: x @ y, 3, 10)
    gemm = 2 * n**3 / statistics.median(g) / 1e12
    del x, y
    print(f"torch: bf16 GEMM {n}^3: {gemm:.1f} TFLOP/s (median of {len(g)})", flush=True)

    model = GPT(a.layers, a.hidden, a.heads, a.seq, a.vocab).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    idx = torch.randint(0, a.vocab, (a.micro_batch, a.seq), device=dev)
    tgt = torch.randint(0, a.vocab, (a.micro_batch, a.seq), device=dev)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    t = timed(step, 3, a.iters)
    ms = 1e3 * statistics.median(t)
    tf = model_flops(a.layers, a.hidden, a.seq, a.vocab, a.micro_batch) / (ms * 1e-3) / 1e12
    params = sum(q.numel() for q in model.parameters())
    print(f"torch: GPT {params / 1e6:.1f}M parameters, micro-batch {a.micro_batch}, seq {a.seq}: "
          f"{ms:.1f} ms/step, {tf:.1f} TFLOP/s (median of {len(t)}; bf16 autocast, flash attention, fused AdamW, "
          f"peak memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB)", flush=True)


if __name__ == "__main__":
    main()
