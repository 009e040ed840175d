"""A disk cache of each case's error-bound terms, so a re-run recomputes nothing that did not change.

The bounds of one case (input-perturbation sensitivity, the accumulation bound with its sampled Jacobian rows, the
log-space bound: `calibrate.CaseBounds`) are most of the calibration's time: ~20 reverse-mode passes of the float64
reference per output and case. They depend only on the case's float64 inputs, the reference, the dtype and opgate's
judging code, so an entry is keyed by exactly those:

- a digest of the float64 inputs the truth is computed from and of the truth itself (the reference's values),
- a digest of the reference's code (bytecode, constants and names, recursively; no line numbers, so editing a
  kernel elsewhere in the spec file keeps the entry),
- the case's values (sizes, seed, regime: the seed drives the sampling; not its layout, which the float64 inputs
  do not have), the dtype, torch's version and a digest of opgate's judging sources.

A changed reference, input generator or judging rule therefore misses, and nothing needs invalidating by hand. The
truth and the eager baseline themselves are recomputed on every run (cheap next to the bounds, and the truth is what
the digest checks). Entries are small JSON files written atomically, so concurrent runs can share one folder (a CI
cache directory).

Folder: $OPGATE_CACHE_DIR, else $XDG_CACHE_HOME/opgate, else ~/.cache/opgate; OPGATE_CACHE=0 (the CLI's
--no-cache) turns it off. A folder that cannot be written turns it off for the run, silently: the cache only saves
time, it never changes a verdict.
"""

from __future__ import annotations

import hashlib
import json
import os
import types
from dataclasses import asdict
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:
    from opgate.verify.calibrate import CaseBounds
    from opgate.verify.inputs import Case

CACHE_FORMAT = 1
CACHE_ENV = "OPGATE_CACHE"  # "0": off
CACHE_DIR_ENV = "OPGATE_CACHE_DIR"
# The modules whose code decides a case's inputs and bound terms: any change to them misses every entry.
JUDGING_MODULES = ("opgate.verify.calibrate", "opgate.verify.error_bounds", "opgate.verify.inputs",
                   "opgate.verify.compare", "opgate.verify.bounds_cache", "opgate.core.dtypes")


def cache_root() -> Path | None:
    """The cache folder, or None when the cache is off."""
    if os.environ.get(CACHE_ENV, "1").strip().lower() in ("0", "off", "false", "no"):
        return None
    return cache_folder()


def cache_folder() -> Path:
    """Where opgate's caches live, whether or not the cache of judgements is on (OPGATE_CACHE_DIR, else
    $XDG_CACHE_HOME/opgate or ~/.cache/opgate)."""
    explicit = os.environ.get(CACHE_DIR_ENV, "").strip()
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(base) / "opgate"


@lru_cache(maxsize=1)
def judging_code_digest() -> str:
    """A digest of opgate's judging sources (and its version): a new rule invalidates every entry."""
    import importlib.util

    from opgate import __version__

    digest = hashlib.sha256(__version__.encode())
    for name in JUDGING_MODULES:
        spec = importlib.util.find_spec(name)
        origin = getattr(spec, "origin", None) if spec else None
        if origin and os.path.isfile(origin):
            digest.update(Path(origin).read_bytes())
    return digest.hexdigest()


def _code_parts(code: types.CodeType, seen: set[int]) -> list[bytes]:
    """Bytecode, names and constants of a code object and the code objects nested in it (no line numbers)."""
    if id(code) in seen:
        return []
    seen.add(id(code))
    parts = [code.co_code, repr(code.co_names).encode(), repr(code.co_varnames).encode()]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            parts += _code_parts(const, seen)
        else:
            parts.append(repr(const).encode())
    return parts


