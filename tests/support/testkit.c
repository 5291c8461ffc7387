#include "testkit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int tk_failures = 0;

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

float tk_uniform(tk_rng *r, float lo, float hi) {
    return lo + (hi - lo) * (float)((splitmix(&r->s) >> 40) * (1.0 / 16777216.0));
}

void tk_fill(tk_rng *r, float *x, int64_t n, float lo, float hi) {
    for (int64_t i = 0; i < n; i++) x[i] = tk_uniform(r, lo, hi);
}

double tk_compare(const float *got, const float *want, int64_t n, double rtol, double atol, int64_t *worst) {
    double w = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        double e = d == 0 ? 0 : d / (atol + rtol * fabs((double)want[i]));
        if (!(e <= w)) { /* also catches NaN */
            w = isnan(e) ? INFINITY : e;
            if (worst) *worst = i;
        }
    }
    return w;
}

bool tk_expect_close(const char *what, const float *got, const float *want, int64_t n, double rtol, double atol) {
    int64_t k = 0;
    double e = tk_compare(got, want, n, rtol, atol, &k);
    if (e > 1.0) {
        fprintf(stderr, "FAIL %s: element %lld got %.9g want %.9g (error %.3g x tolerance, rtol %g atol %g)\n", what,
                (long long)k, (double)got[k], (double)want[k], e, rtol, atol);
        tk_failures++;
        return false;
    }
    return true;
}

int tk_prepare(tk_run *r, mg_graph *g) {
    mg_error err = {0};
    memset(r, 0, sizeof *r);
    r->g = g;
    r->info.seed = 1234;
    r->info.training = true;
    if (mg_graph_error(g)->code) {
        fprintf(stderr, "graph error: %s\n", mg_graph_error(g)->msg);
        return -1;
    }
    if (mg_graph_validate(g, &err) || mg_memplan_build(g, false, &r->plan, &err) ||
        mg_storage_new(g, r->plan, &r->st, &err) || mg_storage_init(r->st, r->info.seed, &err)) {
        fprintf(stderr, "prepare: %s\n", err.msg);
        return -1;
    }
    return 0;
}

float *tk_f32(tk_run *r, const mg_tensor *t) { return mg_storage_data(r->st, t); }

double tk_fd_probe(tk_run *r, const mg_tensor *loss, mg_tensor *p, int salt, int probes, double eps, double abs_tol,
                   const char *label, int *probed) {
    int64_t n = mg_numel(p);
    float *an = malloc((size_t)n * sizeof *an);
    if (!an) {
        TK_CHECK(0, "%s: out of memory", label);
        return 0;
    }
    memcpy(an, tk_f32(r, p->grad), (size_t)n * sizeof *an);
    float *x = tk_f32(r, p);
    double worst = 0;
    for (int k = 0; k < probes; k++) {
        int64_t e = (int64_t)(((uint64_t)(k + 1) * 2654435761u + (uint64_t)salt * 97u) % (uint64_t)n);
        float keep = x[e];
        x[e] = keep + (float)eps;
        tk_exec(r);
        double lp = tk_f32(r, loss)[0];
        x[e] = keep - (float)eps;
        tk_exec(r);
        double lm = tk_f32(r, loss)[0];
        x[e] = keep;
        double fd = (lp - lm) / (2 * eps), a = an[e];
        double err = fabs(fd - a) / (abs_tol + 3e-2 * fmax(fabs(fd), fabs(a)));
        if (err > worst) worst = err;
        (*probed)++;
        TK_CHECK(err <= 1.0, "%s: d loss / d %s[%lld]: analytic %.6g, finite difference %.6g", label, p->name,
                 (long long)e, a, fd);
    }
    free(an);
    return worst;
}
int32_t *tk_i32(tk_run *r, const mg_tensor *t) { return mg_storage_data(r->st, t); }

int tk_exec(tk_run *r) {
    mg_error err = {0};
    int rc = mg_exec_reference(r->g, r->st, &r->info, &err);
    if (rc) fprintf(stderr, "exec: %s\n", err.msg);
    return rc;
}

void tk_release(tk_run *r) {
    mg_storage_free(r->st);
    mg_memplan_free(r->plan);
    r->st = NULL;
    r->plan = NULL;
}

static void fill_leaf(tk_run *r, tk_rng *rng, const tk_leaf *l, const mg_tensor *t) {
    int64_t n = mg_numel(t);
    if (l->dtype == MG_I32) {
        int32_t *p = tk_i32(r, t);
        for (int64_t i = 0; i < n; i++) p[i] = (int32_t)floorf(tk_uniform(rng, l->lo, l->hi));
    } else {
        tk_fill(rng, tk_f32(r, t), n, l->lo, l->hi);
    }
}

