// SentencePieceTokenizer: a thin shim over Debian's libsentencepiece (the reference
// implementation, the same code Megatron calls), so encoding is exact by construction:
// BPE merges by piece score, dummy prefix, U+2581 whitespace, byte fallback.
// It lives in its own small shared library (mgraph_sentencepiece) so the rest of
// mgraph and every program linking it stay pure C.
#include <sentencepiece_processor.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "io/tok_internal.h"

namespace {

struct sp_impl {
    sentencepiece::SentencePieceProcessor proc;
    std::vector<int> ids; // scratch, reused between calls
};

int sp_encode(mg_tokenizer *t, const char *text, size_t len, mg_ids *out, mg_error *err) {
    sp_impl *s = static_cast<sp_impl *>(t->impl);
    try {
        auto st = s->proc.Encode(absl::string_view(text, len), &s->ids);
        if (!st.ok()) return mg_error_set(err, MG_ERR_RUNTIME, "SentencePiece encode: %s", st.ToString().c_str());
    } catch (const std::bad_alloc &) {
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory in SentencePiece encode");
    }
    int rc = mg_ids_reserve(out, out->len + s->ids.size(), err);
    if (rc) return rc;
    for (int id : s->ids) out->data[out->len++] = id;
    return MG_OK;
}

int sp_decode(const mg_tokenizer *t, const int32_t *ids, size_t n, char **text, size_t *len, mg_error *err) {
    const sp_impl *s = static_cast<const sp_impl *>(t->impl);
    std::string res;
    try {
        std::vector<int> v(ids, ids + n);
        auto st = s->proc.Decode(v, &res);
        if (!st.ok()) return mg_error_set(err, MG_ERR_INVALID, "SentencePiece decode: %s", st.ToString().c_str());
    } catch (const std::bad_alloc &) {
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory in SentencePiece decode");
    }
    char *o = static_cast<char *>(std::malloc(res.size() + 1));
    if (!o) return mg_error_set(err, MG_ERR_NOMEM, "out of memory decoding %zu ids", n);
    std::memcpy(o, res.data(), res.size());
    o[res.size()] = '\0';
    *text = o;
    *len = res.size();
    return MG_OK;
}

void sp_destroy(void *impl) { delete static_cast<sp_impl *>(impl); }

const mg_tok_ops sp_ops = {sp_encode, sp_decode, sp_destroy};

} // namespace

extern "C" int mg_tok_sp_init(mg_tokenizer *t, mg_error *err) {
    sp_impl *s = new (std::nothrow) sp_impl;
    if (!s) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    t->ops = &sp_ops;
    t->impl = s;
    try {
        auto st = s->proc.Load(t->model_file);
        if (!st.ok())
            return mg_error_set(err, MG_ERR_IO, "cannot load SentencePiece model %s: %s", t->model_file,
                                st.ToString().c_str());
    } catch (const std::bad_alloc &) {
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory loading %s", t->model_file);
    }
    t->vocab = s->proc.GetPieceSize();
    // Megatron's _SentencePieceTokenizer uses the model's EOS as end-of-document.
    t->eod = s->proc.eos_id();
    t->bos = s->proc.bos_id();
    return MG_OK;
}
