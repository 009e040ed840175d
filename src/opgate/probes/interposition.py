"""Which shared object really provides each key CUDA entry point in a fresh process.

Run as `python -m opgate.probes.interposition LIB...` in a child that has the user's environment
(LD_PRELOAD and all). The child loads the vendor libraries RTLD_GLOBAL, as a framework would,
then resolves every symbol through the global scope (dlopen(NULL) + dlsym) and names the object
that answered (dladdr). A preloaded or earlier-linked library that exports the same name wins
the lookup: that is the hijack this probe exposes. Prints one JSON object.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from pathlib import Path

# Entry point -> the vendor library family that should provide it (file name prefix).
KEY_SYMBOLS = {
    "cudaMalloc": "libcudart",
    "cudaLaunchKernel": "libcudart",
    "cudaMemcpy": "libcudart",
    "cuLaunchKernel": "libcuda",
    "cuMemAlloc_v2": "libcuda",
    "cublasSgemm_v2": "libcublas",
    "cublasGemmEx": "libcublas",
    "cublasLtMatmul": "libcublasLt",
    "cudnnConvolutionForward": "libcudnn",
    "cufftExecC2C": "libcufft",
    "ncclAllReduce": "libnccl",
    "nvrtcCompileProgram": "libnvrtc",
}


class DlInfo(ctypes.Structure):
    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


def is_vendor_provider(symbol: str, provider_path: str) -> bool:
    expected = KEY_SYMBOLS[symbol]
    name = Path(provider_path).name
    # libcublasLt must not satisfy a libcublas expectation by prefix, and vice versa.
    if expected == "libcublas":
        return name.startswith("libcublas.so") or name.startswith("libcublas_")
    return name.startswith(expected + ".so") or name.startswith(expected + "_") or name.startswith(expected + "64")


def read_preload_file(path: str = "/etc/ld.so.preload") -> list[str]:
    try:
        text = Path(path).read_text()
    except OSError:
        return []
    return [entry for line in text.splitlines() for entry in line.replace(":", " ").split() if not line.startswith("#")]


def how_it_got_there(provider: str, ld_preload: list[str], preload_file: list[str]) -> str:
    real = os.path.realpath(provider)
    if any(os.path.realpath(p) == real or Path(p).name == Path(provider).name for p in ld_preload):
        return "LD_PRELOAD"
    if any(os.path.realpath(p) == real or Path(p).name == Path(provider).name for p in preload_file):
        return "/etc/ld.so.preload"
    return "link order (loaded before the vendor library and exports the same name)"


def resolve(symbols: list[str]) -> dict[str, str | None]:
    libc = ctypes.CDLL(None)
    dladdr = libc.dladdr
    dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
    dladdr.restype = ctypes.c_int
    global_scope = ctypes.CDLL(None)  # dlopen(NULL): the process's global lookup scope
    providers: dict[str, str | None] = {}
    for symbol in symbols:
        try:
            address = ctypes.cast(getattr(global_scope, symbol), ctypes.c_void_p).value
        except AttributeError:
            providers[symbol] = None
            continue
        info = DlInfo()
        if address and dladdr(address, ctypes.byref(info)) and info.dli_fname:
            providers[symbol] = os.path.realpath(info.dli_fname.decode())
        else:
            providers[symbol] = None
    return providers


def main(argv: list[str]) -> int:
    load_errors = {}
    for library in argv[1:]:
        try:
            ctypes.CDLL(library, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
        except OSError as exc:
            load_errors[library] = str(exc)
    report = {
        "providers": resolve(list(KEY_SYMBOLS)),
        "ld_preload": [p for p in os.environ.get("LD_PRELOAD", "").replace(":", " ").split() if p],
        "preload_file": read_preload_file(),
        "load_errors": load_errors,
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
