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

/* The MT19937 engine (its own unit, mt19937.c): mt_t for the AVX2 MT variants below. */
#include "mt19937.h"

/* Box-Muller back ends, in the order of the Python-side names. */
/* AVX512 runs the AVX2 arithmetic on 16 lanes (same bits) and shares its MT code. PORTABLE is
 * the same arithmetic again in plain C (box_muller_portable.c): the x86 stream on any CPU. */
enum { BACKEND_SCALAR = 0, BACKEND_AVX2 = 1, BACKEND_AVX512 = 2, BACKEND_PORTABLE = 3 };

/* Box-Muller over nblocks consecutive 16-blocks of uniforms at src into dst (src == dst is
 * allowed). */
void bm_blocks_scalar(const float *src, float *dst, int64_t nblocks);
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
