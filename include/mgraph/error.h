/* mgraph error reporting.
 *
 * Library functions never abort. A function that can fail returns an int status
 * (MG_OK == 0, or a negative mg_status) and, when given a non-NULL mg_error,
 * writes one human-readable message naming what went wrong. Tools turn the
 * status into an exit code (usage/input errors -> 2, run-time failures -> 1).
 */
#ifndef MGRAPH_ERROR_H
#define MGRAPH_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mg_status {
    MG_OK = 0,
    MG_ERR_INVALID = -1,     /* bad argument, flag, plan or shape: the caller's input is wrong */
    MG_ERR_SHAPE = -2,       /* op inputs whose shapes do not fit the op */
    MG_ERR_IO = -3,          /* a file is missing, unreadable, truncated or corrupt */
    MG_ERR_NOMEM = -4,       /* allocation failed */
    MG_ERR_UNSUPPORTED = -5, /* valid request that this build or version does not implement */
    MG_ERR_RUNTIME = -6,     /* failure while executing (StarPU, MPI, kernel) */
} mg_status;

#define MG_ERROR_MSG_LEN 512

typedef struct mg_error {
    int code;                     /* an mg_status */
    char msg[MG_ERROR_MSG_LEN];   /* NUL-terminated; empty when code == MG_OK */
} mg_error;

/* Records the error (if err != NULL and no error is recorded yet) and returns code,
 * so that `return mg_error_set(err, MG_ERR_IO, "cannot open %s", path);` reads well. */
int mg_error_set(mg_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void mg_error_clear(mg_error *err);
const char *mg_status_name(int code);
/* True for errors that are the user's input (exit status 2 in tools). */
int mg_status_is_usage(int code);

#ifdef __cplusplus
}
#endif
#endif
