// An illegal-address kernel: it poisons the CUDA context, so the worker must be replaced.
// peak: entry=k grid=(1, 1, 1) block=(32, 1, 1) shared=0
extern "C" __global__ void k(const float* A, const float* B, float* C, int M, int N, int K) {
    float* wild = (float*)0x10;
    wild[threadIdx.x * 1000000] = A[0];
}
