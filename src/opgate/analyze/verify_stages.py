"""`opgate analyze`'s stages offered to `opgate verify --stages portability,occupancy,roofline`.

Registered in the `opgate.verify.stages` entry-point group like any stage plugin, so verify never imports
analyze: the engine finds these through the registry and runs the chosen ones once over the spec after its own
checks; their results join verify's report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from opgate.model.results import RunReport
from opgate.engine.stages import OperatorPlan, Stage


class _AnalyzeStage(Stage):
    whole_run_group = "analyze"
    order = 90

    def tasks(self, plan: OperatorPlan) -> list[Any]:
        return []  # runs once over the whole spec (run_whole), not per operator

    def run_whole(self, spec_file: Path, names: Sequence[str], request: Any, console: Any) -> RunReport:
        from opgate.analyze.portability import DEFAULT_TARGETS, parse_targets
        from opgate.analyze.run import AnalyzeOptions, run_analyze

        options = AnalyzeOptions(spec_file=spec_file, targets=parse_targets(list(DEFAULT_TARGETS)),
                                 out_dir=Path(request.out_dir) / "analyze", jobs=request.jobs, stages=list(names),
                                 dtypes=list(request.dtypes) or None)
        report, _ = run_analyze(options, console)
        return report


class PortabilityStage(_AnalyzeStage):
    name = "portability"
    summary = "compile for every default target GPU without a GPU (opgate analyze, opt-in)"


class OccupancyStage(_AnalyzeStage):
    name = "occupancy"
    summary = "occupancy of each compiled kernel per target (opgate analyze, opt-in)"


class RooflineStage(_AnalyzeStage):
    name = "roofline"
    summary = "roofline floors per catalogue GPU (opgate analyze, opt-in)"
