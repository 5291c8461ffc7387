/* mgraph-run's descriptions of a plan (tools/run_describe.h): the start-up lines, the
 * DOT dumps, full recompute's options and the dry run. */
#include "run_describe.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "mgraph/dot.h"
#include "mgraph/memplan.h"

/* "%r" in a path becomes the rank. MG_ERR_INVALID when the result would not fit
 * (never a silently shortened name: that is another file). */
static int rank_path(const char *pattern, int rank, char *out, size_t len, mg_error *err) {
    size_t o = 0;
    for (const char *p = pattern; *p; p++) {
        if (o + 16 >= len)
            return mg_error_set(err, MG_ERR_INVALID, "--dump-dot path is longer than %zu bytes", len - 16);
        if (p[0] == '%' && p[1] == 'r') {
            o += (size_t)snprintf(out + o, len - o, "%d", rank);
            p++;
        } else {
            out[o++] = *p;
        }
    }
    out[o] = '\0';
    return MG_OK;
}

/* --dump-dot under mpirun needs %r: every rank writes its graph, and ranks writing
 * one file would leave one of them (or, before atomic outputs, a mix). */
int mg_run_check_dump_dot(const mg_run_config *c, int world, mg_error *err) {
    if (!c->dump_dot) return MG_OK;
    if (world > 1 && !strstr(c->dump_dot, "%r"))
        return mg_error_set(err, MG_ERR_INVALID,
                            "--dump-dot %s under mpirun: every rank writes its graph, put %%r (the rank) in the name",
                            c->dump_dot);
    char path[PATH_MAX];
    return rank_path(c->dump_dot, 1 << 20, path, sizeof path, err);
}

/* A DOT dump's title: the rank and every axis the plan uses. */
static void dot_title(const mg_plan *p, const char *model, int rank, int world, char *title, size_t len) {
    int n = snprintf(title, len, "mgraph %s training step, rank %d of %d (tp %d", model, rank, world, p->tp);
    if (p->cp > 1) n += snprintf(title + n, len - (size_t)n, ", cp %d", p->cp);
    if (p->pp > 1) n += snprintf(title + n, len - (size_t)n, ", pp %d", p->pp);
    if (p->ep > 1) n += snprintf(title + n, len - (size_t)n, ", ep %d", p->ep);
    snprintf(title + n, len - (size_t)n, ", dp %d%s%s%s%s)", world / (p->tp * p->pp * p->cp), p->sequence_parallel ? ", sp" : "",
             p->distributed_optimizer ? ", distributed optimizer" : "", p->fsdp != MG_FSDP_NONE ? ", fsdp " : "",
             p->fsdp != MG_FSDP_NONE ? mg_fsdp_name(p->fsdp) : "");
}

static int dump_dot(const mg_run_config *c, const mg_plan *p, const char *model, const mg_graph *g, int rank, int world,
                    mg_error *err) {
    char path[PATH_MAX], title[256];
    int rc = rank_path(c->dump_dot, rank, path, sizeof path, err);
    if (rc) return rc;
    dot_title(p, model, rank, world, title, sizeof title);
    mg_dot_options dopt = {title, false, false};
    return mg_graph_dump_dot_file(g, path, &dopt, err);
}

static int dump_dot_summary(const mg_run_config *c, const mg_plan *p, const char *model, const mg_graph *g, int rank,
                            int world, mg_error *err) {
    char path[1024], title[256];
    int rc = rank_path(c->dump_dot_summary, rank, path, sizeof path, err);
    if (rc) return rc;
    dot_title(p, model, rank, world, title, sizeof title);
    mg_dot_summary_options o = {title, c->dot_summary_depth, c->dot_summary_scope, 0};
    if (c->dot_summary_phase && mg_dot_parse_phases(c->dot_summary_phase, &o.phases, err)) return MG_ERR_INVALID;
    return mg_graph_dump_dot_summary_file(g, path, &o, err);
}

