/* Pipeline parallelism: layers on stages, transfers between them, sums over stages.
 *
 * The model builder marks every node with the part of the model it computes
 * (mg_node.layer: the embedding, transformer layer i, the head), and autodiff gives
 * each backward node its forward node's mark. Here the marks become virtual stages:
 * with P stages and V model chunks per stage, the layers are cut into P x V
 * contiguous ranges (Megatron's layout: virtual stage v = chunk x P + stage, so rank
 * r holds chunks r, r + P, ...; the embedding goes with virtual stage 0 and the head
 * and loss with the last one). Nodes without a mark (gradient accumulation, the
 * optimizer, the gradient norm) run where their inputs are.
 *
 * Every rank walks the whole logical graph in the same order and decides the same
 * things about every node; it emits only its own stage's nodes. So:
 *   - a marked node reading a tensor another stage produced gets a transfer: the
 *     producing stage emits a send (in the producer's micro-batch and phase), the
 *     consuming stage a recv, both with the transfer's number as tag. Tensors cross in
 *     one agreed placement (split along the sequence over tp under sequence
 *     parallelism, else whole), so the receiver knows its shape without asking;
 *   - an unmarked linear node whose inputs live on several stages (the sum of a tied
 *     embedding's two gradient contributions, the sum of the per-parameter squares of
 *     the gradient norm) runs on each of them with what that stage has, its output a
 *     partial sum over the stages (placement: pp PARTIAL); a non-linear consumer gets
 *     the sum by an all-reduce over the stages holding it: the embedding group for the
 *     word embedding (Megatron's), all stages for the gradient norm;
 *   - what the host reads (loss, gradient norm) is broadcast to every stage, so every
 *     rank logs and checks the same numbers.
 * The order in which a stage runs its micro-batches' forward and backward halves
 * (1F1B, interleaved) is the engine's: scheduler/pipeline_schedule.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partitioners/partition_internal.h"

typedef uint64_t stage_set; /* bit s: stage s */

struct pp_state {
    int P, V, me;
    int n_layers;
    int *layer_vstage;       /* [n_layers] */
    int pre_vstage, post_vstage; /* the embedding's, the head and loss's */
    stage_set *hold;         /* [logical tensor]: stages that compute it (0: a leaf, made where used) */
    stage_set *node_set;     /* [logical node]: stages that run it */
    int *node_vstage;        /* [logical node]: its virtual stage (-1: unmarked) */
    stage_set *received;     /* [logical tensor]: stages it was sent to */
    bool *global;            /* [logical tensor]: every stage computes the same whole value (the
                              * learning rate, the clipping coefficient): it does not decide where
                              * its consumers run */
    int next_tag;
    int stamp_from;          /* physical nodes from here on get the current node's virtual stage */
    int cur_vstage;
};

static stage_set bit(int s) { return (stage_set)1 << s; }
static stage_set all_stages(const struct pp_state *p) { return p->P >= 64 ? ~(stage_set)0 : bit(p->P) - 1; }
static int lowest(stage_set s) { return __builtin_ctzll(s); }
static int n_stages(stage_set s) { return __builtin_popcountll(s); }

static struct pp_state *pps(const part_ctx *c) { return c->axis[PART_PP]; }

static int pp_vstage_of_layer(const part_ctx *c, int layer) {
    const struct pp_state *p = pps(c);
    if (layer == MG_LAYER_PRE) return p->pre_vstage;
    if (layer == MG_LAYER_POST) return p->post_vstage;
    if (layer >= 0 && layer < p->n_layers) return p->layer_vstage[layer];
    return -1;
}

