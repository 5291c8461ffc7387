/* mgraph-preprocess: Megatron's tools/preprocess_data.py in C.
 *
 * Reads JSON Lines (one document per line, text under --json-keys) or plain text
 * files, tokenizes with --workers threads and writes {prefix}_{key}_document.bin/.idx.
 * Parallelism is batch-synchronous: the main thread reads a batch of documents,
 * workers take documents from it dynamically (JSON parsing + tokenizing), and the main
 * thread writes the batch in input order, so the output is identical for any --workers.
 * Exit status: 0 ok, 2 bad usage or bad input, 1 run-time failure. */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mgraph/infile.h"
#include "mgraph/dataset.h"
#include "mgraph/tokenizer.h"
#include "tool_signals.h"

#define MAX_KEYS 16
#define MAX_INPUTS 4096
#define BATCH_BYTES (2u << 20)
#define BATCH_DOCS 4096

typedef struct options {
    const char *inputs[MAX_INPUTS];
    int ninputs;
    int text_format, split_blank;
    const char *keys[MAX_KEYS];
    int nkeys;
    const char *prefix;
    int append_eod;
    int workers;
    double log_interval;
    mg_tokenizer_config tok;
    const char *special[130]; /* --tokenizer-special-tokens */
} options;

static const char *g_prog = "mgraph-preprocess";

static void usage(FILE *f) {
    fprintf(f,
            "usage: %s --input FILE --output-prefix PREFIX [options]\n"
            "\n"
            "Tokenizes documents into Megatron indexed datasets {PREFIX}_{KEY}_document.bin/.idx\n"
            "(the interface of Megatron's tools/preprocess_data.py).\n"
            "\n"
            "input:\n"
            "  --input FILE              JSON Lines: one JSON object per line (empty lines are skipped).\n"
            "                            With --input-format text: a text file; repeat --input for more.\n"
            "  --input-format jsonl|text default jsonl\n"
            "  --json-keys KEY [KEY...]  keys holding the text (default: text); one output per key; a list\n"
            "                            of strings is pre-split sentences, a sequence each (Megatron's)\n"
            "  --split-blank-lines       text input: each block separated by blank lines is a document\n"
            "                            (default: each file is one document)\n"
            "tokenizer:\n"
            "  --tokenizer-type TYPE     GPT2BPETokenizer | SentencePieceTokenizer | HuggingFaceTokenizer |\n"
            "                            TikTokenizer | NullTokenizer | ByteLevelTokenizer (default ByteLevelTokenizer)\n"
            "  --vocab-file FILE         GPT-2 vocab.json\n"
            "  --merge-file FILE         GPT-2 merges.txt\n"
            "  --tokenizer-model PATH    SentencePiece tokenizer.model | HuggingFaceTokenizer's folder (tokenizer.json,\n"
            "                            tokenizer_config.json) or tokenizer.json | TikTokenizer's vocabulary .json\n"
            "  --vocab-size N            NullTokenizer's vocabulary (required); TikTokenizer's (default 131072)\n"
            "  --tiktoken-pattern v1|v2  TikTokenizer's split pattern (default v2)\n"
            "  --tiktoken-num-special-tokens N  TikTokenizer's special ids (default 1000)\n"
            "  --tokenizer-special-tokens TOK [TOK...]  TikTokenizer's special tokens (default Megatron's seven)\n"
            "  --null-tokenizer-eod-id N NullTokenizer's end of document (default vocab - 1)\n"
            "  --tokenizer-hf-no-include-special-tokens  HuggingFaceTokenizer without the template's tokens (BOS)\n"
            "output:\n"
            "  --output-prefix PREFIX    output path prefix\n"
            "  --append-eod              end every non-empty document with the end-of-document token\n"
            "  --workers N               tokenizer threads (default 1); output does not depend on N\n"
            "  --log-interval SECONDS    seconds between progress lines when stderr is not a terminal\n"
            "                            (default 10; a terminal gets a live progress bar)\n"
            "  --keep-newlines           accepted for compatibility (no sentence splitting is done)\n"
            "  -h, --help                this help\n"
            "\n"
            "exit status: 0 success, 2 bad usage or input, 1 run-time failure\n",
            g_prog);
}

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "%s: ", g_prog);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(try --help)\n");
    return 2;
}

