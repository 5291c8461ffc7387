/* Tokenizer front end: picks the implementation by Megatron's type name and owns
 * what every implementation shares (config copies, id buffers, vocab padding). */
#include "mgraph/infile.h"
#include "io/tok_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int mg_ids_reserve(mg_ids *ids, size_t cap, mg_error *err) {
    if (cap <= ids->cap) return MG_OK;
    size_t nc = ids->cap ? ids->cap : 256;
    while (nc < cap) nc *= 2;
    int32_t *nd = realloc(ids->data, nc * sizeof *nd);
    if (!nd) return mg_error_set(err, MG_ERR_NOMEM, "out of memory growing a token buffer to %zu ids", nc);
    ids->data = nd;
    ids->cap = nc;
    return MG_OK;
}

int mg_ids_push(mg_ids *ids, int32_t id, mg_error *err) {
    if (ids->len == ids->cap) {
        int rc = mg_ids_reserve(ids, ids->len + 1, err);
        if (rc) return rc;
    }
    ids->data[ids->len++] = id;
    return MG_OK;
}

void mg_ids_free(mg_ids *ids) {
    free(ids->data);
    ids->data = NULL;
    ids->len = ids->cap = 0;
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

/* A tokenizer file must be a regular file: a directory would reach the JSON or
 * protobuf parser as a read error, /dev/zero would be read forever. */
static int check_file(const char *path, const char *flag, mg_error *err) {
    return path ? mg_input_check(path, flag, err) : MG_OK;
}


static void tok_release(mg_tokenizer *t) {
    if (t->ops && t->impl) t->ops->destroy(t->impl);
    free(t->vocab_file);
    free(t->merge_file);
    free(t->model_file);
    free(t->tiktoken_pattern);
    if (t->special_tokens)
        for (char **p = t->special_tokens; *p; p++) free(*p);
    free(t->special_tokens);
    free(t);
}

/* Keeps a copy of the configuration in t (t->cfg points at the copies), so that clone
 * can reopen it and the caller's strings need not outlive the tokenizer. */
static int copy_config(mg_tokenizer *t, const mg_tokenizer_config *cfg, mg_error *err) {
    if (cfg) t->cfg = *cfg;
    t->cfg.type = NULL;
    t->cfg.vocab_file = t->vocab_file = dup_or_null(t->cfg.vocab_file);
    t->cfg.merge_file = t->merge_file = dup_or_null(t->cfg.merge_file);
    t->cfg.model_file = t->model_file = dup_or_null(t->cfg.model_file);
    t->cfg.tiktoken_pattern = t->tiktoken_pattern = dup_or_null(t->cfg.tiktoken_pattern);
    int bad = (cfg && cfg->vocab_file && !t->vocab_file) || (cfg && cfg->merge_file && !t->merge_file) ||
              (cfg && cfg->model_file && !t->model_file) || (cfg && cfg->tiktoken_pattern && !t->tiktoken_pattern);
    if (t->cfg.special_tokens) {
        size_t n = 0;
        while (t->cfg.special_tokens[n]) n++;
        t->special_tokens = calloc(n + 1, sizeof *t->special_tokens);
        for (size_t i = 0; t->special_tokens && i < n; i++)
            if (!(t->special_tokens[i] = strdup(t->cfg.special_tokens[i]))) bad = 1;
        if (!t->special_tokens) bad = 1;
        t->cfg.special_tokens = (const char *const *)t->special_tokens;
    }
    return bad ? mg_error_set(err, MG_ERR_NOMEM, "out of memory opening a tokenizer") : MG_OK;
}

/* HuggingFaceTokenizer's --tokenizer-model is a folder (Megatron passes it to
 * AutoTokenizer.from_pretrained) or its tokenizer.json. */
static int check_model(const char *path, const char *type, mg_error *err) {
    struct stat st;
    if (path && !strcmp(type, "HuggingFaceTokenizer") && stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return MG_OK;
    return check_file(path, "--tokenizer-model", err);
}

typedef struct tok_kind {
    const char *name;
    int (*init)(mg_tokenizer *t, mg_error *err);
    const char *needs; /* the files it needs, or NULL */
} tok_kind;

static const tok_kind kinds[] = {
    {"GPT2BPETokenizer", mg_tok_gpt2_init, "--vocab-file (vocab.json) and --merge-file (merges.txt)"},
    {"SentencePieceTokenizer", mg_tok_sp_init, "--tokenizer-model (tokenizer.model)"},
    {"HuggingFaceTokenizer", mg_tok_hf_init, "--tokenizer-model (a folder with tokenizer.json, or the file)"},
    {"TikTokenizer", mg_tok_tiktoken_init, "--tokenizer-model (Megatron's tiktoken vocabulary, a .json list)"},
    {"NullTokenizer", mg_tok_null_init, NULL},
    {"ByteLevelTokenizer", mg_tok_bytes_init, NULL},
};

bool mg_tokenizer_type_known(const char *type) {
    for (size_t i = 0; type && i < sizeof kinds / sizeof *kinds; i++)
        if (!strcmp(type, kinds[i].name)) return true;
    return false;
}

int mg_tokenizer_open(const mg_tokenizer_config *cfg, mg_tokenizer **out, mg_error *err) {
    *out = NULL;
    const char *type = cfg && cfg->type ? cfg->type : "ByteLevelTokenizer";
    mg_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return mg_error_set(err, MG_ERR_NOMEM, "out of memory opening a tokenizer");
    t->eod = t->bos = -1;
    int rc = copy_config(t, cfg, err);
    if (!rc) rc = check_file(t->vocab_file, "--vocab-file", err);
    if (!rc) rc = check_file(t->merge_file, "--merge-file", err);
    if (!rc) rc = check_model(t->model_file, type, err);
    const tok_kind *k = NULL;
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
        if (!strcmp(type, kinds[i].name)) k = &kinds[i];
    if (rc) {
        /* a named file is unusable: said above */
    } else if (!k) {
        rc = mg_error_set(err, MG_ERR_UNSUPPORTED,
                          "unknown tokenizer type '%s' (supported: GPT2BPETokenizer, SentencePieceTokenizer, "
                          "HuggingFaceTokenizer, TikTokenizer, NullTokenizer, ByteLevelTokenizer)",
                          type);
    } else {
        t->type = k->name;
        int has = !strcmp(k->name, "GPT2BPETokenizer") ? t->vocab_file && t->merge_file : t->model_file != NULL;
        if (k->needs && !has) rc = mg_error_set(err, MG_ERR_INVALID, "%s needs %s", k->name, k->needs);
        else rc = k->init(t, err);
    }
    if (rc) {
        tok_release(t);
        return rc;
    }
    *out = t;
    return MG_OK;
}

int mg_tokenizer_clone(const mg_tokenizer *tok, mg_tokenizer **out, mg_error *err) {
    mg_tokenizer_config cfg = tok->cfg;
    cfg.type = tok->type;
    return mg_tokenizer_open(&cfg, out, err);
}

void mg_tokenizer_free(mg_tokenizer *tok) {
    if (tok) tok_release(tok);
}

const char *mg_tokenizer_type(const mg_tokenizer *tok) { return tok->type; }
int64_t mg_tokenizer_vocab_size(const mg_tokenizer *tok) { return tok->vocab; }
int32_t mg_tokenizer_eod(const mg_tokenizer *tok) { return tok->eod; }
int32_t mg_tokenizer_bos(const mg_tokenizer *tok) { return tok->bos; }

int mg_tokenizer_encode_append(mg_tokenizer *tok, const char *text, size_t len, mg_ids *out,
                               mg_error *err) {
    if (!text && len) return mg_error_set(err, MG_ERR_INVALID, "encode: NULL text with length %zu", len);
    return tok->ops->encode(tok, text ? text : "", len, out, err);
}

int mg_tokenizer_encode(mg_tokenizer *tok, const char *text, size_t len, int32_t **ids, size_t *n,
                        mg_error *err) {
    mg_ids buf = {0};
    *ids = NULL;
    *n = 0;
    int rc = mg_tokenizer_encode_append(tok, text, len, &buf, err);
    if (rc) {
        mg_ids_free(&buf);
        return rc;
    }
    if (buf.len == 0) mg_ids_free(&buf);
    *ids = buf.data;
    *n = buf.len;
    return MG_OK;
}

int mg_tokenizer_decode(const mg_tokenizer *tok, const int32_t *ids, size_t n, char **text, size_t *len,
                        mg_error *err) {
    *text = NULL;
    *len = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= tok->vocab)
            return mg_error_set(err, MG_ERR_INVALID, "decode: id %d at position %zu is outside the vocabulary [0, %lld)",
                                ids[i], i, (long long)tok->vocab);
    return tok->ops->decode(tok, ids, n, text, len, err);
}

int64_t mg_vocab_padded(int64_t vocab, int divisible_by, int tp) {
    if (vocab <= 0 || divisible_by <= 0 || tp <= 0) return -1;
    int64_t m = (int64_t)divisible_by * tp;
    return (vocab + m - 1) / m * m;
}
