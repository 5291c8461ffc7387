#!/usr/bin/env bash
# mgraph-run --dump-dot-summary: the scope-collapsed DOT view renders with graphviz in
# seconds at every size (the full --dump-dot of the default step did not render in 13
# minutes), and it accounts for the whole graph: the ops in its boxes plus the
# collectives in its hexagons are the rank's node count, and every collective is kept.
#   dot_summary.sh MGRAPH_RUN TEST_DATA WORK_DIR
set -u
RUN=$1 DATA=$2 WORK=$3
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
[ -f "$DATA/tinyshakespeare.txt" ] && [ -f "$DATA/gpt2/vocab.json" ] || fail "no fixtures in $DATA"
command -v dot > /dev/null || fail "graphviz dot not found (tools/install-deps.sh installs it)"

# render FILE: dot -Tsvg within 30 s (the issue asks for 10 s on an idle machine; CI
# runs this beside other tests on 2 cores), prints the time
render() {
    local t0 t1
    t0=$(date +%s.%N)
    timeout 30 dot -Tsvg "$1" -o "$1.svg" 2> dot.err || { cat dot.err; fail "dot -Tsvg $1 failed or took over 30 s"; }
    t1=$(date +%s.%N)
    grep -q '</svg>' "$1.svg" || fail "no SVG from $1"
    awk -v f="$1" -v b="$(grep -c 'shape=' "$1")" -v e="$(grep -c -- '->' "$1")" -v a="$t0" -v z="$t1" \
        'BEGIN { printf "%s: %d boxes, %d edges, rendered in %.2f s\n", f, b, e, z - a }'
}

# accounts FILE NODES COLLECTIVES: "N ops" of the boxes + "xN" of the hexagons = NODES,
# hexagons' counts = COLLECTIVES, and the label says all NODES ops are shown
accounts() {
    local ops comm
    ops=$(grep -v hexagon "$1" | grep -o '\\n[a-z]*: [0-9]* ops' | awk '{s += $2} END {print s + 0}')
    comm=$(grep -v legend "$1" | grep hexagon | grep -o ' x[0-9]*\\n' | tr -dc '0-9\n' | awk '{s += $1} END {print s + 0}')
    [ "$comm" -eq "$3" ] || fail "$1: hexagons count $comm collectives, the rank has $3"
    [ $((ops + comm)) -eq "$2" ] || fail "$1: boxes hold $ops ops + $comm collectives, the rank has $2 nodes"
    grep -q "summary: $2 of $2 ops" "$1" || fail "$1: label does not say all $2 ops are shown"
}

# nodes OUT RANK / collectives OUT RANK: from mgraph-run's "rank R: N nodes, C collectives" line
nodes() { sed -n "s/^mgraph-run: rank $2: \([0-9]*\) nodes.*/\1/p" "$1"; }
collectives() { sed -n "s/^mgraph-run: rank $2: [0-9]* nodes, \([0-9]*\) collectives.*/\1/p" "$1"; }

# 1. the default step (mgraph-run's default model on the repository's corpus)
"$RUN" --dry-run --text-file "$DATA/tinyshakespeare.txt" --dump-dot-summary default.dot > default.txt 2>&1 ||
    { cat default.txt; fail "default dry run"; }
render default.dot
accounts default.dot "$(nodes default.txt 0)" 0
grep -q 'h.3.attn\\nforward: ' default.dot || fail "no box for layer 3's attention forward"
grep -q 'xlabel="[0-9]* tensors*\\n[0-9.]* [KMG]*i*B"' default.dot || fail "edges do not carry tensor bytes"

# 2. GPT-2 124M (12 layers, hidden 768, GPT-2 BPE, seq 1024)
G=(--text-file "$DATA/tinyshakespeare.txt" --tokenizer-type GPT2BPETokenizer --vocab-file "$DATA/gpt2/vocab.json"
   --merge-file "$DATA/gpt2/merges.txt" --num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024
   --max-position-embeddings 1024 --micro-batch-size 4 --global-batch-size 8)
"$RUN" --dry-run "${G[@]}" --dump-dot-summary gpt2.dot > gpt2.txt 2>&1 || { cat gpt2.txt; fail "124M dry run"; }
grep -q "124.4[0-9]M parameters" gpt2.txt || fail "not the 124M shape"
render gpt2.dot
accounts gpt2.dot "$(nodes gpt2.txt 0)" 0