bool tk_gradcheck(const char *label, int n_leaves, const tk_leaf *leaves, tk_build_fn build, void *ctx,
                  const tk_grad_opts *opts) {
    tk_grad_opts o = {1e-2, 2e-2, 2e-3, 48, 7};
    if (opts) {
        if (opts->eps > 0) o.eps = opts->eps;
        if (opts->rtol > 0) o.rtol = opts->rtol;
        if (opts->atol > 0) o.atol = opts->atol;
        if (opts->max_probe > 0) o.max_probe = opts->max_probe;
        if (opts->seed) o.seed = opts->seed;
    }
    mg_graph *g = mg_graph_new();
    mg_tensor *lt[16];
    bool ok = false;
    tk_run r = {0};
    if (n_leaves > 16) goto done;
    for (int i = 0; i < n_leaves; i++) {
        const tk_leaf *l = &leaves[i];
        if (l->diff) {
            lt[i] = mg_param(g, l->name, l->ndim, l->shape, (mg_init){MG_INIT_NONE, 0});
        } else {
            lt[i] = mg_input(g, l->name, l->dtype, l->ndim, l->shape);
        }
    }
    mg_tensor *y = build(g, lt, ctx);
    mg_tensor *rw = y ? mg_input(g, "tk.r", MG_F32, y->ndim, y->shape) : NULL;
    mg_tensor *loss = mg_sum(g, mg_mul(g, y, rw), MG_ALL_AXES, false);
    mg_error err = {0};
    if (!loss || mg_graph_backward(g, loss, &err)) {
        fprintf(stderr, "FAIL %s: building: %s %s\n", label, mg_graph_error(g)->msg, err.msg);
        tk_failures++;
        goto done;
    }
    if (tk_prepare(&r, g)) {
        tk_failures++;
        goto done;
    }
    tk_rng rng = {o.seed};
    for (int i = 0; i < n_leaves; i++) fill_leaf(&r, &rng, &leaves[i], lt[i]);
    tk_fill(&rng, tk_f32(&r, rw), mg_numel(rw), -1.0f, 1.0f);
    if (tk_exec(&r)) {
        tk_failures++;
        goto done;
    }
    ok = true;
    double worst_all = 0;
    /* Take every analytic gradient before probing: probes re-run the graph. */
    float *grads[16] = {0};
    for (int i = 0; i < n_leaves; i++) {
        if (!leaves[i].diff || !lt[i]->grad) continue;
        size_t bytes = (size_t)mg_numel(lt[i]) * sizeof(float);
        grads[i] = malloc(bytes);
        memcpy(grads[i], tk_f32(&r, lt[i]->grad), bytes);
    }
    for (int i = 0; i < n_leaves; i++) {
        if (!leaves[i].diff) continue;
        mg_tensor *x = lt[i];
        if (!x->grad) {
            fprintf(stderr, "FAIL %s: leaf %s got no gradient\n", label, x->name);
            tk_failures++;
            ok = false;
            continue;
        }
        int64_t n = mg_numel(x);
        float *an = grads[i];
        float *xv = tk_f32(&r, x);
        int64_t step = n <= o.max_probe ? 1 : n / o.max_probe;
        for (int64_t k = 0; k < n; k += step) {
            float keep = xv[k];
            xv[k] = keep + (float)o.eps;
            tk_exec(&r);
            double lp = tk_f32(&r, loss)[0];
            xv[k] = keep - (float)o.eps;
            tk_exec(&r);
            double lm = tk_f32(&r, loss)[0];
            xv[k] = keep;
            double fd = (lp - lm) / (2 * o.eps), a = an[k];
            double e = fabs(fd - a) / (o.atol + o.rtol * fmax(fabs(fd), fabs(a)));
            if (e > worst_all) worst_all = e;
            if (!(e <= 1.0)) {
                fprintf(stderr, "FAIL %s: d loss / d %s[%lld]: analytic %.6g, finite difference %.6g\n", label,
                        x->name, (long long)k, a, fd);
                tk_failures++;
                ok = false;
                break;
            }
        }
        free(an);
    }
    if (ok) printf("ok %s: worst gradient error %.3f of tolerance (rtol %g, atol %g, eps %g)\n", label, worst_all,
                   o.rtol, o.atol, o.eps);
done:
    tk_release(&r);
    mg_graph_free(g);
    return ok;
}

mg_step_config tk_small_gpt(int layers, int hidden, int heads, int seq, int64_t vocab, int micro_batch, int n_micro) {
    mg_step_config c = {0};
    c.model = mg_gpt_defaults();
    c.model.num_layers = layers;
    c.model.hidden = hidden;
    c.model.heads = heads;
    c.model.ffn_hidden = 4 * hidden;
    c.model.seq_length = seq;
    c.model.max_position = seq;
    c.model.vocab = vocab;
    c.micro_batch = micro_batch;
    c.n_micro = n_micro;
    c.training = true;
    c.optim = mg_adamw_defaults();
    return c;
}

void tk_llama(mg_gpt_config *m, int query_groups) {
    m->norm = MG_NORM_RMSNORM;
    m->pos_emb = MG_POS_ROPE;
    m->swiglu = true;
    m->query_groups = query_groups;
    m->untie_embeddings = true;
    m->disable_bias_linear = true;
}

int tk_main(int argc, char **argv, const tk_case *cases, int n_cases) {
    int ran = 0;
    for (int i = 0; i < n_cases; i++) {
        if (argc > 1 && strcmp(argv[1], cases[i].name) != 0) continue;
        cases[i].fn();
        ran++;
    }
    if (!ran) {
        fprintf(stderr, "no test named '%s'\n", argc > 1 ? argv[1] : "");
        return 2;
    }
    if (tk_failures) fprintf(stderr, "%d check(s) failed\n", tk_failures);
    return tk_failures ? 1 : 0;
}
