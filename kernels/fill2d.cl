// out[y * width + x] = y * 1000 + x over a 2-D range of width x height items.
__kernel void fill2d(__global int *out, const uint width) {
    size_t x = get_global_id(0);
    size_t y = get_global_id(1);
    out[y * width + x] = (int)(y * 1000 + x);
}
