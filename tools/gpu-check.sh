#!/usr/bin/env bash
# One-shot proof of the CUDA backend on a GPU machine (the device tool's H200), from the
# bundle tools/gpu-bundle.sh made (build-gpu-bundle/mgraph-gpu.tar.gz, carried with the
# working tree): no package registry and no Debian libraries are needed there.
#
#   bash tools/gpu-check.sh [TARBALL]
#
# 1. every op's CUDA kernel against its CPU kernel (test_cuda_ops, fp32; matmul also
#    in tf32 and bf16);
#    NCCL collectives on device buffers (mpirun, one rank per GPU);
# 2. GPU-vs-CPU training equivalence: a small GPT, 10 iterations, dropout on, fp32,
#    once on CPU workers only and once on one CUDA worker only: losses within 1e-4
#    relative;
# 3. benchmark: GPT ~1.3B (24 layers, hidden 2048, 16 heads, seq 2048), bf16 GEMMs
#    (fp32 master weights and accumulation), one GPU: mgraph-run's log lines, the
#    median TFLOP/s after warm-up, and MFU against the H200's 989 dense bf16 TFLOP/s;
#    The tokenizer is GPT-2's (tests/data/gpt2): vocabulary 50304 padded, 1.3B parameters;
# 4. reference: the same model in PyTorch on the same GPU (bench/gpu_torch_reference.py:
#    bf16 autocast, flash attention, fused AdamW) and PyTorch's bf16 GEMM rate, when
#    torch with CUDA is there and time is left;
# 5. a per-op profile: two iterations with one kernel at a time and StarPU calibrating
#    its history models (per op and shape), kept in the logs, when time is left;
# then a summary table. One deadline for all of it: MG_CHECK_BUDGET seconds (default
# 540); each stage's timeout is capped by what is left.
# Variables: MG_BENCH_ITERS (default 6), MG_BENCH_MBS (micro-batch, default 2),
# MG_PEAK_TFLOPS (default 989), MG_GPU_TORCH=0 (skip the PyTorch reference), MG_GPU_PROFILE=0 (skip the profile), MG_GPU_OUT (a folder: the logs come back there as
# gpu-check-logs.tar.gz, with summary.txt), MG_GPU_WORK (default /tmp/mgraph-gpu-check).
set -uo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
tarball="${1:-$repo/build-gpu-bundle/mgraph-gpu.tar.gz}"
work="${MG_GPU_WORK:-/tmp/mgraph-gpu-check}"
peak="${MG_PEAK_TFLOPS:-989}"
t_start=$(date +%s)
# One deadline for the whole check (the device lends minutes, not hours): each stage
# gets its own timeout capped by what is left, and the optional stages run only when
# enough is left.
deadline=$((t_start + ${MG_CHECK_BUDGET:-540}))
left() { echo $((deadline - $(date +%s))); }
cap() { local l; l=$(left); [ "$l" -lt "$1" ] && set -- "$l"; [ "$1" -lt 5 ] && set -- 5; echo "$1"; }
rm -rf "$work"
mkdir -p "$work/logs"
[ -f "$tarball" ] || { echo "gpu-check: no bundle at $tarball (run tools/gpu-bundle.sh where the packages are)"; exit 2; }
tar -C "$work" -xzf "$tarball"
# Everything it wrote comes back in one tarball when MG_GPU_OUT names a folder.
save() {
    [ -n "${MG_GPU_OUT:-}" ] || return 0
    mkdir -p "$MG_GPU_OUT"
    tar -C "$work" -czf "$MG_GPU_OUT/gpu-check-logs.tar.gz" logs 2>/dev/null
    [ -f "$work/logs/summary.txt" ] && cp "$work/logs/summary.txt" "$MG_GPU_OUT/"
    return 0
}
trap save EXIT

