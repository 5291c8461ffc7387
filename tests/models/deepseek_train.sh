#!/usr/bin/env bash
# A DeepSeek-V3-like model learns Tiny Shakespeare through mgraph-run: multi-latent
# attention (q and k/v latents, YaRN), a dense first layer then an MoE layer of 8 experts
# with DeepSeek-V3's router (sigmoid scores, top-2 of 2 of 4 groups, scaling 2.5, the
# expert bias stepped by the routed counts, seq_aux_loss) and a shared expert, and one
# multi-token prediction layer (an MoE layer too). Over 100 iterations the mean lm loss of
# the last 10 must be at least 0.15 nats under the text's byte unigram entropy (what a
# model that ignores the context can reach at best), and so must the mean mtp_1 loss
# (the token after next, given the next one); the control, the same model and schedule
# on the same bytes shuffled (no context left to learn), must NOT pass that bar with
# either loss. The log line must carry 'mtp_1 loss' as Megatron prints it, and the
# checkpoint the MTP layer.
#   deepseek_train.sh MGRAPH_RUN TINY_SHAKESPEARE WORK_DIR
set -u
RUN=$1 TEXT=$2 WORK=$3
[ -f "$TEXT" ] || { echo "FAIL: no Tiny Shakespeare at $TEXT"; exit 1; }
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
python3 - "$TEXT" shuffled.txt << 'PY' || fail "could not write the shuffled text"
import random, sys
b = bytearray(open(sys.argv[1], "rb").read())
random.Random(1234).shuffle(b)
open(sys.argv[2], "wb").write(bytes(b))
PY
MODEL=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64
       --normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear
       --untie-embeddings-and-output-weights --multi-latent-attention --q-lora-rank 32 --kv-lora-rank 24
       --qk-head-dim 16 --qk-pos-emb-head-dim 8 --v-head-dim 16 --qk-layernorm --rotary-scaling-factor 4
       --mscale-all-dim 1 --num-experts 8 --moe-ffn-hidden-size 64 --moe-shared-expert-intermediate-size 64
       --moe-layer-freq '([0]+[1])' --moe-router-topk 2 --moe-router-score-function sigmoid
       --moe-router-enable-expert-bias --moe-router-bias-update-rate 1e-3 --moe-router-num-groups 4
       --moe-router-group-topk 2 --moe-router-topk-scaling-factor 2.5 --moe-router-load-balancing-type seq_aux_loss
       --moe-aux-loss-coeff 1e-3 --mtp-num-layers 1 --mtp-loss-scaling-factor 0.3)
TRAIN=(--micro-batch-size 4 --global-batch-size 8 --train-iters 100 --lr 1e-2 --lr-warmup-iters 5
       --log-interval 10 --eval-interval 0 --eval-iters 0 --seed 5 --cpu-workers 1)
"$RUN" "${MODEL[@]}" "${TRAIN[@]}" --text-file "$TEXT" --metrics-file m.jsonl --save ck > run.txt 2>&1 ||
    { cat run.txt; fail "training"; }
grep -E '^ \[[0-9: .-]+\] iteration +100/ +100 .*\| lm loss: [0-9.E+-]+ \| seq_load_balancing_loss: [0-9.]+ \| mtp_1 loss: [0-9.E+-]+ \| loss scale' \
    run.txt > /dev/null || { cat run.txt; fail "the log line lacks 'mtp_1 loss' after the MoE loss"; }
"$RUN" "${MODEL[@]}" "${TRAIN[@]}" --text-file shuffled.txt --metrics-file control.jsonl > control.txt 2>&1 ||
    { cat control.txt; fail "the control run"; }
python3 - "$TEXT" m.jsonl control.jsonl ck << 'PY' || fail "the loss bar (or its control)"
import collections, json, math, os, sys
text = open(sys.argv[1], "rb").read()
count = collections.Counter(text)
unigram = -sum(c / len(text) * math.log(c / len(text)) for c in count.values())
bar = unigram - 0.15
def losses(path):
    rows = [json.loads(l) for l in open(path) if '"lm_loss"' in l]
    if len(rows) != 100 or any("mtp_1_loss" not in r for r in rows):
        sys.exit(f"{path}: want lm_loss and mtp_1_loss in 100 records")
    return [r["lm_loss"] for r in rows], [r["mtp_1_loss"] for r in rows]
lm, mtp = losses(sys.argv[2])
clm, cmtp = losses(sys.argv[3])
m = lambda v: sum(v[-10:]) / 10
print(f"byte unigram entropy {unigram:.4f}, bar {bar:.4f}; first lm / mtp_1 loss {lm[0]:.4f} / {mtp[0]:.4f}; mean of the "
      f"last 10: lm {m(lm):.4f}, mtp_1 {m(mtp):.4f}; control (shuffled bytes): lm {m(clm):.4f}, mtp_1 {m(cmtp):.4f}")
if not (5.2 < lm[0] < 5.9 and 5.2 < mtp[0] < 5.9):
    sys.exit("the first losses are not near ln 256")
if m(lm) > bar or m(mtp) > bar:
    sys.exit("the model did not learn below the bar")
if m(clm) <= bar or m(cmtp) <= bar:
    sys.exit("the control on shuffled bytes passed the bar: the bar proves nothing")
idx = open(os.path.join(sys.argv[4], "iter_0000100", "index.json")).read()
for want in ('"mtp_num_layers": 1', "model.layers.2.eh_proj.weight", "model.layers.2.mlp.router.expert_bias"):
    if want not in idx:
        sys.exit(f"the checkpoint lacks {want}")
PY
echo "ok: the DeepSeek-V3-like model with MTP learns; the shuffled control does not"
