// One CUDA source built by two toolchains (nvcc and clang) for `opgate inspect --compare`, and launched
// from both builds on the same inputs by tests/data/toolchain/two_builds_spec.py (CuPy RawModule, on a GPU).
// Several kernels: a C-linkage one, templates instantiated explicitly (so their mangled names exist in
// both builds), static and dynamic shared memory.
// Build recipe: tests/data/toolchain/build.sh.

// y = a * x + y over n floats.
extern "C" __global__ void saxpy(int n, float a, const float* __restrict__ x, float* __restrict__ y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] + y[i];
    }
}

// One block per row: out[row] = sum of x[row, 0:n], a tree reduction in static shared memory.
template <int BLOCK>
__global__ void row_sum(const float* __restrict__ x, float* __restrict__ out, int n) {
    __shared__ float partial[BLOCK];
    const float* row = x + static_cast<long long>(blockIdx.x) * n;
    float acc = 0.0f;
    for (int col = threadIdx.x; col < n; col += BLOCK) {
        acc += row[col];
    }
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int stride = BLOCK / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) {
            partial[threadIdx.x] += partial[threadIdx.x + stride];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        out[blockIdx.x] = partial[0];
    }
}

// out[c, r] = x[r, c] for an rows x cols matrix; 32x32 tiles through shared memory padded by one
// column so that the column reads do not conflict on a bank. Launch with (32, 8) threads.
template <typename T>
__global__ void transpose(const T* __restrict__ x, T* __restrict__ out, int rows, int cols) {
    __shared__ T tile[32][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    for (int dy = 0; dy < 32; dy += 8) {
        int r = blockIdx.y * 32 + threadIdx.y + dy;
        if (r < rows && c < cols) {
            tile[threadIdx.y + dy][threadIdx.x] = x[static_cast<long long>(r) * cols + c];
        }
    }
    __syncthreads();
    int oc = blockIdx.y * 32 + threadIdx.x;
    for (int dy = 0; dy < 32; dy += 8) {
        int orow = blockIdx.x * 32 + threadIdx.y + dy;
        if (orow < cols && oc < rows) {
            out[static_cast<long long>(orow) * rows + oc] = tile[threadIdx.x][threadIdx.y + dy];
        }
    }
}

// Prefix sums within each block of blockDim.x elements, in dynamic shared memory (Hillis-Steele).
extern "C" __global__ void block_scan(const float* __restrict__ x, float* __restrict__ out, int n) {
    extern __shared__ float buffer[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    buffer[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int offset = 1; offset < blockDim.x; offset *= 2) {
        float add = threadIdx.x >= offset ? buffer[threadIdx.x - offset] : 0.0f;
        __syncthreads();
        buffer[threadIdx.x] += add;
        __syncthreads();
    }
    if (i < n) {
        out[i] = buffer[threadIdx.x];
    }
}

template __global__ void row_sum<128>(const float*, float*, int);
template __global__ void row_sum<256>(const float*, float*, int);
template __global__ void transpose<float>(const float*, float*, int, int);
template __global__ void transpose<double>(const double*, double*, int, int);
