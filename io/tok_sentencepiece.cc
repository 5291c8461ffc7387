// SentencePiece shim: Debian's libsentencepiece (the reference implementation, the
// same code Megatron calls) behind a plain C interface (spm_shim.h), so encoding is
// exact by construction: BPE merges by piece score, dummy prefix, U+2581 whitespace,
// byte fallback. It is built as its own small shared library so that mgraph and every
// program linking it stay C and use the C linker.
#include "io/spm_shim.h"

#include <sentencepiece_processor.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

struct mg_spm {
    sentencepiece::SentencePieceProcessor proc;
    std::vector<int> ids;
    std::vector<int32_t> out;
};

static void set_err(char *buf, size_t len, const std::string &msg) {
    if (buf && len) std::snprintf(buf, len, "%s", msg.c_str());
}

extern "C" mg_spm *mg_spm_load(const char *path, char *errbuf, size_t errlen) {
    mg_spm *s = new (std::nothrow) mg_spm;
    if (!s) {
        set_err(errbuf, errlen, "out of memory");
        return nullptr;
    }
    try {
        auto st = s->proc.Load(path);
        if (!st.ok()) {
            set_err(errbuf, errlen, st.ToString());
            delete s;
            return nullptr;
        }
    } catch (const std::exception &e) {
        set_err(errbuf, errlen, e.what());
        delete s;
        return nullptr;
    }
    return s;
}

extern "C" void mg_spm_free(mg_spm *s) { delete s; }
extern "C" int mg_spm_piece_size(const mg_spm *s) { return s->proc.GetPieceSize(); }
extern "C" int mg_spm_bos_id(const mg_spm *s) { return s->proc.bos_id(); }
extern "C" int mg_spm_eos_id(const mg_spm *s) { return s->proc.eos_id(); }

extern "C" int mg_spm_encode(mg_spm *s, const char *text, size_t len, const int32_t **ids, size_t *n, char *errbuf,
                             size_t errlen) {
    try {
        auto st = s->proc.Encode(absl::string_view(text, len), &s->ids);
        if (!st.ok()) {
            set_err(errbuf, errlen, st.ToString());
            return -1;
        }
        s->out.assign(s->ids.begin(), s->ids.end());
    } catch (const std::bad_alloc &) {
        set_err(errbuf, errlen, "out of memory");
        return -2;
    } catch (const std::exception &e) {
        set_err(errbuf, errlen, e.what());
        return -1;
    }
    *ids = s->out.data();
    *n = s->out.size();
    return 0;
}

extern "C" int mg_spm_decode(const mg_spm *s, const int32_t *ids, size_t n, char **text, size_t *len, char *errbuf,
                             size_t errlen) {
    std::string res;
    try {
        std::vector<int> v(ids, ids + n);
        auto st = s->proc.Decode(v, &res);
        if (!st.ok()) {
            set_err(errbuf, errlen, st.ToString());
            return -1;
        }
    } catch (const std::bad_alloc &) {
        set_err(errbuf, errlen, "out of memory");
        return -2;
    } catch (const std::exception &e) {
        set_err(errbuf, errlen, e.what());
        return -1;
    }
    char *o = static_cast<char *>(std::malloc(res.size() + 1));
    if (!o) {
        set_err(errbuf, errlen, "out of memory");
        return -2;
    }
    std::memcpy(o, res.data(), res.size());
    o[res.size()] = '\0';
    *text = o;
    *len = res.size();
    return 0;
}
