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
# then a summary table. Budget: under 10 minutes (each stage has a timeout).
# Variables: MG_BENCH_ITERS (default 6), MG_BENCH_MBS (micro-batch, default 2),
# MG_PEAK_TFLOPS (default 989).
set -uo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
tarball="${1:-$repo/build-gpu-bundle/mgraph-gpu.tar.gz}"
work="${MG_GPU_WORK:-/tmp/mgraph-gpu-check}"
peak="${MG_PEAK_TFLOPS:-989}"
t_start=$(date +%s)
rm -rf "$work"
mkdir -p "$work"
[ -f "$tarball" ] || { echo "gpu-check: no bundle at $tarball (run tools/gpu-bundle.sh where the packages are)"; exit 2; }
tar -C "$work" -xzf "$tarball"

# CUDA's libraries from the machine; NCCL from there or from Python's nvidia wheels.
cuda_libs=""
for d in "${CUDA_HOME:-/usr/local/cuda}/lib64" /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && cuda_libs="$cuda_libs${cuda_libs:+:}$d"
done
if ! ls ${cuda_libs//:/ } 2>/dev/null | grep -q "libnccl.so.2"; then
    nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null || true)
    [ -n "$nccl" ] && cuda_libs="$cuda_libs:$nccl"
fi
export MG_CUDA_LIBS="$cuda_libs" STARPU_HOME="$work/starpu-home"
# shellcheck disable=SC1091
. "$work/mgraph-gpu/env.sh"
cd "$work"

declare -a rows
row() { rows+=("$(printf '%-34s %-8s %s' "$1" "$2" "$3")"); }
fails=0

echo "== machine =="
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "(no nvidia-smi)"
if ldd mgraph-gpu/bin/mgraph-run | grep "not found"; then
    echo "gpu-check: libraries missing (above); LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    exit 1
fi

echo "== 1. CUDA kernels vs CPU kernels =="
pass=0 fail=0 skip=0 failed=""
for op in $(cat mgraph-gpu/cuda-ops.txt) matmul@tf32 matmul@bf16; do
    timeout 120 test_cuda_ops "$op" >"op-$op.log" 2>&1
    case $? in
    0) pass=$((pass + 1)); tail -1 "op-$op.log" ;;
    77) skip=$((skip + 1)); cat "op-$op.log" ;;
    *) fail=$((fail + 1)); failed="$failed $op"; echo "FAIL $op:"; tail -5 "op-$op.log" ;;
    esac
done
row "op tests (CUDA vs CPU)" "$([ $fail = 0 ] && [ $skip = 0 ] && echo ok || echo FAIL)" "$pass passed, $fail failed, $skip skipped${failed:+ (failed:$failed)}"
[ $fail = 0 ] && [ $skip = 0 ] || fails=$((fails + 1))

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c GPU || true)
np=$((ngpu > 1 ? ngpu : 1))
timeout 120 mpirun -np "$np" test_cuda_nccl >nccl.log 2>&1
rc_n=$?
cat nccl.log
row "NCCL collectives (np $np)" "$([ $rc_n = 0 ] && echo ok || echo FAIL)" "$(tail -1 nccl.log)"
[ $rc_n = 0 ] || fails=$((fails + 1))

echo "== 2. GPU vs CPU training (small GPT, fp32, 10 iterations) =="
cat "$repo"/README.md "$repo"/*/*.c "$repo"/*/*.h >corpus.txt
small=(--num-layers 2 --hidden-size 128 --num-attention-heads 4 --seq-length 64 --micro-batch-size 4
    --global-batch-size 8 --lr 1e-3 --lr-warmup-iters 2 --train-iters 10 --log-interval 1 --eval-interval 0
    --text-file corpus.txt --seed 1234)
STARPU_NCUDA=0 timeout 300 mgraph-run "${small[@]}" --metrics-file cpu.jsonl >cpu.log 2>&1
rc_cpu=$?
STARPU_NCPU=0 STARPU_NCUDA=1 MG_CUDA_GEMM=fp32 timeout 300 mgraph-run "${small[@]}" --metrics-file gpu.jsonl >gpu.log 2>&1
rc_gpu=$?
eq=$(python3 - <<'PY' 2>&1
import json
def losses(p):
    return [json.loads(l)["lm_loss"] for l in open(p) if '"lm_loss"' in l and '"iteration"' in l][:10]
c, g = losses("cpu.jsonl"), losses("gpu.jsonl")
worst = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(c, g)) if c and len(c) == len(g) == 10 else float("inf")
print(f"{'ok' if worst <= 1e-4 else 'FAIL'} max relative loss difference {worst:.2e} over {len(g)} iterations "
      f"(cpu last {c[-1] if c else 'n/a'}, gpu last {g[-1] if g else 'n/a'})")
PY
)
[ $rc_cpu = 0 ] && [ $rc_gpu = 0 ] || eq="FAIL cpu rc $rc_cpu, gpu rc $rc_gpu (cpu.log / gpu.log: $(tail -2 gpu.log | tr '\n' ' '))"
echo "$eq"
row "GPU vs CPU training (10 it, fp32)" "${eq%% *}" "${eq#* }"
[ "${eq%% *}" = ok ] || fails=$((fails + 1))

echo "== 3. benchmark: GPT ~1.3B, bf16 GEMMs, one GPU =="
iters="${MG_BENCH_ITERS:-6}" mbs="${MG_BENCH_MBS:-2}"
big=(--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048
    --micro-batch-size "$mbs" --global-batch-size "$mbs" --lr 1e-4 --train-iters "$iters" --log-interval 1
    --eval-interval 0 --text-file corpus.txt)
STARPU_NCPU=0 STARPU_NCUDA=1 MG_CUDA_GEMM=bf16 timeout 420 mgraph-run "${big[@]}" >bench.log 2>&1
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
[ $rc_b = 0 ] || bench="FAIL rc $rc_b: $(tail -3 bench.log | tr '\n' ' ')"
echo "$bench"
row "GPT 1.3B bf16 benchmark" "${bench%% *}" "${bench#* }"
case "${bench%% *}" in ok | below-target) ;; *) fails=$((fails + 1)) ;; esac

echo
echo "== summary ($(($(date +%s) - t_start)) s) =="
printf '%-34s %-8s %s\n' "check" "result" "detail"
printf '%s\n' "${rows[@]}"
[ $fails = 0 ]
