// Oracle for opgate's occupancy calculator: NVIDIA's own cuda_occupancy.h, compiled by the test with g++.
// stdin: one case per line
//   major minor maxThreadsPerBlock maxThreadsPerSM regsPerBlock regsPerSM warpSize
//   smemPerBlock smemPerSM smemPerBlockOptin reservedSmemPerBlock
//   blockSize numRegs staticSmem dynamicSmem maxDynamicSmem carveout numBlockBarriers
// stdout: status activeBlocks limitingFactors blockLimitRegs blockLimitSharedMem blockLimitWarps
//         blockLimitBlocks blockLimitBarriers allocatedRegistersPerBlock allocatedSharedMemPerBlock
#include <cstdio>
#include "cuda_occupancy.h"

int main() {
    int major, minor, maxThreadsPerBlock, maxThreadsPerSM, regsPerBlock, regsPerSM, warpSize;
    long smemPerBlock, smemPerSM, smemOptin, reserved;
    int blockSize, numRegs, carveout, barriers;
    long staticSmem, dynamicSmem, maxDynamicSmem;
    while (scanf("%d %d %d %d %d %d %d %ld %ld %ld %ld %d %d %ld %ld %ld %d %d", &major, &minor,
                 &maxThreadsPerBlock, &maxThreadsPerSM, &regsPerBlock, &regsPerSM, &warpSize, &smemPerBlock,
                 &smemPerSM, &smemOptin, &reserved, &blockSize, &numRegs, &staticSmem, &dynamicSmem,
                 &maxDynamicSmem, &carveout, &barriers) == 18) {
        cudaOccDeviceProp prop;
        prop.computeMajor = major;
        prop.computeMinor = minor;
        prop.maxThreadsPerBlock = maxThreadsPerBlock;
        prop.maxThreadsPerMultiprocessor = maxThreadsPerSM;
        prop.regsPerBlock = regsPerBlock;
        prop.regsPerMultiprocessor = regsPerSM;
        prop.warpSize = warpSize;
        prop.sharedMemPerBlock = (size_t)smemPerBlock;
        prop.sharedMemPerMultiprocessor = (size_t)smemPerSM;
        prop.numSms = 1;
        prop.sharedMemPerBlockOptin = (size_t)smemOptin;
        prop.reservedSharedMemPerBlock = (size_t)reserved;

        cudaOccFuncAttributes attr;  // as the runtime builds it from cudaFuncAttributes
        attr.maxThreadsPerBlock = maxThreadsPerBlock;
        attr.numRegs = numRegs;
        attr.sharedSizeBytes = (size_t)staticSmem;
        attr.partitionedGCConfig = PARTITIONED_GC_OFF;
        attr.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
        attr.maxDynamicSharedSizeBytes = (size_t)maxDynamicSmem;
        attr.numBlockBarriers = barriers;

        cudaOccDeviceState state;
        state.carveoutConfig = carveout;

        cudaOccResult result;
        cudaOccError status = cudaOccMaxActiveBlocksPerMultiprocessor(&result, &prop, &attr, &state, blockSize,
                                                                      (size_t)dynamicSmem);
        printf("%d %d %u %d %d %d %d %d %d %ld\n", (int)status, result.activeBlocksPerMultiprocessor,
               result.limitingFactors, result.blockLimitRegs, result.blockLimitSharedMem, result.blockLimitWarps,
               result.blockLimitBlocks, result.blockLimitBarriers, result.allocatedRegistersPerBlock,
               (long)result.allocatedSharedMemPerBlock);
    }
    return 0;
}
