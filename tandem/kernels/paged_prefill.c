/* Paged prefill attention on the CPU in bfloat16: one sequence's new tokens attend causally over
 * its whole context (cached positions and this step's), keys and values read from the paged KV
 * cache. Two backends share the packing and the softmax: AMX tiles where the CPU has them and the
 * OS grants the tile state, else AVX-512 BF16 dot products (vdpbf16ps: Zen 4, Cooper Lake and
 * later). tandem_prefill_backend() says which one runs (2 AMX, 1 AVX-512 BF16, 0 none).
 *
 * Cache layout (tandem.kv.layout): [num_blocks, num_layers, 2, block_size, kv_heads, head_dim],
 * contiguous. q and out are [num_new, num_heads, head_dim]; query row i sits at position
 * num_computed + i and sees positions 0..num_computed + i, found through block_ids[pos / block_size].
 * Query head h reads KV head h / (num_heads / kv_heads).
 *
 * Method (flash attention): each KV head's K and V are first packed once into the layouts the
 * tile multiply reads (two scratch buffers from the caller, kv_heads * round_up(ctx, 32) *
 * head_dim bf16 each; positions past ctx zero). Then per item, two row tiles (16 query rows of
 * one head each) of the same KV head, so that each K/V load feeds two multiplies: scores of
 * a 256-key block (bf16 products, float32 sums), an online softmax in float32 with AVX-512,
 * probabilities rounded to bf16 and multiplied with V, float32 accumulators rescaled per block,
 * rounded once to bf16 at the end. Key blocks past the item's last row are never visited (causal
 * skip). A row's result depends only on its position and the keys, not on the chunk it is
 * computed in: key blocks start at position 0 whatever the chunk. Both backends sum each 32-bit
 * lane's pairs in the same order per key block, but not bit-identically to each other.
 * Items run in parallel (OpenMP, the caller's thread count).
 *
 * The packed layouts, read by AMX as B tiles and by AVX-512 as vectors: a K tile is 16 rows (dim
 * pairs) x 16 keys of 32-bit words, so row i is one vector of 16 keys' dim pair i; a V tile is 16
 * rows (key pairs) x 16 dims, so row i is one vector of 16 dims' key pair i. The vector backend
 * broadcasts a query's dim pair (a probability row's key pair) and multiplies it into such rows.
 *
 * The cache stores K/V in bfloat16 or in fp8 e5m2 (tandem_paged_prefill_bf16_e5m2): e5m2 values
 * are widened to bfloat16 exactly while packing, so the rest of the method is the same.
 *
 * Built everywhere; without AVX-512 BF16 at compile time every call returns -2 and the caller
 * keeps torch's SDPA.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ERR_UNAVAILABLE (-2)
#define ERR_HEAD_DIM (-3)

#if defined(__AVX512F__) && defined(__AVX512BF16__)
#include <immintrin.h>
#include <math.h>
#include <sys/syscall.h>
#include <unistd.h>

#define KEY_BLOCK 256   /* keys per softmax step: a multiple of 32 */
#define ROWS 16         /* query rows per item: one tile's height */
#define MAX_HD 256
#define VROWS 8         /* vector backend: query rows per register block (8 x 2 accumulators) */
#define BACKEND_VEC 1
#define BACKEND_AMX 2
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
#define HAVE_AMX 1
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} TileConfig;

/* Every tile 16 rows x 64 bytes: A (16 x 32 bf16), B (16 pairs x 16 columns), C (16 x 16 f32). */
static void tiles_configure(void) {
    TileConfig c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 8; i++) { c.colsb[i] = 64; c.rows[i] = 16; }
    _tile_loadconfig(&c);
}

#endif

int tandem_prefill_backend(void) {
#ifdef HAVE_AMX
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0) return BACKEND_AMX;
#endif
    return BACKEND_VEC;
}

