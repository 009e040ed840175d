"""Search for a device-to-device copy kernel that matches cudaMemcpy (issue 6: copy >= cudaMemcpy, same run).

Candidates, all CUDA C compiled by NVRTC through CuPy (sm_80+), each checked to copy correctly before it is timed:
  * grid-stride, warp-tiled, block- and warp-contiguous and software-pipelined loops with 4-16 16-byte loads in
    flight per thread; loads plain, read-only path (`ld.global.nc.L1::no_allocate.L2::256B`) or carrying an L2
    eviction policy (`createpolicy` + `.L2::cache_hint`: evict_first / evict_last / fractional / unchanged);
    stores plain, streaming (`st.global.cs`) or with a policy; 128-512 threads x 1-8 blocks per SM;
  * one tile per block with no loop (the grid covers the buffer; bps 0 in the tables), loads plain or evict_last;
  * on sm_90+, bulk-copy (TMA) kernels: one thread per block streams chunks global -> shared -> global with
    `cp.async.bulk`, several chunks in flight (mbarrier-tracked loads, bulk-group stores), loads with or
    without the evict_last policy.
The default run is the focused search around the best found so far; `--all` is the wide one. Each placement of
source and destination (the two halves of one allocation, as opgate's probe uses, and two separate
allocations) is measured with cudaMemcpy D2D interleaved with the best five candidates, so the comparison is
made in the same run; last, cudaMemcpy and a copy kernel are queued beside a spin kernel that fills every SM
(a copy on copy engines would not wait for it). Copies count bytes read + bytes written.

    PYTHONPATH=src python3 benchmarks/copy_kernel_sweep.py [--all] [--gib 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from opgate.gpu.probes.timing import bandwidth_tbs  # noqa: E402
from opgate.gpu.probes.timing import time_interleaved, time_on_stream  # noqa: E402

SOURCE = r"""
typedef unsigned long long u64;
typedef unsigned int u32;

__device__ __forceinline__ uint4 load_plain(const uint4* p) { return *p; }
__device__ __forceinline__ uint4 load_nc256(const uint4* p) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}
__device__ __forceinline__ void store_plain(uint4* p, uint4 v) { *p = v; }
__device__ __forceinline__ void store_cs(uint4* p, uint4 v) {
    asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}

template <int U, bool NC, bool CS>
__device__ __forceinline__ void move(const uint4* src, uint4* dst, u64 i, u64 step) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = NC ? load_nc256(src + i + u * step) : load_plain(src + i + u * step);
#pragma unroll
    for (int u = 0; u < U; ++u) { if (CS) store_cs(dst + i + u * step, v[u]); else store_plain(dst + i + u * step, v[u]); }
}

// Grid-stride: step k of thread t moves vectors t + (k*U + u) * nthreads.
template <int U, bool NC, bool CS>
__device__ __forceinline__ void grid_stride(const uint4* __restrict__ src, uint4* __restrict__ dst, u64 n) {
    const u64 nthreads = (u64)gridDim.x * blockDim.x;
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (u64)(U - 1) * nthreads < n; i += (u64)U * nthreads) move<U, NC, CS>(src, dst, i, nthreads);
    for (; i < n; i += nthreads) dst[i] = src[i];
}

