"""A crash of the implementation is a verdict: which case killed the child, and the rest still run.

Each implementation x dtype runs in its own child (opgate.verify.check). The child keeps a small journal in
its task's workdir:

- `running.json`, rewritten atomically around every call of the implementation: which case it is about to
  run (plan index, dims, seed, regime, layout) and in which phase the child is (`setup`: loading the plan,
  the spec and the backend; `case` / `shrink`: inside the implementation call, on a plan case or on one opgate
  tries beyond the plan; `after`: the call returned, opgate judges its output; `between`: the case is saved;
  `finished`: the result is built).
- `done/NNNNN.pkl`: the judged record of every finished case.
- `crashes.json`, written by the parent: the cases that killed a child, with the signal or exit status and
  the tail of that child's stderr.

When a child dies (a signal, os._exit, sys.exit, a CUDA context left unusable, or a hang past its limit)
while the implementation runs a case, the parent (`follow_up`, called by opgate.engine.runner) records the crash
and starts the same task again: the fresh child takes the finished cases from the journal, marks the crashed
ones failed (failure class `crash`), runs the rest, and returns one merged result. After `MAX_CRASHES`
crashes it stops restarting and the remaining cases are counted as not run. A child that dies outside the
implementation call (opgate's own code: plan loading, judging) stays an `error` (exit 3). Two deaths are not
crashes: a hang inside a JIT compile leaves its case not judged, and an out-of-memory error that left the CUDA
context unusable (a GPU the rest of the run had filled) runs the case again in the fresh child, once, with the GPU
to itself. So does a check whose cases ran out of memory twice in its process while others held the memory
(`_again_alone`): in a library run those others are mostly the run's own processes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import json
import os
import pickle
import re
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from opgate.engine import gpu_pause
from opgate.engine.atomic import write_atomically
from opgate.engine.children import stderr_excerpt
from opgate.model.results import CheckResult, Figure, Outcome, Threshold

CHECK_TARGET = "opgate.verify.check:VerifyImplementationCheck"
COMPILE_AHEAD_TARGET = "opgate.verify.compile_ahead:CompileAheadCheck"  # a compile-ahead task (compile_ahead.py)
WARM_UP_TARGET = "opgate.verify.runtime:VerifyRuntimeWarmUpCheck"  # the runtime stage's warm-up (compiles, autotunes)
# Crashed children restarted per implementation x dtype before the remaining cases are given up as not run.
MAX_CRASHES = 3
# Longest one implementation call may take before it counts as a hang (the task's --timeout caps it).
CASE_TIMEOUT_S = 300.0
# ... and at most this share of the task's --timeout, so a hung call is found before the whole task runs out.
CASE_TIMEOUT_SHARE = 0.9
# Exit status of a child that found the CUDA context unusable after the implementation raised (sticky error).
EXIT_CONTEXT_LOST = 75
# Tries of a case whose call ran out of GPU memory so that the CUDA context stayed unusable. In a library run a
# FlagGems norm's fresh process got "CUDA error: out of memory" copying a 512 KiB input to the GPU (its first CUDA
# call) in a run whose warm-ups filled the H100 at times, and the case read as a crash of the implementation
# (forty-sixth session); every other run of that case passed. A fresh process runs it again; out of memory twice,
# not judged.
OUT_OF_MEMORY_TRIES = 2
_FAULTHANDLER_TIMEOUT = re.compile(r"^Timeout \((\d+):(\d\d):(\d\d)(?:\.\d+)?\)!")
# A frame as faulthandler writes it ('File "x.py", line 12 in run'; a Python traceback has ", in run"): the case's
# hang timer (faulthandler.dump_traceback_later(exit=True), which then exits with code 1) dumps every thread, and
# with a worker's many threads its "Timeout (...)!" line can fall out of the stderr tail the parent keeps
_FAULTHANDLER_FRAME = re.compile(r'^File ".*", line \d+ in \S+$')

PHASE_WORDS = {
    "setup": "setting up (loading the plan and the spec, preparing the backend) before any case ran",
    "after": "judging the output after the implementation returned",
    "between": "between two cases (generating inputs, saving a result, building the report)",
    "finished": "exiting after it had built its result (a library's destructor at interpreter exit?)",
}


# In the journal while a JIT compile runs in the child (Triton's jit hooks: backends/triton_backend.record_compiles):
# a call that hangs past the case limit there hung in the compiler, not in the implementation's own code
COMPILING = "compiling.json"
_OPEN_JOURNAL: dict[str, Path | None] = {"folder": None}  # the journal of the check running in this process


def compile_started(kernel: str) -> None:
    """A JIT compile of `kernel` begins in this process: the journal says so (in a numerics check), and the task is
    quiet for a measurement window (in a pausable task: engine/gpu_pause.py). Outside both, a no-op."""
    folder = _OPEN_JOURNAL["folder"]
    if folder is not None:
        with contextlib.suppress(OSError):  # a marker that cannot be written must not fail the kernel's compile
            _write_atomically(folder / COMPILING, json.dumps({"kernel": kernel, "time": time.time()}))
    gpu_pause.compile_began()  # no GPU work of this process from here to the compile's end


def compile_finished() -> None:
    """The compile is over (or, called before an implementation call, any compile that raised is: its post hook
    never ran). May wait while a measurement window is open, so a caller timing the compile reads its clock first."""
    folder = _OPEN_JOURNAL["folder"]
    if folder is not None:
        with contextlib.suppress(OSError):
            (folder / COMPILING).unlink()
    gpu_pause.compile_ended()


def warm_up_folder(options: Mapping[str, Any]) -> Path | None:
    """Where a runtime warm-up marks its JIT compiles (COMPILING): beside the work count it leaves, per
    implementation. None when the task has no work count path (the warm-up then marks nothing)."""
    count = str(options.get("work_count_path") or "")
    if not count:
        return None
    return Path(count).parent / f"{Path(count).stem}.{options.get('impl', 'impl')}.warm_up"


@contextlib.contextmanager
def compiles_marked(folder: Path | None) -> Iterator[None]:
    """Inside, compile_started/compile_finished mark a compile in `folder` (a runtime warm-up's): a warm-up the
    runner kills at its timeout is then reported with the kernel it was compiling. A check's open journal wins."""
    if folder is None or _OPEN_JOURNAL["folder"] is not None:
        yield
        return
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / COMPILING).unlink(missing_ok=True)
    _OPEN_JOURNAL["folder"] = folder
    try:
        yield
    finally:
        if _OPEN_JOURNAL["folder"] == folder:
            _OPEN_JOURNAL["folder"] = None


