/*
 * The x86 noise stream in portable C: torch's AVX2 Box-Muller (box_muller_avx2.c, itself
 * avx_mathfun's log256_ps / sincos256_ps with GCC's fused multiply-adds) computed one lane at a
 * time with C99 `fmaf`, so that any host -- aarch64 above all -- draws the x86 float32 stream.
 *
 * Every IEEE operation of the AVX2 code appears here once, in the same order: each fused
 * multiply-add as `fmaf`, every other product and sum as a separately rounded C operation,
 * mask selections as bit operations, and constants as `(float)` of the same double literals.
 * That reproduces the intrinsics bit for bit given:
 *   - float expressions evaluated in float (FLT_EVAL_METHOD == 0),
 *   - no contraction of a*b+c into an FMA the AVX2 code does not have (off below, and the
 *     extension is built with -ffp-contract=off),
 *   - no value-changing optimisation (-ffast-math and friends are refused below),
 *   - a correctly rounded fmaf and sqrtf (C99 / IEEE 754), round-to-nearest at run time
 *     (checked by the caller, noise_kernel.c).
 * prenoise.noise.streams checks the result against golden digests of torch's AVX2 output before
 * the stream is used in a process.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "noise_kernel.h"

#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "the portable x86 stream needs FLT_EVAL_METHOD == 0 (float arithmetic in float)"
#endif
#if defined(__FAST_MATH__) || (defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__)
#error "the portable x86 stream must not be built with -ffast-math or -ffinite-math-only"
#endif
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#else
#error "unknown compiler: cannot turn floating-point contraction off for the portable stream"
#endif

#define F(v) ((float)(v))

static inline float as_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t as_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* _mm256_cvttps_epi32: truncation; out of range or NaN gives INT32_MIN (never for our inputs). */
static inline int32_t cvtt(float y) {
    if (!(y > -2147483648.0f && y < 2147483648.0f)) return INT32_MIN;
    return (int32_t)y;
}

/* One lane of cephes_log8 (box_muller_avx2.c). */
static inline float log_lane(float x) {
    const float one = 1.0f;
    const uint32_t invalid = x <= 0.0f ? 0xffffffffu : 0u; /* _CMP_LE_OS: false for NaN */
    const float min_norm = as_float(0x00800000u);
    x = x > min_norm ? x : min_norm; /* _mm256_max_ps(x, min_norm) */
    int32_t imm0 = (int32_t)(as_bits(x) >> 23);
    x = as_float(as_bits(x) & ~0x7f800000u);
    x = as_float(as_bits(x) | as_bits(0.5f));
    imm0 = (int32_t)((uint32_t)imm0 - 0x7fu);
    float e = (float)imm0 + one;
    const uint32_t mask = x < F(0.707106781186547524) ? 0xffffffffu : 0u;
    const float tmp = as_float(as_bits(x) & mask);
    x = x - one;
    e = e - as_float(as_bits(one) & mask);
    x = x + tmp;
    const float z = x * x;
    float y = fmaf(F(7.0376836292E-2), x, F(-1.1514610310E-1));
    y = fmaf(y, x, F(1.1676998740E-1));
    y = fmaf(y, x, F(-1.2420140846E-1));
    y = fmaf(y, x, F(1.4249322787E-1));
    y = fmaf(y, x, F(-1.6668057665E-1));
    y = fmaf(y, x, F(2.0000714765E-1));
    y = fmaf(y, x, F(-2.4999993993E-1));
    y = fmaf(y, x, F(3.3333331174E-1));
    y = y * x;
    y = fmaf(y, z, e * F(-2.12194440e-4));
    y = fmaf(-z, 0.5f, y); /* fnmadd(z, 0.5, y) = -(z*0.5) + y, one rounding */
    x = x + y;
    x = fmaf(e, F(0.693359375), x);
    return as_float(as_bits(x) | invalid);
}

/* One lane of cephes_sincos8 (box_muller_avx2.c). */
static inline void sincos_lane(float x, float *s, float *c) {
    uint32_t sign_sin = as_bits(x) & 0x80000000u;
    x = as_float(as_bits(x) & 0x7fffffffu);
    float y = x * F(1.27323954473516);
    uint32_t j = (uint32_t)cvtt(y);
    j = (j + 1u) & ~1u;
    y = (float)(int32_t)j;
    const uint32_t swap_sign_sin = (j & 4u) << 29;
    const uint32_t poly_mask = (j & 2u) == 0 ? 0xffffffffu : 0u;
    x = fmaf(y, F(-0.78515625), x);
    x = fmaf(y, F(-2.4187564849853515625e-4), x);
    x = fmaf(y, F(-3.77489497744594108e-8), x);
    const uint32_t jc = ~(j - 2u) & 4u; /* _mm256_andnot_si256(j - 2, 4) */
    const uint32_t sign_cos = jc << 29;
    sign_sin ^= swap_sign_sin;
    const float z = x * x;
    y = fmaf(F(2.443315711809948E-005), z, F(-1.388731625493765E-003));
    y = fmaf(y, z, F(4.166664568298827E-002));
    y = y * z;
    y = fmaf(y, z, -(z * 0.5f)); /* fmsub(y, z, z*0.5): z*0.5 rounded first */
    y = y + 1.0f;
    float y2 = fmaf(F(-1.9515295891E-4), z, F(8.3321608736E-3));
    y2 = fmaf(y2, z, F(-1.6666654611E-1));
    y2 = y2 * z;
    y2 = fmaf(y2, x, x);
    const float ysin2 = as_float(poly_mask & as_bits(y2));
    const float ysin1 = as_float(~poly_mask & as_bits(y));
    y2 = y2 - ysin2;
    y = y - ysin1;
    *s = as_float(as_bits(ysin1 + ysin2) ^ sign_sin);
    *c = as_float(as_bits(y + y2) ^ sign_cos);
}

/* One 16-block (bm16 of box_muller_avx2.c); src == dst is allowed. */
static inline void bm16_portable(const float *src, float *dst) {
    float u[16], out[16];
    memcpy(u, src, sizeof u);
    for (int j = 0; j < 8; j++) {
        const float u1 = 1.0f - u[j];
        const float radius = sqrtf(-2.0f * log_lane(u1));
        const float theta = F(2.0 * 3.14159265358979323846) * u[j + 8];
        float sn, cs;
        sincos_lane(theta, &sn, &cs);
        /* torch stores fmadd(r*cos, std=1, mean=0): exactly r*cos + 0 (-0 becomes +0) */
        out[j] = radius * cs + 0.0f;
        out[j + 8] = radius * sn + 0.0f;
    }
    memcpy(dst, out, sizeof out);
}

void bm_blocks_portable(const float *src, float *dst, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++) bm16_portable(src + 16 * b, dst + 16 * b);
}