static inline const char *cache_row(const char *cache, const int64_t *block_ids, int64_t pos,
                                    int64_t block_size, int64_t block_bytes, int64_t row_bytes,
                                    int64_t kv_off, int64_t head_off) {
    return cache + block_ids[pos / block_size] * block_bytes + kv_off + (pos % block_size) * row_bytes
           + head_off;
}

/* 16 e5m2 values -> float32 (e5m2 byte b is the half b << 8: exact) */
static inline __m512 e5m2x16_to_ps(const char *p) {
    return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)p)), 8));
}

/* 32 cache values (bf16, or e5m2 when kv8) -> 32 bf16. e5m2 fits bf16, so the low half of each
 * widened float is zero and keeping the high half is exact. */
static inline __m512i load32_bf16(const char *p, int kv8) {
    if (!kv8) return _mm512_loadu_si512(p);
    const __m256i lo = _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(e5m2x16_to_ps(p)), 16));
    const __m256i hi = _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(e5m2x16_to_ps(p + 16)), 16));
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* 16 cache values (bf16, or e5m2 when kv8) -> 16 bf16 in the low halves of 32-bit lanes */
static inline __m512i load16_bf16_epi32(const char *p, int kv8) {
    if (!kv8) return _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_srli_epi32(_mm512_castps_si512(e5m2x16_to_ps(p)), 16);
}

/* r[j][i] -> r[i][j], 32-bit elements */
static inline void transpose16(__m512i r[16]) {
    __m512i t[16], u[16], v[16];
    for (int k = 0; k < 8; k++) {
        t[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
    }
    for (int k = 0; k < 4; k++) {
        u[4 * k] = _mm512_unpacklo_epi64(t[4 * k], t[4 * k + 2]);
        u[4 * k + 1] = _mm512_unpackhi_epi64(t[4 * k], t[4 * k + 2]);
        u[4 * k + 2] = _mm512_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
        u[4 * k + 3] = _mm512_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
    }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 4; i++) {
            v[8 * k + i] = _mm512_shuffle_i32x4(u[8 * k + i], u[8 * k + 4 + i], 0x88);
            v[8 * k + 4 + i] = _mm512_shuffle_i32x4(u[8 * k + i], u[8 * k + 4 + i], 0xdd);
        }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_i32x4(v[i], v[8 + i], 0x88);
        r[8 + i] = _mm512_shuffle_i32x4(v[i], v[8 + i], 0xdd);
    }
}

/* K tile (16 keys) t, d chunk c (32 dims) of one head: 16 rows i (dim pairs) x 16 keys j x 2,
 * i.e. kp[i][j] (as 32-bit words) = K[16t + j][32c + 2i .. 32c + 2i + 1]. */
static inline void pack_k_tile(uint32_t *kp, const char *cache, const int64_t *block_ids, int64_t t,
                               int64_t ctx, int64_t hd, int64_t block_size, int64_t block_bytes,
                               int64_t row_bytes, int64_t kv_off, int64_t head_off, int kv8) {
    const char *rows[16];
    for (int64_t j = 0; j < 16; j++)
        rows[j] = 16 * t + j < ctx ? cache_row(cache, block_ids, 16 * t + j, block_size, block_bytes,
                                               row_bytes, kv_off, head_off)
                                   : NULL;
    for (int64_t c = 0; c < hd / 32; c++) {
        __m512i r[16];
        for (int j = 0; j < 16; j++)
            r[j] = rows[j] ? load32_bf16(rows[j] + c * (kv8 ? 32 : 64), kv8) : _mm512_setzero_si512();
        transpose16(r);
        for (int i = 0; i < 16; i++) _mm512_storeu_si512(kp + c * 256 + i * 16, r[i]);
    }
}

/* V tile (32 keys) t, d tile c (16 dims) of one head: 16 rows i (key pairs) x 16 dims j x 2,
 * i.e. vp[i][j] = (V[32t + 2i][16c + j], V[32t + 2i + 1][16c + j]). */