def _warm_up_follow_up(task: Any, result: CheckResult) -> CheckResult:
    """A runtime warm-up killed at its timeout while a JIT compile ran: say which kernel and for how long (attorch's
    NLL loss at S = 65536: Triton's autotuner compiling a 65536-wide block in one warp, past 300 s, thirty-seventh
    session), so the error reads as the first call's compile time, which production pays too."""
    folder = warm_up_folder(task.context.options)
    compiling = _read_json(folder / COMPILING) if folder is not None else {}
    if "timeout_s" not in result.extra or not compiling:
        return result
    running_s = max(0.0, time.time() - float(compiling.get("time", time.time())))
    kernel = compiling.get("kernel", "?")
    return dataclasses.replace(
        result, reason=f"{result.reason} while Triton compiled kernel {kernel} (that compile had run "
                       f"{running_s:.0f} s): the first call at the timing size did not finish compiling",
        remediation="A production process's first call at this size pays the same compiles. Triton's autotuner "
                    "compiles every config at each new key: a whole-row block in one or two warps (over 64 elements "
                    "a thread) takes minutes. Trim such configs (prune_configs_by, or a num_warps that grows with "
                    "the block), cache the compiled kernels, or raise --timeout to measure it.",
        extra={**result.extra, "compiling": {"kernel": kernel, "seconds": round(running_s, 1)}})


def _write_atomically(path: Path, data: str | bytes) -> None:
    # the journal is scratch written per case: it must survive the child's crash, not the machine's
    write_atomically(path, data, durable=False)


def journal_dir(options: Mapping[str, Any]) -> Path:
    return Path(options["workdir"]) / "journal"


