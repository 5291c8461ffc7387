#!/usr/bin/env bash
# mgraph-run --model-lib (include/mgraph/model_lib.h) with a model that is not a GPT
# (tests/tools/model_lib_mlp.c: a residual MLP regressor with its own data and flags):
#   1. serial: trains (the loss falls), evaluates, logs its metric, writes the metrics
#      file, TensorBoard events, the DOT dump and a checkpoint recording its flags;
#   2. tp 2 under mpirun (the layouts the library declares, no shard rules): the serial
#      losses, gradient norms and metric within 1e-5 relative, and the same checkpoint
#      (tests/support/ckpt.py, rtol 1e-5);
#   3. --load continues the checkpoint (same flags), and refuses other library flags;
#   4. a library fed by mgraph-run's GPT data (--text-file), and without data: refused;
#   5. refusals, exit 2 with the reason and nothing written: a file that is not there,
#      one that is not a shared library, another ABI version, no mg_model_lib_open, a GPT
#      model flag, a bad value of the library's flag, a flag of its missing its value.
#   model_lib.sh MGRAPH_RUN LIBDIR TEXT CKPT_PY WORK
set -u
RUN=$1 LIBS=$2 TEXT=$3 CKPT=$4 WORK=$5
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
LIB=$LIBS/libmg_model_lib_mlp.so
M=(--model-lib "$LIB" --features 8 --width 32 --layers 2 --micro-batch-size 4 --global-batch-size 16 --lr 1e-2
   --lr-warmup-iters 1 --lr-decay-iters 8 --train-iters 6 --eval-iters 2 --eval-interval 3 --log-interval 1 --seed 5 --cpu-workers 1)

# 1. serial, every output
"$RUN" "${M[@]}" --metrics-file s.jsonl --save s.ck --tensorboard-dir tb --dump-dot s.dot > s.txt 2>&1 ||
    fail "serial: $(tail -5 s.txt)"
grep -q "residual-mlp (--model-lib .*libmg_model_lib_mlp.so), 1104 parameters" s.txt || fail "serial: no model line: $(grep 'mgraph-run: ' s.txt | head -3)"
[ "$(grep -c '"lm_loss"' s.jsonl)" = 6 ] || fail "serial: metrics lines: $(cat s.jsonl)"
grep -q '"mean_error": ' s.jsonl || fail "serial: the library's metric is not in the metrics file"
grep -q "mean_error: " s.txt || fail "serial: the library's metric is not in the log line"
grep -q '"val_loss"' s.jsonl || fail "serial: no validation"
grep -q "validation loss at iteration 3" s.txt || fail "serial: no validation line"
python3 - s.jsonl <<'EOF' || fail "serial: the loss does not fall"
import json, sys
l = [json.loads(x)["lm_loss"] for x in open(sys.argv[1]) if '"lm_loss"' in x]
assert l[-1] < 0.8 * l[0], l
EOF
grep -q 'mgraph residual-mlp training step, rank 0 of 1' s.dot || fail "serial: DOT title: $(head -3 s.dot)"
ls tb/events.out.tfevents.* > /dev/null 2>&1 || fail "serial: no TensorBoard events"
python3 - s.ck/iter_0000006/index.json <<'EOF' || fail "serial: the checkpoint does not name the model and its flags"
import json, sys
m = json.load(open(sys.argv[1]))["meta"]["model"]
assert m == {"arch": "residual-mlp", "model_lib_args": ["--features", "8", "--width", "32", "--layers", "2"]}, m
EOF

# 2. tp 2 under mpirun equals serial
mpirun -np 2 "$RUN" "${M[@]}" --tensor-model-parallel-size 2 --metrics-file t.jsonl --save t.ck > t.txt 2>&1 ||
    fail "tp 2: $(tail -5 t.txt)"
grep -q "tp 2" t.txt || fail "tp 2: not a tp 2 plan: $(grep 'rank(s)' t.txt)"
python3 - s.jsonl t.jsonl <<'EOF' || fail "tp 2 differs from serial"
import json, sys
def recs(p): return [json.loads(x) for x in open(p)]
a, b = recs(sys.argv[1]), recs(sys.argv[2])
assert len(a) == len(b), (len(a), len(b))
worst = 0
for x, y in zip(a, b):
    for k in ("lm_loss", "grad_norm", "mean_error", "val_loss"):
        if k in x:
            e = abs(x[k] - y[k]) / max(abs(x[k]), 1e-30)
            worst = max(worst, e)
            assert e <= 1e-5, (x["iteration"], k, x[k], y[k])
