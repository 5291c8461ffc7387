#!/usr/bin/env bash
# mgraph-run --save / --load end to end.
#   cli.sh MGRAPH_RUN TEXT_FILE WORK_DIR CASE
# CASE:
#   kill9     one rank, dropout on: kill -9 after a save (and at random moments during
#             saves), --load resumes with per-iteration losses bitwise equal to the
#             uninterrupted run
#   plan      the same under tp=2 (2 ranks): save, resume, bitwise equal
#   reshard   save under tp=2 x dp=2 with the distributed optimizer (4 ranks), load under
#             1 rank and under tp=2: the next iterations match within 1e-5
#   pp        save under pp=2 x dp=2 with the distributed optimizer and tied embeddings
#             (4 ranks: each stage writes its own layers, the word embedding shared by the
#             first and last stage once), load under 1 rank and under pp=2 interleaved:
#             the next iterations match within 1e-5; a single-rank checkpoint loads under
#             pp=2 x dp=2; pp=2 resumes its own checkpoint bitwise
#   cp        save under cp=2 x dp=2 with the distributed optimizer (4 ranks: optimizer
#             state cut over dp x cp), load under 1 rank within 1e-5, resume bitwise
#   flags     --finetune, --no-load-optim (Adam's step restarts with the moments), --no-load-rng,
#             --no-save-optim, --no-save-rng, --save-retain, --skip-train, the learning-rate
#             schedule against the checkpoint's (--override- / --use-checkpoint-opt-param-scheduler)
#   bad       model-flag mismatch, corrupt and truncated checkpoints: exit 2 with a message
#   convert   mgraph-convert (5th argument) without transformers: --to-hf then --from-hf gives
#             back the same model (same validation loss, bitwise); bad input exits 2
#   convert_llama  the same for a LLaMA-family GPT (LlamaForCausalLM: GQA, untied, no
#             biases): round trip bitwise, vocabulary padding dropped and restored, model
#             flags checked on load, and what LlamaForCausalLM cannot be refused with exit 2
#   fp8       fp8's delayed-scaling state (scales, amax histories) is saved and restored:
#             resumed bitwise serially and under dp=2 with the distributed optimizer (the
#             state bitwise the serial run's), a dp=2 checkpoint resumed serially (resharding:
#             the state loads whole) within 1e-5; other --fp8-format / history length, a
#             checkpoint without fp8 state, a corrupt one: exit 2; --finetune starts afresh;
#             loaded without fp8 flags the state is left behind
#   moe       a mixture-of-experts GPT (4 experts, top-2, aux and z losses, dropout on):
#             resume bitwise; saved under dp=2, loaded under 1 rank within 1e-5; other
#             --num-experts / --moe-ffn-hidden-size / --moe-layer-freq exit 2 naming the flag
set -u
RUN=$1 TEXT=$2 WORK=$3 CASE=$4 CONVERT=${5:-}
[ -f "$TEXT" ] || { echo "FAIL: no $TEXT"; exit 1; }
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
export STARPU_SILENT=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
fail() { echo "FAIL: $*"; exit 1; }
# a small GPT with dropout on (0.1 by default); iterations 1..8, evaluations at 4 and 8
ARGS=(--text-file "$TEXT" --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
      --micro-batch-size 2 --global-batch-size 4 --eval-interval 4 --eval-iters 2 --log-interval 1
      --lr 1e-3 --lr-warmup-iters 2 --lr-decay-iters 8 --cpu-workers 1 --hidden-dropout 0.1 --attention-dropout 0.1)
# (the evaluation after training depends on where a run stops: not compared)
losses() { grep -v '"after_training"' "$1" | grep -o '"iteration": [0-9]*, "\(lm\|val\)_loss": [^,}]*'; }
# losses of iterations after $2 (and validations after it)
after() { losses "$1" | awk -v k="$2" '{ it = $2; sub(",", "", it); if (it + 0 > k) print }'; }
same_bits() { # $1 reference metrics, $2 resumed metrics, $3 iteration resumed from
    [ -n "$(after "$2" "$3")" ] || fail "$2 has no iteration after $3"
    local n
    n=$(after "$2" "$3" | wc -l)
    diff <(after "$1" "$3" | head -n "$n") <(after "$2" "$3") > /dev/null ||
        { diff <(after "$1" "$3") <(after "$2" "$3"); fail "$2 differs from $1 after iteration $3"; }
}
close_to() { # within relative 1e-5, iteration by iteration
    [ -n "$(after "$2" "$3")" ] || fail "$2 has no iteration after $3"
    paste <(after "$1" "$3") <(after "$2" "$3") | awk '{ a = $4 + 0; b = $8 + 0; d = a - b; if (d < 0) d = -d;
        if ($2 != $6 || d > 1e-5 * (a < 0 ? -a : a)) { print "mismatch: " $0; bad = 1 } } END { exit bad }' ||
        fail "$2 does not match $1 within 1e-5"
}
tracker() { cat "$1/latest_checkpointed_iteration.txt" 2>/dev/null; }

case "$CASE" in
kill9)
    # Synchronised on events, not on time: the kill follows the tracker's first appearance
    # (the first save is whole), however loaded the machine; the iteration the killed run
    # reached is read afterwards, and the resumed run goes 5 iterations past it (an
    # evaluation among them) against one uninterrupted 40-iteration run (its schedule
    # and data order do not depend on --train-iters: --lr-decay-iters 8).
    "$RUN" "${ARGS[@]}" --train-iters 40 --metrics-file full.jsonl > full.txt 2>&1 || { cat full.txt; fail "uninterrupted run"; }
    # wait_tracker DIR PID: until DIR's tracker names a checkpoint (fails if the run ends
    # first, or after 600 s)
    wait_tracker() {
        local deadline=$((SECONDS + 600))
        while [ -z "$(tracker "$1")" ]; do
            kill -0 "$2" 2> /dev/null || [ -n "$(tracker "$1")" ] ||
                fail "the run ended before its first save: $(tail -3 "$1.txt")"
            [ $SECONDS -lt $deadline ] || { kill -9 "$2"; fail "no save within 600 s"; }
            sleep 0.05
        done
    }
    # resumes_bitwise DIR: --load DIR, 5 iterations past its tracker, bitwise the full run's
    resumes_bitwise() {
        local t
        t=$(tracker "$1")
        [ -n "$t" ] && [ "$t" -le 35 ] || fail "tracker '$t' of $1: the run went on past iteration 35 before the kill"
        "$RUN" "${ARGS[@]}" --train-iters $((t + 5)) --load "$1" --metrics-file "$1.resumed.jsonl" > "$1.resumed.txt" 2>&1 ||
            { cat "$1.resumed.txt"; fail "resume from $1 (iteration $t)"; }
        grep -q "loaded checkpoint from $1 at iteration $t" "$1.resumed.txt" || fail "no load line"
        same_bits full.jsonl "$1.resumed.jsonl" "$t"
    }
    # killed right after its first save (iteration 3, or a later one if the kill came late)
    # (--train-iters 35: on a fast, idle machine a late kill could otherwise find the run past
    # the 40 iterations the uninterrupted run has to compare with; ending first is no failure)
    "$RUN" "${ARGS[@]}" --train-iters 35 --save ck --save-interval 3 > ck.txt 2>&1 &
    pid=$!
    wait_tracker ck $pid
    kill -9 $pid 2> /dev/null; wait $pid 2> /dev/null
    resumes_bitwise ck
    echo "killed after the save of iteration $(tracker ck): resumed bitwise"
    # killed at other moments while saving every iteration: the tracker always names a
    # whole checkpoint, and resuming from it is still bitwise equal
    for delay in 0.1 0.6 1.3; do
        rm -rf ck2
        "$RUN" "${ARGS[@]}" --train-iters 35 --save ck2 --save-interval 1 --save-retain 2 > ck2.txt 2>&1 &
        pid=$!
        wait_tracker ck2 $pid
        sleep $delay
        kill -9 $pid 2> /dev/null; wait $pid 2> /dev/null
        resumes_bitwise ck2
        echo "killed ${delay}s after the first save, at tracker $(tracker ck2): $(ls ck2 | tr '\n' ' ')"
    done
    ;;
