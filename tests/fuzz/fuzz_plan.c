/* Fuzz target: partition plan files (partitioners/plan.c mg_plan_read, mg_plan_check). */
#include "fuzz_util.h"
#include "mgraph/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fz_write("input.plan", data, size);
    mg_plan p;
    mg_plan_defaults(&p);
    mg_error err = {0};
    if (mg_plan_read(&p, path, &err) == MG_OK) {
        mg_error e2 = {0};
        mg_plan_check(&p, 8, &e2);
        mg_plan_model m = {.hidden = 64, .heads = 4, .ffn_hidden = 256, .seq_length = 32, .vocab = 512,
                           .global_batch = 16, .micro_batch = 2, .query_groups = 2};
        mg_plan_check_model(&p, 8, &m, &e2);
    }
    return 0;
}
