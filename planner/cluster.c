/* Cluster descriptions: presets by name and "key value" files. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mgraph/infile.h"
#include "mgraph/planner.h"

/* Numeric keys, where each lives, its range and whether a file must give it. */
typedef struct ckey {
    const char *name;
    size_t off;
    double lo, hi;
    bool required;
    bool integer;
} ckey;

#define C(f) offsetof(mg_cluster, f)
static const ckey keys[] = {
    {"gpus-per-node", C(gpus_per_node), 1, 4096, true, true},
    {"max-nodes", C(max_nodes), 0, 1 << 20, false, true},
    {"peak-tflops-fp32", C(peak_tflops[MG_PREC_FP32]), 1e-6, 1e6, true, false},
    {"peak-tflops-bf16", C(peak_tflops[MG_PREC_BF16]), 1e-6, 1e6, true, false},
    {"vector-tflops", C(vector_tflops), 1e-6, 1e6, true, false},
    {"hbm-gib", C(hbm_gib), 1e-3, 1e6, true, false},
    {"hbm-gbps", C(hbm_gbps), 1e-3, 1e6, true, false},
    {"intra-gbps", C(intra_gbps), 1e-6, 1e6, true, false},
    {"intra-latency-us", C(intra_latency_us), 0, 1e6, true, false},
    {"inter-gbps", C(inter_gbps), 1e-6, 1e6, true, false},
    {"inter-latency-us", C(inter_latency_us), 0, 1e6, true, false},
    {"collective-base-latency-us", C(collective_base_latency_us), 0, 1e6, false, false},
    {"leaf-nodes", C(leaf_nodes), 0, 1 << 20, false, true},
    {"oversubscription", C(oversubscription), 1, 1024, false, false},
    {"gemm-efficiency", C(gemm_efficiency), 1e-3, 1, true, false},
    {"gemm-half-gflops", C(gemm_half_gflops), 0, 1e6, true, false},
    {"attention-efficiency", C(attention_efficiency), 1e-3, 1, false, false},
    {"attention-backward-efficiency", C(attention_backward_efficiency), 1e-3, 1, false, false},
    {"memory-efficiency", C(memory_efficiency), 1e-3, 1, true, false},
    {"kernel-overhead-us", C(kernel_overhead_us), 0, 1e6, true, false},
    {"overlap-interference", C(overlap_interference), 0, 1, false, false},
    {"step-overhead-us", C(step_overhead_us), 0, 1e6, false, false},
    {"reserved-gib", C(reserved_gib), 0, 1e6, false, false},
    {"pipeline-serial", C(pipeline_serial), 0, 1, false, true},
};
#undef C
#define N_KEYS (sizeof keys / sizeof *keys)

static double *key_ptr(mg_cluster *c, const ckey *k) { return k->integer ? NULL : (double *)((char *)c + k->off); }
static int *key_iptr(mg_cluster *c, const ckey *k) { return k->integer ? (int *)((char *)c + k->off) : NULL; }

/* The presets (planner/clusters/ has each as a file). Peaks are dense (no sparsity)
 * from the vendors' data sheets; bandwidths per GPU and direction: NVLink at NCCL's
 * all-reduce bus bandwidth (~235 of 300 GB/s on DGX A100, ~370 of 450 on Hopper, ~720
 * of 900 on NVLink 5), the scale-out NIC at ~92% of its line rate (HDR 200 Gb/s on
 * A100, NDR / RoCE 400 Gb/s on Hopper and GB200). The efficiencies (GEMM, attention,
 * memory, overlap interference) were fitted to the fit half of
 * tests/planner/published.tsv only (planner/fit.py; the held-out half is reported, never
 * fitted): A100 to Narayanan et al. 2021 Table 1, Hopper to three of NVIDIA's DGX Cloud
 * recipes. h100-roce is Meta's Llama 3 fabric: pods of 3,072 GPUs (384 nodes) at full
 * bisection, 1:7 oversubscribed above (Llama 3 paper, sec. 3.3.1).
 * Taken from their sources, not fitted: collective latencies from NCCL's own tuning
 * model (src/graph/tuning.cc, NCCL 2.19, ring / Simple protocol, the one large messages
 * use): 8.4 us once per collective, 3.4 us per step over NVLink, 14 us per step over
 * the network; fused attention's backward at 0.86 of its forward's rate on A100
 * (FlashAttention-2, Dao 2023: up to 63% of peak backward, 73% forward) and 0.9 on
 * Hopper (FlashAttention-3, Shah et al. 2024, head size 128 at 16K tokens: 561 TFLOP/s
 * backward, 621 forward). */
