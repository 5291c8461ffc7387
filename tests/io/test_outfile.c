/* Atomic output files: whole or nothing, and nothing removed that the writer did not
 * create (devices, symlink targets, the previous good file). */
#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io_test_util.h"
#include "mgraph/outfile.h"

static char g_dir[4096];

/* Number of entries in the scratch directory (no temporary file may be left over). */
static int count_entries(void) {
    DIR *d = opendir(g_dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    if (d) closedir(d);
    return n;
}

static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f)) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_io_outfile SCRATCH_DIR\n");
        return 2;
    }
    snprintf(g_dir, sizeof g_dir, "%s", argv[1]);
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", g_dir, g_dir);
    if (system(cmd)) return 1;
    char path[4200], link[4200], target[4200];
    mg_error err = {0};
    mg_outfile *o;

    /* a new file appears only at commit */
    path_join(path, sizeof path, g_dir, "out.txt");
    CHECK(mg_outfile_open(path, "test output", NULL, &o, &err) == 0, "open: %s", err.msg);
    fputs("hello\n", mg_outfile_stream(o));
    CHECK(access(path, F_OK) != 0, "target exists before commit");
    CHECK(mg_outfile_commit(o, &err) == 0, "commit: %s", err.msg);
    char *s = read_file(path, NULL);
    CHECK(s && !strcmp(s, "hello\n"), "content after commit");
    free(s);
    CHECK(count_entries() == 1, "a temporary file was left behind");

    /* abort keeps the previous file and removes only the temporary one */
    CHECK(mg_outfile_open(path, "test output", NULL, &o, &err) == 0, "reopen: %s", err.msg);
    fputs("partial", mg_outfile_stream(o));
    mg_outfile_abort(o);
    s = read_file(path, NULL);
    CHECK(s && !strcmp(s, "hello\n"), "abort changed the previous file");
    free(s);
    CHECK(count_entries() == 1, "abort left a temporary file");

    /* mode follows the umask */
    mode_t old = umask(027);
    path_join(path, sizeof path, g_dir, "mode.txt");
    CHECK(mg_write_file_atomic(path, "test output", "x", 1, NULL, &err) == 0, "write: %s", err.msg);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0640, "mode %o, want 640", (unsigned)(st.st_mode & 0777));
    umask(old);

    /* a symlink is replaced, its target left alone */
    path_join(target, sizeof target, g_dir, "precious.txt");
    put(target, "precious\n");
    path_join(link, sizeof link, g_dir, "link.txt");
    CHECK(symlink(target, link) == 0, "symlink: %s", strerror(errno));
    CHECK(mg_write_file_atomic(link, "test output", "new\n", 4, NULL, &err) == 0, "write via link: %s", err.msg);
    s = read_file(target, NULL);
    CHECK(s && !strcmp(s, "precious\n"), "the symlink's target was overwritten");
    free(s);

    /* devices are written in place and never removed, whatever happens */
    CHECK(mg_outfile_open("/dev/null", "test output", NULL, &o, &err) == 0, "/dev/null: %s", err.msg);
    fputs("discarded\n", mg_outfile_stream(o));
    mg_outfile_abort(o);
    CHECK(access("/dev/null", F_OK) == 0, "/dev/null was removed");
    if (access("/dev/full", W_OK) == 0) {
        mg_error e2 = {0};
        CHECK(mg_outfile_open("/dev/full", "test output", NULL, &o, &e2) == 0, "/dev/full: %s", e2.msg);
        for (int i = 0; i < 10000; i++) fputs("0123456789", mg_outfile_stream(o));
        CHECK(mg_outfile_commit(o, &e2) == MG_ERR_RUNTIME, "a full device must fail the commit (a run-time failure)");
        CHECK(strstr(e2.msg, "/dev/full") && strstr(e2.msg, "No space"), "message names file and reason: %s", e2.msg);
        CHECK(access("/dev/full", F_OK) == 0, "/dev/full was removed");
    }

    /* refusals name the path and the reason */
    mg_error e3 = {0};
    CHECK(mg_outfile_open(g_dir, "test output", NULL, &o, &e3) == MG_ERR_IO && strstr(e3.msg, "directory"),
          "a directory as output: %s", e3.msg);
    mg_error e4 = {0};
    path_join(path, sizeof path, g_dir, "no/such/dir/out.txt");
    CHECK(mg_outfile_open(path, "test output", NULL, &o, &e4) == MG_ERR_IO && strstr(e4.msg, "No such file"),
          "a missing directory: %s", e4.msg);

    /* fsync path */
    mg_outfile_options sync = {.fsync = true};
    path_join(path, sizeof path, g_dir, "synced.bin");
    CHECK(mg_write_file_atomic(path, "test output", "abc", 3, &sync, &err) == 0, "fsync write: %s", err.msg);
    if (g_failures) fprintf(stderr, "%d failure(s)\n", g_failures);
    return g_failures ? 1 : 0;
}