/* ---- Megatron's --pipeline-model-parallel-layout ------------------------------------------ */
/* Expands repetitions ("t*3", "(tt|)*2") into `out` (commas and spaces dropped). */
static int expand_layout(const char *s, size_t len, char *out, size_t cap, size_t *n, const char *whole, mg_error *err) {
    for (size_t i = 0; i < len;) {
        char ch = s[i];
        if (ch == ',' || ch == ' ') {
            i++;
            continue;
        }
        const char *item = s + i;
        size_t item_len;
        if (ch == '(') {
            int depth = 0;
            size_t j = i;
            for (; j < len; j++) {
                depth += s[j] == '(' ? 1 : s[j] == ')' ? -1 : 0;
                if (depth == 0) break;
            }
            if (j == len) return mg_error_set(err, MG_ERR_INVALID, "--pipeline-model-parallel-layout '%s': unbalanced '('", whole);
            item = s + i + 1;
            item_len = j - i - 1;
            i = j + 1;
        } else if (ch == 'E' || ch == 't' || ch == 'L' || ch == '|') {
            item_len = 1;
            i++;
        } else if (ch == 'm') {
            return mg_error_set(err, MG_ERR_UNSUPPORTED,
                                "--pipeline-model-parallel-layout '%s': 'm' (a multi-token prediction layer): the model "
                                "has none", whole);
        } else {
            return mg_error_set(err, MG_ERR_INVALID,
                                "--pipeline-model-parallel-layout '%s': unexpected '%c' (the symbols are E, t, L and |, "
                                "with (...)*N and X*N repetitions)", whole, ch);
        }
        long times = 1;
        if (i < len && s[i] == '*') {
            char *end;
            times = strtol(s + i + 1, &end, 10);
            if (end == s + i + 1 || times < 0 || times > 1 << 20)
                return mg_error_set(err, MG_ERR_INVALID, "--pipeline-model-parallel-layout '%s': '*' wants a count", whole);
            i = (size_t)(end - s);
        }
        for (long k = 0; k < times; k++) {
            if (ch == '(') {
                int rc = expand_layout(item, item_len, out, cap, n, whole, err);
                if (rc) return rc;
            } else {
                if (*n + 1 >= cap)
                    return mg_error_set(err, MG_ERR_INVALID, "--pipeline-model-parallel-layout '%s' is too long", whole);
                out[(*n)++] = ch;
            }
        }
    }
    return MG_OK;
}

/* The layout's virtual stages: each layer's, the embedding's, the loss's; *n_stages. */
static int parse_layout(const char *layout, int L, int *vstage, int *pre, int *post, int *n_stages, mg_error *err) {
    size_t cap = 1 << 16, n = 0;
    char *flat = malloc(cap);
    if (!flat) return mg_error_set(err, MG_ERR_NOMEM, "pipeline: out of memory");
    int rc = expand_layout(layout, strlen(layout), flat, cap, &n, layout, err);
    int stage = 0, layers = 0, e = -1, l = -1, n_e = 0, n_l = 0, items = 0;
    for (size_t i = 0; !rc && i <= n; i++) {
        if (i == n || flat[i] == '|') {
            if (!items)
                rc = mg_error_set(err, MG_ERR_UNSUPPORTED,
                                  "--pipeline-model-parallel-layout '%s': virtual stage %d is empty (every stage needs a "
                                  "layer, the embedding or the loss)", layout, stage);
            stage++;
            items = 0;
            continue;
        }
        items++;
        if (flat[i] == 'E') e = stage, n_e++;
        else if (flat[i] == 'L') l = stage, n_l++;
        else if (layers < L) vstage[layers++] = stage;
        else layers++;
    }
    free(flat);
    if (rc) return rc;
    if (n_e != 1 || n_l != 1 || layers != L)
        return mg_error_set(err, MG_ERR_INVALID,
                            "--pipeline-model-parallel-layout '%s' places %d embedding%s (E), %d loss%s (L) and %d "
                            "transformer layers (t): the model has one of each and %d layers",
                            layout, n_e, n_e == 1 ? "" : "s", n_l, n_l == 1 ? "" : "es", layers, L);
    if (e != 0 || l != stage - 1)
        return mg_error_set(err, MG_ERR_INVALID,
                            "--pipeline-model-parallel-layout '%s': the embedding (E) goes on the first virtual stage and "
                            "the loss (L) on the last", layout);
    for (int i = 1; i < L; i++)
        if (vstage[i] < vstage[i - 1])
            return mg_error_set(err, MG_ERR_INVALID, "--pipeline-model-parallel-layout '%s': layers out of order", layout);
    if (pre) *pre = e;
    if (post) *post = l;
    *n_stages = stage;
    return MG_OK;
}

