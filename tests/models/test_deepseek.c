/* DeepSeek-V3-class models: multi-latent attention (and, as they land, its MoE). Hugging
 * Face DeepseekV3 parameter names and shapes, parameter counts against the built graph,
 * config errors, finite-difference gradients of the whole model, and a dump for the
 * transformers reference (tests/models/deepseek_hf.py).
 *
 *   test_models_deepseek CASE
 *   test_models_deepseek dump DIR VARIANT   (parameters, gradients, loss, config.json)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testkit.h"

/* A small MLA model: 4 heads, q latent 24 (0: q from the hidden state), k/v latent 16,
 * per head q/k 12 + RoPE 8, values 10, latent norms, SwiGLU, RMSNorm, untied. */
static mg_gpt_config mla_config(void) {
    mg_gpt_config c = mg_gpt_defaults();
    c.num_layers = 2, c.hidden = 32, c.heads = 4, c.ffn_hidden = 48;
    c.seq_length = 8, c.max_position = 8, c.vocab = 64;
    c.norm = MG_NORM_RMSNORM, c.pos_emb = MG_POS_ROPE, c.swiglu = true;
    c.untie_embeddings = true, c.disable_bias_linear = true, c.ln_eps = 1e-6f;
    c.qk_layernorm = true;
    c.mla = (mg_mla_config){true, 24, 16, 12, 8, 10};
    return c;
}

static int64_t graph_params(const mg_gpt_config *c, mg_graph **out) {
    mg_graph *g = mg_graph_new();
    mg_gpt m;
    mg_error err = {0};
    int64_t n = -1;
    if (mg_gpt2_params(g, c, &m, &err) == MG_OK) {
        n = 0;
        for (int i = 0; i < mg_graph_n_tensors(g); i++)
            if (mg_graph_tensor(g, i)->role == MG_ROLE_PARAM) n += mg_numel(mg_graph_tensor(g, i));
        mg_gpt_release(&m);
    } else {
        TK_CHECK(false, "params: %s", err.msg);
    }
    if (out) *out = g;
    else mg_graph_free(g);
    return n;
}

static void expect_param(mg_graph *g, const char *name, int ndim, int64_t d0, int64_t d1) {
    const mg_tensor *t = mg_graph_find(g, name);
    TK_CHECK(t && t->role == MG_ROLE_PARAM, "parameter %s missing", name);
    if (!t) return;
    TK_CHECK(t->ndim == ndim && t->shape[0] == d0 && (ndim == 1 || t->shape[1] == d1),
             "%s has shape [%lld%s%lld], want [%lld, %lld]", name, (long long)t->shape[0], t->ndim > 1 ? ", " : "",
             t->ndim > 1 ? (long long)t->shape[1] : 0LL, (long long)d0, (long long)d1);
}

/* Hugging Face DeepseekV3Attention's names and shapes; the latent norms only with
 * --qk-layernorm (Megatron's identities without it), q_proj without a q latent; the
 * parameter count (mg_gpt_num_params, what the planner and the log use) is the graph's. */
static void test_names(void) {
    mg_gpt_config c = mla_config();
    mg_graph *g = NULL;
    int64_t n = graph_params(&c, &g);
    const char *p = "model.layers.1.self_attn.";
    char nm[128];
    const struct { const char *s; int nd; int64_t a, b; } want[] = {
        {"q_a_proj.weight", 2, 24, 32},       {"q_a_layernorm.weight", 1, 24, 0},
        {"q_b_proj.weight", 2, 4 * 20, 24},   {"kv_a_proj_with_mqa.weight", 2, 16 + 8, 32},
        {"kv_a_layernorm.weight", 1, 16, 0},  {"kv_b_proj.weight", 2, 4 * (12 + 10), 16},
        {"o_proj.weight", 2, 32, 4 * 10}};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        snprintf(nm, sizeof nm, "%s%s", p, want[i].s);
        expect_param(g, nm, want[i].nd, want[i].a, want[i].b);
    }
    TK_CHECK(!mg_graph_find(g, "model.layers.0.self_attn.q_proj.weight") &&
                 !mg_graph_find(g, "model.layers.0.self_attn.k_proj.weight"),
             "no q/k/v projections beside the latents");
    TK_CHECK(mg_graph_find(g, "model.layers.0.self_attn.q_a_layernorm.weight")->no_weight_decay,
             "latent norms are not decayed by default");
    TK_CHECK(n == mg_gpt_num_params(&c), "MLA: graph has %lld parameters, mg_gpt_num_params %lld", (long long)n,
             (long long)mg_gpt_num_params(&c));
    mg_graph_free(g);
    /* no q latent, no latent norms, LayerNorm, biases (o_proj only, as Megatron's MLA) */
    c.mla.q_lora_rank = 0, c.qk_layernorm = false, c.disable_bias_linear = false, c.norm = MG_NORM_LAYERNORM;
    n = graph_params(&c, &g);
    expect_param(g, "model.layers.0.self_attn.q_proj.weight", 2, 80, 32);
    expect_param(g, "model.layers.0.self_attn.o_proj.bias", 1, 32, 0);
    TK_CHECK(!mg_graph_find(g, "model.layers.0.self_attn.kv_a_layernorm.weight") &&
                 !mg_graph_find(g, "model.layers.0.self_attn.q_proj.bias") &&
                 !mg_graph_find(g, "model.layers.0.self_attn.kv_b_proj.bias"),
             "without --qk-layernorm no latent norms; no biases but o_proj's");
    TK_CHECK(n == mg_gpt_num_params(&c), "MLA without q latent: graph %lld, mg_gpt_num_params %lld", (long long)n,
             (long long)mg_gpt_num_params(&c));
    mg_graph_free(g);
    /* --kv-channels: heads of 12 with hidden 32 / 4 heads (Qwen3's head_dim) */
    c = mla_config();
    c.mla.enabled = false, c.kv_channels = 12, c.query_groups = 2;
    n = graph_params(&c, &g);
    expect_param(g, "model.layers.0.self_attn.q_proj.weight", 2, 48, 32);
    expect_param(g, "model.layers.0.self_attn.k_proj.weight", 2, 24, 32);
    expect_param(g, "model.layers.0.self_attn.o_proj.weight", 2, 32, 48);
    expect_param(g, "model.layers.0.self_attn.q_norm.weight", 1, 12, 0);
    TK_CHECK(n == mg_gpt_num_params(&c), "--kv-channels 12: graph %lld, mg_gpt_num_params %lld", (long long)n,
             (long long)mg_gpt_num_params(&c));
    mg_graph_free(g);
}

