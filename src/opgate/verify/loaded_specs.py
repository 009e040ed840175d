"""Spec files' operators, loaded once per process: a warm worker runs many checks of a library's spec files in
turn, and re-importing a user's module would re-create its Triton kernels (and recompile them) for every check.

A warm worker serves the spec files of one library (engine.stages.OperatorPlan.worker_key_for), as pytest runs every
test module of a suite in one process. What a spec file's import switches in torch's global numerics (TF32, reduced-
precision reductions, the float32 matmul precision, the default dtype) stays that file's: each call hands back the
process's switches as they were before any spec was imported, plus the ones this file's import changed.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

# A process-wide switch of torch's numerics: (name, read it, set it). Reading none of them starts CUDA.
Switch = tuple[str, Callable[[Any], Any], Callable[[Any, Any], None]]


def _attribute(path: str) -> Switch:
    """A switch that is a plain attribute, e.g. "backends.cuda.matmul.allow_tf32" of the torch module."""
    *parents, name = path.split(".")

    def owner(torch: Any) -> Any:
        target = torch
        for part in parents:
            target = getattr(target, part)
        return target

    return path, lambda torch: getattr(owner(torch), name), lambda torch, value: setattr(owner(torch), name, value)


SWITCHES: tuple[Switch, ...] = (
    _attribute("backends.cuda.matmul.allow_tf32"),
    _attribute("backends.cuda.matmul.allow_fp16_reduced_precision_reduction"),
    _attribute("backends.cuda.matmul.allow_bf16_reduced_precision_reduction"),
    _attribute("backends.cudnn.allow_tf32"),
    _attribute("backends.cudnn.benchmark"),
    ("float32_matmul_precision", lambda torch: torch.get_float32_matmul_precision(),
     lambda torch, value: torch.set_float32_matmul_precision(value)),
    ("default_dtype", lambda torch: torch.get_default_dtype(), lambda torch, value: torch.set_default_dtype(value)),
)


def _switches() -> dict[str, Any]:
    """The switches' values now; {} while torch is not imported (nothing to keep apart)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    values = {}
    for name, read, _ in SWITCHES:
        try:
            values[name] = read(torch)
        except (AttributeError, RuntimeError):  # an older torch without this switch
            continue
    return values


def _set_switches(wanted: dict[str, Any]) -> None:
    """Set the switches that differ from `wanted` (only those: a setter may cost an import)."""
    torch = sys.modules.get("torch")
    if torch is None or not wanted:
        return
    now = _switches()
    for name, _, write in SWITCHES:
        if name in wanted and now.get(name) != wanted[name]:
            write(torch, wanted[name])


@dataclass
class _Loaded:
    key: tuple[int, int]  # the file's modification time and size when it was imported
    operators: list[Any]
    switched: dict[str, Any] = field(default_factory=dict)  # what its import changed in torch's switches


_LOADED: dict[str, _Loaded] = {}  # by the spec file's absolute path
# the switches before the first spec's import of this process ({} until then, or while torch was not imported)
_BEFORE_ANY: dict[str, Any] = {}


def loaded_operators(spec_file: str) -> list[Any]:
    """The spec's operators with their derived `<op>.grad` twins (verify/gradients.py); imported again only when
    the file changed (size or modification time). Torch's switches are left as this spec's import left them."""
    from opgate.core.spec import load_spec_file
    from opgate.engine.specload import import_torch_first
    from opgate.verify.gradients import with_gradient_operators

    path = os.path.abspath(spec_file)
    stat = os.stat(path)
    key = (stat.st_mtime_ns, stat.st_size)
    loaded = _LOADED.get(path)
    if loaded is None or loaded.key != key:
        import_torch_first()  # before the baseline is read: a spec that imports torch and switches TF32 must not set it
        if not _BEFORE_ANY:
            _BEFORE_ANY.update(_switches())
        _set_switches(_BEFORE_ANY)  # another spec's switches must not count as this one's
        operators = with_gradient_operators(load_spec_file(spec_file))
        switched = {name: value for name, value in _switches().items() if _BEFORE_ANY.get(name) != value}
        loaded = _LOADED[path] = _Loaded(key, operators, switched)
    _set_switches({**_BEFORE_ANY, **loaded.switched})
    return loaded.operators


def loaded_operator(spec_file: str, name: str) -> Any:
    """The spec's operator (or `<op>.grad` twin) called `name`; an InputError naming the ones it has otherwise."""
    from opgate.model.errors import InputError

    operators = {op.name: op for op in loaded_operators(spec_file)}
    if name not in operators:
        raise InputError(f"{spec_file} has no operator {name!r}; it has {', '.join(sorted(operators))}")
    return operators[name]