int mg_plan_pp_layout_stages(const char *layout, int *n_stages, mg_error *err) {
    size_t cap = 1 << 16, n = 0;
    char *flat = malloc(cap);
    if (!flat) return mg_error_set(err, MG_ERR_NOMEM, "pipeline: out of memory");
    int rc = expand_layout(layout, strlen(layout), flat, cap, &n, layout, err);
    int stages = 1;
    for (size_t i = 0; i < n; i++) stages += flat[i] == '|';
    free(flat);
    if (!rc) *n_stages = stages;
    return rc;
}

int mg_plan_layer_vstages(const mg_plan *plan, int L, int *vstage, int *pre, int *post, mg_error *err) {
    int P = plan->pp > 1 ? plan->pp : 1, V = plan->vpp > 1 ? plan->vpp : 1, first = plan->pp_first_layers,
        last = plan->pp_last_layers;
    if (pre) *pre = 0; /* the embedding on the first virtual stage, the head and loss on the last */
    if (post) *post = P * V - 1;
    if (L < 1) return mg_error_set(err, MG_ERR_INVALID, "pipeline: the model has no layer");
    if (plan->pp_layout[0]) {
        int n = 0, rc = parse_layout(plan->pp_layout, L, vstage, pre, post, &n, err);
        if (!rc && n != P * V)
            rc = mg_error_set(err, MG_ERR_INVALID,
                              "--pipeline-model-parallel-layout '%s' has %d virtual stages, not %d pipeline stages x %d "
                              "model chunks",
                              plan->pp_layout, n, P, V);
        return rc;
    }
    int e = plan->pp_account_embedding ? 1 : 0, l = plan->pp_account_loss ? 1 : 0;
    if ((e || l) && (first > 0 || last > 0))
        return mg_error_set(err, MG_ERR_INVALID,
                            "--account-for-embedding/loss-in-pipeline-split cannot be combined with "
                            "--decoder-first/last-pipeline-num-layers");
    if (e || l) { /* the embedding and the loss count as a layer each in the equal split (Megatron's) */
        int slots = L + e + l;
        if (slots % (P * V) != 0)
            return mg_error_set(err, MG_ERR_INVALID,
                                "pipeline: %d layers%s%s do not divide into %d stages x %d virtual stages", L,
                                e ? " + the embedding" : "", l ? " + the loss" : "", P, V);
        int per = slots / (P * V);
        for (int i = 0; i < L; i++) vstage[i] = (i + e) / per;
        return MG_OK;
    }
    if (first > 0 || last > 0) {
        if (V > 1)
            return mg_error_set(err, MG_ERR_INVALID,
                                "pipeline: --decoder-first/last-pipeline-num-layers cannot be combined with virtual "
                                "pipeline stages");
        int f = first > 0 ? first : -1, l = last > 0 ? last : -1;
        int rest = L - (f > 0 ? f : 0) - (l > 0 ? l : 0), mids = P - (f > 0) - (l > 0);
        if (rest < 0 || (mids == 0 && rest != 0) || (mids > 0 && rest % mids != 0))
            return mg_error_set(err, MG_ERR_INVALID,
                                "pipeline: %d layers do not split as %d on the first stage, %d on the last and the rest "
                                "equally over the %d stage%s between",
                                L, f > 0 ? f : 0, l > 0 ? l : 0, mids, mids == 1 ? "" : "s");
        int per = mids > 0 ? rest / mids : 0, i = 0;
        for (int s = 0; s < P; s++) {
            int n = s == 0 && f > 0 ? f : s == P - 1 && l > 0 ? l : per;
            if (n < 1)
                return mg_error_set(err, MG_ERR_INVALID, "pipeline: stage %d would get no layer (%d layers, %d stages)", s,
                                    L, P);
            for (int k = 0; k < n; k++) vstage[i++] = s;
        }
        return MG_OK;
    }
    if (L % (P * V) != 0)
        return mg_error_set(err, MG_ERR_INVALID,
                            "pipeline: %d layers do not divide into %d stages x %d virtual stages (%d x %d = %d ranges "
                            "of equal length)",
                            L, P, V, P, V, P * V);
    for (int i = 0; i < L; i++) vstage[i] = i / (L / (P * V));
    return MG_OK;
}

