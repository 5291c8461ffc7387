/* See blas_threads.h: one OpenBLAS thread while any executor runs kernels. */
#include "blas_threads.h"

#include <pthread.h>

/* OpenBLAS's own API (cblas.h declares them only in some packagings). */
void openblas_set_num_threads(int);
int openblas_get_num_threads(void);

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_holders;
static int g_saved = 1;

void mg_blas_single_acquire(void) {
    pthread_mutex_lock(&g_lock);
    if (g_holders++ == 0) {
        g_saved = openblas_get_num_threads();
        if (g_saved != 1) openblas_set_num_threads(1);
    }
    pthread_mutex_unlock(&g_lock);
}

void mg_blas_single_release(void) {
    pthread_mutex_lock(&g_lock);
    if (g_holders > 0 && --g_holders == 0 && g_saved != 1) openblas_set_num_threads(g_saved > 0 ? g_saved : 1);
    pthread_mutex_unlock(&g_lock);
}
