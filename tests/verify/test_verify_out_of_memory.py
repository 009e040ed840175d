"""An out-of-memory error in a numerics case is a verdict only when opgate can show the demand was the
implementation's own; otherwise the case is not judged and the result is an `error` naming the memory, never a FAIL
(issue: another `opgate verify` run's recovery stage filled a shared GPU and 19 of 21 cases of this run were judged).

In process: the check's case runner with an implementation that raises torch.cuda.OutOfMemoryError (a Python class:
it raises on the CPU too) and recorded device-memory snapshots. End to end: tests/data/verify/oom_spec.py on the CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from tests_verify_support import DATA, ROOT, SRC

from opgate.gpu.probes.device_memory import DeviceMemorySnapshot, ProcessMemory
from opgate.verify import check as check_module
from opgate.gpu.judge.oom import exception_is_out_of_memory as out_of_memory
from opgate.verify.check import VerifyImplementationCheck
from opgate.verify.inputs import Case
from opgate.verify.resume import CaseJournal

GiB = 1 << 30
MESSAGE = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.81 GiB"


class RaisingImplementation:
    """A prepared implementation whose every call runs out of memory (counts its calls)."""

    limitation_of = None  # no backend limitation explains an out-of-memory error

    def __init__(self, message: str = MESSAGE) -> None:
        self.calls = 0
        self.message = message

    def run(self, values: Any, layout_applied: Any, out_specs: Any) -> Any:
        self.calls += 1
        raise torch.cuda.OutOfMemoryError(self.message)


def run_one_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, snapshot: DeviceMemorySnapshot | None,
                 message: str = MESSAGE, held_before: int = 0,
                 ) -> tuple[Any, RaisingImplementation, VerifyImplementationCheck]:
    import opgate

    monkeypatch.setattr(check_module, "device_memory_snapshot", lambda torch: snapshot)
    freed: list[int] = []
    monkeypatch.setattr(check_module, "free_cached_memory", lambda torch: freed.append(1))
    op = opgate.Operator("double", reference=lambda x: x * 2, inputs=[opgate.TensorSpec("x", ("M", "N"))],
                         dims={"M": [4], "N": [8]}, dtypes=["float32"])
    check = VerifyImplementationCheck()
    check.journal = CaseJournal(tmp_path / "journal", 30.0)
    check.oom_events = []
    check.held_before = held_before  # what the worker's allocators held as the check began
    prepared = RaisingImplementation(message)
    verdict = check._run_case(op, prepared, "float32", Case.make({"M": 4, "N": 8}, 0), [torch.zeros(4, 8)], [],
                              ["float32"], [None], index=0)
    assert freed == [1] and prepared.calls == 2  # retried once, after the cache was given back
    return verdict, prepared, check


def snapshot(free: float, total: float = 139.8, own: float = 1.0, others: tuple[int, ...] = ()) -> DeviceMemorySnapshot:
    return DeviceMemorySnapshot(0, int(free * GiB), int(total * GiB), int(own * GiB), f"torch {own} GiB reserved",
                                tuple(ProcessMemory(pid, None) for pid in others))


def test_out_of_memory_while_another_process_fills_the_gpu_is_not_judged(tmp_path, monkeypatch) -> None:
    """The shared-CI case: another run's recovery stage holds ~137 GiB of the card."""
    verdict, _, check = run_one_case(tmp_path, monkeypatch, snapshot(free=0.1, own=1.5, others=(4242,)))
    assert not verdict.passed and verdict.reasons == ()
    assert "another process holds 138.2 GiB of the GPU (NVML lists pid 4242); 0.1 GiB free of 139.8 GiB" in \
        verdict.not_judged
    [event] = check.oom_events
    assert event["cause"] == "others" and event["retry"] == "out of memory again"
    assert event["index"] == 0  # the plan index the runner's follow-up runs again alone (verify/resume.py)
    assert event["memory"]["total_bytes"] == int(139.8 * GiB)


def test_out_of_memory_with_the_card_to_itself_is_the_implementations_own_demand(tmp_path, monkeypatch) -> None:
    verdict, _, _ = run_one_case(tmp_path, monkeypatch, snapshot(free=0.3, own=138.0))
    assert verdict.not_judged == "" and verdict.reasons[0].startswith("raised torch.OutOfMemoryError")
    assert "no other process holds more than 7.0 GiB" in verdict.reasons[0]


