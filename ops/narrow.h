/* The roundings to narrow float storage, one definition for the CPU (ops/convert.c) and
 * the CUDA kernels (ops/cuda/convert.cu): integer code on the f32 bit pattern, so both
 * give the same bits by construction (library-internal; ops/convert.h says what each
 * format is). */
#ifndef MG_OPS_NARROW_H
#define MG_OPS_NARROW_H

#include <stdint.h>

#ifdef __CUDACC__
#define MG_HD __host__ __device__ static inline
#else
#define MG_HD static inline
#endif

/* A narrow IEEE-like format: m mantissa bits, e exponent bits, bias, the code of the
 * largest finite value, NaN and inf codes (sat: overflow gives the largest finite value,
 * else inf), whether its all-ones exponent holds infinities and NaNs (IEEE) or values
 * (E4M3: only S.1111.111 is NaN). */
typedef struct mg_narrow {
    int m, e, bias;
    uint32_t max_code, nan, inf;
    int sat, ieee;
} mg_narrow;

#define MG_NARROW_F16 {10, 5, 15, 0x7bffu, 0x7e00u, 0x7c00u, 0, 1}
#define MG_NARROW_E4M3 {3, 4, 7, 0x7eu, 0x7fu, 0x7eu, 1, 0}
#define MG_NARROW_E5M2 {2, 5, 15, 0x7bu, 0x7eu, 0x7cu, 1, 1}

/* f32 bits -> bf16, to nearest even; NaN stays a (quiet) NaN; overflow gives inf. */
MG_HD uint16_t mg_narrow_bf16(uint32_t u) {
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* f32 bits -> the format's code, to nearest even. */
MG_HD uint32_t mg_narrow_round(uint32_t u, const mg_narrow *F) {
    int bits = 1 + F->e + F->m;
    uint32_t s = (u >> 31) << (bits - 1), a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return s | F->nan;
    int ef = (int)(a >> 23), emin = 1 - F->bias;
    int e = ef ? ef - 127 : -126;                                 /* unbiased exponent (f32 subnormals: -126) */
    uint32_t mant = ef ? (a & 0x7fffffu) | 0x800000u : a & 0x7fffffu; /* 24-bit significand, x = mant 2^(e - 23) */
    if (a == 0x7f800000u) return s | (F->sat ? F->max_code : F->inf);
    int shift = e >= emin ? 23 - F->m : 23 - F->m + (emin - e);  /* bits of mant below the format's last place */
    uint32_t q = 0;
    if (shift < 32) {
        uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
        q = mant >> shift;
        if (rem > half || (rem == half && (q & 1u))) q++;
    }
    /* q counts the format's last places: 2^(e - m) for normals, 2^(emin - m) for subnormals */
    uint32_t code;
    if (e >= emin) {
        int be = e + F->bias;             /* biased exponent of the normal */
        if (q >> (F->m + 1)) {            /* rounding carried into the next binade */
            q >>= 1;
            be++;
        }
        code = (uint32_t)be << F->m | (q & ((1u << F->m) - 1u));
    } else {
        code = q; /* 2^m: the smallest normal, which the encoding gives by itself */
    }
    uint32_t top = F->ieee ? ((1u << F->e) - 1u) << F->m : F->max_code + 1u; /* first code past the finite values */
    if (code >= top) return s | (F->sat ? F->max_code : F->inf);
    return s | code;
}

/* The format's code -> f32 bits (exact). */
MG_HD uint32_t mg_narrow_widen(uint32_t code, const mg_narrow *F) {
    int bits = 1 + F->e + F->m;
    uint32_t sign = (code >> (bits - 1)) << 31, mag = code & ((1u << (bits - 1)) - 1u);
    uint32_t ef = mag >> F->m, mant = mag & ((1u << F->m) - 1u), emax = (1u << F->e) - 1u;
    if (F->ieee ? ef == emax : mag == ((1u << (bits - 1)) - 1u)) /* inf / NaN; E4M3's one NaN */
        return sign | 0x7f800000u | (F->ieee && !mant ? 0u : 0x400000u);
    if (ef == 0) {
        if (!mant) return sign;
        /* a subnormal: normalise into f32 (always a normal there) */
        int e = 1 - F->bias;
        while (!(mant >> F->m)) {
            mant <<= 1;
            e--;
        }
        return sign | (uint32_t)(e + 127) << 23 | (mant & ((1u << F->m) - 1u)) << (23 - F->m);
    }
    return sign | (ef - (uint32_t)F->bias + 127u) << 23 | mant << (23 - F->m);
}

#endif