@dataclass(frozen=True)
class CrashEntry:
    """One case on which the implementation killed its process (or hung), as the parent saw it."""

    index: int | None  # plan index; None for a case opgate tried beyond the plan (shrinking, deviation probes)
    phase: str  # case | shrink (beyond the plan) | after
    case: dict[str, Any]
    label: str
    status: str  # "killed by SIGSEGV", "exited with code 7 ...", "timed out after 300 s", ...
    stderr_tail: str
    # "crash": the implementation killed its process or hung; "compile": it hung inside a JIT compile (COMPILING),
    # which leaves the case not judged instead of failed (a compile-time blow-up, not a wrong answer);
    # "out_of_memory": the GPU ran out of memory in a way that left the CUDA context unusable, which a fresh process
    # runs once more (OUT_OF_MEMORY_TRIES) before the case counts as not judged
    kind: str = "crash"

    @property
    def reason(self) -> str:
        if self.kind == "compile":
            return self.status
        if self.kind == "out_of_memory":
            return (f"out of GPU memory {OUT_OF_MEMORY_TRIES} times, and each time its process {self.status}: "
                    "not shown to be the implementation's own demand")
        where = " (after the call returned: memory it corrupted was found at a later free)" \
            if self.phase == "after" else ""
        return f"crashed: the implementation {self.status}{where}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "CrashEntry":
        return cls(data.get("index"), str(data["phase"]), dict(data["case"]), str(data["label"]),
                   str(data["status"]), str(data.get("stderr_tail", "")), str(data.get("kind", "crash")))


# -- the child's side ---------------------------------------------------------------------------------

