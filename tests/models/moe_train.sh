#!/usr/bin/env bash
# A Mixtral-style MoE model trains on Tiny Shakespeare through mgraph-run: every layer's
# MLP is 4 experts with top-2 routing, Switch load-balancing loss and router z-loss.
# The lm loss must fall, the log line must carry load_balancing_loss (and z_loss) as
# Megatron prints them, and the metrics file must hold them every iteration. Then the
# capacity variants run, and bad MoE flags exit 2 with one message.
#   moe_train.sh MGRAPH_RUN TINY_SHAKESPEARE WORK_DIR
set -u
RUN=$1 TEXT=$2 WORK=$3
[ -f "$TEXT" ] || { echo "skip: no Tiny Shakespeare"; exit 77; }
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
BASE=(--text-file "$TEXT" --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64
      --micro-batch-size 4 --global-batch-size 8 --lr 3e-3 --lr-warmup-iters 5 --eval-interval 0
      --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 128)
# Mixtral's block: RMSNorm, RoPE, SwiGLU experts, no biases
"$RUN" "${BASE[@]}" --normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear \
    --train-iters 60 --log-interval 10 --moe-aux-loss-coeff 1e-2 --moe-z-loss-coeff 1e-3 \
    --metrics-file m.jsonl > run.txt 2>&1 || { cat run.txt; fail "MoE training"; }
cat run.txt
grep -E '^ \[[0-9: .-]+\] iteration +60/ +60 .*\| lm loss: [0-9.E+-]+ \| load_balancing_loss: [0-9.]+ \| z_loss: [0-9.]+ \| loss scale' \
    run.txt > /dev/null || fail "the log line lacks load_balancing_loss / z_loss after the lm loss"
[ "$(grep -c '"load_balancing_loss"' m.jsonl)" -eq 60 ] || fail "want load_balancing_loss in all 60 metrics lines"
# first loss near ln 256 = 5.55; mean of the last 10 at least 1.5 lower
awk -F'"lm_loss": ' '/lm_loss/ { split($2, a, ","); l[++n] = a[1] }
     /load_balancing_loss/ { split($0, b, "\"load_balancing_loss\": "); split(b[2], c, ","); lb = c[1] + 0;
                             if (!(lb > 0.5 && lb < 4)) { print "load_balancing_loss out of range: " lb; bad = 1 } }
     END { for (i = n - 9; i <= n; i++) s += l[i]; last = s / 10;
           printf "first lm loss %.4f, mean of last 10 %.4f\n", l[1], last;
           if (bad || l[1] < 5.2 || l[1] > 5.9 || last > l[1] - 1.5) exit 1 }' m.jsonl || fail "loss did not fall"
# capacity: dropping by probability, and padded to capacity with the position policy
for v in "--moe-expert-capacity-factor 1.0" \
         "--moe-expert-capacity-factor 1.5 --moe-token-drop-policy position --moe-pad-expert-input-to-capacity" \
         "--moe-router-pre-softmax --moe-layer-freq 2"; do
    # shellcheck disable=SC2086
    "$RUN" "${BASE[@]}" --train-iters 12 --log-interval 12 --moe-aux-loss-coeff 1e-2 $v --metrics-file c.jsonl \
        > cap.txt 2>&1 || { cat cap.txt; fail "training with $v"; }
    awk -F'"lm_loss": ' '/lm_loss/ { split($2, a, ","); l[++n] = a[1] } END { exit !(n == 12 && l[12] < l[1] - 0.5) }' \
        c.jsonl || { cat cap.txt; fail "loss did not fall with $v"; }
done
# bad MoE flags: exit 2, one message naming the flag
bad() {
    "$RUN" "${BASE[@]}" --train-iters 10 "$@" > bad.txt 2>&1  # 10: above the 5 warm-up iterations, as Megatron requires
    rc=$?
    [ $rc -eq 2 ] || { cat bad.txt; fail "$* exited $rc, want 2"; }
}
bad --moe-router-topk 5
grep -q -- "--moe-router-topk" bad.txt || fail "topk message: $(cat bad.txt)"
bad --moe-token-drop-policy random
bad --moe-token-dispatcher-type allgather
bad --moe-expert-capacity-factor -1
bad --moe-pad-expert-input-to-capacity
bad --moe-layer-freq 0
bad --expert-model-parallel-size 2
echo "ok: MoE training, log line, capacity variants, bad flags"