/* --dump-dot and --dump-dot-summary of one rank's graph (rank 0 only unless the path has %r) */
int mg_run_dump_dots(const mg_run_config *c, const mg_plan *p, const char *model, const mg_graph *g, int rank, int world,
                     bool all, mg_error *err) {
    const char *full = c->dump_dot, *sum = c->dump_dot_summary;
    int rc = MG_OK;
    if (full && (all || rank == 0 || strstr(full, "%r"))) rc = dump_dot(c, p, model, g, rank, world, err);
    if (!rc && sum && (all || rank == 0 || strstr(sum, "%r"))) rc = dump_dot_summary(c, p, model, g, rank, world, err);
    return rc;
}


/* Prints the rank's micro-batches per step and which global micro-batches they are
 * (instance i is global micro-batch i * dp + dp rank, as the trainer feeds them). */
static void describe_micro(const mg_run_config *c, const mg_trainer *t, const mg_mesh *m, int rank) {
    int n = mg_trainer_local_micro(t, m, c->global_batch_size), dp = m->size[MG_GROUP_DP] > 0 ? m->size[MG_GROUP_DP] : 1;
    char list[160] = "";
    size_t k = 0;
    for (int i = 0; i < n && k < sizeof list - 16; i++) {
        if (i == 6 && n > 8) {
            k += (size_t)snprintf(list + k, sizeof list - k, ", ..., %d", (n - 1) * dp + m->coord[MG_GROUP_DP]);
            break;
        }
        k += (size_t)snprintf(list + k, sizeof list - k, "%s%d", i ? ", " : "", i * dp + m->coord[MG_GROUP_DP]);
    }
    printf("mgraph-run: rank %d: %d micro-batch%s per step (global batch %d / (micro-batch %d x dp %d)): global "
           "micro-batch%s %s\n",
           rank, n, n == 1 ? "" : "es", c->global_batch_size, c->micro_batch_size, dp, n == 1 ? "" : "es", list);
}

void mg_run_describe(const mg_run_config *c, const mg_trainer *t, const mg_graph *g, const mg_mesh *m, int rank) {
    const mg_plan *p = mg_trainer_plan(t);
    describe_micro(c, t, m, rank);
    double bytes[MG_GROUP_COUNT];
    mg_plan_comm_bytes(g, mg_trainer_local_micro(t, m, c->global_batch_size) * mg_trainer_split(t), bytes);
    int n_comm = 0, n_p2p = 0;
    for (int i = 0; i < mg_graph_n_nodes(g); i++) {
        mg_op op = mg_graph_node(g, i)->op;
        bool p2p = op == MG_OP_SEND || op == MG_OP_RECV;
        /* (the communication ops run from allreduce to cp's ring_shift; attention_merge after them is not one) */
        n_comm += op >= MG_OP_ALLREDUCE && op <= MG_OP_RING_SHIFT && !p2p;
        n_p2p += p2p;
    }
    mg_memplan *mp = NULL;
    mg_error e = {0};
    char line[512] = "?", stage[160] = "";
    if (!mg_memplan_build((mg_graph *)g, true, &mp, &e)) mg_memplan_summary(mp, line, sizeof line);
    double param_bytes = 0; /* the rank's parameters (of the persistent bytes): a 1/dp shard under FSDP */
    for (int i = 0; i < mg_graph_n_tensors(g); i++) {
        const mg_tensor *t = mg_graph_tensor(g, i);
        if (t->role == MG_ROLE_PARAM && !t->src) param_bytes += (double)mg_numel(t) * (double)mg_dtype_size(t->dtype);
    }
    size_t ll = strlen(line);
    snprintf(line + ll, sizeof line - ll, ", parameters %.2f MiB%s", param_bytes / (1024.0 * 1024.0),
             p->fsdp == MG_FSDP_OPTIM_GRADS_PARAMS ? " (sharded over dp: fsdp)" : "");
    mg_memplan_free(mp);
    char groups[192] = ""; /* the other groups this plan uses */
    if (p->ep > 1) /* the all-to-all moves what the routing sends: estimated for a balanced routing */
        snprintf(groups, sizeof groups, ", ep %.0f (all-to-all, balanced routing), edp %.0f", bytes[MG_GROUP_EP],
                 bytes[MG_GROUP_EDP]);
    if (p->cp > 1) /* the K/V ring (and, at dp 1, the gradients' all-reduce) over cp; the gradients over dp x cp */
        snprintf(groups + strlen(groups), sizeof groups - strlen(groups), ", cp %.0f, dp_cp %.0f", bytes[MG_GROUP_CP],
                 bytes[MG_GROUP_DP_CP]);
    if (p->pp > 1) { /* a stage keeps its schedule's micro-batches in flight */
        int slots = p->microbatch_slots, need = -1, st = m->coord[MG_GROUP_PP];
        if (mg_trainer_pipeline_slots(t, m, &slots, &need, &e)) slots = -1;
        snprintf(stage, sizeof stage,
                 " (pipeline stage %d of %d: its schedule keeps %d micro-batch%s in flight, %d activation slots; %d "
                 "transfers; bytes sent per step: pp %.0f, emb %.0f)",
                 st, p->pp, need, need == 1 ? "" : "es", slots, n_p2p, bytes[MG_GROUP_PP], bytes[MG_GROUP_EMB]);
    }
    printf("mgraph-run: rank %d: %d nodes, %d collectives, bytes sent per step: tp %.0f, dp %.0f%s; memory: %s%s\n",
           rank, mg_graph_n_nodes(g), n_comm, bytes[MG_GROUP_TP], bytes[MG_GROUP_DP], groups, line, stage);
}

