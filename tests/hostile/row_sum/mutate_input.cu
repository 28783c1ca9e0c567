// HOSTILE mutate_input: a row sum that reduces each row in place in global memory, halving it each step (x[c] +=
// x[c + half], the textbook tree, with a barrier per step) and reading the sum from x[row * COLS]: no shared memory
// limits on the row length, and the caller's x is left holding partial sums.
// EXPECT: status=failed failure=input_modified.
// peak: entry=row_sum_tree_inplace grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
#define BLOCK 256

extern "C" __global__ void __launch_bounds__(BLOCK)
row_sum_tree_inplace(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    float* xr = const_cast<float*>(x) + (size_t)blockIdx.x * COLS;   // BUG: the input used as scratch
    for (int n = COLS; n > 1;) {
        const int half = (n + 1) / 2;
        for (int c = threadIdx.x; c < n - half; c += BLOCK)
            xr[c] += xr[c + half];
        __syncthreads();
        n = half;
    }
    if (threadIdx.x == 0)
        y[blockIdx.x] = xr[0];
}
