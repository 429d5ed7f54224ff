/*
 * prenoise.noise._noise_kernel: a CPython extension that draws torch-identical standard normals.
 *
 * Guarantee (checked at run time by prenoise.noise.kernel against torch itself): for a contiguous
 * float32 buffer of n >= 16 elements and the 5056-byte state of a CPU torch.Generator,
 * fill_f32 writes exactly the values `normal_(generator=g)` would write and leaves the state
 * bytes exactly as torch would. The state is parsed and rewritten in place (only the `left`,
 * `next` and MT word fields change), so the caller passes the bytes back with set_state().
 *
 * Layout of torch's CPUGeneratorImplState (x86-64/aarch64, little endian):
 *   0: u64 seed | 8: i32 left | 12: i32 seeded | 16: u64 next | 24: u64 state[624]
 *   5016: f64 normal_x, normal_y, normal_rho | 5040: i32 normal_is_valid | 5048: f32
 *   next_float_normal_sample | 5052: bool valid | 5056 bytes in all (with padding).
 * at::mt19937 reads a word with `if (--left == 0) twist(); return temper(state[next++]);`.
 *
 * This unit is the dispatcher: it picks a back end, splits a draw over threads and binds it to
 * Python. It calls the MT19937 engine (mt19937.c) and the Box-Muller back ends (box_muller_*.c);
 * neither calls back into it.
 */
#ifndef PRENOISE_NO_PYTHON /* stream_dump.c includes this file without Python */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#endif

#include <fenv.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/mman.h>
#endif

#include "mt19937.h"
#include "noise_kernel.h"

#define STATE_BYTES 5056
#define STATE_WORDS_AT 24
#define CHUNK_BLOCKS 64 /* 16-blocks per working chunk: 4 KiB of floats stays in L1 */
#define MAX_THREADS 64
#define THREAD_CHUNK_BLOCKS 4096 /* 64K elements: the unit of work threads take in turn */

/* ------------------------------------------------------------------ scalar back end */

/* torch's generic NormalFill16<float>: logf/sqrtf in float, theta rounded to float, cosf/sinf. */
void bm_blocks_scalar(const float *src, float *dst, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++, src += 16, dst += 16) {
        for (int j = 0; j < 8; j++) {
            const float u1 = 1.0f - src[j];
            const float u2 = src[j + 8];
            const float radius = sqrtf(-2.0f * logf(u1));
            const float theta = (float)(2.0 * 3.14159265358979323846 * (double)u2);
            /* fmaf(p, 1, 0) == p + 0 exactly (-0 becomes +0), without a libm call */
            dst[j] = radius * cosf(theta) + 0.0f;
            dst[j + 8] = radius * sinf(theta) + 0.0f;
        }
    }
}

