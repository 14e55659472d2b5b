/* e^x on 16 float32 lanes (AVX-512), shared by the kernels that include it.
 *
 * x = n ln2 + r with |r| <= ln2/2 (ln2 in two parts), a degree-7 Taylor polynomial of e^r, then
 * scaled by 2^n: relative error < 1e-7. Inputs below -87 give ~1e-38 rather than 0; large inputs
 * give inf; NaN stays NaN (max returns its second operand). */
#ifndef TANDEM_VEC_EXP_H
#define TANDEM_VEC_EXP_H
#include <immintrin.h>

static inline __attribute__((always_inline)) __m512 exp512(__m512 x) {
    x = _mm512_max_ps(_mm512_set1_ps(-87.0f), x);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504089f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}
#endif