static int parse_args(int argc, char **argv, options *o) {
    memset(o, 0, sizeof *o);
    o->workers = 1;
    o->log_interval = 10;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        /* Accept --flag=value as well as --flag value. */
        char flag[64];
        const char *val = NULL;
        const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        if (eq && (size_t)(eq - a) < sizeof flag) {
            memcpy(flag, a, (size_t)(eq - a));
            flag[eq - a] = '\0';
            val = eq + 1;
            a = flag;
        }
#define NEXT()                                                                        \
    (val ? val : (i + 1 < argc ? argv[++i] : NULL))
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--input")) {
            const char *v = NEXT();
            if (!v) return usage_error("%s needs a file", a);
            if (o->ninputs == MAX_INPUTS) return usage_error("too many --input files%s", "");
            o->inputs[o->ninputs++] = v;
        } else if (!strcmp(a, "--input-format")) {
            const char *v = NEXT();
            if (!v || (strcmp(v, "jsonl") && strcmp(v, "json") && strcmp(v, "text")))
                return usage_error("--input-format must be jsonl or text (got '%s')", v ? v : "");
            o->text_format = !strcmp(v, "text");
        } else if (!strcmp(a, "--json-keys")) {
            o->nkeys = 0;
            if (val) o->keys[o->nkeys++] = val;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
                if (o->nkeys == MAX_KEYS) return usage_error("too many --json-keys%s", "");
                o->keys[o->nkeys++] = argv[++i];
            }
            if (o->nkeys == 0) return usage_error("%s needs at least one key", a);
        } else if (!strcmp(a, "--split-blank-lines")) {
            o->split_blank = 1;
        } else if (!strcmp(a, "--output-prefix")) {
            if (!(o->prefix = NEXT())) return usage_error("%s needs a value", a);
        } else if (!strcmp(a, "--append-eod")) {
            o->append_eod = 1;
        } else if (!strcmp(a, "--workers")) {
            const char *v = NEXT();
            char *end;
            long w = v ? strtol(v, &end, 10) : 0;
            if (!v || *end || w < 1 || w > 1024) return usage_error("--workers must be an integer in 1..1024 (got '%s')", v ? v : "");
            o->workers = (int)w;
        } else if (!strcmp(a, "--log-interval")) {
            const char *v = NEXT();
            char *end;
            double s = v ? strtod(v, &end) : 0;
            if (!v || *end || !(s > 0)) return usage_error("--log-interval must be a positive number (got '%s')", v ? v : "");
            o->log_interval = s;
        } else if (!strcmp(a, "--tokenizer-type")) {
            if (!(o->tok.type = NEXT())) return usage_error("%s needs a value", a);
        } else if (!strcmp(a, "--vocab-file")) {
            if (!(o->tok.vocab_file = NEXT())) return usage_error("%s needs a value", a);
        } else if (!strcmp(a, "--merge-file")) {
            if (!(o->tok.merge_file = NEXT())) return usage_error("%s needs a value", a);
        } else if (!strcmp(a, "--tokenizer-model")) {
            if (!(o->tok.model_file = NEXT())) return usage_error("%s needs a value", a);
        } else if (!strcmp(a, "--vocab-size") || !strcmp(a, "--null-tokenizer-eod-id") ||
                   !strcmp(a, "--tiktoken-num-special-tokens")) {
            const char *v = NEXT();
            char *end;
            long long x = v ? strtoll(v, &end, 10) : -1;
            if (!v || *end || x < 0 || x > INT32_MAX) return usage_error("%s needs an integer >= 0", a);
            if (!strcmp(a, "--vocab-size")) {
                if (x < 1) return usage_error("--vocab-size must be >= 1%s", "");
                o->tok.vocab_size = x;
            } else if (!strcmp(a, "--null-tokenizer-eod-id")) {
                o->tok.null_eod_set = 1;
                o->tok.null_eod_id = x;
            } else {
                if (x < 1) return usage_error("--tiktoken-num-special-tokens must be >= 1%s", "");
                o->tok.tiktoken_num_special_tokens = (int)x;
            }
        } else if (!strcmp(a, "--tiktoken-pattern")) {
            const char *v = NEXT();
            if (!v || (strcmp(v, "v1") && strcmp(v, "v2"))) return usage_error("--tiktoken-pattern must be v1 or v2 (got '%s')", v ? v : "");
            o->tok.tiktoken_pattern = v;
        } else if (!strcmp(a, "--tokenizer-special-tokens")) {
            int n = 0;
            if (val) o->special[n++] = val;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
                if (n == 129) return usage_error("too many --tokenizer-special-tokens%s", "");
                o->special[n++] = argv[++i];
            }
            if (n == 0) return usage_error("%s needs at least one token", a);
            o->special[n] = NULL;
            o->tok.special_tokens = o->special;
        } else if (!strcmp(a, "--tokenizer-hf-no-include-special-tokens")) {
            o->tok.hf_no_special_tokens = 1;
        } else if (!strcmp(a, "--keep-newlines")) {
            /* Megatron uses it with --split-sentences only. */
        } else if (!strcmp(a, "--split-sentences")) {
            return usage_error("--split-sentences is not supported (it needs NLTK's punkt)%s", "");
        } else {
            return usage_error("unknown option '%s'", argv[i]);
        }
