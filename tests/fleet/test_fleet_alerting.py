"""deploy/prometheus and deploy/grafana against the real tools (Debian's `prometheus` package):
`promtool check rules` and `promtool test rules` on the rules; every PromQL expression of the rules and
the dashboard names only metrics `opgate serve` exports (read off its collector, not listed here) and
parses; and a real Prometheus on 127.0.0.1, scraping a real `opgate serve` every second, fires
OpgateCheckFailed for a planted failing check, clears it when the check passes again, runs every
dashboard query, and fires OpgateExporterDown once the exporter is killed."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

import pytest
from opgate_testing import REPO

yaml = pytest.importorskip("yaml")
pytest.importorskip("prometheus_client")

RULES_DIR = REPO / "deploy" / "prometheus"
RULES = RULES_DIR / "opgate-rules.yaml"
RULES_TEST = RULES_DIR / "opgate-rules.test.yaml"
DASHBOARD = REPO / "deploy" / "grafana" / "opgate-dashboard.json"
JOB = "opgate-exporter"  # the scrape job the rules select (the ServiceMonitor's Service name)
PROMETHEUS_OWN = {"up"}  # series Prometheus makes for every target, not the exporter

PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
NOT_INSTALLED = "not installed (Debian package prometheus; scripts/install_test_system_packages.sh installs it)"
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason=f"promtool is {NOT_INSTALLED}")
needs_prometheus = pytest.mark.skipif(PROMETHEUS is None, reason=f"the prometheus server is {NOT_INSTALLED}")

T = TypeVar("T")


# --- what the exporter exports -------------------------------------------------------------------

def exported_metric_names() -> set[str]:
    """Sample names of opgate serve's /metrics: its collector over a state with a run, a figure and a GPU,
    rendered by prometheus_client exactly as a scrape is (counters gain `_total` there)."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from opgate.fleet.serve import ExporterState, OpgateCollector
    from opgate.model.results import CheckResult, Figure, Outcome, RunReport

    result = CheckResult("planted.flapping", "planted", Outcome.FAILED, "planted failure",
                         figures=(Figure("GPU0 planted temperature", 91.0, "C"),), duration_s=0.1)
    state = ExporterState()
    state.record("basic", RunReport(verb="doctor", results=(result,), started_at="", duration_s=0.2))
    state.gpus = [{"index": 0, "uuid": "GPU-0", "model": "NVIDIA H200", "driver": "580.1"}]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(OpgateCollector(state))
    families = list(text_string_to_metric_families(generate_latest(registry).decode()))
    empty = [f.name for f in families if not f.samples]
    assert not empty, f"give these families a sample in this state, or their names go unchecked: {empty}"
    return {sample.name for family in families for sample in family.samples}


# --- metric names in PromQL ----------------------------------------------------------------------

PROMQL_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
                   "group_right", "inf", "nan", "start", "end"}


