// sum[i] = a[i] + b[i] for i < n.
__kernel void add(__global const float *a, __global const float *b,
                  __global float *sum, const uint n) {
    size_t i = get_global_id(0);
    if (i < n) {
        sum[i] = a[i] + b[i];
    }
}