#undef NEXT
    }
    if (o->ninputs == 0) return usage_error("--input is required%s", "");
    if (!o->prefix) return usage_error("--output-prefix is required%s", "");
    if (!o->text_format && o->ninputs > 1) return usage_error("JSON Lines input takes one --input file%s", "");
    if (o->split_blank && !o->text_format) return usage_error("--split-blank-lines applies to --input-format text%s", "");
    if (o->nkeys == 0) o->keys[o->nkeys++] = "text";
    if (o->text_format && (o->nkeys != 1 || strcmp(o->keys[0], "text")))
        return usage_error("--json-keys does not apply to text input (the output key is 'text')%s", "");
    return 0;
}

/* ---- one batch of documents ---- */

typedef struct item {
    const char *data; /* a JSON line or a raw text document, inside the batch buffer */
    size_t len;
    long lineno;
    /* results, per key: where the ids are in the worker's buffer */
    int worker;
    size_t off[MAX_KEYS], n[MAX_KEYS];
    /* the sequences of key k: lens.data[lens_off[k] ..][0 .. nlens[k]) (a JSON list's
     * sentences are a sequence each, as Megatron's; otherwise one) */
    size_t lens_off[MAX_KEYS], nlens[MAX_KEYS];
} item;

typedef struct batch {
    item *items;
    size_t n, cap;
    char *buf;
    size_t buf_len, buf_cap;
} batch;

typedef struct worker {
    int id;
    mg_tokenizer *tok;
    mg_ids ids;
    mg_ids lens; /* sequence lengths, per item and key */
    const options *o;
    batch *b;
    atomic_size_t *next;
    /* first failure in this worker: item index, status, message */
    size_t err_item;
    int err_rc;
    char err_msg[600];
} worker;

static void worker_fail(worker *w, size_t idx, int rc, const char *msg) {
    if (w->err_rc == 0 || idx < w->err_item) {
        w->err_item = idx;
        w->err_rc = rc;
        snprintf(w->err_msg, sizeof w->err_msg, "%s", msg);
    }
}

/* Encodes one text as a sequence of key k (none when it has no token), as Megatron's
 * Encoder.encode does for each sentence. */
static int add_sequence(worker *w, item *it, int k, const char *text, size_t len, mg_error *err) {
    size_t before = w->ids.len;
    int rc = mg_tokenizer_encode_append(w->tok, text, len, &w->ids, err);
    if (rc || w->ids.len == before) return rc;
    if ((rc = mg_ids_push(&w->lens, (int32_t)(w->ids.len - before), err))) return rc;
    it->nlens[k]++;
    return MG_OK;
}

/* Sets the item's id count for key k; Megatron appends EOD to non-empty documents only,
 * to their last sequence. */
static int add_eod(worker *w, item *it, int k, mg_error *err) {
    it->n[k] = w->ids.len - it->off[k];
    if (!w->o->append_eod || it->n[k] == 0) return MG_OK;
    int rc = mg_ids_push(&w->ids, mg_tokenizer_eod(w->tok), err);
    if (!rc) {
        it->n[k]++;
        w->lens.data[w->lens.len - 1]++;
    }
    return rc;
}

