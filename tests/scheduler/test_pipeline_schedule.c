/* Pipeline schedules (scheduler/pipeline_schedule.c): Megatron's orders, their
 * in-flight bounds, and the bubble they leave.
 *
 *  - every (micro-batch, chunk, forward | backward) appears exactly once, each
 *    backward after its forward;
 *  - 1F1B: stage r warms up with min(P - r - 1, m) forwards and keeps min(P - r, m)
 *    micro-batches in flight (GPipe: m);
 *  - interleaved: the order of Megatron's schedule for P 2, V 2, m 4, written out by
 *    hand from schedules.py (warm-up (P - r - 1) x 2 + (V - 1) x P; chunk and
 *    micro-batch of the k-th step), and refused unless m is a multiple of P;
 *  - executed stage by stage in order, each event waiting for the event before it on
 *    the previous (forward) or next (backward) virtual stage, every schedule finishes
 *    (no stage waits on itself) and leaves the bubble of Narayanan et al. 2021:
 *    (P - 1) / m for 1F1B and GPipe, (P - 1) / (V m) interleaved.
 */
#include <stdlib.h>
#include <string.h>

#include "mgraph/pipeline.h"
#include "testkit.h"

static mg_pp_event *order(mg_pp_schedule_kind k, int P, int V, int r, int m) {
    mg_pp_event *ev = calloc(2 * (size_t)m * V, sizeof *ev);
    mg_error err = {0};
    if (mg_pp_schedule(k, P, V, r, m, ev, &err)) {
        TK_CHECK(0, "schedule P %d V %d r %d m %d: %s", P, V, r, m, err.msg);
        free(ev);
        return NULL;
    }
    return ev;
}

/* each event once, backward after forward */
static void check_complete(const mg_pp_event *ev, int V, int m) {
    int *seen = calloc(2 * (size_t)m * V, sizeof *seen);
    for (int i = 0; i < 2 * m * V; i++) {
        const mg_pp_event *e = &ev[i];
        TK_CHECK(e->mb >= 0 && e->mb < m && e->chunk >= 0 && e->chunk < V, "event %d out of range", i);
        int k = (e->mb * V + e->chunk) * 2 + e->backward;
        TK_CHECK(seen[k]++ == 0, "event (mb %d, chunk %d, %s) twice", e->mb, e->chunk, e->backward ? "B" : "F");
        if (e->backward) TK_CHECK(seen[k - 1] == 1, "backward of (mb %d, chunk %d) before its forward", e->mb, e->chunk);
    }
    free(seen);
}

static void test_1f1b(void) {
    for (int P = 1; P <= 4; P++)
        for (int m = 1; m <= 9; m += 2)
            for (int r = 0; r < P; r++) {
                mg_pp_event *ev = order(MG_PP_SCHEDULE_1F1B, P, 1, r, m);
                if (!ev) continue;
                check_complete(ev, 1, m);
                int w = P - r - 1 < m ? P - r - 1 : m, lead = 0;
                while (lead < 2 * m && !ev[lead].backward) lead++;
                /* warm-up forwards, then the steady state's forward before its first backward */
                TK_CHECK(lead == (w < m ? w + 1 : m), "P %d r %d m %d: %d forwards before the first backward, want %d", P,
                         r, m, lead, w < m ? w + 1 : m);
                int want = P - r < m ? P - r : m;
                TK_CHECK(mg_pp_in_flight(ev, 2 * m, 1) == want, "P %d r %d m %d: %d in flight, want %d", P, r, m,
                         mg_pp_in_flight(ev, 2 * m, 1), want);
                free(ev);
            }
    mg_pp_event *g = order(MG_PP_SCHEDULE_GPIPE, 4, 1, 0, 8);
    if (g) TK_CHECK(mg_pp_in_flight(g, 16, 1) == 8, "GPipe keeps every micro-batch in flight");
    free(g);
}

static void test_interleaved(void) {
    /* P 2, V 2, m 4: "F/B mb chunk" */
    static const char *want[2] = {"F00 F10 F01 F11 F20 B01 F30 B11 F21 B00 F31 B10 B21 B31 B20 B30",
                                  "F00 F10 F01 B01 F11 B11 F20 B00 F30 B10 F21 B21 F31 B31 B20 B30"};
    for (int r = 0; r < 2; r++) {
        mg_pp_event *ev = order(MG_PP_SCHEDULE_AUTO, 2, 2, r, 4);
        if (!ev) continue;
        check_complete(ev, 2, 4);
        char got[128] = "";
        for (int i = 0; i < 16; i++) {
            char e[8];
            snprintf(e, sizeof e, "%s%c%d%d", i ? " " : "", ev[i].backward ? 'B' : 'F', ev[i].mb, ev[i].chunk);
            strcat(got, e);
        }
        TK_CHECK(!strcmp(got, want[r]), "rank %d: %s\n  want %s", r, got, want[r]);
        free(ev);
    }
    mg_pp_event ev[64];
    mg_error err = {0};
    TK_CHECK(mg_pp_schedule(MG_PP_SCHEDULE_INTERLEAVED, 2, 2, 0, 3, ev, &err) == MG_ERR_INVALID,
             "interleaving 3 micro-batches over 2 stages is refused");
    TK_CHECK(strstr(err.msg, "multiple"), "message: %s", err.msg);
    TK_CHECK(mg_pp_schedule(MG_PP_SCHEDULE_1F1B, 2, 2, 0, 4, ev, &err) == MG_ERR_INVALID, "1F1B with chunks refused");
}