class CaseJournal:
    """The child's record of its progress through the plan (see the module docstring)."""

    def __init__(self, folder: Path, case_timeout_s: float) -> None:
        self.folder = folder
        self.case_timeout_s = case_timeout_s
        (folder / "done").mkdir(parents=True, exist_ok=True)
        self.crashes = read_crashes(folder)
        self.stopped = bool(_read_json(folder / "crashes.json").get("stop"))
        # an out-of-memory death is no crash: its case runs again in this process, or is not judged
        self.crashed_labels = {c.label for c in self.crashes if c.kind != "out_of_memory"}
        self.stalled_labels = {c.label for c in self.crashes if c.kind == "compile"}
        with contextlib.suppress(OSError):  # a compile the last child died in is over
            (folder / COMPILING).unlink()
        _OPEN_JOURNAL["folder"] = folder
        self._mark({"phase": "setup"})
        faulthandler.enable()  # a fatal signal prints the Python stack (the user's line) into the stderr tail

    def close(self) -> None:
        """The check is over: a warm worker's next task (another check, a runtime warm-up) writes nothing here."""
        if _OPEN_JOURNAL["folder"] == self.folder:
            _OPEN_JOURNAL["folder"] = None

    @classmethod
    def open(cls, options: Mapping[str, Any]) -> "CaseJournal":
        return cls(journal_dir(options), float(options.get("case_timeout_s", CASE_TIMEOUT_S)))

    def _mark(self, state: dict[str, Any]) -> None:
        _write_atomically(self.folder / "running.json", json.dumps({**state, "time": time.time()}))

    # The plan, case by case.
    def state_of(self, index: int) -> tuple[str, Any]:
        """("done", record) | ("crashed", reason) | ("not_judged", reason: a compile that hung, or out of memory
        OUT_OF_MEMORY_TRIES times) | ("not_run", None) | ("run", None: also after fewer out-of-memory deaths) for plan
        case `index`."""
        in_plan = [c for c in self.crashes if c.index == index and c.phase != "shrink"]
        for crash in in_plan:
            if crash.kind != "out_of_memory":
                return ("not_judged" if crash.kind == "compile" else "crashed"), crash.reason
        if len(in_plan) >= OUT_OF_MEMORY_TRIES:
            return "not_judged", in_plan[-1].reason
        saved = self.folder / "done" / f"{index:05d}.pkl"
        if saved.is_file():
            return "done", pickle.loads(saved.read_bytes())
        if self.stopped:
            return "not_run", None
        return "run", None

    def save(self, index: int, record: Any) -> None:
        _write_atomically(self.folder / "done" / f"{index:05d}.pkl", pickle.dumps(record))
        self._mark({"phase": "between"})  # a death from here on is opgate's until the next call begins

    @contextlib.contextmanager
    def implementation_call(self, case: Any, index: int | None) -> Iterator[None]:
        """Around one call of the implementation: say which case runs, and die on a hang past the limit."""
        phase = "case" if index is not None else "shrink"
        marker = {"phase": phase, "index": index, "case": case.to_dict(), "label": case.label(),
                  "limit_s": self.case_timeout_s}
        compile_finished()  # a compile that raised never ran its post hook: its markers are stale by now
        gpu_pause.pause_point()  # wait while a measurement window is open
        self._mark(marker)
        try:
            # a hang past the limit dumps the stack and exits; waits in a measurement window do not count
            with gpu_pause.hang_timer(self.case_timeout_s):
                yield
        except Exception:
            fault = _cuda_context_fault()
            if fault:  # a sticky CUDA error: this process cannot judge anything more; a fresh one resumes
                self._mark({**marker, "cuda_fault": fault})
                traceback.print_exc()
                print(f"opgate: the CUDA context is unusable after this case ({fault}); a fresh process resumes",
                      file=sys.stderr, flush=True)
                os._exit(EXIT_CONTEXT_LOST)
            raise
        self._mark({**marker, "phase": "after"})

    def not_crashed(self, records: Sequence[Any]) -> list[Any]:
        return [r for r in records if r.case.label() not in self.crashed_labels]

    def split_failing(self, failing: Sequence[Any]) -> tuple[list[Any], list[Any]]:
        """(records kept as they are, records opgate may run again to shrink them or probe a deviation): a crashed
        case is never run again in this process, and after a crash on such an extra run none is."""
        crashed = [r for r in failing if r.case.label() in self.crashed_labels]
        others = [r for r in failing if r.case.label() not in self.crashed_labels]
        if self.stopped or any(c.phase == "shrink" for c in self.crashes):
            return crashed + others, []
        return crashed, others

    def finished(self) -> None:
        self._mark({"phase": "finished"})

    # The merged result.
    def annotate(self, result: CheckResult, planned: int, judged: int, token_for: Callable[[Any], str],
                 spec_name: str) -> CheckResult:
        """Add the crashes to the result the child built from every case it has (crashed ones failed)."""
        self.finished()
        # a hung compile is a case not judged; a case out of memory ran again or is not judged (its record says which)
        crashes = [c for c in self.crashes if c.kind == "crash"]
        stalled = [c for c in self.crashes if c.kind == "compile"]
        # the time budget's capped cases are said by the result already (check._with_capped_cases): counted here
        # too, they read as stopped by crashes (mamba's chunk scan: 1 crash, 34-77 capped, "not run: opgate stops
        # restarting an implementation after 3 crashes")
        capped = len(result.extra.get("time_budget", {}).get("capped", ()))
        if not crashes:
            not_run = planned - judged - len(stalled) - capped
            if not (self.stopped and not_run > 0):
                return result
            return dataclasses.replace(  # MAX_CRASHES hung compiles: the restarts stopped
                result, reason=f"{result.reason}; {not_run} case(s) not run: opgate stops restarting an "
                               f"implementation after {MAX_CRASHES} hung calls",
                figures=(*result.figures, Figure("cases not run", not_run, "",
                                                 Threshold(0, "==", f"{MAX_CRASHES} hung calls at most"),
                                                 key="verify.numerics.cases_not_run")))
        from opgate.verify.inputs import Case

        entries = []
        for crash in crashes:
            entry = crash.to_dict()
            entry["replay"] = token_for(Case.from_dict(crash.case))
            entry["stderr_excerpt"] = stderr_excerpt(crash.stderr_tail)
            entries.append(entry)
        in_plan = [c for c in crashes if c.phase != "shrink"]
        not_run = planned - judged - len(in_plan) - len(stalled) - capped if self.stopped else 0
        first = entries[0]
        crash_text = (f"the implementation {first['status']} on {first['label']}"
                      + (" (a case opgate tried while narrowing down a failure)" if first["phase"] == "shrink" else ""))
        if len(entries) > 1:
            crash_text += f" ({len(entries)} crashes in all)"
        crash_text += f"; replay: opgate verify {spec_name} --replay {first['replay']}"
        others = [r for r in result.extra.get("cases", []) if not r.get("passed")
                  and not any(str(reason).startswith("crashed: ") for reason in r.get("reasons", []))]
        if others:
            rest = f"other failures: {result.reason}"
        elif judged:
            rest = f"the other {judged} case(s) ran in fresh processes and are within budget"
        else:
            rest = "no other case was judged"
        if not others and result.extra.get("time_budget", {}).get("reason"):
            rest += "; " + result.extra["time_budget"]["reason"]  # the passing reason it replaces said it
        if not_run > 0:
            rest += (f"; {not_run} case(s) not run: opgate stops restarting an implementation after "
                     f"{MAX_CRASHES} crashes")
        extra = dict(result.extra)
        previous_class = extra.get("failure_class")
        extra.update(failure_class="crash", crashes=entries, cases_planned=planned, cases_judged=judged,
                     cases_crashed=len(in_plan), cases_not_run=max(0, not_run))
        if others and previous_class and previous_class != "crash":
            extra["other_failure_class"] = previous_class
        if "replay" not in extra or not others:
            extra["replay"] = first["replay"]
        figures = (Figure("crashed cases", len(in_plan), "",
                          Threshold(0, "==", "the implementation must not kill its process"),
                          key="verify.numerics.crashed_cases"),
                   Figure("cases judged (the crashed ones apart)", judged,
                          key="verify.numerics.cases_judged_the_crashed_ones_apart"),
                   *result.figures)
        if not_run > 0:
            figures += (Figure("cases not run", not_run, "", Threshold(0, "==", f"{MAX_CRASHES} crashes at most"),
                               key="verify.numerics.cases_not_run"),)
        remediation = ("The implementation killed its process (or hung): run the replay command alone, under "
                       "gdb or compute-sanitizer, and look at the stack in the stderr lines below the table; "
                       "an out-of-bounds write on a strided or tail case is the usual cause")
        if others and result.remediation:
            remediation += "; " + result.remediation
        # opgate's own extras (the reference through torch.compile, ...) only warn on the calibration
        warning_only = bool(extra.get("calibration_warning"))
        outcome = result.outcome if warning_only else Outcome.FAILED
        reason = ("calibration warning: " if warning_only else "") + f"[crash] {crash_text}; {rest}"
        return dataclasses.replace(result, outcome=outcome, reason=reason,
                                   figures=figures, remediation=remediation, extra=extra)


