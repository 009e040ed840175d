"""Load a spec file safely: first in an isolated child with a timeout, then in this process.

A spec is user code run at import. `verify` and `analyze` need its Operator objects here (the parent
calibrates budgets with the reference), so the parent must import it too; but a spec that calls
`sys.exit(0)`, `os._exit(7)`, segfaults or loops forever at import would otherwise decide opgate's exit
code or hang it. The pre-flight child imports the spec first (`python -m opgate.engine.specload`, its own process
group, killed on timeout); whatever it did is one line, exit 2, naming the spec. Only a spec that imports
cleanly there is imported here, with SystemExit and any BaseException from the import caught as well.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Sequence

from opgate.model.errors import InputError
from opgate.engine.children import (die_with_parent, exit_without_teardown, kill_process_group, package_root,
                                    register_child, signal_name)

# Seconds a spec may take to import (torch and Triton alone take a few seconds on a cold CPU machine).
DEFAULT_IMPORT_TIMEOUT_S = 120.0
STDERR_HINT_CHARS = 160
MODES = ("verify", "analyze")


def _last_stderr_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:STDERR_HINT_CHARS] if lines else ""


def check_spec_path(path: Path) -> None:
    """InputError unless `path` is a regular file (a directory, /dev/null or a missing path is named as such)."""
    path = Path(path)
    if path.is_file():
        return
    if path.is_dir():
        problem = "is a directory"
    elif path.exists():
        problem = "is not a regular file"
    else:
        from opgate.model.errors import why_missing

        problem = why_missing(path)
    raise InputError(f"spec file {path} {problem}; pass the path of a Python file that defines opgate.Operator "
                     "objects")


def preflight_spec(path: Path, timeout_s: float = DEFAULT_IMPORT_TIMEOUT_S, mode: str = "verify",
                   import_meanwhile: Sequence[str] = ()) -> None:
    """Import `path` in a child process; raise InputError (one line) unless it imported and defined Operators.
    `import_meanwhile`: modules this process imports while the child runs (what it needs next anyway)."""
    preflight_specs([path], timeout_s, mode, import_meanwhile)


def preflight_specs(paths: Sequence[Path], timeout_s: float = DEFAULT_IMPORT_TIMEOUT_S, mode: str = "verify",
                    import_meanwhile: Sequence[str] = ()) -> None:
    """Import every file of `paths` in order, in one child process (one interpreter, torch and the library the specs
    share imported once: a library's nine pre-flight children, one per file, took 20 s together on a 2-core machine
    and contended with the calibration's start on the H200 host); raise InputError (one line) for the first file
    that does not import cleanly and define Operators, as this process would meet it. `timeout_s` is each file's."""
    paths = [Path(p) for p in paths]
    for path in paths:
        check_spec_path(path)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root(), env.get("PYTHONPATH", "")) if p)
    with tempfile.TemporaryDirectory(prefix="opgate-spec-") as tmp:
        progress_path = Path(tmp) / "progress.jsonl"
        stderr_path = Path(tmp) / "stderr"
        with open(stderr_path, "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "opgate.engine.specload", mode, str(progress_path), *map(str, paths)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env,
                start_new_session=True, preexec_fn=die_with_parent,
            )
            register_child(proc)
            # In a thread: the main thread stays in wait(), where Ctrl-C is always delivered and never swallowed
            # by an import; whoever needs the module next waits for the import lock.
            importer = threading.Thread(target=_import_quietly, args=(tuple(import_meanwhile),), daemon=True,
                                        name="opgate-import")
            importer.start()
            try:
                _wait_file_by_file(proc, progress_path, timeout_s)
            finally:
                kill_process_group(proc)  # grandchildren the spec started at import die with it
        stderr_hint = _last_stderr_line(stderr_path.read_text(errors="replace"))
        events = _read_progress(progress_path)
    code = proc.returncode
    done = {e["file"]: e for e in events if e["event"] == "done"}
    for path in paths:
        outcome = done.get(str(path))
        if outcome is None:
            break
        if outcome.get("error"):
            raise InputError(outcome["error"])
    else:
        if code == 0:
            return
    started = [e["file"] for e in events if e["event"] == "start"]
    path = Path(started[-1]) if started else paths[0]
    said = f" (last stderr: {stderr_hint})" if stderr_hint else ""
    if code is not None and code < 0:
        what = f"crashed with {signal_name(code)} while being imported"
    else:
        what = f"ended the process with exit code {code} while being imported (os._exit?)"
    raise InputError(f"spec file {path} {what}{said}; a spec must only define opgate.Operator objects at import")


