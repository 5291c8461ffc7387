#!/usr/bin/env bash
# A Mixtral-style MoE model trains on Tiny Shakespeare through mgraph-run: every layer's
# MLP is 4 experts with top-2 routing, Switch load-balancing loss and router z-loss.
# The lm loss must fall below what a model without working experts reaches: the mean of
# the last 10 of 100 iterations at least 0.15 nats under the text's byte unigram entropy
# (3.31: what a model that ignores the context, or a shuffled text, can reach at best),
# and the same run with the experts all but silenced (capacity factor 0.01: each expert
# takes about one token, the others pass through the residual alone) must NOT pass that
# bar (measured: 3.08 with the experts, 3.20 without). The log line must carry
# load_balancing_loss (and z_loss) as Megatron prints them, and the metrics file must
# hold them every iteration. Then the capacity variants run, and bad MoE flags exit 2
# with one message.
#   moe_train.sh MGRAPH_RUN TINY_SHAKESPEARE WORK_DIR
set -u
RUN=$1 TEXT=$2 WORK=$3
[ -f "$TEXT" ] || { echo "FAIL: no Tiny Shakespeare at $TEXT"; exit 1; }
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
BASE=(--text-file "$TEXT" --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64
      --micro-batch-size 4 --global-batch-size 8 --lr 3e-3 --lr-warmup-iters 5 --eval-interval 0
      --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 128)
# Mixtral's block: RMSNorm, RoPE, SwiGLU experts, no biases; lr 1e-2 over 100 iterations
MIX=(--normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear --train-iters 100
     --log-interval 10 --lr 1e-2 --moe-aux-loss-coeff 1e-2 --moe-z-loss-coeff 1e-3)
"$RUN" "${BASE[@]}" "${MIX[@]}" --metrics-file m.jsonl > run.txt 2>&1 || { cat run.txt; fail "MoE training"; }
cat run.txt
grep -E '^ \[[0-9: .-]+\] iteration +100/ +100 .*\| lm loss: [0-9.E+-]+ \| load_balancing_loss: [0-9.]+ \| z_loss: [0-9.]+ \| loss scale' \
    run.txt > /dev/null || fail "the log line lacks load_balancing_loss / z_loss after the lm loss"
[ "$(grep -c '"load_balancing_loss"' m.jsonl)" -eq 100 ] || fail "want load_balancing_loss in all 100 metrics lines"
# the control: the same model and data with the experts all but silenced
"$RUN" "${BASE[@]}" "${MIX[@]}" --moe-expert-capacity-factor 0.01 --metrics-file silent.jsonl > silent.txt 2>&1 ||
    { cat silent.txt; fail "the control run"; }
python3 - "$TEXT" m.jsonl silent.jsonl << 'EOF' || fail "the loss bar (or its control)"
import collections, json, math, sys
text = open(sys.argv[1], "rb").read()
count = collections.Counter(text)
unigram = -sum(c / len(text) * math.log(c / len(text)) for c in count.values())
bar = unigram - 0.15
def losses(path):
    rows = [json.loads(l) for l in open(path) if '"lm_loss"' in l]
    return [r["lm_loss"] for r in rows], [r["load_balancing_loss"] for r in rows]
lm, lb = losses(sys.argv[2])
ctl, _ = losses(sys.argv[3])
last, last_ctl = sum(lm[-10:]) / 10, sum(ctl[-10:]) / 10
print(f"byte unigram entropy {unigram:.4f}, bar {bar:.4f}; first lm loss {lm[0]:.4f} (ln 256 = 5.545), mean of the last "
      f"10: {last:.4f} with the experts, {last_ctl:.4f} with them silenced (the control)")
bad = [x for x in lb if not 0.5 < x < 4]
if bad:
    sys.exit(f"load_balancing_loss out of range: {bad[:3]}")
if not 5.2 < lm[0] < 5.9:
    sys.exit("the first loss is not near ln 256")
if last > bar:
    sys.exit(f"the MoE model's loss {last:.4f} is not below the bar {bar:.4f}")
if last_ctl <= bar:
    sys.exit(f"the control without working experts reached {last_ctl:.4f}, below the bar {bar:.4f}: the bar passes it")
EOF
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
