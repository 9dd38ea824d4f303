// Kernels that keep the device busy for a chosen time, for tests and the tour.

// Each work item iterates a cheap recurrence `iters` times and stores the result, so the
// compiler cannot drop the loop. Run time grows linearly with `iters`.
__kernel void spin(__global float *data, const uint iters) {
    size_t i = get_global_id(0);
    float x = data[i];
    for (uint k = 0; k < iters; ++k) {
        x = x * 0.999999f + 0.000001f;
    }
    data[i] = x;
}

// data[i] += 1 for i < n.
__kernel void increment(__global int *data, const uint n) {
    size_t i = get_global_id(0);
    if (i < n) {
        data[i] += 1;
    }
}

// out[i] = in[i] * factor for i < n.
__kernel void scale(__global const float *in, __global float *out, const float factor,
                    const uint n) {
    size_t i = get_global_id(0);
    if (i < n) {
        out[i] = in[i] * factor;
    }
}

// Sums `in` per work group through local memory; out[group] = the group's sum.
__kernel void group_sum(__global const int *in, __global int *out, __local int *scratch) {
    size_t lid = get_local_id(0);
    scratch[lid] = in[get_global_id(0)];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) {
        int total = 0;
        for (size_t k = 0; k < get_local_size(0); ++k) {
            total += scratch[k];
        }
        out[get_group_id(0)] = total;
    }
}

// spin on data[first + i]: one part of a buffer passed whole.
__kernel void spin_from(__global float *data, const uint first, const uint iters) {
    size_t i = first + get_global_id(0);
    float x = data[i];
    for (uint k = 0; k < iters; ++k) {
        x = x * 0.999999f + 0.000001f;
    }
    data[i] = x;
}
