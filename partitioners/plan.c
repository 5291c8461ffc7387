/* Partition plans: defaults, plan files, and the rules a plan must satisfy. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mgraph/infile.h"
#include "mgraph/plan.h"
#include "ops/op.h"

static void add_rule(mg_plan *p, const char *pattern, int dim) {
    if (p->n_rules >= MG_PLAN_MAX_RULES) return;
    snprintf(p->rules[p->n_rules].pattern, sizeof p->rules[0].pattern, "%s", pattern);
    p->rules[p->n_rules++].dim = dim;
}

void mg_plan_defaults(mg_plan *p) {
    memset(p, 0, sizeof *p);
    p->tp = p->pp = p->cp = p->ep = 1;
    p->vpp = 1;
    p->bucket_numel = 40000000; /* Megatron's default bucket size */
    p->matmul_tiles = 1;
    p->microbatch_slots = MG_PLAN_DEFAULT_SLOTS;
    p->matmul_tile_min_flops = 5e7; /* ~0.5 ms of sgemm: smaller tiles cost more than they share */
    /* no shard rules: parameters are placed by the layout roles the model declared
     * (mg_tensor.layout); a plan file's rules override them by name */
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
    return s;
}

static int parse_int(const char *v, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi) return -1;
    *out = x;
    return 0;
}

static int parse_bool(const char *v, bool *out) {
    if (!strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "yes")) *out = true;
    else if (!strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "no")) *out = false;
    else return -1;
    return 0;
}

