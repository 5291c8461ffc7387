/* Writes mgraph-run's flag reference from its flag table (tools/run_config.c):
 *   mgraph-flag-docs markdown   > docs/mgraph-run.md
 *   mgraph-flag-docs man        > mgraph-run.1
 * Run at build time (the man page) and by the test docs.flag_reference, which fails when
 * the committed docs/mgraph-run.md is not what the table generates. */
#include <stdio.h>
#include <string.h>

#include "tools/run_config.h"

int main(int argc, char **argv) {
    if (argc != 2 || (strcmp(argv[1], "markdown") && strcmp(argv[1], "man"))) {
        fprintf(stderr, "usage: mgraph-flag-docs markdown|man\n");
        return 2;
    }
    mg_run_config_reference(stdout, !strcmp(argv[1], "man"));
    if (fflush(stdout) != 0 || ferror(stdout)) {
        perror("mgraph-flag-docs: writing the reference");
        return 1;
    }
    return 0;
}