plan)
    mpirun -np 2 "$RUN" "${ARGS[@]}" --tensor-model-parallel-size 2 --sequence-parallel --train-iters 8 \
        --metrics-file full.jsonl > full.txt 2>&1 || { cat full.txt; fail "uninterrupted tp=2 run"; }
    mpirun -np 2 "$RUN" "${ARGS[@]}" --tensor-model-parallel-size 2 --sequence-parallel --train-iters 3 \
        --save ck > first.txt 2>&1 || { cat first.txt; fail "tp=2 run with --save"; }
    [ "$(tracker ck)" = 3 ] || fail "tracker '$(tracker ck)', want 3"
    mpirun -np 2 "$RUN" "${ARGS[@]}" --tensor-model-parallel-size 2 --sequence-parallel --train-iters 8 \
        --load ck --metrics-file resumed.jsonl > resumed.txt 2>&1 || { cat resumed.txt; fail "tp=2 resume"; }
    same_bits full.jsonl resumed.jsonl 3
    ;;
reshard)
    P=(--tensor-model-parallel-size 2 --use-distributed-optimizer --sequence-parallel)
    mpirun -np 4 "$RUN" "${ARGS[@]}" "${P[@]}" --train-iters 6 --save ck --save-interval 3 \
        --metrics-file full.jsonl > full.txt 2>&1 || { cat full.txt; fail "tp2 x dp2 run"; }
    [ "$(ls ck/iter_0000003/*.safetensors | wc -l)" -eq 4 ] || fail "want one file per rank"
    "$RUN" "${ARGS[@]}" --train-iters 6 --load ck/iter_0000003 --metrics-file one.jsonl > one.txt 2>&1 ||
        { cat one.txt; fail "load under 1 rank"; }
    close_to full.jsonl one.jsonl 3
    mpirun -np 2 "$RUN" "${ARGS[@]}" --tensor-model-parallel-size 2 --train-iters 6 --load ck/iter_0000003 \
        --metrics-file tp2.jsonl > tp2.txt 2>&1 || { cat tp2.txt; fail "load under tp=2"; }
    close_to full.jsonl tp2.jsonl 3
    # and back: a single-rank checkpoint loads under the 4-rank plan
    "$RUN" "${ARGS[@]}" --train-iters 3 --save ck1 > s1.txt 2>&1 || { cat s1.txt; fail "single-rank save"; }
    mpirun -np 4 "$RUN" "${ARGS[@]}" "${P[@]}" --train-iters 6 --load ck1 --metrics-file four.jsonl > four.txt 2>&1 ||
        { cat four.txt; fail "load under tp2 x dp2"; }
    close_to full.jsonl four.jsonl 3
    ;;
pp)
    PP=(--num-layers 4 --pipeline-model-parallel-size 2)
    P=("${PP[@]}" --use-distributed-optimizer)
    mpirun -np 4 "$RUN" "${ARGS[@]}" "${P[@]}" --train-iters 6 --save ck --save-interval 3 \
        --metrics-file full.jsonl > full.txt 2>&1 || { cat full.txt; fail "pp2 x dp2 run"; }
    [ "$(ls ck/iter_0000003/*.safetensors | wc -l)" -eq 4 ] || fail "want one file per rank"
    # the tied word embedding (and its moments) once, from the first stage (ranks 0, 1)
    for r in 2 3; do
        head -c 65536 ck/iter_0000003/rank_0000$r.safetensors | grep -aq '"wte\.weight\(\.exp_avg\(_sq\)\?\)\?#' &&
            fail "the last stage (rank $r) wrote the word embedding the first stage writes"
    done
    head -c 65536 ck/iter_0000003/rank_00002.safetensors | grep -aq '"h\.3\.' || fail "the last stage lacks layer 3"
    "$RUN" "${ARGS[@]}" --num-layers 4 --train-iters 6 --load ck/iter_0000003 --metrics-file one.jsonl \
        > one.txt 2>&1 || { cat one.txt; fail "load under 1 rank"; }
    close_to full.jsonl one.jsonl 3
    mpirun -np 2 "$RUN" "${ARGS[@]}" "${PP[@]}" --num-virtual-stages-per-pipeline-rank 2 --train-iters 6 \
        --load ck/iter_0000003 --metrics-file vpp.jsonl > vpp.txt 2>&1 || { cat vpp.txt; fail "load under pp=2 x 2 chunks"; }
    close_to full.jsonl vpp.jsonl 3
    "$RUN" "${ARGS[@]}" --num-layers 4 --train-iters 3 --save ck1 > s1.txt 2>&1 || { cat s1.txt; fail "single-rank save"; }
    mpirun -np 4 "$RUN" "${ARGS[@]}" "${P[@]}" --train-iters 6 --load ck1 --metrics-file four.jsonl > four.txt 2>&1 ||
        { cat four.txt; fail "load under pp2 x dp2"; }
    close_to full.jsonl four.jsonl 3
    # pp=2 resumes from its own checkpoint bitwise
    mpirun -np 2 "$RUN" "${ARGS[@]}" "${PP[@]}" --train-iters 6 --save ck2 --save-interval 3 --metrics-file p2.jsonl \
        > p2.txt 2>&1 || { cat p2.txt; fail "pp2 run"; }
    mpirun -np 2 "$RUN" "${ARGS[@]}" "${PP[@]}" --train-iters 6 --load ck2/iter_0000003 --metrics-file p2r.jsonl \
        > p2r.txt 2>&1 || { cat p2r.txt; fail "pp2 resume"; }
    same_bits p2.jsonl p2r.jsonl 3
    ;;
