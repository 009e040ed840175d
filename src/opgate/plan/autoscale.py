"""`opgate plan autoscale`: simulate the Kubernetes HPA algorithm and KEDA's Prometheus scaler over a request-rate
trace with a queueing model of the replicas, and pick the metric target that keeps the P95 under the SLO with the
fewest replica-hours.

The HPA, as documented (kubernetes.io, "Horizontal Pod Autoscaling", algorithm details):
``desired = ceil(current * currentMetric / target)``; no change while the ratio is within the 0.1 tolerance;
scale-down takes the highest recommendation of the stabilization window (300 s by default); default scaling
policies allow at most max(4 pods, +100%) up and -100% down per 15 s period. KEDA's Prometheus scaler hands the
HPA an external metric with an AverageValue target equal to the trigger's `threshold`
(keda.sh, Scalers: Prometheus; Concepts: Scaling Deployments), so ``desired = ceil(query / threshold)`` through
the same formula.

The replicas: `concurrency` request slots per replica, exponential service times of mean `service_s`, Poisson
arrivals: M/M/c with c = ready replicas x slots while the queue is stable (Erlang C, exact sojourn-time
distribution); when arrivals outrun the slots, a fluid backlog carries over from step to step and a request's wait
is the backlog ahead of it. New pods serve only after `startup_s`.
"""

from __future__ import annotations

import csv
import functools
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from opgate.model.errors import InputError

HPA_TOLERANCE = 0.1  # kube-controller-manager --horizontal-pod-autoscaler-tolerance default
HPA_SYNC_S = 15.0  # --horizontal-pod-autoscaler-sync-period default
SCALE_DOWN_WINDOW_S = 300.0  # behavior.scaleDown.stabilizationWindowSeconds default
SCALE_UP_PODS = 4  # default scale-up policies: 4 pods or 100% per 15 s, whichever is more
SCALE_UP_PERCENT = 100
PREALLOCATED_FRAMEBUFFER = 0.9  # vLLM's default gpu_memory_utilization: memory taken at start, whatever the load

POLICIES = {
    "keda-queue": "KEDA Prometheus scaler on requests in the server (running + waiting), threshold per replica",
    "keda-rps": "KEDA Prometheus scaler on the request rate, threshold req/s per replica",
    "keda-p95": "KEDA Prometheus scaler on the P95 latency (metricType Value), threshold seconds",
    "hpa-gpu-util": "HPA on GPU utilisation (DCGM_FI_DEV_GPU_UTIL, busy-time fraction) per pod, target %",
    "hpa-framebuffer": "HPA on framebuffer use per pod (DCGM_FI_DEV_FB_USED / total), target %",
}


@dataclass(frozen=True)
class Trace:
    t_s: tuple[float, ...]
    rps: tuple[float, ...]

    @property
    def step_s(self) -> float:
        return self.t_s[1] - self.t_s[0] if len(self.t_s) > 1 else HPA_SYNC_S


def load_trace(path: Path) -> Trace:
    from opgate.plan.inputs import read_text_input

    text = read_text_input(path, "a trace CSV with columns t_s,requests_per_s")
    times, rates = [], []
    reader = csv.DictReader(io.StringIO(text, newline=""))
    if not reader.fieldnames or not {"t_s", "requests_per_s"} <= set(reader.fieldnames):
        raise InputError(f"trace {path} needs the header t_s,requests_per_s (got {reader.fieldnames})")
    for line, row in enumerate(reader, start=2):
        try:
            times.append(float(row["t_s"]))
            rates.append(float(row["requests_per_s"]))
        except (TypeError, ValueError):
            raise InputError(f"trace {path} line {line}: {row} is not two numbers") from None
        if rates[-1] < 0 or not math.isfinite(rates[-1]):
            raise InputError(f"trace {path} line {line}: a request rate must be a finite number >= 0")
    if len(times) < 2:
        raise InputError(f"trace {path} has {len(times)} row(s); give at least two")
    steps = {round(b - a, 6) for a, b in zip(times, times[1:])}
    if len(steps) != 1 or min(steps) <= 0:
        raise InputError(f"trace {path} must have evenly spaced, increasing t_s (steps seen: {sorted(steps)[:4]})")
    return Trace(tuple(times), tuple(rates))


