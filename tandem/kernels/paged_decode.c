/* Paged decode attention on the CPU: one query token per sequence, keys and values read in place
 * from the paged KV cache (no gather, no padding).
 *
 * Cache layout (tandem.kv.layout): [num_blocks, num_layers, 2, block_size, kv_heads, head_dim],
 * contiguous; for a block and a layer, K is [block_size, kv_heads, head_dim] and V follows it.
 * q and out are [num_seqs, num_heads, head_dim], contiguous; query head h reads KV head
 * h / (num_heads / kv_heads). Sequence i attends over its first context_lens[i] positions, found
 * through block_table[i * table_stride + position / block_size].
 *
 * The cache stores K/V in the query's type (float32 or bfloat16) or in fp8 e5m2 (one byte: the
 * high byte of an IEEE half, so widening it is exact). Arithmetic in float32 whatever the
 * storage types: scores, softmax and the weighted sum of V; the result is rounded once to q's
 * type. Sequences run in parallel (OpenMP, the caller's thread count); each thread owns its
 * scratch, so the kernel is reentrant.
 * The per-sequence body is inlined with constant head sizes (64, 128) so that its row loops
 * unroll into whole vectors; other head sizes take the same code with a runtime bound.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))

INLINE float bf16_to_f32(uint16_t x) {
    union { uint32_t u; float f; } v;
    v.u = (uint32_t)x << 16;
    return v.f;
}

INLINE uint16_t f32_to_bf16(float f) {
    union { uint32_t u; float f; } v;
    v.f = f;
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40u); /* quiet NaN */
    v.u += 0x7fffu + ((v.u >> 16) & 1u);                                           /* nearest even */
    return (uint16_t)(v.u >> 16);
}

/* KV storage types */
enum { KV_F32 = 0, KV_BF16 = 1, KV_E5M2 = 2 };

INLINE float f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    union { uint32_t u; float f; } v;
    if (exp == 0x1fu) {
        v.u = sign | 0x7f800000u | (man << 13);                  /* inf, NaN */
    } else if (exp != 0) {
        v.u = sign | ((exp + 112u) << 23) | (man << 13);         /* normal: rebias 15 -> 127 */
    } else {
        v.f = (float)man * 5.9604644775390625e-08f;              /* subnormal: man * 2^-24 */
        v.u |= sign;
    }
    return v.f;
}

/* a row of n storage values (bf16 when `bf16`, else float32) -> float32 */
INLINE void load_row(const void *src, int bf16, float *dst, int64_t n) {
    if (bf16) {
        const uint16_t *s = src;
#pragma omp simd
        for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_f32(s[i]);
    } else {
        memcpy(dst, src, (size_t)n * sizeof(float));
    }
}

/* a row of n cache values of type kvt -> float32 */
INLINE void load_kv_row(const void *src, int kvt, float *dst, int64_t n) {
    if (kvt == KV_E5M2) {
        const uint8_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = f16_to_f32((uint16_t)(s[i] << 8));
    } else {
        load_row(src, kvt == KV_BF16, dst, n);
    }
}

INLINE void store_row(const float *src, int bf16, void *dst, int64_t n) {
    if (bf16) {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = f32_to_bf16(src[i]);
    } else {
        memcpy(dst, src, (size_t)n * sizeof(float));
    }
}

/* Attention of one sequence's query heads [H, hd] over its first ctx positions.
 * scratch: hd (a row) + group * hd (accumulators) + group * ctx (scores) floats. */