def _cuda_context_fault() -> str:
    from opgate.engine.worker import cuda_context_fault

    return cuda_context_fault()


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_crashes(folder: Path) -> list[CrashEntry]:
    return [CrashEntry.from_dict(c) for c in _read_json(folder / "crashes.json").get("crashes", [])]


# -- the parent's side --------------------------------------------------------------------------------

def death_status(result: CheckResult, marker: Mapping[str, Any]) -> str:
    """How the child ended, in words, from the runner's error result and the journal's marker."""
    extra = result.extra
    if "timeout_s" in extra:
        return f"timed out after {float(extra['timeout_s']):g} s (killed by opgate)"
    code = extra.get("returncode")
    if code == EXIT_CONTEXT_LOST and marker.get("cuda_fault"):
        return f"left the CUDA context unusable ({marker['cuda_fault']})"
    if isinstance(code, int) and code < 0:
        from opgate.engine.children import signal_name

        return f"killed its process with {signal_name(code)}"
    tail = str(extra.get("stderr_tail", ""))
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    for line in lines:
        match = _FAULTHANDLER_TIMEOUT.match(line)
        if match and code == 1:
            hours, minutes, seconds = (int(g) for g in match.groups())
            return f"timed out after {hours * 3600 + minutes * 60 + seconds:g} s (a hang: no return from the call)"
    if code == 1 and lines and _FAULTHANDLER_FRAME.match(lines[-1]) and "limit_s" in marker:
        # the hang timer's dump without its first line (attorch's NLL loss gradient, thirty-sixth session: a
        # 5-minute Triton compile read as "exited with code 1 without reporting", a [crash] finding)
        return f"timed out after {float(marker['limit_s']):g} s (a hang: no return from the call)"
    return f"exited with code {code} without reporting (os._exit, sys.exit or exit() inside the implementation)"


