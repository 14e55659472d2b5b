/* The fused element-wise functions for one dtype, included by fused_ops.c once per dtype with
 * T (the storage type) and SUF (the name suffix) defined; LD/ST/RD are that dtype's 16-lane
 * load, store and rounding, LD1/ST1/RD1 the scalar ones. No include guard: meant twice. */

#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define FN(name) CAT(name, SUF)
#define LD CAT(ld, SUF)
#define ST CAT(st, SUF)
#define RD CAT(rd, SUF)
#define LD1 CAT(ld1, SUF)
#define ST1 CAT(st1, SUF)
#define RD1 CAT(rd1, SUF)

/* One row. With `res`: s = x + res (rounded to the dtype) is stored back into res, then
 * normalized; without: s = x. out = w * round(s * rsqrt(mean(s^2) + eps)). out may alias x. */
static void FN(rms_row)(const T *x, T *res, const T *w, T *out, int64_t dim, float eps) {
    const T *s = res ? res : x;
    float sq = 0.0f;
#ifdef HAVE_AVX512
    __m512 acc = _mm512_setzero_ps();
    for (int64_t j = 0; j < dim; j += 16) {
        const __mmask16 m = tail_mask(dim - j);
        __m512 v = LD(x + j, m);
        if (res) {
            v = RD(_mm512_add_ps(v, LD(res + j, m)));
            ST(res + j, v, m);
        }
        acc = _mm512_fmadd_ps(v, v, acc);
    }
    sq = _mm512_reduce_add_ps(acc);
    const __m512 r = _mm512_set1_ps(1.0f / sqrtf(sq / (float)dim + eps));
    for (int64_t j = 0; j < dim; j += 16) {
        const __mmask16 m = tail_mask(dim - j);
        ST(out + j, _mm512_mul_ps(LD(w + j, m), RD(_mm512_mul_ps(LD(s + j, m), r))), m);
    }
#else
    for (int64_t j = 0; j < dim; j++) {
        float v = LD1(x + j);
        if (res) {
            v = RD1(v + LD1(res + j));
            ST1(res + j, v);
        }
        sq += v * v;
    }
    const float r = 1.0f / sqrtf(sq / (float)dim + eps);
    for (int64_t j = 0; j < dim; j++)
        ST1(out + j, LD1(w + j) * RD1(LD1(s + j) * r));
#endif
}

/* x [rows, dim] (row stride x_stride), res [rows, dim] contiguous or NULL, w [dim],
 * out [rows, dim] contiguous. */
void FN(tandem_rms_norm)(const T *x, int64_t x_stride, T *res, const T *w, T *out, int64_t rows,
                         int64_t dim, float eps, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads_for(rows * dim, threads))
    for (int64_t i = 0; i < rows; i++)
        FN(rms_row)(x + i * x_stride, res ? res + i * dim : NULL, w, out + i * dim, dim, eps);
}

/* gate, up: [rows, n] with one row stride; out [rows, n] contiguous. out = round(round(silu(g)) * u). */
void FN(tandem_silu_mul)(const T *gate, const T *up, int64_t in_stride, T *out, int64_t rows, int64_t n,
                         int threads) {
#pragma omp parallel for schedule(static) num_threads(threads_for(rows * n, threads))
    for (int64_t i = 0; i < rows; i++) {
        const T *g = gate + i * in_stride, *u = up + i * in_stride;
        T *o = out + i * n;
#ifdef HAVE_AVX512
        for (int64_t j = 0; j < n; j += 16) {
            const __mmask16 m = tail_mask(n - j);
            ST(o + j, _mm512_mul_ps(RD(silu512(LD(g + j, m))), LD(u + j, m)), m);
        }
#else
        for (int64_t j = 0; j < n; j++) {
            const float gv = LD1(g + j);
            ST1(o + j, RD1(gv / (1.0f + expf(-gv))) * LD1(u + j));
        }
#endif
    }
}

/* x [tokens, heads, head_dim] (token stride x_stride, heads contiguous), cos/sin [tokens, head_dim/2]
 * in the dtype. Half-split layout, in place: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin), each
 * product and each sum rounded to the dtype. */
void FN(tandem_rotary)(T *x, int64_t x_stride, const T *cos, const T *sin, int64_t tokens, int64_t heads,
                       int64_t head_dim, int threads) {
    const int64_t half = head_dim / 2;
#pragma omp parallel for schedule(static) num_threads(threads_for(tokens * heads * head_dim, threads))
    for (int64_t t = 0; t < tokens; t++) {
        const T *c = cos + t * half, *s = sin + t * half;
        for (int64_t h = 0; h < heads; h++) {
            T *a = x + t * x_stride + h * head_dim, *b = a + half;
#ifdef HAVE_AVX512
            for (int64_t j = 0; j < half; j += 16) {
                const __mmask16 m = tail_mask(half - j);
                const __m512 x1 = LD(a + j, m), x2 = LD(b + j, m), cv = LD(c + j, m), sv = LD(s + j, m);
                const __m512 y1 = _mm512_sub_ps(RD(_mm512_mul_ps(x1, cv)), RD(_mm512_mul_ps(x2, sv)));
                const __m512 y2 = _mm512_add_ps(RD(_mm512_mul_ps(x2, cv)), RD(_mm512_mul_ps(x1, sv)));
                ST(a + j, y1, m);
                ST(b + j, y2, m);
            }
#else
            for (int64_t j = 0; j < half; j++) {
                const float x1 = LD1(a + j), x2 = LD1(b + j), cv = LD1(c + j), sv = LD1(s + j);
                ST1(a + j, RD1(x1 * cv) - RD1(x2 * sv));
                ST1(b + j, RD1(x2 * cv) + RD1(x1 * sv));
            }
#endif
        }
    }
}

#undef CAT_
#undef CAT
#undef FN
#undef LD
#undef ST
#undef RD
#undef LD1
#undef ST1
#undef RD1
