/* Test driver: encodes texts with an mgraph tokenizer and decodes the ids again, for the
 * Python tests that compare with the reference libraries (tests/io/hf_tokenizers.py).
 *
 *   tokenize_json IN.json OUT.json TYPE [MODEL] [key=value ...]
 *
 * IN.json is a list of strings; OUT.json gets {"vocab", "eod", "bos", "ids": [[...]],
 * "decoded": [...]} where decoded[i] decodes ids[i], or {"error": msg, "status": code}
 * when the tokenizer does not open. Keys: vocab_size, pattern, num_special,
 * special (space-separated), null_eod, no_special. Exit status 0, or 1 on a failure
 * to encode or write. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/tokenizer.h"

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s IN.json OUT.json TYPE [MODEL] [key=value ...]\n", argv[0]);
        return 2;
    }
    mg_tokenizer_config cfg = {.type = argv[3]};
    const char *specials[130] = {0};
    char spbuf[8192] = "";
    for (int i = 4; i < argc; i++) {
        const char *a = argv[i], *eq = strchr(a, '=');
        if (!eq) {
            cfg.model_file = a;
        } else if (!strncmp(a, "vocab_size=", 11)) {
            cfg.vocab_size = atoll(eq + 1);
        } else if (!strncmp(a, "pattern=", 8)) {
            cfg.tiktoken_pattern = eq + 1;
        } else if (!strncmp(a, "num_special=", 12)) {
            cfg.tiktoken_num_special_tokens = atoi(eq + 1);
        } else if (!strncmp(a, "null_eod=", 9)) {
            cfg.null_eod_set = 1;
            cfg.null_eod_id = atoll(eq + 1);
        } else if (!strncmp(a, "no_special=", 11)) {
            cfg.hf_no_special_tokens = atoi(eq + 1);
        } else if (!strncmp(a, "special=", 8)) {
            snprintf(spbuf, sizeof spbuf, "%s", eq + 1);
            int k = 0;
            for (char *p = strtok(spbuf, " "); p && k < 129; p = strtok(NULL, " ")) specials[k++] = p;
            cfg.special_tokens = specials;
        } else {
            fprintf(stderr, "unknown key %s\n", a);
            return 2;
        }
    }
    json_error_t jerr;
    json_t *in = json_load_file(argv[1], JSON_ALLOW_NUL, &jerr);
    if (!json_is_array(in)) {
        fprintf(stderr, "%s: %s\n", argv[1], jerr.text);
        return 1;
    }
    json_t *out = json_object();
    mg_tokenizer *t;
    mg_error err = {0};
    int rc = mg_tokenizer_open(&cfg, &t, &err);
    if (rc) {
        json_object_set_new(out, "error", json_string(err.msg));
        json_object_set_new(out, "status", json_integer(mg_status_is_usage(rc) ? 2 : 1));
    } else {
        json_object_set_new(out, "vocab", json_integer(mg_tokenizer_vocab_size(t)));
        json_object_set_new(out, "eod", json_integer(mg_tokenizer_eod(t)));
        json_object_set_new(out, "bos", json_integer(mg_tokenizer_bos(t)));
        json_t *ids = json_array(), *dec = json_array(), *errs = json_array();
        size_t i;
        json_t *s;
        json_array_foreach(in, i, s) {
            int32_t *v;
            size_t n;
            json_t *row = json_array();
            mg_error_clear(&err);
            if (mg_tokenizer_encode(t, json_string_value(s), json_string_length(s), &v, &n, &err)) {
                json_array_append_new(errs, json_string(err.msg));
                json_array_append_new(ids, row);
                json_array_append_new(dec, json_null());
                continue;
            }
            json_array_append_new(errs, json_null());
            for (size_t k = 0; k < n; k++) json_array_append_new(row, json_integer(v[k]));
            json_array_append_new(ids, row);
            char *text;
            size_t tl;
            if (mg_tokenizer_decode(t, v, n, &text, &tl, &err)) json_array_append_new(dec, json_null());
            else {
                json_array_append_new(dec, json_stringn_nocheck(text, tl));
                free(text);
            }
            free(v);
        }
        json_object_set_new(out, "ids", ids);
        json_object_set_new(out, "decoded", dec);
        json_object_set_new(out, "encode_errors", errs);
        mg_tokenizer_free(t);
    }
    int bad = json_dump_file(out, argv[2], JSON_COMPACT) != 0;
    json_decref(out);
    json_decref(in);
    return bad;
}
