/* Tokenization throughput (MB/s) of the BPE tokenizers, 1 worker vs all workers.
 *
 * Input: Tiny Shakespeare repeated to ~50 MB, cut into documents at blank lines (what
 * mgraph-preprocess does with --split-blank-lines). Each worker thread has its own
 * tokenizer (clone) and takes documents from a shared counter. Every configuration
 * runs 3 times with freshly opened tokenizers (a cold GPT-2 word cache) and the
 * median is reported. Not a test: run it by hand, on a quiet machine.
 *
 *   bench_tokenize [DATA_DIR [MEGABYTES [WORKERS]]]   (defaults tests/data 50 nproc) */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mgraph/tokenizer.h"
#include "bench_util.h"

typedef struct doc {
    const char *p;
    size_t n;
} doc;

typedef struct job {
    mg_tokenizer *tok;
    const doc *docs;
    size_t ndocs;
    atomic_size_t *next;
    uint64_t tokens;
    int failed;
} job;

static void *run_job(void *arg) {
    job *j = arg;
    mg_ids ids = {0};
    for (;;) {
        size_t s = atomic_fetch_add(j->next, 64);
        if (s >= j->ndocs) break;
        size_t e = s + 64 < j->ndocs ? s + 64 : j->ndocs;
        for (size_t i = s; i < e; i++) {
            ids.len = 0;
            if (mg_tokenizer_encode_append(j->tok, j->docs[i].p, j->docs[i].n, &ids, NULL)) j->failed = 1;
            j->tokens += ids.len;
        }
    }
    mg_ids_free(&ids);
    return NULL;
}

/* One timed pass; returns MB/s or -1. */
static double measure(const mg_tokenizer_config *cfg, int workers, const doc *docs, size_t ndocs, size_t bytes,
                      uint64_t *tokens) {
    mg_tokenizer *toks[256];
    job jobs[256];
    pthread_t th[256];
    mg_error err = {0};
    for (int w = 0; w < workers; w++) {
        if (mg_tokenizer_open(cfg, &toks[w], &err)) {
            fprintf(stderr, "bench_tokenize: %s\n", err.msg);
            return -1;
        }
    }
    atomic_size_t next = 0;
    double t0 = bench_now_s();
    for (int w = 0; w < workers; w++) {
        jobs[w] = (job){toks[w], docs, ndocs, &next, 0, 0};
        if (w > 0) pthread_create(&th[w], NULL, run_job, &jobs[w]);
    }
    run_job(&jobs[0]);
    for (int w = 1; w < workers; w++) pthread_join(th[w], NULL);
    double el = bench_now_s() - t0;
    *tokens = 0;
    int failed = 0;
    for (int w = 0; w < workers; w++) {
        *tokens += jobs[w].tokens;
        failed |= jobs[w].failed;
        mg_tokenizer_free(toks[w]);
    }
    return failed ? -1 : bytes / 1e6 / el;
}

int main(int argc, char **argv) {
    const char *data = argc > 1 ? argv[1] : "tests/data";
    double mb = argc > 2 ? atof(argv[2]) : 50;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int all = argc > 3 ? atoi(argv[3]) : (int)(ncpu > 0 ? ncpu : 1);
    if (all < 1 || all > 256 || !(mb > 0)) {
        fprintf(stderr, "usage: %s [DATA_DIR [MEGABYTES [WORKERS]]]\n", argv[0]);
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/tinyshakespeare.txt", data);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "bench_tokenize: cannot open %s\n", path);
        return 2;
    }
    fseek(f, 0, SEEK_END);
    size_t n1 = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    size_t reps = (size_t)(mb * 1e6 / (double)n1) + 1;
    char *text = malloc(n1 * reps + 1);
    if (!text || fread(text, 1, n1, f) != n1) return 1;
    fclose(f);
    for (size_t r = 1; r < reps; r++) memcpy(text + r * n1, text, n1);
    size_t total = n1 * reps;
    /* Documents: blocks separated by blank lines. */
    size_t cap = 1 << 16, ndocs = 0;
    doc *docs = malloc(cap * sizeof *docs);
    size_t start = 0;
    for (size_t i = 0; i + 1 < total; i++) {
        if (text[i] == '\n' && text[i + 1] == '\n') {
            if (ndocs == cap) docs = realloc(docs, (cap *= 2) * sizeof *docs);
            docs[ndocs++] = (doc){text + start, i + 1 - start};
            start = i + 2;
            i++;
        }
    }
    if (ndocs == cap) docs = realloc(docs, (cap + 1) * sizeof *docs);
    docs[ndocs++] = (doc){text + start, total - start};

    char v[4200], m[4200], sp[4200];
    snprintf(v, sizeof v, "%s/gpt2/vocab.json", data);
    snprintf(m, sizeof m, "%s/gpt2/merges.txt", data);
    snprintf(sp, sizeof sp, "%s/mistral/tokenizer.model", data);
    mg_tokenizer_config cfgs[2] = {{.type = "GPT2BPETokenizer", .vocab_file = v, .merge_file = m},
                                   {.type = "SentencePieceTokenizer", .model_file = sp}};
    int wl[2] = {1, all};
    printf("input: Tiny Shakespeare x %zu = %.1f MB, %zu documents; %ld CPUs online; median of 3 runs\n\n", reps,
           total / 1e6, ndocs, ncpu);
    printf("| tokenizer              | workers | MB/s (median) | runs (MB/s)            | tokens     |\n");
    printf("|------------------------|--------:|--------------:|------------------------|-----------:|\n");
    for (int t = 0; t < 2; t++) {
        for (int k = 0; k < (all > 1 ? 2 : 1); k++) {
            double r[3];
            uint64_t tokens = 0;
            for (int i = 0; i < 3; i++) {
                r[i] = measure(&cfgs[t], wl[k], docs, ndocs, total, &tokens);
                if (r[i] < 0) return 1;
            }
            double s[3] = {r[0], r[1], r[2]};
            qsort(s, 3, sizeof *s, bench_cmp_double);
            printf("| %-22s | %7d | %13.2f | %6.2f %6.2f %6.2f   | %10llu |\n", cfgs[t].type, wl[k], s[1], r[0], r[1], r[2],
                   (unsigned long long)tokens);
            fflush(stdout);
        }
    }
    free(docs);
    free(text);
    return 0;
}