/* Runs every stage's order with forward time 1 / V and backward 2 / V per event;
 * returns the bubble (idle fraction of a stage over the step), -1 on a deadlock. */
static double simulate(mg_pp_schedule_kind k, int P, int V, int m) {
    int n = 2 * m * V;
    mg_pp_event **ev = calloc((size_t)P, sizeof *ev);
    double *done_f = calloc((size_t)m * P * V, sizeof *done_f), *done_b = calloc((size_t)m * P * V, sizeof *done_b);
    int *next = calloc((size_t)P, sizeof *next);
    double *free_at = calloc((size_t)P, sizeof *free_at), end = 0;
    for (int i = 0; i < m * P * V; i++) done_f[i] = done_b[i] = -1;
    for (int r = 0; r < P; r++) ev[r] = order(k, P, V, r, m);
    int left = n * P;
    while (left > 0) {
        int progressed = 0;
        for (int r = 0; r < P; r++) {
            if (!ev[r] || next[r] == n) continue;
            const mg_pp_event *e = &ev[r][next[r]];
            int v = e->chunk * P + r;
            double ready = free_at[r];
            if (!e->backward && v > 0) {
                double d = done_f[e->mb * P * V + v - 1];
                if (d < 0) continue;
                if (d > ready) ready = d;
            }
            if (e->backward && v < P * V - 1) {
                double d = done_b[e->mb * P * V + v + 1];
                if (d < 0) continue;
                if (d > ready) ready = d;
            }
            double t = ready + (e->backward ? 2.0 : 1.0) / V;
            (e->backward ? done_b : done_f)[e->mb * P * V + v] = t;
            free_at[r] = t;
            if (t > end) end = t;
            next[r]++;
            left--;
            progressed++;
        }
        if (!progressed) break;
    }
    for (int r = 0; r < P; r++) free(ev[r]);
    free(ev);
    free(done_f);
    free(done_b);
    free(next);
    free(free_at);
    if (left > 0) return -1;
    double work = 3.0 * m; /* per stage */
    return (end - work) / work;
}

static void test_bubble(void) {
    static const struct { mg_pp_schedule_kind k; int P, V, m; } cases[] = {
        {MG_PP_SCHEDULE_1F1B, 2, 1, 2},        {MG_PP_SCHEDULE_1F1B, 2, 1, 8},   {MG_PP_SCHEDULE_1F1B, 4, 1, 4},
        {MG_PP_SCHEDULE_1F1B, 4, 1, 16},       {MG_PP_SCHEDULE_GPIPE, 4, 1, 8},  {MG_PP_SCHEDULE_INTERLEAVED, 2, 2, 4},
        {MG_PP_SCHEDULE_INTERLEAVED, 4, 2, 8}, {MG_PP_SCHEDULE_INTERLEAVED, 4, 4, 16}, {MG_PP_SCHEDULE_GPIPE, 2, 2, 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int P = cases[i].P, V = cases[i].V, m = cases[i].m;
        double b = simulate(cases[i].k, P, V, m), want = (double)(P - 1) / ((cases[i].k == MG_PP_SCHEDULE_INTERLEAVED ? V : 1) * m);
        printf("%-11s P %d V %d m %2d: bubble %.4f, (P-1)/%sm = %.4f\n", mg_pp_schedule_name(cases[i].k), P, V, m, b,
               cases[i].k == MG_PP_SCHEDULE_INTERLEAVED ? "V" : "", want);
        TK_CHECK(b >= 0, "%s P %d V %d m %d deadlocks", mg_pp_schedule_name(cases[i].k), P, V, m);
        TK_CHECK(b >= 0 && b <= want + 1e-9, "%s P %d V %d m %d: bubble %.4f above %.4f",
                 mg_pp_schedule_name(cases[i].k), P, V, m, b, want);
    }
}

int main(int argc, char **argv) {
    static const tk_case cases[] = {{"1f1b", test_1f1b}, {"interleaved", test_interleaved}, {"bubble", test_bubble}};
    return tk_main(argc, argv, cases, (int)(sizeof cases / sizeof cases[0]));
}