# 3. tp 2 x dp 2 with SP and the distributed optimizer, one file per rank (%r)
"$RUN" --dry-run "${G[@]}" --world-size 4 --tensor-model-parallel-size 2 --sequence-parallel \
    --use-distributed-optimizer --dump-dot-summary 'rank%r.dot' > tpdp.txt 2>&1 || { cat tpdp.txt; fail "tp2 x dp2 dry run"; }
for r in 0 1 2 3; do
    [ -s rank$r.dot ] || fail "no rank$r.dot"
    accounts rank$r.dot "$(nodes tpdp.txt $r)" "$(collectives tpdp.txt $r)"
done
render rank0.dot
grep -q 'hexagon.*group tp (2 ranks)' rank0.dot || fail "no tp collective in rank0.dot"
grep -q 'hexagon.*group dp (2 ranks)' rank0.dot || fail "no dp collective in rank0.dot"

# 3b. three axes (tp 2 with SP, cp 2, dp 2 on 8 ranks, LLaMA-style; depth 3 for its names): one
# box per layer part and phase, the tp collectives (SP all-gathers and reduce-scatters), the cp K/V ring and
# the gradients' all-reduce over dp x cp each a hexagon naming its group
L3=(--text-file "$DATA/tinyshakespeare.txt" --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64
    --micro-batch-size 2 --global-batch-size 8 --normalization RMSNorm --position-embedding-type rope --swiglu
    --ffn-hidden-size 128 --disable-bias-linear --untie-embeddings-and-output-weights)
"$RUN" --dry-run "${L3[@]}" --world-size 8 --tensor-model-parallel-size 2 --sequence-parallel --context-parallel-size 2 \
    --dump-dot-summary 'axes%r.dot' --dot-summary-depth 3 > axes.txt 2>&1 || { cat axes.txt; fail "tp2 x cp2 x dp2 dry run"; }
for r in 0 5; do
    accounts axes$r.dot "$(nodes axes.txt $r)" "$(collectives axes.txt $r)"
done
render axes0.dot
for g in 'tp (2 ranks)' 'cp (2 ranks)' 'dp_cp (4 ranks)'; do
    grep -q "hexagon.*group $g" axes0.dot || fail "no collective over $g in axes0.dot"
done
grep -q 'model.layers.1.self_attn\\nbackward: ' axes0.dot || fail "no box for layer 1's attention backward"
grep -q 'rank 0 of 8 (tp 2, cp 2, dp 2, sp)' axes0.dot || fail "the title does not name the three axes"
[ "$(grep -c 'shape=' axes0.dot)" -lt 120 ] || fail "axes0.dot: $(grep -c 'shape=' axes0.dot) shapes: not a summary a person reads"

# 4. filters: a phase list and a scope glob; depth 1 makes a layer one box
"$RUN" --dry-run --text-file "$DATA/tinyshakespeare.txt" --dump-dot-summary fwd.dot --dot-summary-phase forward \
    --dot-summary-scope 'h.1*' --dot-summary-depth 1 > fwd.txt 2>&1 || { cat fwd.txt; fail "filtered dump"; }
render fwd.dot
grep -q 'backward: \|optimizer: ' fwd.dot && fail "--dot-summary-phase forward kept other phases"
boxes=$(grep 'shape=box' fwd.dot | grep -v legend | grep -o 'label="[^\]*' | sort -u)
[ -n "$boxes" ] && ! grep -qv '^label="h\.1' <<< "$boxes" || fail "--dot-summary-scope kept other scopes: $boxes"
[ "$boxes" = 'label="h.1' ] || fail "--dot-summary-depth 1: want one box for layer 1, got $boxes"

# 5. bad filters are bad input: exit 2, nothing written
"$RUN" --dry-run --text-file "$DATA/tinyshakespeare.txt" --dump-dot-summary bad.dot --dot-summary-phase forwards \
    > bad.txt 2>&1
[ $? -eq 2 ] || fail "unknown phase: want exit 2"
grep -q "dot-summary-phase.*forwards" bad.txt || fail "unknown phase not named"
[ -e bad.dot ] && fail "bad input wrote a DOT file"
echo "ok: summaries of the default step, GPT-2 124M, tp2 x dp2 and tp2 x cp2 x dp2 ranks render; filters; bad input"
