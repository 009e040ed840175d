// Truth corpus, GPU part: float32 CUDA C kernels, compiled by NVRTC through CuPy (which adds -ftz=true) with and
// without --use_fast_math, and by nvcc into cubins (plain, -ftz=true, --use_fast_math; scripts/gpu/corpus.sh).
// Every kernel reads its input through (row, column) strides unless its name says otherwise; outputs are
// contiguous. Row kernels take one block of ROW_THREADS threads per row.

#define ROW_THREADS 256

extern "C" {

// y = 2 * x over an (M, N) strided view. With flush-to-zero a subnormal x gives 0.
__global__ void scale2(const float* x, float* y, long long M, long long N, long long sxm, long long sxn) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < M * N) {
        long long r = i / N, c = i % N;
        y[i] = 2.0f * x[r * sxm + c * sxn];
    }
}

// BUG (stride assumption): indexes x as if it were contiguous.
__global__ void scale2_contiguous_only(const float* x, float* y, long long M, long long N, long long sxm,
                                       long long sxn) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < M * N) y[i] = 2.0f * x[i];
}

// BUG (out-of-bounds write): `<=` writes y[M * N], one element past the output. The value of every real element
// is right; only a memory checker that sees the allocation's end (caching allocator off) can tell.
__global__ void scale2_oob(const float* x, float* y, long long M, long long N, long long sxm, long long sxn) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= M * N) {
        long long r = i / N, c = i % N;
        y[i] = 2.0f * x[(r < M ? r : M - 1) * sxm + c * sxn];
    }
}

// Row sum: per-thread strided partial sums, then a shared-memory tree.
__global__ void rowsum_smem(const float* x, float* y, long long N, long long sxm, long long sxn) {
    __shared__ float part[ROW_THREADS];
    const float* row = x + (long long)blockIdx.x * sxm;
    float acc = 0.0f;
    for (long long c = threadIdx.x; c < N; c += blockDim.x) acc += row[c * sxn];
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) y[blockIdx.x] = part[0];
}

// BUG (missing __syncthreads between shared-memory phases): the tree reads partials other warps may not have
// written yet, and each level reads the previous level's results without a barrier.
__global__ void rowsum_smem_nosync(const float* x, float* y, long long N, long long sxm, long long sxn) {
    __shared__ float part[ROW_THREADS];
    const float* row = x + (long long)blockIdx.x * sxm;
    float acc = 0.0f;
    for (long long c = threadIdx.x; c < N; c += blockDim.x) acc += row[c * sxn];
    part[threadIdx.x] = acc;
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    }
    if (threadIdx.x == 0) y[blockIdx.x] = part[0];
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}

// Row sum with warp shuffles: __shfl_down_sync inside each warp, one partial per warp in shared memory.
__global__ void rowsum_warp(const float* x, float* y, long long N, long long sxm, long long sxn) {
    __shared__ float warp_part[ROW_THREADS / 32];
    const float* row = x + (long long)blockIdx.x * sxm;
    float acc = 0.0f;
    for (long long c = threadIdx.x; c < N; c += blockDim.x) acc += row[c * sxn];
    acc = warp_sum(acc);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_part[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        float v = lane < (int)(blockDim.x / 32) ? warp_part[lane] : 0.0f;
        v = warp_sum(v);
        if (lane == 0) y[blockIdx.x] = v;
    }
}

__device__ float block_reduce_max(float v, float* smem) {
    smem[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) smem[threadIdx.x] = fmaxf(smem[threadIdx.x], smem[threadIdx.x + s]);
        __syncthreads();
    }
    float r = smem[0];
    __syncthreads();
    return r;
}

__device__ float block_reduce_sum(float v, float* smem) {
    smem[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) smem[threadIdx.x] += smem[threadIdx.x + s];
        __syncthreads();
    }
    float r = smem[0];
    __syncthreads();
    return r;
}