print(f"tp 2 == serial: worst relative difference {worst:.2e}")
EOF
python3 "$CKPT" compare s.ck t.ck > cmp.txt 2>&1 || fail "tp 2 checkpoint: $(tail -3 cmp.txt)"

# 3. --load continues; other library flags are refused
"$RUN" "${M[@]}" --train-iters 8 --load s.ck --metrics-file l.jsonl > l.txt 2>&1 || fail "--load: $(tail -3 l.txt)"
grep -q "loaded checkpoint from s.ck at iteration 6" l.txt || fail "--load: $(grep -i load l.txt)"
[ "$(grep -c '"lm_loss"' l.jsonl)" = 2 ] || fail "--load: iterations 7 and 8 expected: $(cat l.jsonl)"
"$RUN" "${M[@]}" --width 16 --train-iters 8 --load s.ck > lw.txt 2>&1
[ $? = 2 ] || fail "--load with --width 16: exit $? $(tail -3 lw.txt)"
grep -q 'saved with the model library.s flags \["--features","8","--width","32","--layers","2"\]' lw.txt ||
    fail "--load with --width 16: $(tail -2 lw.txt)"

# 4. mgraph-run's GPT data
G=(--model-lib "$LIBS/libmg_model_lib_gpt_data.so" --features 16 --width 32 --layers 1 --seq-length 16
   --micro-batch-size 2 --global-batch-size 4 --train-iters 3 --eval-iters 0 --log-interval 1 --cpu-workers 1)
"$RUN" "${G[@]}" --text-file "$TEXT" --metrics-file g.jsonl > g.txt 2>&1 || fail "GPT data: $(tail -3 g.txt)"
[ "$(grep -c '"lm_loss"' g.jsonl)" = 3 ] || fail "GPT data: $(cat g.jsonl)"
"$RUN" "${G[@]}" > gn.txt 2>&1
[ $? = 2 ] || fail "no data: exit $?"
grep -q "gives no data source of its own: give --text-file or --data-path" gn.txt ||
    grep -q "this model reads mgraph-run's data" gn.txt || fail "no data: $(tail -2 gn.txt)"

# 5. refusals: exit 2, the reason, nothing written
bad() { # bad NAME EXPECTED-TEXT ARGS...
    local name=$1 want=$2
    shift 2
    "$RUN" "$@" --metrics-file "$name.jsonl" --save "$name.ck" > "$name.txt" 2>&1
    local rc=$?
    [ $rc = 2 ] || fail "$name: exit $rc, not 2: $(tail -3 "$name.txt")"
    grep -q -- "$want" "$name.txt" || fail "$name: no '$want' in: $(tail -3 "$name.txt")"
    ls -a | grep -E "^\.?$name\.(jsonl|ck)" && fail "$name: wrote an output"
    return 0
}
R=(--features 8 --micro-batch-size 4 --global-batch-size 16 --train-iters 2 --cpu-workers 1)
bad missing "cannot load it" --model-lib "$WORK/nothere.so" "${R[@]}"
echo "not a library" > notalib.so
bad notalib "notalib.so: cannot load it" --model-lib "$WORK/notalib.so" "${R[@]}"
bad abi "built for model library ABI 101, this mgraph-run loads ABI 1" --model-lib "$LIBS/libmg_model_lib_bad_abi.so" "${R[@]}"
bad noopen "no symbol mg_model_lib_open" --model-lib "$LIBS/libmg_model_lib_no_open.so" "${R[@]}"
bad gptflag "--num-layers is a flag of mgraph-run's GPT model" --model-lib "$LIB" --num-layers 4 "${R[@]}"
bad badvalue "--width must be an integer in 1..65536 (got 'wide')" --model-lib "$LIB" --width wide "${R[@]}"
bad novalue "--width (of --model-lib .*) needs a value" --model-lib "$LIB" "${R[@]}" --width
bad noarg "--model-lib needs a value" "${R[@]}" --model-lib
# --help names the library's flags
"$RUN" --model-lib "$LIB" --help > help.txt 2>&1 || fail "--help: exit $?"
grep -q -- "--width N  hidden width of each block" help.txt || fail "--help does not list the library's flags"
echo "ok: a non-GPT model library trains, evaluates, logs, saves and resumes; tp 2 == serial; 8 refusals exit 2"