static void encode_item(worker *w, size_t idx) {
    item *it = &w->b->items[idx];
    const options *o = w->o;
    mg_error err = {0};
    it->worker = w->id;
    if (o->text_format) {
        it->off[0] = w->ids.len;
        it->lens_off[0] = w->lens.len;
        it->nlens[0] = 0;
        int rc = add_sequence(w, it, 0, it->data, it->len, &err);
        if (!rc) rc = add_eod(w, it, 0, &err);
        if (rc) worker_fail(w, idx, rc, err.msg);
        return;
    }
    json_error_t jerr;
    json_t *doc = json_loadb(it->data, it->len, JSON_ALLOW_NUL, &jerr);
    char msg[600];
    if (!doc || !json_is_object(doc)) {
        snprintf(msg, sizeof msg, "line %ld: %s", it->lineno, doc ? "not a JSON object" : jerr.text);
        worker_fail(w, idx, MG_ERR_INVALID, msg);
        json_decref(doc);
        return;
    }
    for (int k = 0; k < o->nkeys; k++) {
        json_t *v = json_object_get(doc, o->keys[k]);
        it->off[k] = w->ids.len;
        it->n[k] = 0;
        it->lens_off[k] = w->lens.len;
        it->nlens[k] = 0;
        size_t bad = 0;
        int is_list = json_is_array(v);
        for (size_t i = 0; is_list && !bad && i < json_array_size(v); i++) bad = json_is_string(json_array_get(v, i)) ? 0 : i + 1;
        if (!v || !(json_is_string(v) || is_list) || bad) {
            if (bad) snprintf(msg, sizeof msg, "line %ld: key \"%s\": element %zu of its list is not a string", it->lineno,
                              o->keys[k], bad - 1);
            else snprintf(msg, sizeof msg, "line %ld: key \"%s\" is %s", it->lineno, o->keys[k],
                          v ? "not a string or a list of strings" : "missing");
            worker_fail(w, idx, MG_ERR_INVALID, msg);
            break;
        }
        int rc = MG_OK;
        if (!is_list) rc = add_sequence(w, it, k, json_string_value(v), json_string_length(v), &err);
        for (size_t i = 0; is_list && !rc && i < json_array_size(v); i++) {
            json_t *e = json_array_get(v, i);
            rc = add_sequence(w, it, k, json_string_value(e), json_string_length(e), &err);
        }
        if (rc) {
            snprintf(msg, sizeof msg, "line %ld: %s", it->lineno, err.msg);
            worker_fail(w, idx, rc, msg);
            break;
        }
        if ((rc = add_eod(w, it, k, &err))) {
            worker_fail(w, idx, rc, err.msg);
            break;
        }
    }
    json_decref(doc);
}

static void *worker_main(void *arg) {
    worker *w = arg;
    for (;;) {
        /* Small chunks balance the load without much contention on the counter. */
        size_t start = atomic_fetch_add(w->next, 8);
        if (start >= w->b->n) break;
        size_t end = start + 8 < w->b->n ? start + 8 : w->b->n;
        for (size_t i = start; i < end; i++) encode_item(w, i);
    }
    return NULL;
}

static int batch_add(batch *b, const char *data, size_t len, long lineno) {
    if (b->n == b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 1024;
        item *ni = realloc(b->items, nc * sizeof *ni);
        if (!ni) return -1;
        b->items = ni;
        b->cap = nc;
    }
    if (b->buf_len + len + 1 > b->buf_cap) {
        size_t nc = b->buf_cap ? b->buf_cap : BATCH_BYTES + 4096;
        while (nc < b->buf_len + len + 1) nc *= 2;
        char *nb = realloc(b->buf, nc);
        if (!nb) return -1;
        /* items point into buf: store offsets until the batch is complete */
        b->buf = nb;
        b->buf_cap = nc;
    }
    memcpy(b->buf + b->buf_len, data, len);
    item *it = &b->items[b->n++];
    memset(it, 0, sizeof *it);
    it->data = (const char *)(uintptr_t)b->buf_len; /* offset; fixed up in batch_seal */
    it->len = len;
    it->lineno = lineno;
    b->buf_len += len;
    b->buf[b->buf_len++] = '\0';
    return 0;
}

static void batch_seal(batch *b) {
    for (size_t i = 0; i < b->n; i++) b->items[i].data = b->buf + (uintptr_t)b->items[i].data;
}

