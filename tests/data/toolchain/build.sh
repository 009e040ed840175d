#!/usr/bin/env bash
# Build tests/data/toolchain/kernels.cu with nvcc and with clang, as host objects (device code in .nv_fatbin)
# and as device-only fatbins that CuPy's RawModule loads (two_builds_spec.py). Run from the repo root:
#   bash tests/data/toolchain/build.sh [OUT_DIR]      (default: tests/data/toolchain)
# Both builds target the same fleet: SASS for sm_80 and sm_90, PTX for compute_90 (the newest).
#
# What the clang build needs, found on this project's machines (Debian 12, clang-19 from Debian's packages):
# - clang 19 rejects the CUDA 13 headers: with the nvidia-cuda-nvcc/-runtime 13.x wheels
#   "crt/math_functions.hpp:3000:40: error: expected function body after function declarator" and
#   "__clang_cuda_runtime_wrapper.h:387:10: fatal error: 'texture_fetch_functions.h' file not found"
#   (CUDA 13 removed that header; the same error with /usr/local/cuda-13.0). clang 19 supports CUDA <= 12.5.
# - So the clang build uses CUDA 12.5 headers from the wheels nvidia-cuda-runtime-cu12, nvidia-cuda-nvcc-cu12
#   (ptxas, crt/, libdevice), nvidia-curand-cu12 (clang's wrapper includes curand_mtgp32_kernel.h) and
#   nvidia-cuda-cccl-cu12 (<nv/target>), assembled into one --cuda-path tree.
# - The cu12 nvcc wheel carries no `fatbinary`; CUDA 13's fatbinary dropped the --image=profile=... form that
#   clang 19 passes ("fatbinary fatal : Unknown option '-image'"), so the tree's bin/fatbinary is a shim that
#   rewrites each --image=profile=sm_XY,file=F to --image3=kind=elf,sm=XY,file=F (compute_XY: kind=ptx) and
#   runs CUDA 13's fatbinary.
set -uo pipefail
OUT=${1:-tests/data/toolchain}
SRC=tests/data/toolchain/kernels.cu
PY=${PYTHON:-python3}
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

NVCC=$(command -v nvcc || true)
SITE=$($PY -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
[ -z "$NVCC" ] && [ -x "$SITE/nvidia/cu13/bin/nvcc" ] && NVCC=$SITE/nvidia/cu13/bin/nvcc
GENCODE=(-gencode arch=compute_80,code=sm_80 -gencode "arch=compute_90,code=[sm_90,compute_90]")
if [ -n "$NVCC" ]; then
  "$NVCC" --version | tail -1
  "$NVCC" -O3 -c "${GENCODE[@]}" -o "$OUT/kernels_nvcc.o" "$SRC" && echo "built $OUT/kernels_nvcc.o"
else
  echo "nvcc: not found (PATH, or the nvidia-cuda-nvcc wheel)"
fi

CLANG=${CLANG:-$(command -v clang++-19 || command -v clang++ || true)}
build_clang() {
"$CLANG" --version | head -1
CU13_FATBINARY=$SITE/nvidia/cu13/bin/fatbinary
[ -x "$CU13_FATBINARY" ] || CU13_FATBINARY=$(command -v fatbinary || true)
CU12=$WORK/wheels
$PY -m pip install -q --no-deps --target "$CU12" "nvidia-cuda-runtime-cu12==12.5.*" "nvidia-cuda-nvcc-cu12==12.5.*" \
  "nvidia-curand-cu12==10.3.6.*" "nvidia-cuda-cccl-cu12==12.5.*" 2>&1 | grep -v "is ignored" || true
# CUDA12_TREE=DIR keeps the assembled tree (for OPGATE_CLANG_CUDA_PATH in tests/inspect/test_inspect_compare.py).
ROOT=${CUDA12_TREE:-$WORK/cuda-12.5}
mkdir -p "$ROOT/bin" "$ROOT/include" "$ROOT/nvvm"
cp -r "$CU12/nvidia/cuda_runtime/include/." "$ROOT/include/"
cp -r "$CU12/nvidia/cuda_nvcc/include/crt" "$ROOT/include/"
cp "$CU12"/nvidia/curand/include/curand*.h "$ROOT/include/"
cp -r "$CU12/nvidia/cuda_cccl/include/nv" "$ROOT/include/"
cp -r "$CU12/nvidia/cuda_nvcc/nvvm/libdevice" "$ROOT/nvvm/"
cp "$CU12/nvidia/cuda_nvcc/bin/ptxas" "$ROOT/bin/ptxas"
cat > "$ROOT/bin/fatbinary" <<SHIM
#!/usr/bin/env bash
args=()
for a in "\$@"; do
  case "\$a" in
    --image=profile=sm_*,file=*) s=\${a#--image=profile=sm_}; args+=("--image3=kind=elf,sm=\${s%%,*},file=\${a#*,file=}");;
    --image=profile=compute_*,file=*) s=\${a#--image=profile=compute_}; args+=("--image3=kind=ptx,sm=\${s%%,*},file=\${a#*,file=}");;
    *) args+=("\$a");;
  esac
done
exec "$CU13_FATBINARY" "\${args[@]}"
SHIM
chmod +x "$ROOT/bin/fatbinary"
CLANG_ARCHS=(--cuda-path="$ROOT" --cuda-gpu-arch=sm_80 --cuda-gpu-arch=sm_90 --no-cuda-include-ptx=all
             --cuda-include-ptx=sm_90 -Wno-unknown-cuda-version -O3)
"$CLANG" "${CLANG_ARCHS[@]}" -c -o "$OUT/kernels_clang.o" "$SRC" && echo "built $OUT/kernels_clang.o"
}
if [ -n "$CLANG" ]; then build_clang; else echo "clang: not found (apt-get install clang-19)"; fi

# The device code each build embeds, as a standalone fatbin for CuPy's RawModule: the .nv_fatbin section itself,
# so what runs on the GPU is byte for byte what `opgate inspect` read.
for build in nvcc clang; do
  [ -f "$OUT/kernels_$build.o" ] || continue
  objcopy -O binary --only-section=.nv_fatbin "$OUT/kernels_$build.o" "$OUT/kernels_$build.fatbin" \
    && echo "extracted $OUT/kernels_$build.fatbin"
done