int mg_plan_read(mg_plan *p, const char *path, mg_error *err) {
    FILE *f = NULL;
    int orc = mg_input_fopen(path, "plan file", &f, err);
    if (orc) return orc;
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    int ln = 0, rc = MG_OK;
    while (!rc && (got = getline(&line, &cap, f)) >= 0) {
        ln++;
        /* getline gives the true length: a NUL is not text, and would cut the line short */
        if (memchr(line, '\0', (size_t)got)) {
            rc = mg_error_set(err, MG_ERR_INVALID, "%s:%d: NUL byte in the line (a plan file is text)", path, ln);
            break;
        }
        if (got > 511) {
            rc = mg_error_set(err, MG_ERR_INVALID, "%s:%d: line too long (%zd bytes, at most 511)", path, ln, got);
            break;
        }
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        char *s = trim(line);
        if (!*s) continue;
        char *key = strtok(s, " \t"), *v1 = strtok(NULL, " \t"), *v2 = strtok(NULL, " \t"), *v3 = strtok(NULL, " \t");
        long x;
        bool b;
        int *sizes[] = {&p->tp, &p->pp, &p->cp, &p->ep, &p->vpp, &p->pp_first_layers, &p->pp_last_layers, &p->etp};
        const char *size_keys[] = {"tensor-model-parallel-size", "pipeline-model-parallel-size",
                                   "context-parallel-size", "expert-model-parallel-size",
                                   "num-virtual-stages-per-pipeline-rank", "decoder-first-pipeline-num-layers",
                                   "decoder-last-pipeline-num-layers", "expert-tensor-parallel-size"};
        int done = 0;
        for (int i = 0; i < 8 && !done; i++)
            if (!strcmp(key, size_keys[i])) {
                done = 1;
                if (!v1 || v2 || parse_int(v1, 1, 1 << 20, &x))
                    rc = mg_error_set(err, MG_ERR_INVALID, "%s:%d: %s expects one positive integer", path, ln, key);
                else *sizes[i] = (int)x;
            }
        if (done) continue;
        if (!strcmp(key, "sequence-parallel") || !strcmp(key, "use-distributed-optimizer")) {
            if (!v1 || v2 || parse_bool(v1, &b))
                rc = mg_error_set(err, MG_ERR_INVALID, "%s:%d: %s expects true or false", path, ln, key);
            else if (key[0] == 's') p->sequence_parallel = b;
            else p->distributed_optimizer = b;
        } else if (!strcmp(key, "order")) {
            mg_mesh m;
            mg_error e = {0};
            mg_mesh_spec sp = {1, 1, 1, 1, 1, v1};
            if (!v1 || v2 || strlen(v1) >= sizeof p->order || mg_mesh_init_spec(&m, 1, 0, &sp, &e))
                rc = mg_error_set(err, MG_ERR_INVALID, "%s:%d: order expects axes joined by '-', innermost first "
                                  "(tp-cp-ep-dp-pp)%s%s", path, ln, e.code ? ": " : "", e.code ? e.msg : "");
            else snprintf(p->order, sizeof p->order, "%s", v1);
        } else if (!strcmp(key, "data-parallel-sharding-strategy")) {
            if (!v1 || v2 || mg_plan_set_fsdp(p, v1))
                rc = mg_error_set(err, MG_ERR_INVALID,
                                  "%s:%d: data-parallel-sharding-strategy expects no_shard, optim, optim_grads or "
                                  "optim_grads_params", path, ln);
        } else if (!strcmp(key, "pipeline-model-parallel-layout")) {
            int ns = 0;
            mg_error e = {0};
            if (!v1 || v2 || strlen(v1) >= sizeof p->pp_layout || mg_plan_pp_layout_stages(v1, &ns, &e))
                rc = mg_error_set(err, MG_ERR_INVALID, "%s:%d: pipeline-model-parallel-layout expects one layout string "
                                  "(no spaces)%s%s", path, ln, e.code ? ": " : "", e.code ? e.msg : "");
            else snprintf(p->pp_layout, sizeof p->pp_layout, "%s", v1);
        } else if (!strcmp(key, "account-for-embedding-in-pipeline-split") ||
                   !strcmp(key, "account-for-loss-in-pipeline-split")) {
            if (!v1 || v2 || parse_bool(v1, &b))
                rc = mg_error_set(err, MG_ERR_INVALID, "%s:%d: %s expects true or false", path, ln, key);
            else if (strstr(key, "embedding")) p->pp_account_embedding = b;
            else p->pp_account_loss = b;
        } else if (!strcmp(key, "use-tp-pp-dp-mapping")) {
            if (!v1 || v2 || parse_bool(v1, &b))
                rc = mg_error_set(err, MG_ERR_INVALID, "%s:%d: %s expects true or false", path, ln, key);
            else snprintf(p->order, sizeof p->order, "%s", b ? "tp-pp-dp" : "");
        } else if (!strcmp(key, "pipeline-schedule")) {
            if (!v1 || v2 || mg_pp_schedule_parse(v1, &p->pp_schedule))
                rc = mg_error_set(err, MG_ERR_INVALID, "%s:%d: pipeline-schedule expects auto, 1f1b, interleaved or gpipe",
                                  path, ln);
        } else if (!strcmp(key, "matmul-tiles")) {
            if (!v1 || v2 || parse_int(v1, 1, 64, &x))
                rc = mg_error_set(err, MG_ERR_INVALID, "%s:%d: matmul-tiles expects an integer in 1..64", path, ln);
            else p->matmul_tiles = (int)x;
        } else if (!strcmp(key, "microbatch-slots")) {
            if (!v1 || v2 || parse_int(v1, 1, 64, &x))
                rc = mg_error_set(err, MG_ERR_INVALID, "%s:%d: microbatch-slots expects an integer in 1..64", path, ln);
            else p->microbatch_slots = (int)x;
        } else if (!strcmp(key, "micro-batch-split")) {
            if (v1 && !v2 && !strcmp(v1, "auto")) p->micro_batch_split = 0;
            else if (!v1 || v2 || parse_int(v1, 1, 64, &x))
                rc = mg_error_set(err, MG_ERR_INVALID, "%s:%d: micro-batch-split expects auto or an integer in 1..64",
                                  path, ln);
            else p->micro_batch_split = (int)x;
        } else if (!strcmp(key, "bucket-size")) {
            if (!v1 || v2 || parse_int(v1, 1, 1L << 40, &x))
                rc = mg_error_set(err, MG_ERR_INVALID, "%s:%d: bucket-size expects a positive integer", path, ln);
            else p->bucket_numel = x;
        } else if (!strcmp(key, "shard")) {
            bool none = v2 && !strcmp(v2, "none"); /* whole on every tensor-parallel rank */
            x = -1;
            if (!v1 || !v2 || v3 || (!none && parse_int(v2, 0, MG_MAX_DIMS - 1, &x)))
                rc = mg_error_set(err, MG_ERR_INVALID, "%s:%d: shard expects a name pattern and a dimension (or none)",
                                  path, ln);
            else if (p->n_rules >= MG_PLAN_MAX_RULES)
                rc = mg_error_set(err, MG_ERR_INVALID, "%s:%d: more than %d shard rules", path, ln, MG_PLAN_MAX_RULES);
            else add_rule(p, v1, (int)x);
        } else if (!strcmp(key, "shard-clear")) {
            if (v1) rc = mg_error_set(err, MG_ERR_INVALID, "%s:%d: shard-clear takes no value", path, ln);
            p->n_rules = 0;
        } else {
            rc = mg_error_set(err, MG_ERR_INVALID, "%s:%d: unknown setting '%s'", path, ln, key);
        }
    }
    if (!rc && ferror(f)) rc = mg_error_set(err, MG_ERR_IO, "error reading plan file %s: %s", path, strerror(errno));
    free(line);
    fclose(f);
    return rc;
}