/* DeepSeek-V3's shape in small: MLA, a dense first layer, then MoE layers of 8 experts with
 * sigmoid routing, an expert bias, groups and shared experts. */
static mg_gpt_config dsv3_config(void) {
    mg_gpt_config c = mla_config();
    c.num_layers = 3;
    c.moe.num_experts = 8, c.moe.ffn_hidden = 16, c.moe.topk = 4, c.moe.shared_ffn = 24;
    c.moe.pattern_len = 3, c.moe.layer_pattern[0] = 6; /* [0, 1, 1] */
    c.moe.score = MG_MOE_SIGMOID, c.moe.expert_bias = true, c.moe.num_groups = 4, c.moe.group_topk = 2;
    c.moe.topk_scaling = 2.5f, c.moe.balance = MG_MOE_SEQ_AUX_LOSS, c.moe.aux_loss_coeff = 1e-2f;
    return c;
}

/* DeepSeek-V3's MoE parameters: the router's expert bias (a parameter without gradient,
 * counted as Megatron and Hugging Face count buffers: not at all), the shared experts
 * with the MLP's names, the dense first layer; counts against the graph. */
static void test_moe_names(void) {
    mg_gpt_config c = dsv3_config();
    mg_graph *g = NULL;
    graph_params(&c, &g);
    int64_t n = 0;
    for (int i = 0; i < mg_graph_n_tensors(g); i++) {
        const mg_tensor *t = mg_graph_tensor(g, i);
        if (t->role == MG_ROLE_PARAM && t->requires_grad) n += mg_numel(t);
    }
    expect_param(g, "model.layers.0.mlp.gate_proj.weight", 2, 48, 32);
    TK_CHECK(!mg_graph_find(g, "model.layers.0.mlp.router.weight"), "layer 0 is dense ([0, 1, 1])");
    expect_param(g, "model.layers.1.mlp.router.weight", 2, 8, 32);
    expect_param(g, "model.layers.2.mlp.router.expert_bias", 1, 8, 0);
    expect_param(g, "model.layers.2.mlp.shared_experts.gate_proj.weight", 2, 24, 32);
    expect_param(g, "model.layers.2.mlp.shared_experts.up_proj.weight", 2, 24, 32);
    expect_param(g, "model.layers.2.mlp.shared_experts.down_proj.weight", 2, 32, 24);
    const mg_tensor *eb = mg_graph_find(g, "model.layers.1.mlp.router.expert_bias");
    TK_CHECK(eb && !eb->requires_grad && eb->init.kind == MG_INIT_ZEROS, "the expert bias: zeros, no gradient");
    TK_CHECK(n == mg_gpt_num_params(&c), "DeepSeek-V3-like: %lld trained parameters, mg_gpt_num_params %lld",
             (long long)n, (long long)mg_gpt_num_params(&c));
    mg_graph_free(g);
}

/* Parameter counts of the real models against transformers' (DeepseekV3ForCausalLM and
 * Qwen3MoeForCausalLM built on the meta device from their published configs: 671,026,404,352
 * and 30,532,122,624). */
