# Sourced by the mgraph-run test scripts (eod_mask.sh, per_token_loss.sh, params_norm.sh, documents.sh,
# decoupled_lr.sh, wd_schedule.sh):
# reading --metrics-file output, comparing two runs, and a dataset with many documents.

# (tests/support/ckpt.py: checkpoints read back whole and compared)
CKPT_PY=$(cd "$(dirname "${BASH_SOURCE[0]}")/../support" && pwd)/ckpt.py

# column NAME FILE: metric NAME of every iteration of a metrics file, one per line
column() { grep -o "\"$1\": [^,}]*" "$2" | awk '{print $2}'; }

# within NAME A B N [BOUND]: metric NAME of run A within BOUND (default 1e-5) relative of
# run B's, at each of exactly N iterations; prints the worst difference
within() {
    paste <(column "$1" "$2") <(column "$1" "$3") |
        awk -F'\t' -v name="$1" -v want="$4" -v bound="${5:-1e-5}" '
        { n++; d = $1 - $2; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > w) w = r; if (r > bound) bad++ }
        END { printf "  %s: %d iterations, worst relative difference %.3g (bound %s)\n", name, n, w, bound;
              exit (n != want || bad > 0) }'
}

# same_weights A B: every weight and Adam moment of run B's final checkpoint (B.ck) within
# tests/support/ckpt.py's bound of run A's (A.ck): a plan against the serial run
same_weights() { python3 "$CKPT_PY" compare "$1.ck" "$2.ck"; }

# train_n N OUT ARGS...: one serial mgraph-run ($RUN) with ARGS, metrics in OUT.jsonl, which
# must hold exactly N iterations, its final checkpoint in OUT.ck (unless ARGS has a --save
# of its own); the script's fail() on any error
train_n() {
    local n=$1 out=$2 save=()
    shift 2
    [[ " $* " == *" --save "* ]] || { rm -rf "$out.ck"; save=(--save "$out.ck"); }
    timeout 120 "$RUN" "$@" --metrics-file "$out.jsonl" "${save[@]}" > "$out.txt" 2>&1 ||
        { cat "$out.txt"; fail "run $out"; }
    [ "$(column lm_loss "$out.jsonl" | wc -l)" -eq "$n" ] || fail "$out: want $n iterations"
}

# lines_dataset PREPROCESS TEXT TOKENIZER-FLAGS...: lines_text_document in the working
# directory, each of the first 3000 non-empty lines of TEXT one document ended by EOD
# (end-of-document tokens every few tokens, unevenly placed in the samples)
lines_dataset() {
    local pre=$1 text=$2
    shift 2
    awk 'NR <= 3000 && length($0) > 0 { gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); printf "{\"text\": \"%s\"}\n", $0 }' \
        "$text" > lines.jsonl
    "$pre" --input lines.jsonl --output-prefix lines "$@" --append-eod --workers 1 > lines.pre.txt 2>&1 ||
        { cat lines.pre.txt; echo "FAIL: preprocess lines.jsonl"; exit 1; }
}