/* Megatron's layer layout (mg_plan_layer_vstages). */
static int layout(part_ctx *c, struct pp_state *p) {
    if (!(p->layer_vstage = malloc(((size_t)p->n_layers + 1) * sizeof *p->layer_vstage)))
        return part_fail(c, MG_ERR_NOMEM, "pipeline: out of memory");
    return mg_plan_layer_vstages(c->plan, p->n_layers, p->layer_vstage, &p->pre_vstage, &p->post_vstage, c->err);
}

int pp_init(part_ctx *c, mg_node *const *ord, int n_ord) {
    if (part_size(c, MG_GROUP_PP) == 1) return MG_OK;
    struct pp_state *p = calloc(1, sizeof *p);
    if (!p) return part_fail(c, MG_ERR_NOMEM, "pipeline: out of memory");
    c->axis[PART_PP] = p;
    p->P = c->mesh->size[MG_GROUP_PP];
    p->V = c->plan->vpp > 1 ? c->plan->vpp : 1;
    p->me = c->mesh->coord[MG_GROUP_PP];
    if (p->P > 64) return part_fail(c, MG_ERR_UNSUPPORTED, "pipeline: %d stages (at most 64)", p->P);
    int nt = mg_graph_n_tensors(c->L), nn = mg_graph_n_nodes(c->L);
    p->hold = calloc((size_t)nt + 1, sizeof *p->hold);
    p->received = calloc((size_t)nt + 1, sizeof *p->received);
    p->node_set = calloc((size_t)nn + 1, sizeof *p->node_set);
    p->node_vstage = malloc(((size_t)nn + 1) * sizeof *p->node_vstage);
    p->global = calloc((size_t)nt + 1, sizeof *p->global);
    if (!p->hold || !p->received || !p->node_set || !p->node_vstage || !p->global)
        return part_fail(c, MG_ERR_NOMEM, "pipeline: out of memory");
    for (int i = 0; i < n_ord; i++) {
        const mg_node *n = ord[i];
        if (n->layer >= p->n_layers) p->n_layers = n->layer + 1;
    }
    if (p->n_layers < 1) return part_fail(c, MG_ERR_INVALID, "pipeline: the graph marks no transformer layer");
    int rc = layout(c, p);
    if (rc) return rc;
    /* Which stages run each node: marked nodes their layer's stage; the others where
     * their computed inputs are (inputs every stage computes do not decide) */
    stage_set all = all_stages(p);
    for (int i = 0; i < n_ord; i++) {
        const mg_node *n = ord[i];
        int v = n->layer == MG_LAYER_NONE ? -1 : pp_vstage_of_layer(c, n->layer);
        stage_set s = 0;
        bool global = false;
        if (v >= 0) {
            s = bit(v % p->P);
        } else {
            for (int j = 0; j < n->n_in; j++)
                if (!p->global[n->in[j]->id]) s |= p->hold[n->in[j]->id];
            if (!s) {
                s = all;
                global = true;
            }
            /* a whole value every stage computes (a non-linear function of a sum over all
             * stages, like the clipping coefficient) is as good as the learning rate */
            if (s == all && !part_op_linear(n)) global = true;
        }
        p->node_vstage[n->id] = v;
        p->node_set[n->id] = s;
        for (int j = 0; j < n->n_out; j++) {
            p->hold[n->out[j]->id] = s;
            p->global[n->out[j]->id] = global;
        }
    }
    return MG_OK;
}

