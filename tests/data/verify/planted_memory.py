"""Memory-safety bugs numerics cannot see, in CUDA C kernels run the way users run them: compiled with CuPy
(RawModule, NVRTC) and launched on PyTorch tensors from PyTorch's caching allocator (or CuPy arrays from its
pool). Each bug has a correct twin. Every implementation computes y = 2x right, so only `opgate verify
--stages sanitizer` (memcheck) can tell the bugs from the twins:

* oob_write / oob_write_twin: one element written past the end of a torch.empty_like buffer. With the caching
  allocator on, the buffer sits inside a larger cached block and the write lands in it: invisible to memcheck
  unless the sanitizer stage turns the caches off.
* oob_write_cupy_pool / oob_write_cupy_pool_twin: the same past a cupy.empty array from CuPy's memory pool.
* free_async_race / free_async_race_twin: a scratch buffer from cudaMallocAsync, read by a kernel on stream B
  while stream A frees it with cudaFreeAsync, with no event between them (the twin waits for one); memcheck
  sees it only with --track-stream-ordered-races all.
* tail_oob_read / tail_oob_read_twin: a tiled kernel that stages x in shared memory before its bounds check:
  past the end only when the size is not a multiple of its 256-thread block, i.e. at a tail size, never at the
  declared M x N = 4 x 256. (A plain `v = x[i]; if (i < n) y[i] = 2 * v;` is no bug at all: the compiler sinks
  the load under the check, and the SASS reads nothing past the end; tests/verify/test_planted_memory_sass.py.)

Empty inputs (opgate's size-0 cases) launch nothing.

Run on a GPU host: opgate verify tests/data/verify/planted_memory.py --stages numerics,sanitizer
"""

import functools

import torch

import opgate

BLOCK = 256
FREE_WAIT_NS = 2_000_000  # the reader spins this long before it loads, so the unordered free comes first

SOURCE = r"""
__device__ __forceinline__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
extern "C" __global__ void write_one_past_end(const float* x, float* y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) y[i] = (i < n) ? 2.0f * x[i] : 0.0f;  // BUG: `<=` writes y[n]
}
extern "C" __global__ void bounded_double(const float* x, float* y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
extern "C" __global__ void tile_before_check(const float* x, float* y, int n) {
    // A tiled kernel stages its block's inputs in shared memory before the bounds check.
    __shared__ float tile[256];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = x[i];  // BUG: unmasked; past the end in a partial last block
    __syncthreads();
    if (i < n) y[i] = 2.0f * tile[threadIdx.x];
}
extern "C" __global__ void tile_masked(const float* x, float* y, int n) {
    __shared__ float tile[256];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = (i < n) ? x[i] : 0.0f;
    __syncthreads();
    if (i < n) y[i] = 2.0f * tile[threadIdx.x];
}
extern "C" __global__ void delayed_double(const float* src, float* y, int n, unsigned long long wait_ns) {
    const unsigned long long start = now_ns();
    while (now_ns() - start < wait_ns) { }
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * src[i];
}
"""

double = opgate.Operator(
    "double",
    reference=lambda x: x * 2,
    inputs=[opgate.TensorSpec("x", ("M", "N"))],
    dims={"M": [4], "N": [256]},
    dtypes=["float32"],
)


@functools.lru_cache(maxsize=None)
def _kernel(name):
    import cupy

    return cupy.RawModule(code=SOURCE, options=("-lineinfo",)).get_function(name)


def _launch(name, threads, *args):
    """Launch kernel `name` on PyTorch's current stream, as an extension would."""
    import cupy

    stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
    with stream:
        _kernel(name)(((threads + BLOCK - 1) // BLOCK,), (BLOCK,), args)


def _ptr(t):
    import numpy as np

    return np.uint64(t.data_ptr())


def _n(t):
    import numpy as np

    return np.int32(t.numel())


def _torch_buffer(kernel, extra_thread):
    def run(x):
        x = x.contiguous()
        y = torch.empty_like(x)  # from the caching allocator: inside a larger cached block
        if x.numel() == 0:  # opgate's empty cases: nothing to launch
            return y
        _launch(kernel, x.numel() + extra_thread, _ptr(x), _ptr(y), _n(x))
        return y
    return run


def _cupy_buffer(kernel, extra_thread):
    def run(x):
        import cupy
        import numpy as np

        x = x.contiguous()
        if x.numel() == 0:
            return torch.empty_like(x)
        torch.cuda.current_stream().synchronize()
        y = cupy.empty(x.numel(), dtype=cupy.float32)  # from CuPy's memory pool
        with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            _kernel(kernel)((((x.numel() + extra_thread) + BLOCK - 1) // BLOCK,), (BLOCK,),
                            (_ptr(x), np.uint64(y.data.ptr), _n(x)))
        return torch.from_dlpack(y).view(x.shape)
    return run


def _free_async(ordered):
    def run(x):
        import cupy
        import numpy as np

        rt = cupy.cuda.runtime
        x = x.contiguous()
        if x.numel() == 0:
            return torch.empty_like(x)
        nbytes = x.numel() * 4
        torch.cuda.current_stream().synchronize()  # x is ready for any stream
        stream_a = cupy.cuda.Stream(non_blocking=True)
        stream_b = cupy.cuda.Stream(non_blocking=True)
        scratch = rt.mallocAsync(nbytes, stream_a.ptr)
        rt.memcpyAsync(scratch, x.data_ptr(), nbytes, rt.memcpyDeviceToDevice, stream_a.ptr)
        stream_a.synchronize()  # allocated and filled
        y = torch.empty_like(x)
        with stream_b:
            _kernel("delayed_double")(((x.numel() + BLOCK - 1) // BLOCK,), (BLOCK,),
                                      (np.uint64(scratch), _ptr(y), _n(x), np.uint64(FREE_WAIT_NS)))
        if ordered:
            reader_done = cupy.cuda.Event()
            reader_done.record(stream_b)
            stream_a.wait_event(reader_done)
        rt.freeAsync(scratch, stream_a.ptr)  # the bug: without the event, this is not ordered after the reader
        stream_b.synchronize()
        stream_a.synchronize()
        return y
    return run


double.implementation("oob_write", backend="torch")(_torch_buffer("write_one_past_end", 1))
double.implementation("oob_write_twin", backend="torch")(_torch_buffer("bounded_double", 0))
double.implementation("oob_write_cupy_pool", backend="torch")(_cupy_buffer("write_one_past_end", 1))
double.implementation("oob_write_cupy_pool_twin", backend="torch")(_cupy_buffer("bounded_double", 0))
double.implementation("free_async_race", backend="torch")(_free_async(ordered=False))
double.implementation("free_async_race_twin", backend="torch")(_free_async(ordered=True))
double.implementation("tail_oob_read", backend="torch")(_torch_buffer("tile_before_check", 0))
double.implementation("tail_oob_read_twin", backend="torch")(_torch_buffer("tile_masked", 0))

# What each implementation is, for scripts/gpu/isolation.sh: bug -> expected sanitizer verdict.
PLANTED = {
    "oob_write": "bug", "oob_write_twin": "twin",
    "oob_write_cupy_pool": "bug", "oob_write_cupy_pool_twin": "twin",
    "free_async_race": "bug", "free_async_race_twin": "twin",
    "tail_oob_read": "bug", "tail_oob_read_twin": "twin",
}
