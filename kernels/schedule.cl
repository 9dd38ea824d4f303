// Small int kernels for the randomized schedule tests (tests/schedules.rs). The arithmetic
// is done on unsigned values, so that overflow wraps, as the tests' model does.
//
// Each work item strides over the buffer, so that the tests launch the kernels at any of a
// few global sizes whatever the buffer's length (PoCL 5 and 6 abort when one kernel runs on
// two queues at once at different widths, which the library orders around there:
// examples/pocl_dlhandle.rs).

// y[i] = a * x[i] + y[i] for i < n. `x` and `y` may be the same buffer.
__kernel void axpy_int(__global const int *x, __global int *y, const int a, const uint n) {
    for (size_t i = get_global_id(0); i < n; i += get_global_size(0)) {
        y[i] = (int)((uint)a * (uint)x[i] + (uint)y[i]);
    }
}

// data[i] += c for i < n.
__kernel void add_const(__global int *data, const int c, const uint n) {
    for (size_t i = get_global_id(0); i < n; i += get_global_size(0)) {
        data[i] = (int)((uint)data[i] + (uint)c);
    }
}