static const char *const fsdp_names[] = {"no_shard", "optim", "optim_grads", "optim_grads_params"};

const char *mg_fsdp_name(mg_fsdp f) { return f >= 0 && f <= MG_FSDP_OPTIM_GRADS_PARAMS ? fsdp_names[f] : "?"; }

int mg_plan_set_fsdp(mg_plan *p, const char *s) {
    if (s && !strcmp(s, "optim")) { /* ZeRO-1: Megatron's distributed optimizer (dist_opt.c) */
        p->fsdp = MG_FSDP_NONE;
        p->distributed_optimizer = true;
        return MG_OK;
    }
    for (int i = 0; s && i <= MG_FSDP_OPTIM_GRADS_PARAMS; i++)
        if (i != MG_FSDP_OPTIM && !strcmp(s, fsdp_names[i])) {
            p->fsdp = (mg_fsdp)i;
            return MG_OK;
        }
    return MG_ERR_INVALID;
}

static const char *const schedule_names[] = {"auto", "1f1b", "interleaved", "gpipe"};

const char *mg_pp_schedule_name(mg_pp_schedule_kind k) {
    return k >= 0 && k <= MG_PP_SCHEDULE_GPIPE ? schedule_names[k] : "?";
}

int mg_pp_schedule_parse(const char *s, mg_pp_schedule_kind *k) {
    for (int i = 0; s && i <= MG_PP_SCHEDULE_GPIPE; i++)
        if (!strcmp(s, schedule_names[i])) {
            *k = (mg_pp_schedule_kind)i;
            return MG_OK;
        }
    return MG_ERR_INVALID;
}

