// Four kernels, each slow for one planted reason, for `opgate explain` (src/opgate/gpu/limiter.py):
//   barrier_bound      one warp per block does all the work between __syncthreads(); 31 warps wait at the barrier
//   latency_bound      each warp follows a chain of dependent loads (idx = next[idx]) through an L2-resident table
//   register_bound     ~170 live registers per thread (launch bounds allow 255): one 256-thread block per SM
//   bank_conflicts     each lane reads a column of an unpadded [32][32] float tile: 32-way bank conflicts
// Build and run (scripts/gpu/toolchain.sh profiles each under ncu):
//   nvcc -O3 -arch=sm_90 -o planted_limiters tests/data/toolchain/planted_limiters.cu
//   ./planted_limiters barrier_bound|latency_bound|register_bound|bank_conflicts|all
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CHECK(call)                                                                              \
    do {                                                                                         \
        cudaError_t err_ = (call);                                                               \
        if (err_ != cudaSuccess) {                                                               \
            std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
            std::exit(1);                                                                        \
        }                                                                                        \
    } while (0)

// Warp 0 runs a long dependent FMA chain; the other 31 warps of the 1024-thread block only wait for it.
__global__ void __launch_bounds__(1024) barrier_bound(const float* __restrict__ in, float* __restrict__ out, int rounds) {
    __shared__ float handoff[32];
    float x = in[blockIdx.x * blockDim.x + threadIdx.x];
    if (threadIdx.x < 32) {
        handoff[threadIdx.x] = 0.0f;
    }
    __syncthreads();
    for (int r = 0; r < rounds; ++r) {
        if (threadIdx.x < 32) {
            float acc = x + handoff[threadIdx.x];
            for (int i = 0; i < 512; ++i) {
                acc = fmaf(acc, 0.999f, 0.001f);
            }
            handoff[threadIdx.x] = acc;
        }
        __syncthreads();
        x += handoff[threadIdx.x & 31];
        __syncthreads();
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = x;
}

// All lanes of a warp follow the same chain (one sector per load): nothing to overlap, the warp waits on
// every load. The 16 MiB table stays in the H200's 50 MiB L2 after the first touch.
__global__ void latency_bound(const unsigned* __restrict__ next, unsigned* __restrict__ out, int steps, unsigned mask) {
    unsigned warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    unsigned idx = (warp * 2654435761u) & mask;
    for (int s = 0; s < steps; ++s) {
        idx = next[idx];
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = idx;
}

// NVALS values stay live across the whole loop (fully unrolled, no dynamic indexing, so no spills): ptxas
// needs about NVALS + 10 registers per thread, and 256 threads x ~170 registers leave room for one block.
// Each pass is one chain of dependent FMAs, so two warps per scheduler cannot hide the FMA latency.
#define NVALS 160
__global__ void __launch_bounds__(256, 1) register_bound(const float* __restrict__ in, float* __restrict__ out, int iters) {
    float v[NVALS];
    int t = blockIdx.x * blockDim.x + threadIdx.x;
#pragma unroll
    for (int i = 0; i < NVALS; ++i) {
        v[i] = in[(t + i * 7919) & 0xFFFFF];
    }
    float prev = 1.0f;
    for (int k = 0; k < iters; ++k) {
#pragma unroll
        for (int i = 0; i < NVALS; ++i) {
            v[i] = fmaf(prev, 0.999f, v[i] * 1e-3f);
            prev = v[i];
        }
    }
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < NVALS; ++i) {
        sum += v[i];
    }
    out[t] = sum;
}

// tile[lane][c]: the 32 lanes of a warp read 32 floats 32 words apart, all in one bank.
__global__ void bank_conflicts(const float* __restrict__ in, float* __restrict__ out, int iters) {
    __shared__ float tile[32][32];
    int lane = threadIdx.x & 31;
    int warp = threadIdx.x >> 5;
    for (int c = warp; c < 32; c += blockDim.x / 32) {
        tile[lane][c] = in[(blockIdx.x * 32 + c) * 32 + lane];
    }
    __syncthreads();
    float acc = 0.0f;
    for (int i = 0; i < iters; ++i) {
        acc += tile[lane][(i + warp) & 31];
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

static float checksum(const float* device, size_t n) {
    std::vector<float> host(n);
    CHECK(cudaMemcpy(host.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost));
    double sum = 0.0;
    for (float v : host) sum += v;
    return static_cast<float>(sum);
}

int main(int argc, char** argv) {
    const char* which = argc > 1 ? argv[1] : "all";
    bool all = std::strcmp(which, "all") == 0;
    int sms = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const size_t elems = 1 << 22;  // 16 MiB of floats / unsigneds
    float *in = nullptr, *out = nullptr;
    CHECK(cudaMalloc(&in, elems * sizeof(float)));
    CHECK(cudaMalloc(&out, elems * sizeof(float)));
    std::vector<float> host_in(elems);
    for (size_t i = 0; i < elems; ++i) host_in[i] = 1.0f + static_cast<float>(i % 97) * 1e-3f;
    CHECK(cudaMemcpy(in, host_in.data(), elems * sizeof(float), cudaMemcpyHostToDevice));
    bool ran = false;

    if (all || std::strcmp(which, "barrier_bound") == 0) {
        barrier_bound<<<2 * sms, 1024>>>(in, out, 16);
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        std::printf("barrier_bound: grid %d x 1024, checksum %g\n", 2 * sms, checksum(out, 2 * sms * 1024));
        ran = true;
    }
    if (all || std::strcmp(which, "latency_bound") == 0) {
        // one random cycle through all entries (Sattolo's algorithm), so every chain is long and cache-unfriendly
        std::vector<unsigned> next(elems);
        for (size_t i = 0; i < elems; ++i) next[i] = static_cast<unsigned>(i);
        unsigned long long state = 88172645463325252ull;
        for (size_t i = elems - 1; i > 0; --i) {
            state ^= state << 13; state ^= state >> 7; state ^= state << 17;
            size_t j = state % i;
            unsigned tmp = next[i]; next[i] = next[j]; next[j] = tmp;
        }
        unsigned* table = nullptr;
        CHECK(cudaMalloc(&table, elems * sizeof(unsigned)));
        CHECK(cudaMemcpy(table, next.data(), elems * sizeof(unsigned), cudaMemcpyHostToDevice));
        int blocks = 8 * sms;
        latency_bound<<<blocks, 256>>>(table, reinterpret_cast<unsigned*>(out), 512, static_cast<unsigned>(elems - 1));
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        std::printf("latency_bound: grid %d x 256, 512 dependent loads per warp\n", blocks);
        CHECK(cudaFree(table));
        ran = true;
    }
    if (all || std::strcmp(which, "register_bound") == 0) {
        register_bound<<<4 * sms, 256>>>(in, out, 64);
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        std::printf("register_bound: grid %d x 256, checksum %g\n", 4 * sms, checksum(out, 4 * sms * 256));
        ran = true;
    }
    if (all || std::strcmp(which, "bank_conflicts") == 0) {
        int blocks = 8 * sms;  // eight 256-thread blocks fill an SM; reads 32x32 floats per block: 8 * 132 * 1024 < elems
        bank_conflicts<<<blocks, 256>>>(in, out, 2048);
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        std::printf("bank_conflicts: grid %d x 256, checksum %g\n", blocks, checksum(out, blocks * 256));
        ran = true;
    }
    if (!ran) {
        std::fprintf(stderr, "unknown kernel %s; use barrier_bound, latency_bound, register_bound, bank_conflicts or all\n", which);
        return 2;
    }
    CHECK(cudaFree(in));
    CHECK(cudaFree(out));
    return 0;
}