def service_from_histogram(path: Path) -> float:
    """Mean service time (s) from a Prometheus-style cumulative histogram CSV: le_s,count (the +Inf bucket
    may be written as inf); each bucket's requests are taken at its midpoint."""
    from opgate.plan.inputs import read_text_input

    rows = []
    text = read_text_input(path, "a histogram CSV with columns le_s,count (cumulative)")
    for line, row in enumerate(csv.DictReader(io.StringIO(text, newline="")), start=2):
        try:
            rows.append((float(row["le_s"]), float(row["count"])))
        except (KeyError, TypeError, ValueError):
            raise InputError(f"histogram {path} line {line}: {row} is not le_s,count numbers") from None
    rows.sort()
    if not rows or rows[-1][1] <= 0:
        raise InputError(f"histogram {path} has no requests; give le_s,count rows with cumulative counts")
    total, previous_le, previous_count, weighted = rows[-1][1], 0.0, 0.0, 0.0
    for le, count in rows:
        upper = le if math.isfinite(le) else previous_le * 1.5
        weighted += (count - previous_count) * (previous_le + upper) / 2
        previous_le, previous_count = upper, count
    return weighted / total


@dataclass(frozen=True)
class ServerModel:
    service_s: float  # mean service time of one request
    concurrency: int  # requests one replica serves at once (batch slots)
    startup_s: float = 60.0  # pod start to ready (image pull excluded, weights loaded)
    min_replicas: int = 1
    max_replicas: int = 64


# -- queueing ----------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=500_000)
def erlang_c(servers: int, offered: float) -> float:
    """Probability an arrival waits in M/M/c (offered load a = lambda/mu < c), by the Erlang B recursion."""
    if offered <= 0:
        return 0.0
    b = 1.0
    for k in range(1, servers + 1):
        b = offered * b / (k + offered * b)
    rho = offered / servers
    return b / (1 - rho + rho * b)


@dataclass(frozen=True)
class StepState:
    """The latency distribution of requests arriving during one step."""

    rate: float
    mu: float
    servers: int
    wait_prob: float  # stable: Erlang C
    theta: float  # stable: decay rate of the wait (c mu - lambda)
    backlog_wait_s: float  # overloaded: deterministic wait ahead of an arrival (fluid backlog)

    def tail(self, t: float) -> float:
        """P(sojourn > t)."""
        mu = self.mu
        if self.backlog_wait_s > 0 or self.theta <= 0:
            w = self.backlog_wait_s
            return 1.0 if t < w else math.exp(-mu * (t - w))
        c, theta = self.wait_prob, self.theta
        if abs(theta - mu) < 1e-9:
            waited = (1 + mu * t) * math.exp(-mu * t)
        else:
            waited = (theta * math.exp(-mu * t) - mu * math.exp(-theta * t)) / (theta - mu)
        return (1 - c) * math.exp(-mu * t) + c * waited


class _StepArrays:
    """The steps' latency parameters as numpy arrays, built once per simulation."""

    def __init__(self, states: Sequence[StepState]) -> None:
        import numpy as np

        self.mu = np.array([s.mu for s in states])
        self.c = np.array([s.wait_prob for s in states])
        self.theta = np.array([s.theta for s in states])
        self.w = np.array([s.backlog_wait_s for s in states])
        self.rate = np.array([s.rate for s in states])
        self.overloaded = (self.w > 0) | (self.theta <= 0)
        self.near = np.abs(self.theta - self.mu) < 1e-9
        self.denominator = np.where(self.near, 1.0, self.theta - self.mu)

    def tails(self, t: Any) -> Any:
        """P(sojourn > t) of every step, t a scalar or one value per step."""
        import numpy as np

        mu, theta = self.mu, self.theta
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            e_mu = np.exp(-mu * t)
            waited = np.where(self.near, (1 + mu * t) * e_mu, (theta * e_mu - mu * np.exp(-theta * t)) / self.denominator)
            stable = (1 - self.c) * e_mu + self.c * waited
            backlog = np.where(t < self.w, 1.0, np.exp(-mu * np.maximum(t - self.w, 0.0)))
        return np.where(self.overloaded, backlog, stable)


def _bisect(tail_above, high: float = 1.0) -> float:
    low = 0.0
    while tail_above(high) and high < 1e7:
        high *= 2
    for _ in range(50):
        mid = (low + high) / 2
        if tail_above(mid):
            low = mid
        else:
            high = mid
    return high


