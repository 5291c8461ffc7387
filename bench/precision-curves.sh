#!/usr/bin/env bash
# Loss curves of fp32, bf16, fp16 and fp8 training (issue 43, "Must show: loss curves"):
# mgraph-run's default GPT and a LLaMA-style model on Tiny Shakespeare, each precision from
# the same seed on the same samples, with --metrics-file; then one PNG per model
# (tools/plot-metrics) and a table of the final losses (summary.md).
#
#   bench/precision-curves.sh [-i ITERS] [-j JOBS] [-m MODELS] [-p PRECISIONS] OUT_DIR [MGRAPH_RUN]
#
#   -i ITERS       iterations per run (default 500)
#   -j JOBS        runs at once (default 1; each run uses 2 StarPU CPU workers)
#   -m MODELS      comma-separated: default,llama (default both)
#   -p PRECISIONS  comma-separated: fp32,fp32-seed2,bf16,fp16,fp8 (default all five;
#                  fp32-seed2 is fp32 from another seed: the yardstick for the bounds)
#   MGRAPH_RUN     default build/bin/mgraph-run
#
# Runs that already have a complete OUT_DIR/MODEL-PREC.jsonl are not repeated (delete it to
# rerun). Needs python3 for the table, matplotlib for the PNGs (skipped with a note if absent).
# bf16 and fp8 use the portable kernels (MG_CPU_BF16=emulate) unless the CPU has AVX512-BF16.
# Measured numbers and the bounds derived from them: docs/precision.md, "Loss curves".
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ITERS=500 JOBS=1 MODELS=default,llama PRECS=fp32,fp32-seed2,bf16,fp16,fp8
usage() { sed -n '7,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while getopts i:j:m:p:h o; do
    case $o in
    i) ITERS=$OPTARG ;; j) JOBS=$OPTARG ;; m) MODELS=$OPTARG ;; p) PRECS=$OPTARG ;; *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] && [ $# -le 2 ] || usage
OUT=$1 RUN=${2:-$ROOT/build/bin/mgraph-run}
[[ $ITERS =~ ^[1-9][0-9]*$ ]] || { echo "precision-curves: -i wants a positive integer, not '$ITERS'" >&2; exit 2; }
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || { echo "precision-curves: -j wants a positive integer, not '$JOBS'" >&2; exit 2; }
[ -x "$RUN" ] || { echo "precision-curves: $RUN is not an executable (build first)" >&2; exit 2; }
CORPUS=$ROOT/tests/data/tinyshakespeare.txt

# The models. "default" is mgraph-run's default GPT (4 layers, hidden 256, 4 heads, seq 128,
# byte-level vocabulary 256: 3.26M parameters) with its optimiser settings (lr 1e-3 to 1e-4,
# cosine, 30 warm-up iterations), on one sequence per iteration instead of 8 so that the
# whole set runs in about an hour on a shared 2-core machine. "llama" is RMSNorm, RoPE,
# SwiGLU, GQA (4 heads, 2 query groups), untied embeddings, no biases: 4 layers, hidden 128,
# ffn 352, byte-level.
WARMUP=$((ITERS >= 300 ? 30 : ITERS / 10))  # (the default's 30 of 300; shorter runs keep a tenth)
COMMON=(--text-file "$CORPUS" --seq-length 128 --micro-batch-size 1 --global-batch-size 1
        --train-iters "$ITERS" --lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine --lr-warmup-iters "$WARMUP"
        --log-interval 50 --eval-iters 0 --cpu-workers 2)
model_flags() {
    case $1 in
    default) echo "--num-layers 4 --hidden-size 256 --num-attention-heads 4" ;;
    llama) echo "--num-layers 4 --hidden-size 128 --num-attention-heads 4 --ffn-hidden-size 352
                 --normalization RMSNorm --position-embedding-type rope --swiglu --group-query-attention
                 --num-query-groups 2 --untie-embeddings-and-output-weights --disable-bias-linear" ;;
    *) return 1 ;;
    esac
}
# Megatron's flags for each precision; fp8 is Transformer Engine's hybrid format (E4M3
# forward, E5M2 gradients) with delayed scaling inside bf16, as Megatron's fp8 recipes run it.
prec_flags() {
    case $1 in
    fp32) echo "--seed 1234" ;;
    fp32-seed2) echo "--seed 4321" ;;
    bf16) echo "--seed 1234 --bf16" ;;
    fp16) echo "--seed 1234 --fp16" ;;
    fp8) echo "--seed 1234 --bf16 --fp8-format hybrid --fp8-recipe delayed" ;;
    *) return 1 ;;
    esac
}
IFS=, read -ra MS <<< "$MODELS"
IFS=, read -ra PS <<< "$PRECS"
for m in "${MS[@]}"; do model_flags "$m" > /dev/null || { echo "precision-curves: unknown model '$m'" >&2; exit 2; }; done
for p in "${PS[@]}"; do prec_flags "$p" > /dev/null || { echo "precision-curves: unknown precision '$p'" >&2; exit 2; }; done
mkdir -p "$OUT" || exit 1

