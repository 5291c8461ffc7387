/* Feeding a step (include/mgraph/trainer.h, mg_feed): which samples each of this rank's
 * micro-batch instances holds, the loss and token scales, and the data source's
 * callback per instance. */
#include <stdio.h>
#include <string.h>

#include "runtime/trainer_internal.h"

void *mg_feed_data(const mg_feed *f, const char *name, const mg_tensor **local) {
    const mg_trainer_graph *G = f->impl_;
    if (local) *local = NULL;
    mg_tensor *lt = G ? mg_graph_find(G->step.g, name) : NULL;
    if (!lt || lt->role != MG_ROLE_INPUT || lt->per_microbatch != (f->instance >= 0)) return NULL;
    mg_tensor *r = mg_rank_tensor(&G->rg, lt);
    if (!r) return NULL;
    if (local) *local = r;
    return f->instance >= 0 ? mg_storage_data_mb(G->st, r, f->instance) : mg_storage_data(G->st, r);
}

/* Whether this rank's graph reads any per-micro-batch input (a middle pipeline stage
 * reads none: its data need not be read at all). */
static bool reads_inputs(const mg_trainer_graph *G) {
    for (int i = 0; i < G->step.n_inputs; i++)
        if (mg_rank_tensor(&G->rg, G->step.inputs[i])) return true;
    return false;
}

int mg_trainer_feed_constants(mg_trainer *t, mg_trainer_graph *G, mg_error *err) {
    /* a per-micro-batch input is fed whole on every rank that reads it (the partitioner
     * slices what a rank needs from it) */
    for (int i = 0; i < G->step.n_inputs; i++) {
        const mg_tensor *lt = G->step.inputs[i], *r = mg_rank_tensor(&G->rg, lt);
        if (r && mg_numel(r) != mg_numel(lt))
            return mg_error_set(err, MG_ERR_UNSUPPORTED, "trainer: the per-micro-batch input '%s' is split on this rank",
                                lt->name);
    }
    if (!t->cfg.data.feed) return MG_OK;
    mg_feed f = {.split = MG_SPLIT_TRAIN, .instance = -1, .impl_ = G};
    return t->cfg.data.feed(t->cfg.data.user, &f, err);
}

int mg_trainer_feed(mg_trainer *t, mg_trainer_graph *G, int split, uint64_t first, int64_t gbs, int64_t iteration,
                    uint64_t *count, mg_error *err) {
    const mg_trainer_config *c = &t->cfg;
    int mbs = c->micro_batch, n_global = (int)(gbs / mbs), nsub = t->split, sub = mbs / nsub;
    mg_tensor *ls = mg_rank_tensor(&G->rg, G->step.loss_scale), *ts = mg_rank_tensor(&G->rg, G->step.token_scale);
    /* Megatron divides each micro-batch's loss by the micro-batches of the global batch */
    if (ls) *(float *)mg_storage_data(G->st, ls) = 1.0f / (float)(n_global * nsub);
    mg_tensor *gs = mg_rank_tensor(&G->rg, G->step.grad_scale); /* (fp16) */
    if (gs) *(float *)mg_storage_data(G->st, gs) = t->scaler.scale > 0 ? t->scaler.scale : 1.0f;
    if (count || ts) { /* the global batch's tokens: every rank counts them all, no communication */
        if (!c->data.count_tokens)
            return mg_error_set(err, MG_ERR_INVALID, "trainer: a loss averaged over tokens needs data.count_tokens");
        uint64_t k = 0;
        int rc = c->data.count_tokens(c->data.user, split, first, gbs, &k, err);
        if (rc) return rc;
        if (count) *count = k;
        if (ts) *(float *)mg_storage_data(G->st, ts) = k ? (float)(1.0 / (double)k) : 0.0f;
    }
    if (!c->data.feed || !reads_inputs(G)) return MG_OK;
    /* Megatron's sampler: each group of dp micro-batches is dealt out to the
     * data-parallel ranks in order, so instance i of data-parallel rank d is global
     * micro-batch i * dp + d; sub-batch q of it holds its samples q * sub .. */
    int dp = mg_trainer_dp(&t->mesh), dp_rank = t->mesh.coord[MG_GROUP_DP];
    for (int inst = 0; inst < mg_trainer_instances(t, gbs); inst++) {
        int i = inst / nsub, q = inst % nsub, mb = i * dp + dp_rank;
        mg_feed f = {split, iteration, first + (uint64_t)mb * (uint64_t)mbs + (uint64_t)(q * sub), sub, mb, q, inst, G};
        int rc = c->data.feed(c->data.user, &f, err);
        if (rc) return rc;
    }
    return MG_OK;
}
