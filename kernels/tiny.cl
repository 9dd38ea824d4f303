// The smallest useful kernel, for measuring the host cost of an enqueue
// (examples/enqueue_cost.rs): each work item adds one to its element.
__kernel void tiny(__global int *data) {
    data[get_global_id(0)] += 1;
}
