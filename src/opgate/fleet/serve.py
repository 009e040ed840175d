"""`opgate serve`: a Prometheus exporter that keeps re-running the doctor and says what it found.

Basic checks run every `--interval` seconds; the standard probes on a slower schedule
(`--standard-interval`) or on demand (POST /run?level=standard), never while another process
computes on a GPU unless `--allow-probes-under-load`. Runs never overlap. Every scrape shows the
latest result of each check, so a check that passes again clears its failure (states recover).

Endpoints: /metrics (Prometheus text), /healthz, /report.json (the last run's report), POST /run.
"""

from __future__ import annotations

import io
import json
import os
import threading
import time
import traceback
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Iterator, List, Optional

import typer

from opgate.model.results import CheckResult, Outcome, RunReport

if TYPE_CHECKING:
    from http.server import BaseHTTPRequestHandler

# opgate_check_outcome's value; documented in docs/fleet.md so alerts can be written against it.
OUTCOME_CODE = {Outcome.PASSED: 0, Outcome.WARNED: 1, Outcome.FAILED: 2, Outcome.ERROR: 3, Outcome.SKIPPED: -1}
DEFAULT_PORT = 9478
LEVELS = ("basic", "standard")


@dataclass
class LevelRun:
    report: RunReport
    finished_at: float


