"""The plugin API of `opgate verify`'s stages, found in the `opgate.verify.stages` entry-point group.

It lives outside both `verify` and `analyze` (and imports neither) because both provide stages.

A stage turns one operator's selection (implementations x dtypes, the calibrated plan files) into check tasks
for the runner, and declares what it needs; the engine turns a missing need (no GPU, a tool not found) into one
`skipped` line with the reason, so a stage never has to. The shipped stages (numerics, runtime, sanitizer,
recovery, ncu, qos in verify/builtin_stages.py; portability, occupancy, roofline in opgate/analyze/verify_stages.py)
register exactly the way a third-party package does (pyproject.toml):

    [project.entry-points."opgate.verify.stages"]
    "mystage" = "my_package.stages:MyStage"
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Sequence

from opgate.checks.base import CheckContext
from opgate.engine.plugins import VERIFY_STAGES_GROUP, entry_points, load
from opgate.model.results import CheckResult, Outcome
from opgate.engine.runner import CheckTask

if TYPE_CHECKING:
    from opgate.core.spec import Operator
    from opgate.model.results import RunReport
    from opgate.verify.backends.base import ImplementationChoice
    from opgate.verify.tasks import Payload


@dataclass(frozen=True)
class StageNeeds:
    """What a stage needs to run at all; the engine checks it once, before any task starts."""

    gpu: bool = False  # a CUDA GPU visible to torch
    tools: tuple[str, ...] = ()  # executables it runs (found by Stage.find_tool)
    # only the user's own implementations on backends that run on the GPU (Backend.gpu_stages)
    gpu_implementations: bool = False
    # the calibrated plan files (OperatorPlan.plans); False: its tasks draw their own inputs and start at once,
    # while the parent still calibrates
    calibration: bool = True


@dataclass(frozen=True)
class StageOptions:
    """The request's options the stages read (what the CLI's flags said)."""

    extras: bool = True  # also verify the reference through opgate's extra backends (torch.compile, ...)
    shrink: bool = True  # shrink a numerics failure to its smallest failing case
    case_timeout_s: float | None = None  # one call on one case before it counts as a hang; None: the default
    sanitizer_tools: tuple[str, ...] = ("memcheck", "racecheck", "initcheck", "synccheck")
    # seconds of numerics per operator (--time-budget); None: the default for the budget level and the device
    time_budget_s: float | None = None


@dataclass
class OperatorPlan:
    """What the engine hands every stage for one operator: the selection, the plan files, the request."""

    op: "Operator"
    choices: list["ImplementationChoice"]
    dtypes: list[str]
    spec_file: Path  # absolute
    budget: str
    seed: int
    gpu: bool
    jobs: int
    workdir: Path
    out_dir: Path
    timeout_s: float
    replaying: bool = False
    plans: dict[str, Path] = field(default_factory=dict)  # dtype -> calibrated plan file (verify/planfile.py)
    options: StageOptions = field(default_factory=StageOptions)
    child_envs: dict[str, dict[str, str]] = field(default_factory=dict)  # implementation -> child environment
    gpu_choices: list["ImplementationChoice"] = field(default_factory=list)  # user's, on gpu_stages backends
    # the epoch seconds the operator's calibration began, where one thread calibrates its dtypes one after another
    # (0: side by side, or not known); verify's numerics checks take what is left of the operator's budget from it
    calibration_began_at: float = 0.0

    def artefact_dir(self, implementation: str, dtype: str) -> Path:
        """The report's folder (--out) of one implementation x dtype: IR per target, checked ONNX models, sanitizer
        logs."""
        return (self.out_dir / "verify" / self.op.name / implementation / dtype).resolve()

    def scratch_dir(self, label: str) -> Path:
        """A fresh folder of its own for one task (unique across every operator of the run)."""
        import tempfile

        return Path(tempfile.mkdtemp(prefix=f"{label}-", dir=self.workdir))

    def env(self, choice: "ImplementationChoice") -> dict[str, str]:
        """The child environment of an implementation's checks (the same for every stage, so one warm worker
        serves them all); the engine fills `child_envs` from the backends."""
        return dict(self.child_envs.get(choice.name, {}))

    def worker_key(self, choice: "ImplementationChoice", env: dict[str, str]) -> str:
        """One warm-worker pool per environment and library: the numerics, runtime and recovery checks of a
        library's spec files, operators and implementations share imports, loaded specs and compiled kernels."""
        return self.worker_key_for(self.spec_file, self.op.name, choice.name, env)

    @staticmethod
    def worker_key_for(spec_file: Path, op: str, implementation: str, env: dict[str, str]) -> str:
        """The key of the warm workers a task may run in: its child environment and its spec's library
        (engine.specload.worker_group), not its spec file. A library's spec files import the same packages (fla,
        FlagGems, torch's compiler stack: ~14 CPU-s in every fresh worker on the H200 host); with a key per spec
        file a library run started 66 workers in 350 s, 18 of them ending an idle worker of another file to make
        room (seventeenth H200 session). A worker keeps each spec it loaded (verify/loaded_specs.py, which also
        keeps one file's torch switches from the next). `op` and `implementation` name the task's subject for
        callers; the key ignores them."""
        from opgate.engine.specload import worker_group

        digest = hashlib.sha1(json.dumps(sorted(env.items())).encode()).hexdigest()[:8]
        return f"verify:{worker_group(spec_file)}:{digest}"

    def task(self, stage: "Stage", check_id: str, title: str, target: str, timeout_s: float | None,
             payload: "Payload", choice: "ImplementationChoice", exclusive: bool | None = None, retire: bool = False,
             warm: bool = True, labels: Mapping[str, str] | None = None,
             retire_unless_passed: bool = False) -> CheckTask:
        """One task of `stage` for `choice`: its result carries the stage and the labels op, impl and `labels`
        (dtype, tool: what sets this task apart from the implementation's others), whatever its check reports.
        `timeout_s` and `exclusive` None: what the stage declares (Stage.timeout_s, Stage.exclusive), and a
        stage's timeout None is the run's (`self.timeout_s`, --timeout)."""
        env = self.env(choice)
        if timeout_s is None:
            timeout_s = self.timeout_s if stage.timeout_s is None else stage.timeout_s
        # On a GPU host every verify task may touch the GPU (numerics run torch, CuPy, ORT on CUDA): all take the
        # GPU guard's lock, measuring ones exclusively (opgate.engine.gpu_guard)
        return CheckTask(check_id, title, target, timeout_s,
                         CheckContext(verb="verify", level=self.budget, options=payload.to_dict()), env=env,
                         exclusive=stage.exclusive if exclusive is None else exclusive,
                         worker=self.worker_key(choice, env) if warm else "",
                         retire=retire, retire_unless_passed=retire_unless_passed, order=stage.order,
                         uses_gpu=self.gpu, stage=stage.name,
                         labels={"op": self.op.name, "impl": choice.name, **(labels or {})},
                         group=str(self.spec_file))  # a run completes spec file by spec file (CheckTask.group)


