/* Fuzz target: mgraph-run's flag parser and checks (tools/run_config.c). The input is argv, one
 * argument per NUL-separated piece. */
#include "fuzz_util.h"
#include "run_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *argv[66] = {"mgraph-run"};
    int argc = 1;
    for (size_t i = 0; i <= size && argc < 65;) {
        argv[argc++] = buf + i;
        i += strlen(buf + i) + 1;
    }
    argv[argc] = NULL;
    mg_run_config c;
    mg_run_config_defaults(&c);
    mg_run_notes notes = {0};
    mg_run_config_parse(&c, argc, argv, &notes);
    mg_run_config_check(&c, &notes); /* the checks and derived values too */
    free(buf);
    return 0;
}