static void pp_release(part_ctx *c) {
    struct pp_state *p = pps(c);
    if (!p) return;
    free(p->layer_vstage);
    free(p->hold);
    free(p->received);
    free(p->global);
    free(p->node_set);
    free(p->node_vstage);
    free(p);
    c->axis[PART_PP] = NULL;
}

bool pp_here(const part_ctx *c, const mg_tensor *lt) {
    const struct pp_state *p = pps(c);
    return !p || !lt || !p->hold[lt->id] || (p->hold[lt->id] & bit(p->me));
}

/* ---- sums over stages ------------------------------------------------------------------ */
static bool pp_partial(const part_ctx *c, const mg_tensor *lt) {
    return c->st[lt->id].t && c->st[lt->id].pl.ax[MG_GROUP_PP].kind == MG_SHARD_PARTIAL;
}

/* The group a sum over the stages in `s` runs on: all stages, or the first and the last
 * (the embedding group). */
static int pp_group_of(const part_ctx *c, const mg_tensor *lt, mg_group *grp, int *n) {
    const struct pp_state *p = pps(c);
    stage_set s = p->hold[lt->id];
    if (s == all_stages(p) || (p->P == 2 && s == 3)) {
        *grp = MG_GROUP_PP;
        *n = p->P;
        return MG_OK;
    }
    if (s == (bit(0) | bit(p->P - 1))) {
        *grp = MG_GROUP_EMB;
        *n = 2;
        return MG_OK;
    }
    return part_fail((part_ctx *)c, MG_ERR_UNSUPPORTED,
                     "pipeline: '%s' is a sum over a set of stages that is neither all of them nor the first and "
                     "the last",
                     lt->name);
}

/* Replaces this stage's term of a sum over stages by the sum. */
static int reduce_stages(part_ctx *c, const mg_tensor *lt) {
    pt *q = &c->st[lt->id];
    mg_placement want = q->pl;
    want.ax[MG_GROUP_PP] = mg_place_full(MG_GROUP_PP);
    mg_tensor *t = part_get_pl(c, lt, &want);
    if (!t) return c->err->code ? c->err->code : MG_ERR_RUNTIME;
    *q = (pt){t, want};
    return MG_OK;
}

/* ---- transfers --------------------------------------------------------------------------- */
/* The placement a tensor crosses stages in: what a layer boundary has anyway (the
 * sequence split over cp in its zigzag blocks under context parallelism, each block
 * split over tp under sequence parallelism, else whole), so neither side converts in
 * the common case, and the receiver knows it without asking. The next stage then
 * computes on its rank's tokens, as the first did. */
static mg_placement transfer_placement(const part_ctx *c, const mg_tensor *lt) {
    mg_placement pl = mg_placement_full();
    int C = c->mesh->size[MG_GROUP_CP];
    bool cp = C > 1 && lt->ndim >= 2 && lt->shape[0] % (2 * C) == 0;
    if (cp) pl.ax[MG_GROUP_CP] = mg_place_split(MG_GROUP_CP, 0);
    int tp = part_size(c, MG_GROUP_TP);
    if (tp > 1 && c->plan->sequence_parallel && lt->ndim >= 2 && lt->shape[0] % ((cp ? C : 1) * tp) == 0)
        pl.ax[MG_GROUP_TP] = mg_place_split(MG_GROUP_TP, 0);
    return pl;
}

static void stamp(part_ctx *c, int from, int vstage) {
    for (int i = from; i < mg_graph_n_nodes(c->P); i++) mg_graph_node(c->P, i)->stage = vstage;
}

