/* Fused element-wise layers of the Llama family on the CPU: RMSNorm (optionally after the
 * residual add), SiLU(gate) * up, and rotary embedding in place.
 *
 * Each replaces a chain of torch ops that each make a pass over memory and allocate their
 * result. Rounding follows the torch chain it replaces (Hugging Face's order): every value a
 * torch op would store in the model dtype is rounded to that dtype here at the same point
 * (bfloat16: round to nearest even); sums of squares and the SiLU are computed in float32.
 * Results may differ from torch's in the last float32 bits (summation order, exp), and a row's
 * result never depends on the other rows of the call (batch composition does not change outputs).
 *
 * The functions are written once, in fused_ops_body.h, and instantiated here for float32 and
 * bfloat16 through per-dtype loads, stores and roundings. All are row-parallel with OpenMP over
 * `threads`; tensors are row-major with a contiguous last dimension, row strides in elements.
 */

#include <math.h>
#include <stdint.h>
#include <string.h>

/* a * b - c * d must round both products as torch does: no contraction into fused multiply-adds
 * (the explicit _mm512_fmadd_ps are meant) */
#pragma GCC optimize("fp-contract=off")

#define INLINE static inline __attribute__((always_inline))
/* below this many elements a call runs on one thread: a parallel region costs microseconds */
#define PARALLEL_MIN_ELEMENTS 32768

INLINE int threads_for(int64_t elements, int threads) {
    return elements < PARALLEL_MIN_ELEMENTS || threads < 1 ? 1 : threads;
}

/* ------------------------------------------- per dtype: scalar load, store, round */

INLINE float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

INLINE uint16_t f32_to_bf16(float f) {  /* round to nearest even; NaN stays a quiet NaN */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

INLINE float ld1_f32(const float *p) { return *p; }
INLINE void st1_f32(float *p, float v) { *p = v; }
INLINE float rd1_f32(float v) { return v; }
INLINE float ld1_bf16(const uint16_t *p) { return bf16_to_f32(*p); }
INLINE void st1_bf16(uint16_t *p, float v) { *p = f32_to_bf16(v); }
INLINE float rd1_bf16(float v) { return bf16_to_f32(f32_to_bf16(v)); }

/* ------------------------------------- per dtype: 16-lane load, store, round (AVX-512) */

#if defined(__AVX512F__) && defined(__AVX512BF16__) && defined(__AVX512BW__)
#include <immintrin.h>
#include "vec_exp.h"
#define HAVE_AVX512 1

INLINE __mmask16 tail_mask(int64_t left) {
    return left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
}

INLINE __m512 ld_f32(const float *p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
INLINE void st_f32(float *p, __m512 v, __mmask16 m) { _mm512_mask_storeu_ps(p, m, v); }
INLINE __m512 rd_f32(__m512 v) { return v; }

INLINE __m512 ld_bf16(const uint16_t *p, __mmask16 m) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}
INLINE void st_bf16(uint16_t *p, __m512 v, __mmask16 m) {
    _mm256_mask_storeu_epi16(p, m, (__m256i)_mm512_cvtneps_pbh(v));
}
INLINE __m512 rd_bf16(__m512 v) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(v)), 16));
}

INLINE __m512 silu512(__m512 g) {
    return _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), exp512(_mm512_sub_ps(_mm512_setzero_ps(), g))));
}
#endif

/* ------------------------------------------------------------------ the instances */

#define T float
#define SUF f32
#include "fused_ops_body.h"
#undef T
#undef SUF

#define T uint16_t
#define SUF bf16
#include "fused_ops_body.h"
#undef T
#undef SUF
