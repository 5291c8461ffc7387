#!/usr/bin/env bash
# Megatron's logging that needs counting (issue 41 item 4) and llm.c's samples (item 3):
#  1. report_memory: "[Rank R] (after N iterations) memory (MB) | allocated: ... | max
#     allocated: ... | reserved: ... | max reserved: ..." at the first log line and the
#     next, once each, on every data-parallel group's first rank only (tp 2: ranks 0 and
#     1; dp 2: rank 0); the allocated bytes are the memory plan's (persistent + one
#     micro-batch's activations at least, + every micro-batch copy at most), reserved >=
#     allocated, peaks >= current.
#  2. --log-num-zeros-in-grad: "num zeros: N |" after the grad norm, num_zeros in the
#     metrics; an untied embedding's unused rows make it large; tp 2 + SP and dp 2 with the
#     distributed optimizer count what the serial run counts (2 + 0.01%); absent without
#     the flag.
#  3. --log-memory-to-tensorboard and num-zeros in TensorBoard (the tensorboard package):
#     mem-allocated-bytes is the report's allocated, num-zeros the metrics' count.
#  4. --sample-interval: rank 0 prints a greedy sample at every Nth iteration, which is
#     mgraph-generate's greedy text from the checkpoint saved at that iteration; bad
#     uses exit 2 (pp 2, tp 2 x dp 2, --sample-prompt alone, a negative interval); under tp 2 + SP
#     the samples are the serial run's, byte for byte; a model with multi-latent
#     attention, MoE and multi-token prediction samples mgraph-generate's text too.
#   logging.sh MGRAPH_RUN MGRAPH_GENERATE MPIEXEC TEXT WORK_DIR
set -u
RUN=$1 GEN=$2 MPI=$3 TEXT=$4 WORK=$5
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
[ -f "$TEXT" ] || fail "no corpus $TEXT"
source "$(dirname "$0")/metrics_lib.sh"
SUPPORT=$(cd "$(dirname "$0")/../support" && pwd)
BASE=(--text-file "$TEXT" --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --micro-batch-size 2
      --global-batch-size 8 --train-iters 4 --eval-iters 0 --log-interval 2 --lr 3e-3 --lr-warmup-iters 0
      --adam-eps 1e-5 --cpu-workers 1 --untie-embeddings-and-output-weights)

# ---- 1 and 2: serial ------------------------------------------------------------------------------
timeout 120 "$RUN" "${BASE[@]}" --log-num-zeros-in-grad --metrics-file serial.jsonl > serial.txt 2>&1 ||
    { cat serial.txt; fail "serial run"; }
memory_lines() { # FILE RANKS...: the two reports, once each, of exactly these ranks; checks the numbers
    local f=$1
    shift
    python3 - "$f" "$@" <<'PY' || return 1
import re, sys
text = open(sys.argv[1]).read()
ranks = sorted(int(r) for r in sys.argv[2:])
pat = (r"^\[Rank (\d+)\] \(after (\d+) iterations\) memory \(MB\) \| allocated: ([0-9.]+) \| max allocated: ([0-9.]+) "
       r"\| reserved: ([0-9.]+) \| max reserved: ([0-9.]+)$")
rep = [tuple(map(float, m.groups())) for m in re.finditer(pat, text, re.M)]
seen = sorted((int(r), int(i)) for r, i, *_ in rep)
want = sorted((r, i) for r in ranks for i in (1, 2))
if seen != want:
    sys.exit(f"memory reports of (rank, iteration) {seen}, want {want}")
# the plan's figures, from rank 0's start-up line (MiB)
m = re.search(r"rank 0: .*memory: persistent ([0-9.]+) MiB .* activations ([0-9.]+) MiB per micro-batch in flight .*"
              r"\+ ([0-9.]+) MiB per step .* inputs ([0-9.]+) MiB per micro-batch", text)
if not m:
    sys.exit("no memory line of rank 0")
pers, act, step, inp = map(float, m.groups())
lo, hi = pers + act + step + inp - 0.03, pers + 4 * (act + inp) + step + 0.03  # (4 micro-batches, 2 decimals each)
for r, i, alloc, maxa, res, maxr in rep:
    print(f"  rank {r:.0f} after {i:.0f}: allocated {alloc} MB, max {maxa}, reserved {res}, max {maxr} "
          f"(rank 0's plan: persistent {pers} + activations {act} + step {step} + inputs {inp} MiB)")
    if not (res >= alloc and maxa >= alloc and maxr >= res):
        sys.exit("reserved < allocated, or a peak below its current value")
    if r == 0 and not lo <= alloc <= hi:
        sys.exit(f"rank 0 allocated {alloc} MB, outside the plan's [{lo:.2f}, {hi:.2f}]")
PY
}
memory_lines serial.txt 0 || { cat serial.txt; fail "serial memory report"; }
grep -q "grad norm: [0-9.]* | num zeros: [0-9]* | number of skipped" serial.txt ||
    { cat serial.txt; fail "no 'num zeros: N |' after the grad norm"; }