def step_quantile(state: StepState, q: float) -> float:
    """The q-quantile of one step's sojourn time."""
    return _bisect(lambda t: state.tail(t) > 1 - q) if state.rate > 0 else 0.0


def quantile(states: Sequence[StepState], q: float) -> float:
    """The q-quantile of sojourn time over all requests of the steps (a mixture weighted by arrivals)."""
    arrays = _StepArrays(states)
    total = float(arrays.rate.sum())
    if total <= 0:
        return 0.0
    return _bisect(lambda t: float((arrays.rate * arrays.tails(t)).sum()) / total > 1 - q)


def per_step_quantile(states: Sequence[StepState], q: float) -> list[float]:
    """The q-quantile of each step's own sojourn distribution (vectorised bisection)."""
    import numpy as np

    arrays = _StepArrays(states)
    n = len(states)
    low, high = np.zeros(n), np.ones(n)
    for _ in range(40):
        grow = arrays.tails(high) > 1 - q
        if not grow.any():
            break
        high = np.where(grow, high * 2, high)
    for _ in range(50):
        mid = (low + high) / 2
        above = arrays.tails(mid) > 1 - q
        low, high = np.where(above, mid, low), np.where(above, high, mid)
    return [float(v) if r > 0 else 0.0 for v, r in zip(high, arrays.rate)]


# -- the autoscalers ---------------------------------------------------------------------------------------------
@dataclass
class HpaState:
    replicas: int
    recommendations: list[tuple[float, int]] = field(default_factory=list)  # (time, desired) for stabilization


def hpa_desired(current: int, metric_per_pod: float, target: float) -> int | None:
    """The documented formula; None when the ratio is within the tolerance (no change)."""
    ratio = metric_per_pod / target
    if abs(ratio - 1.0) <= HPA_TOLERANCE:
        return None
    return math.ceil(current * ratio)


