"""On a real GPU: a run keeps its runtime warm-ups' seconds (from its timeline) beside its numerics checks', and the
next run queues its warm-ups by them (verify/check_seconds.py; extra.engine.warm_up_order). What the order saves on
a library is replayed from GPU runs (benchmarks/warm_up_queue_replay.py), not timed here. Skipped without a usable
GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = [pytest.mark.gpu]
SOFTMAX = Path(__file__).resolve().parents[2] / "examples" / "ops" / "softmax.py"


@pytest.fixture(autouse=True)
def _needs_a_usable_gpu() -> None:
    from opgate.gpu.probes.device import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason:
        pytest.skip(f"GPU test: {reason}")


def test_the_next_run_queues_its_warm_ups_by_the_seconds_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from opgate.cli.main import make_console
    from opgate.verify import check_seconds
    from opgate.verify.engine import VerifyRequest, run_verify

    monkeypatch.setenv("OPGATE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("OPGATE_VERDICT_CACHE", "0")
    request = VerifyRequest(spec_file=SOFTMAX, budget="quick", stages=("numerics", "runtime"), jobs=4,
                            impls=("triton",), dtypes=("float32", "float16"), out_dir=tmp_path / "out")
    first = run_verify(request, make_console())
    assert first.extra["engine"]["warm_up_order"] == {"by": "queued as planned (no earlier run's seconds)"}
    kept = check_seconds.load(tmp_path / "cache" / check_seconds.FILE)
    warm_ups = [key for key in kept if key.endswith(check_seconds.WARM_UP_SUFFIX)]
    assert len(warm_ups) == 2 and all(key.startswith("quick:gpu ") for key in warm_ups)
    second = run_verify(request, make_console())
    order = second.extra["engine"]["warm_up_order"]
    assert order["by"] == "earlier runs' seconds, longest first"
    assert order["known"] == 2 and order["unknown_given_the_median"] == 0