def function_digest(fn: Callable[..., Any], depth: int = 3) -> str:
    """A digest of what `fn` computes as far as its code shows: its bytecode, the functions of its own module it
    calls (a few levels), its closure's values and defaults. Not its line numbers or file name."""
    digest = hashlib.sha256()
    seen_code: set[int] = set()
    seen_fn: set[int] = set()

    def visit(obj: Any, level: int) -> None:
        target = getattr(obj, "__func__", obj)  # bound methods
        if isinstance(target, (types.FunctionType, types.LambdaType)):
            if id(target) in seen_fn:
                return
            seen_fn.add(id(target))
            for part in _code_parts(target.__code__, seen_code):
                digest.update(part)
            digest.update(repr(target.__defaults__).encode())
            for cell in target.__closure__ or ():
                try:
                    visit(cell.cell_contents, level)
                except ValueError:  # an empty cell
                    continue
            if level > 0:
                module_globals = target.__globals__
                for name in target.__code__.co_names:
                    value = module_globals.get(name)
                    if isinstance(value, types.FunctionType) and value.__module__ == target.__module__:
                        visit(value, level - 1)
        elif callable(obj) and not isinstance(obj, type):
            call = getattr(type(obj), "__call__", None)  # a callable object (nn.Module: forward)
            forward = getattr(obj, "forward", None)
            for member in (forward, call):
                if isinstance(getattr(member, "__func__", member), types.FunctionType):
                    visit(member, level)
            digest.update(type(obj).__qualname__.encode())
        elif isinstance(obj, (int, float, str, bool, bytes, type(None), tuple)):
            digest.update(repr(obj).encode())
        else:
            digest.update(type(obj).__qualname__.encode())

    visit(fn, depth)
    return digest.hexdigest()


def tensors_digest(values: Sequence[Any]) -> str:
    """A digest of tensors' dtypes, shapes, strides and bytes (non-tensors by their repr)."""
    import torch

    digest = hashlib.sha256()
    for value in values:
        if isinstance(value, torch.Tensor):
            flat = value.detach().cpu().contiguous()
            digest.update(f"{flat.dtype}{tuple(value.shape)}{tuple(value.stride())}".encode())
            if flat.numel():
                digest.update(flat.reshape(-1).view(torch.uint8).numpy())  # the buffer itself: no copy
        else:
            digest.update(repr(value).encode())
    return digest.hexdigest()


def entry_key(reference: Callable[..., Any], case: "Case", dtype: str, truth_inputs: Sequence[Any],
              truth: Sequence[Any]) -> str:
    import torch

    parts = {"format": CACHE_FORMAT, "code": judging_code_digest(), "torch": torch.__version__,
             "reference": function_digest(reference), "case": repr(case.values_key()), "dtype": dtype,
             "inputs": tensors_digest(truth_inputs), "truth": tensors_digest(truth)}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _encode(bounds: "CaseBounds") -> dict[str, Any]:
    return {"sensitivity": [list(pair) for pair in bounds.sensitivity],
            "accumulation": [asdict(b) for b in bounds.accumulation],
            "logspace": [asdict(b) for b in bounds.logspace]}


def _decode(data: dict[str, Any]) -> "CaseBounds":
    from opgate.verify.calibrate import CaseBounds
    from opgate.verify.error_bounds import AccumulationBound, LogspaceBound, SampledElement

    accumulation = [AccumulationBound(**{**entry, "elements": tuple(SampledElement(**e) for e in entry["elements"])})
                    for entry in data["accumulation"]]
    return CaseBounds([(float(a), float(b)) for a, b in data["sensitivity"]], accumulation,
                      [LogspaceBound(**entry) for entry in data["logspace"]])


def _path(root: Path, key: str) -> Path:
    return root / f"bounds-v{CACHE_FORMAT}" / key[:2] / f"{key}.json"


def load(key: str) -> "CaseBounds | None":
    root = cache_root()
    if root is None:
        return None
    try:
        return _decode(json.loads(_path(root, key).read_text()))
    except (OSError, ValueError, KeyError, TypeError):  # absent, half-written by an old crash, another format
        return None


def store(key: str, bounds: "CaseBounds") -> None:
    root = cache_root()
    if root is None:
        return
    from opgate.model.errors import InputError
    from opgate.engine.atomic import write_atomically

    path = _path(root, key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, json.dumps(_encode(bounds)), durable=False)  # a lost entry is only recomputed
    except (OSError, InputError):  # a read-only or full disk: the run goes on uncached
        return
