/* mgraph-plan: predicts step time, memory and MFU of a plan on a cluster, or searches
 * for the best plans, from the graphs mgraph builds (planner/, include/mgraph/planner.h).
 *
 * Takes mgraph-run's model and plan flags (tools/run_config.c's table) plus its own:
 * --cluster, --json, --search, --top, --vocab-size, --bf16/--fp32, virtual stages.
 * Exit status: 0 success, 2 bad usage or input (one message per problem on stderr),
 * 1 failure while running.
 */
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/plan.h"
#include "mgraph/planner.h"
#include "mgraph/tokenizer.h"
#include "run_config.h"
#include "run_plan.h"

typedef struct plan_flags {
    const char *cluster, *layout, *fsdp_strategy;
    bool json, search, help, precision_given, attention_unfused, fp16, grads_fp32, grads_bf16, print_cluster;
    bool tp_comm_overlap, overlap_param_gather, no_overlap_p2p, account_embedding, account_loss;
    bool megatron_fsdp, torch_fsdp2, shared_overlap, cp_allgather;
    mg_precision precision;
    int top, max_micro_batch;
    int64_t vocab_size;          /* 0: from the tokenizer */
} plan_flags;

static void usage(FILE *f) {
    fprintf(f,
            "usage: mgraph-plan --cluster PRESET|FILE [mgraph-run's model and plan flags] [--json] [--search]\n\n"
            "Predicts the step time, model TFLOP/s per GPU, MFU, pipeline bubble, memory per GPU and communication\n"
            "per group of a Megatron-style plan, from the rank graphs mgraph builds for it; --search enumerates plans.\n\n"
            "  --cluster S                         a preset (%s) or a cluster file\n"
            "  --world-size N                      GPUs (default: the plan's tp x pp x cp)\n"
            "  --json                              one JSON object on stdout\n"
            "  --search                            enumerate tp, pp (+ virtual stages), cp, ep, dp, micro-batch size,\n"
            "                                      recompute; drop plans that do not fit; print the best ranked\n"
            "  --top N                             plans --search prints (default 10)\n"
            "  --search-max-micro-batch N          largest micro-batch --search tries (default 8)\n"
            "  --search-keep FLAGS                 with --search, keep these of the query: comma list of tp,pp,mbs,\n"
            "                                      recompute,vp,cp\n"
            "  --vocab-size N                      vocabulary before padding (default: the tokenizer's)\n"
            "  --attention-backend S               unfused|local: cost attention as Megatron's unfused kernels (s x s\n"
            "                                      scores in memory); fused|flash|auto (default): mgraph's fused kernel\n"
            "  --bf16 | --fp16 | --fp32            precision (default: the cluster's; bf16 = Megatron's mixed precision;\n"
            "                                      --fp16 as Megatron's: gradients reduced in 16 bits unless\n"
            "                                      --accumulate-allreduce-grads-in-fp32)\n"
            "  --num-layers-per-virtual-pipeline-stage N | --num-virtual-stages-per-pipeline-rank N\n"
            "                                      interleaved pipeline schedule\n"
            "  --pipeline-model-parallel-layout S  Megatron's explicit split: pp x v stages separated by '|', E the\n"
            "                                      embedding, t a layer, L the loss; X*n, (...)*n repeat (\"E|(t|)*126L\")\n"
            "  --account-for-embedding-in-pipeline-split, --account-for-loss-in-pipeline-split\n"
            "                                      the embedding / loss take a layer's place in the even split\n"
            "  --tp-comm-overlap                   tp collectives pipelined with their GEMMs (userbuffers)\n"
            "  --overlap-param-gather              the distributed optimizer's all-gather beside the next forward\n"
            "  --no-overlap-p2p-communication      the interleaved schedule's stage transfers wait\n"
            "  --use-megatron-fsdp [--data-parallel-sharding-strategy no_shard|optim|optim_grads|optim_grads_params]\n"
            "  --use-torch-fsdp2                   fully sharded data parallelism (optim_grads_params)\n"
            "  --moe-shared-expert-overlap         the shared experts (--moe-shared-expert-intermediate-size) run\n"
            "                                      beside the all-to-alls\n"
            "  --grad-reduce-in-bf16               gradients reduced and kept in 16 bits\n"
            "  --cp-comm-type p2p|allgather        context parallelism's K/V ring beside attention (default), or\n"
            "                                      all-gathered before it\n"
            "  --print-cluster                     print the cluster as a cluster file and exit\n\n"
            "The report gives each group's collective time per step, what of it the step waits for (exposed) and\n"
            "what hides behind compute, memory per pipeline stage with the largest named, and the MFU.\n\n"
            "Cluster file keys (one 'key value' per line, '#' comments): name, precision (bf16|fp32), gpus-per-node,\n"
            "max-nodes, peak-tflops-fp32, peak-tflops-bf16, vector-tflops, hbm-gib, hbm-gbps, intra-gbps,\n"
            "intra-latency-us, inter-gbps, inter-latency-us, gemm-efficiency, gemm-half-gflops, memory-efficiency,\n"
            "kernel-overhead-us, reserved-gib, pipeline-serial (0|1: 1 when the pipeline's stages take turns instead of\n"
            "working at once), leaf-nodes and oversubscription (a group spanning more than leaf-nodes nodes gets\n"
            "inter-gbps / oversubscription), attention-efficiency, attention-backward-efficiency (fused attention's\n"
            "backward rate / its forward's, default 1), collective-base-latency-us (once per collective besides\n"
            "each step's latency, default 0), overlap-interference (a matrix op of F FLOPs runs at\n"
            "peak x gemm-efficiency x F/(F + half)).\n\n"
            "The model and plan flags are mgraph-run's (mgraph-run --help).\n"
            "Exit status: 0 success, 2 bad usage or input, 1 failure while running.\n",
            mg_cluster_preset_names());
}

