"""Constructs Triton's CPU interpreter cannot run: an exception of the interpreter, not of the kernel.

Under TRITON_INTERPRET=1 a kernel body runs as Python over NumPy, with the interpreter standing in for the compiler's
types and builder. Some valid Triton has no stand-in there, and the kernel raises on the CPU although it compiles
and runs on a GPU (Triton 3.9; each reproduced by tests/data/verify/interpreter_gap_probe.py):

* a float kernel argument or constexpr expression stays a Python float, so `(1.0 / softcap).to(tl.float32)` raises
  `AttributeError: 'float' object has no attribute 'to'` (compiled, the argument is a float32 scalar tensor);
* `tl.inline_asm_elementwise` raises `NotImplementedError('inline_asm not supported in interpreter mode')`;
* `triton.language.extra.libdevice`'s functions are stubs the compiler replaces; the interpreter calls them and gets
  None, which fails at its first use (`TypeError: unsupported operand type(s) for +: 'NoneType' and 'float'`);
  `triton.language.extra.cuda.libdevice` raises `NotImplementedError` (extern_elementwise);
* an alias of a `triton.language` builtin kept in a module global (unsloth's kernels/utils.py: `triton_cast =
  tl.cast`): the interpreter patches the builtins it reaches through `tl`, not the alias, which raises `ValueError:
  Did you forget to add @triton.jit ? (`_semantic` argument must be provided outside of JIT functions.)`; compiled,
  the code generator calls any builtin it finds with its semantic.

The interpreter wraps whatever the kernel body raises in `InterpreterError` (triton/runtime/errors.py) with the
original as its cause. A limitation is told from the kernel's own error by that original: NotImplementedError, or an
AttributeError/TypeError on an object the interpreter substitutes for a compiled value (a Python scalar, None, a
NumPy value, the interpreter's builder), or raised inside the interpreter's emulation itself. A failed
`tl.device_assert` (AssertionError), a shape or type error of `triton.language`'s semantics (it fails compiled too)
and an exception of the user's own wrapper code (no InterpreterError) stay the implementation's crash.
"""

from __future__ import annotations

import linecache
import re
import traceback
from pathlib import Path

from opgate.verify.backends.base import BackendLimitation

DEVIATION = "interpreter"
# Objects the interpreter hands a kernel where compiled Triton has a tl.tensor or a constexpr: a Python scalar, None
# (an unmapped libdevice function's result), a NumPy value, or its own builder missing an operation.
_SUBSTITUTE_OBJECT = re.compile(r"'(float|int|bool|numpy\.[\w.]+|ndarray|InterpreterBuilder)' object"
                                r"|of type <class '(float|int|bool|numpy\.[\w.]+)'>|'NoneType'")
_INTERPRETER_FILE = ("runtime", "interpreter.py")
# What triton.language's builtin wrapper raises when called without the semantic the interpreter patches into tl
_UNPATCHED_BUILTIN = "`_semantic` argument must be provided outside of JIT functions"


def _interpreted_cause(exc: BaseException) -> BaseException | None:
    """What the interpreter wrapped: the exception below the innermost InterpreterError of exc's chain (a device
    function's error is wrapped once per call level); None when the chain holds no InterpreterError."""
    from triton.runtime.errors import InterpreterError

    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(chain) < 32 and all(current is not e for e in chain):
        chain.append(current)
        current = current.__cause__ or current.__context__
    wrapped = [i for i, e in enumerate(chain) if isinstance(e, InterpreterError)]
    if not wrapped or wrapped[-1] + 1 >= len(chain):
        return None
    return chain[wrapped[-1] + 1]


def _code_of(line: str) -> str:
    """A source line without its comment."""
    import io
    import tokenize

    try:
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(line.strip()).readline)
                  if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER)]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return line.strip()
    return tokenize.untokenize(tokens).strip() if tokens else line.strip()


def _frames(exc: BaseException) -> list[traceback.FrameSummary]:
    return list(traceback.extract_tb(exc.__traceback__)) if exc.__traceback__ is not None else []


def _package_dir(module: str) -> str:
    import importlib

    return str(Path(importlib.import_module(module).__file__).resolve().parent)


def _is_library_frame(frame: traceback.FrameSummary, libraries: tuple[str, ...]) -> bool:
    try:
        path = str(Path(frame.filename).resolve())
    except (OSError, ValueError):
        return False
    return any(path.startswith(lib) for lib in libraries)


def interpreter_gap(exc: BaseException) -> BackendLimitation | None:
    """The construct Triton's CPU interpreter could not run, when `exc` (raised by an implementation call under
    TRITON_INTERPRET=1) is such a gap; None when it is the implementation's own error."""
    inner = _interpreted_cause(exc)
    if inner is None or isinstance(inner, AssertionError):  # a failed tl.device_assert is the kernel's verdict
        return None
    frames = _frames(inner)
    libraries = (_package_dir("triton"), _package_dir("opgate"))
    raised_in_interpreter = bool(frames) and Path(frames[-1].filename).parts[-2:] == _INTERPRETER_FILE
    message = str(inner)
    unpatched_alias = isinstance(inner, ValueError) and _UNPATCHED_BUILTIN in message
    if not (isinstance(inner, NotImplementedError) or unpatched_alias
            or (isinstance(inner, (AttributeError, TypeError))
                and (raised_in_interpreter or _SUBSTITUTE_OBJECT.search(message)))):
        return None
    user = [f for f in frames if not _is_library_frame(f, libraries)]
    frame = user[-1] if user else (frames[-1] if frames else None)
    if frame is not None:
        construct = _code_of(frame.line or linecache.getline(frame.filename, frame.lineno or 0))
        where = f" `{construct}`" if construct else f" the code of {frame.name}"
        location = f" at {Path(frame.filename).name}:{frame.lineno}"
    else:
        where, location = " a construct of this kernel", ""
    error = " ".join(f"{type(inner).__name__}: {message}".split())[:200]
    if "'NoneType'" in message and frame is not None and "libdevice" in "".join(linecache.getlines(frame.filename)):
        error += "; triton.language.extra.libdevice's functions are stubs that return None in the interpreter"
    if unpatched_alias:
        error += ("; a triton.language builtin called through an alias kept outside `tl` (such as `cast = tl.cast`), "
                  "which the interpreter does not patch")
    return BackendLimitation(DEVIATION, f"Triton's CPU interpreter does not support{where}{location} ({error})",
                             "run on a GPU to judge it")
