/* Error recording: first error wins, so the root cause is what the user sees. */
#include "mgraph/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at s (1-4), or 0. */
static int utf8_len(const unsigned char *s) {
    int n = s[0] < 0x80 ? 1 : (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 2 && s[0] < 0xC2) return 0; /* overlong */
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return n;
}

/* Messages quote what users gave (names, lines of a file): a binary file's bytes must not
 * reach the terminal. Control characters and bytes that are not UTF-8 become '?'. */
static void printable(char *m) {
    unsigned char *s = (unsigned char *)m;
    while (*s) {
        int n = utf8_len(s);
        if (n == 1 && (*s < 0x20 || *s == 0x7F)) n = 0;
        if (!n) {
            *s++ = '?';
            continue;
        }
        s += n;
    }
}

int mg_error_set(mg_error *err, int code, const char *fmt, ...) {
    if (err && err->code == MG_OK) {
        err->code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        printable(err->msg);
    }
    return code;
}

void mg_error_clear(mg_error *err) {
    if (err) {
        err->code = MG_OK;
        err->msg[0] = '\0';
    }
}

const char *mg_status_name(int code) {
    switch (code) {
    case MG_OK: return "ok";
    case MG_ERR_INVALID: return "invalid input";
    case MG_ERR_SHAPE: return "shape mismatch";
    case MG_ERR_IO: return "i/o error";
    case MG_ERR_NOMEM: return "out of memory";
    case MG_ERR_UNSUPPORTED: return "not supported";
    case MG_ERR_RUNTIME: return "run-time failure";
    default: return "unknown error";
    }
}

int mg_status_is_usage(int code) {
    return code == MG_ERR_INVALID || code == MG_ERR_SHAPE || code == MG_ERR_IO ||
           code == MG_ERR_UNSUPPORTED;
}