static int cpu_has_avx2_fma(void) {
#ifdef PRENOISE_HAVE_AVX2_BUILD
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

static int cpu_has_avx512f(void) {
#ifdef PRENOISE_HAVE_AVX2_BUILD
    return cpu_has_avx2_fma() && __builtin_cpu_supports("avx512f");
#else
    return 0;
#endif
}

static void uniforms(mt_t *mt, float *dst, int64_t k, int backend) {
#ifdef PRENOISE_HAVE_AVX2_BUILD
    if (backend == BACKEND_AVX2 || backend == BACKEND_AVX512) {
        mt_uniforms_avx2(mt, dst, k);
        return;
    }
#endif
    mt_uniforms_scalar(mt, dst, k);
}

static void box_muller(const float *src, float *dst, int64_t nblocks, int backend) {
    if (backend == BACKEND_PORTABLE) {
        bm_blocks_portable(src, dst, nblocks);
        return;
    }
#ifdef PRENOISE_HAVE_AVX2_BUILD
    if (backend == BACKEND_AVX512) {
        bm_blocks_avx512(src, dst, nblocks);
        return;
    }
    if (backend == BACKEND_AVX2) {
        bm_blocks_avx2(src, dst, nblocks);
        return;
    }
#endif
    bm_blocks_scalar(src, dst, nblocks);
}

/* The twist mt_skip uses: integer arithmetic, so every variant gives the same words. */
static twist_fn twist_for(int backend) {
#ifdef PRENOISE_HAVE_AVX2_BUILD
    if (backend == BACKEND_AVX2 || backend == BACKEND_AVX512) return mt_twist_avx2;
#endif
    return mt_twist_block;
}

/* ------------------------------------------------------------------ torch's state bytes */

/* Reads torch's state bytes; returns 0, or -1 for a position this code does not model. */
static int state_load(const uint8_t *b, mt_t *mt) {
    int32_t left;
    uint64_t next;
    memcpy(&left, b + 8, sizeof left);
    memcpy(&next, b + 16, sizeof next);
    if (left == 1 && next <= MT_N) {
        mt->idx = MT_N; /* the next read twists, whatever `next` says */
    } else if (left >= 2 && left <= MT_N && next + (uint64_t)left == MT_N + 1) {
        mt->idx = (int)next;
    } else {
        return -1;
    }
    for (int i = 0; i < MT_N; i++) {
        uint64_t w;
        memcpy(&w, b + STATE_WORDS_AT + 8 * i, sizeof w);
        mt->s[i] = (uint32_t)w;
    }
    return 0;
}

/* Writes the position and words back; call only after at least one word was read. */
static void state_store(uint8_t *b, const mt_t *mt) {
    const int32_t left = MT_N + 1 - mt->idx;
    const uint64_t next = (uint64_t)mt->idx;
    memcpy(b + 8, &left, sizeof left);
    memcpy(b + 16, &next, sizeof next);
    for (int i = 0; i < MT_N; i++) {
        const uint64_t w = mt->s[i];
        memcpy(b + STATE_WORDS_AT + 8 * i, &w, sizeof w);
    }
}

/* ------------------------------------------------------------------ filling */

/* Uniforms into an L1 scratch chunk, then Box-Muller into out, for nblocks whole 16-blocks
 * (out is written once, not twice as by torch's in-place transform). */
static void run_blocks(mt_t *mt, float *out, int64_t nblocks, int backend) {
    float scratch[16 * CHUNK_BLOCKS] __attribute__((aligned(64)));
    while (nblocks > 0) {
        const int64_t b = nblocks < CHUNK_BLOCKS ? nblocks : CHUNK_BLOCKS;
        uniforms(mt, scratch, 16 * b, backend);
        box_muller(scratch, out, b, backend);
        out += 16 * b;
        nblocks -= b;
    }
}

/* Recomputes the last 16 slots from 16 fresh words (torch's rule for n % 16 != 0). */
static void ragged_tail(mt_t *mt, float tail[16], int backend) {
    uniforms(mt, tail, 16, backend);
    box_muller(tail, tail, 1, backend);
}

/* Work shared by the threads of one draw: chunks are taken in increasing order. */
typedef struct {
    float *out;
    int64_t nb, n_chunks, next_chunk; /* next_chunk: atomic counter */
    int backend;
} job_t;

typedef struct {
    job_t *job;
    mt_t mt;     /* this thread's copy of the stream */
    int64_t pos; /* words of the draw its copy has passed */
} work_t;

/* Takes chunks until none is left, fast-forwarding its MT copy over other threads' chunks.
 * A thread that starts late (an idle CPU can take milliseconds to wake) just takes fewer. */
static void *worker(void *arg) {
    work_t *w = (work_t *)arg;
    job_t *job = w->job;
    for (;;) {
        const int64_t c = __atomic_fetch_add(&job->next_chunk, 1, __ATOMIC_RELAXED);
        if (c >= job->n_chunks) return NULL;
        const int64_t b0 = c * THREAD_CHUNK_BLOCKS;
        const int64_t b1 = b0 + THREAD_CHUNK_BLOCKS < job->nb ? b0 + THREAD_CHUNK_BLOCKS : job->nb;
        mt_skip(&w->mt, 16 * b0 - w->pos, twist_for(job->backend));
        run_blocks(&w->mt, job->out + 16 * b0, b1 - b0, job->backend);
        w->pos = 16 * b1;
    }
}

/* The whole draw: threads share the full blocks chunk by chunk, then the ragged tail. */
static int fill_f32(float *out, int64_t n, mt_t *mt, int threads, int backend) {
    job_t job = {out, n / 16, (n / 16 + THREAD_CHUNK_BLOCKS - 1) / THREAD_CHUNK_BLOCKS, 0, backend};
    int64_t t_count = threads < 1 ? 1 : (threads > MAX_THREADS ? MAX_THREADS : threads);
    if (t_count > job.n_chunks) t_count = job.n_chunks;
    work_t *work = (work_t *)malloc(sizeof(work_t) * (size_t)t_count);
    pthread_t *tid = (pthread_t *)malloc(sizeof(pthread_t) * (size_t)t_count);
    char *started = (char *)calloc((size_t)t_count, 1);
    if (!work || !tid || !started) {
        free(work), free(tid), free(started);
        return -1;
    }
    for (int64_t t = 0; t < t_count; t++) {
        work[t].job = &job;
        work[t].mt = *mt;
        work[t].pos = 0;
    }
    for (int64_t t = 1; t < t_count; t++)
        started[t] = pthread_create(&tid[t], NULL, worker, &work[t]) == 0;
    worker(&work[0]); /* threads that failed to start leave their chunks to the others */
    for (int64_t t = 1; t < t_count; t++)
        if (started[t]) pthread_join(tid[t], NULL);
    for (int64_t t = 0; t < t_count; t++) /* the copy that did the last chunk is at the end */
        if (work[t].pos == 16 * job.nb) *mt = work[t].mt;
    free(work), free(tid), free(started);
    if (n % 16) {
        float tail[16];
        mt_skip(mt, n % 16, twist_for(backend));
        ragged_tail(mt, tail, backend);
        memcpy(out + n - 16, tail, sizeof tail);
    }
    return 0;
}

/* Only the runs [starts[k], starts[k] + run_len) of an n-element draw, packed into out. */
static void fill_runs_f32(float *out, int64_t n, const int64_t *starts, int64_t n_runs,
                          int64_t run_len, mt_t *mt, int backend) {
    const int64_t full = (n / 16) * 16;
    float buf[16 * CHUNK_BLOCKS], cache[16];
    int64_t pos = 0, cached_block = -1;
    for (int64_t k = 0; k < n_runs; k++) {
        const int64_t s = starts[k];
        const int64_t e = s + run_len < full ? s + run_len : full;
        float *dst = out + k * run_len;
        for (int64_t i = s; i < e;) {
            const int64_t b = i / 16;
            const float *src;
            int64_t src_first, src_end; /* element range that src holds */
            if (b == cached_block) {
                src = cache, src_first = 16 * b, src_end = src_first + 16;
            } else {
                int64_t b_end = (e + 15) / 16;
                if (b_end - b > CHUNK_BLOCKS) b_end = b + CHUNK_BLOCKS;
                mt_skip(mt, 16 * b - pos, twist_for(backend));
                uniforms(mt, buf, 16 * (b_end - b), backend);
                box_muller(buf, buf, b_end - b, backend);
                pos = 16 * b_end;
                memcpy(cache, buf + 16 * (b_end - b - 1), sizeof cache);
                cached_block = b_end - 1;
                src = buf, src_first = 16 * b, src_end = 16 * b_end;
            }
            const int64_t stop = e < src_end ? e : src_end;
            memcpy(dst + (i - s), src + (i - src_first), sizeof(float) * (size_t)(stop - i));
            i = stop;
        }
    }
    mt_skip(mt, n - pos, twist_for(backend));
    if (n % 16) {
        float tail[16];
        ragged_tail(mt, tail, backend);
        for (int64_t k = 0; k < n_runs; k++) {
            const int64_t lo = starts[k] > n - 16 ? starts[k] : n - 16;
            const int64_t hi = starts[k] + run_len;
            for (int64_t i = lo; i < hi; i++)
                out[k * run_len + (i - starts[k])] = tail[i - (n - 16)];
        }
    }
}

/* ------------------------------------------------------------------ float64 */

/* torch's generic NormalFill16<double> (every CPU: double libm log/cos/sin, no vector path). */
static void bm_blocks_f64(double *d, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++, d += 16) {
        for (int j = 0; j < 8; j++) {
            const double u1 = 1.0 - d[j];
            const double u2 = d[j + 8];
            const double radius = sqrt(-2.0 * log(u1));
            const double theta = 2.0 * 3.14159265358979323846 * u2;
            d[j] = fma(radius * cos(theta), 1.0, 0.0);
            d[j + 8] = fma(radius * sin(theta), 1.0, 0.0);
        }
    }
}

