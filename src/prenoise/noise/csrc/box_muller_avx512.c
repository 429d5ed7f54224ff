/*
 * The AVX2 Box-Muller of box_muller_avx2.c executed on 16 lanes (two 16-blocks per step) with
 * AVX-512F. Every lane runs exactly the same IEEE operations (sub, mul, FMA, sqrt, max, integer
 * and bitwise ops, float<->int conversions) in the same order as the 8-lane version, so the bits
 * are identical; masks replace the and/andnot selections, which select the same values. Used only
 * where the CPU has AVX-512F, and only after prenoise.noise.kernel's self-check against torch passes.
 */
#include "noise_kernel.h"

#ifdef PRENOISE_HAVE_AVX2_BUILD
#include <immintrin.h>

#define AVX512_FN __attribute__((target("avx512f,avx2,fma")))
#define SET1(v) _mm512_set1_ps((float)(v))
#define SET1I(v) _mm512_set1_epi32((int)(v))
#define AS_I(v) _mm512_castps_si512(v)
#define AS_F(v) _mm512_castsi512_ps(v)

AVX512_FN static inline __m512 log16(__m512 x) {
    const __m512 one = SET1(1.0f);
    const __mmask16 invalid = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LE_OS);
    x = _mm512_max_ps(x, AS_F(SET1I(0x00800000)));
    __m512i imm0 = _mm512_srli_epi32(AS_I(x), 23);
    x = AS_F(_mm512_and_si512(AS_I(x), SET1I(~0x7f800000)));
    x = AS_F(_mm512_or_si512(AS_I(x), AS_I(SET1(0.5f))));
    imm0 = _mm512_sub_epi32(imm0, SET1I(0x7f));
    __m512 e = _mm512_add_ps(_mm512_cvtepi32_ps(imm0), one);
    const __mmask16 mask = _mm512_cmp_ps_mask(x, SET1(0.707106781186547524), _CMP_LT_OS);
    const __m512 tmp = _mm512_maskz_mov_ps(mask, x);
    x = _mm512_sub_ps(x, one);
    e = _mm512_sub_ps(e, _mm512_maskz_mov_ps(mask, one));
    x = _mm512_add_ps(x, tmp);
    const __m512 z = _mm512_mul_ps(x, x);
    __m512 y = _mm512_fmadd_ps(SET1(7.0376836292E-2), x, SET1(-1.1514610310E-1));
    y = _mm512_fmadd_ps(y, x, SET1(1.1676998740E-1));
    y = _mm512_fmadd_ps(y, x, SET1(-1.2420140846E-1));
    y = _mm512_fmadd_ps(y, x, SET1(1.4249322787E-1));
    y = _mm512_fmadd_ps(y, x, SET1(-1.6668057665E-1));
    y = _mm512_fmadd_ps(y, x, SET1(2.0000714765E-1));
    y = _mm512_fmadd_ps(y, x, SET1(-2.4999993993E-1));
    y = _mm512_fmadd_ps(y, x, SET1(3.3333331174E-1));
    y = _mm512_mul_ps(y, x);
    y = _mm512_fmadd_ps(y, z, _mm512_mul_ps(e, SET1(-2.12194440e-4)));
    y = _mm512_fnmadd_ps(z, SET1(0.5f), y);
    x = _mm512_add_ps(x, y);
    x = _mm512_fmadd_ps(e, SET1(0.693359375), x);
    return _mm512_mask_mov_ps(x, invalid, AS_F(SET1I(-1))); /* x | all-ones where invalid */
}

