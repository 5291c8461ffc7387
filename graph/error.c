/* Error recording: first error wins, so the root cause is what the user sees. */
#include "mgraph/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int mg_error_set(mg_error *err, int code, const char *fmt, ...) {
    if (err && err->code == MG_OK) {
        err->code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
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