INLINE void decode_seq(const float *qf, const char *cache, int kvt, int64_t hd, int64_t group,
                       int64_t kv_heads, int64_t block_size, int64_t layer, int64_t block_bytes,
                       int64_t row_bytes, int64_t elem, const int64_t *table, int64_t ctx,
                       float *outf, float *scratch) {
    float *row = scratch, *acc = row + hd, *scores = acc + group * hd;
    const int64_t nblocks = (ctx + block_size - 1) / block_size;
    for (int64_t kh = 0; kh < kv_heads; kh++) {
        const float *qh = qf + kh * group * hd;
        /* scores[g, pos] = q_g . K[pos] */
        for (int64_t b = 0; b < nblocks; b++) {
            const char *k = cache + table[b] * block_bytes + (layer * 2) * block_size * row_bytes
                            + kh * hd * elem;
            const int64_t n = ctx - b * block_size < block_size ? ctx - b * block_size : block_size;
            for (int64_t t = 0; t < n; t++) {
                load_kv_row(k + t * row_bytes, kvt, row, hd);
                for (int64_t g = 0; g < group; g++) {
                    float s = 0.0f;
#pragma omp simd reduction(+ : s)
                    for (int64_t i = 0; i < hd; i++) s += qh[g * hd + i] * row[i];
                    scores[g * ctx + b * block_size + t] = s;
                }
            }
        }
        /* softmax over positions, per query head */
        for (int64_t g = 0; g < group; g++) {
            float *sc = scores + g * ctx, mx = -INFINITY, sum = 0.0f;
            for (int64_t p = 0; p < ctx; p++) mx = sc[p] > mx ? sc[p] : mx;
            for (int64_t p = 0; p < ctx; p++) { sc[p] = expf(sc[p] - mx); sum += sc[p]; }
            const float inv = 1.0f / sum;
            for (int64_t p = 0; p < ctx; p++) sc[p] *= inv;
        }
        /* acc[g] = sum_pos p[g, pos] * V[pos] */
        memset(acc, 0, sizeof(float) * (size_t)(group * hd));
        for (int64_t b = 0; b < nblocks; b++) {
            const char *v = cache + table[b] * block_bytes + (layer * 2 + 1) * block_size * row_bytes
                            + kh * hd * elem;
            const int64_t n = ctx - b * block_size < block_size ? ctx - b * block_size : block_size;
            for (int64_t t = 0; t < n; t++) {
                load_kv_row(v + t * row_bytes, kvt, row, hd);
                for (int64_t g = 0; g < group; g++) {
                    const float w = scores[g * ctx + b * block_size + t];
#pragma omp simd
                    for (int64_t i = 0; i < hd; i++) acc[g * hd + i] += w * row[i];
                }
            }
        }
        memcpy(outf + kh * group * hd, acc, sizeof(float) * (size_t)(group * hd));
    }
}

#if defined(__AVX512F__) && defined(__AVX512BF16__) && defined(__AVX512BW__)
#include <immintrin.h>
#define HAVE_AVX512 1
#define MAX_VEC_HD 256
#define MAX_VEC_QK 8192  /* num_heads * head_dim */

/* 16 values of storage type kvt -> float32 lanes */
INLINE __m512 load16(const void *src, int kvt) {
    if (kvt == KV_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)src)), 16));
    if (kvt == KV_E5M2)  /* e5m2 byte b is the half b << 8 */
        return _mm512_cvtph_ps(
            _mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)src)), 8));
    return _mm512_loadu_ps(src);
}

/* 32 values of storage type kvt (bf16 or e5m2) -> bf16 lanes (exact for e5m2) */
INLINE __m512bh load32_bf16(const void *src, int kvt) {
    if (kvt == KV_BF16) return (__m512bh)_mm512_loadu_si512(src);
    return _mm512_cvtne2ps_pbh(load16((const char *)src + 16, KV_E5M2), load16(src, KV_E5M2));
}

#include "vec_exp.h"

/* sc[0:n] = softmax(sc[0:n]) */
INLINE void softmax512(float *sc, int64_t n) {
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int64_t p = 0; p < n; p += 16) {
        const __mmask16 m = n - p >= 16 ? 0xffff : (__mmask16)((1u << (n - p)) - 1);
        mx = _mm512_mask_max_ps(mx, m, mx, _mm512_maskz_loadu_ps(m, sc + p));
    }
    const __m512 vmax = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    __m512 sum = _mm512_setzero_ps();
    for (int64_t p = 0; p < n; p += 16) {
        const __mmask16 m = n - p >= 16 ? 0xffff : (__mmask16)((1u << (n - p)) - 1);
        const __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, sc + p), vmax));
        sum = _mm512_mask_add_ps(sum, m, sum, e);
        _mm512_mask_storeu_ps(sc + p, m, e);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
    for (int64_t p = 0; p < n; p += 16) {
        const __mmask16 m = n - p >= 16 ? 0xffff : (__mmask16)((1u << (n - p)) - 1);
        _mm512_mask_storeu_ps(sc + p, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, sc + p), inv));
    }
}