AVX512_FN static inline void sincos16(__m512 x, __m512 *s, __m512 *c) {
    __m512i sign_sin = _mm512_and_si512(AS_I(x), SET1I(0x80000000u));
    x = AS_F(_mm512_and_si512(AS_I(x), SET1I(0x7fffffff)));
    __m512 y = _mm512_mul_ps(x, SET1(1.27323954473516));
    __m512i j = _mm512_cvttps_epi32(y);
    j = _mm512_and_si512(_mm512_add_epi32(j, SET1I(1)), SET1I(~1));
    y = _mm512_cvtepi32_ps(j);
    const __m512i swap_sign_sin = _mm512_slli_epi32(_mm512_and_si512(j, SET1I(4)), 29);
    const __mmask16 poly =
        _mm512_cmpeq_epi32_mask(_mm512_and_si512(j, SET1I(2)), _mm512_setzero_si512());
    x = _mm512_fmadd_ps(y, SET1(-0.78515625), x);
    x = _mm512_fmadd_ps(y, SET1(-2.4187564849853515625e-4), x);
    x = _mm512_fmadd_ps(y, SET1(-3.77489497744594108e-8), x);
    const __m512i jc = _mm512_andnot_si512(_mm512_sub_epi32(j, SET1I(2)), SET1I(4));
    const __m512i sign_cos = _mm512_slli_epi32(jc, 29);
    sign_sin = _mm512_xor_si512(sign_sin, swap_sign_sin);
    const __m512 z = _mm512_mul_ps(x, x);
    y = _mm512_fmadd_ps(SET1(2.443315711809948E-005), z, SET1(-1.388731625493765E-003));
    y = _mm512_fmadd_ps(y, z, SET1(4.166664568298827E-002));
    y = _mm512_mul_ps(y, z);
    y = _mm512_fmsub_ps(y, z, _mm512_mul_ps(z, SET1(0.5f)));
    y = _mm512_add_ps(y, SET1(1.0f));
    __m512 y2 = _mm512_fmadd_ps(SET1(-1.9515295891E-4), z, SET1(8.3321608736E-3));
    y2 = _mm512_fmadd_ps(y2, z, SET1(-1.6666654611E-1));
    y2 = _mm512_mul_ps(y2, z);
    y2 = _mm512_fmadd_ps(y2, x, x);
    const __m512 ysin2 = _mm512_maskz_mov_ps(poly, y2);
    const __m512 ysin1 = _mm512_mask_mov_ps(y, poly, _mm512_setzero_ps());
    y2 = _mm512_sub_ps(y2, ysin2);
    y = _mm512_sub_ps(y, ysin1);
    *s = AS_F(_mm512_xor_si512(AS_I(_mm512_add_ps(ysin1, ysin2)), sign_sin));
    *c = AS_F(_mm512_xor_si512(AS_I(_mm512_add_ps(y, y2)), sign_cos));
}

/* Two consecutive 16-blocks: lanes 0-7 hold block A's pairs, lanes 8-15 block B's. */
AVX512_FN static inline void bm32(const float *src, float *dst) {
    const __m512i first = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
    const __m512i second = _mm512_add_epi32(first, SET1I(8));
    const __m512 a = _mm512_loadu_ps(src), b = _mm512_loadu_ps(src + 16);
    const __m512 u1 = _mm512_sub_ps(SET1(1.0f), _mm512_permutex2var_ps(a, first, b));
    const __m512 u2 = _mm512_permutex2var_ps(a, second, b);
    const __m512 radius = _mm512_sqrt_ps(_mm512_mul_ps(SET1(-2.0f), log16(u1)));
    const __m512 theta = _mm512_mul_ps(SET1(2.0 * 3.14159265358979323846), u2);
    __m512 sn, cs;
    sincos16(theta, &sn, &cs);
    const __m512 n1 = _mm512_fmadd_ps(_mm512_mul_ps(radius, cs), SET1(1.0f), _mm512_setzero_ps());
    const __m512 n2 = _mm512_fmadd_ps(_mm512_mul_ps(radius, sn), SET1(1.0f), _mm512_setzero_ps());
    _mm512_storeu_ps(dst, _mm512_permutex2var_ps(n1, first, n2));
    _mm512_storeu_ps(dst + 16, _mm512_permutex2var_ps(n1, second, n2));
}

AVX512_FN void bm_blocks_avx512(const float *src, float *dst, int64_t nblocks) {
    int64_t b = 0;
    for (; b + 2 <= nblocks; b += 2) bm32(src + 16 * b, dst + 16 * b);
    if (b < nblocks) bm_blocks_avx2(src + 16 * b, dst + 16 * b, nblocks - b);
}

#endif /* PRENOISE_HAVE_AVX2_BUILD */
