/* Atomic output files (include/mgraph/outfile.h). */
#define _GNU_SOURCE /* fopencookie */
#include "mgraph/outfile.h"

#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct mg_outfile {
    FILE *f;
    char *path;        /* the target */
    char *tmp;         /* the temporary file this created; NULL when writing a device directly */
    char *what;
    bool fsync;
    int slot;          /* in g_temps, or -1 */
    int fd;            /* what the stream writes to */
    int werrno;        /* the first write's failure (ENOSPC, EIO...): stdio loses it */
};

/* The stream writes through here so that the reason of a failed write is kept for the
 * message however late the caller notices (a later flush may fail without a syscall). */
static ssize_t cookie_write(void *c, const char *buf, size_t size) {
    mg_outfile *o = c;
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(o->fd, buf + done, size - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (!o->werrno) o->werrno = w < 0 ? errno : ENOSPC;
            return done ? (ssize_t)done : -1;
        }
        done += (size_t)w;
    }
    return (ssize_t)done;
}

static int cookie_close(void *c) {
    mg_outfile *o = c;
    int rc = close(o->fd);
    if (rc != 0 && !o->werrno) o->werrno = errno;
    o->fd = -1;
    return rc;
}

/* A stdio stream over fd whose write errors are kept in o. */
static FILE *stream_over(mg_outfile *o, int fd) {
    o->fd = fd;
    cookie_io_functions_t io = {NULL, cookie_write, NULL, cookie_close};
    return fopencookie(o, "w", io);
}

/* ---- the temporary files under way, for mg_outfile_discard_temps -------------------------
 * A fixed table a signal handler can read without locks: a slot's path is written
 * before it is published (release), and unpublished before it is reused. */
enum { TEMPS = 128 };
static struct { _Atomic int used; char path[PATH_MAX + 64]; } g_temps[TEMPS];

static int temp_register(const char *path) {
    if (strlen(path) >= sizeof g_temps[0].path) return -1;
    for (int i = 0; i < TEMPS; i++) {
        int expect = 0;
        if (atomic_load(&g_temps[i].used) == 0 && atomic_compare_exchange_strong(&g_temps[i].used, &expect, 2)) {
            strcpy(g_temps[i].path, path);
            atomic_store(&g_temps[i].used, 1); /* (2: being filled, not yet a path) */
            return i;
        }
    }
    return -1; /* full: that file is not removed on a fatal signal, nothing worse */
}

static void temp_unregister(int slot) {
    if (slot >= 0) atomic_store(&g_temps[slot].used, 0);
}

void mg_outfile_discard_temps(void) {
    for (int i = 0; i < TEMPS; i++)
        if (atomic_load(&g_temps[i].used) == 1) unlink(g_temps[i].path);
}

static void outfile_free(mg_outfile *o) {
    if (!o) return;
    temp_unregister(o->slot);
    free(o->path);
    free(o->tmp);
    free(o->what);
    free(o);
}

/* The directory part of path ("." when it has none). */
static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    if (slash == path) return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

static uint64_t random_u64(void) {
    uint64_t x = 0;
    if (getrandom(&x, sizeof x, GRND_NONBLOCK) != (ssize_t)sizeof x) {
        /* no entropy yet: time and pid still make clashes unlikely, and O_EXCL makes them safe */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        x = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40);
    }
    return x;
}

/* Creates "<dir>/.<base>.tmp-<random>" exclusively; the mode is 0666 minus the umask. */
static int create_temp(mg_outfile *o, mg_error *err) {
    const char *base = strrchr(o->path, '/');
    base = base ? base + 1 : o->path;
    char *dir = dir_of(o->path);
    if (!dir) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    size_t len = strlen(dir) + strlen(base) + 40;
    o->tmp = malloc(len);
    if (!o->tmp) {
        free(dir);
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    }
    int fd = -1;
    for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
        snprintf(o->tmp, len, "%s/.%s.tmp-%016llx", dir, base, (unsigned long long)random_u64());
        fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
        int e = errno;
        free(o->tmp);
        o->tmp = NULL;
        int rc = mg_error_set(err, MG_ERR_IO, "cannot write %s %s: cannot create a file in %s: %s", o->what, o->path,
                              dir, strerror(e));
        free(dir);
        return rc;
    }
    free(dir);
    o->slot = temp_register(o->tmp);
    o->f = stream_over(o, fd);
    if (!o->f) {
        int e = errno;
        close(fd);
        unlink(o->tmp);
        return mg_error_set(err, MG_ERR_IO, "cannot write %s %s: %s", o->what, o->path, strerror(e));
    }
    return MG_OK;
}

