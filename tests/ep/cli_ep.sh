#!/usr/bin/env bash
# Expert parallelism through mgraph-run: training runs under mpirun (ep, with dp, tp, the
# distributed optimizer and pipeline stages) reproduce the serial run (lm loss, grad
# norm, load-balancing and z losses within 1e-5 relative every iteration; every weight
# and Adam moment of the final checkpoints within tests/support/ckpt.py's bound),
# bad expert-parallel flags exit 2 naming the rule, and Mixtral 8x7B's layout on 64
# ranks (ep 8 x tp 2) dry-runs, printing per-rank memory and all-to-all bytes.
#   cli_ep.sh MPIEXEC MGRAPH_RUN TEXT_FILE DATA_DIR WORK_DIR CASE
set -u
MPIEXEC=$1 RUN=$2 TEXT=$3 DATA=$4 WORK=$5 CASE=$6
CKPT=$(cd "$(dirname "$0")/../support" && pwd)/ckpt.py
mkdir -p "$WORK" && cd "$WORK" || exit 1
# an earlier run's serial reference and checkpoints (this script's own) are not reused
rm -rf -- serial.jsonl serial.ck parallel.ck ck_* ./*.resumed.ck
MPI="$MPIEXEC --oversubscribe --allow-run-as-root"
fail() { echo "FAIL: $*"; exit 1; }
[ -f "$TEXT" ] || fail "no corpus $TEXT"
# a small Mixtral-style model: RMSNorm, RoPE, SwiGLU experts, no biases; 4 experts, top 2
MOE=(--text-file "$TEXT" --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
     --micro-batch-size 2 --global-batch-size 8 --eval-iters 0 --log-interval 1 --lr 3e-3 --lr-warmup-iters 2
     --adam-eps 1e-5 --normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear
     --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 48 --moe-aux-loss-coeff 1e-2 --moe-z-loss-coeff 1e-3)

# column NAME FILE: one metric per iteration
column() { grep -o "\"$1\": [^,}]*" "$2" | awk '{print $2}'; }
# same NAME A B: every iteration within 1e-5 relative
same() {
    local a b
    a=$(column "$1" "$2" | wc -l) b=$(column "$1" "$3" | wc -l)
    [ "$a" -eq "$b" ] || { echo "$1: $a iterations in $2, $b in $3"; return 1; }
    paste <(column "$1" "$2") <(column "$1" "$3") | awk -F'\t' -v name="$1" '
        { n++; d = $1 - $2; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > w) w = r; if (r > 1e-5) bad++ }
        END { printf "%s: %d iterations, worst relative difference %.3g (bound 1e-5)\n", name, n, w; exit (n < 3 || bad > 0) }'
}

expect_usage() { # NAME REGEX CMD...: exit 2 within 60 s with the message
    local name=$1 re=$2; shift 2
    timeout 60 "$@" >out.txt 2>err.txt
    local rc=$?
    [ $rc -eq 2 ] || { cat err.txt; fail "$name: exit status $rc, want 2"; }
    grep -Eq -- "$re" err.txt || { cat err.txt; fail "$name: stderr lacks /$re/"; }
    echo "ok $name"
}

train_vs_serial() { # NP FLAGS...: the run on NP ranks with FLAGS matches the serial run
    local np=$1; shift
    [ -f serial.jsonl ] || timeout 180 "$RUN" "${MOE[@]}" --train-iters 5 --metrics-file serial.jsonl --save serial.ck \
        > serial.txt 2>&1 || { cat serial.txt; fail "serial run"; }
    rm -rf parallel.ck
    timeout 300 $MPI -np "$np" "$RUN" "${MOE[@]}" --train-iters 5 "$@" --metrics-file parallel.jsonl --save parallel.ck \
        > parallel.txt 2>&1 || { cat parallel.txt; fail "run on $np ranks with $*"; }
    if [[ " $* " == *" --expert-model-parallel-size 2 "* ]]; then
        grep -q "ep 2 (2 experts per rank)" parallel.txt || { cat parallel.txt; fail "plan not applied"; }
    fi
    if [[ " $* " == *" --pipeline-model-parallel-size 2 "* ]]; then
        grep -q "pp 2 (1 model chunk per stage" parallel.txt || { cat parallel.txt; fail "pipeline not applied"; }
    fi
    for m in lm_loss grad_norm load_balancing_loss z_loss; do same $m parallel.jsonl serial.jsonl || fail "$m differs"; done
    python3 "$CKPT" compare serial.ck parallel.ck || fail "the final weights or Adam moments differ"
}

# resumes NAME NP1 "FLAGS1" NP2 "FLAGS2": a 6-iteration run on NP1 ranks with FLAGS1 saves
# at iteration 3; resumed from there on NP2 ranks with FLAGS2, iterations 4-6 match the
# uninterrupted run (lm loss, grad norm, load-balancing loss within 1e-5; the final
# checkpoints' tensors within tests/support/ckpt.py's bound)
resumes() {
    local name=$1 np1=$2 f1=$3 np2=$4 f2=$5 m
    # shellcheck disable=SC2086 # the flags are several words
    timeout 300 $MPI -np "$np1" "$RUN" "${MOE[@]}" --train-iters 6 $f1 --save "ck_$name" --save-interval 3 \
        --metrics-file "$name.jsonl" > "$name.txt" 2>&1 || { cat "$name.txt"; fail "$name run"; }
    # shellcheck disable=SC2086
    timeout 300 $MPI -np "$np2" "$RUN" "${MOE[@]}" --train-iters 6 $f2 --load "ck_$name/iter_0000003" \
        --save "$name.resumed.ck" --metrics-file "$name.resumed.jsonl" > "$name.resumed.txt" 2>&1 ||
        { cat "$name.resumed.txt"; fail "$name checkpoint resumed on $np2 rank(s) with '$f2'"; }
    grep '"iteration": [456],' "$name.jsonl" > "$name.456.jsonl"
    for m in lm_loss grad_norm load_balancing_loss; do
        same $m "$name.resumed.jsonl" "$name.456.jsonl" || fail "$m after resuming the $name checkpoint"
    done
    python3 "$CKPT" compare "ck_$name" "$name.resumed.ck" --iteration 6 ||
        fail "the weights or Adam moments at iteration 6 after resuming the $name checkpoint"
}

case "$CASE" in
ep2)
    train_vs_serial 2 --expert-model-parallel-size 2
    echo "ok $CASE" ;;
ep2_dp2)
    train_vs_serial 4 --expert-model-parallel-size 2
    echo "ok $CASE" ;;
ep2_tp2)
    train_vs_serial 4 --expert-model-parallel-size 2 --tensor-model-parallel-size 2
    echo "ok $CASE" ;;
ep2_dp2_distopt)
    # dense parameters in the distributed optimizer's buckets, experts summed over edp
    train_vs_serial 4 --expert-model-parallel-size 2 --use-distributed-optimizer
    grep -q "distributed optimizer" parallel.txt || fail "distributed optimizer not on"
    echo "ok $CASE" ;;
fsdp_ep2)
    # Megatron-FSDP (ZeRO-3) with expert parallelism: dense weights sharded over dp 4,
    # expert weights over edp 2; the checkpoints (saved from the shards) as the serial run's
    train_vs_serial 4 --expert-model-parallel-size 2 --use-megatron-fsdp
    grep -q "fsdp optim_grads_params" parallel.txt || { cat parallel.txt; fail "fsdp not applied"; }
    echo "ok $CASE" ;;
pp2)
    # MoE layers on pipeline stages: the auxiliary losses' running sum crosses the stages
    # like the activations (and its gradient back)
    train_vs_serial 2 --pipeline-model-parallel-size 2
    echo "ok $CASE" ;;
pp2_dp2)
    # ... with data parallelism: the tied embedding's gradient, summed over the first and
    # last stage, is reduced over dp too
    train_vs_serial 4 --pipeline-model-parallel-size 2
    echo "ok $CASE" ;;
pp2_ep2)
    # experts split over the 2 data-parallel ranks of each stage, all-to-all within a stage
    train_vs_serial 4 --pipeline-model-parallel-size 2 --expert-model-parallel-size 2
    echo "ok $CASE" ;;
pp2_ep2_distopt)
    train_vs_serial 4 --pipeline-model-parallel-size 2 --expert-model-parallel-size 2 --use-distributed-optimizer
    echo "ok $CASE" ;;
ep2_cp2)
    # each context-parallel rank dispatches its zigzag block of the sequence (the ep group
    # is the cp group here)
    train_vs_serial 2 --expert-model-parallel-size 2 --context-parallel-size 2
    echo "ok $CASE" ;;
etp2_ep2_tp1)
    # experts over ep 2 x an expert tensor group of 2 with dense tp 1 (dp 4, edp 1): each
    # expert's rows / columns split over ranks holding other tokens, gathered for them
    train_vs_serial 4 --expert-model-parallel-size 2 --expert-tensor-parallel-size 2
    echo "ok $CASE" ;;
checkpoint)
    # an ep 2 checkpoint (each expert block written once, by its edp index 0) resumes on one
    # rank, and a serial checkpoint resumes under ep 2 on 4 ranks (dp 4, edp 2): iterations 4-6
    # as the uninterrupted runs within 1e-5
    resumes ep 2 "--expert-model-parallel-size 2" 1 ""
    resumes serial 1 "" 4 "--expert-model-parallel-size 2"
    echo "ok $CASE" ;;
pp2_ep2_checkpoint)
    # a pp 2 x ep 2 checkpoint (each stage's expert blocks written once) resumes on one rank
    resumes pp2_ep2 4 "--pipeline-model-parallel-size 2 --expert-model-parallel-size 2" 1 ""
    echo "ok $CASE" ;;
bad_flags)
    expect_usage ep_not_dividing "expert-model-parallel-size 3 does not divide the data-parallel" \
        $MPI -np 2 "$RUN" "${MOE[@]}" --expert-model-parallel-size 3
    expect_usage experts_not_dividing "num-experts 3 is not divisible by --expert-model-parallel-size 2" \
        $MPI -np 2 "$RUN" "${MOE[@]}" --num-experts 3 --expert-model-parallel-size 2
    expect_usage ep_without_moe "expert-model-parallel-size 2 needs --num-experts" \
        $MPI -np 2 "$RUN" "${MOE[@]}" --num-experts 0 --expert-model-parallel-size 2
    expect_usage expert_tp_world "world size 1 is not a multiple of etp.ep.pp = 2.1.1 = 2" \
        "$RUN" "${MOE[@]}" --expert-tensor-parallel-size 2
    expect_usage expert_tp_with_tp "expert-tensor-parallel-size 4 other than 1 or --tensor-model-parallel-size 2 is supported with --tensor-model-parallel-size 1 only" \
        $MPI -np 4 "$RUN" "${MOE[@]}" --tensor-model-parallel-size 2 --expert-tensor-parallel-size 4
    echo "ok $CASE" ;;
mixtral_dry_run)
    # Mixtral 8x7B: 32 layers, h 4096, 32 heads in 8 query groups, ffn 14336, seq 4096, 8 experts
    # top 2, SentencePiece vocabulary 32000; ep 8 x tp 2 on 64 ranks (dp 32, edp 4)
    start=$(date +%s)
    timeout 600 "$RUN" --dry-run --world-size 64 --tensor-model-parallel-size 2 --expert-model-parallel-size 8 \
        --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 8 \
        --ffn-hidden-size 14336 --seq-length 4096 --max-position-embeddings 4096 --num-experts 8 --moe-router-topk 2 \
        --normalization RMSNorm --position-embedding-type rope --swiglu --untie-embeddings-and-output-weights \
        --disable-bias-linear --micro-batch-size 1 --global-batch-size 32 --tokenizer-type SentencePieceTokenizer \
        --tokenizer-model "$DATA/mistral/tokenizer.model" --text-file "$TEXT" > out.txt 2>err.txt ||
        { cat err.txt; fail "dry run"; }
    echo "dry run of 64 ranks: $(( $(date +%s) - start )) s"
    grep "rank(s)" out.txt
    grep -q "64 rank(s): tp 2, dp 32, ep 8 (1 experts per rank)" out.txt || fail "plan line"
    grep -E "rank (0|1|63):" out.txt
    [ "$(grep -c "ep [0-9]* (all-to-all, balanced routing)" out.txt)" -eq 64 ] || fail "want 64 rank lines with all-to-all bytes"
    # all-to-all bytes per rank and step (balanced routing, one micro-batch per rank): per layer the
    # forward dispatch and combine and their backward reverses each send 7/8 of the T k = 8192 routed
    # rows of h 4096 floats, plus the counts exchange (7 x 1 x 4 bytes). Rank 1 (tp index 1): the
    # ranks of tp index 0 also all-reduce the gradient norm's expert sums over ep (a few bytes).
    ep=$(grep "rank 1:" out.txt | sed -n 's/.*, ep \([0-9]*\) (all-to-all.*/\1/p')
    awk -v got="$ep" 'BEGIN { L = 32; T = 4096; k = 2; h = 4096; n = 8;
        want = L * (4 * (n - 1) / n * T * k * h * 4 + (n - 1) * 1 * 4);
        printf "all-to-all bytes per rank per step: %s, analytic %.0f (%.2f GB)\n", got, want, want / 1e9;
        exit (got != want) }' || fail "all-to-all bytes differ from the analytic count"
    echo "ok $CASE" ;;
*) fail "unknown case $CASE" ;;
esac
