/* Bounded waits (include/mgraph/watchdog.h): a table of the waits under way and a thread
 * that looks at it once a second. */
#include "mgraph/watchdog.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Waits under way at once: one per thread in a collective, plus the pipeline's posted
 * transfers (a stage has a few micro-batches in flight). */
enum { SLOTS = 256 };

typedef struct wait_slot {
    bool used;
    double t0;
    char what[64];
    mg_group grp;
    int peer;
    mg_mesh mesh;  /* (world 0: no mesh given) */
} wait_slot;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static wait_slot g_slot[SLOTS];
static int g_high;               /* slots [0, g_high) may be in use */
static bool g_running, g_stop, g_fired;
static double g_timeout;
static char g_flag[96];
static int g_rank;
static mg_watchdog_expired_fn g_fn;
static void *g_ctx;
static pthread_t g_thread;

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int mg_wait_begin(const char *what, const mg_mesh *mesh, mg_group grp, int peer) {
    double t = mono_s();
    pthread_mutex_lock(&g_mu);
    int k = -1;
    for (int i = 0; i < SLOTS && k < 0; i++)
        if (!g_slot[i].used) k = i;
    if (k >= 0) {
        wait_slot *s = &g_slot[k];
        s->used = true;
        s->t0 = t;
        snprintf(s->what, sizeof s->what, "%s", what ? what : "a wait");
        s->grp = grp;
        s->peer = peer;
        if (mesh) s->mesh = *mesh;
        else memset(&s->mesh, 0, sizeof s->mesh);
        if (k + 1 > g_high) g_high = k + 1;
    }
    pthread_mutex_unlock(&g_mu);
    return k;
}

void mg_wait_end(int token) {
    if (token < 0 || token >= SLOTS) return;
    pthread_mutex_lock(&g_mu);
    g_slot[token].used = false;
    while (g_high > 0 && !g_slot[g_high - 1].used) g_high--;
    pthread_mutex_unlock(&g_mu);
}

/* "world ranks 1, 5, 7" of the group's other members (or the one peer). */
static void peers_text(const wait_slot *s, char *buf, size_t len) {
    if (s->peer >= 0) {
        snprintf(buf, len, "world rank %d", s->peer);
        return;
    }
    const mg_mesh *m = &s->mesh;
    if (m->world <= 0 || s->grp < 0 || s->grp >= MG_GROUP_COUNT || m->size[s->grp] <= 1) {
        snprintf(buf, len, "the other ranks");
        return;
    }
    size_t k = (size_t)snprintf(buf, len, "world ranks");
    int n = m->size[s->grp], listed = 0;
    for (int i = 0; i < n && k < len; i++) {
        int r = mg_mesh_peer(m, s->grp, i);
        if (r == m->rank || r < 0) continue;
        if (listed == 16) {
            snprintf(buf + k, len - k, " and %d more", n - 1 - listed);
            return;
        }
        k += (size_t)snprintf(buf + k, len - k, "%s %d", listed ? "," : "", r);
        listed++;
    }
}

static void *watch(void *arg) {
    (void)arg;
    pthread_mutex_lock(&g_mu);
    while (!g_stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 1;
        pthread_cond_timedwait(&g_cv, &g_mu, &until);
        if (g_stop || g_fired) continue;
        double now = mono_s();
        int worst = -1;
        for (int i = 0; i < g_high; i++)
            if (g_slot[i].used && now - g_slot[i].t0 > g_timeout && (worst < 0 || g_slot[i].t0 < g_slot[worst].t0))
                worst = i;
        if (worst < 0) continue;
        g_fired = true;
        wait_slot s = g_slot[worst];
        mg_watchdog_expired_fn fn = g_fn;
        void *ctx = g_ctx;
        char peers[256], msg[768];
        peers_text(&s, peers, sizeof peers);
        const char *grp = s.grp >= 0 && s.grp < MG_GROUP_COUNT ? mg_group_name(s.grp) : "world";
        snprintf(msg, sizeof msg,
                 "rank %d: %s over %s has waited %.0f s for %s (%s): a rank is stopped, hung or far behind; "
                 "ending the job",
                 g_rank, s.what, grp, now - s.t0, peers, g_flag);
        pthread_mutex_unlock(&g_mu);
        fn(msg, ctx); /* (does not return, by contract; if it does, the watchdog stays quiet) */
        pthread_mutex_lock(&g_mu);
    }
    pthread_mutex_unlock(&g_mu);
    return NULL;
}

int mg_watchdog_start(double timeout_s, const char *flag, int rank, mg_watchdog_expired_fn on_expiry, void *ctx,
                      mg_error *err) {
    if (!(timeout_s > 0) || !on_expiry)
        return mg_error_set(err, MG_ERR_INVALID, "mg_watchdog_start: the timeout must be > 0 s with an expiry function");
    pthread_mutex_lock(&g_mu);
    g_timeout = timeout_s;
    snprintf(g_flag, sizeof g_flag, "%s", flag ? flag : "the distributed timeout");
    g_rank = rank;
    g_fn = on_expiry;
    g_ctx = ctx;
    g_stop = false;
    bool start = !g_running;
    pthread_mutex_unlock(&g_mu);
    if (start) {
        if (pthread_create(&g_thread, NULL, watch, NULL) != 0)
            return mg_error_set(err, MG_ERR_RUNTIME, "mg_watchdog_start: cannot start its thread");
        g_running = true;
    }
    return MG_OK;
}

void mg_watchdog_stop(void) {
    if (!g_running) return;
    pthread_mutex_lock(&g_mu);
    g_stop = true;
    pthread_cond_signal(&g_cv);
    pthread_mutex_unlock(&g_mu);
    pthread_join(g_thread, NULL);
    g_running = false;
}