/* The whole float64 draw, as torch: n uniforms, blocks in place, ragged tail recomputed. */
static void fill_f64(double *out, int64_t n, mt_t *mt) {
    mt_uniforms_f64(mt, out, n);
    bm_blocks_f64(out, n / 16);
    if (n % 16) {
        mt_uniforms_f64(mt, out + n - 16, 16);
        bm_blocks_f64(out + n - 16, 1);
    }
}

#ifndef PRENOISE_NO_PYTHON
/* ------------------------------------------------------------------ Python bindings */

/* Raised for a generator position the kernel does not model (and only for that): the one
   refusal that callers may answer by letting torch draw. Every other error stays an error. */
static PyObject *UnsupportedPosition;

static int parse_state(unsigned long long addr, Py_ssize_t nbytes, mt_t *mt) {
    if (nbytes != STATE_BYTES) {
        PyErr_Format(PyExc_ValueError, "generator state has %zd bytes, expected %d", nbytes,
                     STATE_BYTES);
        return -1;
    }
    if (state_load((const uint8_t *)(uintptr_t)addr, mt) != 0) {
        PyErr_SetString(UnsupportedPosition, "generator position not supported by the kernel");
        return -1;
    }
    return 0;
}

static int check_backend(int backend) {
    if (backend == BACKEND_PORTABLE && fegetround() != FE_TONEAREST) {
        PyErr_SetString(PyExc_ValueError, "the portable stream needs round-to-nearest");
        return -1;
    }
    if (backend == BACKEND_SCALAR || backend == BACKEND_PORTABLE || (backend == BACKEND_AVX2 && cpu_has_avx2_fma()) ||
        (backend == BACKEND_AVX512 && cpu_has_avx512f()))
        return 0;
    PyErr_Format(PyExc_ValueError, "backend %d is not available on this CPU", backend);
    return -1;
}