static void test_known_sizes(void) {
    mg_gpt_config c = mg_gpt_defaults();
    c.num_layers = 61, c.hidden = 7168, c.ffn_hidden = 18432, c.heads = 128, c.vocab = 129280;
    c.norm = MG_NORM_RMSNORM, c.pos_emb = MG_POS_ROPE, c.swiglu = true, c.untie_embeddings = true;
    c.disable_bias_linear = true, c.qk_layernorm = true;
    c.mla = (mg_mla_config){true, 1536, 512, 128, 64, 128};
    c.moe.num_experts = 256, c.moe.ffn_hidden = 2048, c.moe.topk = 8, c.moe.shared_ffn = 2048;
    c.moe.pattern_len = 61;
    for (int i = 3; i < 61; i++) c.moe.layer_pattern[i / 64] |= 1ull << (i % 64);
    TK_CHECK(mg_gpt_num_params(&c) == 671026404352LL, "DeepSeek-V3: %lld parameters", (long long)mg_gpt_num_params(&c));
    c = mg_gpt_defaults();
    c.num_layers = 48, c.hidden = 2048, c.ffn_hidden = 6144, c.heads = 32, c.query_groups = 4, c.kv_channels = 128;
    c.vocab = 151936, c.norm = MG_NORM_RMSNORM, c.pos_emb = MG_POS_ROPE, c.swiglu = true, c.untie_embeddings = true;
    c.disable_bias_linear = true, c.qk_layernorm = true;
    c.moe.num_experts = 128, c.moe.ffn_hidden = 768, c.moe.topk = 8;
    TK_CHECK(mg_gpt_num_params(&c) == 30532122624LL, "Qwen3-30B-A3B: %lld parameters", (long long)mg_gpt_num_params(&c));
}

/* Model FLOPs: the attention part of mg_gpt_flops against a count by hand. */
static void test_flops(void) {
    mg_gpt_config c = mla_config();
    c.num_layers = 1, c.vocab = 1, c.ffn_hidden = 1, c.swiglu = false;
    double s = c.seq_length, h = 32, nh = 4;
    /* q_a 24x32, q_b 80x24, kv_a 24x32, kv_b 88x16, o 32x40; scores 12+8 and values 10 per head */
    double mat = 24 * 32 + 80 * 24 + 24 * 32 + 88 * 16 + 32 * 40, mlp = 4 * h * 1, logits = 2 * h * 1;
    double want = 3.0 * (2 * mat + mlp + s * nh * (20 + 10) + logits) * s * 5;
    TK_CHECK(fabs(mg_gpt_flops(&c, 5) - want) <= 1e-9 * want, "MLA FLOPs %.6g, want %.6g", mg_gpt_flops(&c, 5), want);
}

static void expect_invalid(mg_gpt_config c, const char *needle) {
    mg_error err = {0};
    int rc = mg_gpt_check(&c, &err);
    TK_CHECK(rc == MG_ERR_INVALID && strstr(err.msg, needle), "want an error naming '%s', got %d: %s", needle, rc,
             err.msg);
}

static void test_config_errors(void) {
    mg_error err = {0};
    mg_gpt_config c = mla_config();
    TK_CHECK(mg_gpt_check(&c, &err) == MG_OK, "MLA config: %s", err.msg);
    c.mla.qk_pos_emb_head_dim = 7;
    expect_invalid(c, "--qk-pos-emb-head-dim");
    c = mla_config(), c.mla.kv_lora_rank = 0;
    expect_invalid(c, "--kv-lora-rank");
    c = mla_config(), c.query_groups = 2;
    expect_invalid(c, "--group-query-attention");
    c = mla_config(), c.pos_emb = MG_POS_LEARNED;
    expect_invalid(c, "rope");
    c = mla_config(), c.rope.interleaved = true;
    expect_invalid(c, "--rotary-interleaved");
    c = mla_config(), c.rope.scaling = MG_ROPE_YARN, c.rope.factor = 0;
    expect_invalid(c, "--rotary-scaling-factor");
    c = mla_config(), c.mla.enabled = false, c.kv_channels = -1;
    expect_invalid(c, "--kv-channels");
    c = mla_config(), c.mla.enabled = false, c.rope.scaling = MG_ROPE_YARN, c.rope.factor = 4, c.rope.interleaved = true;
    c.rope.original_max_pos = 8;
    expect_invalid(c, "--rotary-interleaved");
    c = dsv3_config();
    TK_CHECK(mg_gpt_check(&c, &err) == MG_OK, "DeepSeek-V3-like config: %s", err.msg);
    c.moe.score = MG_MOE_SOFTMAX;
    expect_invalid(c, "--moe-router-enable-expert-bias needs --moe-router-score-function sigmoid");
    c = dsv3_config(), c.moe.num_groups = 3;
    expect_invalid(c, "--moe-router-num-groups 3 must divide --num-experts 8");
    c = dsv3_config(), c.moe.group_topk = 0;
    expect_invalid(c, "group-limited routing needs");
    c = dsv3_config(), c.moe.pattern_len = 4;
    expect_invalid(c, "--moe-layer-freq lists 4 layers");
    c = dsv3_config(), c.moe.score = MG_MOE_SOFTMAX, c.moe.expert_bias = false, c.moe.topk = 1, c.moe.num_groups = 0;
    c.moe.group_topk = 0;
    expect_invalid(c, "--moe-router-pre-softmax");
    c = mla_config(), c.hidden = 30; /* heads need not divide hidden with MLA or --kv-channels (Megatron) */
    TK_CHECK(mg_gpt_check(&c, &err) == MG_OK, "MLA with hidden 30 and 4 heads: %s", err.msg);
    c.mla.enabled = false;
    expect_invalid(c, "--num-attention-heads (4) must divide --hidden-size (30)");
}

