/* Input files opened one way: include/mgraph/infile.h. */
#include "mgraph/infile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *type_name(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "of another kind";
}

int mg_input_open(const char *path, const char *what, int *fd, mg_error *err) {
    *fd = -1;
    if (!path || !*path) return mg_error_set(err, MG_ERR_IO, "%s: no file named", what);
    int d = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (d < 0) return mg_error_set(err, MG_ERR_IO, "cannot open %s %s: %s", what, path, strerror(errno));
    struct stat st;
    if (fstat(d, &st) != 0) {
        int e = errno;
        close(d);
        return mg_error_set(err, MG_ERR_IO, "cannot stat %s %s: %s", what, path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(d);
        if (S_ISDIR(st.st_mode)) return mg_error_set(err, MG_ERR_IO, "%s %s is a directory, not a file", what, path);
        return mg_error_set(err, MG_ERR_IO, "%s %s is not a regular file (it is %s)", what, path, type_name(st.st_mode));
    }
    int fl = fcntl(d, F_GETFL);
    if (fl >= 0) fcntl(d, F_SETFL, fl & ~O_NONBLOCK);
    *fd = d;
    return MG_OK;
}

int mg_input_fopen(const char *path, const char *what, FILE **f, mg_error *err) {
    *f = NULL;
    int d;
    int rc = mg_input_open(path, what, &d, err);
    if (rc) return rc;
    *f = fdopen(d, "rb");
    if (!*f) {
        int e = errno;
        close(d);
        return mg_error_set(err, MG_ERR_IO, "cannot read %s %s: %s", what, path, strerror(e));
    }
    return MG_OK;
}

int mg_input_check(const char *path, const char *what, mg_error *err) {
    int d;
    int rc = mg_input_open(path, what, &d, err);
    if (!rc) close(d);
    return rc;
}

/* ---- mapped inputs --------------------------------------------------------------------
 * A fixed table, so that a signal handler can read it without locks: a slot's path is
 * written before its range is published (release), and cleared range first. */
enum { MAPS = 64 };
typedef struct map_slot {
    _Atomic uintptr_t lo, hi; /* [lo, hi): 0 when free */
    char path[PATH_MAX];
} map_slot;
static map_slot g_maps[MAPS];
static pthread_mutex_t g_maps_mu = PTHREAD_MUTEX_INITIALIZER;

int mg_input_map(const char *path, const char *what, const void **map, size_t *size, mg_error *err) {
    *map = NULL;
    *size = 0;
    int d;
    int rc = mg_input_open(path, what, &d, err);
    if (rc) return rc;
    struct stat st;
    if (fstat(d, &st) != 0) {
        int e = errno;
        close(d);
        return mg_error_set(err, MG_ERR_IO, "cannot stat %s %s: %s", what, path, strerror(e));
    }
    if (st.st_size > 0) {
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, d, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(d);
            return mg_error_set(err, MG_ERR_IO, "cannot map %s %s: %s", what, path, strerror(e));
        }
        *map = m;
        *size = (size_t)st.st_size;
        pthread_mutex_lock(&g_maps_mu);
        for (int i = 0; i < MAPS; i++)
            if (!atomic_load(&g_maps[i].lo)) {
                strncpy(g_maps[i].path, path, sizeof g_maps[i].path - 1);
                g_maps[i].path[sizeof g_maps[i].path - 1] = '\0';
                atomic_store(&g_maps[i].hi, (uintptr_t)m + (uintptr_t)st.st_size);
                atomic_store(&g_maps[i].lo, (uintptr_t)m);
                break;
            }
        pthread_mutex_unlock(&g_maps_mu);
    }
    close(d);
    return MG_OK;
}

void mg_input_unmap(const void *map, size_t size) {
    if (!map) return;
    pthread_mutex_lock(&g_maps_mu);
    for (int i = 0; i < MAPS; i++)
        if (atomic_load(&g_maps[i].lo) == (uintptr_t)map) {
            atomic_store(&g_maps[i].lo, 0);
            atomic_store(&g_maps[i].hi, 0);
        }
    pthread_mutex_unlock(&g_maps_mu);
    munmap((void *)map, size);
}

const char *mg_input_mapped_at(const void *addr) {
    uintptr_t a = (uintptr_t)addr;
    for (int i = 0; i < MAPS; i++) {
        uintptr_t lo = atomic_load(&g_maps[i].lo);
        if (lo && a >= lo && a < atomic_load(&g_maps[i].hi)) return g_maps[i].path;
    }
    return NULL;
}
