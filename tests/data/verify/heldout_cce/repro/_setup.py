"""Common set-up for the standalone reproductions: Triton's CPU interpreter and the corpus's libdevice shim
(../_cce_env.py: NumPy log1p/tanh for the interpreter's libdevice stubs, nothing else). No opgate import."""
import os
import sys
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import _cce_env  # noqa: E402,F401