/* d loss / d parameter of the whole model against central differences, dropout off
 * (as tests/models/test_llama.c): every parameter kind, four elements each. */
static void grad_model_case(mg_gpt_config c, const char *label) {
    c.init_std = 0.2f;
    c.hidden_dropout = c.attention_dropout = 0;
    mg_graph *g = mg_graph_new();
    mg_gpt m;
    mg_error err = {0};
    int64_t s = c.seq_length, b = 2;
    mg_tensor *tok = mg_input(g, "tokens", MG_I32, 2, (int64_t[]){s, b});
    mg_tensor *tgt = mg_input(g, "targets", MG_I32, 2, (int64_t[]){s, b});
    mg_tensor *pos = mg_input(g, "positions", MG_I32, 1, &s);
    mg_tensor *loss = NULL;
    if (mg_gpt2_params(g, &c, &m, &err) == MG_OK) loss = mg_gpt2_forward(g, &m, tok, pos, tgt, false);
    tk_run r;
    if (!loss || mg_graph_backward(g, loss, &err) || tk_prepare(&r, g)) {
        TK_CHECK(false, "%s: build: %s %s", label, mg_graph_error(g)->msg, err.msg);
        mg_gpt_release(&m);
        mg_graph_free(g);
        return;
    }
    tk_rng rng = {11};
    for (int64_t i = 0; i < s * b; i++) {
        tk_i32(&r, tok)[i] = (int32_t)tk_uniform(&rng, 0, (float)c.vocab);
        tk_i32(&r, tgt)[i] = (int32_t)tk_uniform(&rng, 0, (float)c.vocab);
    }
    for (int64_t t = 0; t < s; t++) tk_i32(&r, pos)[t] = (int32_t)(3 * t + 1);
    tk_exec(&r);
    double eps = 2e-3, worst = 0;
    int fails = tk_failures, probed = 0;
    for (int i = 0; i < mg_graph_n_tensors(g); i++) {
        mg_tensor *p = mg_graph_tensor(g, i);
        if (p->role != MG_ROLE_PARAM) continue;
        TK_CHECK(p->grad != NULL, "%s: %s got no gradient", label, p->name);
        if (!p->grad) continue;
        double w = tk_fd_probe(&r, loss, p, i, 4, eps, 3e-4, label, &probed);
        if (w > worst) worst = w;
    }
    tk_exec(&r);
    if (tk_failures == fails) printf("ok %s: %d probes, worst gradient error %.3f of tolerance\n", label, probed, worst);
    tk_release(&r);
    mg_gpt_release(&m);
    mg_graph_free(g);
}

static void test_grad_model(void) {
    mg_gpt_config c = mla_config();
    c.rope.scaling = MG_ROPE_YARN, c.rope.factor = 4, c.rope.original_max_pos = 4, c.rope.mscale_all_dim = 1;
    grad_model_case(c, "MLA (q latent, latent norms, YaRN with mscale, values of 10)");
    c = mla_config();
    c.mla.q_lora_rank = 0, c.qk_layernorm = false, c.disable_bias_linear = false;
    grad_model_case(c, "MLA without q latent or norms, o_proj bias");
    c = mla_config();
    c.mla.enabled = false, c.kv_channels = 12, c.query_groups = 2;
    c.rope.scaling = MG_ROPE_LLAMA3, c.rope.factor = 8, c.rope.original_max_pos = 4, c.rope.interleaved = true;
    grad_model_case(c, "--kv-channels 12, GQA, q/k norms, Llama 3.1 RoPE interleaved");
}

/* The DeepSeek-V3-like model's training loss (lm + coefficient x seq aux loss) against
 * finite differences: MLA, the dense layer, routed experts through sigmoid weights with
 * groups and scaling, shared experts. Routing is piecewise constant: the step 1e-3 is far
 * below the score gaps of this draw, and probes that crossed a boundary would fail. */