def promql_metric_names(expr: str) -> set[str]:
    """The metric names an expression selects: identifiers left once strings, label matchers, label lists,
    ranges and numbers are gone, that are neither a keyword nor a function (followed by '(')."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w:.])[A-Za-z_:][\w:]*", text):
        if match.group().lower() in PROMQL_KEYWORDS or text[match.end():].lstrip().startswith("("):
            continue
        names.add(match.group())
    return names


def test_the_metric_name_reader_reads_promql() -> None:
    expr = ('sum by (job, instance) (rate(opgate_runs_total{level="basic", x=~"a|b"}[5m] offset 1h)) '
            '/ on (job) group_left (model) opgate:figure:by_model > bool 1e3 and label_replace(up, "a", "$1", '
            '"b", "(c)") or vector(0) unless opgate_check_outcom')
    assert promql_metric_names(expr) == {"opgate_runs_total", "opgate:figure:by_model", "up", "opgate_check_outcom"}


def rule_expressions() -> list[tuple[str, str]]:
    rules = yaml.safe_load(RULES.read_text())
    return [(rule.get("alert") or rule["record"], rule["expr"]) for group in rules["groups"] for rule in group["rules"]]


def test_every_rule_names_only_what_the_exporter_exports_or_the_rules_record() -> None:
    exported = exported_metric_names()
    assert {"opgate_check_outcome", "opgate_runs_total", "opgate_gpu_info"} <= exported  # the reader works
    recorded = {name for name, _ in rule_expressions() if ":" in name}
    unknown = {name: promql_metric_names(expr) - exported - recorded - PROMETHEUS_OWN
               for name, expr in rule_expressions()}
    assert not {name: names for name, names in unknown.items() if names}


# --- promtool --------------------------------------------------------------------------------------

def promtool(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@needs_promtool
def test_promtool_check_rules() -> None:
    out = promtool("check", "rules", str(RULES))
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


@needs_promtool
def test_promtool_unit_tests_pass_and_see_every_alert_fire_and_stay_quiet() -> None:
    out = promtool("test", "rules", RULES_TEST.name, cwd=RULES_DIR)
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr
    cases = [case for group in yaml.safe_load(RULES_TEST.read_text())["tests"] for case in group["alert_rule_test"]]
    alerts = {name for name, _ in rule_expressions() if ":" not in name}
    assert {c["alertname"] for c in cases if c["exp_alerts"]} == alerts, "an alert never seen firing"
    assert {c["alertname"] for c in cases if not c["exp_alerts"]} == alerts, "an alert never seen quiet"


# --- the dashboard ---------------------------------------------------------------------------------

def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, expression) of every target, and each template variable's label_values() selector."""
    board = dashboard()
    queries = [(panel["title"], target["expr"]) for panel in board["panels"] for target in panel.get("targets", [])]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            selector = re.fullmatch(r"label_values\((.+),\s*\w+\)", variable["query"])
            assert selector, f"variable {variable['name']}: {variable['query']}"
            queries.append((f"${variable['name']}", selector.group(1)))
    return queries


def concrete(expr: str) -> str:
    """A dashboard query as Grafana sends it with every variable at All."""
    expr = expr.replace("$__rate_interval", "1m").replace("$__interval", "15s")
    return re.sub(r"\$\{?\w+\}?", ".*", expr)


def test_the_dashboard_queries_name_only_what_the_exporter_exports() -> None:
    board = dashboard()
    panels = board["panels"]
    assert len({p["id"] for p in panels}) == len(panels) and all("gridPos" in p for p in panels)
    assert all(p["datasource"]["uid"] == "${datasource}" for p in panels)
    exported = exported_metric_names()
    queries = dashboard_queries()
    assert len(queries) >= len(panels)
    unknown = {f"{title}: {expr}": promql_metric_names(expr) - exported - PROMETHEUS_OWN for title, expr in queries}
    assert not {q: names for q, names in unknown.items() if names}
    used = set().union(*(promql_metric_names(expr) for _, expr in queries))
    assert exported <= used, f"exported but on no panel: {sorted(exported - used)}"


@needs_promtool
def test_every_dashboard_query_parses(tmp_path: Path) -> None:
    """promtool parses each query (variables at All) as a recording rule's expression: PromQL's own parser."""
    rules = {"groups": [{"name": "dashboard", "rules": [{"record": f"dashboard:query{i}", "expr": concrete(expr)}
                                                       for i, (_, expr) in enumerate(dashboard_queries())]}]}
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(json.dumps(rules))
    out = promtool("check", "rules", str(path))
    assert out.returncode == 0, out.stdout + out.stderr


# --- a real Prometheus scraping a real opgate serve ------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read().decode())


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float, process: subprocess.Popen[str]) -> T:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = probe()
        except (OSError, ValueError):  # not listening yet, or a half-written answer
            value = None
        if value:
            return value
        if process.poll() is not None:
            raise AssertionError(f"{what}: {process.args[0]} exited {process.returncode}")
        time.sleep(0.25)
    raise AssertionError(f"{what}: not within {timeout_s:.0f} s")


