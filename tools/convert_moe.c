/* The MoE layers of mgraph-convert's classes (tools/convert.h): Mixtral's, Qwen3-MoE's and
 * DeepseekV3's experts in mgraph's layout (models/moe.c) and Hugging Face's.
 *
 * mgraph stacks a layer's experts (Megatron's grouped MLP): mlp.experts.fc1.weight
 * [E, 2F, h], each expert's gate rows then its up rows, and mlp.experts.fc2.weight
 * [E, h, F]; Hugging Face checkpoints hold one [F, h] gate, one [F, h] up and one [h, F]
 * down matrix per expert (Mixtral's w1, w3, w2 under block_sparse_moe). Each of those is a
 * contiguous run of the stacked tensor, so the conversion is a list of parts (cv_part)
 * copied as they are. The router mlp.router.weight [E, h] is Hugging Face's gate.weight;
 * the expert bias mlp.router.expert_bias [E] is DeepseekV3's gate.e_score_correction_bias;
 * the shared experts keep their names (mlp.shared_experts.*). */
#include <stdio.h>
#include <string.h>

#include "convert.h"

int cv_moe_alloc_layer(cv_model *m, int l, mg_error *err) {
    const cv_cfg *c = &m->cfg;
    const mg_moe_config *o = &c->moe;
    int64_t E = o->num_experts, h = c->hidden, f = o->ffn_hidden ? o->ffn_hidden : c->ffn, fs = o->shared_ffn;
    char nm[128];
    snprintf(nm, sizeof nm, "model.layers.%d.mlp.router.weight", l);
    int rc = cv_add(m, nm, E, h, err);
    snprintf(nm, sizeof nm, "model.layers.%d.mlp.router.expert_bias", l);
    if (!rc && o->expert_bias) rc = cv_add(m, nm, E, 0, err);
    snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.fc1.weight", l);
    if (!rc) rc = cv_add3(m, nm, E, 2 * f, h, err);
    snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.fc2.weight", l);
    if (!rc) rc = cv_add3(m, nm, E, h, f, err);
    const struct { const char *s; int64_t r, cols; } sh[] = {
        {"gate_proj", fs, h}, {"up_proj", fs, h}, {"down_proj", h, fs}};
    for (int k = 0; k < 3 && fs > 0 && !rc; k++) {
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.shared_experts.%s.weight", l, sh[k].s);
        rc = cv_add(m, nm, sh[k].r, sh[k].cols, err);
    }
    return rc;
}

/* "model.layers.<l>.mlp.<rest>" of t: l and rest, or false. */
static bool moe_name(const cv_tensor *t, int *l, const char **rest) {
    int n = 0;
    if (sscanf(t->name, "model.layers.%d.mlp.%n", l, &n) != 1 || n == 0) return false;
    *rest = t->name + n;
    return true;
}

bool cv_moe_hf_key(const cv_arch *a, const cv_tensor *t, char *key, size_t n) {
    int l;
    const char *rest;
    if (!a->moe_module || !moe_name(t, &l, &rest)) return false;
    if (!strcmp(rest, "router.weight")) snprintf(key, n, "model.layers.%d.%s.gate.weight", l, a->moe_module);
    else if (!strcmp(rest, "router.expert_bias"))
        snprintf(key, n, "model.layers.%d.%s.gate.e_score_correction_bias", l, a->moe_module);
    else return false;
    return true;
}

int cv_moe_parts(const cv_arch *a, const cv_cfg *c, const cv_tensor *t, cv_part *out, int max) {
    int l;
    const char *rest;
    if (!a->moe_module || t->ndim != 3 || !moe_name(t, &l, &rest)) return 0;
    bool fc1 = !strcmp(rest, "experts.fc1.weight");
    if (!fc1 && strcmp(rest, "experts.fc2.weight")) return 0;
    int64_t E = t->shape[0], h = c->hidden, f = fc1 ? t->shape[1] / 2 : t->shape[2];
    int n = 0;
    for (int64_t e = 0; e < E && n + 2 <= max; e++)
        for (int k = 0; k < (fc1 ? 2 : 1); k++) { /* fc1: gate then up; fc2: down */
            cv_part *p = &out[n++];
            snprintf(p->key, sizeof p->key, "model.layers.%d.%s.experts.%lld.%s.weight", l, a->moe_module, (long long)e,
                     a->expert_names[fc1 ? k : 2]);
            p->ndim = 2;
            p->shape[0] = fc1 ? f : h;
            p->shape[1] = fc1 ? h : f;
            p->offset = fc1 ? e * 2 * f * h + k * f * h : e * h * f;
        }
    return n;
}
