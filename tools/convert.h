/* mgraph-convert's model descriptions: one per Hugging Face architecture it reads and
 * writes (convert_gpt2.c: GPT2LMHeadModel, convert_llama.c: LlamaForCausalLM and its
 * variants Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM). Each says
 * which parameters mgraph's model has (models/gpt2.c names and layouts), how a tensor maps
 * to and from the Hugging Face one, and how config.json reads and writes. mgraph-convert.c
 * does the files (mgraph checkpoints, safetensors) and the command line. */
#ifndef MGRAPH_TOOLS_CONVERT_H
#define MGRAPH_TOOLS_CONVERT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "mgraph/error.h"
#include "mgraph/model.h"

typedef enum cv_arch_kind { CV_GPT2, CV_LLAMA } cv_arch_kind;

/* The model, in the union of both architectures' terms. */
typedef struct cv_cfg {
    cv_arch_kind arch;
    int layers, hidden, ffn, heads, groups, positions;
    int64_t vocab, padded;   /* Hugging Face's vocabulary; mgraph's padded one */
    double eps;              /* norm epsilon */
    double rope_base;        /* LLaMA: RoPE theta */
    bool untied;             /* LLaMA: lm_head apart from the embedding */
    bool bias;               /* LLaMA: biases on q/k/v/o and the MLP (GPT-2 always has them) */
    bool qkv_bias;           /* LLaMA family: biases on q/k/v even without `bias` (Qwen2, --add-qkv-bias) */
    bool qk_norm;            /* LLaMA family: per-head RMSNorm of q and k (Qwen3, --qk-layernorm) */
    bool gelu_exact;         /* GPT-2: activation_function "gelu" (x Φ(x), --no-bias-gelu-fusion), not
                                "gelu_new" (the tanh approximation) */
    int window;              /* LLaMA family: sliding-window attention over this many keys in every
                                layer (Mistral's sliding_window, --window-size window-1,0); 0: none */
    int head_dim;            /* LLaMA family: each head's size (Qwen3's head_dim, --kv-channels); 0: hidden / heads */
    mg_rope_config rope;     /* RoPE's scaling and pairing (Llama 3.1's, YaRN) */
    mg_mla_config mla;       /* DeepseekV3: multi-latent attention */
    mg_moe_config moe;       /* Mixtral, Qwen3-MoE, DeepseekV3: the experts (num_experts 0: a dense model) */
    int mtp_layers;          /* DeepseekV3: multi-token prediction layers (num_nextn_predict_layers,
                                --mtp-num-layers), stored as model.layers.<layers + k>.* */
    const char *tokenizer_type;
    double hidden_dropout, attention_dropout;
    int divisible_by;
} cv_cfg;

/* One tensor in mgraph's layout, owned. */
typedef struct cv_tensor {
    char name[128];
    int ndim;
    int64_t shape[3];
    float *data;
} cv_tensor;

/* One of the Hugging Face tensors an mgraph tensor is made of (MoE experts: one per
 * expert and projection): `count` = its elements, contiguous in the mgraph tensor's data
 * from element `offset` on, in the same order. */
typedef struct cv_part {
    char key[192];
    int ndim;
    int64_t shape[2];
    int64_t offset;
} cv_part;

typedef struct cv_model {
    cv_cfg cfg;
    cv_tensor *t;
    int n, cap;
} cv_model;

/* Appends a zeroed tensor [rows] (cols 0) or [rows, cols]; cv_add3 a [d0, d1, d2] one. */
int cv_add(cv_model *m, const char *name, int64_t rows, int64_t cols, mg_error *err);
int cv_add3(cv_model *m, const char *name, int64_t d0, int64_t d1, int64_t d2, mg_error *err);
cv_tensor *cv_find(cv_model *m, const char *name);
void cv_model_free(cv_model *m);
/* The shortest decimal that reads back as the same float (1e-05, not 9.99999975e-06):
 * mgraph holds epsilons and RoPE bases as float. */
