/*
 * cl-calls: counts the OpenCL calls a program makes and the host time spent in each.
 *
 * A profile that works on any driver, NVIDIA's included (no driver symbols needed). The
 * library links against libOpenCL.so.1 and defines the entry points below; every other
 * entry point resolves through it to the ICD loader. opencl3 loads the OpenCL library at
 * run time from OPENCL_DYLIB_PATH when that is set, so:
 *
 *   make cl-calls
 *   OPENCL_DYLIB_PATH=$PWD/target/libcl-calls.so \
 *       cargo run --release --example enqueue_cost -- --only B:lib --n 100000
 *
 * prints a table to stderr at exit. Programs that link libOpenCL directly can use
 * LD_PRELOAD instead. Each wrapped entry point forwards to the next definition (the ICD
 * loader) and adds the call's wall time, measured with CLOCK_MONOTONIC, to its total; the
 * clock reads cost some 40 ns per call, counted in the totals. Entry points not listed are
 * not counted.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int32_t cl_int;
typedef uint32_t cl_uint;
typedef uint64_t cl_ulong;
typedef void *cl_ptr;

struct counter {
    const char *name;
    atomic_uint_fast64_t calls;
    atomic_uint_fast64_t ns;
};

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#define MAX_COUNTERS 64
static struct counter *counters[MAX_COUNTERS];
static atomic_int counter_count;

static void enrol(struct counter *c) {
    int at = atomic_fetch_add(&counter_count, 1);
    if (at < MAX_COUNTERS) counters[at] = c;
}

static void *next(const char *name) {
    void *f = dlsym(RTLD_NEXT, name);
    if (!f) {
        fprintf(stderr, "cl-calls: %s not found after the preload\n", name);
        abort();
    }
    return f;
}

/* WRAP(ret, name, (params), (args)): defines `name`, counting and timing it. */
#define WRAP(ret, name, params, args)                                                  \
    static struct counter counter_##name = {#name, 0, 0};                            \
    ret name params {                                                                \
        static ret(*real) params;                                                    \
        static atomic_int enrolled;                                                  \
        if (!real) real = (ret(*) params)next(#name);                                \
        if (!atomic_exchange(&enrolled, 1)) enrol(&counter_##name);                  \
        uint64_t t0 = now_ns();                                                      \
        ret result_ = real args;                                                     \
        atomic_fetch_add(&counter_##name.ns, now_ns() - t0);                         \
        atomic_fetch_add(&counter_##name.calls, 1);                                  \
        return result_;                                                              \
    }

WRAP(cl_int, clEnqueueNDRangeKernel,
     (cl_ptr q, cl_ptr k, cl_uint d, const size_t *o, const size_t *g, const size_t *l,
      cl_uint n, const cl_ptr *w, cl_ptr *e),
     (q, k, d, o, g, l, n, w, e))
WRAP(cl_int, clSetKernelArg, (cl_ptr k, cl_uint i, size_t s, const void *v), (k, i, s, v))
WRAP(cl_int, clFlush, (cl_ptr q), (q))
WRAP(cl_int, clFinish, (cl_ptr q), (q))
WRAP(cl_int, clGetEventInfo, (cl_ptr e, cl_uint p, size_t s, void *v, size_t *r),
     (e, p, s, v, r))
WRAP(cl_int, clRetainEvent, (cl_ptr e), (e))
WRAP(cl_int, clReleaseEvent, (cl_ptr e), (e))
WRAP(cl_int, clWaitForEvents, (cl_uint n, const cl_ptr *e), (n, e))
WRAP(cl_ptr, clCreateUserEvent, (cl_ptr c, cl_int *err), (c, err))
WRAP(cl_int, clSetUserEventStatus, (cl_ptr e, cl_int s), (e, s))
WRAP(cl_int, clSetEventCallback,
     (cl_ptr e, cl_int t, void (*f)(cl_ptr, cl_int, void *), void *u), (e, t, f, u))
WRAP(cl_int, clEnqueueMarkerWithWaitList, (cl_ptr q, cl_uint n, const cl_ptr *w, cl_ptr *e),
     (q, n, w, e))
WRAP(cl_ptr, clCreateBuffer, (cl_ptr c, cl_ulong f, size_t s, void *h, cl_int *err),
     (c, f, s, h, err))
WRAP(cl_int, clReleaseMemObject, (cl_ptr m), (m))
WRAP(cl_int, clRetainMemObject, (cl_ptr m), (m))
WRAP(cl_int, clSetMemObjectDestructorCallback,
     (cl_ptr m, void (*f)(cl_ptr, void *), void *u), (m, f, u))
WRAP(cl_int, clEnqueueWriteBuffer,
     (cl_ptr q, cl_ptr m, cl_uint b, size_t o, size_t s, const void *p, cl_uint n,
      const cl_ptr *w, cl_ptr *e),
     (q, m, b, o, s, p, n, w, e))
WRAP(cl_int, clEnqueueReadBuffer,
     (cl_ptr q, cl_ptr m, cl_uint b, size_t o, size_t s, void *p, cl_uint n, const cl_ptr *w,
      cl_ptr *e),
     (q, m, b, o, s, p, n, w, e))
WRAP(cl_int, clEnqueueFillBuffer,
     (cl_ptr q, cl_ptr m, const void *pat, size_t ps, size_t o, size_t s, cl_uint n,
      const cl_ptr *w, cl_ptr *e),
     (q, m, pat, ps, o, s, n, w, e))

__attribute__((destructor)) static void report(void) {
    int n = atomic_load(&counter_count);
    if (n > MAX_COUNTERS) n = MAX_COUNTERS;
    fprintf(stderr, "cl-calls: %-34s %12s %12s %10s\n", "entry point", "calls", "total ms",
            "ns/call");
    for (int i = 0; i < n; i++) {
        struct counter *c = counters[i];
        uint64_t calls = atomic_load(&c->calls), ns = atomic_load(&c->ns);
        if (!calls) continue;
        fprintf(stderr, "cl-calls: %-34s %12llu %12.3f %10.1f\n", c->name,
                (unsigned long long)calls, ns / 1e6, (double)ns / calls);
    }
}