cp)
    # context parallel 2 x data parallel 2 with the distributed optimizer: the optimizer
    # state is cut over dp x cp, so every rank writes its own range of each bucket
    P=(--context-parallel-size 2 --use-distributed-optimizer)
    mpirun -np 4 "$RUN" "${ARGS[@]}" "${P[@]}" --train-iters 6 --save ck --save-interval 3 \
        --metrics-file full.jsonl > full.txt 2>&1 || { cat full.txt; fail "cp2 x dp2 run"; }
    grep -q "cp 2" full.txt || { cat full.txt; fail "plan not applied"; }
    "$RUN" "${ARGS[@]}" --train-iters 6 --load ck/iter_0000003 --metrics-file one.jsonl > one.txt 2>&1 ||
        { cat one.txt; fail "load under 1 rank"; }
    close_to full.jsonl one.jsonl 3
    mpirun -np 4 "$RUN" "${ARGS[@]}" "${P[@]}" --train-iters 6 --load ck/iter_0000003 --metrics-file r.jsonl \
        > r.txt 2>&1 || { cat r.txt; fail "cp2 x dp2 resume"; }
    same_bits full.jsonl r.jsonl 3
    ;;
reshard_llama)
    # a LLaMA-family GPT (RMSNorm, RoPE, SwiGLU, grouped-query attention, untied output, no
    # biases): tp2 x dp2 with the distributed optimizer, loaded under 1 rank
    L=(--normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear
       --untie-embeddings-and-output-weights --group-query-attention --num-query-groups 2)
    mpirun -np 4 "$RUN" "${ARGS[@]}" "${L[@]}" --tensor-model-parallel-size 2 --use-distributed-optimizer \
        --train-iters 6 --save ck --save-interval 3 --metrics-file full.jsonl > full.txt 2>&1 || { cat full.txt; fail "tp2 x dp2 run"; }
    "$RUN" "${ARGS[@]}" "${L[@]}" --train-iters 6 --load ck/iter_0000003 --metrics-file one.jsonl > one.txt 2>&1 ||
        { cat one.txt; fail "load under 1 rank"; }
    close_to full.jsonl one.jsonl 3
    "$RUN" "${ARGS[@]}" "${L[@]}" --train-iters 6 --load ck --normalization LayerNorm > n.txt 2> n.err
    [ $? -eq 2 ] && grep -q -- "--normalization" n.err || { cat n.err; fail "--normalization mismatch not named"; }
    ;;
flags)
    "$RUN" "${ARGS[@]}" --train-iters 4 --save ck --save-interval 1 --save-retain 2 --metrics-file a.jsonl > a.txt 2>&1 ||
        { cat a.txt; fail "save every iteration"; }
    [ "$(ls -d ck/iter_* | tr '\n' ' ')" = "ck/iter_0000003 ck/iter_0000004 " ] || fail "--save-retain 2 kept: $(ls ck)"
    # --finetune: the model only, from iteration 1 again
    "$RUN" "${ARGS[@]}" --train-iters 2 --load ck --finetune --metrics-file ft.jsonl > ft.txt 2>&1 ||
        { cat ft.txt; fail "--finetune"; }
    grep -q '"iteration": 1, "lm_loss"' ft.jsonl || fail "--finetune did not restart at iteration 1"
    # --no-load-optim: same weights, fresh moments: iteration 5 differs from the full run's
    "$RUN" "${ARGS[@]}" --train-iters 8 --metrics-file full.jsonl > full.txt 2>&1 || fail "full run"
    "$RUN" "${ARGS[@]}" --train-iters 5 --load ck --metrics-file same.jsonl > same.txt 2>&1 || fail "plain load"
    "$RUN" "${ARGS[@]}" --train-iters 6 --load ck --no-load-optim --metrics-file noopt.jsonl > noopt.txt 2>&1 ||
        fail "--no-load-optim"
    same_bits full.jsonl same.jsonl 4
    # iteration 5's loss only depends on the weights (equal); iteration 6 on the moments
    [ "$(after noopt.jsonl 4 | head -1)" = "$(after full.jsonl 4 | head -1)" ] || fail "--no-load-optim changed the weights"
    [ "$(after noopt.jsonl 5 | head -1)" != "$(after full.jsonl 5 | head -1)" ] || fail "--no-load-optim loaded the moments"
    # the learning-rate schedule must match the checkpoint's (Megatron's OptimizerParamScheduler
    # check), unless this run's is forced (--override-opt-param-scheduler) or the checkpoint's
    # taken (--use-checkpoint-opt-param-scheduler: then bit for bit the uninterrupted run)
    "$RUN" "${ARGS[@]}" --train-iters 5 --load ck --lr 2e-3 > lr.txt 2>&1
    rc=$?
    [ $rc -eq 2 ] && grep -q -- "--lr does not match the learning-rate schedule of the checkpoint" lr.txt ||
        { cat lr.txt; fail "--load with another --lr: exit $rc"; }
    "$RUN" "${ARGS[@]}" --train-iters 5 --load ck --lr 2e-3 --override-opt-param-scheduler --metrics-file ov.jsonl \
        > ov.txt 2>&1 || { cat ov.txt; fail "--override-opt-param-scheduler"; }
    [ "$(grep -o '"lr": [^,]*' ov.jsonl)" != "$(grep '"iteration": 5,' full.jsonl | grep -o '"lr": [^,]*')" ] ||
        fail "--override-opt-param-scheduler did not take this run's --lr"
    "$RUN" "${ARGS[@]}" --train-iters 5 --load ck --lr 2e-3 --lr-decay-style linear --use-checkpoint-opt_param-scheduler \
        --metrics-file uc.jsonl > uc.txt 2>&1 || { cat uc.txt; fail "--use-checkpoint-opt_param-scheduler"; }
    same_bits full.jsonl uc.jsonl 4
    "$RUN" "${ARGS[@]}" --train-iters 5 --load ck --override-opt-param-scheduler --use-checkpoint-opt-param-scheduler \
        > both.txt 2>&1
    [ $? -eq 2 ] || { cat both.txt; fail "both scheduler flags accepted"; }
    echo "ok: the schedule checked against the checkpoint's, overridden, or taken from it bit for bit"
    # --no-save-optim --no-save-rng: the model alone (no Adam moments, no seed), which
    # resumes as --no-load-optim does, bit for bit (the run's --seed is the saved one)
    "$RUN" "${ARGS[@]}" --train-iters 4 --save ckm --no-save-optim --no-save-rng > m.txt 2>&1 || { cat m.txt; fail "--no-save-optim"; }
    full_kb=$(du -sk ck/iter_0000004 | cut -f1) model_kb=$(du -sk ckm/iter_0000004 | cut -f1)
    [ "$model_kb" -lt $((full_kb / 2)) ] || fail "--no-save-optim wrote $model_kb KiB, the full checkpoint $full_kb KiB"
    "$RUN" "${ARGS[@]}" --train-iters 6 --load ckm --metrics-file nosave.jsonl > nosave.txt 2>&1 || fail "load --no-save-optim"
    same_bits noopt.jsonl nosave.jsonl 4
    echo "ok: --no-save-optim --no-save-rng: $model_kb KiB against $full_kb KiB, resumes as --no-load-optim"
    # fresh moments restart Adam's step count (torch's Adam does, with its state): the first
    # step after the resume moves each weight by lr g / (|g| + eps), just under lr for the
    # largest gradients, where step t from zero moments would move it by
    # lr (1 - beta1) / (1 - beta1^t) / sqrt((1 - beta2) / (1 - beta2^t)): 0.55 lr at t = 5
    "$RUN" "${ARGS[@]}" --train-iters 5 --load ckm --save ckm5 --lr-decay-style constant --lr-warmup-iters 0 \
        --weight-decay 0 --clip-grad 0 > m5.txt 2>&1 || { cat m5.txt; fail "one step from ckm"; }
    "$CONVERT" --load ckm --to-hf hf4 > c4.txt 2>&1 && "$CONVERT" --load ckm5 --to-hf hf5 > c5.txt 2>&1 ||
        { cat c4.txt c5.txt; fail "mgraph-convert --to-hf"; }
    python3 - hf4/model.safetensors hf5/model.safetensors << 'PY' || fail "Adam's first step after fresh moments"
