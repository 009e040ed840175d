// Truth corpus, GPU part: float16 row sums. No headers (cuda_fp16.h needs the CCCL headers, which NVRTC setups do
// not always find): a float16 is its 16-bit pattern, converted and added with the PTX instructions
// cvt.f32.f16, cvt.rn.f16.f32 and add.rn.f16 (PTX ISA, "Half Precision Floating Point Instructions").
// One block of 256 threads per row.

#define ROW_THREADS 256

__device__ __forceinline__ float h2f(unsigned short h) {
    float f;
    asm("{ .reg .b16 t; mov.b16 t, %1; cvt.f32.f16 %0, t; }" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ unsigned short f2h(float f) {
    unsigned short h;
    asm("{ .reg .b16 t; cvt.rn.f16.f32 t, %1; mov.b16 %0, t; }" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ unsigned short hadd(unsigned short a, unsigned short b) {
    unsigned short r;
    asm("{ .reg .f16 x, y, z; mov.b16 x, %1; mov.b16 y, %2; add.rn.f16 z, x, y; mov.b16 %0, z; }"
        : "=h"(r) : "h"(a), "h"(b));
    return r;
}

extern "C" {

// Correct: float16 I/O, float32 accumulation (what PyTorch's CUDA sum does).
__global__ void rowsum_f16_floatacc(const unsigned short* x, unsigned short* y, long long N, long long sxm,
                                    long long sxn) {
    __shared__ float part[ROW_THREADS];
    const unsigned short* row = x + (long long)blockIdx.x * sxm;
    float acc = 0.0f;
    for (long long c = threadIdx.x; c < N; c += blockDim.x) acc += h2f(row[c * sxn]);
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) y[blockIdx.x] = f2h(part[0]);
}

// BUG (float16 accumulation): every partial sum and tree level is a half add (__hadd), rounded to 11 bits each time.
__global__ void rowsum_f16_halfacc(const unsigned short* x, unsigned short* y, long long N, long long sxm,
                                   long long sxn) {
    __shared__ unsigned short part[ROW_THREADS];
    const unsigned short* row = x + (long long)blockIdx.x * sxm;
    unsigned short acc = 0;  // +0.0 in float16
    for (long long c = threadIdx.x; c < N; c += blockDim.x) acc = hadd(acc, row[c * sxn]);
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] = hadd(part[threadIdx.x], part[threadIdx.x + s]);
        __syncthreads();
    }
    if (threadIdx.x == 0) y[blockIdx.x] = part[0];
}

}  // extern "C"
