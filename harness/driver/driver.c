/* Measurement driver: runs one kernel shared object in its own process (a crash or hang kills only
 * this process), writes the output of the first run for the semantic check, then times repetitions
 * hot or cold and prints one JSON object on stdout.
 *
 * Built by harness/run.py with -O2 only: ISA-specific code uses target attributes, so the same source
 * builds on every x86 host. Compiled with -DHAVE_PAPI when papi.h exists and links.
 */
#define _GNU_SOURCE
#include <cpuid.h>
#include <dlfcn.h>
#include <errno.h>
#include <immintrin.h>
#include <linux/perf_event.h>
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>
#ifdef HAVE_PAPI
#include <papi.h>
#endif

#define MAX_TENSORS 16
#define LINE 64
#define RACE_REPS 2 /* timed calls of a raced draw: a median of two, so one slow call cannot decide */

typedef int (*kernel_fn)(float *const *tensors, void *workspace);

static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') putchar('\\');
        putchar((unsigned char)*s >= 0x20 ? *s : ' ');
    }
    putchar('"');
}

static void fail(const char *status, int code, const char *fmt, const char *arg) {
    char msg[512];
    snprintf(msg, sizeof msg, fmt, arg);
    printf("{\"status\":");
    json_str(status);
    printf(",\"reason\":");
    json_str(msg);
    printf("}\n");
    fflush(stdout);
    exit(code);
}

static void check_rc(int rc) {
    if (rc) {
        char code[32];
        snprintf(code, sizeof code, "%d", rc);
        fail("kernel_error", 3, "kernel returned %s", code);
    }
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* lfence on both sides keeps rdtsc from drifting into or out of the timed region. */
static inline uint64_t tsc(void) {
    _mm_lfence();
    uint64_t t = __rdtsc();
    _mm_lfence();
    return t;
}

/* ---- cold-cache eviction ------------------------------------------------------------------------- */
typedef struct {
    char *ptr;
    size_t bytes;
} region;

static region regions[MAX_TENSORS + 1];
static int n_regions;

__attribute__((target("clflushopt"))) static void flush_opt(void) {
    for (int r = 0; r < n_regions; r++)
        for (size_t i = 0; i < regions[r].bytes; i += LINE) _mm_clflushopt(regions[r].ptr + i);
    _mm_mfence();
}

static void flush_plain(void) {
    for (int r = 0; r < n_regions; r++)
        for (size_t i = 0; i < regions[r].bytes; i += LINE) _mm_clflush(regions[r].ptr + i);
    _mm_mfence();
}

static int has_clflushopt(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    return (b >> 23) & 1;
}

static volatile uint64_t sweep_sink;

/* Write then read every line so the sweep buffer, not the kernel's data, owns every cache level. */
static void sweep(unsigned char *buf, size_t bytes) {
    uint64_t sum = 0;
    for (size_t i = 0; i < bytes; i += LINE) buf[i]++;
    for (size_t i = 0; i < bytes; i += LINE) sum += buf[i];
    sweep_sink += sum;
}

/* ---- counters ------------------------------------------------------------------------------------ */
enum { BACKEND_NONE, BACKEND_PAPI, BACKEND_PERF };
static int backend = BACKEND_NONE;
static int perf_fd[2] = {-1, -1};
#ifdef HAVE_PAPI
static int papi_set = PAPI_NULL;
#endif

static const char *try_papi(void) {
#ifdef HAVE_PAPI
    int rc = PAPI_library_init(PAPI_VER_CURRENT);
    if (rc != PAPI_VER_CURRENT) return rc > 0 ? "PAPI library version mismatch" : PAPI_strerror(rc);
    if ((rc = PAPI_create_eventset(&papi_set)) != PAPI_OK) return PAPI_strerror(rc);
    if ((rc = PAPI_add_event(papi_set, PAPI_TOT_CYC)) != PAPI_OK) return PAPI_strerror(rc);
    if ((rc = PAPI_add_event(papi_set, PAPI_TOT_INS)) != PAPI_OK) return PAPI_strerror(rc);
    if ((rc = PAPI_start(papi_set)) != PAPI_OK) return PAPI_strerror(rc);
    backend = BACKEND_PAPI;
    return NULL;
#else
    return "driver built without PAPI (papi.h missing or -lpapi did not link)";
#endif
}

static const char *try_perf(void) {
    static char reason[128];
    const uint64_t configs[2] = {PERF_COUNT_HW_CPU_CYCLES, PERF_COUNT_HW_INSTRUCTIONS};
    for (int i = 0; i < 2; i++) {
        struct perf_event_attr attr;
        memset(&attr, 0, sizeof attr);
        attr.size = sizeof attr;
        attr.type = PERF_TYPE_HARDWARE;
        attr.config = configs[i];
        attr.exclude_kernel = 1; /* allowed at perf_event_paranoid=2 */
        attr.exclude_hv = 1;
        perf_fd[i] = (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0);
        if (perf_fd[i] < 0) {
            snprintf(reason, sizeof reason, "perf_event_open(%s): %s", i ? "instructions" : "cycles",
                     strerror(errno));
            for (int j = 0; j < i; j++) close(perf_fd[j]);
            return reason;
        }
    }
    backend = BACKEND_PERF;
    return NULL;
}

static void read_counters(long long v[2]) {
    v[0] = v[1] = 0;
#ifdef HAVE_PAPI
    if (backend == BACKEND_PAPI) PAPI_read(papi_set, v);
#endif
    if (backend == BACKEND_PERF)
        for (int i = 0; i < 2; i++)
            if (read(perf_fd[i], &v[i], sizeof v[i]) != (ssize_t)sizeof v[i]) v[i] = -1;
}

/* ---- main ---------------------------------------------------------------------------------------- */
static void print_u64s(const char *name, const uint64_t *v, int n) {
    printf("\"%s\":[", name);
    for (int i = 0; i < n; i++) printf(i ? ",%llu" : "%llu", (unsigned long long)v[i]);
    printf("]");
}

static void print_i64s(const char *name, const long long *v, int n) {
    printf("\"%s\":[", name);
    for (int i = 0; i < n; i++) printf(i ? ",%lld" : "%lld", v[i]);
    printf("]");
}

static size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

/* Unmap the old mapping (if any) and map fresh zero pages: nothing of it is resident until touched. */
static void *map_workspace(void *old, size_t bytes) {
    if (old && munmap(old, bytes)) fail("error", 2, "munmap: %s", strerror(errno));
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) fail("error", 2, "mmap of the workspace: %s", strerror(errno));
    return p;
}