/* Input x of marked node n (on stage `to`) lives on another stage: the producer sends
 * it, this stage receives it. Every rank takes the same decision (and tag). */
static int transfer(part_ctx *c, const mg_node *n, const mg_tensor *x, int to) {
    struct pp_state *p = pps(c);
    stage_set h = p->hold[x->id];
    if (n_stages(h) != 1 || !x->src)
        return part_fail(c, MG_ERR_UNSUPPORTED, "pipeline: '%s' (stage %d) reads '%s', which no single stage computes",
                         n->out[0]->name, to, x->name);
    if (x->src->mb < 0 && n->mb >= 0)
        return part_fail(c, MG_ERR_UNSUPPORTED, "pipeline: '%s' reads '%s' of the once-per-step part from another stage",
                         n->out[0]->name, x->name);
    int from = lowest(h), tag = p->next_tag++;
    p->received[x->id] |= bit(to);
    mg_placement pl = transfer_placement(c, x);
    if (p->me == from) {
        part_enter_node_context(c, x->src);
        int first = mg_graph_n_nodes(c->P);
        mg_tensor *v = part_get_pl(c, x, &pl);
        mg_tensor *tok = v ? mg_send(c->P, v, MG_GROUP_PP, p->P, to, tag) : NULL;
        if (!tok) return part_graph_error(c);
        int pv = c->st[x->id].t->src ? c->st[x->id].t->src->stage : p->me;
        stamp(c, first, pv);
        part_enter_node_context(c, n);
    } else if (p->me == to) {
        int64_t shape[MG_MAX_DIMS];
        mg_error e = {0};
        if (mg_placement_local(&pl, c->mesh, x->ndim, x->shape, shape, NULL, &e))
            return part_fail(c, MG_ERR_RUNTIME, "pipeline: '%s': %s", x->name, e.msg);
        char nm[512];
        snprintf(nm, sizeof nm, "%s@recv", x->name);
        mg_tensor *t = NULL;
        char *saved = strdup(mg_scope_current(c->P));
        mg_scope_set(c->P, "");
        t = mg_recv(c->P, x->dtype, x->ndim, shape, MG_GROUP_PP, p->P, from, tag, nm);
        mg_scope_set(c->P, saved);
        free(saved);
        if (!t) return part_graph_error(c);
        t->src->stage = p->node_vstage[n->id];
        part_set_identity(c, t, x, &pl);
        c->st[x->id] = (pt){t, pl};
    }
    return MG_OK;
}

/* ---- the per-node rule ------------------------------------------------------------------- */
/* An input's part of a sum over the stages this stage adds: a partial term, or a whole
 * value on the lowest stage holding it (the others would count it again). */
static bool contributes(const part_ctx *c, const mg_node *n, const mg_tensor *x) {
    const struct pp_state *p = pps(c);
    if (!c->st[x->id].t) return false;
    if (pp_partial(c, x)) return true;
    stage_set h = p->hold[x->id] ? p->hold[x->id] : p->node_set[n->id]; /* a leaf: where the node runs */
    return lowest(h) == p->me;
}

/* An add over stages: this stage's term of the sum. Returns 2 when the output is
 * bound here without emitting the add (one term, or none: zeros). */
