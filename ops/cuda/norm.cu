/* layernorm / rmsnorm over the last dimension and their fused backward ops, as in
 * ops/norm.c: row statistics in double, one block per row; the parameter gradients
 * (dw, db) are column sums over rows, done in fixed-size row chunks (partial sums in
 * scratch, then summed in chunk order), so they are deterministic. */
#include "ops/cuda/cuda_common.h"

#define NT 256
#define ROW_CHUNK 256 /* rows per partial column sum */

__global__ void k_layernorm(const float *__restrict__ x, const float *__restrict__ w, const float *__restrict__ b,
                            float *y, float *mean, float *rstd, int64_t N, double eps) {
    __shared__ double sh[32];
    const float *xr = x + blockIdx.x * N;
    float *yr = y + blockIdx.x * N;
    double s = 0;
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) s += xr[j];
    double mu = mg_block_sum(s, sh) / (double)N, v = 0;
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) {
        double d = (double)xr[j] - mu;
        v += d * d;
    }
    v = mg_block_sum(v, sh);
    float m = (float)mu, rf = (float)(1.0 / sqrt(v / (double)N + eps));
    if (threadIdx.x == 0) {
        mean[blockIdx.x] = m;
        rstd[blockIdx.x] = rf;
    }
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) yr[j] = (xr[j] - m) * rf * w[j] + (b ? b[j] : 0.0f);
}

__global__ void k_rmsnorm(const float *__restrict__ x, const float *__restrict__ w, float *y, float *rstd, int64_t N,
                          double eps) {
    __shared__ double sh[32];
    const float *xr = x + blockIdx.x * N;
    float *yr = y + blockIdx.x * N;
    double s = 0;
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) s += (double)xr[j] * xr[j];
    s = mg_block_sum(s, sh);
    float rs = (float)(1.0 / sqrt(s / (double)N + eps));
    if (threadIdx.x == 0) rstd[blockIdx.x] = rs;
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) yr[j] = xr[j] * rs * w[j];
}

/* dx of one row per block. mean == NULL: rmsnorm. */
__global__ void k_norm_dx(const float *__restrict__ dy, const float *__restrict__ x, const float *__restrict__ w,
                          const float *__restrict__ mean, const float *__restrict__ rstd, float *dx, int64_t N) {
    __shared__ double sh[32];
    int64_t r = blockIdx.x;
    const float *xr = x + r * N, *dyr = dy + r * N;
    float *dxr = dx + r * N;
    float m = mean ? mean[r] : 0.0f, rs = rstd[r];
    double sg = 0, sgx = 0;
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) {
        float xhat = (xr[j] - m) * rs, g = dyr[j] * w[j];
        sg += g;
        sgx += (double)g * xhat;
    }
    sgx = mg_block_sum(sgx, sh);
    float mgx = (float)(sgx / (double)N), mg = 0.0f;
    if (mean) mg = (float)(mg_block_sum(sg, sh) / (double)N);
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) {
        float xhat = (xr[j] - m) * rs;
        dxr[j] = rs * (dyr[j] * w[j] - mg - xhat * mgx);
    }
}

/* Partial column sums of dy * xhat (and dy) over ROW_CHUNK rows: part[c][j]. */
__global__ void k_norm_dwdb_part(const float *__restrict__ dy, const float *__restrict__ x,
                                 const float *__restrict__ mean, const float *__restrict__ rstd, double *pw, double *pb,
                                 int64_t rows, int64_t N) {
    int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, c = blockIdx.y;
    if (j >= N) return;
    int64_t r0 = c * ROW_CHUNK, r1 = min(rows, r0 + ROW_CHUNK);
    double aw = 0, ab = 0;
    for (int64_t r = r0; r < r1; r++) {
        float d = dy[r * N + j], xhat = (x[r * N + j] - (mean ? mean[r] : 0.0f)) * rstd[r];
        aw += (double)d * xhat;
        ab += d;
    }
    pw[c * N + j] = aw;
    if (pb) pb[c * N + j] = ab;
}

__global__ void k_norm_dwdb_final(const double *__restrict__ pw, const double *__restrict__ pb, float *dw, float *db,
                                  int64_t chunks, int64_t N) {
    MG_GRID_STRIDE(j, N) {
        double aw = 0, ab = 0;
        for (int64_t c = 0; c < chunks; c++) {
            aw += pw[c * N + j];
            if (pb) ab += pb[c * N + j];
        }
        dw[j] = (float)aw;
        if (db) db[j] = (float)ab;
    }
}