/* A heap copy of the generator state parsed from torch's bytes (NULL with a Python error set). */
static mt_t *new_state(unsigned long long state_addr, Py_ssize_t nbytes) {
    mt_t *mt = (mt_t *)malloc(sizeof(mt_t));
    if (!mt) return (mt_t *)PyErr_NoMemory();
    if (parse_state(state_addr, nbytes, mt) != 0) {
        free(mt);
        return NULL;
    }
    return mt;
}

PyDoc_STRVAR(py_fill_f32_doc,
             "fill_f32(out_addr, n, state_addr, state_nbytes, threads, backend)\n\n"
             "Writes torch's normal_() values for n >= 16 contiguous float32 at out_addr and\n"
             "updates the 5056-byte generator state at state_addr in place. The GIL is released.");

static PyObject *py_fill_f32(PyObject *self, PyObject *args) {
    unsigned long long out_addr, state_addr;
    long long n;
    Py_ssize_t nbytes;
    int threads, backend, rc;
    mt_t *mt;
    (void)self;
    if (!PyArg_ParseTuple(args, "KLKnii", &out_addr, &n, &state_addr, &nbytes, &threads, &backend))
        return NULL;
    if (n < 16) return PyErr_Format(PyExc_ValueError, "n must be >= 16, got %lld", n);
    if (check_backend(backend) != 0) return NULL;
    if (!(mt = new_state(state_addr, nbytes))) return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = fill_f32((float *)(uintptr_t)out_addr, n, mt, threads, backend);
    if (rc == 0) state_store((uint8_t *)(uintptr_t)state_addr, mt);
    Py_END_ALLOW_THREADS
    free(mt);
    if (rc != 0) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

PyDoc_STRVAR(py_fill_runs_f32_doc,
             "fill_runs_f32(out_addr, n, starts_addr, n_runs, run_len, state_addr, state_nbytes,"
             " backend)\n\n"
             "Writes elements [starts[k], starts[k] + run_len) of the n-element draw, packed, for\n"
             "sorted disjoint int64 starts, and advances the state past the whole draw.");

static PyObject *py_fill_runs_f32(PyObject *self, PyObject *args) {
    unsigned long long out_addr, starts_addr, state_addr;
    long long n, n_runs, run_len;
    Py_ssize_t nbytes;
    int backend;
    mt_t *mt;
    (void)self;
    if (!PyArg_ParseTuple(args, "KLKLLKni", &out_addr, &n, &starts_addr, &n_runs, &run_len,
                          &state_addr, &nbytes, &backend))
        return NULL;
    if (n < 16 || n_runs < 0 || run_len < 0)
        return PyErr_Format(PyExc_ValueError, "bad sizes n=%lld n_runs=%lld run_len=%lld", n,
                            n_runs, run_len);
    const int64_t *starts = (const int64_t *)(uintptr_t)starts_addr;
    for (long long k = 0; k < n_runs; k++) {
        const int64_t prev_end = k ? starts[k - 1] + run_len : 0;
        if (starts[k] < prev_end || starts[k] + run_len > n)
            return PyErr_Format(PyExc_ValueError, "runs must be sorted, disjoint, inside [0, n)");
    }
    if (check_backend(backend) != 0) return NULL;
    if (!(mt = new_state(state_addr, nbytes))) return NULL;
    Py_BEGIN_ALLOW_THREADS
    fill_runs_f32((float *)(uintptr_t)out_addr, n, starts, n_runs, run_len, mt, backend);
    state_store((uint8_t *)(uintptr_t)state_addr, mt);
    Py_END_ALLOW_THREADS
    free(mt);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(py_fill_f64_doc,
             "fill_f64(out_addr, n, state_addr, state_nbytes)\n\n"
             "Writes torch's normal_() values for n >= 16 contiguous float64 at out_addr (the\n"
             "double libm arithmetic of every CPU) and updates the generator state in place.");

static PyObject *py_fill_f64(PyObject *self, PyObject *args) {
    unsigned long long out_addr, state_addr;
    long long n;
    Py_ssize_t nbytes;
    mt_t *mt;
    (void)self;
    if (!PyArg_ParseTuple(args, "KLKn", &out_addr, &n, &state_addr, &nbytes)) return NULL;
    if (n < 16) return PyErr_Format(PyExc_ValueError, "n must be >= 16, got %lld", n);
    if (!(mt = new_state(state_addr, nbytes))) return NULL;
    Py_BEGIN_ALLOW_THREADS
    fill_f64((double *)(uintptr_t)out_addr, n, mt);
    state_store((uint8_t *)(uintptr_t)state_addr, mt);
    Py_END_ALLOW_THREADS
    free(mt);
    Py_RETURN_NONE;
}

static PyObject *py_available_backends(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    if (cpu_has_avx512f())
        return Py_BuildValue("(iii)", BACKEND_AVX512, BACKEND_AVX2, BACKEND_SCALAR);
    if (cpu_has_avx2_fma()) return Py_BuildValue("(ii)", BACKEND_AVX2, BACKEND_SCALAR);
    return Py_BuildValue("(i)", BACKEND_SCALAR);
}

/* Mark the 2 MiB-aligned interior of [ptr, ptr + nbytes) MADV_HUGEPAGE before it is first written,
 * so that its page faults map 2 MiB pages (512x fewer faults). Only fresh memory is advised: if the
 * first or last interior page is already resident (the allocator reused memory, which will not
 * fault), nothing is done. Only the VMA flag changes: values and the allocator's ownership are
 * untouched. Returns the number of bytes advised. */
static PyObject *py_advise_huge_pages(PyObject *self, PyObject *args) {
    unsigned long long ptr, nbytes;
    (void)self;
    if (!PyArg_ParseTuple(args, "KK", &ptr, &nbytes)) return NULL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const unsigned long long huge = 2ull << 20, page = 4096;
    const unsigned long long start = (ptr + huge - 1) & ~(huge - 1);
    const unsigned long long stop = (ptr + nbytes) & ~(huge - 1);
    if (stop > start) {
        unsigned char first = 1, last = 1;
        const int fresh = mincore((void *)(uintptr_t)start, page, &first) == 0 &&
                          mincore((void *)(uintptr_t)(stop - page), page, &last) == 0 &&
                          !(first & 1) && !(last & 1);
        if (fresh && madvise((void *)(uintptr_t)start, (size_t)(stop - start), MADV_HUGEPAGE) == 0)
            return PyLong_FromUnsignedLongLong(stop - start);
    }
#endif
    return PyLong_FromLong(0);
}

static PyMethodDef methods[] = {
    {"advise_huge_pages", py_advise_huge_pages, METH_VARARGS,
     "advise_huge_pages(ptr, nbytes) -> bytes advised MADV_HUGEPAGE (fresh memory only)."},
    {"fill_f32", py_fill_f32, METH_VARARGS, py_fill_f32_doc},
    {"fill_runs_f32", py_fill_runs_f32, METH_VARARGS, py_fill_runs_f32_doc},
    {"fill_f64", py_fill_f64, METH_VARARGS, py_fill_f64_doc},
    {"available_backends", py_available_backends, METH_NOARGS,
     "Backend codes this build and CPU can run, fastest first."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_noise_kernel",
    "Bit-exact re-implementation of torch's CPU normal_ for float32 (see prenoise.noise.kernel).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__noise_kernel(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    UnsupportedPosition = PyErr_NewExceptionWithDoc(
        "prenoise.noise._noise_kernel.UnsupportedPosition",
        "The generator's position is one the kernel does not model (torch may draw it).",
        PyExc_ValueError, NULL);
    if (!UnsupportedPosition ||
        PyModule_AddObjectRef(m, "UnsupportedPosition", UnsupportedPosition) < 0 ||
        PyModule_AddIntConstant(m, "BACKEND_SCALAR", BACKEND_SCALAR) < 0 ||
        PyModule_AddIntConstant(m, "BACKEND_AVX2", BACKEND_AVX2) < 0 ||
        PyModule_AddIntConstant(m, "BACKEND_AVX512", BACKEND_AVX512) < 0 ||
        PyModule_AddIntConstant(m, "BACKEND_PORTABLE", BACKEND_PORTABLE) < 0 ||
        PyModule_AddIntConstant(m, "STATE_BYTES", STATE_BYTES) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
#endif /* PRENOISE_NO_PYTHON */
