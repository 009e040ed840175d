"""The core domain that `verify` and `analyze` share and neither owns: the operator spec (spec.py), the dtype
facts (dtypes.py, one table), the work model (work.py: FLOPs, bytes, roofline points) and the per-architecture
SM limits and occupancy model (limits.py, occupancy.py). Nothing here imports verify, analyze or torch at
module level."""