static inline void pack_v_tile(uint32_t *vp, const char *cache, const int64_t *block_ids, int64_t t,
                               int64_t ctx, int64_t hd, int64_t block_size, int64_t block_bytes,
                               int64_t row_bytes, int64_t kv_off, int64_t head_off, int kv8) {
    const int64_t dtiles = hd / 16, step = kv8 ? 16 : 32;  /* bytes of 16 values */
    for (int64_t i = 0; i < 16; i++) {
        const int64_t p0 = 32 * t + 2 * i, p1 = p0 + 1;
        const char *a = p0 < ctx ? cache_row(cache, block_ids, p0, block_size, block_bytes,
                                             row_bytes, kv_off, head_off) : NULL;
        const char *b = p1 < ctx ? cache_row(cache, block_ids, p1, block_size, block_bytes,
                                             row_bytes, kv_off, head_off) : NULL;
        for (int64_t c = 0; c < dtiles; c++) {
            const __m512i lo = a ? load16_bf16_epi32(a + c * step, kv8) : _mm512_setzero_si512();
            const __m512i hi = b ? load16_bf16_epi32(b + c * step, kv8) : _mm512_setzero_si512();
            _mm512_storeu_si512(vp + c * 256 + i * 16, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
        }
    }
}

/* 2^f for f in [-0.5, 0.5] times 2^n: relative error < 5e-5, far below the bf16 rounding of
 * the probabilities (4e-3). Lanes outside `keep` are 0. */
static inline __m512 exp2_masked(__mmask16 keep, __m512 t) {
    const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(t, n);
    __m512 p = _mm512_set1_ps(0.0096181291f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.0555041087f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.2402265070f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931471806f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(keep, p, n);
}

static inline __mmask16 lanes(int64_t left) {
    return left >= 16 ? 0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
}

/* Online softmax of one row's block of raw scores s[0:nk], of which the first `valid` are
 * visible: p <- bf16(exp((s - m_new) * scale)), hidden lanes 0. m (raw units, scale > 0) and l
 * are the row's running max and sum; returns the factor that rescales its earlier accumulators. */
static inline float softmax_row(const float *s, uint16_t *p, int64_t nk, int64_t valid,
                                float scale, float *m, float *l) {
    const int64_t full = valid & ~(int64_t)15;           /* whole visible vectors; then a tail */
    __m512 mx0 = _mm512_set1_ps(-INFINITY), mx1 = mx0;
    int64_t j = 0;
    for (; j + 32 <= full; j += 32) {
        mx0 = _mm512_max_ps(mx0, _mm512_loadu_ps(s + j));
        mx1 = _mm512_max_ps(mx1, _mm512_loadu_ps(s + j + 16));
    }
    if (j < full) mx0 = _mm512_max_ps(mx0, _mm512_loadu_ps(s + j));
    if (valid > full) mx1 = _mm512_mask_max_ps(mx1, lanes(valid - full), mx1, _mm512_loadu_ps(s + full));
    const float block_max = _mm512_reduce_max_ps(_mm512_max_ps(mx0, mx1));
    const float m_new = block_max > *m ? block_max : *m;
    if (m_new == -INFINITY) {                    /* nothing visible yet */
        memset(p, 0, sizeof(uint16_t) * (size_t)nk);
        return 1.0f;
    }
    const float log2e = 1.44269504089f;
    const float alpha = *m == -INFINITY ? 0.0f : exp2f((*m - m_new) * scale * log2e);
    const __m512 vs = _mm512_set1_ps(scale * log2e), vm = _mm512_set1_ps(m_new * scale * log2e);
    __m512 sum0 = _mm512_setzero_ps(), sum1 = sum0;
    for (j = 0; j + 32 <= full; j += 32) {
        const __m512 e0 = exp2_masked(0xffff, _mm512_fmsub_ps(_mm512_loadu_ps(s + j), vs, vm));
        const __m512 e1 = exp2_masked(0xffff, _mm512_fmsub_ps(_mm512_loadu_ps(s + j + 16), vs, vm));
        sum0 = _mm512_add_ps(sum0, e0);
        sum1 = _mm512_add_ps(sum1, e1);
        _mm512_storeu_si512(p + j, (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
    }
    for (; j < nk; j += 16) {                             /* at most one whole vector, the tail, zeros */
        const __m512 e = exp2_masked(lanes(valid - j), _mm512_fmsub_ps(_mm512_loadu_ps(s + j), vs, vm));
        sum0 = _mm512_add_ps(sum0, e);
        _mm256_storeu_si256((__m256i *)(p + j), (__m256i)_mm512_cvtneps_pbh(e));
    }
    *l = *l * alpha + _mm512_reduce_add_ps(_mm512_add_ps(sum0, sum1));
    *m = m_new;
    return alpha;
}

/* 16 query rows of one head: rows [q0, q0 + rows) of head h (rows 0 = an unused slot). */
typedef struct { int64_t h, q0, rows; } RowTile;

typedef struct {
    _Alignas(64) uint16_t q[ROWS * MAX_HD];
    _Alignas(64) float s[ROWS * KEY_BLOCK];
    _Alignas(64) uint16_t p[ROWS * KEY_BLOCK];
    _Alignas(64) float o[ROWS * MAX_HD];
    _Alignas(64) float ob[ROWS * MAX_HD];
    float m[ROWS], l[ROWS], alpha[ROWS];
} RowState;

static void row_state_init(RowState *st, const RowTile *rt, const uint16_t *q, int64_t hd,
                           int64_t num_heads) {
    memset(st->q, 0, sizeof(uint16_t) * (size_t)(ROWS * hd));
    for (int64_t r = 0; r < rt->rows; r++)
        memcpy(st->q + r * hd, q + ((rt->q0 + r) * num_heads + rt->h) * hd, sizeof(uint16_t) * (size_t)hd);
    memset(st->o, 0, sizeof(float) * (size_t)(ROWS * hd));
    for (int64_t r = 0; r < ROWS; r++) { st->m[r] = -INFINITY; st->l[r] = 0.0f; }
}

static void row_state_softmax(RowState *st, const RowTile *rt, int64_t num_computed, int64_t ctx,
                              int64_t k0, int64_t nk, int64_t nk32, float scale) {
    for (int64_t r = 0; r < ROWS; r++) {
        const int64_t pos = num_computed + rt->q0 + r;          /* sees keys 0..pos */
        int64_t valid = (pos + 1 < ctx ? pos + 1 : ctx) - k0;
        valid = valid < 0 ? 0 : valid > nk ? nk : valid;
        st->alpha[r] = softmax_row(st->s + r * KEY_BLOCK, st->p + r * KEY_BLOCK, nk32, valid, scale,
                                   st->m + r, st->l + r);
    }
}

static void row_state_accumulate(RowState *st, int64_t hd) {
    for (int64_t r = 0; r < ROWS; r++) {
        const __m512 a = _mm512_set1_ps(st->alpha[r]);
        float *o = st->o + r * hd, *ob = st->ob + r * hd;
        for (int64_t d = 0; d < hd; d += 16)
            _mm512_storeu_ps(o + d, _mm512_fmadd_ps(_mm512_loadu_ps(o + d), a, _mm512_loadu_ps(ob + d)));
    }
}

static void row_state_store(const RowState *st, const RowTile *rt, uint16_t *out, int64_t hd,
                            int64_t num_heads) {
    for (int64_t r = 0; r < rt->rows; r++) {                    /* every real row saw position 0 */
        const __m512 inv = _mm512_set1_ps(1.0f / st->l[r]);
        uint16_t *dst = out + ((rt->q0 + r) * num_heads + rt->h) * hd;
        for (int64_t d = 0; d < hd; d += 16)
            _mm256_storeu_si256((__m256i *)(dst + d),
                                (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_loadu_ps(st->o + r * hd + d), inv)));
    }
}

/* Both row tiles' state initialised; returns the end of the keys the item sees (its last row's
 * position + 1, at most ctx): key blocks past it are skipped. */
static int64_t item_begin(RowState st[2], const RowTile rt[2], const uint16_t *q, int64_t hd,
                          int64_t num_heads, int64_t num_computed, int64_t ctx) {
    for (int i = 0; i < 2; i++) row_state_init(&st[i], &rt[i], q, hd, num_heads);
    const int64_t q_last = rt[0].q0 > rt[1].q0 ? rt[0].q0 : rt[1].q0;
    return num_computed + q_last + ROWS < ctx ? num_computed + q_last + ROWS : ctx;
}

#ifdef HAVE_AMX
/* One item: two row tiles of the same KV head, whose packed K/V every tile load serves twice.
 * Tiles: 0, 1 = the two row tiles' A operands; 4, 5 = B operands; 2, 3, 6, 7 = accumulators. */
static void attend_pair_amx(const uint16_t *q, uint16_t *out, const uint16_t *kp, const uint16_t *vp,
                        int64_t hd, int64_t num_heads, const RowTile rt[2], int64_t num_computed,
                        int64_t ctx, float scale, RowState st[2]) {
    const int64_t kend = item_begin(st, rt, q, hd, num_heads, num_computed, ctx);
    const int64_t chunks = hd / 32, dtiles = hd / 16;
    float *sa = st[0].s, *sb = st[1].s;
    for (int64_t k0 = 0; k0 < kend; k0 += KEY_BLOCK) {
        const int64_t nk = kend - k0 < KEY_BLOCK ? kend - k0 : KEY_BLOCK;
        const int64_t nk32 = (nk + 31) / 32 * 32;
        for (int64_t t = 0; t < nk32 / 16; t += 2) {          /* s = q . K^T, two key tiles */
            const uint16_t *k_t = kp + (k0 / 16 + t) * chunks * 512;
            _tile_zero(2);
            _tile_zero(3);
            _tile_zero(6);
            _tile_zero(7);
            for (int64_t c = 0; c < chunks; c++) {
                _tile_loadd(0, st[0].q + 32 * c, hd * 2);
                _tile_loadd(1, st[1].q + 32 * c, hd * 2);
                _tile_loadd(4, k_t + c * 512, 64);
                _tile_loadd(5, k_t + (chunks + c) * 512, 64);
                _tile_dpbf16ps(2, 0, 4);
                _tile_dpbf16ps(3, 0, 5);
                _tile_dpbf16ps(6, 1, 4);
                _tile_dpbf16ps(7, 1, 5);
            }
            _tile_stored(2, sa + t * 16, KEY_BLOCK * 4);
            _tile_stored(3, sa + (t + 1) * 16, KEY_BLOCK * 4);
            _tile_stored(6, sb + t * 16, KEY_BLOCK * 4);
            _tile_stored(7, sb + (t + 1) * 16, KEY_BLOCK * 4);
        }
        for (int i = 0; i < 2; i++) row_state_softmax(&st[i], &rt[i], num_computed, ctx, k0, nk, nk32, scale);
        for (int64_t c = 0; c < dtiles; c += 2) {             /* ob = p . V, two dim tiles */
            _tile_zero(2);
            _tile_zero(3);
            _tile_zero(6);
            _tile_zero(7);
            for (int64_t t = 0; t < nk32 / 32; t++) {
                const uint16_t *v_t = vp + ((k0 / 32 + t) * dtiles + c) * 512;
                _tile_loadd(0, st[0].p + 32 * t, KEY_BLOCK * 2);
                _tile_loadd(1, st[1].p + 32 * t, KEY_BLOCK * 2);
                _tile_loadd(4, v_t, 64);
                _tile_loadd(5, v_t + 512, 64);
                _tile_dpbf16ps(2, 0, 4);
                _tile_dpbf16ps(3, 0, 5);
                _tile_dpbf16ps(6, 1, 4);
                _tile_dpbf16ps(7, 1, 5);
            }
            _tile_stored(2, st[0].ob + c * 16, hd * 4);
            _tile_stored(3, st[0].ob + (c + 1) * 16, hd * 4);
            _tile_stored(6, st[1].ob + c * 16, hd * 4);
            _tile_stored(7, st[1].ob + (c + 1) * 16, hd * 4);
        }
        for (int i = 0; i < 2; i++) row_state_accumulate(&st[i], hd);
    }
    for (int i = 0; i < 2; i++) row_state_store(&st[i], &rt[i], out, hd, num_heads);
}

#endif

/* The bf16 pair at p (two consecutive values) as one 32-bit word, broadcast to every lane */
static inline __m512bh pair_bcast(const uint16_t *p) {
    int32_t w;
    memcpy(&w, p, sizeof w);
    return (__m512bh)_mm512_set1_epi32(w);
}

/* s[r][0:32] = q[r] . K^T over two packed key tiles (k_a, k_b), rows r0 .. r0 + VROWS - 1. */
static inline void scores_vec(const uint16_t *q, int64_t hd, const uint16_t *k_a, const uint16_t *k_b,
                              float *s, int64_t r0) {
    __m512 acc[VROWS][2];
    for (int r = 0; r < VROWS; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int64_t c = 0; c < hd / 32; c++)
        for (int i = 0; i < 16; i++) {
            const __m512bh b0 = (__m512bh)_mm512_loadu_si512(k_a + c * 512 + i * 32);
            const __m512bh b1 = (__m512bh)_mm512_loadu_si512(k_b + c * 512 + i * 32);
            for (int r = 0; r < VROWS; r++) {
                const __m512bh a = pair_bcast(q + (r0 + r) * hd + 32 * c + 2 * i);
                acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, b0);
                acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, b1);
            }
        }
    for (int r = 0; r < VROWS; r++) {
        _mm512_storeu_ps(s + (r0 + r) * KEY_BLOCK, acc[r][0]);
        _mm512_storeu_ps(s + (r0 + r) * KEY_BLOCK + 16, acc[r][1]);
    }
}

/* ob[r][16c : 16c + 32] = p[r][0 : 32 * n32] . V over the packed V tiles from v0 (dim tiles c
 * and c + 1), rows r0 .. r0 + VROWS - 1. */
static inline void values_vec(const uint16_t *p, const uint16_t *v0, int64_t n32, int64_t dtiles,
                              int64_t c, float *ob, int64_t hd, int64_t r0) {
    __m512 acc[VROWS][2];
    for (int r = 0; r < VROWS; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int64_t t = 0; t < n32; t++) {
        const uint16_t *v_t = v0 + (t * dtiles + c) * 512;
        for (int i = 0; i < 16; i++) {
            const __m512bh b0 = (__m512bh)_mm512_loadu_si512(v_t + i * 32);
            const __m512bh b1 = (__m512bh)_mm512_loadu_si512(v_t + 512 + i * 32);
            for (int r = 0; r < VROWS; r++) {
                const __m512bh a = pair_bcast(p + (r0 + r) * KEY_BLOCK + 32 * t + 2 * i);
                acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, b0);
                acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, b1);
            }
        }
    }
    for (int r = 0; r < VROWS; r++) {
        _mm512_storeu_ps(ob + (r0 + r) * hd + 16 * c, acc[r][0]);
        _mm512_storeu_ps(ob + (r0 + r) * hd + 16 * (c + 1), acc[r][1]);
    }
}