# CUDA's libraries from the machine, wherever its image keeps them: the toolkit, the
# system, or Python's nvidia wheels (cuBLAS, NCCL...). Each library's first hit wins.
roots="${CUDA_HOME:-/usr/local/cuda} /usr/local/cuda /usr/local/cuda-13* /usr/local/lib /usr/lib/x86_64-linux-gnu /usr/local/nvidia"
roots="$roots $(python3 -c 'import nvidia; print(" ".join(nvidia.__path__))' 2>/dev/null || true)"
cuda_libs=""
for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcusparse.so.12 libnvJitLink.so.13 libnccl.so.2; do
    # shellcheck disable=SC2086
    f=$(find $roots -maxdepth 6 -name "$lib" -print -quit 2>/dev/null)
    if [ -z "$f" ]; then echo "gpu-check: $lib not found under $roots"; continue; fi
    d=$(dirname "$f")
    case ":$cuda_libs:" in *":$d:"*) ;; *) cuda_libs="$cuda_libs${cuda_libs:+:}$d" ;; esac
done
echo "gpu-check: CUDA libraries from $cuda_libs"
export MG_CUDA_LIBS="$cuda_libs" STARPU_HOME="$work/starpu-home"
# shellcheck disable=SC1091
. "$work/mgraph-gpu/env.sh"
cd "$work/logs"

declare -a rows
row() { rows+=("$(printf '%-34s %-12s %s' "$1" "$2" "$3")"); }
fails=0
b="$work/mgraph-gpu"

echo "== machine =="
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || echo "(no nvidia-smi)"; nproc; } | tee machine.txt
if ldd "$b/bin/mgraph-run" | tee ldd.txt | grep "not found"; then
    echo "gpu-check: libraries missing (above); LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    exit 1
fi

echo "== 1. CUDA kernels vs CPU kernels =="
# One process per op (each with its own CUDA context), eight at a time.
ops="$(cat "$b/cuda-ops.txt") matmul@tf32 matmul@bf16"
t_ops=$(cap 180)
# shellcheck disable=SC2086
printf '%s\n' $ops | timeout "$t_ops" xargs -P 8 -I{} sh -c 'timeout 90 test_cuda_ops {} >op-{}.log 2>&1; echo $? >op-{}.rc'
pass=0 fail=0 skip=0 failed=""
for op in $ops; do
    rc=$(cat "op-$op.rc" 2>/dev/null || echo none)
    case $rc in
    0) pass=$((pass + 1)); tail -1 "op-$op.log" ;;
    77) skip=$((skip + 1)); cat "op-$op.log" ;;
    *) fail=$((fail + 1)); failed="$failed $op"; echo "FAIL $op (rc $rc):"; tail -5 "op-$op.log" 2>/dev/null ;;
    esac
done
row "op tests (CUDA vs CPU)" "$([ $fail = 0 ] && [ $skip = 0 ] && echo ok || echo FAIL)" "$pass passed, $fail failed, $skip skipped${failed:+ (failed:$failed)}"
[ $fail = 0 ] && [ $skip = 0 ] || fails=$((fails + 1))

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c GPU || true)
np=$((ngpu > 1 ? ngpu : 1))
timeout "$(cap 60)" mpirun -np "$np" test_cuda_nccl >nccl.log 2>&1
rc_n=$?
cat nccl.log
row "NCCL collectives (np $np)" "$([ $rc_n = 0 ] && echo ok || echo FAIL)" "$(tail -1 nccl.log)"
[ $rc_n = 0 ] || fails=$((fails + 1))

