/* Whole models against stored PyTorch / transformers references (tests/data/reference,
 * written by its make.py with the pinned packages): no torch is needed to run this.
 *
 *   test_models_reference FILE.safetensors
 *
 * The file names the model by Megatron's flags (__metadata__ "megatron_args"); mgraph-run's
 * own flag parser turns them into the model's configuration, so the flags' meaning is
 * checked along with the model. Every parameter is loaded by name (the names and shapes
 * must be exactly the file's), the tokens run forward and the mean cross-entropy against
 * the targets backward on the reference executor. Bounds (float32 against float32, both
 * summing in other orders):
 *   logits                 max |mgraph - torch| <= 1e-5 of the largest |logit|
 *   loss                   relative 1e-6
 *   every parameter's gradient  max |difference| <= 2e-5 of the tensor's largest |entry| (the
 *                          issue asked 1e-4; 1.2e-6 is the worst seen)
 * A GELU backward off by 1%, a RoPE angle off by one position, a wrong softmax scale or a
 * swapped expert moves some gradient far past that (tools/mutate.sh injects such bugs).
 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/safetensors.h"
#include "run_config.h"
#include "testkit.h"

static const char *g_file;

static double rel_max(const float *got, const float *want, int64_t n) {
    double d = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)got[i] - want[i]));
        m = fmax(m, fabs((double)want[i]));
    }
    return m > 0 ? d / m : d;
}

/* The model the file's Megatron flags describe (vocabulary: the logits' width). */
static int model_config(mg_st_file *f, int64_t vocab, mg_gpt_config *m) {
    const char *js = mg_st_metadata(f, "megatron_args");
    json_error_t je;
    json_t *args = js ? json_loads(js, 0, &je) : NULL;
    if (!json_is_array(args)) {
        TK_CHECK(false, "%s: no megatron_args list in __metadata__", g_file);
        json_decref(args);
        return -1;
    }
    size_t n = json_array_size(args);
    char **argv = calloc(n + 2, sizeof *argv);
    argv[0] = "mgraph-run";
    for (size_t i = 0; i < n; i++) argv[i + 1] = (char *)json_string_value(json_array_get(args, i));
    mg_run_config rc;
    mg_run_notes notes = {0};
    mg_error err = {0};
    mg_run_config_defaults(&rc);
    mg_run_config_parse(&rc, (int)n + 1, argv, &notes);
    if (!notes.n_errors) mg_run_config_check(&rc, &notes);
    int bad = notes.n_errors || mg_run_config_model(&rc, m, &err);
    if (bad) TK_CHECK(false, "%s: megatron_args refused: %s%s", g_file, notes.errors, err.msg);
    m->vocab = vocab;
    free(argv);
    json_decref(args);
    return bad ? -1 : 0;
}

static const float *f32_of(mg_st_file *f, const char *key, const mg_tensor *like, int64_t numel) {
    const mg_st_entry *e = mg_st_find(f, key);
    if (!e || e->dtype != MG_F32) {
        TK_CHECK(false, "%s: no F32 tensor %s", g_file, key);
        return NULL;
    }
    int64_t n = 1;
    for (int d = 0; d < e->ndim; d++) n *= e->shape[d];
    bool same = like ? e->ndim == like->ndim : n == numel;
    for (int d = 0; like && same && d < e->ndim; d++) same = e->shape[d] == like->shape[d];
    TK_CHECK(same && n == numel, "%s: %s has another shape than mgraph's", g_file, key);
    return same && n == numel ? mg_st_data(f, e) : NULL;
}