static void test_grad_moe(void) {
    mg_gpt_config c = dsv3_config();
    c.init_std = 0.2f;
    c.moe.bias_update_rate = 0; /* (each run steps the biases: by 0, so every run routes alike) */
    c.hidden_dropout = c.attention_dropout = 0;
    mg_graph *g = mg_graph_new();
    mg_gpt m;
    mg_error err = {0};
    int64_t s = c.seq_length, b = 2;
    mg_tensor *tok = mg_input(g, "tokens", MG_I32, 2, (int64_t[]){s, b});
    mg_tensor *tgt = mg_input(g, "targets", MG_I32, 2, (int64_t[]){s, b});
    mg_tensor *pos = mg_input(g, "positions", MG_I32, 1, &s);
    mg_tensor *loss = NULL;
    mg_gpt_aux aux;
    if (mg_gpt2_params(g, &c, &m, &err) == MG_OK) {
        loss = mg_gpt2_forward_aux(g, &m, tok, pos, NULL, tgt, true, &aux);
        loss = aux.loss ? mg_add(g, loss, aux.loss) : NULL;
    }
    tk_run r;
    if (!loss || mg_graph_backward(g, loss, &err) || tk_prepare(&r, g)) {
        TK_CHECK(false, "build: %s %s", mg_graph_error(g)->msg, err.msg);
        mg_gpt_release(&m);
        mg_graph_free(g);
        return;
    }
    tk_rng rng = {17};
    for (int64_t i = 0; i < s * b; i++) {
        tk_i32(&r, tok)[i] = (int32_t)tk_uniform(&rng, 0, (float)c.vocab);
        tk_i32(&r, tgt)[i] = (int32_t)tk_uniform(&rng, 0, (float)c.vocab);
    }
    for (int64_t t = 0; t < s; t++) tk_i32(&r, pos)[t] = (int32_t)t;
    for (int i = 0; i < mg_graph_n_tensors(g); i++) { /* biases that take part in the selection */
        mg_tensor *p = mg_graph_tensor(g, i);
        if (p->role == MG_ROLE_PARAM && !p->requires_grad) tk_fill(&rng, tk_f32(&r, p), mg_numel(p), -0.1f, 0.1f);
    }
    tk_exec(&r);
    double eps = 1e-3, worst = 0;
    int fails = tk_failures, probed = 0;
    for (int i = 0; i < mg_graph_n_tensors(g); i++) {
        mg_tensor *p = mg_graph_tensor(g, i);
        if (p->role != MG_ROLE_PARAM || !p->requires_grad) continue;
        TK_CHECK(p->grad != NULL, "%s got no gradient", p->name);
        if (!p->grad) continue;
        double w = tk_fd_probe(&r, loss, p, i, 3, eps, 1e-3, "DeepSeek-V3-like", &probed);
        if (w > worst) worst = w;
    }
    if (tk_failures == fails) printf("ok DeepSeek-V3-like: %d probes, worst gradient error %.3f of tolerance\n", probed, worst);
    tk_release(&r);
    mg_gpt_release(&m);
    mg_graph_free(g);
}

/* ---- multi-token prediction (models/mtp.c) ---------------------------------------------- */
/* Hugging Face DeepseekV3's names for the MTP layers (model.layers.<L + k>.enorm / hnorm /
 * eh_proj / shared_head.norm and a decoder layer of the last one's kind: MoE here), the
 * count against mg_gpt_num_params, the FLOPs of a depth by hand, config errors. */
static void test_mtp_names(void) {
    mg_gpt_config c = dsv3_config();
    c.mtp_num_layers = 2;
    mg_graph *g = NULL;
    graph_params(&c, &g);
    int64_t n = 0;
    for (int i = 0; i < mg_graph_n_tensors(g); i++) {
        const mg_tensor *t = mg_graph_tensor(g, i);
        if (t->role == MG_ROLE_PARAM && t->requires_grad) n += mg_numel(t);
    }
    for (int k = 3; k < 5; k++) {
        char nm[96];
        snprintf(nm, sizeof nm, "model.layers.%d.enorm.weight", k);
        expect_param(g, nm, 1, 32, 0);
        snprintf(nm, sizeof nm, "model.layers.%d.hnorm.weight", k);
        expect_param(g, nm, 1, 32, 0);
        snprintf(nm, sizeof nm, "model.layers.%d.eh_proj.weight", k);
        expect_param(g, nm, 2, 32, 64);
        snprintf(nm, sizeof nm, "model.layers.%d.shared_head.norm.weight", k);
        expect_param(g, nm, 1, 32, 0);
        snprintf(nm, sizeof nm, "model.layers.%d.self_attn.kv_b_proj.weight", k);
        expect_param(g, nm, 2, 4 * (12 + 10), 16);
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.router.expert_bias", k);
        expect_param(g, nm, 1, 8, 0);
    }
    TK_CHECK(!mg_graph_find(g, "model.layers.5.enorm.weight"), "two MTP layers only");
    TK_CHECK(n == mg_gpt_num_params(&c), "with MTP: %lld trained parameters, mg_gpt_num_params %lld", (long long)n,
             (long long)mg_gpt_num_params(&c));
    mg_graph_free(g);
    /* FLOPs: a depth adds eh_proj 4h², the last layer's kind (MoE here) and its logits 2hV */
    mg_gpt_config d = dsv3_config();
    c = d;
    c.mtp_num_layers = 1;
    mg_gpt_config one = d; /* the MoE layer's FLOPs: 3 layers minus the 2-layer model's */
    one.num_layers = 2, one.moe.pattern_len = 2, one.moe.layer_pattern[0] = 2; /* [0, 1] */
    double layer = mg_gpt_flops(&d, 1) - mg_gpt_flops(&one, 1), hh = 32, V = 64, sq = d.seq_length;
    double want = mg_gpt_flops(&d, 1) + layer + 3.0 * (4 * hh * hh + 2 * hh * V) * sq;
    TK_CHECK(fabs(mg_gpt_flops(&c, 1) - want) <= 1e-9 * want, "MTP FLOPs %.6g, want %.6g", mg_gpt_flops(&c, 1), want);
    c = d;
    c.mtp_num_layers = 7;
    expect_invalid(c, "--mtp-num-layers must be in [0, 6]");
    c = d;
    c.mtp_num_layers = 1, c.mtp_loss_scaling_factor = -1;
    expect_invalid(c, "--mtp-loss-scaling-factor must be >= 0");
}

