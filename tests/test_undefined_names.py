"""No module uses a name it never defined or imported. Most GPU code paths never run on a CPU machine, so a
NameError there (gpu/probes/ncu.py lost its `import opgate` in a re-layout and the ncu stage failed only on the
H200) is found by pyflakes' static scan instead, over every module of the package."""

from __future__ import annotations

from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "opgate"


def test_no_module_uses_an_undefined_name() -> None:
    pytest.importorskip("pyflakes")
    from pyflakes import api, messages, reporter

    found: list[str] = []

    class Collect(reporter.Reporter):
        def __init__(self) -> None:
            super().__init__(None, None)

        def flake(self, message: object) -> None:
            if isinstance(message, messages.UndefinedName):
                line = Path(message.filename).read_text().splitlines()[message.lineno - 1]
                if "noqa: F821" not in line:
                    found.append(f"{message.filename}:{message.lineno}: {message.message % message.message_args}")

        def syntaxError(self, filename: str, msg: str, lineno: int, offset: int, text: str) -> None:
            found.append(f"{filename}:{lineno}: {msg}")

        def unexpectedError(self, filename: str, msg: str) -> None:
            found.append(f"{filename}: {msg}")

    collect = Collect()
    for path in sorted(SRC.rglob("*.py")):
        api.checkPath(str(path), collect)
    assert not found, "\n".join(found)
