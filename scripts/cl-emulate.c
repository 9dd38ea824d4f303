/*
 * cl-emulate: an OpenCL library that makes the driver under it act as drivers the project
 * cannot run act, as their own sources say they do (the table in docs/guide/10-driver-notes.md
 * names the sources).
 *
 * Built by `make emulate` as target/emulate/libOpenCL.so.1. A program that loads
 * "libOpenCL.so.1" at run time (cl-lifetime does, through opencl3's `dynamic` loading) picks it
 * up with LD_LIBRARY_PATH=$PWD/target/emulate; it opens the system's ICD loader (the path
 * found at build time, or CL_EMULATE_LOADER) and forwards every OpenCL entry point to it.
 * CL_EMULATE names the profile (several may be given, separated by commas):
 *
 *   mesa         current Mesa rusticl: once a command of a queue has failed, every later
 *                command of that queue fails with the same status (rusticl's queue worker
 *                keeps `last_err`: src/gallium/frontends/rusticl/core/queue.rs). Platform
 *                "rusticl", vendor "Mesa/X.org".
 *   amd          AMD's ROCm OpenCL: the out-of-order bit of a queue is dropped silently and
 *                CL_QUEUE_PROPERTIES reads back without it (ROCm/clr, HostQueue).
 *                Platform "AMD Accelerated Parallel Processing".
 *   intel-gpu    Intel's GPU runtime: a command enqueued behind an event that has already
 *                failed never runs, nor anything behind it on its queue (intel/compute-runtime,
 *                EventBuilder::finalize and Event::addChild). Platform "Intel(R) OpenCL Graphics".
 *   intel-cpu    Intel's CPU runtime (measured): a command that failed because an event of its
 *                wait list did reads CL_COMPLETE (clWaitForEvents still reports the failure),
 *                and a command behind such a command (in its wait list, or before it on its
 *                in-order queue) runs, on whatever the skipped command left, and completes
 *                (issue 48: a kernel reading a buffer whose gated fill failed ran on the
 *                never-written input). A command behind a failed user event does not run.
 *                Platform "Intel(R) OpenCL".
 *   failed-profiling
 *                profiling of a command that failed returns CL_SUCCESS and zeros
 *                (intel/compute-runtime counts a negative status as completed; current rusticl
 *                returns its stored times, 0 when never set). Platform "Intel(R) OpenCL Graphics".
 *   unchecked-overlap
 *                a copy between two memory objects of one buffer (a sub-buffer and its parent,
 *                or two sub-buffers of it) whose bytes overlap runs, where OpenCL says
 *                CL_MEM_COPY_OVERLAP: the driver refuses overlap only within one memory object
 *                (Intel's runtime and NVIDIA's, measured: the project's issue 48). PoCL refuses
 *                it, so the emulation runs it as two copies through a buffer of its own.
 *                Platform "NVIDIA CUDA".
 *
 * Under intel-gpu, a command with several dependencies (or one that had failed) waits on one
 * user event standing for them, set as the driver would unblock it: at once when the program
 * sets a user event, else by a thread of the emulation within about 20 µs of a command's end.
 * Under intel-cpu likewise, for every command with a dependency that has not ended: the user
 * event fails when a user event among them failed, and is set complete once they have all
 * ended otherwise, failed or not. Its in-order queues are out-of-order queues of PoCL's (PoCL
 * fails the commands behind a failed one on an in-order queue), each command waiting on the one
 * before it that way; CL_QUEUE_PROPERTIES reads back as asked.
 * CL_EMULATE_DEBUG=1 prints each such enqueue's wait list and statuses.
 *
 * What it cannot show: the timing of a real driver (a poisoned command fails at its enqueue,
 * not when rusticl's worker reaches it), and a failure that happens between the status read at
 * an enqueue and the driver's own enqueue is not seen by that enqueue (the driver under it
 * decides). A non-blocking map on a poisoned queue is made on a queue of the emulation's own
 * behind a failed user event (a mapping pointer must come back), and that mapping is never
 * unmapped by the driver.
 *
 * x86-64 and AArch64 (every entry point not changed here is a jump to the loader's).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int32_t cl_int;
typedef uint32_t cl_uint;
typedef uint64_t cl_ulong;
typedef cl_ulong cl_bitfield;
typedef void *cl_ptr;
typedef cl_ptr cl_event;
typedef cl_ptr cl_command_queue;
typedef cl_ptr cl_context;

#define CL_SUCCESS 0
#define CL_COMPLETE 0
#define CL_MAP_FAILURE (-12)
#define CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST (-14)
#define CL_INVALID_VALUE (-30)
#define CL_PROFILING_INFO_NOT_AVAILABLE (-7)
#define CL_PLATFORM_NAME 0x0902
#define CL_PLATFORM_VENDOR 0x0903
#define CL_DEVICE_VENDOR 0x102C
#define CL_QUEUE_CONTEXT 0x1090
#define CL_QUEUE_DEVICE 0x1091
#define CL_QUEUE_REFERENCE_COUNT 0x1092
#define CL_QUEUE_PROPERTIES 0x1093
#define CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE (1 << 0)
#define CL_EVENT_COMMAND_QUEUE 0x11D0
#define CL_EVENT_COMMAND_TYPE 0x11D1
#define CL_EVENT_REFERENCE_COUNT 0x11D2
#define CL_EVENT_COMMAND_EXECUTION_STATUS 0x11D3
#define CL_COMMAND_USER 0x1204

/* ---------------------------------------------------------------- the loader under us */