@dataclass
class ExporterState:
    """What the scheduler thread learned; read by scrapes under `lock`."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    latest: dict[str, CheckResult] = field(default_factory=dict)  # check id -> its newest result
    runs: dict[str, LevelRun] = field(default_factory=dict)       # level -> its newest run
    last_report: RunReport | None = None
    runs_total: dict[str, int] = field(default_factory=lambda: {lvl: 0 for lvl in LEVELS})
    probes_skipped: int = 0
    probes_skipped_reason: str = ""
    label_errors: int = 0
    scheduler_errors: int = 0
    gpus: list[dict[str, Any]] = field(default_factory=list)

    def record(self, level: str, report: RunReport) -> None:
        with self.lock:
            for result in report.results:
                self.latest[result.check_id] = result
            self.runs[level] = LevelRun(report, time.time())
            self.last_report = report
            self.runs_total[level] = self.runs_total.get(level, 0) + 1


def gpu_busy_reason() -> str | None:
    """Why the standard probes must not run now: another process has a compute context on a GPU."""
    from opgate.probes.nvml import NvmlUnavailable, nvml_session

    try:
        with nvml_session() as pynvml:
            mine = os.getpid()
            for index in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                others = [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle) if p.pid != mine]
                if others:
                    return f"GPU{index} is in use by pid(s) {', '.join(map(str, others[:5]))}"
            return None
    except NvmlUnavailable:
        return None  # no NVML: no GPU to share; the probes skip themselves with their own reason
    except Exception as exc:
        return f"could not tell whether the GPUs are in use ({type(exc).__name__}: {exc})"


def run_doctor_once(level: str, checks: list[str], frameworks: list[str], require_gpu: bool = False) -> RunReport:
    """The single-host doctor, exactly: same registry, same isolated runner, same RunReport; `require_gpu` as
    `opgate doctor --require-gpu` (a GPU node whose pod sees no GPU fails instead of passing on skips)."""
    from rich.console import Console

    from opgate.checks.base import CheckContext
    from opgate.checks.registry import select_checks
    from opgate.engine.session import run_session, tasks_for

    ctx = CheckContext(verb="doctor", level=level, options={"frameworks": frameworks})
    tasks, broken = tasks_for(select_checks("doctor.", checks or None), ctx)
    quiet = Console(file=io.StringIO(), force_terminal=False)
    report = run_session("doctor", tasks, quiet, jobs=2, preset=broken, extra={"level": level})
    if require_gpu:
        from opgate.cli.policy import apply_skip_policy

        report = apply_skip_policy(report, False, True)
    return report


def ready_value(report: RunReport) -> str:
    """The node label opgate.io/ready: fail (a check failed or could not complete), warn, or pass."""
    outcomes = {r.outcome for r in report.results}
    if outcomes & {Outcome.FAILED, Outcome.ERROR}:
        return "fail"
    return "warn" if Outcome.WARNED in outcomes else "pass"


class OpgateCollector:
    """A prometheus_client collector that renders ExporterState at scrape time."""

    def __init__(self, state: ExporterState) -> None:
        self.state = state

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        from opgate.fleet.keys import figure_key

        outcome = GaugeMetricFamily("opgate_check_outcome", "Latest outcome of each check: 0 passed, 1 warned, "
                                    "2 failed, 3 error, -1 skipped", labels=["check", "gpu", "uuid"])
        duration = GaugeMetricFamily("opgate_check_duration_seconds", "Duration of the check's latest run",
                                     labels=["check"])
        figure = GaugeMetricFamily("opgate_figure", "Numeric figures of the latest run of each check",
                                   labels=["key", "gpu", "unit"])
        last_run = GaugeMetricFamily("opgate_last_run_timestamp_seconds", "When the latest run of a level ended",
                                     labels=["level"])
        run_duration = GaugeMetricFamily("opgate_last_run_duration_seconds", "Duration of the latest run",
                                         labels=["level"])
        ready = GaugeMetricFamily("opgate_ready", "Latest run's verdict: 0 pass, 1 warn, 2 fail", labels=["level"])
        runs = CounterMetricFamily("opgate_runs", "Doctor runs completed", labels=["level"])
        internal = CounterMetricFamily("opgate_exporter_errors", "Runs that raised inside opgate (kind=scheduler) "
                                       "and node-label patches that failed (kind=label)", labels=["kind"])
        gpu_info = GaugeMetricFamily("opgate_gpu_info", "Each GPU NVML sees (1), to join figures with their model "
                                     "and driver in PromQL", labels=["gpu", "uuid", "model", "driver"])
        skipped = CounterMetricFamily("opgate_probe_runs_skipped", "Standard probe runs skipped because a GPU "
                                      "was in use", labels=[])
        with self.state.lock:
            seen: set[tuple[str, str, str]] = set()
            for check_id, result in sorted(self.state.latest.items()):
                # Every doctor check today judges the host as a whole: gpu and uuid are "" (per-GPU checks fill them).
                outcome.add_metric([check_id, "", ""], OUTCOME_CODE[result.outcome])
                duration.add_metric([check_id], result.duration_s)
                for fig in result.figures:
                    if isinstance(fig.value, bool) or not isinstance(fig.value, (int, float)):
                        continue
                    fkey = figure_key(result, fig)
                    labels = (fkey.key, fkey.gpu, fig.unit)
                    if labels not in seen:
                        seen.add(labels)
                        figure.add_metric(list(labels), float(fig.value))
            for level, run in sorted(self.state.runs.items()):
                last_run.add_metric([level], run.finished_at)
                run_duration.add_metric([level], run.report.duration_s)
                ready.add_metric([level], {"pass": 0, "warn": 1, "fail": 2}[ready_value(run.report)])
            for level, count in sorted(self.state.runs_total.items()):
                runs.add_metric([level], count)
            skipped.add_metric([], self.state.probes_skipped)
            internal.add_metric(["scheduler"], self.state.scheduler_errors)
            internal.add_metric(["label"], self.state.label_errors)
            for gpu in self.state.gpus:
                gpu_info.add_metric([str(gpu["index"]), str(gpu["uuid"]), str(gpu["model"]), str(gpu["driver"])], 1)
        yield from (outcome, duration, figure, last_run, run_duration, ready, runs, skipped, internal, gpu_info)


@dataclass
class Schedule:
    interval_s: float
    standard_interval_s: float  # 0: only on demand
    checks: list[str]
    frameworks: list[str]
    allow_probes_under_load: bool
    label_node: str = ""
    require_gpu: bool = False


class Exporter:
    """The scheduler thread plus the HTTP server; `stop()` ends both."""

    def __init__(self, schedule: Schedule, host: str, port: int) -> None:
        from http.server import ThreadingHTTPServer

        from prometheus_client import CollectorRegistry

        self.schedule = schedule
        self.state = ExporterState()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(OpgateCollector(self.state))
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.standard_requested = threading.Event()
        self.basic_requested = threading.Event()
        self.server = ThreadingHTTPServer((host, port), self._handler())
        self.server.daemon_threads = True
        self.threads = [threading.Thread(target=self._loop, name="opgate-scheduler", daemon=True),
                        threading.Thread(target=self.server.serve_forever, name="opgate-http", daemon=True)]

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self) -> None:
        from opgate.fleet.node_task import gpu_identities

        self.state.gpus = gpu_identities()[0]
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()
        self.server.shutdown()
        self.server.server_close()

    def run_level(self, level: str) -> RunReport | None:
        if level == "standard" and not self.schedule.allow_probes_under_load:
            busy = gpu_busy_reason()
            if busy:
                with self.state.lock:
                    self.state.probes_skipped += 1
                    self.state.probes_skipped_reason = busy
                return None
        report = run_doctor_once(level, self.schedule.checks, self.schedule.frameworks,
                                 self.schedule.require_gpu)
        self.state.record(level, report)
        if self.schedule.label_node:
            from opgate.fleet.k8s_label import LabelError, label_node

            try:
                label_node(self.schedule.label_node, ready_value(report))
            except LabelError:
                with self.state.lock:
                    self.state.label_errors += 1
        return report

    def _loop(self) -> None:
        next_basic = time.monotonic()
        next_standard = (time.monotonic() + self.schedule.standard_interval_s
                         if self.schedule.standard_interval_s > 0 else float("inf"))
        while not self.stopping.is_set():
            now = time.monotonic()
            try:
                if self.standard_requested.is_set() or now >= next_standard:
                    self.standard_requested.clear()
                    if self.schedule.standard_interval_s > 0:
                        next_standard = time.monotonic() + self.schedule.standard_interval_s
                    self.run_level("standard")
                elif self.basic_requested.is_set() or now >= next_basic:
                    self.basic_requested.clear()
                    next_basic = time.monotonic() + self.schedule.interval_s
                    self.run_level("basic")
            except Exception:  # an opgate bug in one run: say so, keep the schedule (healthz stays truthful)
                traceback.print_exc()
                with self.state.lock:
                    self.state.scheduler_errors += 1
            if self.basic_requested.is_set() or self.standard_requested.is_set():
                continue
            self.wake.wait(timeout=max(0.05, min(next_basic, next_standard) - time.monotonic()))
            self.wake.clear()

    def healthy(self) -> tuple[bool, str]:
        if not self.threads[0].is_alive():
            return False, "the scheduler thread has stopped"
        with self.state.lock:
            run = self.state.runs.get("basic")
        if run is None:
            return True, "starting: the first run has not finished"
        age = time.time() - run.finished_at
        limit = 3 * self.schedule.interval_s + 120
        return (age <= limit, f"last basic run {age:.0f} s ago (limit {limit:.0f} s)")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        from http.server import BaseHTTPRequestHandler
        from urllib.parse import parse_qs, urlparse

        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # scrapes are not news
                pass

            def _send(self, code: int, body: bytes, content_type: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

                path = urlparse(self.path).path
                if path == "/metrics":
                    self._send(200, generate_latest(exporter.registry), CONTENT_TYPE_LATEST)
                elif path == "/healthz":
                    ok, reason = exporter.healthy()
                    self._send(200 if ok else 503, (reason + "\n").encode(), "text/plain; charset=utf-8")
                elif path == "/report.json":
                    with exporter.state.lock:
                        report = exporter.state.last_report
                    if report is None:
                        self._send(503, b'{"error": "no run has finished yet"}\n', "application/json")
                    else:
                        from opgate.reporting.schema import encode_report

                        self._send(200, json.dumps(encode_report(report), default=str).encode(), "application/json")
                else:
                    self._send(404, b"not found: try /metrics, /healthz, /report.json\n", "text/plain")

            def do_POST(self) -> None:
                url = urlparse(self.path)
                level = parse_qs(url.query).get("level", ["standard"])[0]
                if url.path != "/run" or level not in LEVELS:
                    self._send(400, b"POST /run?level=basic|standard\n", "text/plain")
                    return
                (exporter.standard_requested if level == "standard" else exporter.basic_requested).set()
                exporter.wake.set()
                self._send(202, f"{level} run requested\n".encode(), "text/plain")

        return Handler


class ServeLevel(str, Enum):
    basic = "basic"
    standard = "standard"


def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (0.0.0.0 in a DaemonSet)."),
    port: int = typer.Option(DEFAULT_PORT, "--port", min=0, max=65535, help="Port for /metrics, /healthz, "
                             "/report.json and POST /run (0: any free port, printed)."),
    interval: float = typer.Option(300.0, "--interval", min=0.5, help="Seconds between basic doctor runs."),
    standard_interval: float = typer.Option(0.0, "--standard-interval", min=0.0, help="Seconds between standard "
                                            "probe runs (0: only on demand, POST /run?level=standard)."),
    check: Optional[List[str]] = typer.Option(None, "--check", help="Run only this check (repeatable)."),
    framework: Optional[List[str]] = typer.Option(None, "--framework", help="Python modules the library checks "
                                                  "import (repeatable; default: torch when installed)."),
    allow_probes_under_load: bool = typer.Option(False, "--allow-probes-under-load", help="Run the standard "
                                                 "probes even while another process computes on a GPU."),
    label_node: str = typer.Option("", "--label-node", envvar="OPGATE_LABEL_NODE", help="Kubernetes node to "
                                   "label opgate.io/ready=pass|warn|fail after each run (in-cluster credentials)."),
    once: Optional[ServeLevel] = typer.Option(None, "--once", help="Run this level once, label, print the "
                                              "verdict and exit with the doctor's exit code (Jobs, CronJobs)."),
    require_gpu: bool = typer.Option(False, "--require-gpu", envvar="OPGATE_REQUIRE_GPU", help="As doctor's: "
                                     "no visible NVIDIA GPU is a failed check and every skip fails (on GPU nodes, "
                                     "where a pod without the driver would otherwise pass on skips)."),
) -> None:
    """Prometheus exporter: re-run the doctor on a schedule and expose outcomes and figures."""
    from opgate.model.errors import InputError

    try:
        import prometheus_client  # noqa: F401
    except ImportError as exc:
        raise InputError("opgate serve needs prometheus-client, which is not installed; install it with "
                         "pip install 'opgate[fleet]'") from exc
    from opgate.checks.registry import select_checks

    select_checks("doctor.", list(check or []) or None)  # an unknown --check is bad input now, not in a thread
    schedule = Schedule(interval, standard_interval, list(check or []), list(framework or []),
                        allow_probes_under_load, label_node, require_gpu)
    if once is not None:
        from opgate.fleet.k8s_label import LabelError, label_node as apply_label

        busy = gpu_busy_reason() if once is ServeLevel.standard and not allow_probes_under_load else None
        if busy:
            raise InputError(f"--once standard: {busy}; the probes would measure the workload, not the GPU. "
                             "Run when the GPU is idle, or pass --allow-probes-under-load")
        report = run_doctor_once(once.value, schedule.checks, schedule.frameworks, schedule.require_gpu)
        verdict = ready_value(report)
        print(f"opgate.io/ready={verdict} ({', '.join(f'{n} {k}' for k, n in report.counts().items() if n)})")
        if label_node:
            try:
                apply_label(label_node, verdict)
            except LabelError as exc:
                raise InputError(str(exc)) from exc
        raise typer.Exit(int(report.exit_code))
    try:
        exporter = Exporter(schedule, host, port)
    except OSError as exc:
        raise InputError(f"--host {host} --port {port}: cannot listen there ({exc}); pick another port") from exc
    exporter.start()
    print(f"opgate serve: http://{host}:{exporter.port}/metrics (basic every {interval:g} s)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        exporter.stop()
