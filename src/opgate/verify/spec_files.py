"""Which spec files one `opgate verify PATH...` run verifies: files as given, folders searched for specs, and
`--changed-since REF` keeping only the specs whose own file or whose imported modules inside the repository
changed since a git ref (what a CI job on a pull request needs).

A folder's spec files are found statically, without running them: every `*.py` below it (not private `_x.py`
helpers, `test_*.py`, hidden or cache folders) whose syntax tree builds an `Operator(...)` or `opgate.Operator(...)`.
The imports a spec makes are followed statically too (its `import` statements, resolved against the spec's folder
and the repository's root and `src/`), so a changed kernel module selects the specs that import it.
"""

from __future__ import annotations

import ast
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from opgate.model.errors import InputError

SKIPPED_FOLDERS = ("__pycache__", "node_modules", "build", "dist", "site-packages")
GIT_TIMEOUT_S = 30.0


def _is_candidate(path: Path) -> bool:
    name = path.name
    return name.endswith(".py") and not name.startswith(("_", ".", "test_")) and name != "conftest.py"


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return None


def builds_operator(tree: ast.Module) -> bool:
    """Whether a module's code calls `Operator(...)` (imported from opgate) or `opgate.Operator(...)`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id == "Operator":
                return True
            if isinstance(func, ast.Attribute) and func.attr == "Operator":
                return True
    return False


def specs_in_folder(folder: Path) -> list[Path]:
    """The spec files below `folder`, sorted by path."""
    found: list[Path] = []
    for path in sorted(folder.rglob("*.py")):
        relative = path.relative_to(folder).parts
        if any(part.startswith(".") or part in SKIPPED_FOLDERS for part in relative[:-1]):
            continue
        if not _is_candidate(path):
            continue
        tree = _parse(path)
        if tree is not None and builds_operator(tree):
            found.append(path)
    return found


def expand_spec_paths(paths: Sequence[Path]) -> list[Path]:
    """Files as given (each must exist), folders replaced by the spec files below them; no path twice. A folder
    without a spec file is an input error (a run must never be green on nothing)."""
    from opgate.engine.specload import check_spec_path

    expanded: list[Path] = []
    for path in paths:
        path = Path(path)
        if path.is_dir():
            inside = specs_in_folder(path)
            if not inside:
                raise InputError(f"folder {path} holds no spec file (a .py file that builds opgate.Operator "
                                 "objects; private _*.py and test_*.py files are not searched); pass a spec file or "
                                 "a folder of them")
            expanded += inside
        else:
            check_spec_path(path)
            expanded.append(path)
    unique: dict[Path, Path] = {}
    for path in expanded:
        unique.setdefault(path.resolve(), path)
    return list(unique.values())


# -- --changed-since --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Repository:
    root: Path

    @classmethod
    def of(cls, path: Path) -> "Repository":
        """The git work tree holding `path`; InputError if there is none (or git is missing)."""
        try:
            proc = subprocess.run(["git", "-C", str(path if path.is_dir() else path.parent), "rev-parse",
                                   "--show-toplevel"], capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise InputError(f"--changed-since needs git: {exc}") from None
        if proc.returncode != 0:
            raise InputError(f"--changed-since: {path} is not inside a git work tree; run in a clone, or drop the "
                             "option")
        return cls(Path(proc.stdout.strip()).resolve())

    def changed_files(self, ref: str) -> set[Path]:
        """Files changed between `ref` and the work tree (committed since the merge base, staged, unstaged and
        untracked), as absolute paths."""
        def git(*args: str) -> list[str]:
            proc = subprocess.run(["git", "-C", str(self.root), *args], capture_output=True, text=True,
                                  timeout=GIT_TIMEOUT_S)
            if proc.returncode != 0:
                first = (proc.stderr.strip().splitlines() or ["git failed"])[0]
                raise InputError(f"--changed-since {ref!r}: {first}; give a branch, tag or commit this clone has "
                                 "(e.g. origin/main; a shallow CI clone may need a deeper fetch)")
            return [line for line in proc.stdout.splitlines() if line.strip()]

        git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        names = git("diff", "--name-only", f"{ref}...HEAD") if _has_head(self.root) else []
        names += git("diff", "--name-only", "HEAD") if _has_head(self.root) else []
        names += git("ls-files", "--others", "--exclude-standard")
        return {(self.root / name).resolve() for name in names}


def _has_head(root: Path) -> bool:
    proc = subprocess.run(["git", "-C", str(root), "rev-parse", "--verify", "--quiet", "HEAD"], capture_output=True,
                          timeout=GIT_TIMEOUT_S)
    return proc.returncode == 0


def _module_file(name: str, roots: Iterable[Path]) -> Path | None:
    """The file a dotted module name resolves to under one of `roots` (a module or a package's __init__)."""
    parts = name.split(".")
    for root in roots:
        base = root.joinpath(*parts)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate.resolve()
    return None


def local_imports(spec: Path, repo_root: Path) -> set[Path]:
    """Every file inside the repository that `spec` imports, directly or through other such files (statically:
    import statements, relative imports included; modules outside the repository are not followed)."""
    spec = spec.resolve()
    roots = [spec.parent, repo_root, repo_root / "src"]
    seen: set[Path] = set()
    todo = [spec]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        tree = _parse(current)
        if tree is None:
            continue
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from the importing file's package
                    base = current.parent
                    for _ in range(node.level - 1):
                        base = base.parent
                    module = node.module or ""
                    names = [module] if module else []
                    found = [_module_file(f"{module}.{a.name}" if module else a.name, [base]) for a in node.names]
                    found.append(_module_file(module, [base]) if module else None)
                    todo += [f for f in found if f is not None]
                    continue
                module = node.module or ""
                names = [module] + [f"{module}.{alias.name}" for alias in node.names]
            for name in names:
                # a package import loads each parent package's __init__ too
                parts = name.split(".")
                for k in range(1, len(parts) + 1):
                    found = _module_file(".".join(parts[:k]), roots)
                    if found is not None and _inside(found, repo_root):
                        todo.append(found)
    return {path for path in seen if path != spec}


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
        return True
    except ValueError:
        return False


def changed_specs(specs: Sequence[Path], ref: str) -> tuple[list[Path], dict[str, list[str]]]:
    """The specs whose file or local imports changed since `ref`, and for each kept spec why (the changed files,
    relative to the repository)."""
    if not specs:
        return [], {}
    repo = Repository.of(Path(specs[0]).resolve())
    changed = repo.changed_files(ref)
    kept: list[Path] = []
    why: dict[str, list[str]] = {}
    for spec in specs:
        touched = sorted({spec.resolve(), *local_imports(spec, repo.root)} & changed)
        if touched:
            kept.append(spec)
            why[str(spec)] = [str(path.relative_to(repo.root)) if _inside(path, repo.root) else str(path)
                              for path in touched]
    return kept, why