/* Block b of a sequence's context, for K (off = k_off) or V: its first row, its row count, and
 * the next block's first row (NULL for the last), fetched ahead row by row while this one is used. */
typedef struct { const char *rows, *next; int64_t n, row_bytes; } BlockRows;

INLINE BlockRows block_rows(const char *cache, const int64_t *table, int64_t b, int64_t ctx,
                            int64_t block_size, int64_t block_bytes, int64_t row_bytes, int64_t off) {
    const int64_t left = ctx - b * block_size;
    BlockRows r = {cache + table[b] * block_bytes + off,
                   left > block_size ? cache + table[b + 1] * block_bytes + off : NULL,
                   left < block_size ? left : block_size, row_bytes};
    return r;
}

INLINE const char *row_at(const BlockRows *r, int64_t t) {
    if (r->next)
        for (int64_t off = 0; off < r->row_bytes; off += 64)
            _mm_prefetch(r->next + t * r->row_bytes + off, _MM_HINT_T1);
    return r->rows + t * r->row_bytes;
}

/* decode_seq with AVX-512 (hd a multiple of 32, num_heads * hd <= MAX_VEC_QK): positions are
 * read in order, each whole row (every KV head) once per pass, the next block prefetched while
 * the current one is used. A bf16 query's scores use the bf16 dot-product instruction (exact
 * products, float32 sums; e5m2 keys widened to bf16 exactly); V accumulates in float32.
 * elem: bytes of a q value; kv_elem: of a cache value. scratch: num_heads * ctx floats. */
