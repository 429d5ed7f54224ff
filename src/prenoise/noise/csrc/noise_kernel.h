/*
 * Shared declarations of prenoise's CPU noise kernel.
 *
 * The kernel reproduces PyTorch's (2.x) CPU `normal_` for contiguous float32 tensors with at
 * least 16 elements bit for bit: MT19937 words -> uniforms (w & 0xFFFFFF) * 2^-24, one word per
 * element, then an in-place Box-Muller over blocks of 16 (pairs j, j+8), and -- when the size is
 * not a multiple of 16 -- 16 fresh uniforms for the last 16 slots, whose block is recomputed.
 * No torch header is used: the generator state travels as the bytes of `Generator.get_state()`.
 */
#ifndef PRENOISE_NOISE_KERNEL_H
#define PRENOISE_NOISE_KERNEL_H

#include <stdint.h>

#define MT_N 624
#define MT_M 397

/* MT19937 state; idx is the next word to read, MT_N means "twist before the next read". */
typedef struct {
    uint32_t s[MT_N];
    int idx;
} mt_t;

/* Box-Muller back ends, in the order of the Python-side names. */
/* AVX512 runs the AVX2 arithmetic on 16 lanes (same bits) and shares its MT code. PORTABLE is
 * the same arithmetic again in plain C (box_muller_portable.c): the x86 stream on any CPU. */
enum { BACKEND_SCALAR = 0, BACKEND_AVX2 = 1, BACKEND_AVX512 = 2, BACKEND_PORTABLE = 3 };

/* Regenerates all 624 words in place (the MT19937 "twist"), exactly as at::mt19937. */
static inline void mt_twist_block(uint32_t *s) {
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
typedef void (*twist_fn)(uint32_t *s);
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

/* Box-Muller over nblocks consecutive 16-blocks of uniforms at src into dst (src == dst is
 * allowed). */
void bm_blocks_scalar(const float *src, float *dst, int64_t nblocks);
/* Fills dst with the next k uniforms of the stream. */
void mt_uniforms_scalar(mt_t *mt, float *dst, int64_t k);
/* torch's AVX2 arithmetic (the x86 stream) in portable C99: any CPU, bit-identical. */
void bm_blocks_portable(const float *src, float *dst, int64_t nblocks);

#if defined(__x86_64__) || defined(__i386__)
#define PRENOISE_HAVE_AVX2_BUILD 1
/* Same as above, compiled for AVX2+FMA; call only when the CPU supports both. */
void bm_blocks_avx2(const float *src, float *dst, int64_t nblocks);
void mt_twist_avx2(uint32_t *s);
/* 512-bit execution of bm_blocks_avx2; call only when the CPU supports AVX-512F too. */
void bm_blocks_avx512(const float *src, float *dst, int64_t nblocks);
void mt_uniforms_avx2(mt_t *mt, float *dst, int64_t k);
#endif

#endif /* PRENOISE_NOISE_KERNEL_H */