void mg_plan_print(const mg_plan *p, FILE *f) {
    fprintf(f, "tensor-model-parallel-size %d\npipeline-model-parallel-size %d\ncontext-parallel-size %d\n"
               "expert-model-parallel-size %d\nsequence-parallel %s\nuse-distributed-optimizer %s\nbucket-size %lld\n"
               "matmul-tiles %d\nmicrobatch-slots %d\nnum-virtual-stages-per-pipeline-rank %d\n"
               "pipeline-schedule %s\n",
            p->tp, p->pp, p->cp, p->ep, p->sequence_parallel ? "true" : "false",
            p->distributed_optimizer ? "true" : "false", (long long)p->bucket_numel, p->matmul_tiles,
            p->microbatch_slots, p->vpp, mg_pp_schedule_name(p->pp_schedule));
    if (p->etp) fprintf(f, "expert-tensor-parallel-size %d\n", p->etp);
    if (p->fsdp) fprintf(f, "data-parallel-sharding-strategy %s\n", mg_fsdp_name(p->fsdp));
    if (p->pp_layout[0]) fprintf(f, "pipeline-model-parallel-layout %s\n", p->pp_layout);
    if (p->pp_account_embedding) fprintf(f, "account-for-embedding-in-pipeline-split true\n");
    if (p->pp_account_loss) fprintf(f, "account-for-loss-in-pipeline-split true\n");
    if (p->order[0]) fprintf(f, "order %s\n", p->order);
    if (p->micro_batch_split) fprintf(f, "micro-batch-split %d\n", p->micro_batch_split);
    else fprintf(f, "micro-batch-split auto\n");
    if (p->pp_first_layers) fprintf(f, "decoder-first-pipeline-num-layers %d\n", p->pp_first_layers);
    if (p->pp_last_layers) fprintf(f, "decoder-last-pipeline-num-layers %d\n", p->pp_last_layers);
    for (int i = 0; i < p->n_rules; i++)
        if (p->rules[i].dim < 0) fprintf(f, "shard %s none\n", p->rules[i].pattern);
        else fprintf(f, "shard %s %d\n", p->rules[i].pattern, p->rules[i].dim);
}

bool mg_plan_expert_tp(const mg_plan *p) { return p->etp > 1 && p->etp == p->tp; }

int mg_plan_mesh(const mg_plan *p, int world, int rank, mg_mesh *m, mg_error *err) {
    /* the expert generator's tensor group: --expert-tensor-parallel-size when it is more
     * than 1 (ep.c gathers the tokens of its ranks when it is not tp), else tp's: the
     * experts whole on each of its ranks (etp 1: Megatron would lay ep across tp ranks
     * instead; the same computation) */
    int etp = p->etp > 1 ? p->etp : p->tp;
    mg_mesh_spec s = {p->tp, p->cp, p->ep, p->pp, etp, p->order[0] ? p->order : NULL};
    return mg_mesh_init_spec(m, world, rank, &s, err);
}