def _out_of_memory_context(result: CheckResult, marker: Mapping[str, Any]) -> bool:
    """Whether the child exited because an out-of-memory error left its CUDA context unusable (the fault the
    child found after the call, verify/resume.py CaseJournal.implementation_call), not a sticky kernel error."""
    fault = str(marker.get("cuda_fault", ""))
    return result.extra.get("returncode") == EXIT_CONTEXT_LOST and "out of memory" in fault.lower()


def follow_up(task: Any, result: CheckResult) -> Any:
    """The runner's hook for a finished verify child: the same task again (resume after a crash) or the result.

    Only a child that died while the implementation ran a case is resumed; any other death of a verify child
    stays an `error` with advice that fits verify."""
    if task.target == WARM_UP_TARGET and result.outcome is Outcome.ERROR:
        return _warm_up_follow_up(task, result)
    if task.target == COMPILE_AHEAD_TARGET:  # whatever became of it, the numerics check meets it and reports it
        return dataclasses.replace(result, extra={**(result.extra or {}), "internal": True})
    if result.outcome is Outcome.ERROR and _measured_beside_others(task, result):
        return dataclasses.replace(task, gpu_alone=True)
    if task.target != CHECK_TARGET or result.outcome is not Outcome.ERROR:
        return result
    beside = cases_out_of_memory_beside_others(result)
    if beside and task.uses_gpu and not task.gpu_alone:
        return _again_alone(task, beside)
    if "returncode" not in result.extra and "timeout_s" not in result.extra:
        return result  # the check reported an error itself (an exception in opgate): not a death
    folder = journal_dir(task.context.options)
    marker = _read_json(folder / "running.json")
    phase = str(marker.get("phase", "setup"))
    timed_out = "timeout_s" in result.extra
    status = death_status(result, marker)
    data = _read_json(folder / "crashes.json")
    crashes = list(data.get("crashes", []))
    if timed_out and "case" in marker:
        # The task's whole --timeout ran out (a hung call is stopped at its own, shorter limit first): the
        # implementation was slow over many cases, which is no crash of the one it happened to be running.
        return dataclasses.replace(
            result, reason=f"{result.reason} while the implementation ran {marker.get('label', '?')}: its cases "
                           "together took longer than --timeout (no single call passed --case-timeout)",
            remediation="Raise --timeout (or use a smaller --budget); a call that never returns is reported as a "
                        "crash of its case once it passes --case-timeout.")
    if phase in ("setup", "between", "finished") or timed_out or "case" not in marker:
        what = PHASE_WORDS.get(phase, phase)
        return dataclasses.replace(
            result, reason=f"{result.reason} while {what}: opgate's own code, not a verdict on the implementation",
            remediation="A bug in opgate or its environment, not in your implementation: report it with the "
                        "stderr lines shown below the table (the JSON report has the full tail).")
    if len(crashes) > MAX_CRASHES:  # the bound holds even if a child keeps dying where no case is left to run
        return dataclasses.replace(
            result, outcome=Outcome.FAILED,
            reason=f"the implementation kept killing its process ({len(crashes) + 1} crashes, the last: {status} on "
                   f"{marker.get('label', '?')}); opgate stopped restarting it",
            remediation="Run the replay command of the first crash alone, under gdb or compute-sanitizer.",
            extra={**result.extra, "failure_class": "crash", "crashes": crashes})
    index = marker.get("index")
    compiling = _read_json(folder / COMPILING)
    kind = "crash"
    if _out_of_memory_context(result, marker):
        kind = "out_of_memory"
    elif compiling and "a hang" in status:  # it hung inside a JIT compile: the compile's time, not a wrong answer
        kind = "compile"
        began = float(compiling.get("time", 0.0)) - float(marker.get("time", 0.0))
        status = (f"its JIT compile of kernel {compiling.get('kernel', '?')} did not finish within the case limit "
                  f"({status.split('(')[0].removeprefix('timed out after ').strip()}; the compile began "
                  f"{max(0.0, began):.0f} s into the call)")
    crashes.append(CrashEntry(index, phase if index is not None else "shrink", dict(marker["case"]),
                              str(marker.get("label", "")), status,
                              str(result.extra.get("stderr_tail", "")), kind).to_dict())
    data["crashes"] = crashes
    if len(crashes) >= MAX_CRASHES:
        data["stop"] = True
    _write_atomically(folder / "crashes.json", json.dumps(data))
    with contextlib.suppress(OSError):
        (folder / "running.json").unlink()
    if kind == "out_of_memory" and task.uses_gpu:  # its next try has the GPU to itself (_again_alone)
        return dataclasses.replace(task, exclusive=True)
    return task