echo "== 1b. the host CPU's bf16 kernel (--bf16 on CPUs; issue 15), where it has AVX512-BF16 =="
if grep -qw avx512_bf16 /proc/cpuinfo; then
    # the AVX512-BF16 kernel bitwise against the arithmetic's definition, then its speed
    timeout "$(cap 60)" test_ops_gemm_bf16 forward.gemm_bf16_native >bf16-native.log 2>&1
    rc_bn=$?
    cat bf16-native.log
    timeout "$(cap 90)" bench_gemm_bf16 5 2>&1 | tee bf16-bench.log
    # the default model's step on 2 CPU workers, fp32 then --bf16 (median ms/iteration, iterations 6-20)
    dflt=(--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --micro-batch-size 4
        --global-batch-size 8 --train-iters 20 --lr 1e-3 --lr-warmup-iters 2 --log-interval 1 --eval-interval 0
        --tokenizer-type ByteLevelTokenizer --text-file "$repo/tests/data/tinyshakespeare.txt")
    for p in fp32 bf16; do
        STARPU_NCUDA=0 STARPU_NCPU=2 timeout "$(cap 60)" mgraph-run "${dflt[@]}" $([ $p = bf16 ] && echo --bf16) >"dflt-$p.log" 2>&1
    done
    ms() { sed -n 's/.*iteration *\([0-9]*\)\/.*per iteration (ms): *\([0-9.]*\).*/\1 \2/p' "$1" | awk '$1 > 5 {print $2}' | sort -g |
        awk '{v[NR] = $1} END {print NR ? v[int((NR + 1) / 2)] : "n/a"}'; }
    step="default model $(ms dflt-fp32.log) ms fp32, $(ms dflt-bf16.log) ms --bf16"
    echo "$step"
    row "CPU bf16 kernel (AVX512-BF16)" "$([ $rc_bn = 0 ] && echo ok || echo FAIL)" \
        "$(tail -1 bf16-native.log | head -c 60); $step"
    [ $rc_bn = 0 ] || fails=$((fails + 1))
else
    row "CPU bf16 kernel (AVX512-BF16)" "skipped" "the host CPU lacks AVX512-BF16"
fi

echo "== 2. GPU vs CPU training (small GPT, fp32, 10 iterations) =="
corpus="$work/corpus.txt"
cat "$repo"/README.md "$repo"/*/*.c "$repo"/*/*.h >"$corpus"
small=(--num-layers 2 --hidden-size 128 --num-attention-heads 4 --seq-length 64 --micro-batch-size 4
    --global-batch-size 8 --lr 1e-3 --lr-warmup-iters 2 --train-iters 10 --log-interval 1 --eval-interval 0
    --text-file "$corpus" --seed 1234)
STARPU_NCUDA=0 STARPU_HOME="$work/starpu-home-cpu" timeout "$(cap 120)" mgraph-run "${small[@]}" --metrics-file cpu.jsonl >cpu.log 2>&1 &
pid_cpu=$!
STARPU_NCPU=0 STARPU_NCUDA=1 MG_CUDA_GEMM=fp32 timeout "$(cap 120)" mgraph-run "${small[@]}" --metrics-file gpu.jsonl >gpu.log 2>&1
rc_gpu=$?
wait $pid_cpu
rc_cpu=$?
eq=$(python3 - <<'PY' 2>&1
import json
def losses(p):
    try:
        return [json.loads(l)["lm_loss"] for l in open(p) if '"lm_loss"' in l and '"iteration"' in l][:10]
    except OSError:
        return []
c, g = losses("cpu.jsonl"), losses("gpu.jsonl")
worst = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(c, g)) if c and len(c) == len(g) == 10 else float("inf")
print(f"{'ok' if worst <= 1e-4 else 'FAIL'} max relative loss difference {worst:.2e} over {len(g)} iterations "
      f"(cpu last {c[-1] if c else 'n/a'}, gpu last {g[-1] if g else 'n/a'})")
PY
)
[ $rc_cpu = 0 ] && [ $rc_gpu = 0 ] || eq="FAIL cpu rc $rc_cpu, gpu rc $rc_gpu ($(grep -h -m1 -i "error\|failed" cpu.log gpu.log | tr "\n" " "))"
echo "$eq"
row "GPU vs CPU training (10 it, fp32)" "${eq%% *}" "${eq#* }"
[ "${eq%% *}" = ok ] || fails=$((fails + 1))

echo "== 3. benchmark: GPT ~1.3B, bf16 GEMMs, one GPU =="
iters="${MG_BENCH_ITERS:-6}" mbs="${MG_BENCH_MBS:-2}"
big=(--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048
    --micro-batch-size "$mbs" --global-batch-size "$mbs" --lr 1e-4 --log-interval 1 --log-throughput --eval-iters 0 --eval-interval 0
    --text-file "$corpus" --tokenizer-type GPT2BPETokenizer --vocab-file "$repo/tests/data/gpt2/vocab.json"
    --merge-file "$repo/tests/data/gpt2/merges.txt")
