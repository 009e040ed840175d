"""Ray: connect (or start a local cluster), list the alive nodes, and run one pinned task per node.

Each task is pinned with NodeAffinitySchedulingStrategy(soft=False), so it runs on that node or not at
all; at most `max_nodes_at_once` run together. A node that dies, hangs or leaves mid-run becomes a
NodeOutcome with `error` set, never a lost run: every node asked for is answered.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from opgate.model.errors import InputError
from opgate.fleet.node_task import NodeOutcome, run_verb_on_node

NODE_NAME_RESOURCE_PREFIX = "opgate_node_"  # `ray start --resources '{"opgate_node_gpu17": 1}'` names a node
POLL_S = 0.5
# Seconds the driver waits beyond the node's own timeout before it declares the node unreachable.
DRIVER_GRACE_S = 30.0


@dataclass(frozen=True)
class FleetNode:
    node_id: str
    name: str
    address: str


def import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise InputError("opgate fleet needs Ray, which is not installed; install it with "
                         "pip install 'opgate[fleet]' (or pip install ray)") from exc
    return ray


def _require_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Ray retries an unreachable GCS for minutes; a HOST:PORT that refuses a TCP connection is bad input now."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or address.startswith(("ray://", "auto")):
        return
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise InputError(f"--address {address!r}: no Ray cluster answers there ({exc}); start one with "
                         "`ray start --head` or leave --address out to run on a local cluster") from exc


def connect(address: str | None) -> Any:
    """ray.init to `address` ("auto", "HOST:PORT", "ray://..."), or start a local one-node cluster."""
    if address:
        _require_reachable(address)
    ray = import_ray()
    if ray.is_initialized():
        return ray
    kwargs: dict[str, Any] = {"logging_level": "ERROR", "log_to_driver": False, "include_dashboard": False}
    if address:
        kwargs.pop("include_dashboard")
        kwargs["address"] = address
    try:
        ray.init(**kwargs)
    except ConnectionError as exc:
        raise InputError(f"--address {address!r}: no Ray cluster answers there ({exc}); start one with "
                         "`ray start --head` or leave --address out to run on a local cluster") from exc
    return ray


def _node_name(node: dict[str, Any], duplicates: set[str]) -> str:
    for resource in node.get("Resources", {}):
        if resource.startswith(NODE_NAME_RESOURCE_PREFIX):
            return resource[len(NODE_NAME_RESOURCE_PREFIX):]
    name = str(node.get("NodeName") or node.get("NodeManagerAddress") or node["NodeID"][:12])
    return f"{name}/{node['NodeID'][:8]}" if name in duplicates else name


def alive_nodes(ray: Any) -> list[FleetNode]:
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    names = [str(n.get("NodeName") or n.get("NodeManagerAddress")) for n in nodes]
    duplicates = {n for n in names if names.count(n) > 1}
    found = [FleetNode(n["NodeID"], _node_name(n, duplicates), str(n.get("NodeManagerAddress", "")))
             for n in nodes]
    return sorted(found, key=lambda n: n.name)


def _failed(node: FleetNode, reason: str, started: float, **extra: Any) -> NodeOutcome:
    return NodeOutcome(node=node.name, hostname="", gpus=[], driver="", exit_code=-1,
                       duration_s=time.perf_counter() - started, error=reason,
                       extra={"node_id": node.node_id, "address": node.address, **extra})


def _ray_error_reason(exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"the node was lost mid-run ({type(exc).__name__}: {first[:300]})"


def run_on_nodes(
    ray: Any,
    nodes: Sequence[FleetNode],
    verb_args: Sequence[str],
    node_timeout_s: float,
    max_nodes_at_once: int,
    on_done: Callable[[NodeOutcome], None] | None = None,
) -> list[NodeOutcome]:
    """One task per node, at most `max_nodes_at_once` in flight; results in node order."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    # num_cpus=0: the fleet's own bound, not Ray's CPU accounting, decides concurrency; max_retries=0:
    # a probe that took a node down must be reported, not silently re-run elsewhere.
    remote = ray.remote(num_cpus=0, max_retries=0)(run_verb_on_node)
    pending = list(nodes)
    in_flight: dict[Any, tuple[FleetNode, float]] = {}
    answers: dict[str, NodeOutcome] = {}

    def finish(node: FleetNode, outcome: NodeOutcome) -> None:
        extra = {"node_id": node.node_id, "address": node.address, **outcome.extra}
        outcome = NodeOutcome(**{**outcome.to_dict(), "node": node.name, "extra": extra})
        answers[node.node_id] = outcome
        if on_done:
            on_done(outcome)

    while pending or in_flight:
        while pending and len(in_flight) < max(1, max_nodes_at_once):
            node = pending.pop(0)
            strategy = NodeAffinitySchedulingStrategy(node_id=node.node_id, soft=False)
            ref = remote.options(scheduling_strategy=strategy, name=f"opgate-{node.name}").remote(
                node.name, list(verb_args), node_timeout_s)
            in_flight[ref] = (node, time.perf_counter())
        ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=POLL_S)
        for ref in ready:
            node, started = in_flight.pop(ref)
            try:
                outcome = NodeOutcome.from_dict(ray.get(ref))
            except Exception as exc:  # RayTaskError, NodeDiedError, WorkerCrashedError, unschedulable...
                outcome = _failed(node, _ray_error_reason(exc), started, ray_error=type(exc).__name__)
            finish(node, outcome)
        for ref, (node, started) in list(in_flight.items()):
            if time.perf_counter() - started > node_timeout_s + DRIVER_GRACE_S:
                ray.cancel(ref, force=True)
                in_flight.pop(ref)
                finish(node, _failed(node, f"the node did not answer within {node_timeout_s + DRIVER_GRACE_S:g} s "
                                           "(hung or unreachable); its task was cancelled", started))
    return [answers[n.node_id] for n in nodes]
