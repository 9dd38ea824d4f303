// Small int kernels for the randomized schedule tests (tests/schedules.rs). The arithmetic
// is done on unsigned values, so that overflow wraps, as the tests' model does.

// y[i] = a * x[i] + y[i] for i < n. `x` and `y` may be the same buffer.
__kernel void axpy_int(__global const int *x, __global int *y, const int a, const uint n) {
    size_t i = get_global_id(0);
    if (i < n) {
        y[i] = (int)((uint)a * (uint)x[i] + (uint)y[i]);
    }
}

// data[i] += c for i < n.
__kernel void add_const(__global int *data, const int c, const uint n) {
    size_t i = get_global_id(0);
    if (i < n) {
        data[i] = (int)((uint)data[i] + (uint)c);
    }
}