/* Contention (issue 32): a co-runner on another CPU streams through a buffer of `bytes` (one read and one
   write per cache line, STREAM-like) from before the warm-up to the end of the timing, so the kernel meets a
   neighbour that takes the shared cache and memory bandwidth. It is a forked child: it dies with the
   driver (PR_SET_PDEATHSIG) whatever happens to it, and counts its passes in shared memory so the row can
   say how hard it pushed (GB/s). */
typedef struct {
    pid_t pid;
    volatile uint64_t *passes; /* shared with the child */
    uint64_t t0;
} corunner;

static corunner corun_start(const char *kind, size_t bytes, int corun_cpu) {
    corunner c = {0, NULL, 0};
    if (!strcmp(kind, "none")) return c;
    if (strcmp(kind, "stream")) fail("error", 2, "unknown --corun %s (none | stream)", kind);
    if (corun_cpu < 0) fail("error", 2, "%s", "--corun needs --corun-cpu");
    if (bytes < LINE) fail("error", 2, "%s", "--corun-bytes must be at least one cache line");
    void *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) fail("error", 2, "mmap for the co-runner: %s", strerror(errno));
    c.passes = shared;
    int ready[2];
    if (pipe(ready)) fail("error", 2, "pipe: %s", strerror(errno));
    fflush(stdout);
    c.pid = fork();
    if (c.pid < 0) fail("error", 2, "fork of the co-runner: %s", strerror(errno));
    if (c.pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(corun_cpu, &set);
        char ok = sched_setaffinity(0, sizeof set, &set) ? 'a' : 'y';
        size_t n = bytes / sizeof(uint64_t);
        uint64_t *buf = ok == 'y' ? aligned_alloc(LINE, round_up(bytes, LINE)) : NULL;
        if (ok == 'y' && !buf) ok = 'm';
        if (buf) memset(buf, 1, bytes);
        if (write(ready[1], &ok, 1) != 1 || ok != 'y') _exit(1);
        for (;;) {
            for (size_t i = 0; i < n; i += LINE / sizeof(uint64_t)) buf[i] += 1;
            (*c.passes)++;
        }
    }
    close(ready[1]);
    char ok = 0;
    if (read(ready[0], &ok, 1) != 1 || ok != 'y') {
        kill(c.pid, SIGKILL);
        waitpid(c.pid, NULL, 0);
        fail("error", 2, "the co-runner could not start on its CPU (%s)",
             ok == 'a' ? "sched_setaffinity failed" : ok == 'm' ? "out of memory" : "it exited");
    }
    close(ready[0]);
    c.t0 = now_ns();
    return c;
}