#define FORWARDED(X)                                                                          \
    X(clBuildProgram) X(clCloneKernel) X(clCompileProgram) X(clCreateBuffer)                  \
    X(clCreateBufferWithProperties) X(clCreateContext) X(clCreateContextFromType)             \
    X(clCreateEventFromEGLSyncKHR) X(clCreateEventFromGLsyncKHR) X(clCreateFromEGLImageKHR)    \
    X(clCreateFromGLBuffer) X(clCreateFromGLRenderbuffer) X(clCreateFromGLTexture)            \
    X(clCreateFromGLTexture2D) X(clCreateFromGLTexture3D) X(clCreateImage) X(clCreateImage2D)  \
    X(clCreateImage3D) X(clCreateImageWithProperties) X(clCreateKernel)                       \
    X(clCreateKernelsInProgram) X(clCreatePipe) X(clCreateProgramWithBinary)                  \
    X(clCreateProgramWithBuiltInKernels) X(clCreateProgramWithIL) X(clCreateProgramWithSource) \
    X(clCreateSampler) X(clCreateSamplerWithProperties) X(clCreateSubBuffer)                  \
    X(clCreateSubDevices) X(clCreateSubDevicesEXT) X(clEnqueueAcquireEGLObjectsKHR)           \
    X(clEnqueueAcquireGLObjects) X(clEnqueueCopyBufferToImage) X(clEnqueueCopyImage)          \
    X(clEnqueueCopyImageToBuffer) X(clEnqueueFillImage) X(clEnqueueMapImage)                  \
    X(clEnqueueNativeKernel) X(clEnqueueReadImage) X(clEnqueueReleaseEGLObjectsKHR)           \
    X(clEnqueueReleaseGLObjects) X(clEnqueueSVMMigrateMem) X(clEnqueueWaitForEvents)          \
    X(clEnqueueWriteImage) X(clEnqueueBarrier) X(clEnqueueMarker) X(clFinish) X(clFlush)      \
    X(clGetContextInfo) X(clGetDeviceAndHostTimer) X(clGetDeviceIDs)                          \
    X(clGetExtensionFunctionAddress) X(clGetExtensionFunctionAddressForPlatform)              \
    X(clGetGLContextInfoKHR) X(clGetGLObjectInfo) X(clGetGLTextureInfo) X(clGetHostTimer)     \
    X(clGetImageInfo) X(clGetKernelArgInfo) X(clGetKernelInfo) X(clGetKernelSubGroupInfo)     \
    X(clGetKernelSubGroupInfoKHR) X(clGetKernelWorkGroupInfo) X(clGetMemObjectInfo)           \
    X(clGetPipeInfo) X(clGetPlatformIDs) X(clGetProgramBuildInfo) X(clGetProgramInfo)         \
    X(clGetSamplerInfo) X(clGetSupportedImageFormats) X(clLinkProgram) X(clReleaseContext)    \
    X(clReleaseDevice) X(clReleaseDeviceEXT) X(clReleaseKernel) X(clReleaseMemObject)         \
    X(clReleaseProgram) X(clReleaseSampler) X(clRetainCommandQueue) X(clRetainContext)        \
    X(clRetainDevice) X(clRetainDeviceEXT) X(clRetainEvent) X(clRetainKernel)                 \
    X(clRetainMemObject) X(clRetainProgram) X(clRetainSampler) X(clSVMAlloc) X(clSVMFree)     \
    X(clSetCommandQueueProperty) X(clSetContextDestructorCallback)                            \
    X(clSetDefaultDeviceCommandQueue) X(clSetEventCallback) X(clSetKernelArg)                 \
    X(clSetKernelArgSVMPointer) X(clSetKernelExecInfo) X(clSetMemObjectDestructorCallback)    \
    X(clSetProgramReleaseCallback) X(clSetProgramSpecializationConstant)                      \
    X(clUnloadCompiler) X(clUnloadPlatformCompiler) X(clWaitForEvents) \
    X(clCreateUserEvent)

#define CHANGED(X)                                                                            \
    X(clGetPlatformInfo) X(clGetDeviceInfo) X(clCreateCommandQueue)                           \
    X(clCreateCommandQueueWithProperties) X(clReleaseCommandQueue)   \
    X(clGetEventInfo) X(clGetEventProfilingInfo) X(clReleaseEvent) X(clEnqueueNDRangeKernel)  \
    X(clEnqueueTask) X(clEnqueueReadBuffer) X(clEnqueueWriteBuffer) X(clEnqueueReadBufferRect) \
    X(clEnqueueWriteBufferRect) X(clEnqueueCopyBuffer) X(clEnqueueCopyBufferRect)             \
    X(clEnqueueFillBuffer) X(clEnqueueMapBuffer) X(clEnqueueUnmapMemObject)                   \
    X(clEnqueueMarkerWithWaitList) X(clEnqueueBarrierWithWaitList)                            \
    X(clEnqueueMigrateMemObjects) X(clEnqueueSVMMemcpy) X(clEnqueueSVMMemFill)                \
    X(clEnqueueSVMMap) X(clEnqueueSVMUnmap) X(clEnqueueSVMFree) X(clSetUserEventStatus)       \
    X(clGetCommandQueueInfo)

/* The loader's entry points; the forwarded ones are reached by a jump, whatever their type. */
#define POINTER(name) __attribute__((visibility("hidden"))) void *real_##name;
FORWARDED(POINTER)
CHANGED(POINTER)