/* attend_pair_amx with AVX-512 BF16 dot products: the same blocks and softmax; each register
 * block of VROWS rows that holds a real row is computed (a tile's padding rows past it are not). */
static void attend_pair_vec(const uint16_t *q, uint16_t *out, const uint16_t *kp, const uint16_t *vp,
                            int64_t hd, int64_t num_heads, const RowTile rt[2], int64_t num_computed,
                            int64_t ctx, float scale, RowState st[2]) {
    const int64_t kend = item_begin(st, rt, q, hd, num_heads, num_computed, ctx);
    const int64_t chunks = hd / 32, dtiles = hd / 16;
    for (int64_t k0 = 0; k0 < kend; k0 += KEY_BLOCK) {
        const int64_t nk = kend - k0 < KEY_BLOCK ? kend - k0 : KEY_BLOCK;
        const int64_t nk32 = (nk + 31) / 32 * 32;
        for (int i = 0; i < 2; i++)
            for (int64_t r0 = 0; r0 < rt[i].rows; r0 += VROWS)
                for (int64_t t = 0; t < nk32 / 16; t += 2) {
                    const uint16_t *k_t = kp + (k0 / 16 + t) * chunks * 512;
                    scores_vec(st[i].q, hd, k_t, k_t + chunks * 512, st[i].s + t * 16, r0);
                }
        for (int i = 0; i < 2; i++) row_state_softmax(&st[i], &rt[i], num_computed, ctx, k0, nk, nk32, scale);
        for (int i = 0; i < 2; i++)
            for (int64_t r0 = 0; r0 < rt[i].rows; r0 += VROWS)
                for (int64_t c = 0; c < dtiles; c += 2)
                    values_vec(st[i].p, vp + (k0 / 32) * dtiles * 512, nk32 / 32, dtiles, c, st[i].ob, hd, r0);
        for (int i = 0; i < 2; i++) row_state_accumulate(&st[i], hd);
    }
    for (int i = 0; i < 2; i++) row_state_store(&st[i], &rt[i], out, hd, num_heads);
}