static int stage_add(part_ctx *c, const mg_node *n) {
    const mg_tensor *a = n->in[0], *b = n->in[1], *o = n->out[0];
    bool ca = contributes(c, n, a), cb = contributes(c, n, b);
    part_out_all(c, n, MG_GROUP_PP, mg_place_partial(MG_GROUP_PP));
    if (ca && cb) return 0; /* both terms here: the add itself, its output a term */
    mg_placement pl;
    mg_tensor *t;
    if (ca || cb) {
        const pt *q = &c->st[(ca ? a : b)->id];
        t = q->t;
        pl = q->pl;
    } else {
        pl = mg_placement_full();
        int64_t sh[MG_MAX_DIMS];
        mg_error e = {0};
        mg_placement_local(&pl, c->mesh, o->ndim, o->shape, sh, NULL, &e);
        t = mg_zeros(c->P, o->dtype, o->ndim, sh);
        if (!t) return part_graph_error(c);
    }
    pl.ax[MG_GROUP_PP] = mg_place_partial(MG_GROUP_PP);
    if (t->src && t->src->op == MG_OP_ZEROS && !(ca || cb)) {
        char nm[512];
        snprintf(nm, sizeof nm, "%s@pp_zero", o->name);
        part_rename(c, t, nm);
    }
    c->st[o->id] = (pt){t, pl}; /* an alias of the one term (names stay the producer's) */
    return 2;
}

/* Returns 1 when the node runs on another stage (emit nothing), 2 when its output is
 * bound without emitting it, 0 to partition it here, < 0 on error. */
static int pp_partition_node(part_ctx *c, const mg_node *n) {
    struct pp_state *p = pps(c);
    stage_set s = p->node_set[n->id];
    int v = p->node_vstage[n->id], rc = MG_OK;
    /* transfers first: every rank numbers them alike, whether it takes part or not */
    if (v >= 0) {
        int to = v % p->P;
        for (int j = 0; j < n->n_in && !rc; j++) {
            const mg_tensor *x = n->in[j];
            stage_set h = p->hold[x->id];
            if (!h || (h & bit(to)) || (p->received[x->id] & bit(to))) continue;
            rc = transfer(c, n, x, to);
        }
        if (rc) return rc;
    }
    if (!(s & bit(p->me))) return 1; /* another stage's node */
    /* the virtual stage of what this node emits: its layer's, or (unmarked) the
     * latest among its local inputs' producers */
    if (v < 0) {
        v = p->me;
        for (int j = 0; j < n->n_in; j++) {
            const mg_tensor *t = c->st[n->in[j]->id].t;
            if (t && t->src && t->src->stage > v) v = t->src->stage;
        }
    }
    p->cur_vstage = v;
    p->stamp_from = mg_graph_n_nodes(c->P);
    if (n_stages(s) == 1 || s == 0) {
        bool partial = false;
        for (int j = 0; j < n->n_in; j++) partial |= pp_partial(c, n->in[j]);
        bool linear = partial && part_op_linear(n);
        if (partial && !linear)
            for (int j = 0; j < n->n_in && !rc; j++)
                if (pp_partial(c, n->in[j])) rc = reduce_stages(c, n->in[j]);
        if (!rc && partial && linear) part_out_all(c, n, MG_GROUP_PP, mg_place_partial(MG_GROUP_PP));
        return rc;
    }
    /* a node of several stages (unmarked): a sum's term, or a whole value */
    for (int j = 0; j < n->n_in; j++)
        if (!c->st[n->in[j]->id].t && n->in[j]->src && !(n->op == MG_OP_ADD))
            return part_fail(c, MG_ERR_UNSUPPORTED, "pipeline: '%s' needs '%s' from another stage", n->out[0]->name,
                             n->in[j]->name);
    if (n->op == MG_OP_ADD) return stage_add(c, n);
    bool partial = false;
    for (int j = 0; j < n->n_in; j++) partial |= pp_partial(c, n->in[j]);
    if (partial && part_op_linear(n)) {
        part_out_all(c, n, MG_GROUP_PP, mg_place_partial(MG_GROUP_PP));
        return 0;
    }
    for (int j = 0; j < n->n_in && !rc; j++)
        if (pp_partial(c, n->in[j])) rc = reduce_stages(c, n->in[j]);
    return rc;
}

