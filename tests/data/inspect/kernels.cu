// Source of the `opgate inspect` test fixtures (scripts/build_inspect_fixtures.sh builds them).
// Four kernels that exercise what inspect reads: a C++ template (demangling), static shared
// memory and __launch_bounds__ (max threads), and a per-thread local array (stack frame).
namespace opgate_fixture {
template <typename T>
__global__ void scale(T* out, const T* in, T factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * factor;
}
template __global__ void scale<float>(float*, const float*, float, int);
template __global__ void scale<double>(double*, const double*, double, int);
}  // namespace opgate_fixture

extern "C" __global__ void __launch_bounds__(256) tile_sum(const float* in, float* out, int n) {
  __shared__ float tile[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = i < n ? in[i] : 0.f;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) tile[threadIdx.x] += tile[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = tile[0];
}

__global__ void local_scratch(const int* idx, float* out, int n) {
  float scratch[32];
#pragma unroll 1
  for (int k = 0; k < 32; ++k) scratch[k] = k * 0.5f + idx[k % n];
  out[threadIdx.x] = scratch[idx[threadIdx.x] & 31];
}