int mg_outfile_open(const char *path, const char *what, const mg_outfile_options *opt, mg_outfile **out,
                    mg_error *err) {
    *out = NULL;
    if (!what) what = "output file";
    if (!path || !*path) return mg_error_set(err, MG_ERR_INVALID, "%s: empty path", what);
    if (strlen(path) >= PATH_MAX) return mg_error_set(err, MG_ERR_INVALID, "%s: path longer than %d bytes", what, PATH_MAX - 1);
    mg_outfile *o = calloc(1, sizeof *o);
    if (!o || !(o->path = strdup(path)) || !(o->what = strdup(what))) {
        outfile_free(o);
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    }
    o->fsync = opt && opt->fsync;
    o->slot = -1;
    o->fd = -1;
    struct stat st;
    int rc = MG_OK;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        rc = mg_error_set(err, MG_ERR_IO, "cannot write %s %s: it is a directory", what, path);
    } else if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        /* a device or FIFO: write into it as it is, never replace or remove it */
        int fd = open(path, O_WRONLY | O_NOCTTY | O_CLOEXEC);
        if (fd < 0 || !(o->f = stream_over(o, fd))) {
            int e = errno;
            if (fd >= 0) close(fd);
            rc = mg_error_set(err, MG_ERR_IO, "cannot write %s %s: %s", what, path, strerror(e));
        }
    } else {
        rc = create_temp(o, err);
    }
    if (rc) {
        outfile_free(o);
        return rc;
    }
    *out = o;
    return MG_OK;
}

FILE *mg_outfile_stream(mg_outfile *f) { return f ? f->f : NULL; }
const char *mg_outfile_path(const mg_outfile *f) { return f ? f->path : NULL; }
const char *mg_outfile_temp_path(const mg_outfile *f) { return f ? f->tmp : NULL; }

int mg_outfile_flush(mg_outfile *f, mg_error *err) {
    if (!f || !f->f) return mg_error_set(err, MG_ERR_INVALID, "mg_outfile_flush: no open file");
    errno = 0;
    if (fflush(f->f) != 0 || ferror(f->f))
        return mg_error_set(err, MG_ERR_RUNTIME, "writing %s %s failed: %s", f->what, f->path,
                            strerror(f->werrno ? f->werrno : errno ? errno : EIO));
    return MG_OK;
}

/* fsync of the directory holding path, so the rename itself is durable. */
static int sync_dir(const char *path) {
    char *dir = dir_of(path);
    if (!dir) return -1;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(dir);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int mg_outfile_commit(mg_outfile *f, mg_error *err) {
    if (!f) return mg_error_set(err, MG_ERR_INVALID, "mg_outfile_commit: NULL file");
    int rc = MG_OK, e = 0;
    errno = 0;
    if (fflush(f->f) != 0 || ferror(f->f)) e = f->werrno ? f->werrno : errno ? errno : EIO;
    if (!e && f->fsync && f->tmp && fsync(f->fd) != 0) e = errno;
    if (fclose(f->f) != 0 && !e) e = f->werrno ? f->werrno : errno ? errno : EIO;
    f->f = NULL;
    if (e) {
        rc = mg_error_set(err, MG_ERR_RUNTIME, "writing %s %s failed: %s", f->what, f->path, strerror(e));
    } else if (f->tmp) {
        if (rename(f->tmp, f->path) != 0) {
            e = errno;
            rc = mg_error_set(err, MG_ERR_IO, "cannot write %s %s: renaming the finished file into place failed: %s",
                              f->what, f->path, strerror(e));
        } else {
            free(f->tmp);
            f->tmp = NULL; /* it is the target now */
            if (f->fsync && sync_dir(f->path) != 0)
                rc = mg_error_set(err, MG_ERR_IO, "cannot sync the directory of %s %s: %s", f->what, f->path,
                                  strerror(errno));
        }
    }
    if (f->tmp) unlink(f->tmp); /* ours: remove it; the target was never touched */
    outfile_free(f);
    return rc;
}

void mg_outfile_abort(mg_outfile *f) {
    if (!f) return;
    if (f->f) fclose(f->f);
    if (f->tmp) unlink(f->tmp);
    outfile_free(f);
}

int mg_write_file_atomic(const char *path, const char *what, const void *data, size_t len,
                         const mg_outfile_options *opt, mg_error *err) {
    mg_outfile *o;
    int rc = mg_outfile_open(path, what, opt, &o, err);
    if (rc) return rc;
    if (len && fwrite(data, 1, len, mg_outfile_stream(o)) != len) {
        int e = errno;
        rc = mg_error_set(err, MG_ERR_RUNTIME, "writing %s %s failed: %s", what ? what : "output file", path,
                          e ? strerror(e) : "short write");
        mg_outfile_abort(o);
        return rc;
    }
    return mg_outfile_commit(o, err);
}
