"""Test-only doctor checks for the fleet tests, registered through a dist-info entry point
(like tests/planted_checks.py). Each reads its node's environment, which `ray start` hands down
to the node's tasks: that is how one node of the local cluster is made slow, dying or an outlier."""

from __future__ import annotations

import os
import time
from pathlib import Path

from opgate.checks.base import Check, CheckContext
from opgate.engine.atomic import write_atomically
from opgate.model.results import CheckResult, Figure


class PlantedBandwidthCheck(Check):
    """Reports the bandwidth figure its node was started with (OPGATE_PLANTED_TBS)."""

    check_id = "planted.bandwidth"
    title = "planted bandwidth figure"
    timeout_s = 120.0

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        pidfile = os.environ.get("OPGATE_PLANTED_PIDFILE")
        if pidfile:  # written whole (a rename): the test polls for the file and reads it at once
            write_atomically(Path(pidfile), str(os.getpid()), durable=False)
        started = time.time()
        time.sleep(float(os.environ.get("OPGATE_PLANTED_SLEEP_S", "0")))
        value = float(os.environ.get("OPGATE_PLANTED_TBS", "4.5"))
        times = os.environ.get("OPGATE_PLANTED_TIMES")
        if times:  # when this check ran, to prove --max-nodes-at-once
            with open(times, "a") as log:
                log.write(f"{started} {time.time()}\n")
        return self.passed(f"planted figure {value} TB/s",
                           figures=[Figure("HBM read (planted)", value, "TB/s")])


class FlappingCheck(Check):
    """Fails while the file named by OPGATE_PLANTED_FLAP_FILE says "fail", passes otherwise."""

    check_id = "planted.flapping"
    title = "planted flapping check"

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        path = Path(os.environ["OPGATE_PLANTED_FLAP_FILE"])
        state = path.read_text().strip() if path.is_file() else "pass"
        figures = [Figure("GPU0 planted temperature", 91.0 if state == "fail" else 40.0, "C")]
        if state == "fail":
            return self.failed("planted failure", figures=figures, remediation="write pass to the file")
        return self.passed("planted pass", figures=figures)