// Warp-tiled: each warp moves U x 512 contiguous bytes per step.
template <int U, bool NC, bool CS>
__device__ __forceinline__ void warp_tiled(const uint4* __restrict__ src, uint4* __restrict__ dst, u64 n) {
    const u64 lane = threadIdx.x & 31u;
    const u64 warp = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const u64 nwarps = ((u64)gridDim.x * blockDim.x) >> 5;
    const u64 tile = 32ull * U;
    const u64 full = (n / tile) * tile;
    for (u64 base = warp * tile; base < full; base += nwarps * tile) move<U, NC, CS>(src, dst, base + lane, 32);
    const u64 nthreads = (u64)gridDim.x * blockDim.x;
    for (u64 i = full + (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += nthreads) dst[i] = src[i];
}

// Software-pipelined grid-stride: the loads of step k+1 are issued before the stores of step k.
template <int U>
__device__ __forceinline__ void pipelined(const uint4* __restrict__ src, uint4* __restrict__ dst, u64 n) {
    const u64 nthreads = (u64)gridDim.x * blockDim.x;
    const u64 step = (u64)U * nthreads;
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    uint4 cur[U], nxt[U];
    bool have = i + (u64)(U - 1) * nthreads < n;
    if (have) {
#pragma unroll
        for (int u = 0; u < U; ++u) cur[u] = src[i + u * nthreads];
    }
    while (have) {
        const bool more = i + step + (u64)(U - 1) * nthreads < n;
        if (more) {
#pragma unroll
            for (int u = 0; u < U; ++u) nxt[u] = src[i + step + u * nthreads];
        }
#pragma unroll
        for (int u = 0; u < U; ++u) dst[i + u * nthreads] = cur[u];
        i += step;
        have = more;
        if (more) {
#pragma unroll
            for (int u = 0; u < U; ++u) cur[u] = nxt[u];
        }
    }
    for (; i < n; i += nthreads) dst[i] = src[i];
}

// L2 cache policies (createpolicy + .L2::cache_hint): 0 none, 1 evict_first, 2 evict_last,
// 3/5/6 evict_last for 50/75/25% of the lines (fractional), 4 evict_unchanged.
template <int P>
__device__ __forceinline__ u64 l2_policy() {
    u64 policy = 0;
    if (P == 1) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    if (P == 2) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
    if (P == 3) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 0.5;" : "=l"(policy));
    if (P == 4) asm volatile("createpolicy.fractional.L2::evict_unchanged.b64 %0, 1.0;" : "=l"(policy));
    if (P == 5) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 0.75;" : "=l"(policy));
    if (P == 6) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 0.25;" : "=l"(policy));
    return policy;
}

// Grid-stride copy whose loads and stores carry an L2 eviction policy (LP for loads, SP for stores);
// PF adds the 256-byte L2 prefetch hint to the loads.
template <int U, int LP, int SP, bool PF>
__device__ __forceinline__ void grid_stride_policy(const uint4* src, uint4* dst, u64 n) {
    const u64 load_policy = l2_policy<LP>(), store_policy = l2_policy<SP>();
    const u64 nthreads = (u64)gridDim.x * blockDim.x;
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (u64)(U - 1) * nthreads < n; i += (u64)U * nthreads) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const uint4* p = src + i + u * nthreads;
            if (LP && PF) asm volatile("ld.global.L2::cache_hint.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                                       : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w)
                                       : "l"(p), "l"(load_policy));
            else if (LP) asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                                      : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w)
                                      : "l"(p), "l"(load_policy));
            else v[u] = *p;
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            uint4* p = dst + i + u * nthreads;
            if (SP) asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, %5;"
                                 :: "l"(p), "r"(v[u].x), "r"(v[u].y), "r"(v[u].z), "r"(v[u].w), "l"(store_policy)
                                 : "memory");
            else *p = v[u];
        }
    }
    for (; i < n; i += nthreads) dst[i] = src[i];
}
#define GP(U, LP, SP, PF) extern "C" __global__ void gp_u##U##_lp##LP##_sp##SP##_pf##PF(const uint4* s, uint4* d, u64 n) { grid_stride_policy<U, LP, SP, PF>(s, d, n); }
GP(8, 1, 0, 0) GP(8, 0, 1, 0) GP(8, 0, 2, 0) GP(8, 1, 1, 0) GP(8, 1, 2, 0) GP(8, 2, 1, 0)
GP(8, 2, 0, 0) GP(8, 2, 2, 0) GP(8, 3, 1, 0) GP(8, 4, 1, 0) GP(8, 2, 4, 0) GP(8, 2, 1, 1) GP(4, 2, 1, 0) GP(16, 2, 1, 0)
GP(8, 5, 0, 0) GP(8, 6, 0, 0)

// One tile per block, no loop: the grid covers the whole buffer (U x blockDim vectors per block) and the
// hardware hands blocks to SMs as they free up, as many library copy kernels do. LP: load policy as above.
template <int U, int LP>
__device__ __forceinline__ void one_tile(const uint4* src, uint4* dst, u64 n) {
    const u64 policy = l2_policy<LP>();
    const u64 base = (u64)blockIdx.x * blockDim.x * U + threadIdx.x;
    if (base + (u64)(U - 1) * blockDim.x < n) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const uint4* p = src + base + (u64)u * blockDim.x;
            if (LP) asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                                 : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w) : "l"(p), "l"(policy));
            else v[u] = *p;
        }
