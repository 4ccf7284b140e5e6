/* The cache probe of the drift sentinel: read bandwidth over a buffer a few times the size of L2, so it
 * lives in the shared last-level cache, the resource a neighbour on the other core takes away (the FMA
 * peak probe does not see it: a best scheme ran 2.4x slower beside a streaming neighbour while the FMA
 * peak held). Eight independent vector sums, so the loads, not the additions, set the speed.
 *
 * usage: stream BYTES PASSES [TRIALS]  -> one JSON line with GB/s per trial (each trial reads the buffer
 * PASSES times; one untimed pass first brings it into the caches)
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

__attribute__((target("avx2"), noipa)) static float sum_avx2(const float *p, size_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0, s7 = s0;
    for (size_t i = 0; i + 64 <= n; i += 64) {
        s0 = _mm256_add_ps(s0, _mm256_load_ps(p + i));
        s1 = _mm256_add_ps(s1, _mm256_load_ps(p + i + 8));
        s2 = _mm256_add_ps(s2, _mm256_load_ps(p + i + 16));
        s3 = _mm256_add_ps(s3, _mm256_load_ps(p + i + 24));
        s4 = _mm256_add_ps(s4, _mm256_load_ps(p + i + 32));
        s5 = _mm256_add_ps(s5, _mm256_load_ps(p + i + 40));
        s6 = _mm256_add_ps(s6, _mm256_load_ps(p + i + 48));
        s7 = _mm256_add_ps(s7, _mm256_load_ps(p + i + 56));
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)),
                             _mm256_add_ps(_mm256_add_ps(s4, s5), _mm256_add_ps(s6, s7)));
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s BYTES PASSES [TRIALS]\n", argv[0]);
        return 2;
    }
    size_t n = (size_t)atol(argv[1]) / sizeof(float) / 64 * 64;
    long passes = atol(argv[2]);
    int trials = argc > 3 ? atoi(argv[3]) : 5;
    if (n < 64 || passes < 1 || trials < 1) {
        fprintf(stderr, "BYTES must be at least 256, PASSES and TRIALS positive\n");
        return 2;
    }
    float *p = aligned_alloc(64, n * sizeof(float));
    if (!p) {
        fprintf(stderr, "cannot allocate %zu bytes\n", n * sizeof(float));
        return 3;
    }
    for (size_t i = 0; i < n; i++) p[i] = 1e-3f * (float)(i % 97);
    volatile float sink = sum_avx2(p, n);
    printf("{\"bytes\":%zu,\"passes\":%ld,\"trials\":[", n * sizeof(float), passes);
    for (int t = 0; t < trials; t++) {
        double t0 = now();
        for (long k = 0; k < passes; k++) sink += sum_avx2(p, n);
        double dt = now() - t0;
        printf(t ? ",%.3f" : "%.3f", (double)passes * n * sizeof(float) / dt * 1e-9);
    }
    printf("]}\n");
    free(p);
    return sink == 12345.0f;
}
