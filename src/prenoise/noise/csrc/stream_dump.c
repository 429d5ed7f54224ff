/*
 * stream_dump: writes the raw little-endian bytes of a prenoise noise stream to stdout, for
 * comparing machines (and emulated aarch64 builds) without Python or torch:
 *
 *   stream_dump STREAM SEED COUNTS DTYPE     e.g.  stream_dump x86 42 1000003 float32
 *
 * STREAM is x86 (torch's AVX2 arithmetic, here always the portable C of box_muller_portable.c)
 * or libm (torch's scalar libm arithmetic); COUNTS is one element count >= 16 or several,
 * comma-separated, drawn one after another on one generator seeded like
 * `torch.Generator().manual_seed(SEED)`; DTYPE is float32, bfloat16 or float64. The bytes equal
 * `prenoise stream-digest`'s input, so `stream_dump ... | sha256sum` prints the same digest.
 * Built from the kernel's C core itself: noise_kernel.c without its Python bindings, linked with
 * mt19937.c and the back ends (box_muller_portable.c; on x86 box_muller_avx2.c and _avx512.c too).
 */
#define PRENOISE_NO_PYTHON
#include "noise_kernel.c"

#include <errno.h>
#include <stdio.h>

/* c10::BFloat16(float): round to nearest even (inputs are never NaN here). */
static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static int write_all(const void *p, size_t size, size_t count) {
    return fwrite(p, size, count, stdout) == count ? 0 : -1;
}

/* One draw of n elements in dtype, written to stdout; 0 on success. */
static int dump(mt_t *mt, int64_t n, const char *dtype, int backend) {
    if (strcmp(dtype, "float64") == 0) {
        double *d = (double *)malloc(sizeof(double) * (size_t)n);
        if (!d) return -1;
        fill_f64(d, n, mt);
        const int rc = write_all(d, sizeof(double), (size_t)n);
        free(d);
        return rc;
    }
    const int bf16 = strcmp(dtype, "bfloat16") == 0;
    if (!bf16 && strcmp(dtype, "float32") != 0) return -2;
    /* torch's half rule: whole 16-blocks of fresh uniforms; the ragged last block is a full
     * fresh block written over the last 16 slots. That is a float32 draw of the padded size. */
    const int64_t m = bf16 ? (n + 15) / 16 * 16 : n;
    float *f = (float *)malloc(sizeof(float) * (size_t)m);
    if (!f) return -1;
    if (fill_f32(f, m, mt, 2, backend) != 0) {
        free(f);
        return -1;
    }
    int rc = 0;
    if (bf16) {
        uint16_t *h = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)n);
        if (!h) {
            free(f);
            return -1;
        }
        for (int64_t i = 0; i < n - 16; i++) h[i] = to_bf16(f[i]);
        for (int64_t i = 0; i < 16; i++) h[n - 16 + i] = to_bf16(f[m - 16 + i]);
        rc = write_all(h, sizeof(uint16_t), (size_t)n);
        free(h);
    } else {
        rc = write_all(f, sizeof(float), (size_t)n);
    }
    free(f);
    return rc;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s x86|libm SEED COUNT[,COUNT...] float32|bfloat16|float64\n",
                argv[0]);
        return 2;
    }
    int backend;
    if (strcmp(argv[1], "x86") == 0) {
        backend = BACKEND_PORTABLE;
    } else if (strcmp(argv[1], "libm") == 0) {
        backend = BACKEND_SCALAR;
    } else {
        fprintf(stderr, "unknown stream %s (x86 or libm)\n", argv[1]);
        return 2;
    }
    if (fegetround() != FE_TONEAREST) {
        fprintf(stderr, "rounding mode is not round-to-nearest\n");
        return 1;
    }
    errno = 0;
    char *end;
    const unsigned long long seed = strtoull(argv[2], &end, 10);
    if (errno || *end || argv[2][0] == '-') {
        fprintf(stderr, "bad seed %s\n", argv[2]);
        return 2;
    }
    mt_t mt;
    mt_seed(&mt, seed);
    for (char *c = argv[3]; *c;) {
        errno = 0;
        const long long n = strtoll(c, &end, 10);
        if (errno || end == c || n < 16 || (*end && *end != ',')) {
            fprintf(stderr, "bad count list %s (each count >= 16)\n", argv[3]);
            return 2;
        }
        const int rc = dump(&mt, n, argv[4], backend);
        if (rc == -2) {
            fprintf(stderr, "unknown dtype %s\n", argv[4]);
            return 2;
        }
        if (rc != 0) {
            fprintf(stderr, "out of memory or write error\n");
            return 1;
        }
        c = *end ? end + 1 : end;
    }
    return fflush(stdout) == 0 ? 0 : 1;
}
