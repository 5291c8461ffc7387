#!/usr/bin/env bash
# Hostile inputs get a clear message and exit 2 (or finish), never a crash, a hang or
# unbounded work (issue 18 items 7, 9, 10, 11, 12). Every case is bounded by 60 s.
#   inputs.sh MGRAPH_RUN MGRAPH_PREPROCESS WORK_DIR [GPT2_DIR]
set -u
GPT2=${4:-}
HERE=$(cd "$(dirname "$0")" && pwd); export HERE
source "$HERE/common.sh" "$@"
T=(--text-file corpus.txt --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16
   --micro-batch-size 2 --global-batch-size 4 --train-iters 2 --eval-iters 0 --cpu-workers 1)
# expect CODE "substring" ARGS... : run mgraph-run, check exit code and message
expect() {
    local code=$1 want=$2
    shift 2
    bounded "$RUN" "$@"
    if [ $rc -eq "$code" ] && [[ $out == *"$want"* ]]; then
        ok "exit $rc in ${secs}s: $(grep -m1 -o 'mgraph-run: \(error\|failed\): .*' <<< "$out" | cut -c1-150)"
    else
        fail "want exit $code with '$want' for: $*: got $rc in ${secs}s: $(tail -c 400 <<< "$out")"
    fi
}

echo "== 7: sizes that overflowed or crashed"
expect 2 "--hidden-size must be in 1..16777216" --dry-run --hidden-size 536870912 --num-attention-heads 1 --ffn-hidden-size 1
expect 2 "--seq-length must be in 1..16777216 (got 2147483647)" --dry-run --seq-length 2147483647
expect 2 "--ffn-hidden-size must be in" --dry-run --hidden-size 64 --num-attention-heads 2 --ffn-hidden-size 2147483647
[[ $out != *"-2147"* ]] || fail "a negative number from an overflow in: $out"

echo "== 9: unbounded work"
expect 2 "--train-iters must be at most 1099511627776 (got 9223372036854775807)" "${T[@]}" --train-iters 9223372036854775807
expect 2 "--eval-iters must be at most" "${T[@]}" --eval-interval 1 --eval-iters 4611686018427387904
expect 2 "ask for more than 2^50 samples" "${T[@]}" --train-iters 1099511627776 --micro-batch-size 4096 --global-batch-size 4096
expect 2 "ask for more than 2^50 samples" "${T[@]}" --eval-interval 1 --eval-iters 1099511627776 --train-iters 4096
expect 2 "--global-batch-size must be at most 1073741824" --dry-run --global-batch-size 2147483647 --micro-batch-size 1
expect 2 "make a step graph too large to build" --dry-run --global-batch-size 1048576 --micro-batch-size 1
expect 2 "is not a regular file" "${T[@]/corpus.txt//dev/zero}"
awk 'NR <= 400 { gsub(/"/, ""); printf "{\"text\": \"%s\"}\n", $0 }' corpus.txt > docs.jsonl
"$PRE" --input docs.jsonl --output-prefix ds > /dev/null 2>&1 || fail "preprocess"
expect 2 "need more than 17179869184 index entries" --data-path ds_text_document --tokenizer-type ByteLevelTokenizer --num-layers 1 --hidden-size 32 \
    --num-attention-heads 2 --seq-length 16 --micro-batch-size 1 --global-batch-size 1 --train-iters 1099511627776 --eval-iters 0

echo "== 10: --dump-dot"
if command -v mpirun > /dev/null; then
    bounded mpirun -np 2 "$RUN" "${T[@]}" --dump-dot one.dot
    [ $rc -eq 2 ] && [[ $out == *"put %r (the rank) in the name"* ]] && [ ! -e one.dot ] &&
        ok "--dump-dot without %r under mpirun: exit 2" || fail "--dump-dot without %r: rc $rc: $out"
fi
expect 2 "--dump-dot path is longer than" "${T[@]}" --dry-run --dump-dot "$(printf 'd%.0s' $(seq 1 5000)).dot"

echo "== 11: values that were accepted silently"
expect 2 "--ffn-hidden-size must be in 1.." "${T[@]}" --ffn-hidden-size -5
expect 2 "--ffn-hidden-size must be in 1.." "${T[@]}" --ffn-hidden-size 0
expect 2 "--max-position-embeddings must be in 1.." "${T[@]}" --max-position-embeddings -1
expect 2 "--tensor-model-parallel-size must be in 1.." "${T[@]}" --tensor-model-parallel-size 0
expect 2 "--world-size must be in 1.." "${T[@]}" --dry-run --world-size 0
expect 2 "the decay span (--lr-decay-iters/--lr-decay-samples) must be >= 1" "${T[@]}" --lr-decay-iters -7
expect 2 "--clip-grad must be >= 0" "${T[@]}" --clip-grad -1
expect 2 "--weight-decay must be >= 0" "${T[@]}" --weight-decay -5
expect 2 "evaluation would never run" "${T[@]}" --eval-iters 5 --eval-interval 0
expect 2 "--vocab-file is for --tokenizer-type GPT2BPETokenizer" "${T[@]}" --tokenizer-type ByteLevelTokenizer --vocab-file corpus.txt
expect 2 "give --text-file or --data-path, not both" "${T[@]}" --data-path ds_text_document
expect 0 "iteration        2/" "${T[@]}" --eval-interval 0 --log-interval 1  # no evaluation, none asked for

