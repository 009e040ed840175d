#!/usr/bin/env bash
# Build the `opgate inspect` test fixtures and record cuobjdump's view of them as golden text.
#
#   scripts/build_inspect_fixtures.sh [OUT_DIR]        (default: tests/data/inspect)
#
# Needs nvcc (CUDA 13: lowest target sm_75). Optional: cuobjdump (goldens; default: PATH, then the
# nvidia-cuda-cuobjdump wheel of $PYTHON), a CUDA 12.x ptxas (ABI-7 cubin; default: Triton's bundled
# one) and Triton (a Triton cache entry). Re-running rewrites everything in OUT_DIR.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$HERE/tests/data/inspect}"
SRC="$HERE/tests/data/inspect/kernels.cu"
MAIN="$HERE/tests/data/inspect/main.cu"
NVCC="${NVCC:-nvcc}"
PYTHON="${PYTHON:-python3}"
mkdir -p "$OUT"
cd "$OUT"

site="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null || true)"
CUOBJDUMP="${CUOBJDUMP:-$(command -v cuobjdump || ls "$site"/nvidia/cu*/bin/cuobjdump 2>/dev/null | head -1 || true)}"
PTXAS12="${PTXAS12:-$site/triton/backends/nvidia/bin/ptxas}"

G3=(-gencode arch=compute_75,code=sm_75 -gencode arch=compute_80,code=sm_80
    -gencode "arch=compute_90,code=[sm_90,compute_90]")

build() {  # name, nvcc arguments...
  local name="$1"; shift
  echo "nvcc $name: $*"
  "$NVCC" "$@" "$SRC"
}

# Fatbins inside relocatable objects: several -gencode combinations and every compression mode.
build multi.o           -c -o multi.o "${G3[@]}"
build ptx_only.o        -c -o ptx_only.o -gencode arch=compute_80,code=compute_80
build sass_only.o       -c -o sass_only.o -gencode arch=compute_86,code=sm_86
build sm90a.o           -c -o sm90a.o -gencode "arch=compute_90a,code=[sm_90a,compute_90a]"
build compress_all.o    -c -o compress_all.o "${G3[@]}" -Xfatbin=-compress-all
build compress_size.o   -c -o compress_size.o "${G3[@]}" --compress-mode=size
build compress_speed.o  -c -o compress_speed.o "${G3[@]}" --compress-mode=speed
build compress_none.o   -c -o compress_none.o "${G3[@]}" --compress-mode=none
build rdc.o             -c -o rdc.o -rdc=true "${G3[@]}"
# Blackwell targets: family (f) and arch-specific (a) variants, 112-byte entry headers.
build blackwell.o       -c -o blackwell.o -gencode arch=compute_100f,code=sm_100f \
                        -gencode "arch=compute_120a,code=[sm_120a,compute_120a]" -gencode arch=compute_103,code=sm_103
# Standalone images.
build kernels.fatbin    -fatbin -o kernels.fatbin "${G3[@]}"
build sm89.cubin        -cubin -o sm89.cubin -arch=sm_89
build sm100f.cubin      -cubin -o sm100f.cubin -arch=sm_100f
build kernels.ptx       -ptx -o kernels.ptx -arch=sm_86
# A shared library and an -rdc executable (it has both .nv_fatbin and __nv_relfatbin).
build libkernels.so     -shared -Xcompiler -fPIC -cudart shared -o libkernels.so -gencode arch=compute_80,code=sm_80
echo "nvcc rdc_app"
"$NVCC" -rdc=true -cudart shared -o rdc_app "$MAIN" "$SRC" -gencode "arch=compute_80,code=[sm_80,compute_80]"
# A static library (ar archive) of two objects.
rm -f libkernels.a && ar rcs libkernels.a ptx_only.o sass_only.o

# A wheel (one deflated and one stored member), a seed for the fuzzer's zip path.
rm -f demo-0.1-py3-none-linux_x86_64.whl
"$PYTHON" - <<'PY'
import zipfile
with zipfile.ZipFile("demo-0.1-py3-none-linux_x86_64.whl", "w", compression=zipfile.ZIP_DEFLATED) as z:
    z.write("sass_only.o", "demo/sass_only.o")
    z.write("ptx_only.o", "demo/ptx_only.o", compress_type=zipfile.ZIP_STORED)
    z.writestr("demo/__init__.py", "")
PY

# An ABI version 7 cubin (CUDA 12.x layout of e_flags), sm_90a, from a CUDA 12 ptxas when present.
if [ -x "$PTXAS12" ] && "$PTXAS12" --version | grep -q "release 12\."; then
  sed -e 's/^\.version .*/.version 8.0/' -e 's/^\.target .*/.target sm_90a/' kernels.ptx > /tmp/opgate_abi7.ptx
  "$PTXAS12" -arch=sm_90a -o sm90a_abi7.cubin /tmp/opgate_abi7.ptx
  rm -f /tmp/opgate_abi7.ptx
  echo "ptxas 12 sm90a_abi7.cubin"
else
  echo "no CUDA 12 ptxas: sm90a_abi7.cubin not rebuilt"
fi

# A Triton cache entry (cubin + JSON metadata), compiled for sm_90 without a GPU.
if "$PYTHON" -c "import triton" 2>/dev/null; then
  script="$(mktemp --suffix=.py)"
  cat > "$script" <<'PY'
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

src = triton.compiler.ASTSource(fn=add_kernel, signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32",
                                "n": "i32", "BLOCK": "constexpr"}, constexprs={"BLOCK": 1024})
triton.compile(src, target=GPUTarget("cuda", 90, 32))
PY
  rm -rf triton_cache && TRITON_CACHE_DIR="$OUT/triton_cache" TRITON_DEFAULT_FP_FUSION=1 "$PYTHON" "$script"
  rm -f "$script"
  # keep what inspect reads (cubin, JSON, the PTX it must ignore); drop the IR dumps
  find triton_cache -type f ! -name '*.cubin' ! -name 'add_kernel.json' ! -name '*.ptx' -delete
  sed -i "s#$site#<site-packages>#g" triton_cache/*/add_kernel.json
  echo "triton triton_cache/"
fi

# Golden cuobjdump output, so the tests compare without cuobjdump too.
if [ -n "$CUOBJDUMP" ] && [ -x "$CUOBJDUMP" ]; then
  "$CUOBJDUMP" --version | tail -1 > cuobjdump.version
  for f in *.o *.fatbin *.cubin *.so *.a rdc_app triton_cache/*/*.cubin; do
    [ -f "$f" ] || continue
    base="golden/$(basename "$f")"
    mkdir -p golden
    "$CUOBJDUMP" --list-elf "$f" > "$base.list-elf.txt" 2>/dev/null || true
    "$CUOBJDUMP" --list-ptx "$f" > "$base.list-ptx.txt" 2>/dev/null || true
    "$CUOBJDUMP" --dump-resource-usage "$f" > "$base.res-usage.txt" 2>/dev/null || true
  done
  sed -i "s#$(pwd)/##g" golden/*.txt  # cuobjdump prints archive members with absolute paths
  echo "goldens from $CUOBJDUMP"
else
  echo "cuobjdump not found: goldens not rewritten"
fi
