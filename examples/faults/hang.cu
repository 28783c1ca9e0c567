// A kernel that never ends: the worker's deadline must catch it and the next submission must work.
// `while (1);` compiles to a branch-to-self; a spin on a volatile local variable finished on an H100.
// peak: entry=k grid=(1, 1, 1) block=(32, 1, 1) shared=0
extern "C" __global__ void k(const float* A, const float* B, float* C, int M, int N, int K) {
    while (1);
}