/* Row tile j of KV head kh's list: query tiles from the last (the most keys) to the first, the
 * group's heads within each. */
static RowTile row_tile(int64_t kh, int64_t j, int64_t group, int64_t qtiles, int64_t num_new) {
    RowTile rt = {0, 0, 0};
    if (j >= group * qtiles) return rt;
    const int64_t qt = qtiles - 1 - j / group;
    rt.h = kh * group + j % group;
    rt.q0 = qt * ROWS;
    rt.rows = num_new - rt.q0 < ROWS ? num_new - rt.q0 : ROWS;
    return rt;
}

/* Returns 0, -1 (no memory for the per-thread state) or -3 (head_dim not a multiple of 32 up to
 * 256). kv8: the cache holds e5m2 (else bf16). */
static int paged_prefill(const void *q, const void *cache, int kv8, int64_t num_layers, int64_t layer,
                         int64_t block_size, int64_t kv_heads, int64_t head_dim, int64_t num_heads,
                         const int64_t *block_ids, int64_t num_computed, int64_t num_new, float scale,
                         void *k_scratch, void *v_scratch, void *out, int num_threads) {
    if (head_dim % 32 != 0 || head_dim > MAX_HD) return ERR_HEAD_DIM;
    const int backend = tandem_prefill_backend();
    (void)backend;                                            /* read only where AMX is built */
    const int64_t ctx = num_computed + num_new, ctx32 = (ctx + 31) / 32 * 32, kv_elem = kv8 ? 1 : 2;
    const int64_t row_bytes = kv_heads * head_dim * kv_elem, block_bytes = num_layers * 2 * block_size * row_bytes;
    const int64_t k_off = layer * 2 * block_size * row_bytes, v_off = k_off + block_size * row_bytes;
    const int64_t head_elems = ctx32 * head_dim;              /* one head's packed K (or V) */
    uint16_t *kp = k_scratch, *vp = v_scratch;
    const int64_t group = num_heads / kv_heads, qtiles = (num_new + ROWS - 1) / ROWS;
    const int64_t kt16 = ctx32 / 16, kt32 = ctx32 / 32, pairs = (group * qtiles + 1) / 2;
    int failed = 0;
#pragma omp parallel num_threads(num_threads) reduction(| : failed)
    {
#pragma omp for schedule(static)
        for (int64_t i = 0; i < kv_heads * kt16; i++) {
            const int64_t kh = i / kt16, t = i % kt16;
            pack_k_tile((uint32_t *)(kp + kh * head_elems + t * 16 * head_dim), cache, block_ids, t,
                        ctx, head_dim, block_size, block_bytes, row_bytes, k_off, kh * head_dim * kv_elem, kv8);
        }
#pragma omp for schedule(static)
        for (int64_t i = 0; i < kv_heads * kt32; i++) {
            const int64_t kh = i / kt32, t = i % kt32;
            pack_v_tile((uint32_t *)(vp + kh * head_elems + t * 32 * head_dim), cache, block_ids, t,
                        ctx, head_dim, block_size, block_bytes, row_bytes, v_off, kh * head_dim * kv_elem, kv8);
        }
        RowState *st = aligned_alloc(64, 2 * sizeof(RowState));  /* sizeof: a multiple of 64 */
        if (st == NULL) failed = 1;
#ifdef HAVE_AMX
        if (st != NULL && backend == BACKEND_AMX) tiles_configure();
#endif
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < kv_heads * pairs; i++) {
            if (st == NULL) continue;
            const int64_t kh = i / pairs, j = 2 * (i % pairs);
            const RowTile rt[2] = {row_tile(kh, j, group, qtiles, num_new),
                                   row_tile(kh, j + 1, group, qtiles, num_new)};
#ifdef HAVE_AMX
            if (backend == BACKEND_AMX) {
                attend_pair_amx(q, out, kp + kh * head_elems, vp + kh * head_elems, head_dim, num_heads,
                                rt, num_computed, ctx, scale, st);
                continue;
            }
#endif
            attend_pair_vec(q, out, kp + kh * head_elems, vp + kh * head_elems, head_dim, num_heads, rt,
                            num_computed, ctx, scale, st);
        }
#ifdef HAVE_AMX
        if (st != NULL && backend == BACKEND_AMX) _tile_release();
#endif
        free(st);
    }
    return failed ? -1 : 0;
}