def hpa_step(state: HpaState, now: float, desired: int | None, model: ServerModel) -> int:
    """One HPA sync: bounds, scale-down stabilization, default rate policies. Returns the new replica count."""
    current = state.replicas
    wanted = current if desired is None else desired
    wanted = max(model.min_replicas, min(model.max_replicas, wanted))
    state.recommendations.append((now, wanted))
    state.recommendations = [(t, r) for t, r in state.recommendations if now - t < SCALE_DOWN_WINDOW_S]
    if wanted < current:
        wanted = min(current, max(r for _, r in state.recommendations))  # the window's highest recommendation
    if wanted > current:
        wanted = min(wanted, max(current + SCALE_UP_PODS, current * (100 + SCALE_UP_PERCENT) // 100))
    state.replicas = wanted
    return wanted


@dataclass(frozen=True)
class SimResult:
    policy: str
    target: float
    p95_s: float  # over all requests of the trace
    replica_hours: float
    steps_over_slo: int
    replicas: tuple[int, ...]
    ready: tuple[int, ...]
    p95_per_step: tuple[float, ...]

    def to_dict(self, with_series: bool = False) -> dict[str, Any]:
        data = {"policy": self.policy, "target": self.target, "p95_s": round(self.p95_s, 4),
                "replica_hours": round(self.replica_hours, 3), "steps_over_slo": self.steps_over_slo,
                "peak_replicas": max(self.replicas)}
        if with_series:
            data.update(replicas=list(self.replicas), p95_per_step=[round(v, 4) for v in self.p95_per_step])
        return data


def _metric(policy: str, state: StepState, ready: int, model: ServerModel, last_p95: float) -> float:
    """What the autoscaler sees per pod (or in total for KEDA), from the previous step's state."""
    servers = max(1, ready * model.concurrency)
    rho = min(1.0, state.rate / (servers * model.service_s ** -1)) if ready else 1.0
    if policy == "keda-queue":
        if state.backlog_wait_s > 0 or rho >= 1:
            return servers + state.backlog_wait_s * servers / model.service_s
        offered = state.rate * model.service_s
        lq = state.wait_prob * rho / (1 - rho) if rho < 1 else 0.0
        return lq + offered  # total requests in the servers (KEDA sums them)
    if policy == "keda-rps":
        return state.rate
    if policy == "keda-p95":
        return last_p95
    if policy == "hpa-gpu-util":
        # a replica counts as busy whenever one of its slots holds a request (NVML/DCGM utilisation is the
        # fraction of time a kernel runs, not how full the batch is)
        return 100.0 * (1 - (1 - rho) ** model.concurrency)
    if policy == "hpa-framebuffer":
        return 100.0 * PREALLOCATED_FRAMEBUFFER
    raise InputError(f"policy {policy!r} is not one of {', '.join(POLICIES)}")


def simulate(trace: Trace, model: ServerModel, policy: str, target: float, slo_s: float,
             initial_replicas: int | None = None) -> SimResult:
    step = trace.step_s
    mu = 1.0 / model.service_s
    if initial_replicas is None:  # start where the first step runs at 70% of the slots, the same for every policy
        initial_replicas = math.ceil(trace.rps[0] * model.service_s / model.concurrency / 0.7)
    hpa = HpaState(max(model.min_replicas, min(model.max_replicas, initial_replicas)))
    starting: list[tuple[float, int]] = []  # (ready at, count)
    ready = hpa.replicas
    backlog = 0.0
    states: list[StepState] = []
    replicas_series: list[int] = []
    ready_series: list[int] = []
    last_state = StepState(0.0, mu, max(1, ready * model.concurrency), 0.0, 1.0, 0.0)
    last_p95 = 0.0
    next_sync = step  # the first sync sees the first step's load
    for now, rate in zip(trace.t_s, trace.rps):
        if now >= next_sync:  # the autoscaler acts on what it saw during the previous step
            metric = _metric(policy, last_state, ready, model, last_p95)
            if policy.startswith("keda-") and policy != "keda-p95":
                desired = hpa_desired(hpa.replicas, metric / max(1, hpa.replicas), target)
            else:
                desired = hpa_desired(hpa.replicas, metric, target)
            before = hpa.replicas
            after = hpa_step(hpa, now, desired, model)
            if after > before:
                starting.append((now + model.startup_s, after - before))
            elif after < before:
                drop = before - after  # pods still starting are removed first
                while drop and starting:
                    t_ready, n = starting.pop()
                    if n > drop:
                        starting.append((t_ready, n - drop))
                        drop = 0
                    else:
                        drop -= n
                ready -= drop
            next_sync = now + HPA_SYNC_S
        ready += sum(n for t, n in starting if t <= now)
        starting = [(t, n) for t, n in starting if t > now]
        servers = max(0, ready * model.concurrency)
        capacity = servers * mu
        # fluid backlog: arrivals beyond the slots' service rate queue up, and drain when capacity frees
        backlog = max(0.0, backlog + (rate - capacity) * step)
        if backlog > 0 or capacity <= rate:
            wait = (backlog / capacity) if capacity > 0 else 1e6
            state = StepState(rate, mu, servers, 1.0, 0.0, max(wait, 1e-9))
        else:
            offered = rate / mu
            state = StepState(rate, mu, servers, erlang_c(servers, offered), capacity - rate, 0.0)
        states.append(state)
        last_state = state
        if policy == "keda-p95":  # only this policy reads the latency while it runs
            last_p95 = step_quantile(state, 0.95)
        replicas_series.append(hpa.replicas)
        ready_series.append(ready)
    overall = quantile(states, 0.95)
    p95_series = per_step_quantile(states, 0.95)
    hours = sum(replicas_series) * step / 3600.0
    return SimResult(policy, target, overall, hours, sum(1 for p in p95_series if p > slo_s),
                     tuple(replicas_series), tuple(ready_series), tuple(p95_series))


DEFAULT_GRIDS = {  # targets tried per policy, as fractions of what one replica holds (scaled by the model)
    "keda-queue": [x / 8 for x in range(2, 17)],  # 0.25 .. 2 x concurrency requests in the server per replica
    "keda-rps": [x / 8 for x in range(2, 17)],  # 0.25 .. 2 x the replica's service rate (req/s)
    "keda-p95": [x / 4 for x in range(4, 17)],  # 1 .. 4 x SLO/2 seconds (0.5 .. 2 x the SLO)
    "hpa-gpu-util": [float(x) for x in range(30, 100, 5)],
    "hpa-framebuffer": [float(x) for x in range(50, 100, 10)],
}


def grid_for(policy: str, model: ServerModel, slo_s: float) -> list[float]:
    unit = {"keda-queue": float(model.concurrency), "keda-rps": model.concurrency / model.service_s,
            "keda-p95": slo_s / 2}.get(policy, 1.0)
    return [round(x * unit, 4) for x in DEFAULT_GRIDS[policy]]


@dataclass(frozen=True)
class PolicyChoice:
    policy: str
    best: SimResult | None  # fewest replica-hours with P95 <= SLO; None when no target holds it
    tried: tuple[SimResult, ...]


def choose_targets(trace: Trace, model: ServerModel, slo_s: float,
                   policies: Sequence[str] = tuple(DEFAULT_GRIDS)) -> list[PolicyChoice]:
    choices = []
    for policy in policies:
        results = tuple(simulate(trace, model, policy, target, slo_s) for target in grid_for(policy, model, slo_s))
        holding = [r for r in results if r.p95_s <= slo_s]
        best = min(holding, key=lambda r: (r.replica_hours, r.p95_s)) if holding else None
        choices.append(PolicyChoice(policy, best, results))
    return choices


def plot_runs(trace: Trace, runs: Sequence[SimResult], slo_s: float, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hours = [t / 3600 for t in trace.t_s]
    fig, axes = plt.subplots(3, 1, figsize=(11, 8.5), sharex=True)
    axes[0].plot(hours, trace.rps, color="black", linewidth=0.8)
    axes[0].set_ylabel("requests/s")
    for run in runs:
        label = f"{run.policy} target {run.target:g}"
        axes[1].plot(hours, run.p95_per_step, linewidth=0.9, label=label)
        axes[2].plot(hours, run.replicas, linewidth=0.9, label=label)
    axes[1].axhline(slo_s, color="red", linestyle="--", linewidth=0.8, label=f"SLO {slo_s:g} s")
    axes[1].set_ylabel("P95 latency (s)")
    axes[1].set_yscale("log")
    axes[2].set_ylabel("replicas")
    axes[2].set_xlabel("hours")
    axes[1].legend(fontsize=7, loc="upper right")
    axes[2].legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- manifests ------------------------------------------------------------------------------------------------
QUERIES = {
    "keda-queue": "sum(vllm:num_requests_running{{model_name=\"{model}\"}}) + "
                  "sum(vllm:num_requests_waiting{{model_name=\"{model}\"}})",
    "keda-rps": "sum(rate(vllm:request_success_total{{model_name=\"{model}\"}}[1m]))",
    "keda-p95": "histogram_quantile(0.95, sum(rate(vllm:e2e_request_latency_seconds_bucket"
                "{{model_name=\"{model}\"}}[2m])) by (le))",
}
KV_CACHE_GUARD = "max(vllm:gpu_cache_usage_perc{{model_name=\"{model}\"}})"  # 0..1 of the preallocated KV cache


def scaled_object(name: str, deployment: str, policy: str, target: float, model: ServerModel,
                  prometheus: str, served_model: str, kv_cache_guard: float = 0.9) -> dict[str, Any]:
    """KEDA ScaledObject (keda.sh/v1alpha1): the chosen trigger, plus a KV-cache guard trigger (the HPA scales to
    the larger of the two, so a server near its memory limit gets a replica even while its queue looks fine)."""
    if policy not in QUERIES:
        raise InputError(f"a KEDA manifest needs a keda-* policy, not {policy!r}")
    metric_type = "Value" if policy == "keda-p95" else "AverageValue"
    return {
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "opgate"}},
        "spec": {
            "scaleTargetRef": {"name": deployment},
            "pollingInterval": 15, "cooldownPeriod": 300,
            "minReplicaCount": model.min_replicas, "maxReplicaCount": model.max_replicas,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": {
                "scaleDown": {"stabilizationWindowSeconds": int(SCALE_DOWN_WINDOW_S)}}}},
            "triggers": [
                {"type": "prometheus", "metricType": metric_type, "name": policy.replace("keda-", ""),
                 "metadata": {"serverAddress": prometheus, "query": QUERIES[policy].format(model=served_model),
                              "threshold": f"{target:g}"}},
                {"type": "prometheus", "metricType": "Value", "name": "kv-cache-guard",
                 "metadata": {"serverAddress": prometheus, "query": KV_CACHE_GUARD.format(model=served_model),
                              "threshold": f"{kv_cache_guard:g}"}},
            ],
        },
    }


