"""Child-process entry point: `python -m opgate.checks.worker REQUEST.json`.

Loads one check class, runs it, writes its result as JSON. Anything that escapes (a crash, a
hang, os._exit) is seen by the parent as a missing result or a dead process.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

from opgate.checks.base import CheckContext
from opgate.checks.registry import CheckSpec
from opgate.results import CheckResult, Outcome


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[1]).read_text())
    result_path = Path(request["result_path"])
    ctx_data = request.get("context", {})
    ctx = CheckContext(
        verb=ctx_data.get("verb", "doctor"),
        level=ctx_data.get("level", "basic"),
        options=ctx_data.get("options", {}),
    )
    try:
        check_cls = CheckSpec(request["check_id"], request["target"]).load()
        result = check_cls().run(ctx)
    except Exception as exc:  # import or construction failure of the check itself
        result = CheckResult(
            check_id=request["check_id"],
            title=request.get("title", request["check_id"]),
            outcome=Outcome.ERROR,
            reason=f"check could not be loaded: {type(exc).__name__}: {exc}",
            extra={"traceback": traceback.format_exc(limit=12)},
        )
    _write_atomically(result_path, json.dumps(result.to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
