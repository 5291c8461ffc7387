#!/usr/bin/env bash
# mgraph-run --log-params-norm (Megatron's): the L2 norm of every parameter after the
# step, in the log line (after the grad norm, as Megatron prints it) and the metrics.
#  1. Against the checkpoint of the same iteration: the norm of its parameter tensors
#     (Adam moments left out), read with tests/support/ckpt.py, within 1e-6.
#  2. Every plan gives the serial norm (1e-5): tp 2 + SP, dp 2 with the distributed
#     optimizer, pp 2 (the tied embedding counted once), and a MoE model on ep 2; and
#     the serial final weights and Adam moments (tests/support/ckpt.py's bound).
#  3. Without the flag nothing is logged.
#   params_norm.sh MGRAPH_RUN MPIEXEC TEXT WORK_DIR
set -u
RUN=$1 MPI=$2 TEXT=$3 WORK=$4
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
[ -f "$TEXT" ] || fail "no corpus $TEXT"
source "$(dirname "$0")/metrics_lib.sh"
BASE=(--text-file "$TEXT" --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --micro-batch-size 2
      --global-batch-size 8 --train-iters 3 --eval-iters 0 --log-interval 1 --lr 3e-3 --lr-warmup-iters 0
      --adam-eps 1e-5 --cpu-workers 1)

# ---- 1. against the checkpoints ---------------------------------------------------------------
timeout 120 "$RUN" "${BASE[@]}" --log-params-norm --save ck --save-interval 1 --metrics-file serial.jsonl > serial.txt 2>&1 ||
    { cat serial.txt; fail "serial run"; }
grep -q "grad norm: [0-9.]* | params norm: [0-9.]* | number of skipped iterations" serial.txt ||
    { cat serial.txt; fail "no 'params norm: X |' after the grad norm in the log line"; }
python3 - "$CKPT_PY" ck serial.jsonl <<'EOF' || fail "params norm differs from the checkpoint's parameters"
import json, math, os, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import ckpt  # tests/support/ckpt.py
ck, metrics = sys.argv[2:4]
logged = [json.loads(l)["params_norm"] for l in open(metrics) if "params_norm" in l]
if len(logged) != 3:
    sys.exit(f"want 3 params_norm values, got {logged}")
for it, want in enumerate(logged, 1):
    tensors = ckpt.load(ck, it)
    norm = math.sqrt(sum(x * x for name, v in tensors.items() if not name.endswith((".exp_avg", ".exp_avg_sq"))
                         for x in v))
    rel = abs(norm - want) / norm
    print(f"iteration {it}: logged params norm {want:.9g}, from the checkpoint {norm:.9g}, relative difference {rel:.2e}")
    if rel > 1e-6:
        sys.exit(1)
EOF

# ---- 2. every plan -------------------------------------------------------------------------------
for plan in "--tensor-model-parallel-size 2 --sequence-parallel" "--use-distributed-optimizer" \
            "--pipeline-model-parallel-size 2"; do
    # shellcheck disable=SC2086 # the plan is several words
    rm -rf parallel.ck
    timeout 300 $MPI -np 2 "$RUN" "${BASE[@]}" --log-params-norm $plan --metrics-file parallel.jsonl --save parallel.ck \
        > parallel.txt 2>&1 || { cat parallel.txt; fail "2 ranks with '$plan'"; }
    echo "2 ranks $plan:"
    within params_norm parallel.jsonl serial.jsonl 3 || fail "params norm of '$plan' differs from serial"
    python3 "$CKPT_PY" compare ck parallel.ck || fail "the final weights or Adam moments of '$plan' differ from serial"
done
MOE=(--normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear --num-experts 4
     --moe-router-topk 2 --moe-ffn-hidden-size 48 --moe-aux-loss-coeff 1e-2)
timeout 120 "$RUN" "${BASE[@]}" "${MOE[@]}" --log-params-norm --metrics-file moe.jsonl --save moe.ck > moe.txt 2>&1 ||
    { cat moe.txt; fail "MoE serial run"; }
timeout 300 $MPI -np 2 "$RUN" "${BASE[@]}" "${MOE[@]}" --log-params-norm --expert-model-parallel-size 2 \
    --metrics-file moe_ep2.jsonl --save moe_ep2.ck > moe_ep2.txt 2>&1 || { cat moe_ep2.txt; fail "MoE on ep 2"; }
echo "MoE, 2 ranks, ep 2:"
within params_norm moe_ep2.jsonl moe.jsonl 3 || fail "params norm of MoE on ep 2 differs from serial"
same_weights moe moe_ep2 || fail "the final weights or Adam moments of MoE on ep 2 differ from serial"

# ---- 3. off by default ---------------------------------------------------------------------------
timeout 120 "$RUN" "${BASE[@]}" --metrics-file off.jsonl > off.txt 2>&1 || { cat off.txt; fail "run without the flag"; }
grep -q params_norm off.jsonl && fail "params_norm without --log-params-norm"
grep -q "params norm" off.txt && fail "'params norm' in the log line without --log-params-norm"
echo "ok: --log-params-norm is the checkpoint's parameter norm, the same under tp, dp + distributed optimizer, pp and ep"
