#!/bin/bash
# mgraph-plan end to end: usage errors exit 2 with the reason, --json carries the keys
# scripts depend on (and agrees with itself), --search ranks fitting plans by step time.
# Usage: cli.sh MGRAPH_PLAN WORKDIR
set -u
PLAN=$1
W=$2
rm -rf "$W" && mkdir -p "$W"
fail=0
no() { echo "FAIL: $*"; fail=1; }

# expect CODE PATTERN ARGS...: exit status CODE and PATTERN on stderr
expect() {
    local code=$1 pat=$2
    shift 2
    "$PLAN" "$@" >"$W/out" 2>"$W/err"
    local rc=$?
    [ $rc -eq "$code" ] || no "exit $rc (want $code): $*: $(cat "$W/err")"
    grep -q -- "$pat" "$W/err" || no "stderr lacks '$pat': $*: $(cat "$W/err")"
    if [ "$code" -ne 0 ] && [ -s "$W/out" ]; then no "partial output on stdout: $*"; fi
}

M=(--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --micro-batch-size 2 --global-batch-size 16)
"$PLAN" --help >"$W/help" || no "--help"
grep -q -- "--cluster" "$W/help" || no "--help lacks --cluster"
expect 2 "--cluster is required" "${M[@]}"
expect 2 "neither a preset" --cluster no-such-cluster "${M[@]}"
printf 'gpus-per-node 8\nhbm-gib lots\n' >"$W/bad.cluster"
expect 2 "bad.cluster:2: hbm-gib must be a number" --cluster "$W/bad.cluster" "${M[@]}"
printf 'gpus-per-node 8\n' >"$W/short.cluster"
expect 2 "missing key 'peak-tflops-fp32'" --cluster "$W/short.cluster" "${M[@]}"
expect 2 "unknown flag '--bogus'" --cluster dgx-a100-80gb --bogus "${M[@]}"
expect 2 "mgraph-plan: error: --micro-batch-size must be >= 1" --cluster dgx-a100-80gb --num-layers 4 --micro-batch-size 0
expect 2 "not divisible by tensor-parallel size 3" --cluster h200 "${M[@]}" --tensor-model-parallel-size 3 --world-size 3
expect 2 "not a multiple of" --cluster h200 "${M[@]}" --tensor-model-parallel-size 2 --world-size 3
expect 2 "--top must be" --cluster h200 "${M[@]}" --search --top 0
expect 2 "--search-keep: unknown" --cluster h200 "${M[@]}" --search --search-keep bogus
expect 2 "--attention-backend must be" --cluster h200 "${M[@]}" --attention-backend magic
expect 2 "needs a value" --cluster
expect 2 "not divisible by --pipeline-model-parallel-size 3" --cluster h200 "${M[@]}" --pipeline-model-parallel-size 3 --world-size 3
# Megatron's uneven pipeline: the first / last stage's layers (4 layers: 1, 2, 1), and a split that does not add up
"$PLAN" --cluster h200 --json "${M[@]}" --pipeline-model-parallel-size 3 --world-size 3 \
    --decoder-first-pipeline-num-layers 1 --decoder-last-pipeline-num-layers 1 >"$W/uneven.json" 2>"$W/err" ||
    no "uneven pipeline: $(cat "$W/err")"
grep -q '"decoder_first_pipeline_num_layers": 1' "$W/uneven.json" || no "uneven pipeline: JSON lacks the split"
expect 2 "does not split as 3 on the first pipeline stage" --cluster h200 "${M[@]}" --pipeline-model-parallel-size 3 \
    --world-size 3 --decoder-first-pipeline-num-layers 3

# the repository's cluster file of this machine (planner/clusters) stays readable
"$PLAN" --cluster "$(dirname "$0")/../../planner/clusters/cpu-2core.cluster" "${M[@]}" >"$W/cpu" 2>"$W/err" ||
    no "planner/clusters/cpu-2core.cluster: $(cat "$W/err")"
grep -q "cpu-2core (fp32)" "$W/cpu" || no "the CPU cluster file's name and precision"