/* ---- input readers: fill a batch, return 1 at end of input ---- */

typedef struct reader {
    const options *o;
    int file;       /* index into o->inputs */
    FILE *f;
    long lineno;
    char *line;
    size_t line_cap;
    uint64_t bytes_read, bytes_total;
    /* text documents being accumulated (blank-line mode, or whole file) */
    char *doc;
    size_t doc_len, doc_cap;
    long doc_line;
} reader;

static int doc_append(reader *r, const char *s, size_t n) {
    if (r->doc_len + n > r->doc_cap) {
        size_t nc = r->doc_cap ? r->doc_cap * 2 : 1 << 16;
        while (nc < r->doc_len + n) nc *= 2;
        char *nd = realloc(r->doc, nc);
        if (!nd) return -1;
        r->doc = nd;
        r->doc_cap = nc;
    }
    memcpy(r->doc + r->doc_len, s, n);
    r->doc_len += n;
    return 0;
}

static int is_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n') return 0;
    return 1;
}

/* Returns 0 ok, 1 end of input, or -2 (input error, message printed) / -1 (no memory). */
static int read_batch(reader *r, batch *b) {
    b->n = 0;
    b->buf_len = 0;
    while (b->n < BATCH_DOCS && b->buf_len < BATCH_BYTES) {
        if (!r->f) {
            if (r->file >= r->o->ninputs) return b->n ? 0 : 1;
            const char *path = r->o->inputs[r->file];
            mg_error oerr = {0};
            if (mg_input_fopen(path, "--input", &r->f, &oerr)) {
                fprintf(stderr, "%s: %s\n", g_prog, oerr.msg);
                return -2;
            }
            r->lineno = 0;
            r->doc_len = 0;
            r->doc_line = 1;
        }
        ssize_t ll = getline(&r->line, &r->line_cap, r->f);
        if (ll < 0) {
            int bad = ferror(r->f);
            fclose(r->f);
            r->f = NULL;
            if (bad) {
                fprintf(stderr, "%s: error reading %s\n", g_prog, r->o->inputs[r->file]);
                return -2;
            }
            r->file++;
            /* End of a text file closes its last document. */
            if (r->o->text_format && (r->o->split_blank ? !is_blank(r->doc, r->doc_len) : 1)) {
                if (batch_add(b, r->doc ? r->doc : "", r->doc_len, r->doc_line)) return -1;
            }
            r->doc_len = 0;
            continue;
        }
        r->lineno++;
        r->bytes_read += (uint64_t)ll;
        if (!r->o->text_format) {
            if (is_blank(r->line, (size_t)ll)) continue; /* tolerate blank lines (e.g. a final one) */
            if (batch_add(b, r->line, (size_t)ll, r->lineno)) return -1;
        } else if (r->o->split_blank && is_blank(r->line, (size_t)ll)) {
            if (!is_blank(r->doc, r->doc_len) && batch_add(b, r->doc, r->doc_len, r->doc_line)) return -1;
            r->doc_len = 0;
            r->doc_line = r->lineno + 1;
        } else {
            if (r->o->split_blank && r->doc_len == 0) r->doc_line = r->lineno;
            if (doc_append(r, r->line, (size_t)ll)) return -1;
        }
    }
    return 0;
}

/* ---- progress ---- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void progress(int tty, int final, double t0, double *last, double interval, uint64_t docs, uint64_t tokens,
                     uint64_t bytes, uint64_t total) {
    double t = now_s();
    if (!final && t - *last < (tty ? 0.2 : interval)) return;
    *last = t;
    double el = t - t0 > 1e-9 ? t - t0 : 1e-9;
    double mbs = bytes / 1e6 / el;
    double frac = total ? (double)bytes / (double)total : 0;
    if (frac > 1) frac = 1;
    double eta = mbs > 0 && total > bytes ? (total - bytes) / 1e6 / mbs : 0;
    if (tty) {
        char bar[31];
        int fill = (int)(frac * 30);
        for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
        bar[30] = '\0';
        fprintf(stderr, "\r[%s] %3.0f%% %llu docs %.1f MB %.2f MB/s ETA %um%02us ", bar, frac * 100,
                (unsigned long long)docs, bytes / 1e6, mbs, (unsigned)eta / 60, (unsigned)eta % 60);
        if (final) fputc('\n', stderr);
    } else if (!final) {
        fprintf(stderr, "%s: %llu documents, %llu tokens, %.1f/%.1f MB, %.2f MB/s, ETA %.0f s\n", g_prog,
                (unsigned long long)docs, (unsigned long long)tokens, bytes / 1e6, total / 1e6, mbs, eta);
    }
    fflush(stderr);
}

/* The input an output file of `base` (.bin or .idx) would replace, or NULL. The
 * output is renamed over the target at the end, so writing onto an input would
 * replace the very data being read. */