static bool parse_int(const char *s, long lo, long hi, long *v) {
    char *end;
    if (!s || !*s) return false;
    long x = strtol(s, &end, 10);
    if (*end || x < lo || x > hi) return false;
    *v = x;
    return true;
}

/* Takes the planner's own flags out of argv; the rest goes to mgraph-run's parser. */
static void take_flags(int argc, char **argv, plan_flags *pf, char **rest, int *n_rest, char *keep, size_t keep_len,
                       mg_run_notes *notes) {
    *n_rest = 0;
    rest[(*n_rest)++] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        long x;
#define NEED_VALUE()                                                                                                   \
    if (!val || !strncmp(val, "--", 2)) {                                                                              \
        mg_run_notes_error(notes, "%s needs a value", a);                                                              \
        continue;                                                                                                      \
    }                                                                                                                  \
    i++
        if (!strcmp(a, "--cluster")) {
            NEED_VALUE();
            pf->cluster = val;
        } else if (!strcmp(a, "--json")) {
            pf->json = true;
        } else if (!strcmp(a, "--search")) {
            pf->search = true;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            pf->help = true;
        } else if (!strcmp(a, "--bf16") || !strcmp(a, "--fp16")) {
            pf->precision = MG_PREC_BF16;
            pf->precision_given = true;
            pf->fp16 = !strcmp(a, "--fp16");
            rest[(*n_rest)++] = argv[i]; /* the shared checks need them too (--loss-scale needs --fp16) */
        } else if (!strcmp(a, "--accumulate-allreduce-grads-in-fp32")) {
            pf->grads_fp32 = true;
            rest[(*n_rest)++] = argv[i];
        } else if (!strcmp(a, "--fp32")) {
            pf->precision = MG_PREC_FP32;
            pf->precision_given = true;
        } else if (!strcmp(a, "--attention-backend")) {
            /* Megatron's flag: how the planner costs attention (mgraph-run has one fused kernel) */
            NEED_VALUE();
            if (!strcmp(val, "unfused") || !strcmp(val, "local")) pf->attention_unfused = true;
            else if (!strcmp(val, "auto") || !strcmp(val, "flash") || !strcmp(val, "fused")) pf->attention_unfused = false;
            else mg_run_notes_error(notes, "--attention-backend must be auto, flash, fused, unfused or local (got '%s')", val);
        } else if (!strcmp(a, "--tp-comm-overlap")) {
            pf->tp_comm_overlap = true;
        } else if (!strcmp(a, "--overlap-param-gather")) {
            pf->overlap_param_gather = true;
        } else if (!strcmp(a, "--no-overlap-p2p-communication")) {
            pf->no_overlap_p2p = true;
        } else if (!strcmp(a, "--overlap-p2p-communication")) {
            pf->no_overlap_p2p = false;
        } else if (!strcmp(a, "--account-for-embedding-in-pipeline-split")) {
            pf->account_embedding = true;
        } else if (!strcmp(a, "--account-for-loss-in-pipeline-split")) {
            pf->account_loss = true;
        } else if (!strcmp(a, "--pipeline-model-parallel-layout")) {
            NEED_VALUE();
            pf->layout = val;
        } else if (!strcmp(a, "--use-megatron-fsdp")) {
            pf->megatron_fsdp = true;
        } else if (!strcmp(a, "--use-torch-fsdp2")) {
            pf->torch_fsdp2 = true;
        } else if (!strcmp(a, "--data-parallel-sharding-strategy")) {
            NEED_VALUE();
            pf->fsdp_strategy = val;
        } else if (!strcmp(a, "--moe-shared-expert-overlap")) {
            pf->shared_overlap = true;
        } else if (!strcmp(a, "--cp-comm-type")) {
            NEED_VALUE();
            if (!strcmp(val, "p2p")) pf->cp_allgather = false;
            else if (!strcmp(val, "allgather") || !strcmp(val, "all_gather")) pf->cp_allgather = true;
            else mg_run_notes_error(notes, "--cp-comm-type: the planner prices p2p (the K/V ring) and allgather (got '%s')", val);
        } else if (!strcmp(a, "--grad-reduce-in-bf16")) {
            pf->grads_bf16 = true;
            rest[(*n_rest)++] = argv[i];
        } else if (!strcmp(a, "--print-cluster")) {
            pf->print_cluster = true;
        } else if (!strcmp(a, "--top")) {
            NEED_VALUE();
            if (!parse_int(val, 1, 1000, &x)) mg_run_notes_error(notes, "--top must be in 1..1000 (got '%s')", val);
            else pf->top = (int)x;
        } else if (!strcmp(a, "--search-max-micro-batch")) {
            NEED_VALUE();
            if (!parse_int(val, 1, 1 << 16, &x))
                mg_run_notes_error(notes, "--search-max-micro-batch must be in 1..65536 (got '%s')", val);
            else pf->max_micro_batch = (int)x;
        } else if (!strcmp(a, "--search-keep")) {
            NEED_VALUE();
            snprintf(keep, keep_len, "%s", val);
        } else if (!strcmp(a, "--vocab-size")) {
            NEED_VALUE();
            if (!parse_int(val, 1, 1L << 31, &x)) mg_run_notes_error(notes, "--vocab-size must be in 1..2^31 (got '%s')", val);
            else pf->vocab_size = x;
        } else {
            rest[(*n_rest)++] = argv[i];
        }
#undef NEED_VALUE
    }
    rest[*n_rest] = NULL;
}