export MG_CPU_BF16=${MG_CPU_BF16:-emulate} STARPU_SILENT=1
export STARPU_HOME=${STARPU_HOME:-$OUT/starpu-home}
complete() { [ -s "$1" ] && grep -q "\"iteration\": $ITERS," "$1"; }
run_one() { # MODEL PREC: OUT/MODEL-PREC.{jsonl,log}; the metrics file is renamed into place when the run succeeds
    local m=$1 p=$2 base=$OUT/$1-$2
    complete "$base.jsonl" && { echo "$m $p: done already"; return 0; }
    # shellcheck disable=SC2046 # the flag lists split into words
    if "$RUN" "${COMMON[@]}" $(model_flags "$m") $(prec_flags "$p") --metrics-file "$base.jsonl.part" \
        > "$base.log" 2>&1; then
        mv "$base.jsonl.part" "$base.jsonl" && echo "$m $p: $(grep -c '"iteration"' "$base.jsonl") iterations"
    else
        echo "$m $p: FAILED (see $base.log)" >&2
        return 1
    fi
}
echo "precision-curves: $ITERS iterations of ${MODELS} x ${PRECS}, $JOBS at once; load $(cut -d' ' -f1-3 /proc/loadavg)"
fail=0
for p in fp8 fp16 bf16 fp32 fp32-seed2; do  # the slowest first, so that -j keeps the cores busy to the end
    [[ ",$PRECS," == *",$p,"* ]] || continue
    for m in "${MS[@]}"; do
        while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || fail=1; done
        run_one "$m" "$p" &
    done
done
while [ "$(jobs -rp | wc -l)" -gt 0 ]; do wait -n || fail=1; done
[ $fail -eq 0 ] || { echo "precision-curves: some runs failed" >&2; exit 1; }

# The table: per run, the final loss, the means over the last 50 and 100 iterations, the
# difference of the last-100 mean from fp32's, skipped iterations and median tokens/s.
python3 - "$OUT" "$ITERS" "${MS[@]}" -- "${PS[@]}" << 'EOF' > "$OUT/summary.md.part" || exit 1
import json, statistics, sys
out, iters = sys.argv[1], int(sys.argv[2])
cut = sys.argv.index("--")
models, precs = sys.argv[3:cut], sys.argv[cut + 1:]
print(f"{iters} iterations per run (lm loss in nats; 'last 100' is the mean of the per-iteration "
      "losses over the last 100 iterations; the difference is from fp32's)\n")
print("| model | precision | final loss | mean last 50 | mean last 100 | last 100 - fp32 | skipped | tokens/s (median) |")
print("|---|---|---|---|---|---|---|---|")
for m in models:
    ref = None
    if "fp32" in precs:
        rows = [json.loads(l) for l in open(f"{out}/{m}-fp32.jsonl") if '"iteration"' in l]
        v = [r["lm_loss"] for r in rows if r["iteration"] > iters - 100 and isinstance(r.get("lm_loss"), (int, float))]
        ref = sum(v) / len(v)
    for p in precs:
        rows = [json.loads(l) for l in open(f"{out}/{m}-{p}.jsonl") if '"iteration"' in l]
        loss = {r["iteration"]: r["lm_loss"] for r in rows if isinstance(r.get("lm_loss"), (int, float))}
        def mean(k):
            v = [loss[i] for i in range(iters - k + 1, iters + 1) if i in loss]
            return sum(v) / len(v)
        m100 = mean(100)
        d = f"{m100 - ref:+.4f}" if ref is not None and p != "fp32" else ""
        skipped = sum(1 for r in rows if r.get("skipped"))
        tps = statistics.median(r["tokens_per_s"] for r in rows if "tokens_per_s" in r)
        print(f"| {m} | {p} | {loss.get(iters, float('nan')):.4f} | {mean(50):.4f} | {m100:.4f} | {d} | {skipped} | {tps:.0f} |")
EOF
mv "$OUT/summary.md.part" "$OUT/summary.md" && cat "$OUT/summary.md"

if python3 -c 'import matplotlib' 2> /dev/null; then
    for m in "${MS[@]}"; do
        files=() labels=()
        for p in "${PS[@]}"; do files+=("$OUT/$m-$p.jsonl") labels+=(--label "$p"); done
        python3 "$ROOT/tools/plot-metrics" "$OUT/precision-$m.png" "${files[@]}" "${labels[@]}" --smooth 20 || exit 1
    done
else
    echo "precision-curves: no matplotlib: no PNGs (the table is in $OUT/summary.md)"
fi
