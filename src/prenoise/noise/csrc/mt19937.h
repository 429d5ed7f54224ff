/*
 * The MT19937 engine of prenoise's CPU noise kernel: at::mt19937's state, seeding and twist, and
 * torch's float and double uniforms read from its words (mt19937.c). It uses no other unit of
 * csrc/: the dispatcher (noise_kernel.c) and the AVX2 back end (box_muller_avx2.c) call into it,
 * never the other way, so no two translation units depend on each other
 * (tests/test_csrc_layout.py).
 */
#ifndef PRENOISE_MT19937_H
#define PRENOISE_MT19937_H

#include <stdint.h>

#define MT_N 624
#define MT_M 397

/* MT19937 state; idx is the next word to read, MT_N means "twist before the next read". */
typedef struct {
    uint32_t s[MT_N];
    int idx;
} mt_t;

/* A twist of all 624 words: mt_twist_block, or a vector variant with the same words. */
typedef void (*twist_fn)(uint32_t *s);

/* at::mt19937(seed): the standard MT19937 initialisation; the first read twists. */
void mt_seed(mt_t *mt, uint64_t seed);
/* Regenerates all 624 words in place (the MT19937 "twist"), exactly as at::mt19937. */
void mt_twist_block(uint32_t *s);
/* Fills dst with the next k uniforms of the stream. */
void mt_uniforms_scalar(mt_t *mt, float *dst, int64_t k);
/* Advances the stream by n words without tempering them (twists only when torch would). */
void mt_skip(mt_t *mt, int64_t n, twist_fn twist);
/* torch's double uniform: two words (first = high half), the low 53 bits times 2^-53. */
void mt_uniforms_f64(mt_t *mt, double *dst, int64_t k);

/* The two helpers below are static inline, not in mt19937.c, so that each caller compiles them
 * for its own target: box_muller_avx2.c's mt_uniforms_avx2 gets the tempering loop in AVX2. */

/* Tempers k raw words and maps each to torch's float uniform (w & 0xFFFFFF) * 2^-24. */
static inline void mt_words_to_uniforms(const uint32_t *w, float *dst, int k) {
    for (int i = 0; i < k; i++) {
        uint32_t y = w[i];
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c5680u;
        y ^= (y << 15) & 0xefc60000u;
        y ^= y >> 18;
        dst[i] = (float)(int32_t)(y & 0xffffffu) * 0x1p-24f;
    }
}

/* Fills dst with the next k uniforms of the stream, twisting lazily exactly when torch would. */
static inline void mt_uniforms_impl(mt_t *mt, float *dst, int64_t k, twist_fn twist) {
    while (k > 0) {
        if (mt->idx == MT_N) {
            twist(mt->s);
            mt->idx = 0;
        }
        int t = MT_N - mt->idx;
        if ((int64_t)t > k) t = (int)k;
        mt_words_to_uniforms(mt->s + mt->idx, dst, t);
        mt->idx += t;
        dst += t;
        k -= t;
    }
}

#endif /* PRENOISE_MT19937_H */