INLINE void decode_seq_avx512(const void *q, const char *cache, int bf16, int kvt, int64_t hd,
                              int64_t num_heads, int64_t group, int64_t block_size, int64_t layer,
                              int64_t block_bytes, int64_t row_bytes, int64_t elem, int64_t kv_elem,
                              const int64_t *table, int64_t ctx, float scale, float *outf,
                              float *scores) {
    const int64_t nblocks = (ctx + block_size - 1) / block_size;
    const int64_t nv = hd / 16, nb16 = hd / 32, kv_heads = num_heads / group;  /* no division in the loops */
    __m512 qf[MAX_VEC_QK / 16];
    __m512bh qb[MAX_VEC_QK / 32];
    for (int64_t c = 0; c < num_heads * nv; c++)
        qf[c] = load16((const char *)q + c * 16 * elem, bf16 ? KV_BF16 : KV_F32);
    if (bf16)
        for (int64_t c = 0; c < num_heads * nb16; c++)
            qb[c] = (__m512bh)_mm512_loadu_si512((const char *)q + c * 64);
    const int64_t k_off = layer * 2 * block_size * row_bytes, v_off = k_off + block_size * row_bytes;
    for (int64_t b = 0; b < nblocks; b++) {
        const BlockRows k = block_rows(cache, table, b, ctx, block_size, block_bytes, row_bytes, k_off);
        for (int64_t t = 0; t < k.n; t++) {
            const char *row = row_at(&k, t);
            for (int64_t kh = 0; kh < kv_heads; kh++) {
                /* this KV head's key, widened once for the `group` query heads that read it */
                const char *kr = row + kh * hd * kv_elem;
                __m512bh kb[MAX_VEC_HD / 32];
                __m512 kf[MAX_VEC_HD / 16];
                if (bf16)
                    for (int64_t c = 0; c < nb16; c++) kb[c] = load32_bf16(kr + c * 32 * kv_elem, kvt);
                else
                    for (int64_t c = 0; c < nv; c++) kf[c] = load16(kr + c * 16 * kv_elem, kvt);
                for (int64_t h = kh * group; h < (kh + 1) * group; h++) {
                    __m512 a = _mm512_setzero_ps();
                    if (bf16)
                        for (int64_t c = 0; c < nb16; c++) a = _mm512_dpbf16_ps(a, qb[h * nb16 + c], kb[c]);
                    else
                        for (int64_t c = 0; c < nv; c++) a = _mm512_fmadd_ps(qf[h * nv + c], kf[c], a);
                    scores[h * ctx + b * block_size + t] = _mm512_reduce_add_ps(a) * scale;
                }
            }
        }
    }
    for (int64_t h = 0; h < num_heads; h++) softmax512(scores + h * ctx, ctx);
    memset(outf, 0, sizeof(float) * (size_t)(num_heads * hd));
    for (int64_t b = 0; b < nblocks; b++) {
        const BlockRows v = block_rows(cache, table, b, ctx, block_size, block_bytes, row_bytes, v_off);
        int64_t t = 0;
        for (; t + 1 < v.n; t += 2) {  /* two positions per read-modify-write of out: same sums */
            const char *r0 = row_at(&v, t), *r1 = row_at(&v, t + 1);
            for (int64_t kh = 0; kh < kv_heads; kh++) {
                __m512 v0[MAX_VEC_HD / 16], v1[MAX_VEC_HD / 16];
                for (int64_t c = 0; c < nv; c++) {
                    v0[c] = load16(r0 + (kh * hd + c * 16) * kv_elem, kvt);
                    v1[c] = load16(r1 + (kh * hd + c * 16) * kv_elem, kvt);
                }
                for (int64_t h = kh * group; h < (kh + 1) * group; h++) {
                    const float *w = scores + h * ctx + b * block_size + t;
                    const __m512 w0 = _mm512_set1_ps(w[0]), w1 = _mm512_set1_ps(w[1]);
                    float *o = outf + h * hd;
                    for (int64_t c = 0; c < nv; c++) {
                        const __m512 acc = _mm512_fmadd_ps(w0, v0[c], _mm512_loadu_ps(o + c * 16));
                        _mm512_storeu_ps(o + c * 16, _mm512_fmadd_ps(w1, v1[c], acc));
                    }
                }
            }
        }
        for (; t < v.n; t++) {
            const char *row = row_at(&v, t);
            for (int64_t kh = 0; kh < kv_heads; kh++) {
                __m512 vr[MAX_VEC_HD / 16];
                for (int64_t c = 0; c < nv; c++) vr[c] = load16(row + (kh * hd + c * 16) * kv_elem, kvt);
                for (int64_t h = kh * group; h < (kh + 1) * group; h++) {
                    const __m512 w = _mm512_set1_ps(scores[h * ctx + b * block_size + t]);
                    float *o = outf + h * hd;
                    for (int64_t c = 0; c < nv; c++)
                        _mm512_storeu_ps(o + c * 16, _mm512_fmadd_ps(w, vr[c], _mm512_loadu_ps(o + c * 16)));
                }
            }
        }
    }
}
#endif

