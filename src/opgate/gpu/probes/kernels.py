"""opgate's own measurement kernels, CUDA C compiled at run time with NVRTC through CuPy.

One source, one RawModule (one NVRTC compile, cached on disk by CuPy across processes). Variants of the
bandwidth kernels (loads in flight per thread, streaming stores) are plain extern "C" wrappers around
templates, so kernel names stay readable in profilers and sanitizer reports.

Everything reads and writes 16-byte vectors (uint4): one LDG.E.128 / STG.E.128 per access, the widest
a thread can issue. Loads feed a folded checksum that is stored only when it equals a run-time `magic`
value, so the compiler cannot drop a load, and nothing is written in practice.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

READ_UNROLLS = (4, 8)


@dataclass(frozen=True)
class CopyConfig:
    """One way to launch a copy kernel: `blocks_per_sm` None means one tile per block, the grid covering the
    buffer (`unroll` x `threads` vectors per block); otherwise a persistent grid-stride grid."""
    unroll: int
    kind: str  # "tile" (one tile per block, evict_last loads), "keep", "plain" or "stream" (grid-stride)
    threads: int
    blocks_per_sm: int | None

    @property
    def kernel_name(self) -> str:
        return copy_kernel_name(self.unroll, self.kind)

    def grid(self, sm_count: int, n_vec: int) -> int:
        if self.blocks_per_sm is None:
            per_block = self.unroll * self.threads
            return max(1, (n_vec + per_block - 1) // per_block)
        return sm_count * self.blocks_per_sm

    def describe(self) -> str:
        what = {"tile": "one tile per block, evict_last loads", "keep": "grid-stride, evict_last loads",
                "plain": "grid-stride, plain loads and stores", "stream": "grid-stride, streaming stores"}[self.kind]
        shape = "grid covers the buffer" if self.blocks_per_sm is None else f"blocks/SM={self.blocks_per_sm}"
        return f"copy {what}, unroll={self.unroll} threads={self.threads} {shape}"


# Copy-kernel launches the probe measures, keeping the fastest. Six sweeps on the H200 (2026-11-29,
# benchmarks/copy_kernel_sweep.py, docs/benchmarks.md and its history: ~230 configurations incl. read-only-path
# loads, warp-tiled, block-/warp-contiguous, software-pipelined and TMA bulk-copy kernels): persistent grid-stride
# kernels plateau at 4.05-4.07 TB/s, 4.13 with evict_last loads (97% of cudaMemcpy D2D); one tile per block
# with evict_last loads and 1024 threads reaches 4.30 TB/s, 101% of cudaMemcpy in the same run.
COPY_CONFIGS = (
    CopyConfig(8, "tile", 1024, None), CopyConfig(8, "tile", 512, None), CopyConfig(8, "tile", 256, None),
    CopyConfig(8, "keep", 256, 1), CopyConfig(8, "keep", 256, 2),
    CopyConfig(8, "plain", 256, 1), CopyConfig(8, "stream", 256, 1),
)
L2_UNROLL = 4

KERNEL_SOURCE = r"""
typedef unsigned long long u64;
typedef unsigned int u32;

__device__ __forceinline__ u64 opgate_globaltimer_ns() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// L2-only load (bypasses L1), volatile so no pass of a repeated read can be folded into another.
__device__ __forceinline__ uint4 opgate_load_cg(const uint4* p) {
    uint4 r;
    asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}

// Streaming (evict-first) 16-byte store.
__device__ __forceinline__ void opgate_store_cs(uint4* p, uint4 v) {
    asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};"
                 :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}

__device__ __forceinline__ u32 opgate_fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

// A pattern derived from the index and a seed: never zeros, different per run.
extern "C" __global__ void opgate_fill(uint4* __restrict__ dst, u64 n_vec, u32 seed) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n_vec; i += stride) {
        const u32 h = (u32)(i * 2654435761ull) ^ seed;
        dst[i] = make_uint4(h, h ^ 0x9E3779B9u, h + 0x7F4A7C15u, ~h);
    }
}

