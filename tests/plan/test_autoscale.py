"""The HPA/KEDA simulator: the documented formula, tolerance, stabilization and rate policies; the queueing model
against closed forms; the committed trace regenerates byte for byte; the chosen target beats the naive HPA."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest

from opgate.model.errors import InputError
from opgate.plan import autoscale as scale

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "tests" / "data" / "plan" / "request_trace.csv"
MODEL = scale.ServerModel(service_s=1.5, concurrency=8, startup_s=60, min_replicas=1, max_replicas=40)
SLO_S = 6.0


def test_hpa_formula_and_tolerance() -> None:
    assert scale.hpa_desired(4, 108.0, 100.0) is None  # within 10%
    assert scale.hpa_desired(4, 150.0, 100.0) == 6
    assert scale.hpa_desired(10, 50.0, 100.0) == 5
    assert scale.hpa_desired(3, 100.0 * 1.11, 100.0) == 4  # ceil(3.33)


def test_scale_down_waits_for_the_stabilization_window_and_scale_up_is_rate_limited() -> None:
    state = scale.HpaState(10)
    assert scale.hpa_step(state, 0.0, 10, MODEL) == 10
    for t in range(15, 300, 15):
        assert scale.hpa_step(state, float(t), 2, MODEL) == 10  # the window still holds the 10
    assert scale.hpa_step(state, 300.0, 2, MODEL) == 2
    up = scale.HpaState(2)
    assert scale.hpa_step(up, 0.0, 30, MODEL) == 6  # max(+4 pods, +100%): +4 pods wins at 2
    assert scale.hpa_step(up, 15.0, 30, MODEL) == 12  # +100%
    assert scale.hpa_step(up, 30.0, 80, MODEL) == 24
    assert scale.hpa_step(up, 45.0, 80, MODEL) == 40  # maxReplicas


def test_erlang_c_and_mm1_sojourn() -> None:
    assert scale.erlang_c(2, 1.0) == pytest.approx(1 / 3)
    assert scale.erlang_c(1, 0.5) == pytest.approx(0.5)  # M/M/1: P(wait) = rho
    mu, lam = 2.0, 1.5
    state = scale.StepState(lam, mu, 1, scale.erlang_c(1, lam / mu), mu - lam, 0.0)
    for t in (0.1, 1.0, 3.0):
        assert state.tail(t) == pytest.approx(math.exp(-(mu - lam) * t))  # M/M/1 sojourn is Exp(mu - lambda)
    assert scale.step_quantile(state, 0.95) == pytest.approx(math.log(20) / (mu - lam), rel=1e-6)


def test_trace_regenerates_identically(tmp_path) -> None:
    out = tmp_path / "trace.csv"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "plan" / "make_request_trace.py"), "--out", str(out)],
                   check=True, capture_output=True, timeout=60)
    assert out.read_bytes() == TRACE.read_bytes()


def test_bad_trace_is_an_input_error(tmp_path) -> None:
    bad = tmp_path / "t.csv"
    bad.write_text("t_s,requests_per_s\n0,1\n15,x\n")
    with pytest.raises(InputError, match="line 3"):
        scale.load_trace(bad)


@pytest.fixture(scope="module")
def report() -> scale.AutoscaleReport:
    return scale.autoscale_report(scale.load_trace(TRACE), MODEL, SLO_S)


def test_chosen_target_beats_the_naive_utilisation_hpa(report) -> None:
    chosen = report.chosen
    assert chosen is not None and chosen.p95_s <= SLO_S
    assert report.naive.p95_s <= SLO_S  # the naive HPA holds the SLO too, by over-provisioning
    assert chosen.replica_hours < 0.5 * report.naive.replica_hours
    best_util = report.best_util
    assert best_util is None or chosen.replica_hours < best_util.replica_hours
    # framebuffer use is flat (preallocated): the HPA on it never comes down from its maximum once up
    framebuffer = next(c for c in report.choices if c.policy == "hpa-framebuffer").best
    assert framebuffer is not None and max(framebuffer.replicas) == MODEL.max_replicas


def test_manifests_validate(report, tmp_path) -> None:
    best_queue = report.best_queue
    assert best_queue is not None
    hpa = scale.hpa_manifest("llm-hpa", "llm-server", best_queue.target, MODEL)
    kubernetes_validate.validate(hpa, "1.34.0", strict=True)
    schema = json.loads((ROOT / "tests" / "data" / "plan" / "keda_scaledobject.schema.json").read_text())
    so = scale.scaled_object("llm-scaler", "llm-server", best_queue.policy, best_queue.target, MODEL,
                             "http://prometheus:9090", "llm")
    jsonschema.validate(so, schema)
    broken = json.loads(json.dumps(so))
    del broken["spec"]["triggers"][0]["metadata"]["threshold"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)


def test_cli_autoscale(tmp_path, opgate_env) -> None:
    short = tmp_path / "short.csv"
    short.write_text("\n".join(TRACE.read_text().splitlines()[:241]) + "\n")  # the first hour
    run = subprocess.run([sys.executable, "-m", "opgate", "plan", "autoscale", str(short), "--slo-p95-ms", "6000",
                          "--service-ms", "1500", "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, env=opgate_env, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "chosen:" in run.stdout
    for name in ("autoscale.png", "keda-scaledobject.yaml", "hpa.yaml", "autoscale.json"):
        assert (tmp_path / "out" / name).stat().st_size > 0
