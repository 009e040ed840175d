"""Checks the JSON reports scripts/gpu/failure_classes.sh wrote against what the gpuclasses branch promises; prints one
line per expectation (OK / WRONG) and exits 1 on any WRONG.

    python scripts/gpu/failure_classes_check.py WORKDIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

WRONG: list[str] = []


def results(path: Path) -> dict[str, dict[str, Any]]:
    if not path.is_file():
        return {}
    return {r["check_id"]: r for r in json.loads(path.read_text())["results"]}


def expect(label: str, ok: bool, evidence: str) -> None:
    print(f"{'OK   ' if ok else 'WRONG'} {label}: {evidence[:400]}")
    if not ok:
        WRONG.append(label)


def result_line(result: dict[str, Any] | None) -> str:
    if result is None:
        return "no such result"
    return f"{result['outcome']} [{result.get('extra', {}).get('failure_class', '')}] {result['reason']}"


def check_streams(work: Path) -> None:
    found = results(work / "stream_faults.json")
    get: Callable[[str], dict[str, Any] | None] = found.get
    legacy = get("verify.scale2.bad_cupy_legacy_stream.float32")
    expect("legacy-stream kernel: numerics fails [stream], not [gaming]",
           legacy is not None and legacy["outcome"] == "failed" and legacy["extra"].get("failure_class") == "stream"
           and legacy["reason"].startswith("[stream] runs on a stream other than the caller's current stream")
           and "ExternalStream" in legacy["remediation"], result_line(legacy))
    runtime = get("verify.scale2.bad_cupy_legacy_stream.float32.runtime")
    expect("legacy-stream kernel: runtime names work outside the capturing stream",
           runtime is not None and runtime["outcome"] == "failed" and "outside the capturing stream" in runtime["reason"]
           and runtime["extra"].get("failure_class") == "stream", result_line(runtime))
    good = get("verify.scale2.good_cupy_torch_stream.float32")
    expect("current-stream twin: numerics passes (or warns ftz)",
           good is not None and good["outcome"] in ("passed", "warned"), result_line(good))
    good_runtime = get("verify.scale2.good_cupy_torch_stream.float32.runtime")
    expect("current-stream twin: runtime passes", good_runtime is not None and good_runtime["outcome"] == "passed",
           result_line(good_runtime))
    racy = get("verify.rowsum.bad_rowsum_racy.float32.runtime")
    expect("racy kernel: runtime names nondeterminism, not frozen state",
           racy is not None and "nondeterministic (a race or unordered atomics)" in racy["reason"]
           and "graph freezes" not in racy["reason"], result_line(racy))
    racy_numerics = get("verify.rowsum.bad_rowsum_racy.float32")
    expect("racy kernel: numerics fails", racy_numerics is not None and racy_numerics["outcome"] == "failed",
           result_line(racy_numerics))
    atomic = get("verify.rowsum.good_rowsum_atomic.float32.runtime")
    print(f"INFO  atomicAdd row sum, runtime (rounding-order nondeterminism): {result_line(atomic)[:400]}")


def check_neighbour(work: Path) -> None:
    crowded = results(work / "workspace_crowded.json").get("verify.scale2.workspace_8gib.float32")
    expect("8 GiB workspace beside a non-opgate process filling the GPU: could not judge (error), not failed",
           crowded is not None and crowded["outcome"] == "error" and crowded["reason"].startswith("could not judge")
           and "another process holds" in crowded["reason"], result_line(crowded))
    alone = results(work / "workspace_alone.json").get("verify.scale2.workspace_8gib.float32")
    expect("8 GiB workspace alone on the GPU: passes", alone is not None and alone["outcome"] == "passed",
           result_line(alone))


def check_concurrent(work: Path) -> None:
    waited = 0
    for round_dir in sorted(work.glob("round*")):
        numerics = results(round_dir / "numerics.json")
        recovery = results(round_dir / "recovery.json")
        expect(f"{round_dir.name}: both runs wrote a report", bool(numerics) and bool(recovery),
               f"{len(numerics)} and {len(recovery)} results")
        oom = [r for r in numerics.values() if "out of memory" in json.dumps(r.get("extra", {}).get("cases", []))
               or "out of memory" in r["reason"]]
        expect(f"{round_dir.name}: no numerics result mentions out of memory", not oom,
               "; ".join(result_line(r) for r in oom) or f"{len(numerics)} results, none")
        bad = [r for r in numerics.values() if r["outcome"] in ("failed", "error")]
        expect(f"{round_dir.name}: no numerics result failed or errored", not bad,
               "; ".join(result_line(r) for r in bad) or "none")
        rec = [r for r in recovery.values() if r["check_id"].endswith(".recovery")]
        expect(f"{round_dir.name}: the recovery checks ran and passed",
               bool(rec) and all(r["outcome"] == "passed" for r in rec), "; ".join(result_line(r) for r in rec))
        for report in (numerics, recovery):
            for r in report.values():
                for figure in r.get("figures", []):
                    if figure.get("name", "").startswith("waited for the GPU"):
                        waited += 1
                        print(f"INFO  {round_dir.name} {r['check_id']}: waited {figure.get('value')} s for the GPU")
    print(f"INFO  results that waited for the other run: {waited} (0 means the runs never overlapped on the GPU)")


def main() -> int:
    work = Path(sys.argv[1])
    check_streams(work)
    check_neighbour(work)
    check_concurrent(work)
    print(f"{len(WRONG)} expectation(s) not met" + (f": {', '.join(WRONG)}" if WRONG else ""))
    return 1 if WRONG else 0


if __name__ == "__main__":
    sys.exit(main())