import json, struct, sys
def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    return {k: struct.unpack(f"<{(v['data_offsets'][1] - v['data_offsets'][0]) // 4}f",
                             raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in head.items() if k != "__metadata__"}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
step = max(abs(x - y) for k in a for x, y in zip(a[k], b[k])) / 1e-3
print(f"largest weight change in the first step after fresh moments: {step:.4f} x lr")
sys.exit(0 if 0.99 < step <= 1.0 + 1e-4 else 1)
PY
    # --no-load-rng with another --seed: other dropout masks (and data order), so other losses
    "$RUN" "${ARGS[@]}" --train-iters 5 --load ck --seed 99 --metrics-file seed99.jsonl > s99.txt 2>&1 || fail "--seed 99"
    "$RUN" "${ARGS[@]}" --train-iters 5 --load ck --seed 99 --no-load-rng --metrics-file rng.jsonl > rng.txt 2>&1 ||
        fail "--no-load-rng"
    [ "$(after rng.jsonl 4)" != "$(after seed99.jsonl 4)" ] || fail "--no-load-rng changed nothing"
    # --skip-train: the validation line at the loaded iteration, no training
    "$RUN" "${ARGS[@]}" --train-iters 8 --load ck --skip-train --metrics-file skip.jsonl > skip.txt 2>&1 ||
        { cat skip.txt; fail "--skip-train"; }
    grep -q "validation loss at iteration 4 " skip.txt || { cat skip.txt; fail "--skip-train printed no validation line"; }
    ! grep -q '"lm_loss"' skip.jsonl || fail "--skip-train trained"
    [ "$(grep -o '"val_loss": [^,}]*' skip.jsonl)" = "$(grep '"iteration": 4, "val_loss"' a.jsonl | grep -v after_training | grep -o '"val_loss": [^,}]*')" ] ||
        fail "--skip-train's validation loss differs from the run's at iteration 4"
    ;;
bad)
    "$RUN" "${ARGS[@]}" --train-iters 2 --save ck > s.txt 2>&1 || { cat s.txt; fail "save"; }
    expect2() { # $1 message part, rest: extra args
        local want=$1; shift
        "$RUN" "${ARGS[@]}" --train-iters 4 "$@" > out.txt 2> err.txt
        local rc=$?
        [ $rc -eq 2 ] || { cat err.txt; fail "'$*' exited $rc, want 2"; }
        grep -q -- "$want" err.txt || { cat err.txt; fail "'$*': message lacks '$want'"; }
        [ "$(wc -l < err.txt)" -le 3 ] || { cat err.txt; fail "'$*': more than a message"; }
    }
    expect2 "--hidden-size" --load ck --hidden-size 128
    expect2 "--num-layers" --load ck --num-layers 3
    expect2 "not a checkpoint" --load nowhere --exit-on-missing-checkpoint
    # Megatron: --load of a directory with no checkpoint warns and starts from random
    "$RUN" "${ARGS[@]}" --train-iters 1 --load nowhere > out.txt 2> err.txt || { cat err.txt; fail "--load nowhere"; }
    grep -q "will not load any checkpoints and will start from random" err.txt || { cat err.txt; fail "no warning"; }
    expect2 "need --save" --save-interval 3
    cp -r ck good
    f=ck/iter_0000002/rank_00000.safetensors
    size=$(stat -c %s $f)
    head -c $((size - 100)) good/iter_0000002/rank_00000.safetensors > $f
    expect2 "truncated" --load ck
    head -c 7 good/iter_0000002/rank_00000.safetensors > $f
    expect2 "rank_00000.safetensors" --load ck
    cp good/iter_0000002/rank_00000.safetensors $f
    printf '\x55' | dd of=$f bs=1 seek=$((size - 50)) conv=notrunc 2> /dev/null
    expect2 "checksum" --load ck
    cp good/iter_0000002/rank_00000.safetensors $f
    sed -i 's/"iteration": 2/"iteration": 3/' ck/iter_0000002/index.json
    expect2 "index.json" --load ck
    cp good/iter_0000002/index.json ck/iter_0000002/index.json
    echo garbage > ck/latest_checkpointed_iteration.txt
    expect2 "latest_checkpointed_iteration.txt" --load ck
    echo 2 > ck/latest_checkpointed_iteration.txt
    "$RUN" "${ARGS[@]}" --train-iters 3 --load ck > ok.txt 2>&1 || { cat ok.txt; fail "restored checkpoint does not load"; }
    ;;
convert)
    "$RUN" "${ARGS[@]}" --train-iters 2 --save ck > s.txt 2>&1 || { cat s.txt; fail "save"; }
    "$CONVERT" --load ck --to-hf hf > c1.txt 2>&1 || { cat c1.txt; fail "--to-hf"; }
    [ -s hf/config.json ] && [ -s hf/model.safetensors ] || fail "--to-hf wrote no config.json / model.safetensors"
    "$CONVERT" --from-hf hf --save back > c2.txt 2>&1 || { cat c2.txt; fail "--from-hf"; }
    "$RUN" "${ARGS[@]}" --load ck --skip-train --metrics-file a.jsonl > a.txt 2>&1 || { cat a.txt; fail "skip-train ck"; }
    "$RUN" "${ARGS[@]}" --load back --skip-train --metrics-file b.jsonl > b.txt 2>&1 || { cat b.txt; fail "skip-train back"; }
    [ -n "$(grep val_loss a.jsonl)" ] && [ "$(grep -o '"val_loss": [^}]*' a.jsonl)" = "$(grep -o '"val_loss": [^}]*' b.jsonl)" ] ||
        fail "round trip changed the model: $(cat a.jsonl b.jsonl)"
    conv2() { # $1 message part, rest: arguments
        local want=$1; shift
        "$CONVERT" "$@" > out.txt 2> err.txt
        local rc=$?
        [ $rc -eq 2 ] || { cat err.txt; fail "mgraph-convert $* exited $rc, want 2"; }
        grep -q -- "$want" err.txt || { cat err.txt; fail "mgraph-convert $*: message lacks '$want'"; }
    }
    conv2 "either" 
    conv2 "unknown flag" --bogus 1
    conv2 "config.json" --from-hf nowhere --save x
    conv2 "not a checkpoint" --load nowhere --to-hf x
    cp -r hf hf_bad
    head -c 1000 hf/model.safetensors > hf_bad/model.safetensors
    conv2 "model.safetensors" --from-hf hf_bad --save x
    sed 's/"gelu_new"/"relu"/' hf/config.json > hf_bad/config.json
    cp hf/model.safetensors hf_bad/model.safetensors
    conv2 "activation_function" --from-hf hf_bad --save x
    sed 's/"n_embd": 64/"n_embd": 32/' hf/config.json > hf_bad/config.json
    conv2 "shape" --from-hf hf_bad --save x
    [ ! -e x ] || fail "a failed conversion left output"
    ;;
