/* Ring reduce-scatter and all-reduce (sums) over MPI point-to-point messages.
 *
 * Why not MPI's own collectives: on one node, Open MPI 4.1.4's MPI_Reduce_scatter_block
 * took 55-75 ms to reduce-scatter 51 MB over 2 ranks, whichever of coll/tuned's four
 * algorithms was forced, while what must move (half the buffer each way) takes 10 ms:
 * MPI_Allgather of the same size. Its MPI_Allreduce of 51 MB took 37 ms; the ring below,
 * reduce-scatter then all-gather, 21 ms. (`test_comm_mpi bench` prints both side by side.)
 * The ring is bandwidth-optimal: per phase each rank sends and receives (p-1)/p of the
 * buffer, in p-1 steps, and adds what it receives in cache-sized chunks as it arrives.
 *
 * Block b (the output of group rank b) is summed in one fixed order, whatever the timing:
 * it starts at rank b+1, travels the ring adding each rank's own values, and ends at
 * rank b. So results repeat run to run, and an all-reduce gives every rank the same bits:
 * one rank sums each block; the others receive a copy.
 *
 * The messages go over a communicator of their own (the caller's duplicate of the group's),
 * so they cannot match a pipeline send or receive posted on the group's communicator.
 */
#include <stdlib.h>
#include <string.h>

#include "scheduler/comm_ring.h"

enum { CHUNK_BYTES = 256 << 10 }; /* received and added a piece at a time: stays in L2 */

static void add_into(mg_dtype dt, void *dst, const void *a, const void *b, int64_t n) {
    if (dt == MG_F32) {
        float *restrict d = dst;
        const float *restrict x = a, *restrict y = b;
        for (int64_t i = 0; i < n; i++) d[i] = x[i] + y[i];
    } else {
        int32_t *restrict d = dst;
        const int32_t *restrict x = a, *restrict y = b;
        /* wraps like MPI_SUM on MPI_INT32_T in practice, without signed-overflow UB */
        for (int64_t i = 0; i < n; i++) d[i] = (int32_t)((uint32_t)x[i] + (uint32_t)y[i]);
    }
}

static int64_t mini(int64_t a, int64_t b) { return a < b ? a : b; }

/* The reduce-scatter phase. Block b spans [off[b], off[b+1]) of `in`. Its running sum lives
 * at acc(b): out + off[b] when `full` (out is as long as in; an all-reduce), else out
 * itself (out holds one block; every block has the same length). At step s this rank
 * sends its running sum of block r-s-1 to the right and receives the left's of block
 * r-s-2, to which it adds its own values; after p-1 steps block r is complete. */
static int reduce_phase(MPI_Comm comm, MPI_Datatype type, mg_dtype dt, int p, int r, const char *in, char *out,
                        const int64_t *off, bool full, char *scratch) {
    size_t es = mg_dtype_size(dt);
    int64_t chunk = CHUNK_BYTES / (int64_t)es;
    int right = (r + 1) % p, left = (r + p - 1) % p;
    for (int s = 0; s < p - 1; s++) {
        int bs = ((r - s - 1) % p + p) % p, br = ((r - s - 2) % p + p) % p;
        int64_t ns = off[bs + 1] - off[bs], nr = off[br + 1] - off[br];
        const char *src = s == 0 ? in + off[bs] * es : full ? out + off[bs] * es : out;
        char *acc = full ? out + off[br] * es : out;
        const char *own = in + off[br] * es;
        int64_t n = ns > nr ? ns : nr;
        for (int64_t o = 0; o < n; o += chunk) {
            int64_t ms = o < ns ? mini(chunk, ns - o) : 0, mr = o < nr ? mini(chunk, nr - o) : 0;
            /* blocking: this piece of src has left before acc's same piece (the same
             * bytes when !full) is overwritten below */
            int rc = MPI_Sendrecv(src + o * es, (int)ms, type, right, 0, scratch, (int)mr, type, left, 0, comm,
                                  MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) return rc;
            add_into(dt, acc + o * es, scratch, own + o * es, mr);
        }
    }
    return MPI_SUCCESS;
}

/* The reduce-scatter phase, then for an all-reduce (`all`) the all-gather phase: pass the
 * finished blocks around the ring. count: per rank (reduce-scatter) or in all (all-reduce). */
static int ring_sum(MPI_Comm comm, MPI_Datatype type, mg_dtype dt, const void *in, void *out, int64_t count, bool all) {
    int p = 1, r = 0;
    MPI_Comm_size(comm, &p);
    MPI_Comm_rank(comm, &r);
    size_t es = mg_dtype_size(dt);
    if (p == 1) {
        if (out != in) memmove(out, in, (size_t)count * es);
        return MPI_SUCCESS;
    }
    int64_t *off = malloc((size_t)(p + 1) * sizeof *off);
    char *scratch = malloc(CHUNK_BYTES);
    int rc = MPI_ERR_NO_MEM;
    if (off && scratch) {
        /* all-reduce blocks differ by at most one element; reduce-scatter blocks are equal */
        for (int b = 0; b <= p; b++) off[b] = all ? count * b / p : (int64_t)b * count;
        rc = reduce_phase(comm, type, dt, p, r, in, out, off, all, scratch);
        int right = (r + 1) % p, left = (r + p - 1) % p;
        char *o = out;
        for (int s = 0; all && rc == MPI_SUCCESS && s < p - 1; s++) {
            int bs = ((r - s) % p + p) % p, br = ((r - s - 1) % p + p) % p;
            rc = MPI_Sendrecv(o + off[bs] * es, (int)(off[bs + 1] - off[bs]), type, right, 1, o + off[br] * es,
                              (int)(off[br + 1] - off[br]), type, left, 1, comm, MPI_STATUS_IGNORE);
        }
    }
    free(off);
    free(scratch);
    return rc;
}

int mg_ring_reduce_scatter(MPI_Comm comm, MPI_Datatype type, mg_dtype dt, const void *in, void *out, int64_t count) {
    return ring_sum(comm, type, dt, in, out, count, false);
}

int mg_ring_allreduce(MPI_Comm comm, MPI_Datatype type, mg_dtype dt, const void *in, void *out, int64_t count) {
    return ring_sum(comm, type, dt, in, out, count, true);
}
