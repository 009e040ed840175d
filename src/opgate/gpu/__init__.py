"""Measured GPU probes, compute-sanitizer runs and fault-recovery trials (issue 6).

Layers as everywhere in opgate: the probe modules here measure and return plain dataclasses of figures;
`opgate.doctor.gpu_probes` judges them against `references`/`judge`; reporters render. Nothing here
imports CuPy, torch or NVML at module import time: `import opgate.gpu.<module>` is cheap and works on a
machine without a GPU, and the probes raise `GpuUnavailable` with the reason when they cannot run.
"""

from __future__ import annotations
