"""bfloat16 Triton kernels: compiled on the GPU vs opgate's patched interpreter on the CPU, same inputs.

Run from the repo root on a GPU host: `python3 scripts/gpu/backends_bf16.py`. For each kernel of
tests/data/verify/bf16_triton_spec.py it prints how many output elements the compiled kernel and the
interpreter (in a child with TRITON_INTERPRET=1 and opgate's bfloat16 fixes) agree on bit for bit, the
largest difference in bfloat16 ulps, and the same for the unpatched interpreter, so the fix's effect is
measured against what compiled Triton really gives.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "tests" / "data" / "verify" / "bf16_triton_spec.py"


def load_kernels():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bf16_spec", SPEC)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_inputs():
    import torch

    g = torch.Generator().manual_seed(0)

    def rand(*shape, positive=False):
        t = torch.randn(*shape, generator=g)
        return (t.abs() if positive else t).to(torch.bfloat16)

    return {
        "maximum": ("maximum_triton", (rand(16, 33), rand(16, 33))),
        "rotary": ("rotary_triton", (rand(7, 64), rand(7, 64), rand(7, 64))),
        "row_sum": ("row_sum_triton", (rand(5, 1000, positive=True),)),
        "affine": ("affine_triton", (rand(5, 33), rand(33), rand(33))),
        "dot": ("dot_triton", (rand(17, 200), rand(200, 9))),
    }


def run_all(device: str, patch: bool) -> dict:
    """Every kernel on `device`; outputs as bfloat16 bit patterns (lists of ints)."""
    import torch

    if patch:
        from opgate.verify.backends.triton_backend import mend_interpreter_bf16

        facts = mend_interpreter_bf16()
    else:
        facts = {}
    kernels = load_kernels()
    outputs = {}
    for name, (fn_name, args) in make_inputs().items():
        try:
            fn = getattr(kernels, fn_name)
            out = fn(*[a.to(device) for a in args]).cpu()
            outputs[name] = out.view(torch.int16).flatten().tolist()
        except Exception as exc:  # a failing kernel is reported, the others still run
            outputs[name] = f"{type(exc).__name__}: {exc}"
    return {"outputs": outputs, "facts": facts}


def interpreter_children() -> tuple[dict, dict]:
    """The kernels under the interpreter on the CPU, with and without opgate's fixes, in two children at once."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT / "src")}
    with tempfile.TemporaryDirectory() as folder:
        targets = {mode: Path(folder) / f"{mode}.json" for mode in ("patch", "raw")}
        children = {mode: subprocess.Popen([sys.executable, __file__, "--child", mode, str(target)], env=env,
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                    for mode, target in targets.items()}
        results = {}
        for mode, child in children.items():
            try:
                _, stderr = child.communicate(timeout=45)
            except subprocess.TimeoutExpired:
                child.kill()
                results[mode] = {"error": "timed out after 45 s"}
                continue
            results[mode] = (json.loads(targets[mode].read_text()) if child.returncode == 0
                             else {"error": stderr[-2000:]})
        return results["patch"], results["raw"]


def ulp_distance(a_bits: list[int], b_bits: list[int]) -> tuple[int, int]:
    """(elements equal bit for bit, largest distance in bfloat16 ulps) of two bfloat16 bit lists."""
    def ordered(bits: int) -> int:  # bfloat16 bits (as int16) to a monotone integer line
        u = bits & 0xFFFF
        return (u & 0x7FFF) if u < 0x8000 else -(u & 0x7FFF)

    equal = sum(1 for a, b in zip(a_bits, b_bits) if a == b)
    worst = max((abs(ordered(a) - ordered(b)) for a, b in zip(a_bits, b_bits)), default=0)
    return equal, worst


def main() -> int:
    import torch

    if len(sys.argv) >= 4 and sys.argv[1] == "--child":
        Path(sys.argv[3]).write_text(json.dumps(run_all("cpu", sys.argv[2] == "patch")))
        return 0
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to compare against")
        return 2
    print(f"GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}")
    import triton

    print(f"triton {triton.__version__}")
    compiled = run_all("cuda", patch=False)["outputs"]
    patched, raw = interpreter_children()
    for label, child in (("patched", patched), ("raw", raw)):
        if "error" in child:
            print(f"interpreter child ({label}) failed:\n{child['error']}")
    print("facts of the patched interpreter:", json.dumps(patched.get("facts", {}))[:1500])
    rows = []
    for name, gpu_bits in compiled.items():
        row = [name]
        for child in (patched, raw):
            cpu_bits = child.get("outputs", {}).get(name)
            if isinstance(gpu_bits, str) or not isinstance(cpu_bits, list):
                row.append(f"n/a ({gpu_bits if isinstance(gpu_bits, str) else cpu_bits})"[:60])
                continue
            equal, worst = ulp_distance(gpu_bits, cpu_bits)
            row.append(f"{equal}/{len(gpu_bits)} equal, max {worst} ulp")
        rows.append(row)
    print("\nbfloat16 kernel | compiled (GPU) vs patched interpreter | compiled vs unpatched interpreter")
    for row in rows:
        print(" | ".join(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
