/* Conversions between f32 and the narrow float storage types (library-internal).
 *
 * One definition of every rounding, used by the storage wrapper around kernels
 * (ops/registry.c), the cast op, storage initialisation, checkpoints and the fp8 GEMM:
 *   bf16  round to nearest even; overflow gives inf (bf16 has f32's range); NaN stays NaN.
 *   f16   IEEE binary16, round to nearest even; |x| >= 65520 gives inf (what the loss
 *         scaler looks for); below 2^-24 / 2 gives (signed) zero; subnormals kept.
 *   e4m3  OCP FP8 E4M3 (Transformer Engine's "e4m3", PyTorch's float8_e4m3fn): bias 7,
 *         no infinities, max 448; round to nearest even, saturating to +-448 (Transformer
 *         Engine casts with saturation); NaN 0x7f.
 *   e5m2  OCP FP8 E5M2: bias 15, max 57344, round to nearest even, saturating to +-57344;
 *         NaN 0x7e.
 * Widening (to f32) is exact for all of them. */
#ifndef MG_OPS_CONVERT_H
#define MG_OPS_CONVERT_H

#include <stddef.h>
#include <stdint.h>

#include "mgraph/graph.h"

uint16_t mg_f16_round(float f);
float mg_f16_to_float(uint16_t h);
uint8_t mg_f8_round(float f, mg_dtype fmt); /* fmt: MG_F8E4M3 or MG_F8E5M2 */
float mg_f8_to_float(uint8_t v, mg_dtype fmt);
/* The largest finite value of a narrow format (f32: FLT_MAX). */
float mg_dtype_max(mg_dtype dt);

/* dst[i] = src[i] converted, for i < n; either side may be f32 or a narrow float (not
 * i32). dst and src may be the same buffer only when both dtypes have the same size. */
void mg_convert(void *dst, mg_dtype dst_dt, const void *src, mg_dtype src_dt, int64_t n);
/* The value x has once stored as dt (x itself for f32). */
float mg_round_to(float x, mg_dtype dt);

#endif
