/* One writer per checkpoint directory: mg_ckpt_lock (include/mgraph/checkpoint.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mgraph/checkpoint.h"

#define LOCK_NAME ".mgraph-save.lock"

struct mg_ckpt_lock {
    int fd;           /* -1: not locked (see warning) */
    char warning[PATH_MAX * 2 + 256];
};

/* The holder's "pid P on host H" as it wrote it, or a placeholder. */
static void read_holder(int fd, char *buf, size_t len) {
    ssize_t n = pread(fd, buf, len - 1, 0);
    if (n <= 0) {
        snprintf(buf, len, "an unknown process");
        return;
    }
    buf[n] = '\0';
    for (ssize_t i = 0; i < n; i++)
        if (buf[i] == '\n' || (unsigned char)buf[i] < 32) buf[i] = '\0';
}

int mg_ckpt_lock_take(const char *root, mg_ckpt_lock **out, mg_error *err) {
    *out = NULL;
    if (mkdir(root, 0777) != 0 && errno != EEXIST)
        return mg_error_set(err, MG_ERR_IO, "cannot create checkpoint directory %s: %s", root, strerror(errno));
    struct stat sb;
    if (stat(root, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return mg_error_set(err, MG_ERR_INVALID, "checkpoint path %s is not a directory", root);
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/" LOCK_NAME, root) >= (int)sizeof path)
        return mg_error_set(err, MG_ERR_INVALID, "checkpoint path %s is too long", root);
    /* (O_NONBLOCK: a FIFO put there does not block the open; the type is checked next) */
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (fd < 0) return mg_error_set(err, MG_ERR_IO, "cannot open the lock file %s: %s", path, strerror(errno));
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return mg_error_set(err, MG_ERR_INVALID, "%s is not a regular file: not a lock mgraph made", path);
    }
    mg_ckpt_lock *l = calloc(1, sizeof *l);
    if (!l) {
        close(fd);
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    }
    l->fd = fd;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        if (e == EWOULDBLOCK) {
            char who[256];
            read_holder(fd, who, sizeof who);
            close(fd);
            free(l);
            return mg_error_set(err, MG_ERR_INVALID,
                                "--save %s is in use by another job (%s holds %s): two jobs saving into one "
                                "directory would delete each other's checkpoints; give this one its own --save",
                                root, who, path);
        }
        /* no flock on this file system: go on, unlocked, and say so */
        close(fd);
        l->fd = -1;
        snprintf(l->warning, sizeof l->warning,
                 "cannot lock %s (%s): nothing stops another job from saving into %s at the same time", path,
                 strerror(e), root);
        *out = l;
        return MG_OK;
    }
    char host[256] = "?", text[400];
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    int n = snprintf(text, sizeof text, "pid %ld on host %s\n", (long)getpid(), host);
    /* (our own lock file: what a previous holder wrote is replaced) */
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)n, 0) != n) {
        /* the lock is held all the same; only the holder's description is missing */
    }
    *out = l;
    return MG_OK;
}

const char *mg_ckpt_lock_warning(const mg_ckpt_lock *l) { return l && l->fd < 0 ? l->warning : NULL; }

void mg_ckpt_lock_release(mg_ckpt_lock *l) {
    if (!l) return;
    if (l->fd >= 0) close(l->fd); /* (closing releases the flock) */
    free(l);
}