#pragma unroll
        for (int u = 0; u < U; ++u) dst[base + (u64)u * blockDim.x] = v[u];
    } else {
        for (int u = 0; u < U; ++u)
            if (base + (u64)u * blockDim.x < n) dst[base + (u64)u * blockDim.x] = src[base + (u64)u * blockDim.x];
    }
}
#define TILE(U, LP) extern "C" __global__ void tile_u##U##_lp##LP(const uint4* s, uint4* d, u64 n) { one_tile<U, LP>(s, d, n); }
TILE(2, 0) TILE(4, 0) TILE(8, 0) TILE(4, 2) TILE(8, 2)

// Block-contiguous: block b owns one contiguous 1/gridDim share and walks it with its own threads.
template <int U>
__device__ __forceinline__ void block_contiguous(const uint4* __restrict__ src, uint4* __restrict__ dst, u64 n) {
    const u64 share = (n + gridDim.x - 1) / gridDim.x;
    const u64 begin = blockIdx.x * share;
    const u64 end = begin + share < n ? begin + share : n;
    u64 i = begin + threadIdx.x;
    for (; i + (u64)(U - 1) * blockDim.x < end; i += (u64)U * blockDim.x) move<U, false, false>(src, dst, i, blockDim.x);
    for (; i < end; i += blockDim.x) dst[i] = src[i];
}

// Warp-contiguous: warp w owns one contiguous 1/nwarps share.
template <int U>
__device__ __forceinline__ void warp_contiguous(const uint4* __restrict__ src, uint4* __restrict__ dst, u64 n) {
    const u64 nwarps = ((u64)gridDim.x * blockDim.x) >> 5;
    const u64 warp = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const u64 share = ((n + nwarps - 1) / nwarps + 31) & ~31ull;
    const u64 begin = warp * share;
    const u64 end = begin + share < n ? begin + share : n;
    u64 i = begin + (threadIdx.x & 31u);
    for (; i + (u64)(U - 1) * 32 < end; i += (u64)U * 32) move<U, false, false>(src, dst, i, 32);
    for (; i < end; i += 32) dst[i] = src[i];
}

#define GS(U, NC, CS) extern "C" __global__ void gs_u##U##_nc##NC##_cs##CS(const uint4* s, uint4* d, u64 n) { grid_stride<U, NC, CS>(s, d, n); }
#define WT(U, NC, CS) extern "C" __global__ void wt_u##U##_nc##NC##_cs##CS(const uint4* s, uint4* d, u64 n) { warp_tiled<U, NC, CS>(s, d, n); }
#define PL(U) extern "C" __global__ void pl_u##U##_nc0_cs0(const uint4* s, uint4* d, u64 n) { pipelined<U>(s, d, n); }
GS(4, 0, 0) GS(4, 1, 0) GS(4, 0, 1) GS(4, 1, 1) GS(8, 0, 0) GS(8, 1, 0) GS(8, 0, 1) GS(8, 1, 1)
GS(6, 0, 0) GS(10, 0, 0) GS(12, 0, 0) GS(16, 0, 0) PL(4) PL(8)
#define BC(U) extern "C" __global__ void bc_u##U##_nc0_cs0(const uint4* s, uint4* d, u64 n) { block_contiguous<U>(s, d, n); }
#define WC(U) extern "C" __global__ void wc_u##U##_nc0_cs0(const uint4* s, uint4* d, u64 n) { warp_contiguous<U>(s, d, n); }
BC(4) BC(8) WC(4) WC(8)
WT(4, 0, 0) WT(4, 1, 0) WT(4, 0, 1) WT(4, 1, 1) WT(8, 0, 0) WT(8, 1, 0) WT(8, 0, 1) WT(8, 1, 1)

// Occupies every SM for `ns` nanoseconds (launched with a full grid): does a copy queued beside it wait?
extern "C" __global__ void spin(u64 ns) {
    u64 t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}

#if __CUDA_ARCH__ >= 900 && !defined(NO_BULK)
__device__ __forceinline__ u32 smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }

// Bulk (TMA) copy: chunk c of this block goes global -> shared (mbarrier counts the bytes) -> global.
template <int CHUNK, int STAGES, bool KEEP>
__device__ __forceinline__ void bulk_copy(const unsigned char* __restrict__ src, unsigned char* __restrict__ dst,
                                          u64 nbytes) {
    __shared__ __align__(128) unsigned char stage[STAGES][CHUNK];
    __shared__ __align__(8) u64 full[STAGES];
    if (threadIdx.x != 0) return;
    for (int s = 0; s < STAGES; ++s)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(&full[s])));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    const u64 policy = KEEP ? l2_policy<2>() : 0;
    const u64 n_chunks = (nbytes + CHUNK - 1) / CHUNK;
    const u64 mine = n_chunks > blockIdx.x ? (n_chunks - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
    auto issue_load = [&](u64 k) {
        const int s = (int)(k % STAGES);
        const u64 offset = (blockIdx.x + k * gridDim.x) * (u64)CHUNK;
        const u32 size = (u32)(nbytes - offset < (u64)CHUNK ? nbytes - offset : (u64)CHUNK);
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                     :: "r"(smem_addr(&full[s])), "r"(size) : "memory");
        if (KEEP)  // loads ask L2 to keep the source lines (evict_last), as the fastest grid-stride copy does
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint "
                         "[%0], [%1], %2, [%3], %4;"
                         :: "r"(smem_addr(stage[s])), "l"(src + offset), "r"(size), "r"(smem_addr(&full[s])),
                            "l"(policy) : "memory");
        else
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                         :: "r"(smem_addr(stage[s])), "l"(src + offset), "r"(size), "r"(smem_addr(&full[s]))
                         : "memory");
    };
    for (u64 k = 0; k < mine && k < (u64)STAGES; ++k) issue_load(k);
    for (u64 k = 0; k < mine; ++k) {
        const int s = (int)(k % STAGES);
        const u32 parity = (u32)((k / STAGES) & 1);
        u32 done = 0;
        while (!done) {
            asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                         : "=r"(done) : "r"(smem_addr(&full[s])), "r"(parity) : "memory");
        }
        const u64 offset = (blockIdx.x + k * gridDim.x) * (u64)CHUNK;
        const u32 size = (u32)(nbytes - offset < (u64)CHUNK ? nbytes - offset : (u64)CHUNK);
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                     :: "l"(dst + offset), "r"(smem_addr(stage[s])), "r"(size) : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        if (k + STAGES < mine) {
            asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");  // stage s is free again
            issue_load(k + STAGES);
        }
    }
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}
#define BULK(C, S) extern "C" __global__ void bulk_c##C##_s##S(const unsigned char* s, unsigned char* d, u64 n) { bulk_copy<C * 1024, S, false>(s, d, n); }
#define BULKK(C, S) extern "C" __global__ void bulkkeep_c##C##_s##S(const unsigned char* s, unsigned char* d, u64 n) { bulk_copy<C * 1024, S, true>(s, d, n); }
BULK(4, 8) BULK(8, 4) BULK(8, 5) BULK(11, 4) BULK(16, 2) BULK(15, 3)
BULKK(4, 8) BULKK(8, 4)
#endif
"""

POLICY = [f"gp_u{u}_lp{lp}_sp{sp}_pf{pf}" for u, lp, sp, pf in (
    (8, 1, 0, 0), (8, 0, 1, 0), (8, 0, 2, 0), (8, 1, 1, 0), (8, 1, 2, 0), (8, 2, 1, 0), (8, 2, 0, 0), (8, 2, 2, 0),
    (8, 3, 1, 0), (8, 4, 1, 0), (8, 2, 4, 0), (8, 2, 1, 1), (4, 2, 1, 0), (16, 2, 1, 0), (8, 5, 0, 0), (8, 6, 0, 0))]
ALL_SIMPLE = [f"{layout}_u{u}_nc{nc}_cs{cs}" for layout in ("gs", "wt") for u in (4, 8) for nc in (0, 1)
              for cs in (0, 1)] + [f"gs_u{u}_nc0_cs0" for u in (6, 10, 12, 16)] + ["pl_u4_nc0_cs0", "pl_u8_nc0_cs0"] \
    + ["bc_u4_nc0_cs0", "bc_u8_nc0_cs0", "wc_u4_nc0_cs0", "wc_u8_nc0_cs0"] + POLICY
# Five sweeps on the H200 (the history of docs/benchmarks.md) found read-only-path loads and streaming stores no
# better, about 32 KiB in flight per SM best, and loads with the L2 evict_last policy the one change that lifts the
# plateau: the default sweep looks around that (fractional evict_last, and bulk TMA copies whose loads keep the lines).
FOCUSED = ["gs_u8_nc0_cs0", "gp_u8_lp2_sp0_pf0", "gp_u8_lp5_sp0_pf0", "gp_u8_lp6_sp0_pf0", "gp_u8_lp3_sp1_pf0"]
TILES = ["tile_u2_lp0", "tile_u4_lp0", "tile_u8_lp0", "tile_u4_lp2", "tile_u8_lp2"]
FOCUSED_BULK = ["bulk_c4_s8", "bulkkeep_c4_s8", "bulkkeep_c8_s4"]
BULK = ["bulk_c4_s8", "bulk_c8_s4", "bulk_c8_s5", "bulk_c11_s4", "bulk_c16_s2", "bulk_c15_s3", "bulkkeep_c4_s8",
        "bulkkeep_c8_s4"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=2.0, help="bytes copied per run (each side), GiB")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--all", action="store_true", help="the first, wide sweep (load/store cache hints too)")
    args = parser.parse_args()

    import cupy
    import numpy as np

    started = time.perf_counter()
    dev = cupy.cuda.Device(0)
    props = cupy.cuda.runtime.getDeviceProperties(0)
    sm_count, cc = props["multiProcessorCount"], props["major"] * 10 + props["minor"]
    try:
        module = cupy.RawModule(code=SOURCE, options=("-std=c++17",))
        module.get_function(FOCUSED[0])
        bulk_ok = True
    except Exception as exc:  # keep the sweep going without the bulk kernels, and say why
        print(f"bulk-copy kernels did not compile ({type(exc).__name__}: {str(exc)[:400]}); sweeping without them")
        module = cupy.RawModule(code=SOURCE, options=("-std=c++17", "-DNO_BULK"))
        bulk_ok = False
    half = int(args.gib * (1 << 30))
    half -= half % (2 << 20)
    n_vec = half // 16
    stream = cupy.cuda.Stream(non_blocking=True)
    runtime = cupy.cuda.runtime

    one = cupy.empty(2 * half, dtype=cupy.uint8)
    a, b = cupy.empty(half, dtype=cupy.uint8), cupy.empty(half, dtype=cupy.uint8)
    placements = {"halves of one buffer": (one[:half], one[half:]), "two buffers": (a, b)}
    for src, _ in placements.values():
        src[:] = cupy.random.randint(1, 255, size=half, dtype=cupy.uint8)
    dev.synchronize()

    bulk = (BULK if args.all else FOCUSED_BULK) if cc >= 90 and bulk_ok else []
    names = (ALL_SIMPLE if args.all else FOCUSED) + TILES + bulk
    rows: list[dict[str, Any]] = []
    for place, (src, dst) in placements.items():
        def launcher(name: str, threads: int, bps: int, src: Any = src, dst: Any = dst) -> Callable[[], None]:
            fn = module.get_function(name)
            bulk = name.startswith("bulk")
            grid = (sm_count * bps,)
            if name.startswith("tile"):  # one tile per block: the grid covers the buffer (bps is 0)
                unroll = int(name.split("_")[1][1:])
                grid = ((n_vec + threads * unroll - 1) // (threads * unroll),)
            block = (32,) if bulk else (threads,)
            count = np.uint64(half if bulk else n_vec)
            return lambda: fn(grid, block, (src, dst, count))

        configs = [(name, 32, bps) for name in names if name.startswith("bulk") for bps in (1, 2, 4, 6)]
        threads = (256, 512) if args.all else (128, 256, 384, 512)
        blocks = (1, 2, 4, 8) if args.all else (1, 2, 3, 4)
        configs += [(name, t, bps) for name in names if not name.startswith(("bulk", "tile")) for t in threads
                    for bps in blocks if t * bps <= 2048]
        configs += [(name, t, 0) for name in names if name.startswith("tile") for t in (128, 256, 512, 1024)]
        scored = []
        for name, threads, bps in configs:
            launch = launcher(name, threads, bps)
            with stream:
                dst.fill(0)
                launch()
            stream.synchronize()
            if not bool(cupy.array_equal(src, dst)):
                rows.append({"placement": place, "kernel": name, "threads": threads, "blocks_per_sm": bps,
                             "error": "copied wrong bytes"})
                print(f"{place}: {name} t={threads} bps={bps} COPIED WRONG BYTES", flush=True)
                continue
            samples = time_on_stream(cupy, stream, launch, warmup=2, reps=7)
            tbs = bandwidth_tbs(2 * half, samples.median)
            scored.append((tbs, name, threads, bps))
            rows.append({"placement": place, "kernel": name, "threads": threads, "blocks_per_sm": bps, "tbs": tbs})
        scored.sort(reverse=True)

        def memcpy(src: Any = src, dst: Any = dst) -> None:
            runtime.memcpyAsync(dst.data.ptr, src.data.ptr, half, runtime.memcpyDeviceToDevice, stream.ptr)

        top = scored[:5]
        launches = [launcher(name, t, bps) for _, name, t, bps in top] + [memcpy]
        timed = time_interleaved(cupy, stream, launches, warmup=3, reps=args.reps)
        memcpy_tbs = bandwidth_tbs(2 * half, timed[-1].median)
        print(f"\n{place}: cudaMemcpy D2D {memcpy_tbs:.3f} TB/s (spread {timed[-1].relative_spread:.3f})")
        for (_, name, t, bps), samples in zip(top, timed):
            tbs = bandwidth_tbs(2 * half, samples.median)
            rows.append({"placement": place, "final": True, "kernel": name, "threads": t, "blocks_per_sm": bps,
                         "tbs": tbs, "memcpy_tbs": memcpy_tbs, "ratio": tbs / memcpy_tbs})
            print(f"  {name:18s} threads={t:4d} blocks/SM={bps}  {tbs:.3f} TB/s  = {100 * tbs / memcpy_tbs:.1f}% "
                  f"of cudaMemcpy (spread {samples.relative_spread:.3f})")
        best_by_family: dict[str, tuple[float, str]] = {}
        for tbs, name, t, bps in scored:
            family = name.split("_")[0]
            if family not in best_by_family:
                best_by_family[family] = (tbs, f"{name} t={t} bps={bps}")
        print("  best per family (sweep timing): " +
              "; ".join(f"{fam} {v[0]:.3f} ({v[1]})" for fam, v in best_by_family.items()))
    engine = copy_engine_test(cupy, np, module, sm_count, half, one, stream)
    dev.synchronize()
    if args.json:
        args.json.write_text(json.dumps({"device": props["name"].decode() if isinstance(props["name"], bytes)
                                         else props["name"], "bytes_each_side": half, "rows": rows,
                                         "memcpy_beside_busy_sms": engine, "seconds": time.perf_counter() - started}, indent=1))
    print(f"\nsweep took {time.perf_counter() - started:.1f} s")
    return 0


def copy_engine_test(cupy: Any, np: Any, module: Any, sm_count: int, half: int, one: Any,
                     stream: Any) -> dict[str, float]:
    """Time cudaMemcpy D2D and opgate's copy kernel, each queued on a second stream while a 50 ms spin
    kernel fills every SM: a copy that runs on copy engines finishes in its usual time, one that needs SMs
    waits for the spin."""
    runtime = cupy.cuda.runtime
    other = cupy.cuda.Stream(non_blocking=True)
    spin = module.get_function("spin")
    copy = module.get_function("gs_u8_nc0_cs0")
    src, dst = one[:half], one[half:]
    results = {}
    for label in ("cudaMemcpy", "copy kernel"):
        with stream:
            spin((sm_count * 8,), (256,), (np.uint64(50_000_000),))
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(other)
        if label == "cudaMemcpy":
            runtime.memcpyAsync(dst.data.ptr, src.data.ptr, half, runtime.memcpyDeviceToDevice, other.ptr)
        else:
            with other:
                copy((sm_count,), (256,), (src, dst, np.uint64(half // 16)))
        end.record(other)
        end.synchronize()
        stream.synchronize()
        results[label] = cupy.cuda.get_elapsed_time(start, end)
    print("beside a 50 ms spin on every SM: " + ", ".join(f"{k} took {v:.2f} ms" for k, v in results.items()))
    return results


if __name__ == "__main__":
    sys.exit(main())
