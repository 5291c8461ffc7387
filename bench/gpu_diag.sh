#!/usr/bin/env bash
# Where a GPU step's time goes (one H200, from the gpu-bundle): the 1.3B benchmark
# model under several StarPU settings, each a short run after one run that calibrates
# StarPU's models (kept in one STARPU_HOME), the CUDA worker's timeline of one steady
# iteration (launch spans and the gaps between them), and StarPU's bus and worker
# statistics. Output: a table of median step times, and the timeline's summary.
#   bash bench/gpu_diag.sh [TARBALL]      (MG_GPU_OUT: folder for the logs)
set -uo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
tarball="${1:-$repo/build-gpu-bundle/mgraph-gpu.tar.gz}"
work=/tmp/mgraph-gpu-diag
rm -rf "$work"; mkdir -p "$work/logs"
tar -C "$work" -xzf "$tarball"
roots="/usr/local/cuda /usr/local/cuda-13* /usr/local/lib /usr/lib/x86_64-linux-gnu $(python3 -c 'import nvidia; print(" ".join(nvidia.__path__))' 2>/dev/null)"
libs=""
for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcusparse.so.12 libnvJitLink.so.13 libnccl.so.2; do
    f=$(find $roots -maxdepth 6 -name "$lib" -print -quit 2>/dev/null); [ -n "$f" ] || continue
    case ":$libs:" in *":$(dirname "$f"):"*) ;; *) libs="$libs${libs:+:}$(dirname "$f")" ;; esac
done
export MG_CUDA_LIBS="$libs" STARPU_HOME="$work/starpu-home"
. "$work/mgraph-gpu/env.sh"
cd "$work/logs"
trap '[ -n "${MG_GPU_OUT:-}" ] && tar -C "$work" -czf "$MG_GPU_OUT/gpu-diag-logs.tar.gz" logs' EXIT
cat "$repo"/README.md "$repo"/*/*.c "$repo"/*/*.h >"$work/corpus.txt"
big=(--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048
    --micro-batch-size 2 --global-batch-size 2 --lr 1e-4 --log-interval 1 --eval-iters 0 --eval-interval 0
    --text-file "$work/corpus.txt" --tokenizer-type GPT2BPETokenizer --vocab-file "$repo/tests/data/gpt2/vocab.json"
    --merge-file "$repo/tests/data/gpt2/merges.txt")
med() { python3 -c '
import re,sys,statistics
ms=[float(m) for m in re.findall(r"per iteration \(ms\): *([0-9.]+)", open(sys.argv[1]).read())]
print("%s: iterations %s ms; median of 3.. %.1f" % (sys.argv[2], " ".join("%.0f" % x for x in ms), statistics.median(ms[2:]) if len(ms) > 2 else float("nan")))' "$1" "$2" | tee -a table.txt; }
base=(env STARPU_NCPU=0 STARPU_NCUDA=1 MG_CUDA_GEMM=bf16)
echo "== calibrating run (3 iterations) =="
"${base[@]}" STARPU_CUDA_PIPELINE=4 timeout 150 mgraph-run "${big[@]}" --train-iters 3 >calib.log 2>&1; med calib.log "calibration run, pipeline 4"
echo "== baseline with trace of iteration 5, bus/worker stats =="
"${base[@]}" STARPU_CUDA_PIPELINE=4 STARPU_BUS_STATS=1 STARPU_WORKER_STATS=1 STARPU_PROFILING=1 timeout 90 mgraph-run "${big[@]}" --train-iters 6 \
    --trace-file trace.json --trace-iterations 5:5 >base.log 2>&1; med base.log "pipeline 4 + profiling + trace"
for v in "STARPU_CUDA_PIPELINE=4" "STARPU_CUDA_PIPELINE=4 MG_STARPU_PAUSE=0" "STARPU_CUDA_PIPELINE=4 STARPU_NWORKER_PER_CUDA=2" "STARPU_CUDA_PIPELINE=0"; do
    n=$(echo "$v" | tr ' =' '__')
    "${base[@]}" $v timeout 60 mgraph-run "${big[@]}" --train-iters 5 >"v-$n.log" 2>&1; med "v-$n.log" "$v"
done
python3 - <<'PY' | tee -a table.txt
import json, collections, re
ev = [e for e in json.load(open("trace.json"))["traceEvents"] if e.get("ph") == "X" and e.get("cat") != "iteration"]
it = [e for e in json.load(open("trace.json"))["traceEvents"] if e.get("cat") == "iteration"]
ev.sort(key=lambda e: e["ts"])
span = collections.Counter(); cnt = collections.Counter(); gap_before = collections.Counter()
key = lambda e: re.sub(r"\.\d+\.", ".*.", e["name"])
for a, b in zip(ev, ev[1:]):
    gap_before[key(b)] += b["ts"] - (a["ts"] + a["dur"])
for e in ev:
    span[key(e)] += e["dur"]; cnt[key(e)] += 1
wall = it[0]["dur"] if it else ev[-1]["ts"] - ev[0]["ts"]
print(f"trace: {len(ev)} tasks, iteration {wall/1e3:.1f} ms; launch spans {sum(span.values())/1e3:.1f} ms, gaps {sum(gap_before.values())/1e3:.1f} ms")
print(f"{'op':22s} {'n':>5s} {'launch ms':>10s} {'gap-before ms':>14s}")
for k, _ in sorted(gap_before.items(), key=lambda x: -(x[1] + span[x[0]]))[:20]:
    print(f"{k:22s} {cnt[k]:5d} {span[k]/1e3:10.2f} {gap_before[k]/1e3:14.2f}")
PY
grep -A12 -i 'bus stat\|Worker stat\|Transfer stat' base.log | head -60
