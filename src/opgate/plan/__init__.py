"""GPU resource governance: MIG/MPS capacity planning, autoscaling policies, and the configs real schedulers read.

`opgate plan mig|mps|autoscale` (src/opgate/plan/cli.py). The planners solve with OR-Tools CP-SAT and report
optimality or the gap; every emitted layout is re-checked by `opgate.plan.legality`, written apart from the
solver's model.
"""
