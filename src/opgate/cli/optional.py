"""Optional dependencies: which extra brings each one, so a missing one is one line, exit 2.

`pip install opgate` (no extras) runs doctor and inspect; verify and analyze need the `verify` extra
(torch, Triton, ONNX Runtime, matplotlib for the roofline charts). `opgate[all]` installs every extra.
"""

from __future__ import annotations

# Top-level module name -> (extra, what opgate uses it for).
OPTIONAL_MODULES: dict[str, tuple[str, str]] = {
    "numpy": ("verify", "verify's numerics"),
    "torch": ("verify", "verify's and analyze's reference and torch backends"),
    "triton": ("verify", "the Triton backend and analyze's compiles"),
    "onnx": ("verify", "the ONNX Runtime backend"),
    "onnxruntime": ("verify", "the ONNX Runtime backend"),
    "onnxscript": ("verify", "exporting the reference to ONNX"),
    "matplotlib": ("verify", "analyze's roofline charts"),
    "hypothesis": ("test", "opgate's property tests"),
}


def missing_module_message(module: str | None, verb: str = "") -> str | None:
    """One-line advice for a ModuleNotFoundError of an optional dependency; None for anything else."""
    top = (module or "").split(".")[0]
    if top not in OPTIONAL_MODULES:
        return None
    extra, purpose = OPTIONAL_MODULES[top]
    command = f"opgate {verb}" if verb else "this command"
    return (f"{command} needs the optional package {top!r} ({purpose}), which is not installed; "
            f"install it with: pip install 'opgate[{extra}]' (or 'opgate[all]' for every optional part)")