#if defined(__x86_64__)
#define TRAMPOLINE(name)                                                                      \
    __asm__(".text\n.globl " #name "\n.type " #name ",@function\n" #name ":\n"                \
            "\tjmp *real_" #name "(%rip)\n.size " #name ", .-" #name "\n");
#elif defined(__aarch64__)
#define TRAMPOLINE(name)                                                                      \
    __asm__(".text\n.globl " #name "\n.type " #name ",%function\n" #name ":\n"                \
            "\tadrp x16, real_" #name "\n\tldr x16, [x16, :lo12:real_" #name "]\n"            \
            "\tbr x16\n.size " #name ", .-" #name "\n");
#else
#error "cl-emulate forwards entry points on x86-64 and AArch64 only"
#endif
FORWARDED(TRAMPOLINE)

#ifndef REAL_LOADER
#define REAL_LOADER "/usr/lib/x86_64-linux-gnu/libOpenCL.so.1"
#endif

enum { MESA = 1, AMD = 2, INTEL_GPU = 4, INTEL_CPU = 8, FAILED_PROFILING = 16, UNCHECKED_OVERLAP = 32 };
static int profile;
static const char *platform_name, *platform_vendor;

/* Each profile: its name in CL_EMULATE, and the platform name and vendor its driver gives. */
static const struct known {
    const char *name;
    int bit;
    const char *platform, *vendor;
} known[] = {
    {"mesa", MESA, "rusticl", "Mesa/X.org"},
    {"amd", AMD, "AMD Accelerated Parallel Processing", "Advanced Micro Devices, Inc."},
    {"intel-gpu", INTEL_GPU, "Intel(R) OpenCL Graphics", "Intel(R) Corporation"},
    {"intel-cpu", INTEL_CPU, "Intel(R) OpenCL", "Intel(R) Corporation"},
    {"failed-profiling", FAILED_PROFILING, "Intel(R) OpenCL Graphics", "Intel(R) Corporation"},
    {"unchecked-overlap", UNCHECKED_OVERLAP, "NVIDIA CUDA", "NVIDIA Corporation"},
    {NULL, 0, NULL, NULL},
};

/* Marks this library, so that it never takes itself for the loader. */
__attribute__((visibility("default"))) int cl_emulate_marker;

__attribute__((constructor)) static void open_loader(void) {
    const char *path = getenv("CL_EMULATE_LOADER");
    if (!path || !*path) path = REAL_LOADER;
    void *loader = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!loader || dlsym(loader, "cl_emulate_marker")) {
        fprintf(stderr, "cl-emulate: cannot open the OpenCL loader %s (%s); set CL_EMULATE_LOADER\n",
                path, loader ? "it is cl-emulate itself" : dlerror());
        abort();
    }
#define RESOLVE(name) real_##name = dlsym(loader, #name);
    FORWARDED(RESOLVE)
    CHANGED(RESOLVE)
    const char *p = getenv("CL_EMULATE");
    char list[256];
    snprintf(list, sizeof list, "%s", p ? p : "");
    for (char *save, *tok = strtok_r(list, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        if (!strcmp(tok, "none")) continue;
        const struct known *k = known;
        while (k->name && strcmp(tok, k->name)) k++;
        if (!k->name) {
            fprintf(stderr, "cl-emulate: unknown profile \"%s\" in CL_EMULATE\n", tok);
            abort();
        }
        profile |= k->bit;
        platform_name = k->platform;
        platform_vendor = k->vendor;
    }
}

#define REAL(name, type) ((type)real_##name)
typedef cl_int (*info_fn)(cl_ptr, cl_uint, size_t, void *, size_t *);

static cl_int status_of(cl_event e) {
    cl_int s = CL_COMPLETE;
    if (REAL(clGetEventInfo, info_fn)(e, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof s, &s, NULL))
        return CL_COMPLETE;
    return s;
}

static cl_uint type_of(cl_event e) {
    cl_uint type = 0;
    REAL(clGetEventInfo, info_fn)(e, CL_EVENT_COMMAND_TYPE, sizeof type, &type, NULL);
    return type;
}

static cl_uint count_of(cl_ptr object, cl_uint param, info_fn get) {
    cl_uint n = 0;
    get(object, param, sizeof n, &n, NULL);
    return n;
}

/* ---------------------------------------------------------------- renamed platform */

static cl_int answer_string(const char *s, size_t size, void *value, size_t *size_ret) {
    size_t len = strlen(s) + 1;
    if (size_ret) *size_ret = len;
    if (value) {
        if (size < len) return CL_INVALID_VALUE;
        memcpy(value, s, len);
    }
    return CL_SUCCESS;
}

cl_int clGetPlatformInfo(cl_ptr platform, cl_uint param, size_t size, void *value, size_t *ret) {
    if (platform_name && param == CL_PLATFORM_NAME)
        return answer_string(platform_name, size, value, ret);
    if (platform_vendor && param == CL_PLATFORM_VENDOR)
        return answer_string(platform_vendor, size, value, ret);
    return REAL(clGetPlatformInfo, info_fn)(platform, param, size, value, ret);
}

cl_int clGetDeviceInfo(cl_ptr device, cl_uint param, size_t size, void *value, size_t *ret) {
    if (platform_vendor && param == CL_DEVICE_VENDOR)
        return answer_string(platform_vendor, size, value, ret);
    return REAL(clGetDeviceInfo, info_fn)(device, param, size, value, ret);
}

/* ---------------------------------------------------------------- queues (amd, mesa, intel-cpu) */

static void forget_queue(cl_command_queue q);
static void order_queue(cl_command_queue q, int in_order);

cl_command_queue clCreateCommandQueue(cl_context c, cl_ptr d, cl_bitfield props, cl_int *err) {
    if (profile & AMD) props &= ~(cl_bitfield)CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE;
    int in_order = !(props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE);
    if (profile & INTEL_CPU) props |= CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE;
    cl_command_queue q = REAL(clCreateCommandQueue, cl_command_queue (*)(cl_context, cl_ptr,
                                                                         cl_bitfield, cl_int *))(
        c, d, props, err);
    forget_queue(q);
    order_queue(q, in_order);
    return q;
}

cl_command_queue clCreateCommandQueueWithProperties(cl_context c, cl_ptr d, const cl_ulong *props,
                                                    cl_int *err) {
    cl_ulong copy[64];
    int in_order = 1;
    if ((profile & (AMD | INTEL_CPU))) {
        size_t n = 0;
        int has_properties = 0;
        while (props && props[n] && n + 4 < 64) {
            copy[n] = props[n];
            copy[n + 1] = props[n + 1];
            if (props[n] == CL_QUEUE_PROPERTIES) {
                has_properties = 1;
                if (profile & AMD)
                    copy[n + 1] &= ~(cl_ulong)CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE;
                in_order = !(copy[n + 1] & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE);
                if (profile & INTEL_CPU) copy[n + 1] |= CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE;
            }
            n += 2;
        }
        if (profile & INTEL_CPU && !has_properties) {
            copy[n++] = CL_QUEUE_PROPERTIES;
            copy[n++] = CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE;
        }
        copy[n] = 0;
        props = copy;
    }
    cl_command_queue q = REAL(clCreateCommandQueueWithProperties,
                              cl_command_queue (*)(cl_context, cl_ptr, const cl_ulong *,
                                                   cl_int *))(c, d, props, err);
    forget_queue(q);
    order_queue(q, in_order);
    return q;
}

/* A queue's state under `mesa`: the events of its commands not yet seen ended, and the status
 * of the first failure seen (0: none). Commands enqueued on a poisoned queue do not run: each
 * gets a user event set to that status, answering with its command's type and queue. */
struct queue_state {
    cl_command_queue queue;
    cl_command_queue side; /* where a map on the poisoned queue goes to fail */
    cl_int poison;
    cl_event *events;
    size_t len, cap;
};
struct fake {
    cl_event event;
    cl_command_queue queue;
    cl_uint type;
};
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct queue_state *queues;
static size_t queues_len, queues_cap;
static struct fake *fakes;
static size_t fakes_len, fakes_cap;
/* Under `intel-cpu`: the commands enqueued with a wait list, with that list (retained): one
 * that failed because an event of its own wait list did reads CL_COMPLETE, as measured; one
 * that failed for another reason (PoCL fails the commands behind a failed one on an in-order
 * queue, where Intel's runtime runs them) reads its failure. */
struct dependent {
    cl_event event;
    cl_uint n;
    cl_event *wait; /* retained until the command is first seen ended, then let go */
    int by_dependency;
};
static struct dependent *dependents;
static size_t dependents_len, dependents_cap;
static void forget_event(cl_event e);
/* Under `intel-gpu`: a user event standing for a command's dependencies, set by the joiner
 * thread when they have ended (never, where one had failed before the command came and the
 * others completed: the command is held for ever, as the driver holds it). */
struct join {
    cl_event event;
    cl_uint n;
    cl_event *deps; /* retained */
    int held;
    int runs_behind_failed; /* intel-cpu: complete once they ended, unless a user event failed */
    /* intel-cpu: the command behind the event (retained), kept until the event is set: it
     * may read CL_COMPLETE, and be released by the program, while PoCL, inside the set,
     * still notifies it (PoCL 3.1 then aborts in pocl_lock_events_inorder). */
    cl_event target;
};
/* Under `intel-cpu`: the in-order queues the program asked for, made out of order in PoCL,
 * with the last command enqueued on each (retained), which the next one waits on. */
struct ordered {
    cl_command_queue queue;
    cl_event last;
};
static struct ordered *ordered;
static size_t ordered_len, ordered_cap;
static struct join *joins;
static size_t joins_len, joins_cap;
static pthread_cond_t joins_added = PTHREAD_COND_INITIALIZER;
static pthread_t joiner;
static int joiner_started;

#define GROW(array, len, cap)                                                                 \
    do {                                                                                      \
        if (len == cap) {                                                                     \
            cap = cap ? 2 * cap : 16;                                                         \
            void *grown = realloc(array, cap * sizeof *(array));                              \
            if (!grown) abort();                                                              \
            array = grown;                                                                    \
        }                                                                                     \
    } while (0)

static struct queue_state *state_of(cl_command_queue q) {
    for (size_t i = 0; i < queues_len; i++)
        if (queues[i].queue == q) return &queues[i];
    GROW(queues, queues_len, queues_cap);
    struct queue_state *s = &queues[queues_len++];
    memset(s, 0, sizeof *s);
    s->queue = q;
    return s;
}

typedef cl_int (*release_fn)(cl_ptr);

/* Reads the statuses of the queue's commands: the first failure poisons it; ended ones go. */
static void scan(struct queue_state *s) {
    size_t kept = 0;
    for (size_t i = 0; i < s->len; i++) {
        cl_int st = status_of(s->events[i]);
        if (st < 0 && !s->poison) s->poison = st;
        if (st <= CL_COMPLETE)
            REAL(clReleaseEvent, release_fn)(s->events[i]);
        else
            s->events[kept++] = s->events[i];
    }
    s->len = kept;
}

/* Drops the state kept for `q`, whose handle is new (a released queue's may be reused). */
static void forget_queue(cl_command_queue q) {
    if (!q || !(profile & MESA)) return;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < queues_len; i++) {
        if (queues[i].queue != q) continue;
        for (size_t j = 0; j < queues[i].len; j++)
            REAL(clReleaseEvent, release_fn)(queues[i].events[j]);
        if (queues[i].side) REAL(clReleaseCommandQueue, release_fn)(queues[i].side);
        free(queues[i].events);
        queues[i] = queues[--queues_len];
        break;
    }
    pthread_mutex_unlock(&lock);
}

cl_int clReleaseCommandQueue(cl_command_queue q) {
    if (profile & (MESA | INTEL_CPU) &&
        count_of(q, CL_QUEUE_REFERENCE_COUNT, REAL(clGetCommandQueueInfo, info_fn)) == 1) {
        forget_queue(q);
        order_queue(q, 0);
    }
    return REAL(clReleaseCommandQueue, release_fn)(q);
}

/* intel-cpu: the ordering kept for `q`, if the program asked for it in order. Under `lock`. */
static struct ordered *ordered_of(cl_command_queue q) {
    for (size_t i = 0; i < ordered_len; i++)
        if (ordered[i].queue == q) return &ordered[i];
    return NULL;
}

/* intel-cpu: drops what was kept for `q` (a released queue's handle may be reused), and keeps
 * its order from now on if the program asked for an in-order queue. */
static void order_queue(cl_command_queue q, int in_order) {
    if (!q || !(profile & INTEL_CPU)) return;
    pthread_mutex_lock(&lock);
    struct ordered *o = ordered_of(q);
    if (o) {
        if (o->last) REAL(clReleaseEvent, release_fn)(o->last);
        *o = ordered[--ordered_len];
    }
    if (in_order) {
        GROW(ordered, ordered_len, ordered_cap);
        ordered[ordered_len++] = (struct ordered){q, NULL};
    }
    pthread_mutex_unlock(&lock);
}

cl_int clGetCommandQueueInfo(cl_command_queue q, cl_uint param, size_t size, void *value,
                             size_t *ret) {
    cl_int rc = REAL(clGetCommandQueueInfo, info_fn)(q, param, size, value, ret);
    if (profile & INTEL_CPU && rc == CL_SUCCESS && param == CL_QUEUE_PROPERTIES && value) {
        pthread_mutex_lock(&lock);
        int in_order = ordered_of(q) != NULL;
        pthread_mutex_unlock(&lock);
        if (in_order) *(cl_bitfield *)value &= ~(cl_bitfield)CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE;
    }
    return rc;
}

/* ---------------------------------------------------------------- events */

static int fake_index(cl_event e) {
    for (size_t i = 0; i < fakes_len; i++)
        if (fakes[i].event == e) return (int)i;
    return -1;
}

cl_int clGetEventInfo(cl_event e, cl_uint param, size_t size, void *value, size_t *ret) {
    if (profile & MESA && (param == CL_EVENT_COMMAND_TYPE || param == CL_EVENT_COMMAND_QUEUE)) {
        pthread_mutex_lock(&lock);
        int i = fake_index(e);
        struct fake f = i >= 0 ? fakes[i] : (struct fake){0};
        pthread_mutex_unlock(&lock);
        if (i >= 0) {
            size_t need = param == CL_EVENT_COMMAND_TYPE ? sizeof(cl_uint) : sizeof(cl_ptr);
            if (ret) *ret = need;
            if (value) {
                if (size < need) return CL_INVALID_VALUE;
                if (param == CL_EVENT_COMMAND_TYPE)
                    memcpy(value, &f.type, need);
                else
                    memcpy(value, &f.queue, need);
            }
            return CL_SUCCESS;
        }
    }
    cl_int rc = REAL(clGetEventInfo, info_fn)(e, param, size, value, ret);
    if (profile & INTEL_CPU && rc == CL_SUCCESS && param == CL_EVENT_COMMAND_EXECUTION_STATUS &&
        value && *(cl_int *)value <= CL_COMPLETE) {
        /* Ended: whether an event of its wait list failed is read once, and the list goes
         * (a command that keeps its wait list would be another driver's behaviour). */
        int by_dependency = 0;
        pthread_mutex_lock(&lock);
        for (size_t i = 0; i < dependents_len; i++) {
            struct dependent *d = &dependents[i];
            if (d->event != e) continue;
            for (cl_uint j = 0; j < d->n; j++) {
                if (status_of(d->wait[j]) < 0) d->by_dependency = 1;
                REAL(clReleaseEvent, release_fn)(d->wait[j]);
            }
            d->n = 0;
            by_dependency = d->by_dependency;
            break;
        }
        pthread_mutex_unlock(&lock);
        cl_uint type = 0;
        REAL(clGetEventInfo, info_fn)(e, CL_EVENT_COMMAND_TYPE, sizeof type, &type, NULL);
        if (*(cl_int *)value < 0 && type != CL_COMMAND_USER && by_dependency)
            *(cl_int *)value = CL_COMPLETE;
    }
    return rc;
}

cl_int clGetEventProfilingInfo(cl_event e, cl_uint param, size_t size, void *value, size_t *ret) {
    cl_int rc = REAL(clGetEventProfilingInfo, info_fn)(e, param, size, value, ret);
    if (profile & FAILED_PROFILING && rc != CL_SUCCESS && status_of(e) < 0) {
        if (ret) *ret = sizeof(cl_ulong);
        if (value) {
            if (size < sizeof(cl_ulong)) return CL_INVALID_VALUE;
            memset(value, 0, sizeof(cl_ulong));
        }
        return CL_SUCCESS;
    }
    return rc;
}

cl_int clReleaseEvent(cl_event e) {
    if (profile & (MESA | INTEL_CPU)) {
        pthread_mutex_lock(&lock);
        if (count_of(e, CL_EVENT_REFERENCE_COUNT, REAL(clGetEventInfo, info_fn)) == 1)
            forget_event(e);
        pthread_mutex_unlock(&lock);
    }
    return REAL(clReleaseEvent, release_fn)(e);
}

/* ---------------------------------------------------------------- intel-gpu's joins */

typedef cl_int (*set_status_fn)(cl_event, cl_int);

/* Sets each join whose dependencies have ended; returns how many it set. Called under
 * `lock`. */
static size_t settle_joins(void) {
    size_t kept = 0, set = 0;
    for (size_t i = 0; i < joins_len; i++) {
        struct join *j = &joins[i];
        cl_int failure = 0;
        int ended = 1;
        for (cl_uint k = 0; k < j->n; k++) {
            cl_int st = status_of(j->deps[k]);
            /* intel-cpu: only a failed user event keeps a command from running. */
            if (st < 0 && !failure &&
                (!j->runs_behind_failed || type_of(j->deps[k]) == CL_COMMAND_USER))
                failure = st;
            if (st > CL_COMPLETE) ended = 0;
        }
        if (!failure && !ended) {
            joins[kept++] = *j;
            continue;
        }
        if (failure || !j->held)
            REAL(clSetUserEventStatus, set_status_fn)(j->event, failure ? failure : CL_COMPLETE);
        for (cl_uint k = 0; k < j->n; k++) REAL(clReleaseEvent, release_fn)(j->deps[k]);
        free(j->deps);
        if (j->target) REAL(clReleaseEvent, release_fn)(j->target);
        /* A held command's event stays unset: the user event is never released. */
        if (failure || !j->held) REAL(clReleaseEvent, release_fn)(j->event);
        set++;
    }
    joins_len = kept;
    return set;
}

/* The joiner thread: settles joins every 20 µs while one is waiting (for commands that end
 * on the device). A user event set by the program settles them at once, in its thread, as
 * the driver propagates a user event's status inside clSetUserEventStatus. */
static void *join_loop(void *unused) {
    (void)unused;
    pthread_mutex_lock(&lock);
    for (;;) {
        while (!joins_len) pthread_cond_wait(&joins_added, &lock);
        settle_joins();
        if (joins_len) {
            pthread_mutex_unlock(&lock);
            struct timespec pause = {0, 20000};
            nanosleep(&pause, NULL);
            pthread_mutex_lock(&lock);
        }
    }
    return NULL;
}

cl_int clSetUserEventStatus(cl_event e, cl_int status) {
    cl_int rc = REAL(clSetUserEventStatus, set_status_fn)(e, status);
    if (profile & (INTEL_GPU | INTEL_CPU)) {
        pthread_mutex_lock(&lock);
        while (joins_len && settle_joins()) {
        }
        pthread_mutex_unlock(&lock);
    }
    return rc;
}

static void add_join(struct join j) {
    pthread_mutex_lock(&lock);
    if (!joiner_started) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&joiner, &attr, join_loop, NULL)) abort();
        joiner_started = 1;
    }
    GROW(joins, joins_len, joins_cap);
    joins[joins_len++] = j;
    pthread_cond_signal(&joins_added);
    pthread_mutex_unlock(&lock);
}

