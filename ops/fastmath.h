/* Branch-free float exp and vectorisable double sums for kernels (library-internal).
 *
 * glibc's expf is a call per element, so loops around it never vectorise. mg_expf is
 * Cephes' expf (x = n ln2 + r with ln2 in two parts, degree-6 polynomial for e^r,
 * 2^n built in the exponent bits): plain arithmetic that GCC vectorises at -O3.
 * Relative error below 2e-7 on [-87, 88]; outside it the result is clamped to
 * e^-87 / e^88 (no zero or infinity), which is what the activations need: they only
 * divide by 1 + e^t. The clamp compares the floats through an order-preserving
 * integer key, because float min/max only vectorise under finite-math flags; a NaN
 * argument clamps to e^88 (callers still propagate the NaN through x). */
#ifndef MG_OPS_FASTMATH_H
#define MG_OPS_FASTMATH_H

#include <stdint.h>
#include <string.h>

/* Signed-integer key with the order of the floats (finite values). */
static inline int32_t mg_fkey(float x) {
    int32_t b;
    memcpy(&b, &x, sizeof b);
    return b >= 0 ? b : b ^ 0x7fffffff;
}

static inline float mg_funkey(int32_t k) {
    int32_t b = k >= 0 ? k : k ^ 0x7fffffff;
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

/* Largest of x[0..n) (n >= 1) through the keys: an integer max reduction vectorises, a
 * float one does not without -ffast-math. A NaN's key is above every finite key, so a
 * NaN in x gives a NaN maximum. */
static inline float mg_row_max(const float *x, int64_t n) {
    int32_t k = mg_fkey(x[0]);
    for (int64_t j = 1; j < n; j++) {
        int32_t kj = mg_fkey(x[j]);
        k = kj > k ? kj : k;
    }
    return mg_funkey(k);
}

/* Sums in double, as eight partial sums met in a fixed order (then the n % 8 tail): a
 * single running sum is a chain GCC may not reorder, so it stays scalar; these vectorise,
 * and the result does not depend on the vector width. */
#define MG_SUM8(expr_j)                                                                                   \
    double acc_[8] = {0}, tail_ = 0;                                                                      \
    int64_t j = 0;                                                                                        \
    for (; j + 8 <= n; j += 8)                                                                            \
        for (int l_ = 0; l_ < 8; l_++) {                                                                  \
            int64_t jl_ = j + l_;                                                                         \
            acc_[l_] += expr_j(jl_);                                                                      \
        }                                                                                                 \
    for (; j < n; j++) tail_ += expr_j(j);                                                                \
    return (((acc_[0] + acc_[1]) + (acc_[2] + acc_[3])) + ((acc_[4] + acc_[5]) + (acc_[6] + acc_[7]))) + tail_

/* sum of x[j] */
static inline double mg_sum_f(const float *x, int64_t n) {
#define MG_TERM_(j) (double)x[j]
    MG_SUM8(MG_TERM_);
#undef MG_TERM_
}

/* sum of x[j] y[j], each product exact in double */
static inline double mg_dot_f(const float *x, const float *y, int64_t n) {
#define MG_TERM_(j) (double)x[j] * (double)y[j]
    MG_SUM8(MG_TERM_);
#undef MG_TERM_
}

/* sum of (x[j] - mu)^2 */
static inline double mg_sumsq_dev(const float *x, int64_t n, double mu) {
#define MG_TERM_(j) ((double)x[j] - mu) * ((double)x[j] - mu)
    MG_SUM8(MG_TERM_);
#undef MG_TERM_
}

static inline float mg_expf(float x) {
    const int32_t klo = (int32_t)0xc2ae0000u ^ 0x7fffffff; /* key of -87.0f */
    const int32_t khi = 0x42b00000;                        /* key of 88.0f */
    int32_t k = mg_fkey(x);
    k = k < klo ? klo : k;
    k = k > khi ? khi : k;
    x = mg_funkey(k);
    const float magic = 12582912.0f;                       /* 1.5 * 2^23: round to nearest */
    float n = (x * 1.44269504088896341f + magic) - magic;  /* round(x / ln 2) */
    float r = x - n * 0.693359375f + n * 2.12194440e-4f;   /* x - n ln 2, in two parts */
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t e = ((int32_t)n + 127) << 23;
    float s;
    memcpy(&s, &e, sizeof s);
    return p * s;
}

#endif