convert_llama)
    L=(--normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear
       --untie-embeddings-and-output-weights --group-query-attention --num-query-groups 2 --rotary-base 500000)
    "$RUN" "${ARGS[@]}" "${L[@]}" --train-iters 2 --save ck > s.txt 2>&1 || { cat s.txt; fail "save"; }
    "$CONVERT" --load ck --to-hf hf > c1.txt 2>&1 || { cat c1.txt; fail "--to-hf"; }
    grep -q LlamaForCausalLM c1.txt || { cat c1.txt; fail "--to-hf did not say LlamaForCausalLM"; }
    for kv in '"model_type": "llama"' '"num_key_value_heads": 2' '"tie_word_embeddings": false' '"attention_bias": false' \
              '"rope_theta": 500000' '"rms_norm_eps": 1e-0*5,' '"vocab_size": 256'; do
        grep -q -- "$kv" hf/config.json || { cat hf/config.json; fail "config.json lacks $kv"; }
    done
    "$CONVERT" --from-hf hf --save back > c2.txt 2>&1 || { cat c2.txt; fail "--from-hf"; }
    "$RUN" "${ARGS[@]}" "${L[@]}" --load ck --skip-train --metrics-file a.jsonl > a.txt 2>&1 || { cat a.txt; fail "skip-train ck"; }
    "$RUN" "${ARGS[@]}" "${L[@]}" --load back --skip-train --metrics-file b.jsonl > b.txt 2>&1 || { cat b.txt; fail "skip-train back"; }
    [ -n "$(grep val_loss a.jsonl)" ] && [ "$(grep -o '"val_loss": [^}]*' a.jsonl)" = "$(grep -o '"val_loss": [^}]*' b.jsonl)" ] ||
        fail "round trip changed the model: $(cat a.jsonl b.jsonl)"
    # a vocabulary padded to 288 on import: export drops the 32 zero rows again
    "$CONVERT" --from-hf hf --save pad --make-vocab-size-divisible-by 96 > c3.txt 2>&1 || { cat c3.txt; fail "--from-hf padded"; }
    grep -q "padded to 288" c3.txt || { cat c3.txt; fail "vocabulary not padded to 288"; }
    "$CONVERT" --load pad --to-hf hf_pad > c4.txt 2>&1 || { cat c4.txt; fail "--to-hf padded"; }
    cmp -s hf/model.safetensors hf_pad/model.safetensors || fail "padding rows did not round-trip"
    # the imported model's flags are checked as any checkpoint's
    run2() { # $1 message part, rest: mgraph-run arguments
        local want=$1; shift
        "$RUN" "${ARGS[@]}" --skip-train "$@" > out.txt 2> err.txt
        local rc=$?
        [ $rc -eq 2 ] || { cat err.txt; fail "mgraph-run $* exited $rc, want 2"; }
        grep -q -- "$want" err.txt || { cat err.txt; fail "mgraph-run $*: message lacks '$want'"; }
    }
    run2 "--make-vocab-size-divisible-by" "${L[@]}" --load pad
    run2 "--rotary-base" "${L[@]/500000/10000}" --load back
    run2 "--norm-epsilon" "${L[@]}" --norm-epsilon 1e-6 --load back
    M=(--normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear
       --untie-embeddings-and-output-weights --rotary-base 500000)
    run2 "--num-query-groups" "${M[@]}" --load back
    conv2() { # $1 message part, rest: arguments
        local want=$1; shift
        "$CONVERT" "$@" > out.txt 2> err.txt
        local rc=$?
        [ $rc -eq 2 ] || { cat err.txt; fail "mgraph-convert $* exited $rc, want 2"; }
        grep -q -- "$want" err.txt || { cat err.txt; fail "mgraph-convert $*: message lacks '$want'"; }
    }
    # what LlamaForCausalLM cannot hold
    "$RUN" "${ARGS[@]}" --normalization RMSNorm --position-embedding-type rope --train-iters 1 --save nogate > s2.txt 2>&1 ||
        { cat s2.txt; fail "save without --swiglu"; }
    conv2 "needs --swiglu" --load nogate --to-hf x
    # Qwen3's q/k norms come without biases (its attention_bias would bias o_proj too)
    "$RUN" "${ARGS[@]}" --normalization RMSNorm --position-embedding-type rope --swiglu --qk-layernorm --train-iters 1 \
        --save qkbias > s3.txt 2>&1 || { cat s3.txt; fail "save with --qk-layernorm and biases"; }
    conv2 "qk-layernorm with biases is no Hugging Face class" --load qkbias --to-hf x
    "$RUN" "${ARGS[@]}" --squared-relu --train-iters 1 --save relu2 > s4.txt 2>&1 || { cat s4.txt; fail "save with --squared-relu"; }
    conv2 "squared-relu: no Hugging Face class" --load relu2 --to-hf x
    "$RUN" "${ARGS[@]}" --normalization RMSNorm --position-embedding-type rope --swiglu --qk-l2-norm --train-iters 1 \
        --save l2 > s7.txt 2>&1 || { cat s7.txt; fail "save with --qk-l2-norm"; }
    conv2 "qk-l2-norm: no Hugging Face class" --load l2 --to-hf x
    # MistralForCausalLM: a window in every layer, no biases
    W=(--normalization RMSNorm --position-embedding-type rope --swiglu --window-size 3,0 --train-iters 1)
    "$RUN" "${ARGS[@]}" "${W[@]}" --disable-bias-linear --window-attn-skip-freq 2 --save wskip > s5.txt 2>&1 ||
        { cat s5.txt; fail "save with --window-attn-skip-freq"; }
    conv2 "window-attn-skip-freq (full-attention layers among the windowed ones) is no Hugging Face class" --load wskip --to-hf x
    "$RUN" "${ARGS[@]}" "${W[@]}" --save wbias > s6.txt 2>&1 || { cat s6.txt; fail "save with a window and biases"; }
    conv2 "a sliding window with biases or --qk-layernorm is no Hugging Face class" --load wbias --to-hf x
    bad() { # $1 message part, $2 sed expression on config.json
        rm -rf hf_bad && cp -r hf hf_bad && sed -i "$2" hf_bad/config.json
        conv2 "$1" --from-hf hf_bad --save x
    }
    bad "low_freq_factor 2" 's/"use_cache": true/"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 2}, "use_cache": true/'
    bad "yarn RoPE needs a factor" 's/"rope_type": "default"/"rope_type": "yarn"/'
    bad "RoPE of type 'dynamic'" 's/"rope_type": "default"/"rope_type": "dynamic"/'
    bad "mlp_bias" 's/"mlp_bias": false/"mlp_bias": true/'
    bad "hidden_act" 's/"silu"/"gelu"/'
    bad "model_type" 's/"llama"/"gemma"/'
    bad "sliding_window is neither null nor a positive integer" 's/"model_type": "llama"/"model_type": "mistral", "sliding_window": 0/'
    bad "layer_types\[1\] is 'full_attention'" 's/"model_type": "llama"/"model_type": "mistral", "sliding_window": 4, "layer_types": ["sliding_attention", "full_attention"]/'
    bad "attention_bias true" 's/"model_type": "llama"/"model_type": "qwen3"/; s/"attention_bias": false/"attention_bias": true/'
    bad "use_sliding_window" 's/"model_type": "llama"/"model_type": "qwen2"/; s/"use_cache": true/"use_sliding_window": true, "use_cache": true/'
    bad "q_proj.weight has shape" 's/"head_dim": 16/"head_dim": 32/' # (another head size: q_proj's rows)
    bad "num_key_value_heads" 's/"num_key_value_heads": 2/"num_key_value_heads": 3/'
    bad "shape" 's/"intermediate_size": [0-9]*/"intermediate_size": 64/'
    bad "lm_head.weight" 's/"tie_word_embeddings": false/"tie_word_embeddings": true/' # tied, but lm_head differs
    [ ! -e x ] || fail "a failed conversion left output"
    ;;