/* The training objective with two MTP depths (lm + seq aux loss x coefficient + 0.3 / 2 x
 * (mtp_1 + mtp_2)) against finite differences: the MTP layers' norms, eh_proj, MLA and MoE,
 * and the word embedding and output layer they share with the model. Some labels are
 * ignored, so the moved mask matters; the MTP losses must differ from the lm loss and from
 * each other, and be finite. */
static void test_grad_mtp(void) {
    mg_gpt_config c = dsv3_config();
    c.init_std = 0.2f;
    c.moe.bias_update_rate = 0;
    c.hidden_dropout = c.attention_dropout = 0;
    c.mtp_num_layers = 2, c.mtp_loss_scaling_factor = 0.3f;
    mg_graph *g = mg_graph_new();
    mg_gpt m;
    mg_error err = {0};
    int64_t s = c.seq_length, b = 2;
    mg_tensor *tok = mg_input(g, "tokens", MG_I32, 2, (int64_t[]){s, b});
    mg_tensor *tgt = mg_input(g, "targets", MG_I32, 2, (int64_t[]){s, b});
    mg_tensor *pos = mg_input(g, "positions", MG_I32, 1, &s);
    mg_tensor *loss = NULL, *lm = NULL;
    mg_gpt_aux aux;
    if (mg_gpt2_params(g, &c, &m, &err) == MG_OK) {
        lm = mg_gpt2_forward_aux(g, &m, tok, pos, NULL, tgt, true, &aux);
        loss = aux.loss && aux.mtp_loss ? mg_add(g, mg_add(g, lm, aux.loss), aux.mtp_loss) : NULL;
    }
    tk_run r;
    if (!loss || !aux.mtp[0] || !aux.mtp[1] || mg_graph_backward(g, loss, &err) || tk_prepare(&r, g)) {
        TK_CHECK(false, "build: %s %s", mg_graph_error(g)->msg, err.msg);
        mg_gpt_release(&m);
        mg_graph_free(g);
        return;
    }
    tk_rng rng = {23};
    for (int64_t i = 0; i < s * b; i++) {
        tk_i32(&r, tok)[i] = (int32_t)tk_uniform(&rng, 0, (float)c.vocab);
        tk_i32(&r, tgt)[i] = i % 5 == 3 ? MG_LABEL_IGNORE : (int32_t)tk_uniform(&rng, 0, (float)c.vocab);
    }
    for (int64_t t = 0; t < s; t++) tk_i32(&r, pos)[t] = (int32_t)t;
    for (int i = 0; i < mg_graph_n_tensors(g); i++) {
        mg_tensor *p = mg_graph_tensor(g, i);
        if (p->role == MG_ROLE_PARAM && !p->requires_grad) tk_fill(&rng, tk_f32(&r, p), mg_numel(p), -0.1f, 0.1f);
    }
    tk_exec(&r);
    double l0 = tk_f32(&r, lm)[0], m1 = tk_f32(&r, aux.mtp[0])[0], m2 = tk_f32(&r, aux.mtp[1])[0];
    double tot = tk_f32(&r, loss)[0], a = tk_f32(&r, aux.loss)[0];
    TK_CHECK(isfinite(m1) && isfinite(m2) && m1 > 1 && m2 > 1 && m1 != l0 && m2 != m1, "lm %g, mtp_1 %g, mtp_2 %g", l0,
             m1, m2);
    TK_CHECK(fabs(tot - (l0 + a + 0.15 * (m1 + m2))) <= 1e-5 * tot, "objective %.9g, want lm + aux + 0.15 (mtp_1 + mtp_2) = %.9g",
             tot, l0 + a + 0.15 * (m1 + m2));
    double eps = 1e-3, worst = 0;
    int fails = tk_failures, probed = 0;
    for (int i = 0; i < mg_graph_n_tensors(g); i++) {
        mg_tensor *p = mg_graph_tensor(g, i);
        if (p->role != MG_ROLE_PARAM || !p->requires_grad) continue;
        TK_CHECK(p->grad != NULL, "%s got no gradient", p->name);
        if (!p->grad) continue;
        bool mtp = strstr(p->name, "layers.3.") || strstr(p->name, "layers.4.") || strstr(p->name, "embed_tokens") ||
                   strstr(p->name, "lm_head");
        if (!mtp) continue; /* (the rest: test_grad_moe) */
        double w = tk_fd_probe(&r, loss, p, i, 3, eps, 1e-3, "MTP", &probed);
        if (w > worst) worst = w;
    }
    if (tk_failures == fails)
        printf("ok MTP x2: lm %.4f mtp_1 %.4f mtp_2 %.4f; %d probes, worst gradient error %.3f of tolerance\n", l0, m1, m2,
               probed, worst);
    tk_release(&r);
    mg_gpt_release(&m);
    mg_graph_free(g);
}

