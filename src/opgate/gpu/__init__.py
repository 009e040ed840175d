"""opgate's GPU side, in the three layers every part of opgate follows: probes collect, judges decide,
reporters render.

- `probes/`: measurements that touch the device (CuPy, torch, cuda-bindings, NVML through
  `opgate.probes.nvml`, compute-sanitizer, ncu) and return plain dataclasses of figures; imports no judge,
  check or reporter. `device` is the one "is there a GPU" gate, `timing` the one event-timing module with
  its one summary type (`Samples`), `graphs` the one CUDA graph capture check, `oom` the one out-of-memory
  recovery trial; `collectives` (+ `collectives_worker`, one rank), `link_matrix`, `contention` and `qos` (+
  `qos_worker`; an operator request is added by `opgate.verify.qos_worker`) the multi-GPU and sharing measurements.
- `judge/`: pure functions and tables over those figures (bands, references, host-link verdicts, CUDA error
  explanations, the ncu limiter diagnosis, the stored ceilings, the collectives, link-matrix, contention and QoS
  verdicts);
  needs no live GPU and imports no torch, CuPy or CUDA at module level. The doctor's checks
  (`opgate.doctor.gpu_checks`, `doctor.qos`, `doctor.runtime_features`, `doctor.collectives`, `doctor.contention`)
  and verify's stages call probes, then judges, and return `CheckResult`s.
- `explain`: the `opgate explain` command (an ncu report judged by `judge.limiter`, rendered).

Reporters live in `opgate.reporting`. Standalone GPU-session tools (the planted compute-sanitizer bugs, the
sticky-error recovery trials) are not part of the CLI and live with the tests' data, in `tests/data/gpu/`. Every
module here is cheap to import on a machine without a GPU: heavy libraries are imported inside the functions, and
probes raise `GpuUnavailable` with the reason when they cannot run.
"""

from __future__ import annotations