fp8)
    F=(--fp8-format hybrid --fp8-amax-history-len 4 --fp8-amax-compute-algo max)
    # fp8_state DIR: the checkpoint's fp8 scales and histories as text (from rank 0's file)
    fp8_state() {
        python3 - "$1" << 'EOF'
import json, struct, sys
f = open(sys.argv[1] + "/rank_00000.safetensors", "rb").read()
n = struct.unpack("<Q", f[:8])[0]
h = json.loads(f[8:8 + n])
for name in ("mgraph.fp8.scale", "mgraph.fp8.amax_history"):
    [(k, v)] = [(k, v) for k, v in h.items() if k.split("#")[0] == name]
    a, b = v["data_offsets"]
    print(name, v["shape"], f[8 + n + a:8 + n + b].hex())
EOF
    }
    "$RUN" "${ARGS[@]}" "${F[@]}" --train-iters 6 --save s --save-interval 3 --metrics-file s.jsonl > s.txt 2>&1 ||
        { cat s.txt; fail "serial fp8 run"; }
    "$RUN" "${ARGS[@]}" "${F[@]}" --train-iters 6 --load s/iter_0000003 --metrics-file s3.jsonl > s3.txt 2>&1 ||
        { cat s3.txt; fail "serial fp8 resume"; }
    same_bits s.jsonl s3.jsonl 3
    python3 -c "import json, sys; sys.exit(json.load(open('s/iter_0000003/index.json'))['meta'].get('fp8') != {
        'format': 'hybrid', 'recipe': 'delayed', 'amax_history_len': 4, 'amax_compute_algo': 'max', 'margin': 0,
        'slots': 24, 'updates': 3})" || fail "no fp8 record in the index"
    D=(--use-distributed-optimizer)
    mpirun -np 2 "$RUN" "${ARGS[@]}" "${F[@]}" "${D[@]}" --train-iters 6 --save d --save-interval 3 --metrics-file d.jsonl \
        > d.txt 2>&1 || { cat d.txt; fail "dp=2 fp8 run"; }
    mpirun -np 2 "$RUN" "${ARGS[@]}" "${F[@]}" "${D[@]}" --train-iters 6 --load d/iter_0000003 --metrics-file d3.jsonl \
        > d3.txt 2>&1 || { cat d3.txt; fail "dp=2 fp8 resume"; }
    same_bits d.jsonl d3.jsonl 3
    [ "$(fp8_state s/iter_0000003)" = "$(fp8_state d/iter_0000003)" ] || fail "dp=2's fp8 state is not the serial run's"
    # resharding: the state is the whole model's (every rank holds it all), loaded whole
    "$RUN" "${ARGS[@]}" "${F[@]}" --train-iters 6 --load d/iter_0000003 --metrics-file ds.jsonl > ds.txt 2>&1 ||
        { cat ds.txt; fail "dp=2 checkpoint resumed serially"; }
    close_to d.jsonl ds.jsonl 3
    expect2() { # $1 message part, rest: extra args
        local want=$1
        shift
        "$RUN" "${ARGS[@]}" --train-iters 4 "$@" > out.txt 2> err.txt
        local rc=$?
        [ $rc -eq 2 ] || { cat err.txt; fail "'$*' exited $rc, want 2"; }
        grep -qF -- "$want" err.txt || { cat err.txt; fail "'$*': message lacks '$want'"; }
    }
    expect2 "--fp8-format e4m3 does not match" --load s --fp8-format e4m3 --fp8-amax-history-len 4
    expect2 "--fp8-amax-history-len 2 does not match" --load s --fp8-format hybrid --fp8-amax-history-len 2
    # a checkpoint without fp8 state resumes no fp8 run; --finetune / --no-load-optim start afresh
    "$RUN" "${ARGS[@]}" --train-iters 3 --save n > n.txt 2>&1 || { cat n.txt; fail "run without fp8"; }
    expect2 "holds no fp8 scaling state" --load n "${F[@]}"
    for f in --finetune --no-load-optim; do
        "$RUN" "${ARGS[@]}" --train-iters 4 --load n "${F[@]}" $f > out.txt 2>&1 || { cat out.txt; fail "$f from no fp8 state"; }
    done
    # loaded without fp8 flags: the state stays behind (its next save has none)
    "$RUN" "${ARGS[@]}" --train-iters 4 --load s/iter_0000003 --save p > p.txt 2>&1 || { cat p.txt; fail "fp8 state, no fp8"; }
    grep -q '"fp8"\|mgraph.fp8' p/iter_0000004/index.json && fail "a run without fp8 saved fp8 state"
    # corrupt: a flipped byte in the scales
    cp -r s/iter_0000003 bad
    off=$(python3 -c "
import json, struct
f = open('bad/rank_00000.safetensors', 'rb').read()
n = struct.unpack('<Q', f[:8])[0]
print([8 + n + v['data_offsets'][0] + 5 for k, v in json.loads(f[8:8 + n]).items() if k.startswith('mgraph.fp8.scale#')][0])")
    printf '\x55' | dd of=bad/rank_00000.safetensors bs=1 seek="$off" conv=notrunc 2> /dev/null
    expect2 "mgraph.fp8.scale" --load bad "${F[@]}"
    echo "ok: fp8 state resumed bitwise (serial, dp=2 distopt), resharded dp=2 -> 1 within 1e-5, refusals exit 2"
    ;;
moe)
    E=(--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 96 --moe-aux-loss-coeff 1e-2 --moe-z-loss-coeff 1e-3)
    "$RUN" "${ARGS[@]}" "${E[@]}" --train-iters 6 --save ck --save-interval 3 --metrics-file full.jsonl > full.txt 2>&1 ||
        { cat full.txt; fail "MoE run"; }
    grep -q 'mlp.experts.fc1.weight' ck/iter_0000003/index.json ||
        fail "no expert weights in the checkpoint"
    "$RUN" "${ARGS[@]}" "${E[@]}" --train-iters 6 --load ck/iter_0000003 --metrics-file resumed.jsonl > r.txt 2>&1 ||
        { cat r.txt; fail "MoE resume"; }
    same_bits full.jsonl resumed.jsonl 3
    mpirun -np 2 "$RUN" "${ARGS[@]}" "${E[@]}" --train-iters 6 --save dp --save-interval 3 --metrics-file dp.jsonl > dp.txt 2>&1 ||
        { cat dp.txt; fail "MoE dp2 run"; }
    "$RUN" "${ARGS[@]}" "${E[@]}" --train-iters 6 --load dp/iter_0000003 --metrics-file one.jsonl > one.txt 2>&1 ||
        { cat one.txt; fail "MoE dp2 checkpoint under 1 rank"; }
    close_to dp.jsonl one.jsonl 3
    moe2() { # $1 message part, rest: mgraph-run arguments
        local want=$1; shift
        "$RUN" "${ARGS[@]}" --train-iters 6 "$@" > out.txt 2> err.txt
        local rc=$?
        [ $rc -eq 2 ] || { cat err.txt; fail "mgraph-run $* exited $rc, want 2"; }
        grep -q -- "$want" err.txt || { cat err.txt; fail "mgraph-run $*: message lacks '$want'"; }
    }
    moe2 "--num-experts" --load ck
    moe2 "--num-experts" "${E[@]/4/8}" --load ck
    moe2 "--moe-ffn-hidden-size" "${E[@]/96/128}" --load ck
    moe2 "--moe-layer-freq" "${E[@]}" --moe-layer-freq 2 --load ck
    "$RUN" "${ARGS[@]}" --train-iters 1 --save dense > d.txt 2>&1 || { cat d.txt; fail "dense save"; }
    moe2 "--num-experts" "${E[@]}" --load dense
    if [ -n "$CONVERT" ]; then
        "$CONVERT" --load ck --to-hf hf > c.txt 2> c.err
        [ $? -eq 2 ] && grep -q "mixture-of-experts" c.err || { cat c.err; fail "mgraph-convert exported an MoE model"; }
        [ ! -e hf ] || fail "a refused export left output"
    fi
    ;;