def start(args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    # a session of its own: stop() ends the process and the children it started (opgate's check runners)
    with log.open("w") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(args, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)


def stop(process: subprocess.Popen[str]) -> None:
    """SIGTERM to the process's own session, SIGKILL after 10 s; then whatever of it is left (a check runner)."""
    if process.poll() is not None:
        return  # stopped already: its id may belong to someone else by now
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


@dataclass
class Exporter:
    process: subprocess.Popen[str]
    target: str
    flap: Path  # "fail" or "pass": what the planted check finds


@dataclass
class Prometheus:
    process: subprocess.Popen[str]
    url: str

    def query(self, expr: str) -> list[dict[str, Any]]:
        answer = get_json(f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        assert answer["status"] == "success", answer
        return list(answer["data"]["result"])

    def alerts(self, name: str) -> list[dict[str, Any]]:
        return [a for a in get_json(f"{self.url}/api/v1/alerts")["data"]["alerts"] if a["labels"]["alertname"] == name]


@pytest.fixture
def exporter(fleet_env: dict[str, str], tmp_path: Path) -> Iterator[Exporter]:
    """opgate serve, judging one check every second: the planted plugin check (a dist-info entry point, as a
    user's own check registers) that fails while its file says so."""
    flap = tmp_path / "flap"
    flap.write_text("fail")
    port = free_port()
    process = start([sys.executable, "-m", "opgate", "serve", "--host", "127.0.0.1", "--port", str(port),
                     "--interval", "1", "--check", "planted_flapping"], tmp_path / "serve.log",
                    {**fleet_env, "OPGATE_PLANTED_FLAP_FILE": str(flap)})
    try:
        yield Exporter(process, f"127.0.0.1:{port}", flap)
    finally:
        stop(process)


@pytest.fixture
def prometheus(exporter: Exporter, tmp_path: Path) -> Iterator[Prometheus]:
    """Prometheus scraping the exporter every second and evaluating the rules every second, with every
    alert's `for` cut to 2 s (the expressions are the file's, unchanged)."""
    assert PROMETHEUS
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                rule["for"] = "2s"
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
              "rule_files": [str(tmp_path / "rules.yaml")],
              "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": [exporter.target]}]}]}
    (tmp_path / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    port = free_port()
    process = start([PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
                     f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
                     "--log.level=warn"], tmp_path / "prometheus.log")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for("Prometheus ready", lambda: urllib.request.urlopen(f"{url}/-/ready", timeout=2).status == 200,
                 30, process)
        yield Prometheus(process, url)
    finally:
        stop(process)


def firing(prom: Prometheus, name: str, **labels: str) -> dict[str, Any] | None:
    return next((a for a in prom.alerts(name)
                 if a["state"] == "firing" and labels.items() <= a["labels"].items()), None)


@pytest.mark.slow
@needs_prometheus
def test_real_prometheus_fires_and_clears_the_alerts_and_runs_the_dashboard(exporter: Exporter,
                                                                           prometheus: Prometheus) -> None:
    failed = wait_for("OpgateCheckFailed firing", lambda: firing(prometheus, "OpgateCheckFailed",
                                                                   check="planted.flapping"), 45, exporter.process)
    assert failed["labels"]["instance"] == exporter.target and failed["labels"]["severity"] == "critical"
    assert f"planted.flapping failed on {exporter.target}" in failed["annotations"]["summary"]
    assert not prometheus.alerts("OpgateExporterDown") and not prometheus.alerts("OpgateCheckError")

    # what Prometheus scraped is what the collector says the exporter exports (no GPU here: no opgate_gpu_info)
    scraped = set(get_json(f"{prometheus.url}/api/v1/label/__name__/values")["data"])
    exported = exported_metric_names()
    assert {n for n in scraped if n.startswith("opgate_")} == exported - {"opgate_gpu_info"}

    # every dashboard query runs, and shows data unless it needs a GPU (opgate_gpu_info)
    for title, expr in dashboard_queries():
        result = prometheus.query(concrete(expr))
        assert bool(result) != ("opgate_gpu_info" in expr), f"{title}: {concrete(expr)} -> {result}"

    exporter.flap.write_text("pass")  # the fault goes away: the next run passes, the alert clears
    wait_for("OpgateCheckFailed cleared", lambda: not prometheus.alerts("OpgateCheckFailed"), 30, exporter.process)
    assert prometheus.query(f'opgate_check_outcome{{instance="{exporter.target}"}}')[0]["value"][1] == "0"

    stop(exporter.process)  # the exporter dies: its target is down
    down = wait_for("OpgateExporterDown firing", lambda: firing(prometheus, "OpgateExporterDown",
                                                                  instance=exporter.target), 30, prometheus.process)
    assert down["labels"]["job"] == JOB
