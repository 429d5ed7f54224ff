/*
 * The MT19937 engine (see mt19937.h): seeding, the twist, skipping ahead, and the scalar float
 * and double uniforms. Integer arithmetic and exact int -> float conversions only, so the words
 * and uniforms are the same whatever the compiler or CPU. Uses no other unit of csrc/.
 */
#include "mt19937.h"

void mt_seed(mt_t *mt, uint64_t seed) {
    mt->s[0] = (uint32_t)(seed & 0xffffffffu);
    for (int j = 1; j < MT_N; j++)
        mt->s[j] = 1812433253u * (mt->s[j - 1] ^ (mt->s[j - 1] >> 30)) + (uint32_t)j;
    mt->idx = MT_N;
}

void mt_twist_block(uint32_t *s) {
    int i = 0;
    for (; i < MT_N - MT_M; i++) {
        uint32_t y = (s[i] & 0x80000000u) | (s[i + 1] & 0x7fffffffu);
        s[i] = s[i + MT_M] ^ (y >> 1) ^ ((s[i + 1] & 1u) ? 0x9908b0dfu : 0u);
    }
    for (; i < MT_N - 1; i++) {
        uint32_t y = (s[i] & 0x80000000u) | (s[i + 1] & 0x7fffffffu);
        s[i] = s[i + MT_M - MT_N] ^ (y >> 1) ^ ((s[i + 1] & 1u) ? 0x9908b0dfu : 0u);
    }
    uint32_t y = (s[MT_N - 1] & 0x80000000u) | (s[0] & 0x7fffffffu);
    s[MT_N - 1] = s[MT_M - 1] ^ (y >> 1) ^ ((s[0] & 1u) ? 0x9908b0dfu : 0u);
}

void mt_uniforms_scalar(mt_t *mt, float *dst, int64_t k) {
    mt_uniforms_impl(mt, dst, k, mt_twist_block);
}

/* The twist is integer arithmetic: the caller may pass any variant, the words are the same. */
void mt_skip(mt_t *mt, int64_t n, twist_fn twist) {
    if (n <= 0) return;
    const int64_t avail = MT_N - mt->idx;
    if (n <= avail) {
        mt->idx += (int)n;
        return;
    }
    n -= avail;
    while (n > MT_N) {
        twist(mt->s);
        n -= MT_N;
    }
    twist(mt->s);
    mt->idx = (int)n;
}

void mt_uniforms_f64(mt_t *mt, double *dst, int64_t k) {
    uint32_t w[2];
    for (int64_t i = 0; i < k; i++) {
        for (int h = 0; h < 2; h++) {
            if (mt->idx == MT_N) {
                mt_twist_block(mt->s);
                mt->idx = 0;
            }
            uint32_t y = mt->s[mt->idx++];
            y ^= y >> 11;
            y ^= (y << 7) & 0x9d2c5680u;
            y ^= (y << 15) & 0xefc60000u;
            y ^= y >> 18;
            w[h] = y;
        }
        const uint64_t v = (((uint64_t)w[0] << 32) | w[1]) & ((1ull << 53) - 1);
        dst[i] = (double)v * 0x1p-53;
    }
}