static const char *output_is_input(const options *o, const char *base) {
    char path[8200];
    for (int e = 0; e < 2; e++) {
        snprintf(path, sizeof path, "%s.%s", base, e ? "idx" : "bin");
        struct stat so, si;
        if (stat(path, &so) != 0) continue;
        for (int i = 0; i < o->ninputs; i++)
            if (stat(o->inputs[i], &si) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino) return o->inputs[i];
    }
    return NULL;
}

int main(int argc, char **argv) {
    options o;
    mg_tool_install_fatal_handlers("mgraph-preprocess", NULL);
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc;
    uint64_t total = 0;
    for (int i = 0; i < o.ninputs; i++) {
        struct stat st;
        if (stat(o.inputs[i], &st) != 0) {
            fprintf(stderr, "%s: cannot open %s: %s\n", g_prog, o.inputs[i], strerror(errno));
            return 2;
        }
        if (S_ISDIR(st.st_mode)) {
            fprintf(stderr, "%s: %s is a directory, not an input file\n", g_prog, o.inputs[i]);
            return 2;
        }
        total += (uint64_t)st.st_size;
    }
    mg_error err = {0};
    mg_tokenizer *tok0;
    if ((rc = mg_tokenizer_open(&o.tok, &tok0, &err))) {
        fprintf(stderr, "%s: %s\n", g_prog, err.msg);
        return mg_status_is_usage(rc) ? 2 : 1;
    }
    if (o.append_eod && mg_tokenizer_eod(tok0) < 0) {
        fprintf(stderr, "%s: --append-eod: %s has no end-of-document token\n", g_prog, mg_tokenizer_type(tok0));
        mg_tokenizer_free(tok0);
        return 2;
    }
    json_object_seed(0); /* jansson: seed its hash once, before threads parse */
    worker *ws = calloc((size_t)o.workers, sizeof *ws);
    mg_indexed_writer *out[MAX_KEYS] = {0};
    pthread_t *th = calloc((size_t)o.workers, sizeof *th);
    batch b = {0};
    reader r = {0};
    r.o = &o;
    r.bytes_total = total;
    int exit_code = 0;
    if (!ws || !th) {
        fprintf(stderr, "%s: out of memory\n", g_prog);
        exit_code = 1;
        goto done;
    }
    for (int w = 0; w < o.workers; w++) {
        ws[w].id = w;
        ws[w].o = &o;
        if (w == 0) ws[w].tok = tok0;
        else if ((rc = mg_tokenizer_clone(tok0, &ws[w].tok, &err))) {
            fprintf(stderr, "%s: %s\n", g_prog, err.msg);
            exit_code = 1;
            goto done;
        }
    }
    int dtype = mg_indexed_dtype_for_vocab(mg_tokenizer_vocab_size(tok0));
    for (int k = 0; k < o.nkeys; k++) {
        char path[8192];
        if (snprintf(path, sizeof path, "%s_%s_document", o.prefix, o.keys[k]) >= (int)sizeof path - 4) {
            fprintf(stderr, "%s: --output-prefix %s is too long\n", g_prog, o.prefix);
            exit_code = 2;
            goto done;
        }
        const char *clash = output_is_input(&o, path);
        if (clash) {
            fprintf(stderr, "%s: the output %s.{bin,idx} would replace the input %s: choose another --output-prefix\n",
                    g_prog, path, clash);
            exit_code = 2;
            goto done;
        }
        if ((rc = mg_indexed_writer_open(path, dtype, &out[k], &err))) {
            fprintf(stderr, "%s: %s\n", g_prog, err.msg);
            exit_code = 1;
            goto done;
        }
    }
    int tty = isatty(STDERR_FILENO);
    double t0 = now_s(), last = t0;
    uint64_t docs = 0, tokens = 0;
    for (;;) {
        int st = read_batch(&r, &b);
        if (st == 1) break;
        if (st < 0) {
            if (st == -1) fprintf(stderr, "%s: out of memory\n", g_prog);
            exit_code = st == -2 ? 2 : 1;
            goto done;
        }
        batch_seal(&b);
        atomic_size_t next = 0;
        for (int w = 0; w < o.workers; w++) {
            ws[w].b = &b;
            ws[w].next = &next;
            ws[w].ids.len = 0;
            ws[w].lens.len = 0;
            ws[w].err_rc = 0;
        }
        if (o.workers == 1) {
            worker_main(&ws[0]);
        } else {
            int started = 0;
            for (int w = 1; w < o.workers; w++)
                if (pthread_create(&th[w], NULL, worker_main, &ws[w]) == 0) started = w;
                else break;
            worker_main(&ws[0]); /* the main thread works too */
            for (int w = 1; w <= started; w++) pthread_join(th[w], NULL);
        }
        /* Report the earliest failing document, whichever worker saw it. */
        worker *bad = NULL;
        for (int w = 0; w < o.workers; w++)
            if (ws[w].err_rc && (!bad || ws[w].err_item < bad->err_item)) bad = &ws[w];
        if (bad) {
            if (o.text_format) fprintf(stderr, "%s: %s\n", g_prog, bad->err_msg);
            else fprintf(stderr, "%s: %s: %s\n", g_prog, o.inputs[0], bad->err_msg);
            exit_code = mg_status_is_usage(bad->err_rc) ? 2 : 1;
            goto done;
        }
        for (size_t i = 0; i < b.n && !rc; i++) {
            item *it = &b.items[i];
            mg_ids *ids = &ws[it->worker].ids;
            for (int k = 0; k < o.nkeys && !rc; k++) {
                /* One sequence per text (a list: per sentence with tokens); an empty
                 * document still gets its document-index entry, as in Megatron. */
                const int32_t *len = it->nlens[k] ? ws[it->worker].lens.data + it->lens_off[k] : NULL;
                for (size_t q = 0, at = it->off[k]; q < it->nlens[k] && !rc; at += (size_t)len[q++])
                    rc = mg_indexed_writer_add_tokens(out[k], ids->data + at, (size_t)len[q], &err);
                if (!rc) rc = mg_indexed_writer_end_document(out[k], &err);
                tokens += it->n[k];
            }
            docs++;
        }
        if (rc) {
            fprintf(stderr, "%s: %s\n", g_prog, err.msg);
            exit_code = 1;
            goto done;
        }
        progress(tty, 0, t0, &last, o.log_interval, docs, tokens, r.bytes_read, total);
    }
    for (int k = 0; k < o.nkeys; k++) {
        if ((rc = mg_indexed_writer_finalize(out[k], &err))) {
            fprintf(stderr, "%s: %s\n", g_prog, err.msg);
            exit_code = 1;
            goto done;
        }
    }
    progress(tty, 1, t0, &last, o.log_interval, docs, tokens, r.bytes_read, total);
    double el = now_s() - t0;
    fprintf(stderr, "%s: %llu documents, %llu tokens, %.1f MB in %.2f s (%.2f MB/s, %d workers) -> %s_%s_document.{bin,idx}%s\n",
            g_prog, (unsigned long long)docs, (unsigned long long)tokens, r.bytes_read / 1e6, el,
            el > 0 ? r.bytes_read / 1e6 / el : 0, o.workers, o.prefix, o.keys[0], o.nkeys > 1 ? " (and the other keys)" : "");
done:
    for (int k = 0; k < o.nkeys; k++) mg_indexed_writer_free(out[k]);
    if (ws)
        for (int w = 0; w < o.workers; w++) {
            if (w > 0) mg_tokenizer_free(ws[w].tok);
            mg_ids_free(&ws[w].ids);
            mg_ids_free(&ws[w].lens);
        }
    mg_tokenizer_free(tok0);
    free(ws);
    free(th);
    free(b.items);
    free(b.buf);
    free(r.line);
    free(r.doc);
    if (r.f) fclose(r.f);
    return exit_code;
}