# The CUDA worker keeps up to 4 kernels queued on its stream (StarPU's default is 2).
STARPU_NCPU=0 STARPU_NCUDA=1 STARPU_CUDA_PIPELINE=4 MG_CUDA_GEMM=bf16 \
    timeout "$(cap 240)" mgraph-run "${big[@]}" --train-iters "$iters" >bench.log 2>&1
rc_b=$?
grep "iteration" bench.log | tail -"$iters"
bench=$(python3 - "$peak" <<'PY' 2>&1
import re, sys, statistics
peak = float(sys.argv[1])
t = [float(m.group(1)) for m in re.finditer(r"TFLOP/s/GPU\): *([0-9.]+)", open("bench.log").read())]
ms = [float(m.group(1)) for m in re.finditer(r"per iteration \(ms\): *([0-9.]+)", open("bench.log").read())]
steady = t[2:] if len(t) > 3 else t
if not steady:
    print("FAIL no log line")
else:
    med = statistics.median(steady)
    print(f"{'ok' if med / peak >= 0.45 else 'below-target'} median {med:.1f} TFLOP/s = {100 * med / peak:.1f}% MFU "
          f"(peak {peak:.0f}), {statistics.median(ms[2:] if len(ms) > 3 else ms):.0f} ms/iteration, {len(steady)} steady iterations")
PY
)
[ $rc_b = 0 ] || bench="FAIL rc $rc_b: $(grep -m2 -i "error\|failed" bench.log | tr "\n" " ")"
echo "$bench"
row "GPT 1.3B bf16 benchmark" "${bench%% *}" "${bench#* }"
case "${bench%% *}" in ok | below-target) ;; *) fails=$((fails + 1)) ;; esac

echo "== 4. reference: PyTorch on the same GPU (same model, bf16 autocast) =="
if [ "${MG_GPU_TORCH:-1}" != 0 ] && [ "$(left)" -gt 90 ] && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    timeout "$(cap 120)" python3 "$repo/bench/gpu_torch_reference.py" --micro-batch "$mbs" >torch.log 2>&1
    cat torch.log
    ref=$(grep -o 'ms/step, [0-9.]* TFLOP/s' torch.log | head -1)
    gemm=$(grep -o 'GEMM 8192^3: [0-9.]* TFLOP/s' torch.log | head -1)
    row "PyTorch reference (same GPU)" "info" "${ref:-failed (torch.log)}; ${gemm:-no GEMM figure}"
else
    row "PyTorch reference (same GPU)" "skipped" "MG_GPU_TORCH=0, no torch with CUDA, or under 90 s left"
fi

echo "== 5. per-op profile: 2 iterations, one kernel at a time, StarPU's calibrated models =="
if [ "${MG_GPU_PROFILE:-1}" != 0 ] && [ "$(left)" -gt 100 ]; then
    cp -r "$STARPU_HOME" profile-home 2>/dev/null # the bus is measured already
    STARPU_NCPU=0 STARPU_NCUDA=1 STARPU_CUDA_PIPELINE=0 STARPU_CALIBRATE=1 MG_CUDA_GEMM=bf16 \
        STARPU_HOME="$work/logs/profile-home" timeout "$(cap 150)" mgraph-run "${big[@]}" --train-iters 2 >profile.log 2>&1
    row "per-op profile" "info" "rc $?: models in logs/profile-home (StarPU's sampling/codelets)"
else
    row "per-op profile" "skipped" "MG_GPU_PROFILE=0 or under 100 s left"
fi

{
    echo "== summary ($(($(date +%s) - t_start)) s) =="
    printf '%-34s %-12s %s\n' "check" "result" "detail"
    printf '%s\n' "${rows[@]}"
} | tee summary.txt
[ $fails = 0 ]