checkpoint_args)
    # --use-checkpoint-args (Megatron's load_args_from_checkpoint): a LLaMA-like GPT saved;
    # resumed with a command line that gives none of its sizes and contradicts its switches
    # (LayerNorm, no SwiGLU, learned positions, 4 query groups, dropout 0.2, biases off),
    # the checkpoint's flags win and the iterations after are bit for bit the resume with
    # the right flags; without the flag that command line exits 2; a size given on the
    # command line is kept (Megatron's _set_arg without force) and so refused by --load
    M=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --group-query-attention --num-query-groups 2 --swiglu
       --normalization RMSNorm --position-embedding-type rope --untie-embeddings-and-output-weights --seq-length 32
       --max-position-embeddings 32)
    T=(--text-file "$TEXT" --micro-batch-size 2 --global-batch-size 4 --log-interval 1 --lr 1e-3 --lr-warmup-iters 2
       --lr-decay-iters 8 --cpu-workers 1 --eval-iters 0)
    WRONG=(--num-attention-heads 4 --num-query-groups 4 --normalization LayerNorm --position-embedding-type learned_absolute
           --hidden-dropout 0.2 --disable-bias-linear)
    "$RUN" "${T[@]}" "${M[@]}" --train-iters 4 --metrics-file full.jsonl > full.txt 2>&1 || { cat full.txt; fail "full run"; }
    "$RUN" "${T[@]}" "${M[@]}" --train-iters 2 --save ck > s.txt 2>&1 || { cat s.txt; fail "save"; }
    "$RUN" "${T[@]}" "${WRONG[@]}" --train-iters 4 --load ck --use-checkpoint-args --metrics-file uca.jsonl > uca.txt 2>&1 ||
        { cat uca.txt; fail "--use-checkpoint-args with a contradicting command line"; }
    same_bits full.jsonl uca.jsonl 2
    for f in "--num-layers 2" "--hidden-size 64" "--normalization RMSNorm" "--swiglu 1" "--num-query-groups 2" \
             "--position-embedding-type rope" "--hidden-dropout 0.100000001" "--disable-bias-linear 0"; do
        grep -q -- "--use-checkpoint-args: from ck: .*$f" uca.txt || { cat uca.txt; fail "not said: $f"; }
    done
    # without --use-checkpoint-args the same command line is refused
    "$RUN" "${T[@]}" "${WRONG[@]}" --train-iters 4 --load ck > out.txt 2> err.txt
    rc=$?
    [ $rc -eq 2 ] && grep -q "does not match the checkpoint" err.txt || { cat err.txt; fail "mismatch without the flag: $rc"; }
    # failures: exit 2 with a message, nothing written
    expect2() { # $1 message part, rest: args
        local want=$1; shift
        rm -rf out_ck
        "$RUN" "${T[@]}" --train-iters 4 --save out_ck "$@" > out.txt 2> err.txt
        local rc=$?
        [ $rc -eq 2 ] && grep -q -- "$want" err.txt || { cat err.txt; fail "'$*' exited $rc, want 2 and '$want'"; }
        [ ! -e out_ck ] || fail "'$*' wrote out_ck"
    }
    expect2 "--num-layers does not match the checkpoint" "${WRONG[@]}" --num-layers 3 --load ck --use-checkpoint-args
    expect2 "--use-checkpoint-args takes the model flags from the checkpoint under --load" "${M[@]}" --use-checkpoint-args
    cp -r ck bad
    echo '{"iteration": 2' > bad/iter_0000002/index.json
    expect2 "--use-checkpoint-args: .*index.json" "${WRONG[@]}" --load bad --use-checkpoint-args
    # a --load directory with no checkpoint: the command line's flags, with a warning (Megatron's)
    "$RUN" "${T[@]}" "${M[@]}" --train-iters 1 --load nowhere --use-checkpoint-args > out.txt 2> err.txt ||
        { cat err.txt; fail "--use-checkpoint-args with no checkpoint"; }
    grep -q "no checkpoint in nowhere to provide the model flags" err.txt || { cat err.txt; fail "no warning"; }
    ;;