echo "== 12: messages"
mkdir -p adir
expect 2 "text dataset adir is a directory" "${T[@]/corpus.txt/adir}"
expect 2 "--vocab-file adir is a directory" "${T[@]}" --tokenizer-type GPT2BPETokenizer --vocab-file adir --merge-file adir
printf 'tensor-model-parallel-size 1\nsequence-parallel\0 true\n' > nul.plan
expect 2 "nul.plan:2: NUL byte in the line" "${T[@]}" --plan nul.plan
expect 2 "plan file adir is a directory" "${T[@]}" --plan adir
printf 'shard *mlp.c_fc.bias 1\n' > dim.plan
expect 2 "plan: shard rule '*mlp.c_fc.bias 1' applies to" "${T[@]}" --plan dim.plan
bounded "$PRE" --input docs.jsonl --output-prefix x --tokenizer-type GPT2BPETokenizer --vocab-file adir --merge-file adir
[ $rc -eq 2 ] && [[ $out == *"--vocab-file adir is a directory"* ]] && ok "preprocess: --vocab-file directory: exit 2" ||
    fail "preprocess with a directory as vocabulary: rc $rc: $out"
# the process keeps its name through the OpenBLAS re-exec (pgrep -x mgraph-run finds it)
cp "$RUN" ./mgraph-run 2>/dev/null && RUNCOPY=./mgraph-run || RUNCOPY=$RUN
env -u OPENBLAS_CORETYPE -u MGRAPH_KEEP_OPENBLAS "$RUNCOPY" "${T[@]}" --train-iters 1000000 --log-interval 100000 > name.txt 2>&1 &
pid=$!
sleep 3
comm=$(cat /proc/$pid/comm 2>/dev/null)
kill $pid 2>/dev/null; wait $pid 2>/dev/null
[ "$comm" = mgraph-run ] && ok "process name: $comm" || fail "process name is '$comm', not mgraph-run"

if [ -n "$GPT2" ] && [ -f "$GPT2/vocab.json" ]; then
    echo "== 9: GPT-2 BPE of long words: O(n log n), and the same ids as OpenAI's bpe()"
    tr -cd 'a-zA-Z' < corpus.txt | fold -w 1500 | head -3 > words.txt
    head -c 300 words.txt | head -1 > w300 && cat w300 >> words.txt
    awk '{ printf "{\"text\": \"%s\"}\n", $0 }' words.txt > words.jsonl
    bounded "$PRE" --input words.jsonl --output-prefix words --tokenizer-type GPT2BPETokenizer \
        --vocab-file "$GPT2/vocab.json" --merge-file "$GPT2/merges.txt"
    [ $rc -eq 0 ] || fail "preprocess of long words: $out"
    python3 - "$GPT2/vocab.json" "$GPT2/merges.txt" words.txt words_text_document <<'PY' || fail "long-word ids differ from OpenAI's bpe()"
import struct, subprocess, sys, os
ref = subprocess.run([sys.executable, os.path.join(os.environ["HERE"], "bpe_reference.py"), *sys.argv[1:4]],
                     capture_output=True, text=True, check=True).stdout.split("\n")
idx = open(sys.argv[4] + ".idx", "rb").read(); b = open(sys.argv[4] + ".bin", "rb").read()
n = struct.unpack_from("<Q", idx, 18)[0]
lens = struct.unpack_from(f"<{n}i", idx, 34); offs = struct.unpack_from(f"<{n}q", idx, 34 + 4 * n)
for k in range(n):
    ids = list(struct.unpack_from(f"<{lens[k]}H", b, offs[k]))
    assert ids == [int(x) for x in ref[k].split()], (k, ids[:10], ref[k][:60])
print(f"ok: {n} long words (300-1500 letters) encode as OpenAI's bpe() does")
PY
    head -c 1000000 /dev/zero | tr '\0' 'a' > big.txt
    bounded "$PRE" --input big.txt --input-format text --output-prefix big --tokenizer-type GPT2BPETokenizer \
        --vocab-file "$GPT2/vocab.json" --merge-file "$GPT2/merges.txt"
    [ $rc -eq 0 ] && ok "a 1 MB word tokenizes in $secs s" || fail "1 MB word: rc $rc in $secs s: $out"
else
    echo "note: no GPT-2 vocabulary given: long-word BPE cases skipped"
fi
finish
