/* FMA-throughput peak of one core: independent accumulator chains, enough to cover FMA latency times
 * the number of FMA units, each a separate local so the compiler keeps all of them in registers
 * (harness/calibrate.py checks the generated loop has no memory operand: a spilling loop measures
 * the load/store ports instead, e.g. 66 GFLOP/s on a 174 GFLOP/s core).
 *
 * usage: peak avx2|avx512 ITERS [TRIALS]  -> one JSON line with GFLOP/s per trial
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FMA8(x) x(0) x(1) x(2) x(3) x(4) x(5) x(6) x(7)
#define FMA12(x) FMA8(x) x(8) x(9) x(10) x(11)
#define FMA24(x) FMA12(x) x(12) x(13) x(14) x(15) x(16) x(17) x(18) x(19) x(20) x(21) x(22) x(23)

#define AVX2_ACCS 12
#define AVX512_ACCS 24

#define DECL256(i) __m256 c##i = _mm256_set1_ps(seed * (i + 1));
#define STEP256(i) c##i = _mm256_fmadd_ps(a, b, c##i);
#define SUM256(i) s = _mm256_add_ps(s, c##i);

/* noipa: the functions are pure, so gcc would otherwise call them once for all trials.
 * a*b+c with a*b tiny: values stay normal and finite for any iteration count (no denormal stalls). */
__attribute__((target("avx2,fma"), noipa)) float peak_avx2(long iters, float seed) {
    __m256 a = _mm256_set1_ps(seed * 1e-3f), b = _mm256_set1_ps(seed * 1e-3f);
    FMA12(DECL256)
    for (long it = 0; it < iters; it++) {
        FMA12(STEP256)
    }
    __m256 s = _mm256_setzero_ps();
    FMA12(SUM256)
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}

#define DECL512(i) __m512 c##i = _mm512_set1_ps(seed * (i + 1));
#define STEP512(i) c##i = _mm512_fmadd_ps(a, b, c##i);
#define SUM512(i) s = _mm512_add_ps(s, c##i);

__attribute__((target("avx512f"), noipa)) float peak_avx512(long iters, float seed) {
    __m512 a = _mm512_set1_ps(seed * 1e-3f), b = _mm512_set1_ps(seed * 1e-3f);
    FMA24(DECL512)
    for (long it = 0; it < iters; it++) {
        FMA24(STEP512)
    }
    __m512 s = _mm512_setzero_ps();
    FMA24(SUM512)
    return _mm512_reduce_add_ps(s);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s avx2|avx512 ITERS [TRIALS]\n", argv[0]);
        return 2;
    }
    long iters = atol(argv[2]);
    int trials = argc > 3 ? atoi(argv[3]) : 7;
    int avx512 = !strcmp(argv[1], "avx512");
    if (!avx512 && strcmp(argv[1], "avx2")) {
        fprintf(stderr, "unknown ISA %s\n", argv[1]);
        return 2;
    }
    double flops_per_iter = avx512 ? AVX512_ACCS * 16 * 2 : AVX2_ACCS * 8 * 2;
    float seed = 1.0f + (float)argc * 1e-6f; /* unknown at compile time: nothing is constant-folded */
    volatile float sink = 0;
    /* One untimed trial first: the core leaves its idle frequency and the wide units power up. */
    sink += avx512 ? peak_avx512(iters, seed) : peak_avx2(iters, seed);
    printf("{\"isa\":\"%s\",\"iters\":%ld,\"trials\":[", argv[1], iters);
    for (int t = 0; t < trials; t++) {
        double t0 = now();
        sink += avx512 ? peak_avx512(iters, seed) : peak_avx2(iters, seed);
        double dt = now() - t0;
        printf(t ? ",%.4f" : "%.4f", flops_per_iter * iters / dt * 1e-9);
    }
    printf("]}\n");
    return sink == 12345.0f; /* uses the result */
}