// Read stream: each thread keeps UNROLL independent 16-byte loads in flight per step of a grid-stride loop.
template <int UNROLL>
__device__ __forceinline__ void opgate_read_body(const uint4* __restrict__ src, u64 n_vec, u32 magic,
                                                 u32* __restrict__ sink) {
    const u64 nthreads = (u64)gridDim.x * blockDim.x;
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    u32 acc = 0;
    for (; i + (u64)(UNROLL - 1) * nthreads < n_vec; i += (u64)UNROLL * nthreads) {
        uint4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = src[i + (u64)u * nthreads];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) acc ^= opgate_fold(v[u]);
    }
    for (; i < n_vec; i += nthreads) acc ^= opgate_fold(src[i]);
    if (acc == magic) sink[0] = acc;
}

// A 16-byte load that asks L2 to keep the line (evict_last policy, sm_80+; a plain load before that).
__device__ __forceinline__ uint4 opgate_load_keep(const uint4* p, u64 policy) {
#if __CUDA_ARCH__ >= 800
    uint4 r;
    asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p), "l"(policy));
    return r;
#else
    return *p;
#endif
}

__device__ __forceinline__ u64 opgate_evict_last_policy() {
    u64 policy = 0;
#if __CUDA_ARCH__ >= 800
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
#endif
    return policy;
}

// Device-to-device copy: UNROLL loads, then UNROLL stores (plain or streaming stores; KEEP: loads
// carry an L2 evict_last policy). What the sweeps on the H200 found (benchmarks/copy_kernel_sweep.py,
// docs/benchmarks.md and its git history):
//  * no __restrict__, on purpose: with it NVCC routes the loads through the read-only path
//    (LDG.E.128.CONSTANT) and interleaves them with the stores, leaving about half the loads in flight:
//    4.00 instead of 4.06 TB/s. Plain LDG.E.128, all issued before the first store, is faster;
//  * loads with the evict_last L2 policy: 4.13 TB/s, the best persistent grid-stride copy (one tile per
//    block, below, is faster still).
template <int UNROLL, bool STREAMING, bool KEEP>
__device__ __forceinline__ void opgate_copy_body(const uint4* src, uint4* dst, u64 n_vec) {
    const u64 policy = KEEP ? opgate_evict_last_policy() : 0;
    const u64 nthreads = (u64)gridDim.x * blockDim.x;
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (u64)(UNROLL - 1) * nthreads < n_vec; i += (u64)UNROLL * nthreads) {
        uint4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const uint4* p = src + i + (u64)u * nthreads;
            v[u] = KEEP ? opgate_load_keep(p, policy) : *p;
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            if (STREAMING) opgate_store_cs(dst + i + (u64)u * nthreads, v[u]);
            else dst[i + (u64)u * nthreads] = v[u];
        }
    }
    for (; i < n_vec; i += nthreads) {
        if (STREAMING) opgate_store_cs(dst + i, src[i]);
        else dst[i] = src[i];
    }
}

// One tile per block, no loop: block b copies vectors [b*UNROLL*blockDim, (b+1)*UNROLL*blockDim) and the
// grid covers the buffer; the hardware hands blocks to SMs as they free up. Loads carry the evict_last
// policy, all issued before the first store. On the H200 this beat every persistent grid-stride copy and
// cudaMemcpy D2D itself (4.30 vs 4.24 TB/s, 1024 threads; benchmarks/copy_kernel_sweep.py).
template <int UNROLL>
__device__ __forceinline__ void opgate_copy_tile_body(const uint4* src, uint4* dst, u64 n_vec) {
    const u64 policy = opgate_evict_last_policy();
    const u64 base = (u64)blockIdx.x * blockDim.x * UNROLL + threadIdx.x;
    if (base + (u64)(UNROLL - 1) * blockDim.x < n_vec) {
        uint4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = opgate_load_keep(src + base + (u64)u * blockDim.x, policy);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) dst[base + (u64)u * blockDim.x] = v[u];
    } else {  // the last, partial tile
        for (int u = 0; u < UNROLL; ++u) {
            const u64 i = base + (u64)u * blockDim.x;
            if (i < n_vec) dst[i] = src[i];
        }
    }
}

