"""`opgate analyze`: portability, occupancy and roofline for every target GPU, without a GPU.

Modules: `limits` (per-CC SM limits from data/sm_limits.toml), `targets` (sm_XY / GPU names),
`occupancy` (NVIDIA's occupancy calculator, reimplemented), `roofline` (floors per GPU and dtype),
`capture` + `portability` (compile every Triton kernel of a spec for each target), `resources`
(registers/shared memory read back from the compiled cubin), `run` (the verb itself).
Heavy libraries (torch, triton, matplotlib) are imported inside functions only.
"""