def test_what_the_worker_held_before_the_check_is_no_demand_of_the_case(tmp_path, monkeypatch) -> None:
    """The same readings as the card-to-itself case, but 130 GiB of them were an earlier check's leftovers in this
    warm worker (one kept 56 GiB so on an H100, forty-seventh session): not the case's demand, so not judged."""
    verdict, _, check = run_one_case(tmp_path, monkeypatch, snapshot(free=0.3, own=138.0), held_before=130 * GiB)
    assert not verdict.passed and verdict.reasons == () and verdict.not_judged
    assert check.oom_events[0]["cause"] == "others"


def test_a_request_larger_than_the_card_is_own_even_beside_another_process(tmp_path, monkeypatch) -> None:
    huge = "CUDA out of memory. Tried to allocate 512.00 GiB. GPU 0 has a total capacity of 139.81 GiB"
    verdict, _, _ = run_one_case(tmp_path, monkeypatch, snapshot(free=60.0, own=1.0), message=huge)
    assert verdict.reasons and "asked for 512.0 GiB, more than this card could give it" in verdict.reasons[0]


def test_without_any_memory_reading_the_case_is_not_judged(tmp_path, monkeypatch) -> None:
    verdict, _, _ = run_one_case(tmp_path, monkeypatch, None)
    assert verdict.reasons == () and "could not read the device's memory" in verdict.not_judged


def test_out_of_memory_is_recognised_by_class_cause_and_cuda_message() -> None:
    assert out_of_memory(torch.cuda.OutOfMemoryError("x"))
    assert out_of_memory(RuntimeError("CUDA error: out of memory"))
    assert out_of_memory(RuntimeError("cudaErrorMemoryAllocation from cudaMalloc"))
    try:
        try:
            raise torch.cuda.OutOfMemoryError("inner")
        except torch.cuda.OutOfMemoryError as inner:
            raise ValueError("wrapped by a library") from inner
    except ValueError as outer:
        assert out_of_memory(outer)
    assert not out_of_memory(ValueError("shape mismatch")) and not out_of_memory(MemoryError())


@pytest.mark.slow
def test_verify_reports_a_case_it_could_not_judge_as_an_error_never_a_fail(tmp_path) -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.run([sys.executable, "-m", "opgate", "verify", str(DATA / "oom_spec.py"), "--stages", "numerics",
                           "--no-extras", "--budget", "quick", "--jobs", "2", "--json", str(tmp_path / "r.json"),
                           "--out", str(tmp_path / "o")], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 1, proc.stderr[-3000:]  # oom_and_wrong fails for its wrong values
    results = {r["extra"].get("implementation"): r for r in json.loads((tmp_path / "r.json").read_text())["results"]}
    one = results["oom_on_one_case"]
    assert one["outcome"] == "error" and one["reason"].startswith("could not judge: 1/")
    assert "N=63" in one["reason"] and "case(s) are within budget" in one["reason"]
    assert [c["case"] for c in one["extra"]["cases_not_judged"]] == [one["extra"]["out_of_memory"][0]["case"]]
    assert results["oom_once"]["outcome"] == "passed"
    assert results["oom_once"]["extra"]["out_of_memory"][0]["retry"] == "ran: the case was judged"
    wrong = results["oom_and_wrong"]
    assert wrong["outcome"] == "failed" and wrong["extra"]["failure_class"] == "typical"
    assert "case(s) not judged" in wrong["reason"]
    assert results["torch"]["outcome"] == "passed"


def test_what_a_process_holds_is_read_only_once_it_has_a_cuda_context(monkeypatch) -> None:
    """Read as each check begins: before any CUDA context nothing is held (and nothing is initialised for it)."""
    import sys
    from types import SimpleNamespace

    from opgate.gpu.probes.device_memory import held_by_this_process

    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    fresh = SimpleNamespace(cuda=SimpleNamespace(is_initialized=lambda: False))
    assert held_by_this_process(fresh) == 0
    used = SimpleNamespace(cuda=SimpleNamespace(is_initialized=lambda: True, current_device=lambda: 0,
                                                memory_reserved=lambda device: 3 * GiB))
    assert held_by_this_process(used) == 3 * GiB
