/*
 * AVX2 + FMA Box-Muller, bit-identical to PyTorch's `NormalFill16<float>` AVX2 specialization
 * (ATen/native/cpu/DistributionTemplates.h), which calls `log256_ps` and `sincos256_ps` from
 * ATen/native/cpu/avx_mathfun.h (Cephes-derived polynomials by Julien Pommier and Giovanni
 * Garberoglio, zlib license). PyTorch compiles those with GCC's default FMA contraction, so some
 * multiply-adds are fused. This file writes every operation explicitly -- the fused ones as FMA
 * intrinsics, found by testing each candidate against torch -- and is built with
 * -ffp-contract=off, so its bits do not depend on this compiler's contraction choices. The
 * self-check in prenoise.noise.kernel verifies the result against torch.
 */
#include "mt19937.h"
#include "noise_kernel.h"

#ifdef PRENOISE_HAVE_AVX2_BUILD
#include <immintrin.h>

/* Each function is compiled for AVX2+FMA; callers check the CPU (cpu_has_avx2_fma) first. */
#define AVX2_FN __attribute__((target("avx2,fma")))

#define SET1(v) _mm256_set1_ps((float)(v))
#define SET1I(v) _mm256_set1_epi32((int)(v))
#define CASTI(v) _mm256_castsi256_ps(SET1I(v))

/* Natural log of 8 floats: the Cephes algorithm of avx_mathfun's log256_ps. */
AVX2_FN static inline __m256 cephes_log8(__m256 x) {
    const __m256 one = SET1(1.0f);
    const __m256 invalid = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LE_OS);
    x = _mm256_max_ps(x, CASTI(0x00800000));
    __m256i imm0 = _mm256_srli_epi32(_mm256_castps_si256(x), 23);
    x = _mm256_and_ps(x, CASTI(~0x7f800000));
    x = _mm256_or_ps(x, SET1(0.5f));
    imm0 = _mm256_sub_epi32(imm0, SET1I(0x7f));
    __m256 e = _mm256_add_ps(_mm256_cvtepi32_ps(imm0), one);
    const __m256 mask = _mm256_cmp_ps(x, SET1(0.707106781186547524), _CMP_LT_OS);
    const __m256 tmp = _mm256_and_ps(x, mask);
    x = _mm256_sub_ps(x, one);
    e = _mm256_sub_ps(e, _mm256_and_ps(one, mask));
    x = _mm256_add_ps(x, tmp);
    const __m256 z = _mm256_mul_ps(x, x);
    __m256 y = _mm256_fmadd_ps(SET1(7.0376836292E-2), x, SET1(-1.1514610310E-1));
    y = _mm256_fmadd_ps(y, x, SET1(1.1676998740E-1));
    y = _mm256_fmadd_ps(y, x, SET1(-1.2420140846E-1));
    y = _mm256_fmadd_ps(y, x, SET1(1.4249322787E-1));
    y = _mm256_fmadd_ps(y, x, SET1(-1.6668057665E-1));
    y = _mm256_fmadd_ps(y, x, SET1(2.0000714765E-1));
    y = _mm256_fmadd_ps(y, x, SET1(-2.4999993993E-1));
    y = _mm256_fmadd_ps(y, x, SET1(3.3333331174E-1));
    y = _mm256_mul_ps(y, x);
    /* GCC fuses y*z (not e*q1) into this add; the other choices differ in ~2e-4 of values */
    y = _mm256_fmadd_ps(y, z, _mm256_mul_ps(e, SET1(-2.12194440e-4)));
    y = _mm256_fnmadd_ps(z, SET1(0.5f), y);
    x = _mm256_add_ps(x, y);
    x = _mm256_fmadd_ps(e, SET1(0.693359375), x);
    return _mm256_or_ps(x, invalid);
}

/* Sine and cosine of 8 floats: the Cephes algorithm of avx_mathfun's sincos256_ps. */
AVX2_FN static inline void cephes_sincos8(__m256 x, __m256 *s, __m256 *c) {
    __m256 sign_sin = _mm256_and_ps(x, CASTI(0x80000000));
    x = _mm256_and_ps(x, CASTI(0x7fffffff));
    __m256 y = _mm256_mul_ps(x, SET1(1.27323954473516));
    __m256i j = _mm256_cvttps_epi32(y);
    j = _mm256_and_si256(_mm256_add_epi32(j, SET1I(1)), SET1I(~1));
    y = _mm256_cvtepi32_ps(j);
    const __m256 swap_sign_sin =
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(j, SET1I(4)), 29));
    const __m256 poly_mask = _mm256_castsi256_ps(
        _mm256_cmpeq_epi32(_mm256_and_si256(j, SET1I(2)), _mm256_setzero_si256()));
    x = _mm256_fmadd_ps(y, SET1(-0.78515625), x);
    x = _mm256_fmadd_ps(y, SET1(-2.4187564849853515625e-4), x);
    x = _mm256_fmadd_ps(y, SET1(-3.77489497744594108e-8), x);
    const __m256i jc = _mm256_andnot_si256(_mm256_sub_epi32(j, SET1I(2)), SET1I(4));
    const __m256 sign_cos = _mm256_castsi256_ps(_mm256_slli_epi32(jc, 29));
    sign_sin = _mm256_xor_ps(sign_sin, swap_sign_sin);
    const __m256 z = _mm256_mul_ps(x, x);
    /* cosine polynomial, 0 <= x <= pi/4 */
    y = _mm256_fmadd_ps(SET1(2.443315711809948E-005), z, SET1(-1.388731625493765E-003));
    y = _mm256_fmadd_ps(y, z, SET1(4.166664568298827E-002));
    y = _mm256_mul_ps(y, z);
    y = _mm256_fmsub_ps(y, z, _mm256_mul_ps(z, SET1(0.5f))); /* y*z fused, z*0.5 rounded */
    y = _mm256_add_ps(y, SET1(1.0f));
    /* sine polynomial */
    __m256 y2 = _mm256_fmadd_ps(SET1(-1.9515295891E-4), z, SET1(8.3321608736E-3));
    y2 = _mm256_fmadd_ps(y2, z, SET1(-1.6666654611E-1));
    y2 = _mm256_mul_ps(y2, z);
    y2 = _mm256_fmadd_ps(y2, x, x);
    /* select per lane, exactly as sincos256_ps does (via subtract and add) */
    const __m256 ysin2 = _mm256_and_ps(poly_mask, y2);
    const __m256 ysin1 = _mm256_andnot_ps(poly_mask, y);
    y2 = _mm256_sub_ps(y2, ysin2);
    y = _mm256_sub_ps(y, ysin1);
    *s = _mm256_xor_ps(_mm256_add_ps(ysin1, ysin2), sign_sin);
    *c = _mm256_xor_ps(_mm256_add_ps(y, y2), sign_cos);
}