double cv_float_decimal(float f);

typedef struct cv_arch cv_arch;
struct cv_arch {
    const char *hf_class;    /* "GPT2LMHeadModel" */
    const char *model_type;  /* config.json's "model_type" */
    const char *embedding;   /* mgraph's name of the word embedding (its rows are padded) */
    /* mgraph's parameters of m->cfg, in models/gpt2.c's order, zeroed */
    int (*alloc)(cv_model *m, mg_error *err);
    /* the Hugging Face key of mgraph tensor t */
    void (*hf_key)(const cv_tensor *t, char *key, size_t n);
    /* the Hugging Face shape of t; returns its ndim */
    int (*hf_shape)(const cv_cfg *c, const cv_tensor *t, int64_t *shape);
    /* t's data from the Hugging Face tensor hf (to_mg), or hf from t */
    void (*convert)(const cv_cfg *c, cv_tensor *t, float *hf, bool to_mg);
    /* config.json (object cfg, read from path) into c: sizes, options; MG_ERR_INVALID
     * or MG_ERR_UNSUPPORTED naming the field for what mgraph's model cannot be. `a` is
     * the class itself: the variants of one family share these two functions. */
    int (*read_config)(const cv_arch *a, json_t *cfg, const char *path, cv_cfg *c, mg_error *err);
    json_t *(*write_config)(const cv_arch *a, const cv_cfg *c);
    /* NULL, or the Hugging Face tensors t is made of (up to max into out): > 0 for a tensor
     * in parts, which then takes the place of hf_key / hf_shape / convert */
    int (*parts)(const cv_arch *a, const cv_cfg *c, const cv_tensor *t, cv_part *out, int max);
    /* MoE classes: the MLP module's name ("mlp", Mixtral's "block_sparse_moe") and the
     * experts' projections' (gate, up, down) */
    const char *moe_module, *expert_names[3];
};

extern const cv_arch cv_gpt2, cv_llama, cv_qwen2, cv_qwen3, cv_mistral, cv_mixtral, cv_qwen3_moe, cv_deepseek_v3;

/* ---- shared by the classes (convert_llama.c) --------------------------------------------- */
/* RoPE's theta and scaling from config.json's rope_parameters (transformers 5) or
 * rope_theta / rope_scaling (4.x): the default, Llama 3.1's with Megatron's 1, 4 over 8192,
 * or YaRN; anything else MG_ERR_UNSUPPORTED naming it. mla: Megatron's MLA YaRN (4096
 * positions, betas 32 / 1; the default becomes YaRN of factor 1). */
int cv_read_rope(json_t *cfg, const char *path, bool mla, double *theta, mg_rope_config *r, mg_error *err);
/* The rope_parameters object of theta and r (NULL: out of memory). */
json_t *cv_write_rope(double theta, const mg_rope_config *r);
/* The LLaMA family's layouts: Hugging Face's own (the vocabulary rows unpadded). */
int cv_llama_hf_shape(const cv_cfg *c, const cv_tensor *t, int64_t *s);
void cv_llama_convert(const cv_cfg *c, cv_tensor *t, float *hf, bool to_mg);
/* The MoE layers' mgraph tensors of layer l: router, expert bias, stacked experts, shared experts. */
int cv_moe_alloc_layer(cv_model *m, int l, mg_error *err);
/* Class a's keys of the MoE tensors (router, bias) and parts (experts); see cv_arch.parts. */
bool cv_moe_hf_key(const cv_arch *a, const cv_tensor *t, char *key, size_t n);
int cv_moe_parts(const cv_arch *a, const cv_cfg *c, const cv_tensor *t, cv_part *out, int max);

/* A positive integer field of config.json (def when absent or null; def < 0: required). */
int cv_cfg_int(json_t *cfg, const char *k, int64_t def, int64_t *v, const char *path, mg_error *err);

#endif
