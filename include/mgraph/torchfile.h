/* PyTorch's files read without Python: what torch.save writes (a zip archive of a pickle
 * and the tensors' storages), and plain pickles (torch.distributed.checkpoint's
 * .metadata).
 *
 * The zip container: torch.save stores its records uncompressed (method 0), 64-byte
 * aligned, with zip64 extensions past 4 GiB; "PREFIX/data.pkl" holds the pickle,
 * "PREFIX/data/KEY" each storage, "PREFIX/byteorder" "little" (or nothing, before
 * torch 1.10). The reader checks the central directory against the local headers, the
 * CRC-32 of every record it reads, and refuses compressed records, encrypted ones and the
 * pre-1.6 (non-zip) format, naming the file and what is wrong (MG_ERR_IO).
 *
 * The unpickler is restricted: it runs the opcodes of protocols 0-5 that build data
 * (dicts, lists, tuples, sets, strings, bytes, ints, floats, booleans, None, the memo,
 * persistent ids) and never imports or calls anything. A global is a name; a call or a
 * __reduce__ (REDUCE, NEWOBJ, BUILD) is an opaque object recording its callable, its
 * arguments and its state (argparse.Namespace, enums, dataclasses), except the few it
 * interprets: collections.OrderedDict (a dict), torch.Size (a tuple),
 * torch._utils._rebuild_tensor_v2 / _rebuild_tensor / _rebuild_parameter /
 * torch._tensor._rebuild_from_type_v2 (tensors on storages named by persistent ids
 * ('storage', torch.FloatStorage, key, location, numel)), _codecs.encode (protocol 2's
 * bytes). Anything else a file holds is data to look at, never code.
 *
 * Values live in an arena owned by the mg_torch_file; pointers stay valid until it is
 * closed. Memo references share values (a value may be reachable twice).
 */
#ifndef MGRAPH_TORCHFILE_H
#define MGRAPH_TORCHFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mgraph/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mg_pk_kind {
    MG_PK_NONE,
    MG_PK_BOOL,
    MG_PK_INT,     /* fits int64 (a larger Python int is MG_ERR_UNSUPPORTED) */
    MG_PK_FLOAT,
    MG_PK_STR,     /* UTF-8, NUL-terminated (len bytes before the NUL) */
    MG_PK_BYTES,
    MG_PK_LIST,
    MG_PK_TUPLE,
    MG_PK_SET,     /* set or frozenset */
    MG_PK_DICT,    /* dict or OrderedDict: items[2i] key, items[2i + 1] value, in order */
    MG_PK_GLOBAL,  /* a name: str = "module.qualname" */
    MG_PK_OBJECT,  /* a call not interpreted: call(args) then BUILD(state) */
    MG_PK_TENSOR,
    MG_PK_STORAGE, /* a persistent id's storage (only inside tensors once built) */
} mg_pk_kind;

/* torch's element types (its storage classes) */
typedef enum mg_torch_dtype {
    MG_T_F64, MG_T_F32, MG_T_F16, MG_T_BF16, MG_T_I64, MG_T_I32, MG_T_I16, MG_T_I8, MG_T_U8, MG_T_BOOL,
    MG_T_COUNT
} mg_torch_dtype;

#define MG_TORCH_MAX_DIMS 8

typedef struct mg_torch_tensor {
    mg_torch_dtype dtype;
    int ndim;
    int64_t shape[MG_TORCH_MAX_DIMS];
    int64_t stride[MG_TORCH_MAX_DIMS];   /* in elements */
    int64_t offset;                      /* storage offset, in elements */
    const char *key;                     /* the storage's record key ("0", "1", ...) */
    const unsigned char *data;           /* the storage's first byte (NULL: empty storage) */
    int64_t storage_numel;               /* elements in the storage */
    struct mg_torch_file *file;          /* the file holding the storage */
} mg_torch_tensor;

typedef struct mg_pk mg_pk;
struct mg_pk {
    mg_pk_kind kind;
    int64_t i;              /* BOOL, INT */
    double f;               /* FLOAT */
    const char *s;          /* STR, BYTES, GLOBAL */
    size_t len;             /* STR, BYTES: bytes; LIST, TUPLE, SET, DICT: items (DICT: 2 x pairs) */
    mg_pk **items;
    mg_pk *call;            /* OBJECT: the callable (usually a GLOBAL) */
    mg_pk *args;            /* OBJECT: its arguments (a TUPLE) */
    mg_pk *state;           /* OBJECT, DICT: what BUILD set (NULL: nothing) */
    mg_torch_tensor *tensor;/* TENSOR, STORAGE */
};

typedef struct mg_torch_file mg_torch_file;

/* Opens `path`: a torch.save zip archive (root: its data.pkl) or, with raw_pickle, a
 * plain pickle file (torch.distributed.checkpoint's .metadata). `what` names it in
 * messages. Maps the file; unpickles the root. */
int mg_torch_open(const char *path, const char *what, bool raw_pickle, mg_torch_file **out, mg_error *err);
/* A torch.save archive inside [base, base + len) of a mapping the caller keeps alive
 * (a torch.distributed.checkpoint .distcp item); `name` names it in messages. */
int mg_torch_open_mem(const void *base, size_t len, const char *name, mg_torch_file **out, mg_error *err);
void mg_torch_close(mg_torch_file *f);
/* Checks every record's CRC-32 (reading a tensor checks its own storage's only): corruption
 * in what a reader passes over (RNG states, _extra_state) is found too. */
int mg_torch_verify(mg_torch_file *f, mg_error *err);
const mg_pk *mg_torch_root(const mg_torch_file *f);
const char *mg_torch_name(const mg_torch_file *f);

/* Navigation (NULL when absent or of another kind). */
const mg_pk *mg_pk_get(const mg_pk *dict, const char *key);       /* string key */
const mg_pk *mg_pk_get_int(const mg_pk *dict, int64_t key);       /* int key */
/* An object's attribute: the str-keyed entry of its BUILD state (argparse.Namespace,
 * dataclasses: a dict, or the dict or slots of a (dict, slots) tuple). */
const mg_pk *mg_pk_attr(const mg_pk *obj, const char *name);
bool mg_pk_is_global(const mg_pk *v, const char *name);           /* a GLOBAL of that name */
/* The call's name of an OBJECT ("argparse.Namespace"), or "". */
const char *mg_pk_call_name(const mg_pk *v);
/* A Python value as C: true when v is of a kind that converts (int and bool as int;
 * float, int and bool as double; str; None never). */
bool mg_pk_int(const mg_pk *v, int64_t *out);
bool mg_pk_num(const mg_pk *v, double *out);
const char *mg_pk_str(const mg_pk *v);
bool mg_pk_truthy(const mg_pk *v);   /* Python's bool(v) for None, bool, int, float, str */
/* A short description of v for messages ("a dict of 12 items", "int 3"). */
void mg_pk_describe(const mg_pk *v, char *buf, size_t n);

int64_t mg_torch_numel(const mg_torch_tensor *t);
const char *mg_torch_dtype_name(mg_torch_dtype d);
size_t mg_torch_dtype_size(mg_torch_dtype d);
/* Copies t (any strides) into out as float32, converting float64 / float16 / bfloat16 (and
 * integers, exactly up to 2^24). Checks that every element lies inside the storage and
 * the storage's record CRC-32 (once per record). `name` names t in messages. */
int mg_torch_tensor_f32(const mg_torch_tensor *t, float *out, const char *name, mg_error *err);

#ifdef __cplusplus
}
#endif
#endif