async)
    # --async-save: the checkpoints are byte for byte the synchronous ones, steps run while
    # a save is written (a slow disk simulated), a kill -9 during the writing leaves the
    # previous checkpoint and tracker as they were and loadable, and a completed one loads
    T=("${ARGS[@]}" --eval-iters 0 --eval-interval 1000)
    "$RUN" "${T[@]}" --train-iters 6 --save-interval 2 --save sync > s.txt 2>&1 || { cat s.txt; fail "sync saves"; }
    MGRAPH_TEST_ASYNC_SAVE_PAUSE_MS=400 "$RUN" "${T[@]}" --train-iters 6 --save-interval 2 --save asy --async-save \
        > a.txt 2>&1 || { cat a.txt; fail "async saves"; }
    for it in 2 4 6; do
        for f in rank_00000.safetensors index.json; do
            cmp -s sync/iter_000000$it/$f asy/iter_000000$it/$f || fail "iteration $it: $f differs from the synchronous save's"
        done
    done
    [ "$(tracker asy)" = 6 ] || fail "async tracker $(tracker asy)"
    # iteration 3 ran before the save of iteration 2 was in place
    grep -nE "iteration +3/|saved checkpoint from iteration +2 " a.txt | head -1 | grep -q "iteration *3/" ||
        { cat a.txt; fail "no step ran while the save was written"; }
    # a kill -9 while a save is being written
    "$RUN" "${T[@]}" --train-iters 4 --save-interval 2 --save ck > k0.txt 2>&1 || { cat k0.txt; fail "first saves"; }
    before=$(cat ck/iter_0000004/* | md5sum)
    MGRAPH_TEST_ASYNC_SAVE_PAUSE_MS=20000 "$RUN" "${T[@]}" --load ck --train-iters 1000 --save-interval 6 --save ck \
        --async-save > k1.txt 2>&1 &
    pid=$!
    for _ in $(seq 1 600); do [ -d ck/iter_0000006.partial ] && break; sleep 0.1; done
    [ -d ck/iter_0000006.partial ] || { kill -9 $pid; cat k1.txt; fail "the async save never started"; }
    sleep 0.5
    grep -qE "iteration +7/" k1.txt || { kill -9 $pid; cat k1.txt; fail "no step after the async save started"; }
    kill -9 $pid
    wait $pid 2> /dev/null
    [ "$(tracker ck)" = 4 ] || fail "after the kill the tracker says $(tracker ck), want 4"
    [ "$(cat ck/iter_0000004/* | md5sum)" = "$before" ] || fail "the kill changed iteration 4's checkpoint"
    [ ! -d ck/iter_0000006 ] || fail "a half-written iteration 6 is in place"
    "$RUN" "${T[@]}" --load ck --train-iters 8 --save-interval 6 --save ck --async-save --metrics-file r.jsonl > k2.txt 2>&1 ||
        { cat k2.txt; fail "resume after the kill"; }
    grep -q '"iteration": 5, "lm_loss"' r.jsonl || fail "did not resume at iteration 5"
    [ "$(tracker ck)" = 8 ] && [ -d ck/iter_0000006 ] && [ ! -d ck/iter_0000006.partial ] || fail "after resuming: $(ls ck)"
    "$RUN" "${T[@]}" --load ck --train-iters 9 > k3.txt 2>&1 || { cat k3.txt; fail "the async checkpoint does not load"; }
    grep -qE "iteration +9/" k3.txt || fail "the async checkpoint did not resume at 9"
    rm -rf none
    "$RUN" "${T[@]}" --train-iters 2 --async-save > out.txt 2> err.txt
    [ $? -eq 2 ] && grep -q -- "--async-save needs --save DIR" err.txt || { cat err.txt; fail "--async-save without --save"; }
    ;;
non_persistent)
    # --non-persistent-save-interval 1 --non-persistent-ckpt-type local: a checkpoint every
    # iteration into the local directory (only the newest kept), the persistent ones every 4;
    # --load takes the local one when it is newer (the run died after iteration 5's local
    # save, its persistent checkpoint being iteration 4's) and resumes bit for bit, the
    # persistent one when that is newer
    T=("${ARGS[@]}" --eval-iters 0 --eval-interval 1000)
    NP=(--non-persistent-save-interval 1 --non-persistent-ckpt-type local --non-persistent-local-ckpt-dir) # + the directory
    "$RUN" "${T[@]}" --train-iters 8 --metrics-file full.jsonl > full.txt 2>&1 || { cat full.txt; fail "full run"; }
    "$RUN" "${T[@]}" --train-iters 6 --save ck --save-interval 4 "${NP[@]}" local > a.txt 2>&1 || { cat a.txt; fail "saves"; }
    [ "$(tracker local)" = 5 ] && [ "$(ls -d local/iter_* | tr '\n' ' ')" = "local/iter_0000005 " ] ||
        fail "local holds $(ls local), tracker $(tracker local)"
    [ "$(tracker ck)" = 6 ] || fail "persistent tracker $(tracker ck)"
    cp -r local local2
    "$RUN" "${T[@]}" --train-iters 8 --load ck "${NP[@]}" local2 --metrics-file p.jsonl > p.txt 2>&1 ||
        { cat p.txt; fail "load"; }
    grep -q "loaded checkpoint from ck at iteration 6" p.txt || { cat p.txt; fail "not loaded from ck at 6"; }
    same_bits full.jsonl p.jsonl 6
    grep -q '"iteration": 6, "lm_loss"' p.jsonl && fail "the older local checkpoint was loaded"
    rm -rf ck/iter_0000006 && echo 4 > ck/latest_checkpointed_iteration.txt # (as if the run had died at 5)
    "$RUN" "${T[@]}" --train-iters 8 --load ck "${NP[@]}" local --metrics-file l.jsonl > l.txt 2>&1 || { cat l.txt; fail "load local"; }
    grep -q '"iteration": 6, "lm_loss"' l.jsonl && ! grep -q '"iteration": 5, "lm_loss"' l.jsonl ||
        fail "the newer local checkpoint (5) was not loaded"
    grep -q "loaded checkpoint from local at iteration 5" l.txt || { cat l.txt; fail "not said: loaded from local"; }
    same_bits full.jsonl l.jsonl 5
    expect2() { # $1 message part, rest: args
        local want=$1; shift
        rm -rf out_ck out_local
        "$RUN" "${T[@]}" --train-iters 2 --save out_ck "$@" > out.txt 2> err.txt
        local rc=$?
        [ $rc -eq 2 ] && grep -q -- "$want" err.txt || { cat err.txt; fail "'$*' exited $rc, want 2 and '$want'"; }
        [ ! -e out_ck ] && [ ! -e out_local ] || fail "'$*' wrote a checkpoint"
    }
    expect2 "needs --non-persistent-ckpt-type local" --non-persistent-save-interval 1
    expect2 "--non-persistent-ckpt-type global is not supported" --non-persistent-save-interval 1 \
        --non-persistent-ckpt-type global --non-persistent-local-ckpt-dir out_local
    expect2 "needs --non-persistent-local-ckpt-dir" --non-persistent-save-interval 1 --non-persistent-ckpt-type local
    expect2 "needs --non-persistent-save-interval" --non-persistent-ckpt-type local --non-persistent-local-ckpt-dir out_local
    expect2 "must not be --save's directory" "${NP[@]}" out_ck
    ;;
*) fail "unknown case $CASE" ;;
esac
echo "ok: $CASE"
