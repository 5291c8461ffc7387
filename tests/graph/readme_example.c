/* The README's example, compiled and run by ctest (graph.readme_example). */
#include <stdio.h>
#include <mgraph/mgraph.h>

int main(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "x", MG_F32, 2, (int64_t[]){32, 64});
    mg_tensor *y = mg_input(g, "y", MG_F32, 2, (int64_t[]){32, 10});
    mg_scope_push(g, "mlp");
    mg_tensor *w1 = mg_param(g, "fc1.weight", 2, (int64_t[]){128, 64}, (mg_init){MG_INIT_NORMAL, 0.02f});
    mg_tensor *w2 = mg_param(g, "fc2.weight", 2, (int64_t[]){10, 128}, (mg_init){MG_INIT_NORMAL, 0.02f});
    mg_tensor *h = mg_gelu(g, mg_linear(g, x, w1, NULL));
    mg_tensor *d = mg_sub(g, mg_linear(g, h, w2, NULL), y);
    mg_scope_pop(g);
    mg_tensor *loss = mg_mean(g, mg_mul(g, d, d), MG_ALL_AXES, false);
    mg_adamw_config opt = mg_adamw_defaults();
    mg_error err = {0};
    if (mg_graph_error(g)->code || mg_graph_backward(g, loss, &err) || mg_graph_add_adamw(g, &opt, NULL, &err) ||
        mg_graph_dump_dot_file(g, "mlp.dot", NULL, &err)) {
        fprintf(stderr, "%s%s\n", mg_graph_error(g)->msg, err.msg);
        return 1;
    }
    printf("%d nodes, gradient of w1: %s; graph in mlp.dot\n", mg_graph_n_nodes(g), w1->grad->name);
    mg_graph_free(g);
    return 0;
}