static void test_file(void) {
    mg_st_file *f = NULL;
    mg_error err = {0};
    if (mg_st_open(g_file, &f, &err)) {
        TK_CHECK(false, "%s", err.msg);
        return;
    }
    const mg_st_entry *le = mg_st_find(f, "logits"), *te = mg_st_find(f, "tokens"), *ge = mg_st_find(f, "targets");
    if (!le || le->ndim != 3 || !te || te->dtype != MG_I32 || te->ndim != 2 || !ge || ge->dtype != MG_I32 ||
        ge->ndim != 2) {
        TK_CHECK(false, "%s: logits [b, s, V], tokens and targets [b, s] (I32) wanted", g_file);
        mg_st_close(f);
        return;
    }
    int64_t b = te->shape[0], s = te->shape[1], V = le->shape[2];
    mg_gpt_config c;
    if (model_config(f, V, &c)) {
        mg_st_close(f);
        return;
    }
    mg_graph *g = mg_graph_new();
    mg_gpt m;
    mg_tensor *tok = mg_input(g, "tokens", MG_I32, 2, (int64_t[]){s, b});
    mg_tensor *tgt = mg_input(g, "targets", MG_I32, 2, (int64_t[]){s, b});
    mg_tensor *pos = mg_input(g, "positions", MG_I32, 1, &s);
    mg_tensor *loss = NULL, *logits = NULL;
    mg_gpt_aux aux;
    if (mg_gpt2_params(g, &c, &m, &err) == MG_OK) {
        /* not training: no dropout and no MoE auxiliary loss, the language-model loss alone */
        loss = mg_gpt2_forward_aux(g, &m, tok, pos, NULL, tgt, false, &aux);
        mg_gpt_release(&m);
    }
    if (loss) logits = loss->src->in[0]; /* cross_entropy's logits [s, b, V] */
    tk_run r;
    memset(&r, 0, sizeof r);
    if (!loss || mg_graph_backward(g, loss, &err) || tk_prepare(&r, g)) {
        TK_CHECK(false, "%s: building the model: %s %s", g_file, mg_graph_error(g)->msg, err.msg);
        goto out;
    }
    TK_CHECK(logits->ndim == 3 && logits->shape[0] == s && logits->shape[1] == b && logits->shape[2] == V,
             "the cross-entropy's first input is not the logits [s, b, V]");
    /* parameters by name: the model's set must be the file's */
    int n_params = 0, n_file = 0;
    for (int i = 0; i < mg_graph_n_tensors(g); i++) {
        mg_tensor *t = mg_graph_tensor(g, i);
        if (t->role != MG_ROLE_PARAM) continue;
        n_params++;
        char key[600];
        snprintf(key, sizeof key, "param.%s", t->name);
        const float *v = f32_of(f, key, t, mg_numel(t));
        if (v) memcpy(tk_f32(&r, t), v, (size_t)mg_numel(t) * sizeof(float));
    }
    for (int i = 0; i < mg_st_n_entries(f); i++) n_file += !strncmp(mg_st_entry_at(f, i)->key, "param.", 6);
    TK_CHECK(n_file == n_params, "%s holds %d parameters, mgraph's model %d", g_file, n_file, n_params);
    const int32_t *ft = mg_st_data(f, te), *fg = mg_st_data(f, ge);
    for (int64_t k = 0; k < b; k++)
        for (int64_t t = 0; t < s; t++) { /* transformers [b, s] -> mgraph [s, b] */
            tk_i32(&r, tok)[t * b + k] = ft[k * s + t];
            tk_i32(&r, tgt)[t * b + k] = fg[k * s + t];
        }
    for (int64_t t = 0; t < s; t++) tk_i32(&r, pos)[t] = (int32_t)t;
    if (tk_failures || tk_exec(&r)) {
        TK_CHECK(tk_failures, "%s: the step failed", g_file);
        goto out;
    }
    /* logits: mgraph [s, b, V] against transformers' [b, s, V] */
    const float *fl = f32_of(f, "logits", NULL, s * b * V), *got = tk_f32(&r, logits);
    float *ours = malloc((size_t)(s * b * V) * sizeof *ours);
    for (int64_t k = 0; k < b; k++)
        for (int64_t t = 0; t < s; t++) memcpy(ours + (k * s + t) * V, got + (t * b + k) * V, (size_t)V * sizeof *ours);
    double el = fl ? rel_max(ours, fl, s * b * V) : INFINITY;
    free(ours);
    TK_CHECK(el <= 1e-5, "logits differ from transformers' by %.3g of the largest (bound 1e-5)", el);
    const float *fls = f32_of(f, "loss", NULL, 1);
    double lg = tk_f32(&r, loss)[0], lw = fls ? fls[0] : NAN, elos = fabs(lg - lw) / fabs(lw);
    TK_CHECK(elos <= 1e-6, "loss %.9g, transformers %.9g (relative %.3g, bound 1e-6)", lg, lw, elos);
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < mg_graph_n_tensors(g); i++) {
        mg_tensor *t = mg_graph_tensor(g, i);
        if (t->role != MG_ROLE_PARAM) continue;
        char key[600];
        snprintf(key, sizeof key, "grad.%s", t->name);
        if (!mg_st_find(f, key)) { /* a parameter without a gradient (DeepSeek-V3's expert bias) */
            TK_CHECK(t->grad == NULL, "%s has a gradient, transformers' none", t->name);
            continue;
        }
        const float *want = f32_of(f, key, t, mg_numel(t));
        TK_CHECK(t->grad != NULL, "%s gets no gradient", t->name);
        if (!want || !t->grad) continue;
        double e = rel_max(tk_f32(&r, t->grad), want, mg_numel(t));
        if (e > worst) worst = e, worst_name = t->name;
        TK_CHECK(e <= 2e-5, "gradient of %s differs from transformers' by %.3g of its largest entry (bound 2e-5)",
                 t->name, e);
    }
    printf("%s (%s, torch/transformers %s): %d parameters; logits %.2g of the largest, loss %.9g relative %.2g, worst "
           "gradient %.2g of its tensor's largest entry (%s)\n",
           g_file, mg_st_metadata(f, "model") ? mg_st_metadata(f, "model") : "?",
           mg_st_metadata(f, "versions") ? mg_st_metadata(f, "versions") : "?", n_params, el, lg, elos, worst,
           worst_name);
out:
    tk_release(&r);
    mg_graph_free(g);
    mg_st_close(f);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_models_reference FILE.safetensors\n");
        return 2;
    }
    g_file = argv[1];
    test_file();
    if (tk_failures) fprintf(stderr, "%d check(s) failed\n", tk_failures);
    return tk_failures ? 1 : 0;
}