static int pp_after(part_ctx *c, const mg_node *n) {
    struct pp_state *p = pps(c);
    if (!p) return MG_OK;
    stamp(c, p->stamp_from, p->cur_vstage);
    /* a finished parameter gradient summed over stages (a tied embedding) is reduced
     * over them at once, before data parallelism reduces it: the distributed
     * optimizer and the norm then see whole gradients */
    for (int j = 0; j < n->n_out; j++) {
        const mg_tensor *lo = n->out[j];
        if (c->final_grad_of[lo->id] < 0 || !pp_partial(c, lo)) continue;
        /* also a share over dp, which dp_after_node reduces next: said before the stages'
         * sum, else that sum would stand as the whole value and dp find nothing to do */
        dp_mark_grad_share(c, lo);
        int from = mg_graph_n_nodes(c->P);
        part_enter_step_context(c);
        int rc = reduce_stages(c, lo);
        stamp(c, from, p->cur_vstage);
        if (rc) return rc;
    }
    p->stamp_from = mg_graph_n_nodes(c->P);
    return MG_OK;
}

/* What the host reads exists on every stage: the stages that compute it broadcast it
 * (partial sums over stages are summed first). */
static int pp_finish_output(part_ctx *c, const mg_tensor *lt) {
    struct pp_state *p = pps(c);
    stage_set h = p->hold[lt->id];
    if (!lt->persistent || !lt->src || !h || h == all_stages(p)) return MG_OK;
    if (n_stages(h) != 1)
        return part_fail(c, MG_ERR_UNSUPPORTED, "pipeline: host output '%s' is computed on several stages", lt->name);
    part_enter_node_context(c, lt->src);
    part_enter_step_context(c);
    int root = lowest(h), from = mg_graph_n_nodes(c->P);
    mg_tensor *x;
    char nm[512];
    if (p->me == root) {
        x = c->st[lt->id].t;
        snprintf(nm, sizeof nm, "%s@stage", lt->name);
        part_rename(c, x, nm);
        x->persistent = false;
    } else {
        x = mg_zeros(c->P, lt->dtype, lt->ndim, lt->shape);
        if (!x) return part_graph_error(c);
        snprintf(nm, sizeof nm, "%s@pp_zero", lt->name);
        part_rename(c, x, nm);
    }
    mg_tensor *y = mg_broadcast(c->P, x, MG_GROUP_PP, p->P, root, c->seq++);
    if (!y) return part_graph_error(c);
    part_rename(c, y, lt->name);
    mg_placement whole = mg_placement_full();
    part_set_identity(c, y, lt, &whole);
    y->persistent = true;
    y->role = lt->role;
    c->st[lt->id] = (pt){y, whole};
    stamp(c, from, p->me == root ? p->cur_vstage : p->me);
    return MG_OK;
}

static int pp_node(part_ctx *c, const mg_node *n) {
    if (!pps(c)) return PART_NEXT;
    int h = pp_partition_node(c, n);
    return h < 0 ? h : h == 1 ? PART_ELSEWHERE : h == 2 ? PART_DONE : PART_NEXT;
}

static int pp_finish(part_ctx *c) {
    int rc = MG_OK;
    for (int i = 0; pps(c) && i < mg_graph_n_tensors(c->L) && !rc; i++) rc = pp_finish_output(c, mg_graph_tensor(c->L, i));
    return rc;
}

/* A sum over pipeline stages runs over the stages that hold the tensor: all of them, or
 * the embedding group. */
static mg_tensor *pp_convert(part_ctx *c, const mg_tensor *lt, mg_tensor *x, mg_placement *cur, int a, mg_sharding to,
                             bool *handled) {
    mg_group g = MG_GROUP_PP;
    int n = 0;
    if (a != MG_GROUP_PP || !pps(c)) return NULL;
    *handled = true;
    if (pp_group_of(c, lt, &g, &n)) return NULL;
    return part_convert_on(c, lt, x, cur, a, to, g, n);
}

const part_axis part_axis_pp = {.name = "pp",
                                .init = pp_init,
                                .release = pp_release,
                                .node = pp_node,
                                .convert = pp_convert,
                                .after = pp_after,
                                .finish = pp_finish};