/* Returns 0, or -1 when scratch memory could not be allocated (out is then incomplete). */
static int paged_decode(const void *q, const void *cache, int bf16, int kvt, int64_t num_layers,
                        int64_t layer, int64_t block_size, int64_t kv_heads, int64_t head_dim,
                        int64_t num_heads,
                        const int64_t *block_table, int64_t table_stride, const int64_t *context_lens,
                        int64_t num_seqs, float scale, void *out, int num_threads) {
    const int64_t elem = bf16 ? 2 : 4, kv_elem = kvt == KV_E5M2 ? 1 : elem;
    const int64_t group = num_heads / kv_heads;
    const int64_t row_bytes = kv_heads * head_dim * kv_elem;          /* one position, all KV heads */
    const int64_t block_bytes = num_layers * 2 * block_size * row_bytes;  /* one block, every layer */
    int failed = 0;
#pragma omp parallel for schedule(dynamic, 1) num_threads(num_threads) reduction(| : failed)
    for (int64_t s = 0; s < num_seqs; s++) {
        const int64_t ctx = context_lens[s];
        const int64_t hdim = num_heads * head_dim;
        float *qf = malloc(sizeof(float) * (size_t)(2 * hdim + head_dim + group * head_dim + num_heads * ctx));
        if (qf == NULL) { failed = 1; continue; }
        float *outf = qf + hdim, *scratch = outf + hdim;
        load_row((const char *)q + s * hdim * elem, bf16, qf, hdim);
        for (int64_t i = 0; i < hdim; i++) qf[i] *= scale;
        const int64_t *table = block_table + s * table_stride;
#ifdef HAVE_AVX512
        if (head_dim % 32 == 0 && head_dim <= MAX_VEC_HD && hdim <= MAX_VEC_QK) {
            const char *qs = (const char *)q + s * hdim * elem;
#define DECODE512(BF16, KVT, HD) decode_seq_avx512(qs, cache, BF16, KVT, HD, num_heads, group, block_size, \
                                                   layer, block_bytes, row_bytes, BF16 ? 2 : 4,        \
                                                   KVT == KV_E5M2 ? 1 : (BF16 ? 2 : 4), table, ctx,     \
                                                   scale, outf, scratch)
            if (kvt == KV_E5M2) {
                if (bf16 && head_dim == 64) DECODE512(1, KV_E5M2, 64);
                else if (bf16) DECODE512(1, KV_E5M2, head_dim);
                else if (head_dim == 64) DECODE512(0, KV_E5M2, 64);
                else DECODE512(0, KV_E5M2, head_dim);
            } else {
                if (bf16 && head_dim == 64) DECODE512(1, KV_BF16, 64);
                else if (bf16) DECODE512(1, KV_BF16, head_dim);
                else if (head_dim == 64) DECODE512(0, KV_F32, 64);
                else DECODE512(0, KV_F32, head_dim);
            }
#undef DECODE512
            store_row(outf, bf16, (char *)out + s * hdim * elem, hdim);
            free(qf);
            continue;
        }
#endif
#define DECODE(KVT, HD) decode_seq(qf, cache, KVT, HD, group, kv_heads, block_size, layer, \
                                   block_bytes, row_bytes, kv_elem, table, ctx, outf, scratch)
        if (kvt == KV_E5M2) DECODE(KV_E5M2, head_dim);
        else if (bf16 && head_dim == 64) DECODE(KV_BF16, 64);
        else if (bf16 && head_dim == 128) DECODE(KV_BF16, 128);
        else if (bf16) DECODE(KV_BF16, head_dim);
        else if (head_dim == 64) DECODE(KV_F32, 64);
        else if (head_dim == 128) DECODE(KV_F32, 128);
        else DECODE(KV_F32, head_dim);
#undef DECODE
        store_row(outf, bf16, (char *)out + s * hdim * elem, hdim);
        free(qf);
    }
    return failed ? -1 : 0;
}

#define ENTRY(NAME, BF16, KVT)                                                                    \
    int NAME(const void *q, const void *cache, int64_t num_layers, int64_t layer,                  \
             int64_t block_size, int64_t kv_heads, int64_t head_dim, int64_t num_heads,            \
             const int64_t *block_table, int64_t table_stride, const int64_t *context_lens,        \
             int64_t num_seqs, float scale, void *out, int num_threads) {                          \
        return paged_decode(q, cache, BF16, KVT, num_layers, layer, block_size, kv_heads, head_dim, \
                            num_heads, block_table, table_stride, context_lens, num_seqs, scale,   \
                            out, num_threads);                                                     \
    }

ENTRY(tandem_paged_decode_f32, 0, KV_F32)
ENTRY(tandem_paged_decode_bf16, 1, KV_BF16)
ENTRY(tandem_paged_decode_f32_e5m2, 0, KV_E5M2)
ENTRY(tandem_paged_decode_bf16_e5m2, 1, KV_E5M2)
