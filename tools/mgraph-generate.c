/* mgraph-generate: text from a checkpoint (mgraph-run --save, or a Hugging Face model
 * imported by mgraph-convert --from-hf).
 *
 *   mgraph-generate --load CKPT [--prompt TEXT]... [--prompt-file FILE] [--max-new-tokens N]
 *                   [--greedy | --temperature T --top-k K --top-p P --seed S] [tokenizer flags]
 *
 * The model is the one the checkpoint's flags describe (tools/generate_model.c); each
 * prompt is run once through a prefill graph, then one token at a time through a decode
 * graph that reads the keys and values of the earlier tokens from a cache
 * (models/gpt_decode.c). The reference executor runs both, on one rank or, under mpirun
 * with --tensor-model-parallel-size, each rank its block of them. Every input is
 * checked (the checkpoint, the flags, every prompt tokenized and fitting the model's
 * positions) before anything is printed: usage and input errors exit 2, run-time
 * failures 1.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "blas_env.h"
#include "generate_model.h"
#include "mgraph/generate.h"
#include "mgraph/infile.h"
#include "mgraph/plan.h"
#include "mgraph/trainer.h"

typedef struct gen_opts {
    const char *load, *prompt_file;
    const char *prompts[64];
    int n_prompts;
    int64_t max_new;
    int tp;
    mg_sampling s;
    bool ignore_eos, no_cache, json, help;
    int tok_argc;
    char *tok_argv[64];
} gen_opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: mgraph-generate --load CKPT (--prompt TEXT ... | --prompt-file FILE) [options] [tokenizer flags]\n\n"
            "Samples text from an mgraph checkpoint (mgraph-run --save, mgraph-convert --from-hf / --from-megatron):\n"
            "the model its flags describe, a key/value cache (prefill the prompt, then one token per step), one rank\n"
            "or, under mpirun, tensor parallelism over every rank (the same tokens as one rank).\n\n"
            "  --load CKPT               checkpoint directory (its tracker) or an iteration directory\n"
            "  --prompt TEXT             a prompt (repeatable, up to 64)\n"
            "  --prompt-file FILE        prompts, one per line (blank lines skipped)\n"
            "  --max-new-tokens N        tokens to generate per prompt (default 32; --num-tokens-to-generate)\n"
            "  --greedy                  the most likely token each step (transformers' do_sample=False)\n"
            "  --temperature T           logits / T before sampling (default 1.0; 0 = --greedy)\n"
            "  --top-k K                 sample among the K most likely (0 = all; 1 = --greedy)\n"
            "  --top-p P                 sample among the most likely whose probabilities sum past P (0 = all)\n"
            "  --seed S                  the draws' seed (default 1234): same seed, same text\n"
            "  --ignore-eos              do not stop at the tokenizer's end-of-document token\n"
            "  --no-kv-cache             recompute the whole sequence for every token (slow; for checking)\n"
            "  --tensor-model-parallel-size N  split the model over the N ranks mpirun started (default 1)\n"
            "  --json                    one JSON object per prompt: prompt, prompt_tokens, tokens, logprobs, text, stop\n"
            "tokenizer flags, as mgraph-run takes them (default: the checkpoint's --tokenizer-type):\n"
            "  --tokenizer-type T --vocab-file F --merge-file F --tokenizer-model F --vocab-size N\n"
            "  --null-tokenizer-eod-id N --tiktoken-pattern P --tiktoken-num-special-tokens N\n"
            "  --tokenizer-special-tokens T... --tokenizer-hf-no-include-special-tokens\n"
            "Generation stops at the tokenizer's end-of-document token or after N tokens. tokens/s goes to stderr.\n");
}

static bool is_tok_flag(const char *a, bool *takes_value, bool *list) {
    static const char *valued[] = {"--tokenizer-type", "--vocab-file", "--merge-file", "--tokenizer-model", "--vocab-size",
                                   "--null-tokenizer-eod-id", "--tiktoken-pattern", "--tiktoken-num-special-tokens"};
    *list = !strcmp(a, "--tokenizer-special-tokens");
    *takes_value = false;
    for (size_t i = 0; i < sizeof valued / sizeof *valued; i++)
        if (!strcmp(a, valued[i])) *takes_value = true;
    return *takes_value || *list || !strcmp(a, "--tokenizer-hf-no-include-special-tokens");
}

static int parse_num(const char *flag, const char *v, double lo, double hi, bool integer, double *out, mg_error *err) {
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    if (!*v || *end || errno || isnan(x) || x < lo || x > hi || (integer && x != floor(x)))
        return mg_error_set(err, MG_ERR_INVALID, "%s '%s': want %s in [%g, %g]", flag, v, integer ? "an integer" : "a number",
                            lo, hi);
    *out = x;
    return MG_OK;
}

static int parse(int argc, char **argv, gen_opts *o, mg_error *err) {
    memset(o, 0, sizeof *o);
    o->max_new = 32;
    o->tp = 1;
    o->s.temperature = 1.0f;
    o->s.seed = 1234; /* Megatron's --seed default */
    bool greedy = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool tv = false, tl = false;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            o->help = true;
            return MG_OK;
        }
        if (is_tok_flag(a, &tv, &tl)) {
            if (o->tok_argc + 2 >= 64) return mg_error_set(err, MG_ERR_INVALID, "too many tokenizer flags");
            o->tok_argv[o->tok_argc++] = argv[i];
            if (tv) {
                if (i + 1 >= argc) return mg_error_set(err, MG_ERR_INVALID, "%s needs a value", a);
                o->tok_argv[o->tok_argc++] = argv[++i];
            }
            while (tl && i + 1 < argc && strncmp(argv[i + 1], "--", 2) && o->tok_argc + 1 < 64)
                o->tok_argv[o->tok_argc++] = argv[++i];
            continue;
        }
        if (!strcmp(a, "--greedy")) { greedy = true; continue; }
        if (!strcmp(a, "--ignore-eos")) { o->ignore_eos = true; continue; }
        if (!strcmp(a, "--no-kv-cache")) { o->no_cache = true; continue; }
        if (!strcmp(a, "--json")) { o->json = true; continue; }
        const char *valued[] = {"--load", "--prompt", "--prompt-file", "--max-new-tokens", "--num-tokens-to-generate",
                                "--temperature", "--top-k", "--top_k", "--top-p", "--top_p", "--seed",
                                "--tensor-model-parallel-size"};
        bool known = false;
        for (size_t k = 0; k < sizeof valued / sizeof *valued; k++) known |= !strcmp(a, valued[k]);
        if (!known)
            return mg_error_set(err, MG_ERR_INVALID, "unknown flag '%s' (mgraph-generate --help lists them)", a);
        if (i + 1 >= argc) return mg_error_set(err, MG_ERR_INVALID, "%s needs a value", a);
        const char *v = argv[++i];
        double x = 0;
        int rc = MG_OK;
        if (!strcmp(a, "--load")) o->load = v;
        else if (!strcmp(a, "--prompt-file")) o->prompt_file = v;
        else if (!strcmp(a, "--prompt")) {
            if (o->n_prompts == 64) return mg_error_set(err, MG_ERR_INVALID, "more than 64 --prompt: use --prompt-file");
            o->prompts[o->n_prompts++] = v;
        } else if (!strcmp(a, "--max-new-tokens") || !strcmp(a, "--num-tokens-to-generate")) {
            if (!(rc = parse_num(a, v, 1, 1e7, true, &x, err))) o->max_new = (int64_t)x;
        } else if (!strcmp(a, "--temperature")) {
            if (!(rc = parse_num(a, v, 0, 1e6, false, &x, err))) o->s.temperature = (float)x;
        } else if (!strcmp(a, "--top-k") || !strcmp(a, "--top_k")) {
            if (!(rc = parse_num(a, v, 0, 1e9, true, &x, err))) o->s.top_k = (int)x;
        } else if (!strcmp(a, "--top-p") || !strcmp(a, "--top_p")) {
            if (!(rc = parse_num(a, v, 0, 1, false, &x, err))) o->s.top_p = (float)x;
        } else if (!strcmp(a, "--tensor-model-parallel-size")) {
            if (!(rc = parse_num(a, v, 1, 4096, true, &x, err))) o->tp = (int)x;
        } else if (!strcmp(a, "--seed")) {
            if (!(rc = parse_num(a, v, 0, 9007199254740992.0, true, &x, err))) o->s.seed = (uint64_t)x;
        }
        if (rc) return rc;
    }
    if (!o->load) return mg_error_set(err, MG_ERR_INVALID, "--load CKPT is required (mgraph-generate --help)");
    if (!o->n_prompts && !o->prompt_file)
        return mg_error_set(err, MG_ERR_INVALID, "give --prompt TEXT or --prompt-file FILE");
    /* Megatron's: top-k 1 is greedy; transformers': temperature 0 is not sampling */
    o->s.greedy = greedy || o->s.top_k == 1 || o->s.temperature == 0.0f;
    return MG_OK;
}

