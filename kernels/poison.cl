// Fills recycled pool blocks with a recognisable pattern, so that reads of stale data
// show up in tests. Built from the copy embedded in the library; this file is the source.
//
// Launched at one global size for every block (each work item strides over the block):
// PoCL 5 and 6 abort when one kernel runs twice at once at different widths, and pools of
// several contexts share the kernel (examples/pocl_dlhandle.rs).
__kernel void poison(__global uint *data, const uint pattern, const ulong n) {
    for (size_t i = get_global_id(0); i < n; i += get_global_size(0)) {
        data[i] = pattern;
    }
}