/* ---------------------------------------------------------------- enqueues */

typedef cl_event (*user_event_fn)(cl_context, cl_int *);

/* One enqueue as the profiles change it. */
struct call;
static void run_behind_failed(struct call *c, cl_command_queue q, cl_uint *n, const cl_event **w,
                              cl_event **e, int blocking);
struct call {
    struct queue_state *state; /* mesa: the queue's state, locked from begin to end */
    cl_event local;            /* the event asked for where the caller asked for none */
    cl_event *event;           /* where the driver writes the command's event */
    cl_event *wait;            /* intel-gpu: the wait list with the hold added */
    cl_int rc;                 /* the result, where the command did not reach the driver */
    struct join join;          /* intel-gpu: given to the joiner once the driver has it */
    cl_event *asked;           /* intel-cpu: where the caller asked for the event, if it did */
    int ordered;               /* intel-cpu: its queue's order is kept by the emulation */
    cl_command_queue queue;
    cl_uint n;                 /* intel-cpu: the command's own wait list */
    const cl_event *wait_list;
};

/* intel-cpu: the command waits, through one user event of the emulation's, on what it depends
 * on and has not ended: its wait list and the command before it on an in-order queue. Only a
 * user event among them that fails keeps it from running: behind a command that failed, it
 * runs, as Intel's CPU runtime runs it (the failed command itself reads CL_COMPLETE). */