[ "$(column num_zeros serial.jsonl | wc -l)" = 4 ] || fail "num_zeros not in every metrics record"
for z in $(column num_zeros serial.jsonl); do
    [ "$z" -ge 3000 ] || fail "num zeros $z: the untied embedding's unused rows alone are more"
done
timeout 120 "$RUN" "${BASE[@]}" > plain.txt 2>&1 || { cat plain.txt; fail "run without the flag"; }
grep -q "num zeros" plain.txt && fail "num zeros logged without --log-num-zeros-in-grad"
grep -q '"num_zeros"' serial.jsonl || fail "no num_zeros in the metrics"

# ---- 1 and 2 under plans -----------------------------------------------------------------------------
for plan in "--tensor-model-parallel-size 2 --sequence-parallel:0 1" "--use-distributed-optimizer:0"; do
    flags=${plan%%:*} ranks=${plan#*:}
    # shellcheck disable=SC2086 # several words
    timeout 300 $MPI -np 2 "$RUN" "${BASE[@]}" --log-num-zeros-in-grad $flags --metrics-file parallel.jsonl \
        > parallel.txt 2>&1 || { cat parallel.txt; fail "2 ranks with '$flags'"; }
    echo "2 ranks $flags:"
    # shellcheck disable=SC2086
    memory_lines parallel.txt $ranks || { cat parallel.txt; fail "memory report under '$flags'"; }
    paste <(column num_zeros parallel.jsonl) <(column num_zeros serial.jsonl) | awk -F'\t' '
        { n++; d = $1 - $2; d = d < 0 ? -d : d; printf "  iteration %d: %d zeros, serial %d\n", n, $1, $2;
          if (d > 2 + 1e-4 * $2) bad++ } END { exit (n != 4 || bad > 0) }' || fail "num zeros of '$flags' differ from serial"
done

# ---- 3. TensorBoard ----------------------------------------------------------------------------------
timeout 120 "$RUN" "${BASE[@]}" --log-num-zeros-in-grad --log-memory-to-tensorboard --tensorboard-dir tb \
    --tensorboard-log-interval 1 --metrics-file tb.jsonl > tb.txt 2>&1 || { cat tb.txt; fail "TensorBoard run"; }
python3 - "$SUPPORT" tb tb.txt tb.jsonl <<'PY'
import json, re, sys
sys.path.insert(0, sys.argv[1])
import reference  # the pinned package, or a loud skip (77; a failure under CI)
reference.require("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[2], size_guidance={"scalars": 0})
acc.Reload()
tags = acc.Tags()["scalars"]
for t in ("mem-reserved-bytes", "mem-allocated-bytes", "mem-max-allocated-bytes", "mem-allocated-count", "num-zeros",
          "num-zeros vs samples"):
    if t not in tags or len(acc.Scalars(t)) != 4:
        sys.exit(f"tag {t}: {len(acc.Scalars(t)) if t in tags else 'missing'} (want 4 scalars)")
report = float(re.search(r"\(after 1 iterations\) memory \(MB\) \| allocated: ([0-9.]+)", open(sys.argv[3]).read())[1])
alloc = acc.Scalars("mem-allocated-bytes")[0].value / 2**20
if abs(alloc - report) > 0.006:
    sys.exit(f"mem-allocated-bytes {alloc:.4f} MB, the report says {report}")
if not acc.Scalars("mem-reserved-bytes")[0].value >= acc.Scalars("mem-allocated-bytes")[0].value:
    sys.exit("reserved < allocated")
if not acc.Scalars("mem-allocated-count")[0].value >= 100:
    sys.exit(f"{acc.Scalars('mem-allocated-count')[0].value} buffers")
zeros = [json.loads(l)["num_zeros"] for l in open(sys.argv[4])]
got = [s.value for s in acc.Scalars("num-zeros")]
if got != zeros:
    sys.exit(f"num-zeros {got}, metrics {zeros}")
print(f"  TensorBoard: mem-allocated-bytes {alloc:.3f} MB (report {report}), num-zeros {got}")
PY
rc=$?
[ $rc = 77 ] && exit 77
[ $rc = 0 ] || fail "TensorBoard tags"

# ---- 4. samples ----------------------------------------------------------------------------------------
timeout 120 "$RUN" "${BASE[@]}" --sample-interval 2 --sample-prompt "ROMEO:" --save ck --save-interval 2 \
    > sample.txt 2>&1 || { cat sample.txt; fail "run with samples"; }
[ "$(grep -c '^sample at iteration' sample.txt)" = 2 ] || { cat sample.txt; fail "want 2 samples"; }
for it in 2 4; do
    got=$(grep "^sample at iteration $it " sample.txt | sed 's/^sample at iteration [0-9]* ([^)]*): //')
    want=$(timeout 120 "$GEN" --load "ck/iter_$(printf %07d $it)" --prompt "ROMEO:" --max-new-tokens 10 --greedy 2>gen.err) ||
        { cat gen.err; fail "mgraph-generate on iteration $it's checkpoint"; }
    echo "  iteration $it: sample '$got', mgraph-generate '$want'"
    [ "$got" = "$want" ] || fail "the sample at iteration $it is not mgraph-generate's greedy text"
done
timeout 300 $MPI -np 2 "$RUN" "${BASE[@]}" --sample-interval 2 --sample-prompt "ROMEO:" > dp.txt 2>&1 || { cat dp.txt; fail "dp 2 with samples"; }
[ "$(grep -c '^sample at iteration' dp.txt)" = 2 ] || { cat dp.txt; fail "dp 2: want 2 samples, from rank 0 only"; }
refused() { # MESSAGE NP ARGS...: exit 2 naming MESSAGE, nothing trained
    local msg=$1 np=$2
    shift 2
    timeout 300 $MPI -np "$np" "$RUN" "${BASE[@]}" "$@" > bad.txt 2>&1
    local rc=$?
    [ $rc = 2 ] && grep -q -- "$msg" bad.txt && ! grep -q "iteration  *1/" bad.txt ||
        { cat bad.txt; fail "'$*' (exit $rc): want exit 2 naming '$msg'"; }
}
# tensor parallelism (+ SP): the ranks decode together on their blocks; the samples are the serial run's, byte for byte
timeout 300 $MPI -np 2 "$RUN" "${BASE[@]}" --tensor-model-parallel-size 2 --sequence-parallel --sample-interval 2 \
    --sample-prompt "ROMEO:" > tp.txt 2>&1 || { cat tp.txt; fail "tp 2 with samples"; }
[ "$(grep -ac '^sample at iteration' tp.txt)" = 2 ] || { cat tp.txt; fail "tp 2: want 2 samples, from rank 0 only"; }
for it in 2 4; do
    a=$(grep -a "^sample at iteration $it " tp.txt | sed 's/^sample at iteration [0-9]* ([^)]*): //')
    b=$(grep -a "^sample at iteration $it " sample.txt | sed 's/^sample at iteration [0-9]* ([^)]*): //')
    echo "  tp 2 + SP iteration $it: sample '$a', serial '$b'"
    [ -n "$a" ] && [ "$a" = "$b" ] || fail "tp 2: the sample at iteration $it is not the serial run's"
done
refused "which this plan shards otherwise (tp 1, pp 2" 2 --sample-interval 2 --sample-prompt hi --pipeline-model-parallel-size 2
refused "which this plan shards otherwise (tp 2, pp 1, cp 1, ep 1, 4 ranks" 4 --sample-interval 2 --sample-prompt hi \
    --tensor-model-parallel-size 2
refused "needs --sample-interval" 1 --sample-prompt hello
refused "no end-of-document token to start from" 1 --sample-interval 2 # (the byte-level text tokenizer)
refused "must be >= 0" 1 --sample-interval -1
# a DeepSeek-V3-style model (multi-latent attention, a dense layer then a MoE one, one
# multi-token-prediction layer, which sampling ignores): the sample is mgraph-generate's text too
timeout 120 "$RUN" "${BASE[@]}" --train-iters 2 --normalization RMSNorm --position-embedding-type rope --swiglu \
    --disable-bias-linear --multi-latent-attention --q-lora-rank 16 --kv-lora-rank 12 --qk-head-dim 8 \
    --qk-pos-emb-head-dim 4 --v-head-dim 8 --num-experts 4 --moe-router-topk 2 --moe-layer-freq "([0]+[1])" \
    --mtp-num-layers 1 --sample-interval 2 --sample-prompt "ROMEO:" --save ck_moe --save-interval 2 > moe.txt 2>&1 ||
    { cat moe.txt; fail "MLA + MoE + MTP run with samples"; }
got=$(grep -a "^sample at iteration 2 " moe.txt | sed 's/^sample at iteration [0-9]* ([^)]*): //')
want=$(timeout 120 "$GEN" --load ck_moe/iter_0000002 --prompt "ROMEO:" --max-new-tokens 10 --greedy 2>gen.err) ||
    { cat gen.err; fail "mgraph-generate on the MLA + MoE + MTP checkpoint"; }
echo "  MLA + MoE + MTP: sample '$got', mgraph-generate '$want'"
[ -n "$got" ] && [ "$got" = "$want" ] || fail "the MLA + MoE + MTP sample is not mgraph-generate's greedy text"
echo "PASS"