static int dwdb(const float *dy, const float *x, const float *mean, const float *rstd, float *dw, float *db,
                int64_t rows, int64_t N, const char *what, mg_error *err) {
    int64_t chunks = (rows + ROW_CHUNK - 1) / ROW_CHUNK;
    if (chunks == 0) chunks = 1;
    if (chunks > 65535) return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: %lld rows is too many", what, (long long)rows);
    double *part;
    size_t one = (size_t)(chunks * N) * sizeof(double);
    int rc = mg_cuda_scratch((void **)&part, db ? 2 * one : one, what, err);
    if (rc) return rc;
    double *pw = part, *pb = db ? part + chunks * N : NULL;
    if (rows == 0) {
        cudaMemsetAsync(part, 0, db ? 2 * one : one, mg_cuda_stream());
    } else {
        dim3 grid((unsigned)((N + NT - 1) / NT), (unsigned)chunks);
        k_norm_dwdb_part<<<grid, NT, 0, mg_cuda_stream()>>>(dy, x, mean, rstd, pw, pb, rows, N);
    }
    k_norm_dwdb_final<<<mg_cuda_blocks(N, NT), NT, 0, mg_cuda_stream()>>>(pw, pb, dw, db, rows ? chunks : 1, N);
    mg_cuda_scratch_free(part);
    return mg_cuda_check_launch(what, err);
}

extern "C" int mg_cuda_layernorm(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    const mg_tensor *xt = n->in[0];
    int64_t N = xt->shape[xt->ndim - 1], rows = mg_numel(xt) / N;
    if (rows == 0) return MG_OK;
    if (rows > INT32_MAX) return mg_error_set(err, MG_ERR_UNSUPPORTED, "layernorm: too many rows");
    k_layernorm<<<(unsigned)rows, NT, 0, mg_cuda_stream()>>>(
        (const float *)a->in[0], (const float *)a->in[1], n->n_in > 2 ? (const float *)a->in[2] : NULL,
        (float *)a->out[0], (float *)a->out[1], (float *)a->out[2], N, (double)n->attrs.norm.eps);
    return mg_cuda_check_launch("layernorm", err);
}

extern "C" int mg_cuda_layernorm_bwd(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    const mg_tensor *xt = n->in[1];
    int64_t N = xt->shape[xt->ndim - 1], rows = mg_numel(xt) / N;
    const float *dy = (const float *)a->in[0], *x = (const float *)a->in[1], *w = (const float *)a->in[2];
    const float *mean = (const float *)a->in[3], *rstd = (const float *)a->in[4];
    if (rows > INT32_MAX) return mg_error_set(err, MG_ERR_UNSUPPORTED, "layernorm_bwd: too many rows");
    if (rows) k_norm_dx<<<(unsigned)rows, NT, 0, mg_cuda_stream()>>>(dy, x, w, mean, rstd, (float *)a->out[0], N);
    int rc = mg_cuda_check_launch("layernorm_bwd", err);
    return rc ? rc : dwdb(dy, x, mean, rstd, (float *)a->out[1], (float *)a->out[2], rows, N, "layernorm_bwd", err);
}

extern "C" int mg_cuda_rmsnorm(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    const mg_tensor *xt = n->in[0];
    int64_t N = xt->shape[xt->ndim - 1], rows = mg_numel(xt) / N;
    if (rows == 0) return MG_OK;
    if (rows > INT32_MAX) return mg_error_set(err, MG_ERR_UNSUPPORTED, "rmsnorm: too many rows");
    k_rmsnorm<<<(unsigned)rows, NT, 0, mg_cuda_stream()>>>((const float *)a->in[0], (const float *)a->in[1],
                                                          (float *)a->out[0], (float *)a->out[1], N,
                                                          (double)n->attrs.norm.eps);
    return mg_cuda_check_launch("rmsnorm", err);
}

extern "C" int mg_cuda_rmsnorm_bwd(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    const mg_tensor *xt = n->in[1];
    int64_t N = xt->shape[xt->ndim - 1], rows = mg_numel(xt) / N;
    const float *dy = (const float *)a->in[0], *x = (const float *)a->in[1], *w = (const float *)a->in[2];
    const float *rstd = (const float *)a->in[3];
    if (rows > INT32_MAX) return mg_error_set(err, MG_ERR_UNSUPPORTED, "rmsnorm_bwd: too many rows");
    if (rows) k_norm_dx<<<(unsigned)rows, NT, 0, mg_cuda_stream()>>>(dy, x, w, NULL, rstd, (float *)a->out[0], N);
    int rc = mg_cuda_check_launch("rmsnorm_bwd", err);
    return rc ? rc : dwdb(dy, x, NULL, rstd, (float *)a->out[1], NULL, rows, N, "rmsnorm_bwd", err);
}