static void run_behind_failed(struct call *c, cl_command_queue q, cl_uint *n, const cl_event **w,
                              cl_event **e, int blocking) {
    pthread_mutex_lock(&lock);
    struct ordered *o = ordered_of(q);
    cl_event last = o ? o->last : NULL;
    if (last) REAL(clRetainEvent, release_fn)(last);
    pthread_mutex_unlock(&lock);
    if (o) {
        c->ordered = 1;
        c->queue = q;
        if (!*e) *e = &c->local;
        c->event = *e;
    }
    cl_uint total = *n + (last != NULL);
    if (!total) return;
    cl_event *deps = malloc(total * sizeof(cl_event));
    if (!deps) abort();
    cl_uint kept = 0;
    for (cl_uint i = 0; i < total; i++) {
        cl_event dep = i < *n ? (*w)[i] : last;
        cl_int st = status_of(dep);
        if (st > CL_COMPLETE || (st < 0 && type_of(dep) == CL_COMMAND_USER)) {
            REAL(clRetainEvent, release_fn)(dep);
            deps[kept++] = dep;
        }
    }
    if (last) REAL(clReleaseEvent, release_fn)(last);
    cl_context ctx = NULL;
    REAL(clGetCommandQueueInfo, info_fn)(q, CL_QUEUE_CONTEXT, sizeof ctx, &ctx, NULL);
    cl_event joined = kept ? REAL(clCreateUserEvent, user_event_fn)(ctx, NULL) : NULL;
    if (!joined) {
        for (cl_uint i = 0; i < kept; i++) REAL(clReleaseEvent, release_fn)(deps[i]);
        free(deps);
        *n = 0;
        *w = NULL;
        return;
    }
    struct join j = {joined, kept, deps, 0, 1, NULL};
    /* A blocking call returns only once the joiner has set the event: it gets it now. */
    if (blocking)
        add_join(j);
    else
        c->join = j;
    c->wait = malloc(sizeof(cl_event));
    if (!c->wait) abort();
    c->wait[0] = joined;
    *w = c->wait;
    *n = 1;
}