int mg_plan_check(const mg_plan *p, int world, mg_error *err) {
    if (world < 1) return mg_error_set(err, MG_ERR_INVALID, "world size must be >= 1 (got %d)", world);
    if (p->tp < 1 || p->pp < 1 || p->cp < 1 || p->ep < 1)
        return mg_error_set(err, MG_ERR_INVALID, "parallel sizes must be >= 1 (tp %d, pp %d, cp %d, ep %d)", p->tp,
                            p->pp, p->cp, p->ep);
    int64_t inner = (int64_t)p->tp * p->pp * p->cp;
    if (world % inner)
        return mg_error_set(err, MG_ERR_INVALID,
                            "world size %d is not a multiple of tensor x pipeline x context parallel sizes "
                            "(--tensor-model-parallel-size %d x --pipeline-model-parallel-size %d x "
                            "--context-parallel-size %d = %lld): launch a multiple of %lld ranks with mpirun -np, "
                            "or partition without running with --dry-run --world-size",
                            world, p->tp, p->pp, p->cp, (long long)inner, (long long)inner);
    if (p->vpp < 1) return mg_error_set(err, MG_ERR_INVALID, "virtual pipeline stages must be >= 1 (got %d)", p->vpp);
    if (p->vpp > 1 && p->pp < 2)
        return mg_error_set(err, MG_ERR_INVALID,
                            "--num-virtual-stages-per-pipeline-rank %d needs --pipeline-model-parallel-size > 1",
                            p->vpp);
    if ((p->pp_first_layers || p->pp_last_layers) && p->pp < 2)
        return mg_error_set(err, MG_ERR_INVALID,
                            "--decoder-first/last-pipeline-num-layers need --pipeline-model-parallel-size > 1");
    if ((p->pp_first_layers || p->pp_last_layers) && p->vpp > 1)
        return mg_error_set(err, MG_ERR_INVALID,
                            "--decoder-first/last-pipeline-num-layers cannot be combined with virtual pipeline stages");
    bool account = p->pp_account_embedding || p->pp_account_loss;
    if ((p->pp_layout[0] || account) && p->pp < 2)
        return mg_error_set(err, MG_ERR_INVALID, "--%s needs --pipeline-model-parallel-size > 1",
                            p->pp_layout[0] ? "pipeline-model-parallel-layout" : "account-for-embedding/loss-in-pipeline-split");
    if (p->pp_layout[0] && (account || p->pp_first_layers || p->pp_last_layers))
        return mg_error_set(err, MG_ERR_INVALID,
                            "--pipeline-model-parallel-layout places every layer itself: not with --account-for-* or "
                            "--decoder-first/last-pipeline-num-layers");
    if (p->pp_layout[0]) {
        int n = 0;
        int rc = mg_plan_pp_layout_stages(p->pp_layout, &n, err);
        if (rc) return rc;
        if (n != p->pp * p->vpp)
            return mg_error_set(err, MG_ERR_INVALID,
                                "--pipeline-model-parallel-layout '%s' has %d virtual stages: not --pipeline-model-"
                                "parallel-size %d x %d model chunks%s",
                                p->pp_layout, n, p->pp, p->vpp,
                                n % p->pp ? " (its stages must be a multiple of the pipeline size)" : "");
    }
    if (p->pp_schedule == MG_PP_SCHEDULE_INTERLEAVED && p->vpp < 2)
        return mg_error_set(err, MG_ERR_INVALID,
                            "the interleaved pipeline schedule needs --num-virtual-stages-per-pipeline-rank > 1");
    if (p->pp_schedule == MG_PP_SCHEDULE_1F1B && p->vpp > 1)
        return mg_error_set(err, MG_ERR_INVALID,
                            "the 1F1B pipeline schedule runs one model chunk per stage: with virtual stages use "
                            "'interleaved' (or 'gpipe')");
    if (p->ep > 1) { /* experts split over ep ranks taken from dp x cp (partitioners/ep.c) */
        int64_t dpcp = world / inner * p->cp;
        if (dpcp % p->ep)
            return mg_error_set(err, MG_ERR_INVALID,
                                "--expert-model-parallel-size %d does not divide the data-parallel x context-parallel "
                                "size %lld (world %d / (tp %d x pp %d)): expert parallelism reuses those ranks",
                                p->ep, (long long)dpcp, world, p->tp, p->pp);
    }
    if (p->etp < 0) return mg_error_set(err, MG_ERR_INVALID, "--expert-tensor-parallel-size must be >= 1 (got %d)", p->etp);
    { /* the mesh's own rules (the order, the expert layers' world) */
        mg_mesh m;
        int rc = mg_plan_mesh(p, world, 0, &m, err);
        if (rc) return rc;
    }
    if (p->fsdp != MG_FSDP_NONE && ((p->ep > 1 && p->etp > 1) || (p->etp > 1 && p->etp != p->tp)))
        /* (named by what the plan holds, not by a flag: --use-megatron-fsdp,
         * --use-torch-fsdp2 and a plan file's data-parallel-sharding-strategy get here) */
        return mg_error_set(err, MG_ERR_UNSUPPORTED,
                            "fully sharded data parallelism (FSDP, sharding strategy %s) with %s is not supported yet "
                            "(FSDP shards over dp x cp, and expert weights over edp, with tensor, context, pipeline "
                            "and expert parallelism)",
                            mg_fsdp_name(p->fsdp),
                            p->ep > 1 ? "expert parallelism and expert tensor parallelism"
                                      : "an expert tensor parallel size other than tp");
    if (p->sequence_parallel && p->tp == 1)
        return mg_error_set(err, MG_ERR_INVALID, "--sequence-parallel needs --tensor-model-parallel-size > 1");
    if (p->bucket_numel < 1) return mg_error_set(err, MG_ERR_INVALID, "bucket size must be >= 1");
    if (p->matmul_tiles < 1 || p->matmul_tiles > 64)
        return mg_error_set(err, MG_ERR_INVALID, "matmul tiles must be in 1..64 (got %d)", p->matmul_tiles);
    if (p->microbatch_slots < 1 || p->microbatch_slots > 64)
        return mg_error_set(err, MG_ERR_INVALID, "micro-batch slots must be in 1..64 (got %d)", p->microbatch_slots);
    if (p->micro_batch_split < 0 || p->micro_batch_split > 64)
        return mg_error_set(err, MG_ERR_INVALID, "micro-batch split must be auto (0) or in 1..64 (got %d)",
                            p->micro_batch_split);
    return MG_OK;
}