def _wait_file_by_file(proc: subprocess.Popen[bytes], progress_path: Path, timeout_s: float) -> None:
    """Wait for the pre-flight child; InputError naming the file it is stuck in once one takes over `timeout_s`."""
    import time

    current, since = "", time.monotonic()
    while True:
        try:
            proc.wait(timeout=0.2)
            return
        except subprocess.TimeoutExpired:
            pass
        started = [e["file"] for e in _read_progress(progress_path) if e["event"] == "start"]
        if started and started[-1] != current:
            current, since = started[-1], time.monotonic()
        if time.monotonic() - since > timeout_s:
            kill_process_group(proc)
            raise InputError(f"spec file {current or '?'} did not finish importing within {timeout_s:g} s (an "
                             "endless loop or a blocking call at import?); make its import quick and side-effect "
                             "free") from None


def installed_imports(paths: Sequence[Path]) -> list[str]:
    """The modules the spec files import at their top level that an installed distribution provides (torch, Triton,
    fla, ...: a package with its .dist-info, wherever pip put it), never the user's own modules beside the specs.
    Importing them here while the pre-flight child imports the specs overlaps what this process would import right
    after, one file at a time: a library's imports (fla: 15-17 CPU-s on the H200 host) ran twice in a row. A file
    that does not parse gives none (the pre-flight child says what is wrong with it).

    A distribution, not a folder named site-packages: `pip install --target DIR` with DIR on PYTHONPATH (the GPU
    library runs' wheels in /tmp/site) installs into neither site-packages nor dist-packages, and those imports ran
    twice in a row again."""
    import ast
    import importlib.metadata
    import importlib.util

    names: list[str] = []
    for path in paths:
        try:
            tree = ast.parse(Path(path).read_text(errors="replace"))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in tree.body:
            if isinstance(node, ast.Import):
                found = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found = [node.module]
            else:
                continue
            names += [name for name in found if name not in names]
    if not names:
        return []
    distributed = importlib.metadata.packages_distributions()  # top-level module -> the distributions providing it
    spec_folders = {Path(path).resolve().parent for path in paths}
    installed = []
    for name in names:
        top = name.split(".")[0]
        if top not in distributed or _beside(top, spec_folders):
            continue
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            continue
        origin = Path(spec.origin).resolve() if spec is not None and spec.origin else None
        if origin is not None and not any(folder in origin.parents for folder in spec_folders):
            installed.append(name)
    return installed


def _beside(module: str, folders: set[Path]) -> bool:
    """Whether a module or package named `module` sits in one of `folders`: a spec that puts its own folder on
    sys.path at import would get that one, so the installed namesake must not be imported here first."""
    return any((folder / f"{module}.py").is_file() or (folder / module).is_dir() for folder in folders)


def _import_quietly(names: Sequence[str]) -> None:
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # whoever needs it next says so, with the install hint
            pass


def _read_progress(path: Path) -> list[dict[str, Any]]:
    """The pre-flight child's events so far ({"event": "start"|"done", "file", "error"?}); a torn last line is
    skipped (the child may be writing it)."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    events = []
    for line in lines:
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


def import_spec_guarded(path: Path, mode: str = "verify") -> list[Any]:
    """Import the spec in this process; SystemExit or any other BaseException at import is an InputError."""
    from opgate.core.spec import load_spec_file
    from opgate.core.torch_kernels import replaced_gpu_kernels

    if mode == "verify":
        import_torch_first()
    try:
        if mode == "analyze":
            from opgate.analyze.capture import compile_only
            from opgate.core.limits import sm_limits

            with compile_only(90, sm_limits("9.0"), 132):
                return load_spec_file(path)
        before = replaced_gpu_kernels()
        operators = load_spec_file(path)
        if replaced_gpu_kernels() != before:
            _REPLACING.add(str(Path(path).resolve()))
        return operators
    except InputError:
        raise
    except KeyboardInterrupt:
        raise
    except SystemExit as exc:
        raise InputError(f"spec file {path} called sys.exit({exc.code!r}) while being imported; a spec must only "
                         "define opgate.Operator objects at import") from None
    except ModuleNotFoundError as exc:
        from opgate.cli.optional import missing_module_message

        hint = missing_module_message(exc.name)
        raise InputError(f"spec file {path} failed to import: {type(exc).__name__}: {exc}"
                         + (f"; {hint}" if hint else "")) from None
    except BaseException as exc:  # noqa: BLE001 - user code: anything it raises is a fact about the spec
        raise InputError(f"spec file {path} failed to import: {type(exc).__name__}: {exc}") from None


# Spec files whose import, in this process, replaced GPU kernels of aten operators (core/torch_kernels.py)
_REPLACING: set[str] = set()


def replaces_gpu_kernels(spec: Path) -> bool:
    """Whether this spec file's import, in this process, replaced GPU kernels of aten operators."""
    return str(Path(spec).resolve()) in _REPLACING