/* Before an enqueue on `q` of a command of `type`: returns 1 when the command must not reach
 * the driver (its queue is poisoned; `c->rc` says what the call returns), else 0, with the
 * wait list and event pointer to give the driver in *n, *w, *e. */
static int begin(struct call *c, cl_command_queue q, cl_uint type, cl_uint *n, const cl_event **w,
                 cl_event **e, int blocking) {
    memset(c, 0, sizeof *c);
    c->asked = *e;
    c->n = *n;
    c->wait_list = *w;
    if (profile & INTEL_CPU) run_behind_failed(c, q, n, w, e, blocking);
    if (profile & INTEL_GPU) {
        /* The driver's own counting of a command's dependencies: one that had failed before
         * the command came never signals it; the others unblock it when they end, failing it
         * when one failed. PoCL gets one user event standing for them all (the emulation's
         * joiner thread sets it), which also keeps PoCL from finishing a command twice when
         * two of its dependencies end together. */
        cl_uint pending = 0, failed = 0;
        for (cl_uint i = 0; i < *n; i++) {
            if (status_of((*w)[i]) < 0)
                failed++;
            else
                pending++;
        }
        if (getenv("CL_EMULATE_DEBUG")) {
            fprintf(stderr, "cl-emulate: type %x:", type);
            for (cl_uint i = 0; i < *n; i++) fprintf(stderr, " %p=%d", (*w)[i], status_of((*w)[i]));
            fprintf(stderr, "\n");
        }
        if (failed || pending > 1) {
            cl_context ctx = NULL;
            REAL(clGetCommandQueueInfo, info_fn)(q, CL_QUEUE_CONTEXT, sizeof ctx, &ctx, NULL);
            cl_event joined = REAL(clCreateUserEvent, user_event_fn)(ctx, NULL);
            if (joined) {
                struct join j = {joined, 0, malloc((pending ? pending : 1) * sizeof(cl_event)),
                                 failed > 0, 0, NULL};
                if (!j.deps) abort();
                for (cl_uint i = 0; i < *n; i++) {
                    if (status_of((*w)[i]) < 0) continue;
                    REAL(clRetainEvent, release_fn)((*w)[i]);
                    j.deps[j.n++] = (*w)[i];
                }
                /* A blocking call returns only once the joiner has set the event: it gets
                 * it now (the driver may then meet it already failed, and PoCL would run
                 * the command: a blocking call behind a failed event is rare). */
                if (blocking)
                    add_join(j);
                else
                    c->join = j;
                c->wait = malloc(sizeof(cl_event));
                if (!c->wait) abort();
                c->wait[0] = joined;
                *w = c->wait;
                *n = 1;
            }
        }
    }
    if (!(profile & MESA)) return 0;
    pthread_mutex_lock(&lock);
    struct queue_state *s = state_of(q);
    scan(s);
    if (s->poison) {
        cl_int poison = s->poison;
        cl_context ctx = NULL;
        REAL(clGetCommandQueueInfo, info_fn)(q, CL_QUEUE_CONTEXT, sizeof ctx, &ctx, NULL);
        cl_event failed = NULL;
        if (*e) {
            failed = REAL(clCreateUserEvent, user_event_fn)(ctx, NULL);
            if (failed) {
                REAL(clSetUserEventStatus, set_status_fn)(failed, poison);
                forget_event(failed);
                GROW(fakes, fakes_len, fakes_cap);
                fakes[fakes_len++] = (struct fake){failed, q, type};
            }
            **e = failed;
        }
        pthread_mutex_unlock(&lock);
        free(c->wait);
        if (c->join.event) add_join(c->join);
        c->rc = blocking ? CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST : CL_SUCCESS;
        return 1;
    }
    c->state = s;
    if (!*e) *e = &c->local;
    c->event = *e;
    return 0;
}

/* Drops what is kept for `e`: at its last release, or when a new event takes the address of a
 * released one (a driver may still hold a reference when the program releases its last).
 * Called under `lock`. */
static void forget_event(cl_event e) {
    int i = fake_index(e);
    if (i >= 0) fakes[i] = fakes[--fakes_len];
    for (size_t j = 0; j < dependents_len; j++)
        if (dependents[j].event == e) {
            for (cl_uint k = 0; k < dependents[j].n; k++)
                REAL(clReleaseEvent, release_fn)(dependents[j].wait[k]);
            free(dependents[j].wait);
            dependents[j] = dependents[--dependents_len];
            break;
        }
}

