"""Which of opgate's empty-tensor cases the reference survives, found in a child process.

An empty batch is where shipped bugs hide, so the plan adds size-0 cases; but a reference may do worse than raise
on them: PyTorch 2.11's CPU scaled_dot_product_attention killed the process with SIGFPE on an empty dim (seen on
the H200 host, 2026-12-01). The parent calibrates with the reference in its own process, so it first evaluates
every opgate-added empty case here, in a child, and keeps only those that return.

One child serves every operator of a spec file (the spec and its libraries are imported once: a library corpus of
33 operators had started 33 children importing fla and FlagGems at once). It prints one JSON line per event,
["start" | "ok" | "raised", operator, index]; a case that kills it is dropped and the child restarted after it.

Run as: python -m opgate.verify.empty_probe SPEC PROBES_JSON   (PROBES_JSON: [[op, dtype, [[index, case], ...]], ...])
or with PROBES_JSON "-": it reads them from its input once it has imported the spec. A single-file run starts that
child before it has read the spec itself (prestart), so the child's imports (torch, the spec's libraries: 2-3 s on
the H200 host) overlap the parent's instead of delaying the calibration that waits for the probe.

The same child, once the empty cases are done, times one float64 call of each reference it is asked to (a
representative case: verify/plan_order.py), in this thread's CPU time with one torch thread, and prints
["timed", operator, seconds]: the calibration pool ranks its plans by it. The payload is then
{"empty": [...as above...], "timed": [[op, dtype, case], ...]}. A call that kills the child costs only its timing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from opgate.verify.inputs import Case

PROBE_TIMEOUT_S = 120.0
MAX_RESTARTS = 4
FROM_INPUT = "-"
# spec file (resolved) -> a child started with FROM_INPUT, importing the spec while the parent does too
_PRESTARTED: dict[Path, subprocess.Popen[str]] = {}


def surviving_cases(spec_file: Path, op_name: str, dtype: str, cases: Sequence[Case]) -> set[int]:
    """Indices into `cases` whose reference evaluation returned (or raised: the parent then drops it cleanly)."""
    return surviving_cases_of_spec(spec_file, {op_name: (dtype, cases)})[op_name]


def surviving_cases_of_spec(spec_file: Path, probes: Mapping[str, tuple[str, Sequence[Case]]]) -> dict[str, set[int]]:
    """Per operator of one spec file (operator -> (dtype, cases)): the indices whose reference returned or raised."""
    return probe_spec(spec_file, probes).survived


@dataclass
class SpecProbe:
    """What one spec file's probe child found: per operator, the empty cases' indices that returned or raised, and the
    CPU seconds of the one reference call it timed (operators whose call was not timed are absent)."""

    survived: dict[str, set[int]]
    call_seconds: dict[str, float] = field(default_factory=dict)


def probe_spec(spec_file: Path, probes: Mapping[str, tuple[str, Sequence[Case]]],
               timed: Mapping[str, tuple[str, Case]] | None = None) -> SpecProbe:
    """The empty cases of `probes` (operator -> (dtype, cases)) and the calls of `timed` (operator -> (dtype, case)),
    in a child that is started again after an empty case that killed it. Only the first child times (after its
    empty cases): a restart is for the empty cases alone, and an untimed plan is ranked by its elements."""
    found = SpecProbe({op: set() for op in probes})
    pending = [(op, i) for op, (_, cases) in probes.items() for i in range(len(cases))]
    untimed = dict(timed or {})
    for _ in range(MAX_RESTARTS + 1):
        if not pending and not untimed:
            break
        empty = [[op, dtype, [[i, cases[i].to_dict()] for o, i in pending if o == op]]
                 for op, (dtype, cases) in probes.items() if any(o == op for o, _ in pending)]
        payload = json.dumps({"empty": empty, "timed": [[op, dtype, case.to_dict()]
                                                        for op, (dtype, case) in untimed.items()]})
        stdout, killed_from_outside = _run_probe_child(spec_file, payload,
                                                       PROBE_TIMEOUT_S * max(1, len(probes) + len(untimed)))
        events = [_event(line) for line in stdout.splitlines()]
        done = {(op, i) for kind, op, i in filter(None, events) if kind in ("ok", "raised")}
        started = [(op, i) for kind, op, i in filter(None, events) if kind == "start"]
        for op, i in done:
            found.survived[op].add(i)
        found.call_seconds.update(_timings(stdout))
        untimed = {}
        killed = [key for key in started if key not in done]
        remaining = [key for key in pending if key not in done and key not in killed]
        if remaining == pending or killed_from_outside:  # died before any case, or the run was interrupted
            break
        pending = remaining
    return found


def _start_child(spec_file: Path, payload: str) -> subprocess.Popen[str]:
    from opgate.engine.children import die_with_parent, register_child

    proc = subprocess.Popen([sys.executable, "-m", "opgate.verify.empty_probe", str(spec_file), payload],
                            stdin=subprocess.PIPE if payload == FROM_INPUT else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
                            preexec_fn=die_with_parent)
    register_child(proc)
    return proc


def prestart(spec_file: Path) -> None:
    """Start the probe child of `spec_file` now; the first probe of that file gives it its cases (module doc)."""
    key = spec_file.resolve()
    if key not in _PRESTARTED:
        _PRESTARTED[key] = _start_child(key, FROM_INPUT)


def discard_prestarted() -> None:
    """End the prestarted children no probe took (their input closes: they exit)."""
    from opgate.engine.children import kill_process_group, unregister_child

    for proc in _PRESTARTED.values():
        try:
            proc.communicate(input="[]", timeout=5)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            kill_process_group(proc)
        unregister_child(proc)
    _PRESTARTED.clear()


def _run_probe_child(spec_file: Path, payload: str, timeout_s: float) -> tuple[str, bool]:
    """(the probe child's stdout, whether the run is being interrupted). It is a registered
    child in its own process group, so an interrupted run kills it (opgate.engine.children) instead of waiting for it at
    exit: its thread is joined when the interpreter ends, and a probe of a slow reference outlasted a CI runner's
    SIGTERM-to-SIGKILL grace."""
    from opgate.engine.children import STOPPING, kill_process_group, unregister_child

    proc = _PRESTARTED.pop(spec_file.resolve(), None)
    given = proc is not None
    if proc is None:
        proc = _start_child(spec_file, payload)
    try:
        stdout, _ = proc.communicate(input=payload if given else None, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_process_group(proc)
        stdout, _ = proc.communicate()
    finally:
        unregister_child(proc)
    return stdout or "", STOPPING.is_set()


def _event(line: str) -> tuple[str, str, int] | None:
    try:
        kind, op, index = json.loads(line)
        if kind not in ("start", "ok", "raised"):
            return None
        return str(kind), str(op), int(index)
    except (ValueError, TypeError):  # the reference printed something of its own
        return None


def _timings(stdout: str) -> dict[str, float]:
    """The ["timed", operator, seconds] lines of a child's output."""
    out: dict[str, float] = {}
    for line in stdout.splitlines():
        try:
            kind, op, seconds = json.loads(line)
        except (ValueError, TypeError):
            continue
        if kind == "timed" and isinstance(seconds, (int, float)) and seconds >= 0:
            out[str(op)] = float(seconds)
    return out


# A call under this many CPU seconds is timed once more and the shorter kept: a process's first call of an op pays
# its lazy set-up, which the calibration's ~25 calls a case do not.
RETIME_UNDER_S = 0.1


def _time_call(op: Any, case: Case, dtype: str) -> float:
    """This thread's CPU seconds for one call of the reference on the case's float64 inputs (the calibration's)."""
    from opgate.verify.bounds_device import reference_cpu_seconds
    from opgate.verify.inputs import make_inputs

    generated = make_inputs(op, case, dtype)
    best = float("inf")
    for _ in range(2):
        best = min(best, reference_cpu_seconds(op.reference, generated.truth))
        if best >= RETIME_UNDER_S:
            break
    return best


def _main(argv: list[str]) -> int:
    import torch

    from opgate.verify.gradients import with_gradient_operators
    from opgate.verify.inputs import make_inputs
    from opgate.core.spec import load_spec_file

    spec, payload = argv
    torch.set_num_threads(1)  # a timed call's CPU time is this thread's (time.thread_time)
    operators = {o.name: o for o in with_gradient_operators(load_spec_file(spec))}
    if payload == FROM_INPUT:  # prestarted: the cases come once the parent knows them
        payload = sys.stdin.read() or "[]"
    request = json.loads(payload)
    if isinstance(request, list):  # the empty cases alone
        request = {"empty": request, "timed": []}
    for op_name, dtype, cases in request.get("empty", []):
        op = operators[op_name]
        for index, data in cases:
            print(json.dumps(["start", op_name, index]), flush=True)
            case = Case.from_dict(data)
            try:
                generated = make_inputs(op, case, dtype)
                with torch.no_grad():
                    op.reference(*generated.truth)
                    op.reference(*generated.values)
            except Exception:
                print(json.dumps(["raised", op_name, index]), flush=True)
                continue
            print(json.dumps(["ok", op_name, index]), flush=True)
    for op_name, dtype, data in request.get("timed", []):
        try:
            seconds = _time_call(operators[op_name], Case.from_dict(data), dtype)
        except Exception:  # the calibration meets it again and reports it; this plan is ranked by its elements
            continue
        print(json.dumps(["timed", op_name, round(seconds, 6)]), flush=True)
    return 0


if __name__ == "__main__":  # pragma: no cover - run as a child process
    sys.exit(_main(sys.argv[1:]))