static int search_keep(const char *s, mg_search_options *o, mg_error *err) {
    if (!s[0]) return MG_OK;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        if (!strcmp(t, "tp")) o->fixed_tp = true;
        else if (!strcmp(t, "pp")) o->fixed_pp = true;
        else if (!strcmp(t, "mbs")) o->fixed_mbs = true;
        else if (!strcmp(t, "recompute")) o->fixed_recompute = true;
        else if (!strcmp(t, "vp")) o->fixed_vp = true;
        else if (!strcmp(t, "cp")) o->fixed_cp = true;
        else
            return mg_error_set(err, MG_ERR_INVALID, "--search-keep: unknown '%s' (tp, pp, mbs, recompute, vp, cp)", t);
    }
    return MG_OK;
}

static void print_notes(const mg_run_notes *n) {
    /* the shared parser's lines, under this tool's name */
    const char *bufs[2] = {n->errors, n->warnings};
    const char *kinds[2] = {"error", "warning"};
    for (int k = 0; k < 2; k++) {
        const char *s = bufs[k];
        while (*s) {
            const char *e = strchr(s, '\n');
            int len = e ? (int)(e - s) : (int)strlen(s);
            if (len) fprintf(stderr, "mgraph-plan: %s: %.*s\n", kinds[k], len, s);
            s += len + (e ? 1 : 0);
        }
    }
}

static int emit_json(json_t *o) {
    char *s = json_dumps(o, JSON_INDENT(2) | JSON_REAL_PRECISION(9));
    json_decref(o);
    if (!s) {
        fprintf(stderr, "mgraph-plan: failed: cannot format JSON\n");
        return 1;
    }
    printf("%s\n", s);
    free(s);
    return fflush(stdout) ? 1 : 0;
}