/* After the driver's enqueue returned `rc`: the command's event joins its queue's. */
static cl_int end(struct call *c, cl_int rc) {
    /* After the enqueue: the joiner may set the event at once, and the driver must have the
     * command behind it by then (PoCL runs a command behind an event already failed). */
    if (c->join.event) {
        cl_event target = c->asked && *c->asked ? *c->asked : c->event ? *c->event : NULL;
        if (profile & INTEL_CPU && rc == CL_SUCCESS && target) {
            REAL(clRetainEvent, release_fn)(target);
            c->join.target = target;
        }
        add_join(c->join);
    }
    if (rc == CL_SUCCESS && c->asked && *c->asked && profile & (MESA | INTEL_CPU)) {
        if (!c->state) pthread_mutex_lock(&lock);
        forget_event(*c->asked);
        if (!c->state) pthread_mutex_unlock(&lock);
    }
    if (profile & INTEL_CPU && rc == CL_SUCCESS && c->n && c->asked && *c->asked) {
        struct dependent d = {*c->asked, c->n, malloc(c->n * sizeof(cl_event)), 0};
        if (!d.wait) abort();
        for (cl_uint i = 0; i < c->n; i++) {
            d.wait[i] = c->wait_list[i];
            REAL(clRetainEvent, release_fn)(d.wait[i]);
        }
        pthread_mutex_lock(&lock);
        GROW(dependents, dependents_len, dependents_cap);
        dependents[dependents_len++] = d;
        pthread_mutex_unlock(&lock);
    }
    if (c->ordered) {
        pthread_mutex_lock(&lock);
        struct ordered *o = ordered_of(c->queue);
        cl_event mine = rc == CL_SUCCESS ? *c->event : NULL;
        if (o && mine) {
            if (o->last) REAL(clReleaseEvent, release_fn)(o->last);
            /* The caller's event gets a reference of ours; one asked for by the emulation is
             * ours already. */
            if (c->event != &c->local) REAL(clRetainEvent, release_fn)(mine);
            o->last = mine;
        } else if (mine && c->event == &c->local) {
            REAL(clReleaseEvent, release_fn)(mine);
        }
        pthread_mutex_unlock(&lock);
    }
    free(c->wait);
    if (!c->state) return rc;
    if (rc == CL_SUCCESS && *c->event) {
        cl_event mine = *c->event;
        if (c->event != &c->local) REAL(clRetainEvent, release_fn)(mine);
        GROW(c->state->events, c->state->len, c->state->cap);
        c->state->events[c->state->len++] = mine;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

#define ENQUEUE(name, type, blocking, params, args)                                           \
    cl_int name params {                                                                      \
        struct call c;                                                                        \
        if (begin(&c, q, type, &n, &w, &e, blocking)) return c.rc;                            \
        return end(&c, REAL(name, cl_int(*) params) args);                                    \
    }

typedef cl_ptr mem;
ENQUEUE(clEnqueueNDRangeKernel, 0x11F0, 0,
        (cl_command_queue q, cl_ptr k, cl_uint d, const size_t *o, const size_t *g, const size_t *l,
         cl_uint n, const cl_event *w, cl_event *e),
        (q, k, d, o, g, l, n, w, e))
ENQUEUE(clEnqueueTask, 0x11F1, 0, (cl_command_queue q, cl_ptr k, cl_uint n, const cl_event *w,
                                   cl_event *e),
        (q, k, n, w, e))
ENQUEUE(clEnqueueReadBuffer, 0x11F3, b,
        (cl_command_queue q, mem m, cl_uint b, size_t o, size_t s, void *p, cl_uint n,
         const cl_event *w, cl_event *e),
        (q, m, b, o, s, p, n, w, e))
ENQUEUE(clEnqueueWriteBuffer, 0x11F4, b,
        (cl_command_queue q, mem m, cl_uint b, size_t o, size_t s, const void *p, cl_uint n,
         const cl_event *w, cl_event *e),
        (q, m, b, o, s, p, n, w, e))
ENQUEUE(clEnqueueReadBufferRect, 0x1201, b,
        (cl_command_queue q, mem m, cl_uint b, const size_t *bo, const size_t *ho,
         const size_t *r, size_t brp, size_t bsp, size_t hrp, size_t hsp, void *p, cl_uint n,
         const cl_event *w, cl_event *e),
        (q, m, b, bo, ho, r, brp, bsp, hrp, hsp, p, n, w, e))
ENQUEUE(clEnqueueWriteBufferRect, 0x1202, b,
        (cl_command_queue q, mem m, cl_uint b, const size_t *bo, const size_t *ho,
         const size_t *r, size_t brp, size_t bsp, size_t hrp, size_t hsp, const void *p,
         cl_uint n, const cl_event *w, cl_event *e),
        (q, m, b, bo, ho, r, brp, bsp, hrp, hsp, p, n, w, e))

#define CL_MEM_READ_WRITE (1 << 0)
#define CL_MEM_ASSOCIATED_MEMOBJECT 0x1107
#define CL_MEM_OFFSET 0x1108
typedef cl_int (*copy_fn)(cl_command_queue, mem, mem, size_t, size_t, size_t, cl_uint,
                          const cl_event *, cl_event *);
typedef mem (*create_buffer_fn)(cl_context, cl_bitfield, size_t, void *, cl_int *);

/* The buffer `m` is part of (itself, or a sub-buffer's parent), and where `m` starts in it. */
static mem whole_of(mem m, size_t *at) {
    mem parent = NULL;
    *at = 0;
    if (REAL(clGetMemObjectInfo, info_fn)(m, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof parent, &parent,
                                          NULL) != CL_SUCCESS || !parent)
        return m;
    REAL(clGetMemObjectInfo, info_fn)(m, CL_MEM_OFFSET, sizeof *at, at, NULL);
    return parent;
}

/* unchecked-overlap: a copy between two memory objects whose bytes of one buffer overlap runs,
 * staged through a buffer of the emulation's own (released at once: the driver keeps it until
 * the copies end). Returns 1 when it enqueued the copy (or failed to), with the status in *rc. */
static int copy_unchecked(cl_command_queue q, mem s, mem d, size_t so, size_t dof, size_t sz,
                          cl_uint n, const cl_event *w, cl_event *e, cl_int *rc) {
    if (!(profile & UNCHECKED_OVERLAP) || s == d) return 0;
    size_t s_at, d_at;
    if (whole_of(s, &s_at) != whole_of(d, &d_at)) return 0;
    size_t from = s_at + so, to = d_at + dof;
    if (!(from < to + sz && to < from + sz)) return 0;
    cl_context ctx = NULL;
    REAL(clGetCommandQueueInfo, info_fn)(q, CL_QUEUE_CONTEXT, sizeof ctx, &ctx, NULL);
    mem staged = REAL(clCreateBuffer, create_buffer_fn)(ctx, CL_MEM_READ_WRITE, sz, NULL, rc);
    if (!staged) return 1;
    cl_event first = NULL;
    *rc = REAL(clEnqueueCopyBuffer, copy_fn)(q, s, staged, so, 0, sz, n, w, &first);
    if (*rc == CL_SUCCESS) {
        *rc = REAL(clEnqueueCopyBuffer, copy_fn)(q, staged, d, 0, dof, sz, 1, &first, e);
        REAL(clReleaseEvent, release_fn)(first);
    }
    REAL(clReleaseMemObject, release_fn)(staged);
    return 1;
}

cl_int clEnqueueCopyBuffer(cl_command_queue q, mem s, mem d, size_t so, size_t dof, size_t sz,
                           cl_uint n, const cl_event *w, cl_event *e) {
    struct call c;
    if (begin(&c, q, 0x11F5, &n, &w, &e, 0)) return c.rc;
    cl_int rc = CL_SUCCESS;
    if (!copy_unchecked(q, s, d, so, dof, sz, n, w, e, &rc))
        rc = REAL(clEnqueueCopyBuffer, copy_fn)(q, s, d, so, dof, sz, n, w, e);
    return end(&c, rc);
}
ENQUEUE(clEnqueueCopyBufferRect, 0x1203, 0,
        (cl_command_queue q, mem s, mem d, const size_t *so, const size_t *dof, const size_t *r,
         size_t srp, size_t ssp, size_t drp, size_t dsp, cl_uint n, const cl_event *w,
         cl_event *e),
        (q, s, d, so, dof, r, srp, ssp, drp, dsp, n, w, e))
ENQUEUE(clEnqueueFillBuffer, 0x1207, 0,
        (cl_command_queue q, mem m, const void *pat, size_t ps, size_t o, size_t s, cl_uint n,
         const cl_event *w, cl_event *e),
        (q, m, pat, ps, o, s, n, w, e))
ENQUEUE(clEnqueueUnmapMemObject, 0x11FD, 0,
        (cl_command_queue q, mem m, void *p, cl_uint n, const cl_event *w, cl_event *e),
        (q, m, p, n, w, e))
ENQUEUE(clEnqueueMarkerWithWaitList, 0x11FE, 0,
        (cl_command_queue q, cl_uint n, const cl_event *w, cl_event *e), (q, n, w, e))
ENQUEUE(clEnqueueBarrierWithWaitList, 0x1205, 0,
        (cl_command_queue q, cl_uint n, const cl_event *w, cl_event *e), (q, n, w, e))
ENQUEUE(clEnqueueMigrateMemObjects, 0x1206, 0,
        (cl_command_queue q, cl_uint nm, const mem *ms, cl_bitfield f, cl_uint n,
         const cl_event *w, cl_event *e),
        (q, nm, ms, f, n, w, e))
ENQUEUE(clEnqueueSVMMemcpy, 0x120A, b,
        (cl_command_queue q, cl_uint b, void *d, const void *s, size_t sz, cl_uint n,
         const cl_event *w, cl_event *e),
        (q, b, d, s, sz, n, w, e))
ENQUEUE(clEnqueueSVMMemFill, 0x120B, 0,
        (cl_command_queue q, void *p, const void *pat, size_t ps, size_t sz, cl_uint n,
         const cl_event *w, cl_event *e),
        (q, p, pat, ps, sz, n, w, e))
ENQUEUE(clEnqueueSVMMap, 0x120C, b,
        (cl_command_queue q, cl_uint b, cl_bitfield f, void *p, size_t sz, cl_uint n,
         const cl_event *w, cl_event *e),
        (q, b, f, p, sz, n, w, e))
ENQUEUE(clEnqueueSVMUnmap, 0x120D, 0,
        (cl_command_queue q, void *p, cl_uint n, const cl_event *w, cl_event *e), (q, p, n, w, e))
ENQUEUE(clEnqueueSVMFree, 0x1209, 0,
        (cl_command_queue q, cl_uint np, void **ps, void (*f)(cl_command_queue, cl_uint, void **,
                                                             void *),
         void *u, cl_uint n, const cl_event *w, cl_event *e),
        (q, np, ps, f, u, n, w, e))

typedef cl_command_queue (*create_queue_fn)(cl_context, cl_ptr, cl_bitfield, cl_int *);
typedef void *(*map_fn)(cl_command_queue, mem, cl_uint, cl_bitfield, size_t, size_t, cl_uint,
                        const cl_event *, cl_event *, cl_int *);

static void *map_failing(cl_command_queue q, mem m, cl_bitfield f, size_t o, size_t s,
                         cl_event *e, cl_int *err) {
    cl_context ctx = NULL;
    cl_ptr device = NULL;
    REAL(clGetCommandQueueInfo, info_fn)(q, CL_QUEUE_CONTEXT, sizeof ctx, &ctx, NULL);
    REAL(clGetCommandQueueInfo, info_fn)(q, CL_QUEUE_DEVICE, sizeof device, &device, NULL);
    pthread_mutex_lock(&lock);
    struct queue_state *st = state_of(q);
    if (!st->side) st->side = REAL(clCreateCommandQueue, create_queue_fn)(ctx, device, 0, NULL);
    cl_command_queue side = st->side;
    cl_int poison = st->poison;
    pthread_mutex_unlock(&lock);
    cl_event gate = REAL(clCreateUserEvent, user_event_fn)(ctx, NULL);
    if (!side || !gate) {
        if (err) *err = CL_MAP_FAILURE;
        return NULL;
    }
    cl_event mine = NULL;
    void *p = REAL(clEnqueueMapBuffer, map_fn)(side, m, 0, f, o, s, 1, &gate, &mine, err);
    REAL(clSetUserEventStatus, set_status_fn)(gate, poison);
    REAL(clReleaseEvent, release_fn)(gate);
    if (mine) {
        pthread_mutex_lock(&lock);
        forget_event(mine);
        GROW(fakes, fakes_len, fakes_cap);
        fakes[fakes_len++] = (struct fake){mine, q, 0x11FB};
        pthread_mutex_unlock(&lock);
        if (e)
            *e = mine;
        else
            REAL(clReleaseEvent, release_fn)(mine);
    }
    return p;
}

void *clEnqueueMapBuffer(cl_command_queue q, mem m, cl_uint b, cl_bitfield f, size_t o, size_t s,
                         cl_uint n, const cl_event *w, cl_event *e, cl_int *err) {
    struct call c;
    cl_event *asked = e;
    if (begin(&c, q, 0x11FB, &n, &w, &e, b)) {
        if (e && *e) {
            clReleaseEvent(*e);
            *e = NULL;
        }
        if (b) {
            if (err) *err = c.rc;
            return NULL;
        }
        /* Non-blocking: a mapping that fails as the command would, made on a queue of the
         * emulation's own behind a user event set to the queue's failure. */
        return map_failing(q, m, f, o, s, asked, err);
    }
    cl_int rc = CL_SUCCESS;
    void *p = REAL(clEnqueueMapBuffer, void *(*)(cl_command_queue, mem, cl_uint, cl_bitfield,
                                                 size_t, size_t, cl_uint, const cl_event *,
                                                 cl_event *, cl_int *))(q, m, b, f, o, s, n, w,
                                                                          e, &rc);
    rc = end(&c, rc);
    if (err) *err = rc;
    return p;
}