void mg_run_print_plan(const mg_run_config *c, const mg_trainer *t, const char *model, int experts) {
    const mg_plan *p = mg_trainer_plan(t);
    int world = mg_trainer_world(t), split = mg_trainer_split(t);
    int local = mg_trainer_local_micro(t, mg_trainer_mesh(t), c->global_batch_size);
    char ep_desc[64] = "";
    if (p->ep > 1) snprintf(ep_desc, sizeof ep_desc, ", ep %d (%d experts per rank)", p->ep, experts / p->ep);
    char cpdesc[32] = ""; /* context parallelism, when on */
    if (p->cp > 1) snprintf(cpdesc, sizeof cpdesc, ", cp %d", p->cp);
    char pp_desc[160] = "";
    if (p->pp > 1)
        snprintf(pp_desc, sizeof pp_desc, ", pp %d (%d model chunk%s per stage, %s schedule)", p->pp, p->vpp,
                 p->vpp == 1 ? "" : "s",
                 mg_pp_schedule_name(p->pp_schedule == MG_PP_SCHEDULE_AUTO
                                         ? (p->vpp > 1 ? MG_PP_SCHEDULE_INTERLEAVED : MG_PP_SCHEDULE_1F1B)
                                         : p->pp_schedule));
    char fsdp_over[48]; /* what FSDP shards over (partitioners/fsdp.c) */
    snprintf(fsdp_over, sizeof fsdp_over, "dp%s%s", p->cp > 1 ? " x cp" : "", p->ep > 1 ? ", experts over edp" : "");
    char fsdp_desc[160] = "";
    if (p->fsdp == MG_FSDP_OPTIM_GRADS_PARAMS)
        snprintf(fsdp_desc, sizeof fsdp_desc,
                 ", fsdp optim_grads_params (parameters, gradients and optimizer state sharded over %s)", fsdp_over);
    else if (p->fsdp == MG_FSDP_OPTIM_GRADS)
        snprintf(fsdp_desc, sizeof fsdp_desc, ", fsdp optim_grads (gradients and optimizer state sharded over %s)",
                 fsdp_over);
    else if (p->distributed_optimizer)
        snprintf(fsdp_desc, sizeof fsdp_desc, ", distributed optimizer");
    char split_desc[96] = "";
    if (split > 1)
        snprintf(split_desc, sizeof split_desc, ", each run as %d sub-batches of %d (--micro-batch-split)", split,
                 c->micro_batch_size / split);
    printf("mgraph-run: %s; micro-batch %d, global batch %d = %d micro-batches per step; %d rank(s): tp %d%s, dp %d%s%s%s%s; "
           "%d micro-batch%s per rank per step%s\n",
           model, c->micro_batch_size, c->global_batch_size, c->global_batch_size / c->micro_batch_size, world, p->tp,
           cpdesc, world / (p->tp * p->pp * p->cp), ep_desc, p->sequence_parallel ? ", sequence parallel" : "",
           fsdp_desc, pp_desc, local, local == 1 ? "" : "es", split_desc);
}

