/* SentencePieceTokenizer on top of the libsentencepiece shim (spm_shim.h). */
#include <string.h>

#include "io/spm_shim.h"
#include "io/tok_internal.h"

static int sp_encode(mg_tokenizer *t, const char *text, size_t len, mg_ids *out, mg_error *err) {
    char msg[256];
    const int32_t *ids;
    size_t n;
    int rc = mg_spm_encode(t->impl, text, len, &ids, &n, msg, sizeof msg);
    if (rc) return mg_error_set(err, rc == -2 ? MG_ERR_NOMEM : MG_ERR_RUNTIME, "SentencePiece encode: %s", msg);
    if ((rc = mg_ids_reserve(out, out->len + n, err))) return rc;
    if (n) memcpy(out->data + out->len, ids, n * sizeof *ids);
    out->len += n;
    return MG_OK;
}

static int sp_decode(const mg_tokenizer *t, const int32_t *ids, size_t n, char **text, size_t *len, mg_error *err) {
    char msg[256];
    int rc = mg_spm_decode(t->impl, ids, n, text, len, msg, sizeof msg);
    if (rc) return mg_error_set(err, rc == -2 ? MG_ERR_NOMEM : MG_ERR_INVALID, "SentencePiece decode: %s", msg);
    return MG_OK;
}

static void sp_destroy(void *impl) { mg_spm_free(impl); }

static const mg_tok_ops sp_ops = {sp_encode, sp_decode, sp_destroy};

int mg_tok_sp_init(mg_tokenizer *t, mg_error *err) {
    char msg[256];
    mg_spm *s = mg_spm_load(t->model_file, msg, sizeof msg);
    if (!s) return mg_error_set(err, MG_ERR_IO, "cannot load SentencePiece model %s: %s", t->model_file, msg);
    t->ops = &sp_ops;
    t->impl = s;
    t->vocab = mg_spm_piece_size(s);
    /* Megatron's _SentencePieceTokenizer uses the model's EOS as end-of-document. */
    t->eod = mg_spm_eos_id(s);
    t->bos = mg_spm_bos_id(s);
    return MG_OK;
}
