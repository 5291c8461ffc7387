#!/usr/bin/env bash
# DeepSeek-V3's flags through mgraph-run: --moe-layer-freq's spellings (Megatron's list
# patterns and an integer) give the MoE layers they say (read from the checkpoint's model
# flags), bad patterns and Megatron's refused combinations exit 2 naming the flag, the
# checkpoint keeps the router, shared experts, MLA and RoPE flags (a run that differs is
# refused naming them), and training logs Megatron's seq_load_balancing_loss while the
# expert biases move.
#   deepseek_flags.sh MGRAPH_RUN TEXT_FILE WORK_DIR
set -u
RUN=$1 TEXT=$2 WORK=$3
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
head -c 30000 "$TEXT" > t.txt
fail() { echo "FAIL: $*"; exit 1; }
BASE=(--text-file t.txt --num-layers 5 --hidden-size 32 --num-attention-heads 4 --seq-length 16
      --micro-batch-size 2 --global-batch-size 4 --train-iters 2 --normalization RMSNorm --position-embedding-type rope
      --swiglu --disable-bias-linear --num-experts 8 --moe-ffn-hidden-size 16 --moe-router-topk 2 --cpu-workers 1
      --eval-iters 0 --moe-router-pre-softmax)
layers() { python3 -c "import json,sys; print(json.load(open('$1/iter_0000002/index.json'))['meta']['model'].get('moe_layers', 'freq'))"; }

# 1. --moe-layer-freq's spellings
for f in "([0]*3+[1]*2)" "[0,0,0,1,1]" "[0]*3+[1]*2" "3*[0]+2*[1]" "([0]+[0]*2)+([1]*1)*2"; do
    rm -rf ck
    "$RUN" "${BASE[@]}" --moe-layer-freq "$f" --save ck > out.txt 2>&1 || { cat out.txt; fail "--moe-layer-freq '$f'"; }
    [ "$(layers ck)" = 00011 ] || fail "--moe-layer-freq '$f' gave layers $(layers ck), want 00011"
done
rm -rf ck
"$RUN" "${BASE[@]}" --moe-layer-freq 2 --save ck > out.txt 2>&1 || { cat out.txt; fail "--moe-layer-freq 2"; }
python3 -c "import json; m=json.load(open('ck/iter_0000002/index.json'))['meta']['model']; assert m['moe_layer_freq']==2 and 'moe_layers' not in m" ||
    fail "--moe-layer-freq 2 not kept as a frequency"
echo "ok: --moe-layer-freq patterns"
for bad in "[0,2,1,1,1]:entry 1 is 2" "[0]*4:lists 4 layers" "([0]*3+[1]*2:')' expected" "[0]*3+[1]*2x:unexpected text" \
           "0:an integer N >= 1"; do
    f=${bad%%:*} want=${bad#*:}
    "$RUN" "${BASE[@]}" --moe-layer-freq "$f" --dry-run > out.txt 2> err.txt
    [ $? -eq 2 ] && grep -qF -- "--moe-layer-freq" err.txt && grep -qF -- "$want" err.txt || { cat err.txt; fail "'$f' not refused with '$want'"; }
done
echo "ok: bad patterns refused"

# 2. Megatron's rules
for bad in "--moe-router-enable-expert-bias:needs --moe-router-score-function sigmoid" \
           "--moe-router-score-function sqrtsoftplus:sqrtsoftplus is not supported" \
           "--moe-router-force-load-balancing:is not supported: a benchmark switch" \
           "--moe-router-score-function sigmoid --moe-router-num-groups 3 --moe-router-group-topk 1:must divide --num-experts 8" \
           "--moe-router-load-balancing-type sinkhorn:sinkhorn is not supported" \
           "--multi-latent-attention --group-query-attention --num-query-groups 2:exclude each other" \
           "--moe-router-dtype fp64:fp64 is not supported"; do
    f=${bad%%:*} want=${bad#*:}
    # shellcheck disable=SC2086 # flags and values
    "$RUN" "${BASE[@]}" $f --dry-run > out.txt 2> err.txt
    [ $? -eq 2 ] && grep -qF -- "$want" err.txt || { cat err.txt; fail "'$f' not refused with '$want'"; }
done
echo "ok: Megatron's MoE / MLA rules refused by name"

# 3. training and the checkpoint's model flags
DS=(--num-experts 16 --moe-layer-freq "([0]+[1]*4)" --moe-router-score-function sigmoid --moe-router-enable-expert-bias
    --moe-router-bias-update-rate 1e-2 --moe-router-num-groups 4 --moe-router-group-topk 2 --moe-router-topk 4
    --moe-router-topk-scaling-factor 2.5 --moe-shared-expert-intermediate-size 16 --moe-router-load-balancing-type seq_aux_loss
    --moe-aux-loss-coeff 1e-3 --multi-latent-attention --q-lora-rank 16 --kv-lora-rank 8 --qk-head-dim 8
    --qk-pos-emb-head-dim 4 --v-head-dim 6 --qk-layernorm --rotary-scaling-factor 4 --mscale-all-dim 1
    --moe-shared-expert-overlap --moe-router-dtype fp32 --moe-token-dispatcher-type flex)
rm -rf ds
"$RUN" "${BASE[@]}" "${DS[@]}" --save ds --log-interval 1 > train.txt 2>&1 || { cat train.txt; fail "DeepSeek-V3-like training"; }
[ "$(grep -c 'seq_load_balancing_loss: [0-9.]* |' train.txt)" = 2 ] || { cat train.txt; fail "no seq_load_balancing_loss in the log"; }
python3 - <<'PY' || fail "expert biases did not move or are not in the checkpoint"
import json, struct
from array import array
d = "ds/iter_0000002"
blob = open(f"{d}/rank_00000.safetensors", "rb").read()
(n,) = struct.unpack("<Q", blob[:8])
h = json.loads(blob[8:8 + n])
biases = [k for k in h if ".mlp.router.expert_bias" in k]
assert len(biases) == 4, biases
moved = 0
for k in biases:
    a, b = h[k]["data_offsets"]
    v = array("f"); v.frombytes(blob[8 + n + a:8 + n + b])
    assert len(v) == 16 and all(abs(x) <= 0.0200001 for x in v), (k, list(v))
    moved += any(x != 0 for x in v)
assert moved >= 3, f"{moved} of 4 layers' biases moved"
print(f"expert biases after 2 steps of 1e-2: 4 layers, all within +-0.02, {moved} moved")
PY
for change in "--moe-router-topk-scaling-factor 2.0:the router" "--moe-shared-expert-intermediate-size 8:--moe-shared-expert-intermediate-size" \
              "--v-head-dim 4:--multi-latent-attention or its sizes" "--rotary-scaling-factor 8:the RoPE scaling" \
              "--moe-layer-freq ([0]*2+[1]*3):--moe-layer-freq"; do
    f=${change%%:*} want=${change#*:}
    # shellcheck disable=SC2086 # flag and value
    "$RUN" "${BASE[@]}" "${DS[@]}" $f --load ds --train-iters 3 > out.txt 2> err.txt
    [ $? -eq 2 ] && grep -qF -- "$want" err.txt && grep -q "does not match the checkpoint" err.txt ||
        { cat err.txt; fail "--load with '$f' not refused naming '$want'"; }
done
"$RUN" "${BASE[@]}" "${DS[@]}" --load ds --train-iters 3 --override-opt-param-scheduler > out.txt 2>&1 || { cat out.txt; fail "resuming the same model"; }
echo "ok: DeepSeek-V3-like training, its checkpoint's model flags"
