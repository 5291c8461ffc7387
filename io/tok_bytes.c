/* ByteLevelTokenizer: id = byte value. The default for quick runs on raw text, where a
 * learned vocabulary is not worth the set-up; it has no end-of-document token. */
#include "io/tok_internal.h"

#include <stdlib.h>
#include <string.h>

static int bytes_encode(mg_tokenizer *t, const char *text, size_t len, mg_ids *out, mg_error *err) {
    (void)t;
    int rc = mg_ids_reserve(out, out->len + len, err);
    if (rc) return rc;
    const unsigned char *p = (const unsigned char *)text;
    for (size_t i = 0; i < len; i++) out->data[out->len++] = p[i];
    return MG_OK;
}

static int bytes_decode(const mg_tokenizer *t, const int32_t *ids, size_t n, char **text, size_t *len,
                        mg_error *err) {
    (void)t;
    char *s = malloc(n + 1);
    if (!s) return mg_error_set(err, MG_ERR_NOMEM, "out of memory decoding %zu bytes", n);
    for (size_t i = 0; i < n; i++) s[i] = (char)(unsigned char)ids[i];
    s[n] = '\0';
    *text = s;
    *len = n;
    return MG_OK;
}

static void bytes_destroy(void *impl) { (void)impl; }

static const mg_tok_ops bytes_ops = {bytes_encode, bytes_decode, bytes_destroy};

int mg_tok_bytes_init(mg_tokenizer *t, mg_error *err) {
    (void)err;
    t->ops = &bytes_ops;
    t->impl = NULL;
    t->vocab = 256;
    t->eod = -1;
    t->bos = -1;
    return MG_OK;
}
