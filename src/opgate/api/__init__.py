"""Everything a plugin author imports, in one place: `from opgate.api import Check, Stage, Backend, ...`.

The documented extension surface (docs/architecture.md, "Where a new piece goes"): a doctor check (`Check`,
registered under the `opgate.checks` entry-point group), a verify stage (`Stage`, `opgate.verify.stages`), a
verify backend (`Backend`, `opgate.verify.backends`) and a verb's own rendering (`VerbRenderers`,
`opgate.report.renderers`), with the results, payloads and errors they hand back. A name leaves this list only with
a new API_VERSION. The names are defined where their layer puts them; this module only gathers them, and nothing in
opgate imports it (it sits above the verbs: tests/test_import_graph.py).
"""

from __future__ import annotations

from opgate.checks.base import Check, CheckContext
from opgate.core.spec import Operator, Scalar, TensorSpec
from opgate.engine.stages import OperatorPlan, Stage, StageNeeds, StageOptions
from opgate.model.errors import InputError, SkipCheck
from opgate.model.results import CheckResult, Figure, Outcome, Threshold
from opgate.reporting.renderers import VerbRenderers
from opgate.verify.backends.base import (Backend, ImplementationChoice, PreparedImplementation, function_runner,
                                         implementation_function)
from opgate.verify.loaded_specs import loaded_operators
from opgate.verify.tasks import GpuStagePayload, NumericsPayload, Payload

# Bumped when a name below is removed or changes meaning; adding a name keeps it.
API_VERSION = 1

__all__ = [
    "API_VERSION",
    # results and failures
    "CheckResult", "Figure", "Outcome", "Threshold", "InputError", "SkipCheck",
    # a check (doctor's entry-point group, or the check a stage's task names)
    "Check", "CheckContext",
    # a verify stage and the typed payload its tasks carry to their check
    "Stage", "StageNeeds", "StageOptions", "OperatorPlan", "Payload", "GpuStagePayload", "NumericsPayload",
    # a verify backend
    "Backend", "ImplementationChoice", "PreparedImplementation", "function_runner", "implementation_function",
    # a verb's own rendering
    "VerbRenderers",
    # the operator spec a stage or backend reads; a stage's check reads the spec file's operators (cached)
    "Operator", "TensorSpec", "Scalar", "loaded_operators",
]