class NotedFollowUps:
    """follow_up, noting each task it runs again and why, by check id (the report's extra.engine.run_again). A task
    queued again leaves no result of its first try: without this an interrupted run's report showed FlagGems' norm
    checks as begun at 320-400 s and never ended, when their first tries had ended and they waited to run alone
    (fiftieth session)."""

    def __init__(self) -> None:
        self.run_again: dict[str, list[str]] = {}

    def __call__(self, task: Any, result: CheckResult) -> Any:
        after = follow_up(task, result)
        if not isinstance(after, CheckResult):
            self.run_again.setdefault(task.check_id, []).append(_why_again(task, after))
        return after


def _why_again(task: Any, again: Any) -> str:
    if getattr(again, "gpu_alone", False) and not getattr(task, "gpu_alone", False):
        return "with every idle worker ended first (out of memory beside them)"
    if getattr(again, "exclusive", False) and not getattr(task, "exclusive", False):
        return "alone on its GPU (cases out of memory beside other processes)"
    return "in a fresh process (its process died or lost its CUDA context)"


def cases_out_of_memory_beside_others(result: CheckResult) -> list[int]:
    """The plan indices of the cases a numerics check could not judge because, out of memory twice, other processes
    held the GPU's memory (opgate.gpu.judge.oom: cause "others"; verify/check.py records each case's index)."""
    from opgate.gpu.judge.oom import OTHERS

    events = (result.extra or {}).get("out_of_memory") or []
    return sorted({int(event["index"]) for event in events if isinstance(event, Mapping)
                   and event.get("cause") == OTHERS and event.get("retry") == "out of memory again"
                   and isinstance(event.get("index"), int)})


def _again_alone(task: Any, indices: Sequence[int]) -> Any:
    """The check again, run alone on its GPU (an exclusive task: after the side-by-side work, with idle workers
    ended until half the card is free), its other cases' records kept: the memory others held in a library run is
    mostly the run's own. All three of FlagGems' skip_layer_norm checks could not judge their N = 65537 case on an
    H100 while the run's other processes held 75-78 of its 79 GiB (forty-seventh session). Alone, an out-of-memory
    error there is judged as the implementation's own demand or does not happen. A check that was already exclusive
    runs again with every idle worker ended first (CheckTask.gpu_alone), once."""
    done = journal_dir(task.context.options) / "done"
    for index in indices:
        with contextlib.suppress(OSError):
            (done / f"{index:05d}.pkl").unlink()
    return dataclasses.replace(task, exclusive=True, gpu_alone=task.exclusive)


def _measured_beside_others(task: Any, result: CheckResult) -> bool:
    """Whether a measurement (an exclusive GPU task not yet run with its GPU emptied) could not judge its size
    because other processes held the GPU's memory: the run's idle warm workers, which the runner ends only until
    half the card is free. In the fiftieth session's H100 library run fla's cross-entropy at M=8192, V=256000 could
    not be timed in 6 checks while 48 idle workers' CUDA contexts held 27 GiB; the same checks were timed in the run
    before. Run again once with every idle worker ended: an out-of-memory error then is the size's own."""
    from opgate.gpu.judge.oom import BESIDE_OTHERS_KEY

    return (bool(getattr(task, "uses_gpu", False)) and bool(getattr(task, "exclusive", False))
            and not getattr(task, "gpu_alone", False) and BESIDE_OTHERS_KEY in (result.extra or {}))
