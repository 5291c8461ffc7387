/* The NCCL collectives (scheduler/comm_nccl.c) on device buffers under mpirun: every
 * rank fills buffers from its rank, runs allreduce (sum, max), allgather,
 * reduce_scatter and broadcast over the world group through mg_comm_*_dev, and
 * compares with values computed on the host from every rank's inputs. One rank per
 * GPU (node-local rank modulo the devices); with one rank the calls still go through
 * NCCL (a one-rank communicator), which is what a one-GPU machine can check.
 * Exits 77 (skipped) where the ranks outnumber the GPUs or there is none.
 *
 *   mpirun -np N test_cuda_nccl
 */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/comm.h"
#include "ops/cuda/cuda_common.h"
#include "ops/comm_api.h"
#include "testkit.h"

#define COUNT 1000

static float val(int rank, int64_t i) { return (float)((rank * 37 + i * 11) % 101 - 50) * 0.25f; }

static void check_dev(const char *what, const float *dev, const float *want, int64_t n) {
    float *got = malloc((size_t)n * sizeof *got);
    TK_CHECK(cudaMemcpy(got, dev, (size_t)n * sizeof *got, cudaMemcpyDeviceToHost) == cudaSuccess, "%s: D2H", what);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += got[i] != want[i]; /* sums of quarters: exact */
    TK_CHECK(bad == 0, "%s: %lld of %lld elements differ", what, (long long)bad, (long long)n);
    free(got);
}

int main(int argc, char **argv) {
    int level = 0, rank = 0, world = 1;
    if (mg_cuda_device_count() == 0) { /* before MPI: nothing of it to tear down */
        printf("SKIP cuda.nccl: %s\n", mg_cuda_status());
        return 77;
    }
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &level);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    int ndev = mg_cuda_device_count(), enough = ndev >= world, all = 0;
    MPI_Allreduce(&enough, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) {
        if (rank == 0) printf("SKIP cuda.nccl: %d ranks, %d CUDA devices here%s%s\n", world, ndev, ndev ? "" : "; ",
                              mg_cuda_status());
        MPI_Finalize();
        return 77;
    }
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    cudaSetDevice((lr ? atoi(lr) : rank) % ndev);

    mg_error err = {0};
    mg_mesh mesh;
    mg_comm *c = NULL;
    if (mg_mesh_init(&mesh, world, rank, world, 1, 1, 1, &err) || mg_comm_new(&mesh, &c, &err)) {
        fprintf(stderr, "rank %d: %s\n", rank, err.msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    cudaStream_t st;
    cudaStreamCreate(&st);
    size_t big = (size_t)COUNT * (size_t)world;
    float *x, *y, *host = malloc(big * sizeof *host), *want = malloc(big * sizeof *want);
    cudaMalloc((void **)&x, big * sizeof *x);
    cudaMalloc((void **)&y, big * sizeof *y);

    /* allreduce sum and max */
    for (int64_t i = 0; i < COUNT; i++) host[i] = val(rank, i);
    cudaMemcpy(x, host, COUNT * sizeof *x, cudaMemcpyHostToDevice);
    TK_CHECK(!mg_comm_allreduce_dev(c, MG_GROUP_TP, MG_F32, x, y, COUNT, MG_REDUCE_SUM, st, &err), "%s", err.msg);
    cudaStreamSynchronize(st);
    for (int64_t i = 0; i < COUNT; i++) {
        want[i] = 0;
        for (int r = 0; r < world; r++) want[i] += val(r, i);
    }
    check_dev("allreduce sum", y, want, COUNT);
    TK_CHECK(!mg_comm_allreduce_dev(c, MG_GROUP_TP, MG_F32, x, x, COUNT, MG_REDUCE_MAX, st, &err), "%s", err.msg);
    cudaStreamSynchronize(st);
    for (int64_t i = 0; i < COUNT; i++) {
        want[i] = val(0, i);
        for (int r = 1; r < world; r++) want[i] = val(r, i) > want[i] ? val(r, i) : want[i];
    }
    check_dev("allreduce max (in place)", x, want, COUNT);

    /* allgather: member r's block at r */
    for (int64_t i = 0; i < COUNT; i++) host[i] = val(rank, i);
    cudaMemcpy(x, host, COUNT * sizeof *x, cudaMemcpyHostToDevice);
    TK_CHECK(!mg_comm_allgather_dev(c, MG_GROUP_TP, MG_F32, x, y, COUNT, st, &err), "%s", err.msg);
    cudaStreamSynchronize(st);
    for (int r = 0; r < world; r++)
        for (int64_t i = 0; i < COUNT; i++) want[r * COUNT + i] = val(r, i);
    check_dev("allgather", y, want, (int64_t)big);

    /* reduce_scatter: block `rank` of the sum of every member's [world * COUNT] input */
    for (size_t i = 0; i < big; i++) host[i] = val(rank, (int64_t)i);
    cudaMemcpy(x, host, big * sizeof *x, cudaMemcpyHostToDevice);
    TK_CHECK(!mg_comm_reduce_scatter_dev(c, MG_GROUP_TP, MG_F32, x, y, COUNT, st, &err), "%s", err.msg);
    cudaStreamSynchronize(st);
    for (int64_t i = 0; i < COUNT; i++) {
        want[i] = 0;
        for (int r = 0; r < world; r++) want[i] += val(r, (int64_t)rank * COUNT + i);
    }
    check_dev("reduce_scatter", y, want, COUNT);

    /* broadcast from the last member */
    for (int64_t i = 0; i < COUNT; i++) host[i] = val(rank, i);
    cudaMemcpy(x, host, COUNT * sizeof *x, cudaMemcpyHostToDevice);
    TK_CHECK(!mg_comm_broadcast_dev(c, MG_GROUP_TP, MG_F32, x, COUNT, world - 1, st, &err), "%s", err.msg);
    cudaStreamSynchronize(st);
    for (int64_t i = 0; i < COUNT; i++) want[i] = val(world - 1, i);
    check_dev("broadcast", x, want, COUNT);

    cudaFree(x);
    cudaFree(y);
    cudaStreamDestroy(st);
    free(host);
    free(want);
    mg_comm_free(c);
    int fails = tk_failures, any = 0;
    MPI_Allreduce(&fails, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0 && !any) printf("cuda.nccl: %d ranks, allreduce/allgather/reduce_scatter/broadcast match\n", world);
    MPI_Finalize();
    return any ? 1 : 0;
}