int mg_plan_check_split(const mg_plan *p, int micro_batch, bool moe, mg_error *err) {
    int k = p->micro_batch_split;
    if (k <= 1) return MG_OK;
    if (micro_batch % k)
        return mg_error_set(err, MG_ERR_INVALID, "micro-batch split %d does not divide --micro-batch-size %d", k,
                            micro_batch);
    if (p->pp > 1)
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "micro-batch split %d with pipeline parallelism is not supported", k);
    if (moe)
        return mg_error_set(err, MG_ERR_UNSUPPORTED,
                            "micro-batch split %d with a MoE model is not supported (it would change the "
                            "load-balancing loss and the expert capacity, which are per micro-batch)", k);
    return MG_OK;
}

int mg_plan_micro_batch_split(const mg_plan *p, int micro_batch, int local_micro, int workers, bool moe) {
    if (p->micro_batch_split > 0) return p->micro_batch_split;
    if (p->pp > 1 || moe || local_micro < 1 || local_micro >= workers) return 1;
    for (int k = 2; k <= micro_batch; k++)
        if (micro_batch % k == 0 && local_micro * k >= workers) return k;
    return micro_batch; /* one sample per sub-batch: as many chains as there can be */
}

int mg_plan_check_model(const mg_plan *p, int world, const mg_plan_model *m, mg_error *err) {
    int rc = mg_plan_check(p, world, err);
    if (rc) return rc;
    int dp = world / (p->tp * p->pp * p->cp);
    if (m->heads % p->tp)
        return mg_error_set(err, MG_ERR_INVALID, "--num-attention-heads %d is not divisible by tensor-parallel size %d",
                            m->heads, p->tp);
    /* Megatron asserts num_query_groups % tp == 0; KV heads are not replicated here */
    if (m->query_groups > 0 && m->query_groups % p->tp)
        return mg_error_set(err, MG_ERR_INVALID,
                            "--num-query-groups %d is not divisible by tensor-parallel size %d (each rank must hold "
                            "whole key/value groups; replicating key/value heads is not supported)",
                            m->query_groups, p->tp);
    if (m->hidden % p->tp)
        return mg_error_set(err, MG_ERR_INVALID, "--hidden-size %d is not divisible by tensor-parallel size %d",
                            m->hidden, p->tp);
    if (m->ffn_hidden % p->tp)
        return mg_error_set(err, MG_ERR_INVALID, "--ffn-hidden-size %d is not divisible by tensor-parallel size %d",
                            m->ffn_hidden, p->tp);
    if (m->vocab % p->tp)
        return mg_error_set(err, MG_ERR_INVALID, "padded vocabulary %lld is not divisible by tensor-parallel size %d",
                            (long long)m->vocab, p->tp);
    /* context parallelism: 2·cp chunks per sequence (rank r holds chunks r and 2cp-1-r);
     * under sequence parallelism tp splits each rank's s/cp tokens */
    if (p->cp > 1 && m->seq_length % (2 * p->cp))
        return mg_error_set(err, MG_ERR_INVALID,
                            "--seq-length %d is not divisible by 2 x context-parallel size (2 x %d): each sequence is "
                            "cut into 2 x %d chunks",
                            m->seq_length, p->cp, p->cp);
    if (p->cp > 1 && p->sequence_parallel && (m->seq_length / p->cp) % p->tp)
        return mg_error_set(err, MG_ERR_INVALID,
                            "--seq-length %d / context-parallel size %d = %d tokens per rank is not divisible by "
                            "tensor-parallel size %d (needed by --sequence-parallel)",
                            m->seq_length, p->cp, m->seq_length / p->cp, p->tp);
    if (p->sequence_parallel && m->seq_length % p->tp)
        return mg_error_set(err, MG_ERR_INVALID,
                            "--seq-length %d is not divisible by tensor-parallel size %d (needed by --sequence-parallel)",
                            m->seq_length, p->tp);
    if (m->micro_batch < 1 || m->global_batch % ((int64_t)m->micro_batch * dp))
        return mg_error_set(err, MG_ERR_INVALID,
                            "--global-batch-size %d is not a multiple of --micro-batch-size x data-parallel size "
                            "(%d x %d)",
                            m->global_batch, m->micro_batch, dp);
    if (p->pp > 1 && m->num_layers > 0 && (p->pp_layout[0] || p->pp_account_embedding || p->pp_account_loss)) {
        int *vs = malloc(((size_t)m->num_layers + 1) * sizeof *vs);
        if (!vs) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
        rc = mg_plan_layer_vstages(p, m->num_layers, vs, NULL, NULL, err);
        free(vs);
        if (rc) return rc;
    } else if (p->pp > 1 && m->num_layers > 0) {
        int L = m->num_layers, f = p->pp_first_layers, l = p->pp_last_layers;
        if (f || l) {
            int mids = p->pp - (f > 0) - (l > 0), rest = L - f - l;
            if (rest < 0 || (mids == 0 && rest) || (mids > 0 && (rest % mids || rest / mids < 1)))
                return mg_error_set(err, MG_ERR_INVALID,
                                    "--num-layers %d does not split as %d on the first pipeline stage, %d on the last "
                                    "and an equal share (at least one) on each of the %d stages between",
                                    L, f, l, mids);
        } else if (L % (p->pp * p->vpp))
            return mg_error_set(err, MG_ERR_INVALID,
                                "--num-layers %d is not divisible by pipeline stages x virtual stages per stage "
                                "(%d x %d)",
                                L, p->pp, p->vpp);
    }
    int64_t n_micro = m->micro_batch > 0 ? m->global_batch / ((int64_t)m->micro_batch * dp) : 0;
    if (p->pp > 1 && p->vpp > 1 && p->pp_schedule != MG_PP_SCHEDULE_GPIPE && n_micro % p->pp)
        return mg_error_set(err, MG_ERR_INVALID,
                            "the interleaved pipeline schedule needs the micro-batches per data-parallel rank (%lld = "
                            "--global-batch-size %d / (--micro-batch-size %d x data-parallel size %d)) to be a "
                            "multiple of --pipeline-model-parallel-size %d",
                            (long long)n_micro, m->global_batch, m->micro_batch, dp, p->pp);
    return MG_OK;
}

void mg_plan_comm_bytes(const mg_graph *P, int n_micro, double bytes[MG_GROUP_COUNT]) {
    for (int g = 0; g < MG_GROUP_COUNT; g++) bytes[g] = 0;
    for (int i = 0; i < mg_graph_n_nodes(P); i++) {
        const mg_node *n = mg_graph_node(P, i);
        if (!(mg_op_def_get(n->op)->flags & MG_OPF_COMM)) continue;
        double f, b;
        mg_op_cost(n, &f, &b);
        if (n->mb >= 0) b *= n_micro > 0 ? n_micro : 1;
        if (n->attrs.comm.group >= 0 && n->attrs.comm.group < MG_GROUP_COUNT) bytes[n->attrs.comm.group] += b;
    }
}
