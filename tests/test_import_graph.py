"""The import graph of opgate, read from the source (AST, nothing imported), and the facts docs/architecture.md
states about it:

- no import circle among module-level imports, and none at all (function-level imports included) but the
  commented ALLOWED_CIRCLES;
- no edge from a lower layer to a higher one (LAYERS, bottom first), but the commented ALLOWED_UPWARD;
- one writer of report files: the report formats' write_* functions are called only from REPORT_WRITERS.

An edge is `module` (runs at import) or `function` (runs when the function does); imports under
`if TYPE_CHECKING:` never run and are not edges. `from opgate.x import y` is an edge to opgate.x.y when that is a
module, else to opgate.x.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pytest

from opgate_testing import SRC

PACKAGE = SRC / "opgate"

# The layers, bottom first; a module belongs to the longest prefix that names it. A module may import its own layer
# and any layer below it. (verify and analyze, both verbs, never import each other: tests/test_import_layers.py.)
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # Plumbing: no judgement, no results; anything may use it. The engine's primitives (child processes that die with
    # opgate, the one atomic write, entry-point groups, torch's process modes, import hooks and the oneMKL warm-up
    # `import opgate` installs) and the command line's (typer options, the console, output-path checks,
    # optional-dependency advice) sit here, below the packages that hold them, because probes, judges and the verbs'
    # own typer apps use them.
    ("plumbing", ("opgate.model.errors", "opgate.engine.children", "opgate.engine.atomic", "opgate.engine.plugins",
                  "opgate.engine.torch_modes", "opgate.engine.import_hooks", "opgate.engine.vml_dispatch",
                  "opgate.cli.optional", "opgate.cli.outputs", "opgate.cli.console",
                  "opgate.cli.options", "opgate.gpu.cuda_wait", "opgate.data", "opgate.core.cuda_versions")),
    # The domain: results (outcome, figures, thresholds), specs, GPU tables, limits, occupancy.
    ("model", ("opgate", "opgate.model", "opgate.core", "opgate.gpu")),
    # Collect: plain snapshots of the host and the device.
    ("probes", ("opgate.probes", "opgate.gpu.probes")),
    # Decide: figures -> outcome, against tables and thresholds (cli.policy: --fail-on-skip/--require-gpu, which
    # `opgate serve` applies too).
    ("judges", ("opgate.gpu.judge", "opgate.cli.policy")),
    # The engine every verb runs its checks on: check base and registry, the worker, runner, session, spec loading,
    # the host-wide GPU lock, the one interrupt, the verify-stage plugin API.
    ("engine", ("opgate.checks", "opgate.engine")),
    # Render: every report format and the one place that writes them (emit, the report so far of an interrupt too).
    ("reporting", ("opgate.reporting",)),
    # The verbs: each builds its checks or its analysis on the layers below and renders through reporting.
    ("verbs", ("opgate.doctor", "opgate.inspect", "opgate.verify", "opgate.analyze", "opgate.fleet", "opgate.plan",
               "opgate.gpu.explain")),
    # The extension surface: gathers names from the layers below for plugin authors; nothing in opgate imports it.
    ("api", ("opgate.api",)),
    # Entry points: the command line and the pytest plugin.
    ("entry", ("opgate.cli", "opgate.__main__", "opgate.testing")),
)

# Upward edges that stay, each with why. Keep it short; a new one needs a reason as good.
ALLOWED_UPWARD = {
    # `analyze` pre-flights a spec by importing it under Triton's compile-only driver, in specload's child.
    # analyze.capture needs only core.limits and Triton; the call is inside import_spec_guarded(mode="analyze").
    ("opgate.engine.specload", "opgate.analyze.capture"),
}

# Circles through function-level imports that stay, each with why (module-level circles: none allowed).
ALLOWED_CIRCLES = {
    # What is left of issue #29's verify circle (the warm-up moved to verify/warm_up.py, which nothing imports):
    # runtime runs NcuStage (builtin_stages: its timeout) and sanitizer_batch (the shared compute-sanitizer run);
    # builtin_stages reads runtime's SANITIZER_TIMEOUT_S and sanitizer_batch's child runs runtime's loaders, all lazily.
    frozenset({"opgate.verify.builtin_stages", "opgate.verify.runtime", "opgate.verify.sanitizer_batch"}),
    # calibrate saves its bounds through bounds_cache; bounds_cache rebuilds calibrate.CaseBounds when it reads.
    frozenset({"opgate.verify.bounds_cache", "opgate.verify.calibrate"}),
    # The backend registry (verify/backends/__init__.py) imports base.py; base.py asks it for the plugin backends'
    # names (extra_backend_names) inside a function.
    frozenset({"opgate.verify.backends", "opgate.verify.backends.base"}),
}

# Report formats and who may write them: the output layer. emit() is the one writer a verb calls, and
# emit_interrupted (beside it) writes the report so far to the same planned paths when a run is cancelled.
REPORT_WRITE_FUNCTIONS = ("write_json", "write_junit", "write_html", "write_markdown")
REPORT_WRITERS = {"opgate.reporting.emit"}


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    kind: str  # "module" or "function"
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@lru_cache(maxsize=1)
def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def resolve(name: str) -> str | None:
    """The opgate module an imported name lands in (a submodule when it is one, else the module that defines it)."""
    known = modules()
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_in(body: list[ast.stmt], kind: str) -> list[tuple[ast.stmt, str]]:
    """(import node, kind) under `body`: module-level statements (also in if/try/with at module level) keep `kind`,
    anything inside a function or class method becomes "function"; TYPE_CHECKING blocks are left out."""
    found: list[tuple[ast.stmt, str]] = []
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append((node, kind))
        elif isinstance(node, ast.If) and is_type_checking(node):
            found += imports_in(node.orelse, kind)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found += imports_in(node.body, "function")
        elif isinstance(node, ast.ClassDef):
            found += imports_in(node.body, kind)
        else:  # if/try/with/for at this level: their blocks run when this level does
            blocks = [getattr(node, field, []) for field in ("body", "orelse", "finalbody")]
            blocks += [handler.body for handler in getattr(node, "handlers", [])]
            found += imports_in([stmt for block in blocks for stmt in block], kind)
    return found


@lru_cache(maxsize=1)
def edges() -> tuple[Edge, ...]:
    found: dict[tuple[str, str], Edge] = {}
    for source, path in modules().items():
        for node, kind in imports_in(ast.parse(path.read_text(), filename=str(path)).body, "module"):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif node.level == 0 and node.module:
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                names = []
            for name in names:
                target = resolve(name) if name.split(".")[0] == "opgate" else None
                if target is None or target == source:
                    continue
                previous = found.get((source, target))
                if previous is None or (previous.kind == "function" and kind == "module"):
                    found[(source, target)] = Edge(source, target, kind, node.lineno)
    return tuple(found.values())


def circles(kinds: tuple[str, ...]) -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan), over edges of the given kinds."""
    graph: dict[str, list[str]] = {name: [] for name in modules()}
    for edge in edges():
        if edge.kind in kinds:
            graph[edge.source].append(edge.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for name in graph:
        if name not in index:
            visit(name)
    return found


def layer_of(module: str) -> int:
    best = (-1, -1)  # (prefix length, layer)
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best[0]:
                best = (len(prefix), rank)
    return best[1]


def test_the_graph_is_read() -> None:
    assert len(modules()) > 150 and len(edges()) > 500
    assert any(e.kind == "function" for e in edges()) and any(e.kind == "module" for e in edges())


def test_every_module_has_a_layer() -> None:
    assert [name for name in modules() if layer_of(name) < 0] == []


def test_no_circle_among_module_level_imports() -> None:
    assert circles(("module",)) == []


def test_no_circle_but_the_allowed_ones() -> None:
    found = set(circles(("module", "function")))
    assert found - ALLOWED_CIRCLES == set(), "new import circle (move the shared piece down or inject it)"
    assert ALLOWED_CIRCLES - found == set(), "an allowed circle is gone: take it off ALLOWED_CIRCLES"


def test_no_upward_edge() -> None:
    upward = sorted(f"{e.source} ({LAYERS[layer_of(e.source)][0]}) -> {e.target} ({LAYERS[layer_of(e.target)][0]}),"
                    f" line {e.line}, {e.kind}-level" for e in edges()
                    if layer_of(e.target) > layer_of(e.source) and (e.source, e.target) not in ALLOWED_UPWARD)
    assert upward == []
    still_there = {(e.source, e.target) for e in edges()}
    assert ALLOWED_UPWARD <= still_there, "an allowed upward edge is gone: take it off ALLOWED_UPWARD"


def report_writers() -> dict[str, list[int]]:
    """Modules that use a report format's write_* function (call it, or hand it on as interrupts does), with the
    lines; the module defining it and import statements do not count."""
    uses: dict[str, list[int]] = {}
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            used = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
            if used in REPORT_WRITE_FUNCTIONS:
                uses.setdefault(name, []).append(node.lineno)
    return uses


def test_one_writer_of_report_files() -> None:
    writers = report_writers()
    assert set(writers) - REPORT_WRITERS == set(), f"a report written outside reporting.emit: {writers}"
    assert REPORT_WRITERS - set(writers) == set(), "a writer is gone: take it off REPORT_WRITERS"


@pytest.mark.parametrize("name", REPORT_WRITE_FUNCTIONS)
def test_the_report_formats_write_through_atomic_file(name: str) -> None:
    """Each format's write_* renders and hands the text to the one atomic write, nothing else."""
    defining = [module for module, path in modules().items()
                if module.startswith("opgate.reporting.") and f"def {name}(" in path.read_text()]
    assert len(defining) == 1
    assert "write_atomically(" in modules()[defining[0]].read_text()


def test_the_package_root_holds_no_loose_module() -> None:
    """Every module lives in the package of its layer (issue #29: 16 loose modules); the root keeps the spec API
    (`opgate.Operator`) and `python -m opgate`."""
    assert sorted(path.name for path in PACKAGE.glob("*.py")) == ["__init__.py", "__main__.py"]


def test_the_moved_modules_still_find_the_package_and_the_source_tree() -> None:
    """Two modules find a place by their own depth: a child's PYTHONPATH (the folder holding opgate/, never
    opgate/ itself, whose inspect/ would shadow the standard library's) and the source tree's pyproject.toml (its
    entry points stand for a stale editable install's)."""
    from opgate.engine.children import package_root
    from opgate.engine.plugins import CHECKS_GROUP, _source_tree_groups

    assert Path(package_root()) == SRC
    assert "doctor.collectives" in _source_tree_groups()[CHECKS_GROUP]