/* ---- the Hugging Face reference (tests/models/deepseek_hf.py) ------------------------------- */
/* Variant 0: MLA with a q latent and YaRN (factor 4 over 4 positions, mscale 1, mscale_all_dim
 * 1: the softmax scale times mscale^2); 1: MLA without a q latent and YaRN of factor 1 (the
 * plain frequencies, as Megatron's default --rotary-scaling-factor). Both: latent norms
 * (DeepseekV3's are always there), untied, no biases (its attention_bias false), SwiGLU,
 * every layer dense. */
static mg_gpt_config dump_config(int variant) {
    mg_gpt_config c = mla_config();
    c.num_layers = 2, c.hidden = 64, c.heads = 4, c.ffn_hidden = 96;
    c.seq_length = 16, c.max_position = 16, c.vocab = 100;
    c.init_std = 0.1f, c.hidden_dropout = c.attention_dropout = 0;
    c.mla = (mg_mla_config){true, variant == 0 ? 24 : 0, 16, 12, 8, 10};
    c.rope.scaling = MG_ROPE_YARN, c.rope.original_max_pos = 4096;
    c.rope.factor = variant == 0 ? 4.0f : 1.0f;
    if (variant == 0) c.rope.original_max_pos = 4, c.rope.mscale = 1, c.rope.mscale_all_dim = 1;
    if (variant == 2) { /* DeepSeek-V3's MoE: a dense first layer, 8 experts in 4 groups, top-4 of 2 groups, sigmoid
                         * scores with the expert bias, scaling 2.5, a shared expert of the experts' size */
        c.num_layers = 3;
        c.moe.num_experts = 8, c.moe.ffn_hidden = 32, c.moe.topk = 4, c.moe.shared_ffn = 32;
        c.moe.pattern_len = 3, c.moe.layer_pattern[0] = 6;
        c.moe.score = MG_MOE_SIGMOID, c.moe.expert_bias = true, c.moe.num_groups = 4, c.moe.group_topk = 2;
        c.moe.topk_scaling = 2.5f;
    }
    return c;
}

static int write_config(const char *dir, const mg_gpt_config *c) {
    char fn[1024];
    snprintf(fn, sizeof fn, "%s/config.json", dir);
    FILE *o = fopen(fn, "w");
    if (!o) return 1;
    fprintf(o,
            "{\"vocab_size\": %lld, \"hidden_size\": %d, \"intermediate_size\": %d, \"num_hidden_layers\": %d, "
            "\"num_attention_heads\": %d, \"q_lora_rank\": %d, \"kv_lora_rank\": %d, \"qk_nope_head_dim\": %d, "
            "\"qk_rope_head_dim\": %d, \"v_head_dim\": %d, \"rms_norm_eps\": %.9g, \"max_position_embeddings\": %d, "
            "\"rope_theta\": %.9g, \"rope_factor\": %.9g, \"rope_original_max_position_embeddings\": %d, "
            "\"rope_mscale\": %.9g, \"rope_mscale_all_dim\": %.9g, \"seq_length\": %d, \"batch\": 2, "
            "\"n_routed_experts\": %d, \"moe_intermediate_size\": %d, \"num_experts_per_tok\": %d, \"n_group\": %d, "
            "\"topk_group\": %d, \"routed_scaling_factor\": %.9g, \"first_k_dense_replace\": %d}\n",
            (long long)c->vocab, c->hidden, c->ffn_hidden, c->num_layers, c->heads, c->mla.q_lora_rank,
            c->mla.kv_lora_rank, c->mla.qk_head_dim, c->mla.qk_pos_emb_head_dim, c->mla.v_head_dim, (double)c->ln_eps,
            c->max_position, (double)c->rotary_base, (double)c->rope.factor, c->rope.original_max_pos,
            (double)c->rope.mscale, (double)c->rope.mscale_all_dim, c->seq_length, c->moe.num_experts,
            c->moe.ffn_hidden, c->moe.topk, c->moe.num_groups, c->moe.group_topk, (double)c->moe.topk_scaling,
            c->moe.num_experts ? 1 : c->num_layers);
    return fclose(o) != 0;
}

