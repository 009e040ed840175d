"""One compute-sanitizer run per spec file and tool, shared by the sanitizer checks of its implementations.

A sanitized child costs 7-8 s on the H200 host before the implementation runs (Python, torch, a CUDA context, the
spec and its Triton kernels from the disk cache; the tool itself adds 0-1 s: docs/benchmarks.md), and a library
of 45 operators made ~256 of them, each 155-167 s long beside the rest of the run. So the sanitizer tasks of one
spec file, tool and environment form a group (`group_sanitizer_tasks`): the group's first task runs one child
that calls every implementation of the group in turn (each as a single run would: the first declared size, then
the tail size, allocator caches off, one config per autotune key) and writes what it saw to the group's folder;
the other tasks start after it (CheckTask.after) and read it. racecheck's groups hold at most
SHARED_MEMBERS_LIMIT implementations each: its calls are slow enough that a whole file's run can outgrow the limit
of one.

Only a clean shared run is shared: no finding, nothing the tool flagged, exit 0, every implementation's every
step done. Anything else (a finding, a crash, a timeout) and each task runs its own child as before, so a finding
is attributed, described and located exactly as a single run does it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from pathlib import Path
from typing import Any, Sequence

RECORD = "record.json"  # the group's folder: what the shared run saw
PROGRESS = "progress.jsonl"  # one line per implementation and step as the child reaches it
REQUEST = "request.json"  # what the child runs
SANITIZER_TARGET = "opgate.verify.runtime:VerifySanitizerCheck"


@dataclasses.dataclass(frozen=True)
class Member:
    """One implementation of a shared run: an operator, its implementation and the dtype its check runs in."""

    op: str
    impl: str
    dtype: str

    def key(self) -> str:
        return f"{self.op}|{self.impl}|{self.dtype}"


# At most this many implementations share one racecheck run. racecheck analyses every shared-memory access on the
# host, so its calls cost tens of seconds each (fla's linear cross-entropy and KL-divergence with their cuBLAS GEMMs:
# 38-42 s alone on the idle H200 host), and one run of a whole spec file's eight loss implementations ran past the
# 420 s limit in a library run (twenty-seventh session): the limit spent, then every member alone again. Chunks run
# side by side; the other tools' runs of the same file took 26-163 s for all of a file's members.
SHARED_MEMBERS_LIMIT = {"racecheck": 4}


def group_sanitizer_tasks(tasks: Sequence[Any], workdir: Path) -> list[Any]:
    """The sanitizer tasks of one spec file, tool and environment (one GPU) as a group sharing one run (racecheck's
    in chunks of SHARED_MEMBERS_LIMIT): the first runs it for all (a longer timeout: the shared run, then its own if
    the shared one was not clean), the rest start after it. Groups of one and every other task are unchanged."""
    from opgate.verify.tasks import GpuStagePayload

    by_key: dict[tuple[Any, ...], list[int]] = {}
    for k, task in enumerate(tasks):
        if getattr(task, "target", "") != SANITIZER_TARGET:
            continue
        payload = GpuStagePayload.from_dict(task.context.options)
        key = (payload.spec_file, payload.tool, tuple(sorted(task.env.items())), task.device)
        by_key.setdefault(key, []).append(k)
    groups: list[list[int]] = []
    for (_, tool, _, _), indices in by_key.items():
        size = SHARED_MEMBERS_LIMIT.get(tool, len(indices))
        chunks = math.ceil(len(indices) / size)
        # chunks as even as the count allows (9 members: 3, 3, 3 rather than 4, 4, 1)
        groups += [indices[c * len(indices) // chunks:(c + 1) * len(indices) // chunks] for c in range(chunks)]
    out = list(tasks)
    for number, indices in enumerate(groups):
        if len(indices) < 2:
            continue
        folder = workdir / f"sanitizer-group-{number}"
        folder.mkdir(parents=True, exist_ok=True)
        payloads = [GpuStagePayload.from_dict(tasks[k].context.options) for k in indices]
        members = [dataclasses.asdict(Member(p.op, p.impl, p.dtype)) for p in payloads]
        first = tasks[indices[0]]
        for k, payload in zip(indices, payloads):
            shared = dataclasses.replace(payload, group_dir=str(folder),
                                         group=members if k == indices[0] else [])
            task = tasks[k]
            changes: dict[str, Any] = {"context": dataclasses.replace(task.context, options=shared.to_dict())}
            if k == indices[0]:
                changes["timeout_s"] = 2 * task.timeout_s  # the shared run, then its own when that was not clean
            else:
                changes["after"] = (*task.after, first.check_id)
            out[k] = dataclasses.replace(task, **changes)
    return out


def run_shared(group_dir: Path, spec_file: str, members: Sequence[dict[str, str]], run: Any) -> dict[str, Any]:
    """The group's first task: run the shared child through `run(command)` (run_under_sanitizer with the single
    runs' options) and write the record the others read. Returns the record."""
    group_dir.mkdir(parents=True, exist_ok=True)
    progress = group_dir / PROGRESS
    progress.unlink(missing_ok=True)
    request = group_dir / REQUEST
    request.write_text(json.dumps({"spec_file": spec_file, "members": list(members), "progress": str(progress)}))
    record: dict[str, Any] = {"clean": False, "why": "the shared run did not finish", "members": len(members)}
    try:
        result = run([sys.executable, "-m", "opgate.verify.sanitizer_batch", str(request)])
        record = judge_shared_run(result, members, progress)
    finally:
        from opgate.engine.atomic import write_atomically

        write_atomically(group_dir / RECORD, json.dumps(record))
    return record