/* ---- prompts ------------------------------------------------------------------------------------ */
typedef struct prompt {
    char *text;
    int32_t *ids;
    size_t n;
} prompt;

static int add_prompt(prompt **ps, int *n, int *cap, const char *text, size_t len, mg_error *err) {
    if (*n == *cap) {
        int nc = *cap ? 2 * *cap : 16;
        prompt *q = realloc(*ps, (size_t)nc * sizeof *q);
        if (!q) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
        *ps = q, *cap = nc;
    }
    prompt *p = &(*ps)[*n];
    memset(p, 0, sizeof *p);
    p->text = malloc(len + 1);
    if (!p->text) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    memcpy(p->text, text, len);
    p->text[len] = '\0';
    (*n)++;
    return MG_OK;
}

static int read_prompts(const gen_opts *o, prompt **ps, int *n, mg_error *err) {
    int cap = 0, rc = MG_OK;
    *ps = NULL, *n = 0;
    for (int i = 0; i < o->n_prompts && !rc; i++) rc = add_prompt(ps, n, &cap, o->prompts[i], strlen(o->prompts[i]), err);
    if (rc || !o->prompt_file) return rc;
    FILE *f = NULL;
    rc = mg_input_fopen(o->prompt_file, "--prompt-file", &f, err);
    if (rc) return rc;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    while (!rc && (len = getline(&line, &lcap, f)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
        if (memchr(line, '\0', (size_t)len))
            rc = mg_error_set(err, MG_ERR_INVALID, "--prompt-file %s: a line holds a NUL byte", o->prompt_file);
        else if (len > 0) rc = add_prompt(ps, n, &cap, line, (size_t)len, err);
    }
    if (!rc && ferror(f)) rc = mg_error_set(err, MG_ERR_IO, "--prompt-file %s: %s", o->prompt_file, strerror(errno));
    free(line);
    fclose(f);
    if (!rc && *n == 0) rc = mg_error_set(err, MG_ERR_INVALID, "--prompt-file %s has no prompt", o->prompt_file);
    return rc;
}

static void free_prompts(prompt *ps, int n) {
    for (int i = 0; i < n; i++) {
        free(ps[i].text);
        free(ps[i].ids);
    }
    free(ps);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- output --------------------------------------------------------------------------------------- */
static int print_result(const gen_model *gm, const gen_opts *o, const prompt *pr, const mg_generation *r, mg_error *err) {
    size_t n_new = r->ids.len - pr->n;
    const int32_t *gen = r->ids.data + pr->n;
    /* the completion's text: decoded after the prompt's tokens and cut after the prompt's
     * own decoding (tokenizers that join words, SentencePiece's spaces, NullTokenizer's
     * separators, decode a token by what precedes it); the end-of-document token that
     * stopped it left out */
    size_t n_all = r->ids.len - (!strcmp(r->stop, "eos") ? 1 : 0);
    char *full = NULL, *pre = NULL;
    size_t flen = 0, plen = 0;
    int rc = mg_tokenizer_decode(gm->tok, r->ids.data, n_all, &full, &flen, err);
    if (!rc) rc = mg_tokenizer_decode(gm->tok, r->ids.data, pr->n, &pre, &plen, err);
    if (rc) {
        free(full);
        free(pre);
        return rc;
    }
    bool after = plen <= flen && !memcmp(full, pre, plen);
    char *text = after ? full + plen : full;
    size_t len = after ? flen - plen : flen;
    if (o->json) {
        json_t *pt = json_array(), *t = json_array(), *lp = json_array();
        for (size_t i = 0; i < pr->n; i++) json_array_append_new(pt, json_integer(pr->ids[i]));
        for (size_t i = 0; i < n_new; i++) {
            json_array_append_new(t, json_integer(gen[i]));
            json_array_append_new(lp, json_real(r->logprobs[i]));
        }
        json_t *j = json_pack("{s:s, s:o, s:o, s:o, s:s%, s:s}", "prompt", pr->text, "prompt_tokens", pt, "tokens", t,
                              "logprobs", lp, "text", text, len, "stop", r->stop);
        char *s = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
        if (s) printf("%s\n", s);
        else rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory (or the text is not UTF-8)");
        free(s);
        json_decref(j);
    } else if (after) {
        printf("%s%.*s\n", pr->text, (int)len, text);
    } else { /* (the decoded sequence does not start with the decoded prompt: print it whole) */
        printf("%.*s\n", (int)len, text);
    }
    free(full);
    free(pre);
    if (!rc && fflush(stdout) != 0) rc = mg_error_set(err, MG_ERR_IO, "writing the output: %s", strerror(errno));
    return rc;
}

int main(int argc, char **argv) {
    mg_tool_pick_openblas_kernel(argv);
    gen_opts o;
    mg_error err = {0};
    if (parse(argc, argv, &o, &err)) {
        fprintf(stderr, "mgraph-generate: error: %s\n", err.msg);
        return 2;
    }
    if (o.help) {
        usage(stdout);
        return 0;
    }
    /* tensor parallelism over every rank mpirun started (no other parallelism) */
    const char *ws = getenv("OMPI_COMM_WORLD_SIZE");
    int world = ws && atoi(ws) > 1 ? atoi(ws) : 1, rank = 0;
    if (world != o.tp) {
        fprintf(stderr, "mgraph-generate: error: --tensor-model-parallel-size %d on %d rank%s: tensor parallelism over "
                        "every rank only (no data or pipeline parallelism)\n", o.tp, world, world == 1 ? "" : "s");
        return 2;
    }
    mg_plan plan;
    mg_mesh mesh;
    mg_comm *comm = NULL;
    mg_generate_parallel par = {0};
    if (world > 1) {
        mg_plan_defaults(&plan);
        plan.tp = o.tp;
        int wrc = mg_world_init(&argc, &argv, &err);
        rank = mg_world_rank();
        if (!wrc) wrc = mg_plan_check(&plan, world, &err);
        if (!wrc) wrc = mg_plan_mesh(&plan, world, rank, &mesh, &err);
        if (!wrc) wrc = mg_comm_new(&mesh, &comm, &err);
        if (wrc) {
            fprintf(stderr, "mgraph-generate: error: %s\n", err.msg);
            return 1;
        }
        par = (mg_generate_parallel){.plan = &plan, .mesh = &mesh, .comm = comm};
        if (rank != 0 && !freopen("/dev/null", "w", stdout)) { /* (rank 0 prints the text) */
            fprintf(stderr, "mgraph-generate: error: rank %d: /dev/null: %s\n", rank, strerror(errno));
            return 1;
        }
    }
    gen_model gm;
    prompt *ps = NULL;
    int np = 0;
    int rc = read_prompts(&o, &ps, &np, &err);
    double tl = now_s();
    if (!rc) rc = gen_model_open(o.load, o.tok_argc, o.tok_argv, &gm, &err);
    if (rc) {
        if (rank == 0) fprintf(stderr, "mgraph-generate: error: %s\n", err.msg); /* (every rank read the same input) */
        free_prompts(ps, np);
        mg_comm_free(comm);
        return rc == MG_ERR_NOMEM ? 1 : 2;
    }
    par.weights_graph = gm.g;
    tl = now_s() - tl;
    /* every prompt tokenized and checked before anything is printed */
    int64_t maxpos = gm.model.max_position;
    for (int i = 0; i < np && !rc; i++) {
        rc = mg_tokenizer_encode(gm.tok, ps[i].text, strlen(ps[i].text), &ps[i].ids, &ps[i].n, &err);
        if (!rc && ps[i].n == 0) rc = mg_error_set(&err, MG_ERR_INVALID, "prompt %d encodes to no token", i + 1);
        if (!rc && (int64_t)ps[i].n + o.max_new > maxpos)
            rc = mg_error_set(&err, MG_ERR_INVALID,
                              "prompt %d has %zu tokens: with --max-new-tokens %lld it needs %lld positions, the model "
                              "has %lld (--max-position-embeddings)",
                              i + 1, ps[i].n, (long long)o.max_new, (long long)ps[i].n + o.max_new, (long long)maxpos);
    }
    mg_sampler smp = {0};
    if (!rc && mg_sampler_init(&smp, gm.vocab)) rc = mg_error_set(&err, MG_ERR_NOMEM, "out of memory");
    if (rc) {
        if (rank == 0) fprintf(stderr, "mgraph-generate: error: %s\n", err.msg);
        mg_sampler_free(&smp);
        gen_model_close(&gm);
        free_prompts(ps, np);
        mg_comm_free(comm);
        return rc == MG_ERR_NOMEM ? 1 : 2;
    }
    double prefill_s = 0, decode_s = 0;
    int64_t prefilled = 0, generated = 0, decoded = 0;
    for (int i = 0; i < np && !rc; i++) {
        mg_generation r = {0};
        mg_generate_options go = {.sampling = o.s, .max_new = o.max_new,
                                  .eod = o.ignore_eos ? -1 : mg_tokenizer_eod(gm.tok), .no_cache = o.no_cache,
                                  .parallel = comm ? &par : NULL};
        rc = mg_gpt_generate(&gm.model, gm.st, ps[i].ids, (int64_t)ps[i].n, &go, (uint64_t)i, &smp, &r, &err);
        if (!rc) rc = print_result(&gm, &o, &ps[i], &r, &err);
        prefill_s += r.prefill_s, decode_s += r.decode_s, prefilled += r.prefilled;
        int64_t n_new = (int64_t)r.ids.len - (int64_t)ps[i].n;
        generated += n_new > 0 ? n_new : 0;
        decoded += n_new > 1 ? n_new - 1 : 0; /* (the first comes from the prefill) */
        mg_generation_free(&r);
    }
    if (rc) {
        fprintf(stderr, "mgraph-generate: error: %s\n", err.msg);
        if (world > 1) mg_world_abort(1); /* (the other ranks may wait in a collective) */
    } else if (rank == 0) {
        fprintf(stderr,
                "mgraph-generate: %d prompt%s, %lld tokens generated in %.3f s: %.2f tokens/s (load %.2f s; prefill %lld "
                "tokens in %.3f s, %.1f tokens/s; decode %lld tokens in %.3f s, %.2f tokens/s%s)\n",
                np, np == 1 ? "" : "s", (long long)generated, prefill_s + decode_s,
                (double)generated / (prefill_s + decode_s > 0 ? prefill_s + decode_s : 1), tl, (long long)prefilled,
                prefill_s, (double)prefilled / (prefill_s > 0 ? prefill_s : 1), (long long)decoded, decode_s,
                (double)decoded / (decode_s > 0 ? decode_s : 1), o.no_cache ? ", no key/value cache" : "");
    }
    mg_sampler_free(&smp);
    gen_model_close(&gm);
    free_prompts(ps, np);
    mg_comm_free(comm);
    return rc ? 1 : 0;
}