# Packages every spec shares, which tell no library apart
BASE_PACKAGES = frozenset({"torch", "triton", "numpy", "opgate", "typing_extensions"})


def worker_group(spec: Path) -> str:
    """Which spec files may share warm workers (engine.stages.OperatorPlan.worker_key_for): those of one library,
    named by the installed packages the spec's module refers to (fla, flag_gems), as pytest runs a suite's modules in
    one process. A library's import can change what torch runs for everyone in the process (FlagGems registers its
    Triton kernels for aten.softmax and others on CUDA), so specs of different libraries never share a worker, a
    spec whose own import replaced aten GPU kernels gets workers of its own, and so does one this process did not
    import (nothing known) or, in a run where some spec replaced kernels, one that names no installed library."""
    from opgate.core.spec import spec_module_name

    path = str(Path(spec).resolve())
    module = sys.modules.get(spec_module_name(path))
    if path in _REPLACING or module is None:
        return f"file:{path}"
    libraries = _installed_packages_named_by(module)
    if not libraries and _REPLACING:
        return f"file:{path}"
    return "+".join(libraries) or "-"


def _installed_packages_named_by(module: Any) -> list[str]:
    """The installed top-level packages (less BASE_PACKAGES) of the modules, functions and classes a module's
    globals hold."""
    import types

    named = set()
    for value in list(vars(module).values()):
        try:
            name = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
        except Exception:  # a user object whose attribute lookup raises (a lazy proxy): it names no package
            continue
        if isinstance(name, str):
            named.add(name.split(".", 1)[0])
    return sorted((named & _installed_packages()) - BASE_PACKAGES)


_INSTALLED: list[frozenset[str]] = []  # the top-level names of the installed distributions, read once


def _installed_packages() -> frozenset[str]:
    from importlib.metadata import packages_distributions

    if not _INSTALLED:
        try:
            _INSTALLED.append(frozenset(packages_distributions()))
        except Exception:  # unreadable package metadata: no library known; specs share only while none replaced kernels
            _INSTALLED.append(frozenset())
    return _INSTALLED[0]


def import_torch_first() -> None:
    """torch before a spec: what the spec's import changes in torch (a library's kernels registered for aten
    operators, core/torch_kernels.py; the numerics switches verify/loaded_specs.py keeps per spec) is then told
    apart from torch's own. Every verify reference runs on torch."""
    try:
        import torch  # noqa: F401
    except ImportError:  # the spec's own import says what is missing
        pass


def load_spec_isolated(path: Path, timeout_s: float | None = None, mode: str = "verify",
                       import_meanwhile: Sequence[str] = ()) -> list[Any]:
    """Pre-flight in a child, then import here: what `verify` and `analyze` call to get the Operators."""
    preflight_spec(path, timeout_s or DEFAULT_IMPORT_TIMEOUT_S, mode, import_meanwhile)
    return import_spec_guarded(path, mode)


def _child_main(mode: str, progress_path: str, spec_paths: Sequence[str]) -> None:
    """The pre-flight child: import each spec in turn, a "start" line before each and a "done" line after (with
    the one-line error, where it failed: the first failure ends the child, as it would end the parent's load)."""
    with open(progress_path, "a") as progress:
        def event(**fields: Any) -> None:
            progress.write(json.dumps(fields) + "\n")
            progress.flush()

        for spec_path in spec_paths:
            event(event="start", file=spec_path)
            try:
                operators = import_spec_guarded(Path(spec_path), mode)
                event(event="done", file=spec_path, operators=[op.name for op in operators])
            except InputError as exc:
                event(event="done", file=spec_path, error=str(exc))
                break
    exit_without_teardown(0)  # atexit hooks or threads the spec started cannot change the verdict


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[1] not in MODES:
        sys.exit("usage: python -m opgate.engine.specload {verify|analyze} PROGRESS.jsonl SPEC.py...")
    _child_main(sys.argv[1], sys.argv[2], sys.argv[3:])