def judge_shared_run(result: Any, members: Sequence[dict[str, str]], progress: Path) -> dict[str, Any]:
    """The record of a shared run (a SanitizerRun): clean, or why not, and each member's steps."""
    from opgate.gpu.probes.sanitizer import describe_exit

    steps = read_progress(progress)
    record: dict[str, Any] = {"duration_s": round(result.duration_s, 2), "log_path": result.log_path,
                              "members": len(members), "steps": steps}
    unfinished = [m for m in members if not steps.get(Member(**m).key(), {}).get("done")]
    why = ""
    if result.timed_out:
        why = "the shared run timed out"
    elif result.report.findings or result.sanitizer_flagged:
        why = "the shared run has findings: each implementation runs alone, so each finding is its own"
    elif result.returncode not in (0, None):
        why = f"the shared run {describe_exit(result.returncode)}"
    elif unfinished:
        why = f"the shared run did not finish {Member(**unfinished[0]).key()}"
    return {**record, "clean": not why, "why": why}


def read_progress(progress: Path) -> dict[str, dict[str, Any]]:
    """Per member key: the steps it started ([step, dims]) and whether it finished, from the child's progress file."""
    members: dict[str, dict[str, Any]] = {}
    if not progress.is_file():
        return members
    for line in progress.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line cut short by a crash
        entry = members.setdefault(str(event.get("member", "")), {"steps": [], "done": False})
        if event.get("event") == "step":
            entry["steps"].append([event["step"], event["dims"]])
        elif event.get("event") == "done":
            entry["done"] = True
    return members


def shared_record(group_dir: str, member: Member) -> dict[str, Any] | None:
    """What a clean shared run saw of `member` (its steps, the run's time and log), or None: no clean run covered it,
    and the task runs its own."""
    path = Path(group_dir) / RECORD
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    entry = record.get("steps", {}).get(member.key())
    if not record.get("clean") or not entry or not entry.get("done"):
        return None
    return {**record, "member_steps": entry["steps"]}


def _progress_line(progress: Any, **event: Any) -> None:
    progress.write(json.dumps(event) + "\n")
    progress.flush()
    os.fsync(progress.fileno())


def main(request_path: str) -> None:
    """The shared child: every member in turn, as runtime.run_sanitized runs one, its steps written to the progress
    file before each starts and once each has synchronised."""
    from opgate.verify.runtime import (disable_allocator_caches, load_implementation, one_config_per_autotune_key,
                                       sanitized_steps)
    from opgate.gpu.cuda_wait import apply_from_environment
    from opgate.verify.tasks import ImplementationRef

    apply_from_environment()  # waits for the instrumented GPU asleep: the numerics beside it need the cores
    request = json.loads(Path(request_path).read_text())
    disable_allocator_caches()
    import torch

    with open(request["progress"], "a") as progress:
        for raw in request["members"]:
            member = Member(**raw)
            op, implementation = load_implementation(ImplementationRef(request["spec_file"], member.op, member.impl))

            def mark(event: str, step: str, dims: dict[str, int], key: str = member.key()) -> None:
                if event == "start":
                    _progress_line(progress, event="step", member=key, step=step, dims=dims)

            with one_config_per_autotune_key():
                sanitized_steps(op, implementation, member.dtype, torch, mark)
            _progress_line(progress, event="done", member=member.key())


if __name__ == "__main__":
    main(sys.argv[1])