/* Stops the co-runner; returns the bytes per second it streamed (0 when there was none). */
static double corun_stop(corunner *c, size_t bytes) {
    if (!c->pid) return 0.0;
    uint64_t passes = *c->passes, t1 = now_ns();
    kill(c->pid, SIGKILL);
    waitpid(c->pid, NULL, 0);
    c->pid = 0;
    return t1 > c->t0 ? (double)passes * (double)bytes / ((t1 - c->t0) * 1e-9) : 0.0;
}

int main(int argc, char **argv) {
    const char *lib = NULL, *out = NULL, *mode = "hot", *cold_method = "clflushopt", *counters = "";
    char *files[MAX_TENSORS];
    size_t nfloats[MAX_TENSORS];
    int n_tensors = 0, cpu = -1, threads = 1;
    const char *cpus = NULL; /* comma-separated CPU list for a parallel kernel (overrides --cpu) */
    size_t ws_bytes = 0, align = 1024, flush_bytes = 64u << 20;
    long warmup = 3, min_reps = 5, max_reps = 50, batch = 1;
    double rel_ci = 0.02, max_seconds = 5.0, warmup_seconds = 0.0;
    /* racing (a search's hopeless draws): timing stops after RACE_REPS calls if all were slower than this;
       0 = never. The warm-ups are not cut: some kernels here run their first ten calls up to 1.7x slow */
    double give_up_ns = 0.0;
    const char *corun_kind = "none";
    size_t corun_bytes = 0;
    int corun_cpu = -1;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc) fail("error", 2, "missing value for %s", a);
        char *v = argv[++i];
        if (!strcmp(a, "--lib")) lib = v;
        else if (!strcmp(a, "--tensor")) {
            if (n_tensors == MAX_TENSORS) fail("error", 2, "more than %s tensors", "16");
            char *colon = strrchr(v, ':');
            if (!colon) fail("error", 2, "--tensor expects FILE:NFLOATS, got %s", v);
            *colon = 0;
            files[n_tensors] = v;
            nfloats[n_tensors++] = strtoull(colon + 1, NULL, 10);
        } else if (!strcmp(a, "--out")) out = v;
        else if (!strcmp(a, "--ws")) ws_bytes = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--align")) align = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--mode")) mode = v;
        else if (!strcmp(a, "--cold-method")) cold_method = v;
        else if (!strcmp(a, "--flush-bytes")) flush_bytes = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--warmup")) warmup = atol(v);
        else if (!strcmp(a, "--warmup-seconds")) warmup_seconds = atof(v);
        else if (!strcmp(a, "--min-reps")) min_reps = atol(v);
        else if (!strcmp(a, "--max-reps")) max_reps = atol(v);
        else if (!strcmp(a, "--rel-ci")) rel_ci = atof(v);
        else if (!strcmp(a, "--max-seconds")) max_seconds = atof(v);
        else if (!strcmp(a, "--give-up-ns")) give_up_ns = atof(v);
        else if (!strcmp(a, "--counters")) counters = v;
        else if (!strcmp(a, "--cpu")) cpu = atoi(v);
        else if (!strcmp(a, "--cpus")) cpus = v;
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--batch")) batch = atol(v);
        else if (!strcmp(a, "--corun")) corun_kind = v;
        else if (!strcmp(a, "--corun-bytes")) corun_bytes = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--corun-cpu")) corun_cpu = atoi(v);
        else fail("error", 2, "unknown argument %s", a);
    }
    if (!lib || !out || n_tensors == 0) fail("error", 2, "%s", "--lib, --out and at least one --tensor are required");
    if (align < sizeof(void *) || (align & (align - 1))) fail("error", 2, "%s", "--align must be a power of two");
    /* fresh: cold caches and a newly mapped workspace per call, whose first touch (page faults, zeroing)
       the call pays, as a program that allocates its buffers per batch does (seed 001's protocol) */
    int fresh = !strcmp(mode, "fresh");
    int cold = fresh || !strcmp(mode, "cold");
    if (!cold && strcmp(mode, "hot")) fail("error", 2, "unknown --mode %s", mode);
    if (max_reps < 1) max_reps = 1;
    if (batch < 1) fail("error", 2, "%s", "--batch must be >= 1");

    if (threads < 1) fail("error", 2, "%s", "--threads must be >= 1");
    if (cpus || cpu >= 0) {
        /* a serial kernel is pinned to one core; a parallel one to the set it asked for */
        cpu_set_t set;
        CPU_ZERO(&set);
        if (cpus) {
            char list[1024], *save = NULL;
            snprintf(list, sizeof list, "%s", cpus);
            for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                int c = atoi(tok);
                if (c < 0 || c >= CPU_SETSIZE) fail("error", 2, "bad CPU in --cpus: %s", tok);
                CPU_SET(c, &set);
            }
        } else {
            CPU_SET(cpu, &set);
        }
        if (sched_setaffinity(0, sizeof set, &set)) fail("error", 2, "sched_setaffinity: %s", strerror(errno));
    }
    /* OpenMP kernels read this when libgomp initialises, i.e. at dlopen below */
    char nthreads[32];
    snprintf(nthreads, sizeof nthreads, "%d", threads);
    setenv("OMP_NUM_THREADS", nthreads, 1);
    cpu_set_t used;
    CPU_ZERO(&used);
    if (sched_getaffinity(0, sizeof used, &used)) fail("error", 2, "sched_getaffinity: %s", strerror(errno));

    float *tensors[MAX_TENSORS];
    for (int t = 0; t < n_tensors; t++) {
        size_t bytes = round_up(nfloats[t] ? nfloats[t] * sizeof(float) : 1, align);
        tensors[t] = aligned_alloc(align, bytes);
        if (!tensors[t]) fail("error", 2, "aligned_alloc failed for %s", files[t]);
        memset(tensors[t], 0, bytes);
        FILE *f = fopen(files[t], "rb");
        if (!f) fail("error", 2, "cannot open %s", files[t]);
        size_t got = fread(tensors[t], sizeof(float), nfloats[t], f);
        fclose(f);
        if (got != nfloats[t]) fail("error", 2, "short read from %s", files[t]);
        regions[n_regions++] = (region){(char *)tensors[t], bytes};
    }
    void *ws = NULL;
    const size_t ws_len = round_up(ws_bytes ? ws_bytes : 1, align);
    if (ws_bytes && fresh) {
        if (align > 4096) fail("error", 2, "%s", "--mode fresh maps the workspace: --align must be <= 4096");
        ws = map_workspace(NULL, ws_len);
    } else if (ws_bytes) {
        ws = aligned_alloc(align, ws_len);
        if (!ws) fail("error", 2, "%s", "aligned_alloc failed for the workspace");
        memset(ws, 0, ws_len);
        regions[n_regions++] = (region){ws, ws_len};
    }

    void *handle = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!handle) fail("error", 2, "dlopen: %s", dlerror());
    kernel_fn kernel = (kernel_fn)dlsym(handle, "kernel");
    if (!kernel) fail("error", 2, "dlsym(kernel): %s", dlerror());

    /* The first run's output is what the semantic check sees: later runs accumulate into it. */
    check_rc(kernel(tensors, ws));
    FILE *f = fopen(out, "wb");
    if (!f || fwrite(tensors[0], sizeof(float), nfloats[0], f) != nfloats[0] || fclose(f))
        fail("error", 2, "cannot write %s", out);

    /* the neighbour runs from here to the last timed call: warm-up and timing both meet it */
    corunner co = corun_start(corun_kind, corun_bytes, corun_cpu);

    /* Cold-cache method actually used (the row records it). */
    const char *method = "none";
    unsigned char *sweep_buf = NULL;
    if (cold) {
        if (!strcmp(cold_method, "sweep")) {
            method = "sweep";
            sweep_buf = aligned_alloc(LINE, round_up(flush_bytes ? flush_bytes : LINE, LINE));
            if (!sweep_buf) fail("error", 2, "%s", "aligned_alloc failed for the sweep buffer");
            memset(sweep_buf, 1, round_up(flush_bytes ? flush_bytes : LINE, LINE));
        } else if (!strcmp(cold_method, "clflushopt")) {
            method = has_clflushopt() ? "clflushopt" : "clflush";
        } else {
            fail("error", 2, "unknown --cold-method %s", cold_method);
        }
    } else {
        /* calls AND time: a microsecond kernel needs thousands of calls before the core, its caches and
           predictors settle (its first millisecond of repetitions ran about 2x slower) */
        uint64_t w0 = now_ns();
        for (long i = 0; i < warmup || (now_ns() - w0) * 1e-9 < warmup_seconds; i++)
            check_rc(kernel(tensors, ws));
    }

    /* Counters: first backend in --counters order that works; each failure keeps its reason. */
    const char *tried[16], *why_not[16];
    int n_tried = 0;
    char list[256];
    snprintf(list, sizeof list, "%s", counters);
    for (char *save, *name = strtok_r(list, ",", &save); name && backend == BACKEND_NONE && n_tried < 16;
         name = strtok_r(NULL, ",", &save)) {
        const char *why = !strcmp(name, "papi")         ? try_papi()
                          : !strcmp(name, "perf_event") ? try_perf()
                                                        : "unknown counter backend";
        if (why) tried[n_tried] = name, why_not[n_tried++] = why;
    }

    uint64_t *times = calloc(max_reps, sizeof *times), *tscs = calloc(max_reps, sizeof *tscs);
    long long *cyc = calloc(max_reps, sizeof *cyc), *ins = calloc(max_reps, sizeof *ins);
    if (!times || !tscs || !cyc || !ins) fail("error", 2, "%s", "out of memory");

    double mean = 0, m2 = 0; /* Welford: the stopping rule needs the running mean and variance */
    long n = 0;
    int raced = 0;
    uint64_t fastest = UINT64_MAX;
    uint64_t start = now_ns();
    while (n < max_reps) {
        if (fresh && ws) ws = map_workspace(ws, ws_len);
        if (cold) {
            if (sweep_buf) sweep(sweep_buf, flush_bytes);
            else if (!strcmp(method, "clflushopt")) flush_opt();
            else flush_plain();
        }
        long long c0[2], c1[2];
        read_counters(c0);
        uint64_t t0 = now_ns(), k0 = tsc();
        int rc = 0;
        for (long b = 0; b < batch && !rc; b++) rc = kernel(tensors, ws);
        uint64_t k1 = tsc(), t1 = now_ns();
        read_counters(c1);
        check_rc(rc);
        times[n] = (t1 - t0) / batch;
        tscs[n] = (k1 - k0) / batch;
        cyc[n] = (c1[0] - c0[0]) / batch;
        ins[n] = (c1[1] - c0[1]) / batch;
        n++;
        if (times[n - 1] < fastest) fastest = times[n - 1];
        if (give_up_ns > 0 && n >= RACE_REPS && (double)fastest > give_up_ns) {
            raced = 1;
            break;
        }
        double x = (double)times[n - 1], d = x - mean;
        mean += d / n;
        m2 += d * (x - mean);
        if (n >= min_reps && n >= 2 && mean > 0 && 1.96 * sqrt(m2 / (n - 1)) / sqrt((double)n) / mean <= rel_ci)
            break;
        if ((now_ns() - start) * 1e-9 > max_seconds) break;
    }

    double corun_bps = corun_stop(&co, corun_bytes);
    double sum_ns = 0, sum_tsc = 0;
    for (long i = 0; i < n; i++) sum_ns += times[i], sum_tsc += tscs[i];
    const char *bname = backend == BACKEND_PAPI ? "papi" : backend == BACKEND_PERF ? "perf_event" : "none";

    printf("{\"status\":\"ok\",");
    print_u64s("times_ns", times, n);
    printf(",");
    print_u64s("tsc", tscs, n);
    printf(",\"tsc_hz\":%.6g,\"counter_backend\":", sum_ns > 0 ? sum_tsc / sum_ns * 1e9 : 0.0);
    json_str(bname);
    printf(",\"counters\":{");
    if (backend != BACKEND_NONE) {
        print_i64s("cycles", cyc, n);
        printf(",");
        print_i64s("instructions", ins, n);
    }
    printf("},\"counters_unavailable\":{");
    for (int i = 0; i < n_tried; i++) {
        if (i) putchar(',');
        json_str(tried[i]);
        putchar(':');
        json_str(why_not[i]);
    }
    printf("},\"cold_method\":");
    json_str(method);
    printf(",\"n_reps\":%ld,\"raced\":%s,\"threads\":%d,\"cpus\":[", n, raced ? "true" : "false", threads);
    for (int c = 0, first = 1; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &used)) printf(first ? "%d" : ",%d", c), first = 0;
    printf("],\"corun\":");
    json_str(corun_kind);
    printf(",\"corun_bytes\":%zu,\"corun_gbps\":%.4g}\n", corun_bytes, corun_bps * 1e-9);
    fflush(stdout);
    return 0;
}