#define HOPPER .gpus_per_node = 8, .peak_tflops = {67, 989}, .vector_tflops = 134, .intra_gbps = 370, \
               .intra_latency_us = 3.4, .inter_gbps = 46, .inter_latency_us = 14,                           \
               .collective_base_latency_us = 8.4, .gemm_efficiency = 0.718, .gemm_half_gflops = 11,         \
               .attention_efficiency = 0.8686, .attention_backward_efficiency = 0.9, .kernel_overhead_us = 4, \
               .overlap_interference = 0.1, .step_overhead_us = 469, .reserved_gib = 3,                     \
               .precision = MG_PREC_BF16
static const mg_cluster presets[] = {
    {.name = "dgx-a100-80gb", .gpus_per_node = 8, .peak_tflops = {19.5, 312}, .vector_tflops = 39,
     .hbm_gib = 80, .hbm_gbps = 2039, .intra_gbps = 235, .intra_latency_us = 3.4, .inter_gbps = 23,
     .inter_latency_us = 14, .collective_base_latency_us = 8.4, .oversubscription = 1, .gemm_efficiency = 0.773,
     .gemm_half_gflops = 4.6575, .attention_efficiency = 0.7, .attention_backward_efficiency = 0.86,
     .memory_efficiency = 0.758, .kernel_overhead_us = 4, .overlap_interference = 0.2103,
     .reserved_gib = 3, .precision = MG_PREC_BF16},
    {.name = "dgx-h100", HOPPER, .hbm_gib = 80, .hbm_gbps = 3350, .memory_efficiency = 0.85, .oversubscription = 1},
    {.name = "h100-roce", HOPPER, .hbm_gib = 80, .hbm_gbps = 3350, .memory_efficiency = 0.85, .leaf_nodes = 384,
     .oversubscription = 7},
    {.name = "h200", HOPPER, .hbm_gib = 140, .hbm_gbps = 4800, .memory_efficiency = 0.9, .oversubscription = 1},
    {.name = "gb200-nvl72", .gpus_per_node = 72, .peak_tflops = {80, 2500}, .vector_tflops = 160, .hbm_gib = 173,
     .hbm_gbps = 8000, .intra_gbps = 720, .intra_latency_us = 3.4, .inter_gbps = 46, .inter_latency_us = 14,
     .collective_base_latency_us = 8.4, .oversubscription = 1, .gemm_efficiency = 0.718, .gemm_half_gflops = 28,
     .attention_efficiency = 0.8686, .attention_backward_efficiency = 0.9,
     .memory_efficiency = 0.9, .kernel_overhead_us = 4, .overlap_interference = 0.1, .step_overhead_us = 469,
     .reserved_gib = 3,
     .precision = MG_PREC_BF16},
};
#undef HOPPER
#define N_PRESETS (sizeof presets / sizeof *presets)

const char *mg_precision_name(mg_precision p) { return p == MG_PREC_BF16 ? "bf16" : "fp32"; }

const char *mg_cluster_preset_names(void) { return "dgx-a100-80gb, dgx-h100, h100-roce, h200, gb200-nvl72"; }

int mg_cluster_preset(const char *name, mg_cluster *c, mg_error *err) {
    for (size_t i = 0; i < N_PRESETS; i++)
        if (name && !strcmp(name, presets[i].name)) {
            *c = presets[i];
            return MG_OK;
        }
    return mg_error_set(err, MG_ERR_INVALID, "no cluster preset '%s' (presets: %s)", name ? name : "",
                        mg_cluster_preset_names());
}

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r')) s[--n] = '\0';
    return s;
}

static int parse_number(const char *s, double *v) {
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(x)) return -1;
    *v = x;
    return 0;
}