#define ENTRY(NAME, KV8)                                                                             \
    int NAME(const void *q, const void *cache, int64_t num_layers, int64_t layer, int64_t block_size, \
             int64_t kv_heads, int64_t head_dim, int64_t num_heads, const int64_t *block_ids,        \
             int64_t num_computed, int64_t num_new, float scale, void *k_scratch, void *v_scratch,   \
             void *out, int num_threads) {                                                           \
        return paged_prefill(q, cache, KV8, num_layers, layer, block_size, kv_heads, head_dim,       \
                             num_heads, block_ids, num_computed, num_new, scale, k_scratch,          \
                             v_scratch, out, num_threads);                                           \
    }

#else

#define ENTRY(NAME, KV8)                                                                             \
    int NAME(const void *q, const void *cache, int64_t num_layers, int64_t layer, int64_t block_size, \
             int64_t kv_heads, int64_t head_dim, int64_t num_heads, const int64_t *block_ids,        \
             int64_t num_computed, int64_t num_new, float scale, void *k_scratch, void *v_scratch,   \
             void *out, int num_threads) {                                                           \
        return ERR_UNAVAILABLE;                                                                      \
    }

int tandem_prefill_backend(void) { return 0; }

#endif

ENTRY(tandem_paged_prefill_bf16, 0)
ENTRY(tandem_paged_prefill_bf16_e5m2, 1)
