#!/usr/bin/env bash
# mgraph-run --decoupled-lr / --decoupled-min-lr (Megatron's: the word embedding and the
# output layer follow the learning-rate schedule between their own peak and minimum).
#  1. A decoupled rate equal to --lr (and the default minimum, --min-lr) trains bit for
#     bit as without the flags.
#  2. --decoupled-lr 0 --decoupled-min-lr 0: the embedding and the untied output layer never move while every
#     other weight does (checkpoints of iterations 1 and 3, read with a stdlib-only
#     safetensors reader); the logged learning rate stays --lr's.
#  3. Every plan equals the serial run (1e-5): tp 2 + SP, dp 2 with the distributed
#     optimizer, pp 2 (the embedding on the first stage, the output layer on the last).
#  4. A negative rate, or a minimum above the peak, is refused; --decoupled-min-lr alone
#     warns that it does nothing.
#   decoupled_lr.sh MGRAPH_RUN MPIEXEC TEXT WORK_DIR
set -u
RUN=$1 MPI=$2 TEXT=$3 WORK=$4
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
[ -f "$TEXT" ] || fail "no corpus $TEXT"
source "$(dirname "$0")/metrics_lib.sh"
# LLaMA-shaped with an untied output layer: both kinds of decoupled parameter
BASE=(--text-file "$TEXT" --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --micro-batch-size 2
      --global-batch-size 8 --train-iters 3 --eval-iters 0 --log-interval 1 --lr 3e-3 --min-lr 3e-4
      --lr-decay-style cosine --lr-warmup-iters 1 --adam-eps 1e-3 --cpu-workers 1 --normalization RMSNorm
      --position-embedding-type rope --swiglu --ffn-hidden-size 64 --untie-embeddings-and-output-weights
      --disable-bias-linear)
train() { local out=$1; shift; train_n 3 "$out" "${BASE[@]}" "$@"; } # OUT ARGS...

# ---- 1. the same rate ---------------------------------------------------------------------------
train plain
train same --decoupled-lr 3e-3
cmp -s <(column lm_loss plain.jsonl) <(column lm_loss same.jsonl) &&
    cmp -s <(column grad_norm plain.jsonl) <(column grad_norm same.jsonl) ||
    fail "--decoupled-lr equal to --lr changed the training"
echo "ok: --decoupled-lr equal to --lr trains bit for bit as without it"

# ---- 2. a frozen embedding and output layer --------------------------------------------------------
train frozen --decoupled-lr 0 --decoupled-min-lr 0 --save ck --save-interval 1
cmp -s <(column lr plain.jsonl) <(column lr frozen.jsonl) || fail "the logged learning rate is not --lr's"
python3 - "$CKPT_PY" ck <<'EOF' || fail "--decoupled-lr 0 did not freeze exactly the embedding and the output layer"
import os, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import ckpt  # tests/support/ckpt.py

first, last = ckpt.load(sys.argv[2], 1), ckpt.load(sys.argv[2], 3)
frozen = ("model.embed_tokens.weight", "lm_head.weight")
moved = [k for k in first if not k.endswith((".exp_avg", ".exp_avg_sq")) and first[k] != last[k]]
kept = [k for k in first if k in frozen]
if len(kept) != 2 or any(first[k] != last[k] for k in kept):
    sys.exit(f"embedding / output layer changed between iterations 1 and 3: {kept}")
if "model.layers.0.self_attn.q_proj.weight" not in moved or len(moved) < 10:
    sys.exit(f"too few weights moved: {moved}")
print(f"embedding and output layer unchanged from iteration 1 to 3; {len(moved)} other tensors moved")
EOF

# ---- 3. every plan ----------------------------------------------------------------------------------
train serial --decoupled-lr 1e-2 --decoupled-min-lr 1e-3
for plan in "--tensor-model-parallel-size 2 --sequence-parallel" "--use-distributed-optimizer" \
            "--pipeline-model-parallel-size 2"; do
    # shellcheck disable=SC2086 # the plan is several words
    rm -rf parallel.ck
    timeout 300 "$MPI" -np 2 "$RUN" "${BASE[@]}" --decoupled-lr 1e-2 --decoupled-min-lr 1e-3 $plan \
        --metrics-file parallel.jsonl --save parallel.ck > parallel.txt 2>&1 || { cat parallel.txt; fail "2 ranks with '$plan'"; }
    echo "2 ranks $plan:"
    for m in lm_loss grad_norm; do within $m parallel.jsonl serial.jsonl 3 || fail "$m of '$plan' differs from serial"; done
    same_weights serial parallel || fail "the final weights or Adam moments of '$plan' differ from serial"
done
cmp -s <(column lm_loss serial.jsonl) <(column lm_loss plain.jsonl) && fail "--decoupled-lr 1e-2 changed nothing"
echo "ok: tp 2 + SP, dp 2 + distributed optimizer and pp 2 with a decoupled rate equal the serial run"

# ---- 4. bad values ------------------------------------------------------------------------------------
for bad in "--decoupled-lr -1" "--decoupled-lr 1e-3 --decoupled-min-lr 1e-2"; do
    # shellcheck disable=SC2086 # the flags and their values
    timeout 60 "$RUN" "${BASE[@]}" $bad --dry-run > out.txt 2> err.txt
    rc=$?
    [ $rc -eq 2 ] && grep -q -- "--decoupled-min-lr (default --min-lr) <= --decoupled-lr" err.txt ||
        { cat err.txt; fail "'$bad': exit $rc, want 2 with the rule"; }
done
timeout 60 "$RUN" "${BASE[@]}" --decoupled-min-lr 1e-4 --dry-run > out.txt 2> err.txt ||
    { cat err.txt; fail "--decoupled-min-lr alone"; }
grep -q "warning: --decoupled-min-lr has no effect without --decoupled-lr" err.txt || { cat err.txt; fail "no warning"; }
echo "ok: bad decoupled rates refused, --decoupled-min-lr alone warned about"