static int dump_model(const char *dir, int variant) {
    mg_gpt_config c = dump_config(variant);
    mg_graph *g = mg_graph_new();
    mg_gpt m;
    mg_error err = {0};
    int64_t s = c.seq_length, b = 2;
    mg_tensor *tok = mg_input(g, "tokens", MG_I32, 2, (int64_t[]){s, b});
    mg_tensor *tgt = mg_input(g, "targets", MG_I32, 2, (int64_t[]){s, b});
    mg_tensor *pos = mg_input(g, "positions", MG_I32, 1, &s);
    mg_tensor *loss = NULL;
    if (mg_gpt2_params(g, &c, &m, &err) == MG_OK) loss = mg_gpt2_forward(g, &m, tok, pos, tgt, false);
    mg_gpt_release(&m);
    tk_run r;
    if (!loss || mg_graph_backward(g, loss, &err) || tk_prepare(&r, g)) {
        fprintf(stderr, "dump: %s %s\n", mg_graph_error(g)->msg, err.msg);
        mg_graph_free(g);
        return 1;
    }
    tk_rng rng = {5};
    for (int64_t i = 0; i < s * b; i++) {
        tk_i32(&r, tok)[i] = (int32_t)tk_uniform(&rng, 0, (float)c.vocab);
        tk_i32(&r, tgt)[i] = (int32_t)tk_uniform(&rng, 0, (float)c.vocab);
    }
    for (int64_t t = 0; t < s; t++) tk_i32(&r, pos)[t] = (int32_t)t;
    /* norms perturbed from ones, so that a wrong norm cannot hide */
    for (int i = 0; i < mg_graph_n_tensors(g); i++) {
        mg_tensor *t = mg_graph_tensor(g, i);
        if (t->role == MG_ROLE_PARAM && t->ndim == 1) tk_fill(&rng, tk_f32(&r, t), mg_numel(t), 0.7f, 1.3f);
    }
    int rc = tk_exec(&r) || write_config(dir, &c);
    char fn[1024];
    snprintf(fn, sizeof fn, "%s/params.txt", dir);
    FILE *list = rc ? NULL : fopen(fn, "w");
    rc = rc || !list;
    for (int i = 0; !rc && i < mg_graph_n_tensors(g); i++) {
        mg_tensor *t = mg_graph_tensor(g, i);
        if (t->role != MG_ROLE_PARAM) continue;
        fprintf(list, "%s", t->name);
        for (int d = 0; d < t->ndim; d++) fprintf(list, " %lld", (long long)t->shape[d]);
        fprintf(list, "\n");
        for (int k = 0; k < (t->grad ? 2 : 1) && !rc; k++) { /* (the expert bias has no gradient) */
            snprintf(fn, sizeof fn, "%s/%s%s.bin", dir, t->name, k ? ".grad" : "");
            FILE *o = fopen(fn, "wb");
            const float *v = tk_f32(&r, k ? t->grad : t);
            rc = !o || fwrite(v, sizeof *v, (size_t)mg_numel(t), o) != (size_t)mg_numel(t);
            if (o) rc |= fclose(o) != 0;
        }
    }
    if (list) rc |= fclose(list) != 0;
    snprintf(fn, sizeof fn, "%s/tokens.bin", dir);
    FILE *o = rc ? NULL : fopen(fn, "wb");
    rc = rc || !o || fwrite(tk_i32(&r, tok), 4, (size_t)(s * b), o) != (size_t)(s * b) ||
         fwrite(tk_i32(&r, tgt), 4, (size_t)(s * b), o) != (size_t)(s * b);
    if (o) rc |= fclose(o) != 0;
    snprintf(fn, sizeof fn, "%s/loss.txt", dir);
    o = rc ? NULL : fopen(fn, "w");
    rc = rc || !o || fprintf(o, "%.9g\n", (double)tk_f32(&r, loss)[0]) < 0;
    if (o) rc |= fclose(o) != 0;
    if (rc) fprintf(stderr, "dump: cannot write into %s\n", dir);
    tk_release(&r);
    mg_graph_free(g);
    return rc ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "dump")) return dump_model(argv[2], atoi(argv[3]));
    static const tk_case cases[] = {
        {"names", test_names},
        {"flops", test_flops},
        {"config_errors", test_config_errors},
        {"grad_model", test_grad_model},
        {"moe_names", test_moe_names},
        {"known_sizes", test_known_sizes},
        {"grad_moe", test_grad_moe},
        {"mtp_names", test_mtp_names},
        {"grad_mtp", test_grad_mtp},
    };
    return tk_main(argc, argv, cases, (int)(sizeof cases / sizeof *cases));
}