extern "C" __global__ void opgate_read_u4(const uint4* __restrict__ src, u64 n_vec, u32 magic, u32* __restrict__ sink) {
    opgate_read_body<4>(src, n_vec, magic, sink);
}
extern "C" __global__ void opgate_read_u8(const uint4* __restrict__ src, u64 n_vec, u32 magic, u32* __restrict__ sink) {
    opgate_read_body<8>(src, n_vec, magic, sink);
}
extern "C" __global__ void opgate_copy_u8_plain(const uint4* src, uint4* dst, u64 n_vec) {
    opgate_copy_body<8, false, false>(src, dst, n_vec);
}
extern "C" __global__ void opgate_copy_u8_stream(const uint4* src, uint4* dst, u64 n_vec) {
    opgate_copy_body<8, true, false>(src, dst, n_vec);
}
extern "C" __global__ void opgate_copy_u8_keep(const uint4* src, uint4* dst, u64 n_vec) {
    opgate_copy_body<8, false, true>(src, dst, n_vec);
}
// Launch bounds: 1024 threads must fit the register file (64 registers each) on every architecture.
extern "C" __global__ void __launch_bounds__(1024) opgate_copy_u8_tile(const uint4* src, uint4* dst, u64 n_vec) {
    opgate_copy_tile_body<8>(src, dst, n_vec);
}

// L2 read: the same working set `passes` times; the start rotates by 4 KiB per pass.
extern "C" __global__ void opgate_l2_read(const uint4* __restrict__ src, u64 n_vec, int passes, u32 magic,
                                          u32* __restrict__ sink) {
    const int UNROLL = 4;
    const u64 nthreads = (u64)gridDim.x * blockDim.x;
    const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    u32 acc = 0;
    u64 shift = 0;
    for (int p = 0; p < passes; ++p) {
        for (u64 i = tid; i < n_vec; i += (u64)UNROLL * nthreads) {
            uint4 v[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                u64 j = i + (u64)u * nthreads;
                if (j < n_vec) {
                    j += shift;
                    if (j >= n_vec) j -= n_vec;
                    v[u] = opgate_load_cg(src + j);
                } else {
                    v[u] = make_uint4(0u, 0u, 0u, 0u);
                }
            }
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) acc += opgate_fold(v[u]);
        }
        shift += 256;  // 256 x 16 B = 4 KiB: keeps a warp's accesses contiguous
        if (shift >= n_vec) shift -= n_vec;
    }
    if (acc == magic) sink[0] = acc;
}

// One thread of each block adds one: after N launches of one block, out[0] == N (all launches ran).
extern "C" __global__ void opgate_tiny(u32* __restrict__ out) {
    if (threadIdx.x == 0) out[blockIdx.x] += 1u;
}

// Every thread waits `ns` nanoseconds of %globaltimer, then each block counts itself done.
extern "C" __global__ void opgate_spin(u64 ns, u32* __restrict__ done_blocks) {
    const u64 start = opgate_globaltimer_ns();
    while (opgate_globaltimer_ns() - start < ns) { }
    __syncthreads();
    if (threadIdx.x == 0) atomicAdd(done_blocks, 1u);
}

// Stream-order witness: value = value * 3 + k, one step per launch.
extern "C" __global__ void opgate_chain_step(u32* __restrict__ value, u32 k) {
    if (blockIdx.x == 0 && threadIdx.x == 0) value[0] = value[0] * 3u + k;
}

// The computation the recovery trials verify: out = a * x + y.
extern "C" __global__ void opgate_saxpy(const float* __restrict__ x, const float* __restrict__ y,
                                        float* __restrict__ out, float a, u64 n) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = a * x[i] + y[i];
}

// Planted fault for the recovery trials: a store to an address nothing maps (error 700, sticky).
extern "C" __global__ void opgate_illegal_store(u64 address) {
    if (blockIdx.x == 0 && threadIdx.x == 0) *((volatile u32*)address) = 0xDEADu;
}
"""


def read_kernel_name(unroll: int) -> str:
    return f"opgate_read_u{unroll}"


def copy_kernel_name(unroll: int, kind: str) -> str:
    return f"opgate_copy_u{unroll}_{kind}"


@functools.lru_cache(maxsize=None)
def probe_module(device_id: int) -> Any:
    """The RawModule for one device (one module object per device, so a kernel handle is never used in
    another device's context; NVRTC's output is cached on disk by CuPy, so later devices load it)."""
    from opgate.gpu.probes.device import require_gpu

    cupy = require_gpu()
    with cupy.cuda.Device(device_id):
        return cupy.RawModule(code=KERNEL_SOURCE, options=("-std=c++17",))


def kernel(name: str) -> Any:
    """The kernel `name` for the current device."""
    from opgate.gpu.probes.device import require_gpu

    cupy = require_gpu()
    device_id = cupy.cuda.Device().id
    with cupy.cuda.Device(device_id):
        return probe_module(device_id).get_function(name)
