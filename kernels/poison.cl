// Fills recycled pool blocks with a recognisable pattern, so that reads of stale data
// show up in tests. Built from the copy embedded in the library; this file is the source.
__kernel void poison(__global uint *data, const uint pattern) {
    data[get_global_id(0)] = pattern;
}