// Softmax with the fast-math exponential __expf (ex2.approx after a multiply by log2(e)). fmaxf drops NaN in the
// max, but the NaN still reaches exp and the sum, so a NaN row comes out NaN as in torch.
__global__ void softmax_expf(const float* x, float* y, long long N, long long sxm, long long sxn, int sub_max) {
    __shared__ float smem[ROW_THREADS];
    const float* row = x + (long long)blockIdx.x * sxm;
    float* out = y + (long long)blockIdx.x * N;
    float m = __int_as_float(0xff800000);
    if (sub_max) {
        for (long long c = threadIdx.x; c < N; c += blockDim.x) m = fmaxf(m, row[c * sxn]);
        m = block_reduce_max(m, smem);
        if (m == __int_as_float(0xff800000)) m = 0.0f;
    } else {
        m = 0.0f;  // BUG when sub_max == 0: no max-subtraction, __expf overflows above ~88.7
    }
    float s = 0.0f;
    for (long long c = threadIdx.x; c < N; c += blockDim.x) s += __expf(row[c * sxn] - m);
    s = block_reduce_sum(s, smem);
    float inv = 1.0f / s;
    for (long long c = threadIdx.x; c < N; c += blockDim.x) out[c] = __expf(row[c * sxn] - m) * inv;
}

// Inclusive scan along rows: tiles of ROW_THREADS, Hillis-Steele in double-buffered shared memory, plus the carry
// of the earlier tiles.
__global__ void cumsum_block(const float* x, float* y, long long N, long long sxm, long long sxn) {
    __shared__ float buf[2][ROW_THREADS];
    const float* row = x + (long long)blockIdx.x * sxm;
    float* out = y + (long long)blockIdx.x * N;
    float carry = 0.0f;
    for (long long start = 0; start < N; start += blockDim.x) {
        long long c = start + threadIdx.x;
        int cur = 0;
        buf[cur][threadIdx.x] = c < N ? row[c * sxn] : 0.0f;
        __syncthreads();
        for (int off = 1; off < (int)blockDim.x; off <<= 1) {
            float v = buf[cur][threadIdx.x];
            if ((int)threadIdx.x >= off) v += buf[cur][threadIdx.x - off];
            buf[cur ^ 1][threadIdx.x] = v;
            cur ^= 1;
            __syncthreads();
        }
        if (c < N) out[c] = buf[cur][threadIdx.x] + carry;
        carry += buf[cur][blockDim.x - 1];
        __syncthreads();
    }
}

// LayerNorm: two passes (mean, centred variance), rsqrtf, then y = (x - mean) * rstd * w + b.
// assume_contiguous != 0 is the stride-assumption bug: row r starts at r * N and columns are adjacent.
__global__ void layernorm_rsqrtf(const float* x, const float* w, const float* b, float* y, long long N,
                                 long long sxm, long long sxn, long long sw, long long sb, float eps,
                                 int assume_contiguous) {
    __shared__ float smem[ROW_THREADS];
    if (assume_contiguous) { sxm = N; sxn = 1; }
    const float* row = x + (long long)blockIdx.x * sxm;
    float* out = y + (long long)blockIdx.x * N;
    float s = 0.0f;
    for (long long c = threadIdx.x; c < N; c += blockDim.x) s += row[c * sxn];
    float mean = block_reduce_sum(s, smem) / (float)N;
    float v = 0.0f;
    for (long long c = threadIdx.x; c < N; c += blockDim.x) {
        float d = row[c * sxn] - mean;
        v += d * d;
    }
    float rstd = rsqrtf(block_reduce_sum(v, smem) / (float)N + eps);
    for (long long c = threadIdx.x; c < N; c += blockDim.x)
        out[c] = (row[c * sxn] - mean) * rstd * w[c * sw] + b[c * sb];
}

// Split-K matmul C += A[:, k-slice] @ B[k-slice, :] with atomicAdd into a zeroed C: the order in which slices land
// is whatever the scheduler picks (run-to-run different last bits), every order is a correct float32 sum.
__global__ void matmul_splitk_atomic(const float* a, const float* b, float* c, long long M, long long N, long long K,
                                     long long sam, long long sak, long long sbk, long long sbn, long long k_chunk) {
    long long n = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long m = (long long)blockIdx.y * blockDim.y + threadIdx.y;
    long long k0 = (long long)blockIdx.z * k_chunk;
    long long k1 = k0 + k_chunk < K ? k0 + k_chunk : K;
    if (m >= M || n >= N) return;
    float acc = 0.0f;
    for (long long k = k0; k < k1; ++k) acc = fmaf(a[m * sam + k * sak], b[k * sbk + n * sbn], acc);
    atomicAdd(&c[m * N + n], acc);
}

}  // extern "C"