class Stage:
    """Subclass: set the class attributes and implement `tasks` (or, for a stage that runs once over the whole
    spec after the checks, set `whole_run_group` and implement `run_whole`)."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""  # one line for --help
    default: ClassVar[bool] = False  # among the stages run when --stages is not given
    needs: ClassVar[StageNeeds] = StageNeeds()
    # Scheduling: lower first among the tasks that run side by side; an exclusive GPU measurement starts once no
    # side-by-side task of its GPU waits (opgate.engine.runner), then alone.
    order: ClassVar[int] = 50
    # What the runner gives each of its tasks, declared here and nowhere else (not on the check classes; a check
    # that needs its limit reads CheckContext.timeout_s): seconds before the task's process is killed (None: the
    # run's --timeout), and whether it measures alone on its GPU (opgate.engine.runner, opgate.engine.gpu_guard).
    timeout_s: ClassVar[float | None] = None
    exclusive: ClassVar[bool] = False
    whole_run_group: ClassVar[str] = ""
    # A stage that needs calibration is asked for its tasks once per operator, with every dtype's plan file; True:
    # once per dtype as soon as that dtype's plan is written (OperatorPlan.plans then holds that one dtype).
    per_dtype_plans: ClassVar[bool] = False

    def find_tool(self, tool: str) -> str | None:
        """Where `tool` is, or None; override for tools outside PATH (compute-sanitizer under CUDA_HOME)."""
        return shutil.which(tool)

    def unmet(self, gpu: bool) -> str | None:
        """Why this stage cannot run here at all, or None."""
        if self.needs.gpu and not gpu:
            return (f"needs a CUDA GPU (none visible to torch): the {self.name} stage runs on a GPU host")
        for tool in self.needs.tools:
            if self.find_tool(tool) is None:
                return f"needs {tool}, which was not found (PATH, CUDA_HOME, /usr/local/cuda*)"
        return None

    def check_settings(self) -> None:
        """InputError for a setting of this stage (an environment variable) that is not valid: asked before any
        work, since its tasks may be asked for only minutes into a run."""

    def applies_to(self, plan: OperatorPlan) -> list["ImplementationChoice"]:
        """The implementations this stage checks."""
        return list(plan.gpu_choices if self.needs.gpu_implementations else plan.choices)

    def tasks(self, plan: OperatorPlan) -> list[CheckTask]:  # pragma: no cover - abstract
        raise NotImplementedError

    def run_whole(self, spec_file: Path, names: Sequence[str], request: Any, console: Any) -> "RunReport":
        raise NotImplementedError  # pragma: no cover - abstract


@lru_cache(maxsize=None)
def discover_stages() -> dict[str, Stage]:
    """Every registered stage by name, in registration order (shipped and plugins)."""
    stages: dict[str, Stage] = {}
    for name, target in entry_points(VERIFY_STAGES_GROUP).items():
        stage = load(target)()
        if not isinstance(stage, Stage):
            raise TypeError(f"verify stage plugin {name!r} ({target}) is not an opgate Stage")
        stages[name] = stage
    return stages


def stage_names() -> tuple[str, ...]:
    """Registered stage names without loading them (for --help)."""
    return tuple(entry_points(VERIFY_STAGES_GROUP))


def default_stage_names() -> tuple[str, ...]:
    return tuple(name for name, stage in discover_stages().items() if stage.default)


def stage_tasks(plan: OperatorPlan, stages: Sequence[Stage], unmet: dict[str, str | None],
                ) -> tuple[list[tuple[int, CheckTask]], list[CheckResult]]:
    """Each stage's tasks for one operator, with its scheduling order (the engine calls this; a stage implements
    `tasks`); a stage whose needs are unmet is one `skipped` result (when it would have checked anything), and a
    stage's up-front verdicts are results."""
    items: list[tuple[int, CheckTask]] = []
    preset: list[CheckResult] = []
    for stage in stages:
        if stage.whole_run_group:
            continue
        reason = unmet.get(stage.name)
        if reason is not None:
            if stage.applies_to(plan) and not plan.replaying:
                preset.append(CheckResult(f"verify.{plan.op.name}.{stage.name}", f"{plan.op.name}: {stage.name}",
                                          Outcome.SKIPPED, reason))
            continue
        for item in stage.tasks(plan):
            if isinstance(item, CheckResult):
                preset.append(item)
            else:
                items.append((item.order or stage.order, item))  # a stage may order its own tasks apart
    return items, preset