int main(int argc, char **argv) {
    plan_flags pf = {0};
    mg_run_notes notes = {0};
    char keep[256] = "";
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    if (!rest) return 1;
    int n_rest;
    take_flags(argc, argv, &pf, rest, &n_rest, keep, sizeof keep, &notes);
    if (pf.help) {
        usage(stdout);
        free(rest);
        return 0;
    }
    mg_run_config cfg;
    mg_run_config_defaults(&cfg);
    /* no model flag at all: mgraph-run's demo model */
    mg_run_config_parse(&cfg, n_rest, rest, &notes);
    free(rest);
    cfg.vocab_size = pf.vocab_size; /* --vocab-size is also NullTokenizer's and TikTokenizer's */
    mg_run_config_check(&cfg, &notes);
    mg_error err = {0};
    mg_cluster cl;
    mg_plan_query q;
    mg_plan_query_defaults(&q);
    int rc = MG_OK;
    if (!pf.cluster) mg_run_notes_error(&notes, "--cluster is required: a preset (%s) or a cluster file", mg_cluster_preset_names());
    else if ((rc = mg_cluster_load(pf.cluster, &cl, &err))) {
        mg_run_notes_error(&notes, "%s", err.msg);
        mg_error_clear(&err);
    }
    mg_search_options so = {0};
    if (search_keep(keep, &so, &err)) {
        mg_run_notes_error(&notes, "%s", err.msg);
        mg_error_clear(&err);
    }
    int64_t vocab = pf.vocab_size;
    if (!notes.n_errors && !vocab && mg_run_plan_vocab(&cfg, &vocab, &err)) {
        mg_run_notes_error(&notes, "%s", err.msg);
        mg_error_clear(&err);
    }
    int world = mg_run_config_given(&cfg, "--world-size") ? cfg.world_size : 0;
    if (mg_run_config_given(&cfg, "--world-size") && (world < 1 || world > 1 << 22))
        mg_run_notes_error(&notes, "--world-size must be in 1..%d (got %d)", 1 << 22, world);
    if (!notes.n_errors && mg_run_plan_query(&cfg, pf.cluster ? &cl : NULL, world, vocab, &q, &err)) {
        mg_run_notes_error(&notes, "%s", err.msg);
        mg_error_clear(&err);
    }
    q.fsdp = MG_FSDP_NONE;
    if (pf.torch_fsdp2 && pf.megatron_fsdp) mg_run_notes_error(&notes, "give --use-megatron-fsdp or --use-torch-fsdp2, not both");
    if (pf.fsdp_strategy && !pf.megatron_fsdp)
        mg_run_notes_error(&notes, "--data-parallel-sharding-strategy needs --use-megatron-fsdp");
    if (pf.torch_fsdp2) q.fsdp = MG_FSDP_OPTIM_GRADS_PARAMS;
    if (pf.megatron_fsdp) {
        const char *st = pf.fsdp_strategy ? pf.fsdp_strategy : "optim_grads_params";
        if (!strcmp(st, "no_shard")) q.fsdp = MG_FSDP_NONE;
        else if (!strcmp(st, "optim")) q.fsdp = MG_FSDP_OPTIM;
        else if (!strcmp(st, "optim_grads")) q.fsdp = MG_FSDP_OPTIM_GRADS;
        else if (!strcmp(st, "optim_grads_params")) q.fsdp = MG_FSDP_OPTIM_GRADS_PARAMS;
        else
            mg_run_notes_error(&notes, "--data-parallel-sharding-strategy must be no_shard, optim, optim_grads or "
                                       "optim_grads_params (got '%s')", st);
    }
    if (pf.layout && !*pf.layout) mg_run_notes_error(&notes, "--pipeline-model-parallel-layout is empty");
    if (pf.layout && (mg_run_config_given(&cfg, "--num-layers-per-virtual-pipeline-stage") ||
                      mg_run_config_given(&cfg, "--num-virtual-stages-per-pipeline-rank")))
        mg_run_notes_error(&notes, "--pipeline-model-parallel-layout says the virtual stages itself: drop the virtual-stage flag");
    if (notes.n_errors || notes.n_warnings) print_notes(&notes);
    if (notes.n_errors) return 2;
    if (pf.print_cluster) {
        mg_cluster_print(&cl, stdout);
        return fflush(stdout) ? 1 : 0;
    }

    q.overlap_param_gather = pf.overlap_param_gather;
    q.tp_comm_overlap = pf.tp_comm_overlap;
    q.overlap_p2p = !pf.no_overlap_p2p;
    q.pp_layout = pf.layout;
    q.account_embedding = pf.account_embedding;
    q.account_loss = pf.account_loss;
    q.cp_allgather = pf.cp_allgather;
    q.moe_shared_overlap = pf.shared_overlap;
    q.grads_16bit = (pf.fp16 && !pf.grads_fp32) || pf.grads_bf16;
    q.grad_buffer_16bit = pf.grads_bf16;
    q.attention_unfused = pf.attention_unfused;
    if (pf.precision_given) q.precision = pf.precision;
    if (cfg.use_precision_aware_optimizer) { /* bf16 moments / main gradients (the checks allow fp32 or bf16) */
        q.moment_bytes = (strcmp(cfg.exp_avg_dtype, "bf16") ? 4 : 2) + (strcmp(cfg.exp_avg_sq_dtype, "bf16") ? 4 : 2);
        if (!strcmp(cfg.main_grads_dtype, "bf16")) q.grads_16bit = q.grad_buffer_16bit = true;
    }

    if (!pf.search) {
        mg_prediction pr;
        rc = mg_plan_predict(&cl, &q, &pr, &err);
        if (rc) {
            fprintf(stderr, "mgraph-plan: %s%s\n", mg_status_is_usage(rc) ? "error: " : "failed: ", err.msg);
            return mg_status_is_usage(rc) ? 2 : 1;
        }
        if (pf.json) return emit_json(mg_prediction_json(&cl, &q, &pr));
        mg_prediction_print(&cl, &q, &pr, stdout);
        return fflush(stdout) ? 1 : 0;
    }

    so.world = q.world;
    so.top = pf.top > 0 ? pf.top : 10;
    so.max_micro_batch = pf.max_micro_batch;
    mg_search_result *res = calloc((size_t)so.top, sizeof *res);
    if (!res) return 1;
    int n, tried, dropped, refused;
    rc = mg_plan_search(&cl, &q, &so, res, &n, &tried, &dropped, &refused, &err);
    if (rc) {
        free(res);
        fprintf(stderr, "mgraph-plan: %s%s\n", mg_status_is_usage(rc) ? "error: " : "failed: ", err.msg);
        return mg_status_is_usage(rc) ? 2 : 1;
    }
    if (pf.json) {
        json_t *o = json_object(), *arr = json_array();
        for (int i = 0; i < n; i++) json_array_append_new(arr, mg_prediction_json(&cl, &res[i].q, &res[i].p));
        json_object_set_new(o, "plans", arr);
        json_object_set_new(o, "tried", json_integer(tried));
        json_object_set_new(o, "dropped_memory", json_integer(dropped));
        json_object_set_new(o, "refused", json_integer(refused));
        free(res);
        return emit_json(o);
    }
    printf("mgraph-plan --search: %d GPUs of %s, global batch %d: %d plans predicted, %d do not fit in memory, %d "
           "refused by the partitioner's rules; the best %d:\n",
           q.world, cl.name, q.global_batch, tried, dropped, refused, n);
    printf("%4s %3s %3s %3s %3s %3s %5s %4s %-12s %10s %9s %6s %7s %8s\n", "rank", "tp", "pp", "vp", "cp", "ep", "dp",
           "mbs", "recompute", "step s", "TFLOP/s", "MFU", "bubble", "mem GiB");
    /* (the most memory of any stage) */
    for (int i = 0; i < n; i++) {
        const mg_plan_query *r = &res[i].q;
        const mg_prediction *p = &res[i].p;
        printf("%4d %3d %3d %3d %3d %3d %5d %4d %-12s %10.4f %9.1f %5.1f%% %6.2f%% %8.2f%s\n", i + 1, r->plan.tp,
               r->plan.pp, p->virtual_stages, r->plan.cp, r->plan.ep, p->dp, r->micro_batch,
               r->recompute == MG_RECOMPUTE_FULL ? "full" : r->recompute == MG_RECOMPUTE_SELECTIVE ? "selective" : "none",
               p->step_time_s, p->tflops_per_gpu, 100 * p->mfu, 100 * p->bubble_fraction, p->mem_total / 1073741824.0,
               "");
    }
    free(res);
    return fflush(stdout) ? 1 : 0;
}