/* --recompute-*: Megatron's checks (the rewrite is the trainer's, on the logical graph
 * before it is partitioned, counted per model chunk of the plan's pipeline layout). */
int mg_run_recompute_options(const mg_run_config *c, int layers, mg_recompute_options *o, mg_error *err) {
    memset(o, 0, sizeof *o);
    const char *gran = c->recompute_granularity, *method = c->recompute_method;
    if (!gran) return MG_OK;
    o->granularity = strcmp(gran, "full") ? MG_RECOMPUTE_SELECTIVE : MG_RECOMPUTE_FULL;
    o->n_layers = layers;
    if (o->granularity != MG_RECOMPUTE_FULL) return MG_OK;
    if (!method)
        return mg_error_set(err, MG_ERR_INVALID, "--recompute-granularity full needs --recompute-method uniform or block");
    if (!mg_run_config_given(c, "--recompute-num-layers"))
        return mg_error_set(err, MG_ERR_INVALID, "--recompute-granularity full needs --recompute-num-layers");
    if (c->recompute_num_layers < 1 || c->recompute_num_layers > layers)
        return mg_error_set(err, MG_ERR_INVALID, "--recompute-num-layers must be in 1..%d (the layers), got %d", layers,
                            c->recompute_num_layers);
    o->method = strcmp(method, "block") ? MG_RECOMPUTE_UNIFORM : MG_RECOMPUTE_BLOCK;
    o->num_layers = c->recompute_num_layers;
    return MG_OK;
}

void mg_run_print_recompute(const mg_recompute_options *o, int cloned) {
    if (o->granularity != MG_RECOMPUTE_FULL) return;
    printf("mgraph-run: activation recompute: full, %s, %d layer%s: %d forward nodes rerun in backward\n",
           o->method == MG_RECOMPUTE_BLOCK ? "block" : "uniform", o->num_layers, o->num_layers == 1 ? "" : "s", cloned);
}

/* --dry-run --world-size N: partition for every rank in this one process. Under
 * mpirun (no --world-size), each process partitions and describes its own rank only. */
int mg_run_dry_run(const mg_run_config *c, mg_trainer *t, const char *model, int mpi_world, mg_error *err) {
    int world = mg_trainer_world(t), me = mg_trainer_mesh(t)->rank;
    int first = mpi_world > 1 ? me : 0, end = mpi_world > 1 ? me + 1 : world;
    for (int rank = first; rank < end; rank++) {
        mg_mesh mesh;
        mg_rank_graph R = {0};
        int cloned = 0;
        int rc = mg_trainer_partition_rank(t, rank, &mesh, &R, &cloned, err);
        if (!rc && rank == 0) mg_run_print_recompute(&mg_trainer_config_of(t)->recompute, cloned);
        if (!rc) mg_run_describe(c, t, R.graph, &mesh, rank);
        if (!rc) rc = mg_run_dump_dots(c, mg_trainer_plan(t), model, R.graph, rank, world, false, err);
        mg_rank_graph_release(&R);
        if (rc) return rc;
    }
    return MG_OK;
}