# the repository's cluster files of today's fabrics are the presets written out
for f in "$(dirname "$0")"/../../planner/clusters/*.cluster; do
    n=$(basename "$f" .cluster)
    [ "$n" = cpu-2core ] && continue
    "$PLAN" --cluster "$f" --print-cluster >"$W/file.txt" 2>"$W/err" || no "$f: $(cat "$W/err")"
    "$PLAN" --cluster "$n" --print-cluster >"$W/preset.txt" 2>"$W/err" || no "preset $n: $(cat "$W/err")"
    cmp -s "$W/file.txt" "$W/preset.txt" || no "planner/clusters/$n.cluster differs from the preset $n"
done

# one plan as JSON: the keys, and the numbers agree with each other
"$PLAN" --cluster dgx-a100-80gb --json "${M[@]}" --world-size 4 --tensor-model-parallel-size 2 \
    --use-distributed-optimizer >"$W/one.json" 2>"$W/err" || no "--json: $(cat "$W/err")"
python3 - "$W/one.json" <<'PY' || fail=1
import json, sys
j = json.load(open(sys.argv[1]))
for k in ("step_time_s", "tflops_per_gpu", "mfu", "bubble_fraction", "memory_per_gpu_gib"):
    assert isinstance(j[k], (int, float)), k
assert j["step_time_s"] > 0 and 0 < j["mfu"] < 1 and j["bubble_fraction"] == 0
tf = j["model_flops_per_step"] / (j["step_time_s"] * 4) / 1e12
assert abs(tf - j["tflops_per_gpu"]) < 1e-6 * tf, (tf, j["tflops_per_gpu"])
assert abs(j["mfu"] - j["tflops_per_gpu"] / 312) < 1e-9
m = j["memory_gib"]
parts = m["weights"] + m["gradients"] + m["optimizer"] + m["activations"] + m["reserved"]
assert abs(parts - j["memory_per_gpu_gib"]) < 1e-6, (parts, j["memory_per_gpu_gib"])
assert j["plan"]["tp"] == 2 and j["plan"]["dp"] == 2 and j["communication"]["tp"]["link"] == "intra_node"
assert j["communication"]["dp"]["bytes"] > 0 and j["communication"]["tp"]["bytes"] > 0
for g in j["communication"].values():
    assert abs(g["exposed_s"] + g["hidden_s"] - g["time_s"]) < 1e-9 and 0 <= g["exposed_s"] <= g["time_s"] + 1e-12, g
assert abs(max(j["memory_per_stage_gib"]) - j["memory_per_gpu_gib"]) < 1e-3 and j["memory_stage_holds"]
PY

# Megatron's flags the planner prices: each changes what it should, bad values exit 2
L=(--num-layers 8 --hidden-size 512 --num-attention-heads 8 --seq-length 256 --micro-batch-size 1 --global-batch-size 16
   --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --world-size 8 --sequence-parallel --use-distributed-optimizer)
"$PLAN" --cluster dgx-h100 --json "${L[@]}" --pipeline-model-parallel-layout "Et*3|t*2|t*2|tL" >"$W/lay.json" 2>"$W/err" ||
    no "layout: $(cat "$W/err")"
grep -q '"pipeline_model_parallel_layout": "Et\*3|t\*2|t\*2|tL"' "$W/lay.json" || no "layout not in the JSON"
python3 -c "import json,sys; j=json.load(open(sys.argv[1])); assert j['plan']['virtual_stages'] == 2, j['plan']" "$W/lay.json" ||
    no "layout: 4 stages on pp 2 are 2 virtual stages"
expect 2 "invalid layer character" --cluster dgx-h100 "${L[@]}" --pipeline-model-parallel-layout "Et*3|t*2|t*2|tX"
expect 2 "drop the virtual-stage flag" --cluster dgx-h100 "${L[@]}" --pipeline-model-parallel-layout "Et*3|t*2|t*2|tL" \
    --num-virtual-stages-per-pipeline-rank 2
expect 2 "--data-parallel-sharding-strategy must be" --cluster dgx-h100 "${L[@]}" --use-megatron-fsdp \
    --data-parallel-sharding-strategy everything
expect 2 "--cp-comm-type: the planner prices" --cluster dgx-h100 "${L[@]}" --cp-comm-type a2a
expect 2 "--num-layers must be in 1..16384" --cluster dgx-h100 --num-layers 1000000 --hidden-size 64 --num-attention-heads 4
n=0
for f in "" "--tp-comm-overlap" "--tp-comm-overlap --overlap-grad-reduce --overlap-param-gather" "--use-torch-fsdp2" \
         "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split --num-layers 6"; do
    n=$((n + 1))
    # shellcheck disable=SC2086
    "$PLAN" --cluster dgx-h100 --json "${L[@]}" $f >"$W/ov$n.json" 2>"$W/err" || no "$f: $(cat "$W/err")"
done
python3 - "$W"/ov1.json "$W"/ov2.json "$W"/ov3.json "$W"/ov4.json "$W"/ov5.json <<'PY' || fail=1
import json, sys
base, tpo, allo, fsdp, acc = (json.load(open(f)) for f in sys.argv[1:6])
ex = lambda j, g: j["communication"][g]["exposed_s"]
assert ex(tpo, "tp") < ex(base, "tp") and tpo["step_time_s"] < base["step_time_s"]
assert ex(allo, "dp") < ex(tpo, "dp")
assert fsdp["plan"]["data_parallel_sharding"] == "optim_grads_params" and fsdp["memory_gib"]["weights"] < base["memory_gib"]["weights"]
assert acc["plan"]["account_for_embedding_in_pipeline_split"] and acc["plan"]["account_for_loss_in_pipeline_split"]
PY

# pipeline: the bubble is at most (pp-1)/(v M) (equal stages' figure; the first stage holds
# the embedding, the last the output layer) whether the partitioner builds pp or it is estimated
"$PLAN" --cluster dgx-a100-80gb --json "${M[@]}" --world-size 4 --pipeline-model-parallel-size 2 \
    --num-layers-per-virtual-pipeline-stage 1 >"$W/pp.json" 2>"$W/err" || no "pp --json: $(cat "$W/err")"
python3 - "$W/pp.json" <<'PY' || fail=1
import json, sys
j = json.load(open(sys.argv[1]))
M = 16 // (2 * 2)
assert j["plan"]["virtual_stages"] == 2 and j["micro_batches_per_pipeline"] == M
assert 0.5 / (2 * M) < j["bubble_fraction"] <= 1 / (2 * M) + 1e-12, j["bubble_fraction"]
assert j["communication"]["pp"]["bytes"] > 0
PY

# Megatron's --fp16 reduces the gradients in 16 bits (bf16 in fp32 main gradients) unless
# --accumulate-allreduce-grads-in-fp32: half the data-parallel bytes, the same memory
n=0
for pr in "--bf16" "--fp16" "--fp16 --accumulate-allreduce-grads-in-fp32"; do
    n=$((n + 1))
    "$PLAN" --cluster dgx-a100-80gb --json "${M[@]}" --world-size 4 $pr >"$W/prec$n.json" 2>"$W/err" ||
        no "$pr: $(cat "$W/err")"
done
python3 - "$W/prec1.json" "$W/prec2.json" "$W/prec3.json" <<'PY' || fail=1
import json, sys
bf, fp, fp32 = (json.load(open(f)) for f in sys.argv[1:4])
assert (bf["plan"]["gradient_reduce_bits"], fp["plan"]["gradient_reduce_bits"], fp32["plan"]["gradient_reduce_bits"]) == (32, 16, 32)
d = lambda j: j["communication"]["dp"]["bytes"]
assert abs(d(fp) / d(bf) - 0.5) < 1e-9 and d(fp32) == d(bf), (d(bf), d(fp), d(fp32))
assert fp["memory_per_gpu_gib"] == bf["memory_per_gpu_gib"]
PY

# the precision flags reach the shared checks too: the loss-scale flags need --fp16 (there
# they pass), --fp16 with --bf16 is refused; the precision-aware optimizer's bf16 moments
# take 4 of the 12 optimizer bytes per parameter (fp32 main parameter 4, moments 2 + 2),
# its bf16 main gradients 2 of 4
"$PLAN" --cluster dgx-a100-80gb --json "${M[@]}" --world-size 4 --fp16 --loss-scale 1024 >/dev/null 2>"$W/err" ||
    no "--fp16 --loss-scale: $(cat "$W/err")"
"$PLAN" --cluster dgx-a100-80gb --json "${M[@]}" --world-size 4 --fp16 --initial-loss-scale 65536 --hysteresis 1 \
    >/dev/null 2>"$W/err" || no "--fp16 --initial-loss-scale: $(cat "$W/err")"
expect 2 "--loss-scale needs --fp16" --cluster dgx-a100-80gb "${M[@]}" --bf16 --loss-scale 1024
expect 2 "--fp16 and --bf16 cannot both be given" --cluster dgx-a100-80gb "${M[@]}" --bf16 --fp16
expect 2 "--grad-reduce-in-bf16 needs --bf16" --cluster dgx-a100-80gb "${M[@]}" --fp16 --grad-reduce-in-bf16
D=(--cluster dgx-a100-80gb --json "${M[@]}" --world-size 4 --bf16 --use-distributed-optimizer)
"$PLAN" "${D[@]}" >"$W/pao0.json" 2>"$W/err" || no "distopt: $(cat "$W/err")"
"$PLAN" "${D[@]}" --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 --main-grads-dtype bf16 \
    >"$W/pao1.json" 2>"$W/err" || no "precision-aware: $(cat "$W/err")"
python3 - "$W/pao0.json" "$W/pao1.json" <<'PY' || fail=1
import json, sys
a, b = (json.load(open(f))["memory_gib"] for f in sys.argv[1:3])
assert abs(b["optimizer"] / a["optimizer"] - 8 / 12) < 1e-6, (a, b)
assert abs(b["gradients"] / a["gradients"] - 0.5) < 1e-6, (a, b)
assert b["weights"] == a["weights"], (a, b)
PY

# the text report names every part the issue asks for
"$PLAN" --cluster h200 "${M[@]}" --world-size 2 >"$W/text" 2>"$W/err" || no "text: $(cat "$W/err")"
for w in "step time" "TFLOP/s/GPU" "MFU" "pipeline bubble" "memory per GPU" "weights" "gradients" "optimizer" \
         "activations" "communication per step"; do
    grep -q "$w" "$W/text" || no "text report lacks '$w'"
done

# search: ranked by step time, every plan fits, the world is covered
"$PLAN" --cluster dgx-a100-80gb --json --search --world-size 8 --top 5 "${M[@]}" --global-batch-size 32 \
    >"$W/search.json" 2>"$W/err" || no "--search: $(cat "$W/err")"
python3 - "$W/search.json" <<'PY' || fail=1
import json, sys
j = json.load(open(sys.argv[1]))
p = j["plans"]
assert 1 <= len(p) <= 5 and j["tried"] >= len(p)
t = [x["step_time_s"] for x in p]
assert t == sorted(t), t
for x in p:
    pl = x["plan"]
    assert x["fits"] and pl["tp"] * pl["pp"] * pl["cp"] * pl["dp"] == 8
PY
exit $fail