def hpa_manifest(name: str, deployment: str, target: float, model: ServerModel, kv_cache_guard: float = 0.9
                 ) -> dict[str, Any]:
    """autoscaling/v2 HPA on requests in the server per pod (a Pods metric served by prometheus-adapter), with
    the KV-cache guard as a second metric."""
    return {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "opgate"}},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment},
            "minReplicas": model.min_replicas, "maxReplicas": model.max_replicas,
            "metrics": [
                {"type": "Pods", "pods": {"metric": {"name": "vllm_num_requests_in_server"},
                                          "target": {"type": "AverageValue", "averageValue": f"{target:g}"}}},
                {"type": "Pods", "pods": {"metric": {"name": "vllm_gpu_cache_usage_perc"},
                                          "target": {"type": "AverageValue",
                                                     "averageValue": f"{int(kv_cache_guard * 1000)}m"}}},
            ],
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": int(SCALE_DOWN_WINDOW_S)}},
        },
    }


NAIVE_UTIL_TARGET = 70.0  # a common GPU-utilisation HPA target in tutorials; the naive baseline


@dataclass(frozen=True)
class AutoscaleReport:
    model: ServerModel
    slo_s: float
    choices: tuple[PolicyChoice, ...]
    naive: SimResult  # HPA on GPU utilisation at NAIVE_UTIL_TARGET

    def _best(self, policies: Sequence[str]) -> SimResult | None:
        found = [c.best for c in self.choices if c.best is not None and c.policy in policies]
        return min(found, key=lambda r: r.replica_hours) if found else None

    @property
    def chosen(self) -> SimResult | None:
        """Fewest replica-hours among the latency/queue/rate signals that hold the SLO."""
        return self._best(("keda-queue", "keda-rps", "keda-p95"))

    @property
    def best_keda(self) -> SimResult | None:
        return self._best(tuple(QUERIES))

    @property
    def best_queue(self) -> SimResult | None:
        return self._best(("keda-queue",))

    @property
    def best_util(self) -> SimResult | None:
        return self._best(("hpa-gpu-util",))

    def lines(self) -> list[str]:
        out = [f"service {self.model.service_s * 1000:.0f} ms x {self.model.concurrency} slots per replica, startup "
               f"{self.model.startup_s:g} s, replicas {self.model.min_replicas}..{self.model.max_replicas}, "
               f"SLO P95 {self.slo_s * 1000:g} ms"]
        for choice in self.choices:
            if choice.best is None:
                closest = min(choice.tried, key=lambda r: r.p95_s)
                out.append(f"  {choice.policy:16s} no target holds the SLO (best P95 {closest.p95_s * 1000:.0f} ms "
                           f"at target {closest.target:g})")
            else:
                b = choice.best
                out.append(f"  {choice.policy:16s} target {b.target:<8g} P95 {b.p95_s * 1000:8.0f} ms  "
                           f"{b.replica_hours:8.1f} replica-hours  peak {max(b.replicas)} replicas")
        n = self.naive
        out.append(f"  naive: HPA GPU utilisation target {NAIVE_UTIL_TARGET:g}%: P95 {n.p95_s * 1000:.0f} ms, "
                   f"{n.replica_hours:.1f} replica-hours")
        if self.chosen is not None:
            c = self.chosen
            saving = 1 - c.replica_hours / n.replica_hours if n.replica_hours else 0.0
            out.append(f"chosen: {c.policy} target {c.target:g}: P95 {c.p95_s * 1000:.0f} ms <= SLO with "
                       f"{c.replica_hours:.1f} replica-hours ({saving:.0%} fewer than the naive HPA)")
        else:
            out.append("chosen: none: no policy holds the SLO within the replica bounds; raise --max-replicas")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"slo_s": self.slo_s, "model": vars(self.model),
                "policies": {c.policy: {"description": POLICIES[c.policy],
                                        "best": c.best.to_dict() if c.best else None,
                                        "tried": [r.to_dict() for r in c.tried]} for c in self.choices},
                "naive": self.naive.to_dict(), "chosen": self.chosen.to_dict(True) if self.chosen else None}


def autoscale_report(trace: Trace, model: ServerModel, slo_s: float) -> AutoscaleReport:
    choices = choose_targets(trace, model, slo_s)
    naive = simulate(trace, model, "hpa-gpu-util", NAIVE_UTIL_TARGET, slo_s)
    return AutoscaleReport(model, slo_s, tuple(choices), naive)