static int read_lines(FILE *f, const char *path, mg_cluster *c, bool *seen, mg_error *err) {
    char line[512];
    int ln = 0;
    while (fgets(line, sizeof line, f)) {
        ln++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n' && !feof(f))
            return mg_error_set(err, MG_ERR_INVALID, "%s:%d: line too long (at most %zu bytes)", path, ln, sizeof line - 2);
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        char *s = trim(line);
        if (!*s) continue;
        char *key = strtok(s, " \t"), *v = strtok(NULL, " \t"), *extra = strtok(NULL, " \t");
        if (!v || extra) return mg_error_set(err, MG_ERR_INVALID, "%s:%d: '%s' expects one value", path, ln, key);
        if (!strcmp(key, "name")) {
            if (strlen(v) >= sizeof c->name)
                return mg_error_set(err, MG_ERR_INVALID, "%s:%d: name longer than %zu characters", path, ln,
                                    sizeof c->name - 1);
            strcpy(c->name, v);
            continue;
        }
        if (!strcmp(key, "precision")) {
            if (!strcmp(v, "bf16")) c->precision = MG_PREC_BF16;
            else if (!strcmp(v, "fp32")) c->precision = MG_PREC_FP32;
            else return mg_error_set(err, MG_ERR_INVALID, "%s:%d: precision must be bf16 or fp32 (got '%s')", path, ln, v);
            continue;
        }
        size_t k = 0;
        while (k < N_KEYS && strcmp(keys[k].name, key)) k++;
        if (k == N_KEYS)
            return mg_error_set(err, MG_ERR_INVALID, "%s:%d: unknown key '%s' (keys: name, precision, gpus-per-node, "
                                "peak-tflops-fp32, peak-tflops-bf16, vector-tflops, hbm-gib, hbm-gbps, intra-gbps, ...: "
                                "see mgraph-plan --help)", path, ln, key);
        double x;
        if (parse_number(v, &x) || x < keys[k].lo || x > keys[k].hi || (keys[k].integer && x != floor(x)))
            return mg_error_set(err, MG_ERR_INVALID, "%s:%d: %s must be %s in [%g, %g] (got '%s')", path, ln, key,
                                keys[k].integer ? "an integer" : "a number", keys[k].lo, keys[k].hi, v);
        if (seen[k]) return mg_error_set(err, MG_ERR_INVALID, "%s:%d: %s given twice", path, ln, key);
        seen[k] = true;
        if (keys[k].integer) *key_iptr(c, &keys[k]) = (int)x;
        else *key_ptr(c, &keys[k]) = x;
    }
    if (ferror(f)) return mg_error_set(err, MG_ERR_IO, "cannot read cluster file %s: %s", path, strerror(errno));
    return MG_OK;
}

int mg_cluster_read(const char *path, mg_cluster *c, mg_error *err) {
    memset(c, 0, sizeof *c);
    c->precision = MG_PREC_FP32;
    c->oversubscription = 1;
    c->attention_efficiency = 1;
    c->attention_backward_efficiency = 1;
    FILE *f = NULL;
    int orc = mg_input_fopen(path, "cluster file", &f, err);
    if (orc) return orc;
    bool seen[N_KEYS] = {false};
    int rc = read_lines(f, path, c, seen, err);
    fclose(f);
    if (rc) return rc;
    for (size_t k = 0; k < N_KEYS; k++)
        if (keys[k].required && !seen[k])
            return mg_error_set(err, MG_ERR_INVALID, "cluster file %s: missing key '%s'", path, keys[k].name);
    if (!c->name[0]) {
        const char *base = strrchr(path, '/');
        snprintf(c->name, sizeof c->name, "%s", base ? base + 1 : path);
    }
    return MG_OK;
}

int mg_cluster_load(const char *name_or_path, mg_cluster *c, mg_error *err) {
    if (!name_or_path || !*name_or_path)
        return mg_error_set(err, MG_ERR_INVALID, "--cluster needs a preset (%s) or a cluster file",
                            mg_cluster_preset_names());
    for (size_t i = 0; i < N_PRESETS; i++)
        if (!strcmp(name_or_path, presets[i].name)) return mg_cluster_preset(name_or_path, c, err);
    struct stat st;
    if (stat(name_or_path, &st) != 0)
        return mg_error_set(err, MG_ERR_INVALID, "--cluster %s: neither a preset (%s) nor a readable file (%s)",
                            name_or_path, mg_cluster_preset_names(), strerror(errno));
    return mg_cluster_read(name_or_path, c, err);
}

void mg_cluster_print(const mg_cluster *c, FILE *f) {
    fprintf(f, "name %s\nprecision %s\n", c->name, mg_precision_name(c->precision));
    mg_cluster tmp = *c;
    for (size_t k = 0; k < N_KEYS; k++) {
        if (keys[k].integer) fprintf(f, "%s %d\n", keys[k].name, *key_iptr(&tmp, &keys[k]));
        else fprintf(f, "%s %g\n", keys[k].name, *key_ptr(&tmp, &keys[k]));
    }
}