/* One 16-block: reads 16 uniforms from src, writes 16 normals to dst (may alias src). */
AVX2_FN static inline void bm16(const float *src, float *dst) {
    const __m256 one = SET1(1.0f), minus_two = SET1(-2.0f);
    const __m256 two_pi = SET1(2.0 * 3.14159265358979323846);
    const __m256 mean = _mm256_setzero_ps(), std = SET1(1.0f);
    const __m256 u1 = _mm256_sub_ps(one, _mm256_loadu_ps(src));
    const __m256 u2 = _mm256_loadu_ps(src + 8);
    const __m256 radius = _mm256_sqrt_ps(_mm256_mul_ps(minus_two, cephes_log8(u1)));
    const __m256 theta = _mm256_mul_ps(two_pi, u2);
    __m256 sn, cs;
    cephes_sincos8(theta, &sn, &cs);
    /* torch stores fmadd(r*cos, std, mean): with std=1, mean=0 this maps -0 to +0 */
    _mm256_storeu_ps(dst, _mm256_fmadd_ps(_mm256_mul_ps(radius, cs), std, mean));
    _mm256_storeu_ps(dst + 8, _mm256_fmadd_ps(_mm256_mul_ps(radius, sn), std, mean));
}

AVX2_FN void bm_blocks_avx2(const float *src, float *dst, int64_t nblocks) {
    int64_t b = 0;
    for (; b + 2 <= nblocks; b += 2) { /* two independent blocks per step for more ILP */
        bm16(src + 16 * b, dst + 16 * b);
        bm16(src + 16 * b + 16, dst + 16 * b + 16);
    }
    for (; b < nblocks; b++) bm16(src + 16 * b, dst + 16 * b);
}

/* 8 lanes of the MT19937 recurrence: s[i] = s[i + off] ^ twist(s[i], s[i + 1]). */
AVX2_FN static inline void twist8(uint32_t *p, const uint32_t *far) {
    const __m256i cur = _mm256_loadu_si256((const __m256i *)p);
    const __m256i nxt = _mm256_loadu_si256((const __m256i *)(p + 1));
    const __m256i y = _mm256_or_si256(_mm256_and_si256(cur, SET1I(0x80000000u)),
                                      _mm256_and_si256(nxt, SET1I(0x7fffffffu)));
    const __m256i odd = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_and_si256(nxt, SET1I(1)));
    __m256i r = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)far), _mm256_srli_epi32(y, 1));
    r = _mm256_xor_si256(r, _mm256_and_si256(odd, SET1I(0x9908b0dfu)));
    _mm256_storeu_si256((__m256i *)p, r);
}

/* mt_twist_block with 8 words per step; identical result (all reads precede their writes). */
AVX2_FN void mt_twist_avx2(uint32_t *s) {
    int i = 0;
    for (; i + 8 <= MT_N - MT_M; i += 8) twist8(s + i, s + i + MT_M); /* 0..223 */
    for (; i < MT_N - MT_M; i++) {                                      /* 224..226 */
        const uint32_t y = (s[i] & 0x80000000u) | (s[i + 1] & 0x7fffffffu);
        s[i] = s[i + MT_M] ^ (y >> 1) ^ ((s[i + 1] & 1u) ? 0x9908b0dfu : 0u);
    }
    for (; i + 8 <= MT_N - 1; i += 8) twist8(s + i, s + i + MT_M - MT_N); /* 227..618 */
    for (; i < MT_N - 1; i++) {
        const uint32_t y = (s[i] & 0x80000000u) | (s[i + 1] & 0x7fffffffu);
        s[i] = s[i + MT_M - MT_N] ^ (y >> 1) ^ ((s[i + 1] & 1u) ? 0x9908b0dfu : 0u);
    }
    const uint32_t y = (s[MT_N - 1] & 0x80000000u) | (s[0] & 0x7fffffffu);
    s[MT_N - 1] = s[MT_M - 1] ^ (y >> 1) ^ ((s[0] & 1u) ? 0x9908b0dfu : 0u);
}

/* The engine's mt_uniforms_impl (mt19937.h) compiled here for AVX2, so that its tempering loop
 * runs 8 words at a time; the words and uniforms are those of mt_uniforms_scalar. */
AVX2_FN void mt_uniforms_avx2(mt_t *mt, float *dst, int64_t k) {
    mt_uniforms_impl(mt, dst, k, mt_twist_avx2);
}

#endif /* PRENOISE_HAVE_AVX2_BUILD */
