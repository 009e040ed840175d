"""Run opgate verify on the truth corpus and compare every verdict with its manifest row.

    PYTHONPATH=src python scripts/truth_corpus.py [--device cpu|gpu] [--budget quick] [--only SUBSTR] [--ci] [--strict]
        [--corpus DIR]

For every spec file of tests/data/verify/truth_corpus/manifest.toml that runs on the chosen device, it runs
`python -m opgate verify FILE --budget B --json J --no-extras --stages S` in a subprocess (PYTHONPATH=src;
TRITON_INTERPRET=1 on the CPU), reads the JSON report (each result's outcome, extra["failure_class"],
extra["deviations"]) and prints, per backend: correct kernels / false alarms / warned with the right class, and
buggy kernels / caught / caught with the right class / missed; then every disagreement with the result's reason.

--ci keeps the rows marked `ci = true` in the manifest: a subset with every bug class and every kind of correct
twin that CI runs by default (tests/verify/test_truth_corpus.py); the whole corpus stays opt-in.

--one-run verifies every spec file in a single `opgate verify FILE... ` run (one process, one report, one worker
pool and calibration queue) instead of one run per file: on the 2-core CI machine the --ci subset takes 43 s this
way against 56 s as 8 runs two at a time (each run pays its own interpreter, torch import and warm-up).

--corpus DIR runs another corpus in the same format (a folder with manifest.toml and the spec files it names), e.g.
tests/data/verify/library_corpus (real library kernels; run it with the Python of a venv that has the libraries).

An implementation's verdict is the worst over its dtypes (failed > warned > passed). It exits 0 whatever it finds (it
is a measurement); --strict exits 1 on any disagreement. --summary PATH writes every row's verdict as JSON (what
tests/verify/test_truth_corpus.py reads).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "data" / "verify" / "truth_corpus"
MANIFEST = CORPUS / "manifest.toml"
# opgate's own vocabulary (a copy here fell behind when layout_limit was added, and the library manifest, which
# uses it, no longer loaded)
sys.path.insert(0, str(REPO / "src"))
from opgate.verify.deviations import DEVIATION_CLASSES, FAILURE_CLASSES  # noqa: E402
NEEDS = ("gradients", "hits", "derived_dims", "zero_sizes", "nan_policy", "peaked", "mixed", "gaming")
OUTCOME_RANK = {"skipped": 0, "passed": 1, "warned": 2, "failed": 3, "error": 4}


@dataclass(frozen=True)
class Row:
    """One manifest row: what the verdict on (file, op, impl) must be."""

    file: str
    op: str
    impl: str
    expect: str
    why: str
    needs: tuple[str, ...]
    device: str
    expect_gpu: str | None = None
    accept: tuple[str, ...] = ()
    stages: str = "numerics"
    ci: bool = False  # in the subset CI runs by default (--ci)

    def expected(self, device: str) -> str:
        return self.expect_gpu if device == "gpu" and self.expect_gpu else self.expect

    def is_correct_kernel(self, device: str) -> bool:
        return not self.expected(device).startswith("fail")


@dataclass
class Observed:
    """What opgate said about one implementation, over all its dtypes."""

    outcome: str  # passed / warned / failed / error / skipped / missing
    failure_classes: list[str] = field(default_factory=list)
    deviation_classes: list[str] = field(default_factory=list)
    backend: str = "?"
    reason: str = ""

    def verdicts(self) -> list[str]:
        """Every manifest-style verdict this observation satisfies."""
        if self.outcome == "passed":
            return ["pass"]
        if self.outcome == "warned":
            return [f"warn:{c}" for c in self.deviation_classes] or ["warn:?"]
        if self.outcome == "failed":
            return [f"fail:{c}" for c in self.failure_classes] or ["fail:?"]
        if self.outcome == "error":  # opgate's own error; a crash of the implementation must be a failure
            return [f"error:{c}" for c in self.failure_classes] or ["error"]
        return [self.outcome]

    def label(self) -> str:
        return "|".join(self.verdicts())


def load_manifest(path: Path = MANIFEST) -> list[Row]:
    try:
        import tomllib  # Python >= 3.11
    except ImportError:  # the GPU host may run an older Python
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ImportError:
            return _parse_simple_toml(path)
    with path.open("rb") as fh:
        data = tomllib.load(fh)
    return [_row(entry) for entry in data["impl"]]


def _parse_simple_toml(path: Path) -> list[Row]:
    """The manifest's subset of TOML ([[impl]] tables of strings and string lists), for Pythons without tomllib."""
    entries: list[dict[str, Any]] = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line == "[[impl]]":
            entries.append({})
            continue
        key, _, value = line.partition("=")
        entries[-1][key.strip()] = json.loads(value.strip())
    return [_row(entry) for entry in entries]


def _row(entry: dict[str, Any]) -> Row:
    for key in ("file", "op", "impl", "expect", "why", "needs", "device"):
        if key not in entry:
            raise SystemExit(f"manifest row {entry} lacks {key!r}")
    unknown = [n for n in entry["needs"] if n not in NEEDS]
    if unknown:
        raise SystemExit(f"manifest row {entry['file']}:{entry['impl']}: unknown needs {unknown}")
    for verdict in [entry["expect"], entry.get("expect_gpu") or "pass", *entry.get("accept", [])]:
        kind, _, cls = verdict.partition(":")
        ok = (kind == "pass" and not cls) or (kind == "warn" and cls in DEVIATION_CLASSES) or (
            kind == "fail" and cls in FAILURE_CLASSES)
        if not ok:
            raise SystemExit(f"manifest row {entry['file']}:{entry['impl']}: {verdict!r} is not a verdict")
    return Row(file=entry["file"], op=entry["op"], impl=entry["impl"], expect=entry["expect"], why=entry["why"],
               needs=tuple(entry["needs"]), device=entry["device"], expect_gpu=entry.get("expect_gpu"),
               accept=tuple(entry.get("accept", ())), stages=entry.get("stages", "numerics"),
               ci=bool(entry.get("ci", False)))


@dataclass
class FileRun:
    file: str
    returncode: int | None
    duration_s: float
    results: list[dict[str, Any]]
    problem: str = ""


def _verify_command(paths: list[Path], rows: list[Row], args: argparse.Namespace, json_path: Path,
                    out_dir: Path) -> list[str]:
    """`opgate verify` of `paths` with the stages and implementations `rows` need."""
    order = ["numerics", "runtime", "sanitizer", "recovery"]
    wanted = {s for r in rows for s in r.stages.split(",")} | {"numerics"}
    stages = ",".join(sorted(wanted, key=lambda s: order.index(s) if s in order else len(order)))
    cmd = [sys.executable, "-m", "opgate", "verify", *map(str, paths), "--budget", args.budget, "--json",
           str(json_path), "--no-extras", "--stages", stages, "--jobs", str(args.jobs), "--out", str(out_dir)]
    if "sanitizer" in stages:
        cmd += ["--sanitizer-tools", "memcheck,racecheck"]
    if args.only or args.ci:
        for impl in sorted({r.impl for r in rows}):
            cmd += ["--impl", impl]
    return cmd


def _run_verify(cmd: list[str], args: argparse.Namespace, json_path: Path, timeout: float
                ) -> tuple[int | None, float, list[dict[str, Any]], str]:
    """(exit code or None on timeout, seconds, the report's results, what went wrong or "")."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(args.src), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if args.device == "cpu":
        env["TRITON_INTERPRET"] = "1"
        env.setdefault("CUDA_VISIBLE_DEVICES", "")
    start = time.monotonic()
    # Its own session, so that a timeout ends opgate's worker processes too (they hold the output pipes open).
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        return None, time.monotonic() - start, [], f"opgate verify ran past {timeout:.0f} s"
    duration = time.monotonic() - start
    if not json_path.is_file():
        tail = (stderr or stdout or "").strip().splitlines()[-3:]
        return proc.returncode, duration, [], f"exit {proc.returncode}, no JSON: {' / '.join(tail)}"
    return proc.returncode, duration, list(json.loads(json_path.read_text()).get("results", [])), ""


def run_file(file: str, rows: list[Row], args: argparse.Namespace, json_dir: Path) -> FileRun:
    corpus = getattr(args, "corpus", None) or CORPUS
    json_path = json_dir / (file.replace("/", "__") + ".json")
    if args.reuse and json_path.is_file():
        report = json.loads(json_path.read_text())
        return FileRun(file, report.get("exit_code"), float(report.get("duration_s") or 0.0),
                       list(report.get("results", [])))
    cmd = _verify_command([corpus / file], rows, args, json_path, json_dir / (file.replace("/", "__") + ".out"))
    return FileRun(file, *_run_verify(cmd, args, json_path, args.timeout))


def run_files_at_once(by_file: dict[str, list[Row]], args: argparse.Namespace, json_dir: Path) -> dict[str, FileRun]:
    """--one-run: every spec file in one `opgate verify` run; each file's FileRun holds the results of its own
    spec file (the report's extra.spec_file) and shares the run's exit code and duration."""
    corpus = getattr(args, "corpus", None) or CORPUS
    rows = [r for file_rows in by_file.values() for r in file_rows]
    json_path = json_dir / "all_files.json"
    cmd = _verify_command([corpus / file for file in by_file], rows, args, json_path, json_dir / "all_files.out")
    returncode, duration, results, problem = _run_verify(cmd, args, json_path, args.timeout * len(by_file))

    def spec_of(result: dict[str, Any]) -> Path | None:
        spec = (result.get("extra") or {}).get("spec_file")
        return (REPO / spec).resolve() if spec else None

    return {file: FileRun(file, returncode, duration,
                          [r for r in results if spec_of(r) == (corpus / file).resolve()], problem)
            for file in by_file}


def observe(run: FileRun, row: Row) -> Observed:
    mine = [r for r in run.results
            if (r.get("extra") or {}).get("implementation") == row.impl
            and (r.get("extra") or {}).get("op") in (row.op, f"{row.op}.grad")]  # the derived gradient operator too
    if not mine:
        return Observed("missing", reason=run.problem or "no result for this implementation in the report")
    worst = max(mine, key=lambda r: OUTCOME_RANK.get(r["outcome"], 0))
    failure = sorted({str(r["extra"].get("failure_class")) for r in mine
                      if r["outcome"] in ("failed", "error") and r["extra"].get("failure_class")})
    deviations = sorted({str(d.get("class")) for r in mine for d in (r["extra"].get("deviations") or [])
                         if isinstance(d, dict) and d.get("class")})
    return Observed(worst["outcome"], failure, deviations, str(worst["extra"].get("backend", "?")),
                    " ".join(str(worst.get("reason", "")).split())[:300])


def agrees(row: Row, seen: Observed, device: str) -> bool:
    return bool({row.expected(device), *row.accept}.intersection(seen.verdicts()))


def tabulate(records: list[dict[str, Any]], device: str) -> str:
    backends = sorted({r["backend"] for r in records})
    header = ("| backend | correct kernels | false alarms | warned, right class | buggy kernels | caught | "
              "caught, right class | missed | not run |")
    lines = [header, "|" + "---|" * 9]
    for backend in backends + ["all"]:
        mine = [r for r in records if backend in ("all", r["backend"])]
        good = [r for r in mine if r["correct_kernel"]]
        bad = [r for r in mine if not r["correct_kernel"]]
        ran = lambda rs: [r for r in rs if r["outcome"] not in ("missing", "skipped")]  # noqa: E731
        false_alarms = sum(r["outcome"] in ("failed", "error") for r in ran(good))
        warned_right = sum(r["expected"].startswith("warn") and r["agrees"] for r in ran(good))
        warned_expected = sum(r["expected"].startswith("warn") for r in good)
        caught = sum(r["outcome"] in ("failed", "error") for r in ran(bad))
        caught_right = sum(r["agrees"] for r in ran(bad))
        missed = sum(r["outcome"] in ("passed", "warned") for r in ran(bad))
        not_run = len(mine) - len(ran(mine))
        lines.append(f"| {backend} | {len(good)} | {false_alarms} | {warned_right}/{warned_expected} | {len(bad)} | "
                     f"{caught} | {caught_right} | {missed} | {not_run} |")
    return "\n".join(lines)


def tabulate_by_class(records: list[dict[str, Any]]) -> str:
    """Per expected verdict (pass, warn:<deviation>, fail:<class>): how many, how many got it, what the rest got."""
    header = "| expected verdict | implementations | right | other verdicts seen |"
    lines = [header, "|---|---|---|---|"]
    for expected in sorted({r["expected"] for r in records}, key=lambda e: (e.split(":")[0] != "pass", e)):
        mine = [r for r in records if r["expected"] == expected]
        right = sum(r["agrees"] for r in mine)
        others = sorted({r["observed"] for r in mine if not r["agrees"]})
        lines.append(f"| {expected} | {len(mine)} | {right} | {', '.join(others) or '-'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--corpus", type=Path, default=CORPUS, help="the corpus folder: its manifest.toml and spec "
                        "files (default: the truth corpus)")
    parser.add_argument("--budget", choices=("quick", "standard", "thorough"), default="quick")
    parser.add_argument("--only", default="", help="only rows whose file, op or implementation contains this")
    parser.add_argument("--ci", action="store_true", help="only the rows marked ci = true (every bug class and "
                        "correct-twin kind, within CI's time)")
    parser.add_argument("--strict", action="store_true", help="exit 1 on any disagreement")
    parser.add_argument("--jobs", type=int, default=2, help="opgate verify --jobs (processes per spec file)")
    parser.add_argument("--parallel", type=int, default=1, help="spec files verified at once")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per spec file")
    parser.add_argument("--deadline", type=float, default=0.0, help="seconds after which no new spec file starts "
                        "(0: none); the rest are counted as not run")
    parser.add_argument("--with-cpu-corpus", action="store_true", help="with --device gpu: also run the rows "
                        "marked device='cpu' (the Triton kernels, compiled for the GPU)")
    parser.add_argument("--json-dir", type=Path, default=None, help="keep opgate's JSON reports here")
    parser.add_argument("--summary", type=Path, default=None, help="write every row's verdict here as JSON")
    parser.add_argument("--src", type=Path, default=REPO / "src", help="the opgate sources to judge with "
                        "(default: this checkout's src; e.g. another worktree's, to compare versions)")
    parser.add_argument("--one-run", action="store_true", help="verify every spec file in one opgate verify run "
                        "(one report, one worker pool) instead of one run per file; --parallel and --deadline do "
                        "not apply")
    parser.add_argument("--reuse", action="store_true", help="read the reports already in --json-dir instead of "
                        "verifying those files again (re-run one file by deleting its report)")
    args = parser.parse_args(argv)

    args.corpus = args.corpus.resolve()
    rows = load_manifest(args.corpus / "manifest.toml")
    if args.device == "cpu":
        rows = [r for r in rows if r.device == "cpu"]
    elif not args.with_cpu_corpus:
        rows = [r for r in rows if r.device == "gpu"]
    if args.only:
        rows = [r for r in rows if args.only in r.file or args.only in r.op or args.only in r.impl]
    if args.ci:
        rows = [r for r in rows if r.ci]
    if not rows:
        print(f"no manifest row matches --device {args.device} --only {args.only!r}")
        return 0
    by_file: dict[str, list[Row]] = {}
    for row in rows:
        by_file.setdefault(row.file, []).append(row)

    json_dir = args.json_dir or Path(tempfile.mkdtemp(prefix="opgate-truth-corpus-"))
    json_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    runs: dict[str, FileRun] = {}

    def one(file: str) -> FileRun:
        if args.deadline and time.monotonic() - started > args.deadline:
            return FileRun(file, None, 0.0, [], f"not started: past the --deadline of {args.deadline:.0f} s")
        run = run_file(file, by_file[file], args, json_dir)
        print(f"[{time.monotonic() - started:6.0f}s] {file}: exit {run.returncode}, {run.duration_s:.0f} s"
              + (f" ({run.problem})" if run.problem else ""), flush=True)
        return run

    if args.one_run:
        runs = run_files_at_once(by_file, args, json_dir)
        print(f"[{time.monotonic() - started:6.0f}s] {len(by_file)} spec files in one run: "
              f"exit {next(iter(runs.values())).returncode}", flush=True)
    else:
        with ThreadPoolExecutor(max_workers=max(1, args.parallel)) as pool:
            for file, run in zip(by_file, pool.map(one, list(by_file))):
                runs[file] = run

    records = []
    for row in rows:
        seen = observe(runs[row.file], row)
        records.append({**asdict(row), "expected": row.expected(args.device), "outcome": seen.outcome,
                        "observed": seen.label(), "backend": seen.backend if seen.backend != "?" else "not run",
                        "correct_kernel": row.is_correct_kernel(args.device),
                        "agrees": agrees(row, seen, args.device), "reason": seen.reason})
    total_s = time.monotonic() - started

    title = "Truth corpus" if args.corpus == CORPUS.resolve() else f"Corpus {args.corpus.name}"
    print(f"\n## {title}, device {args.device}, budget {args.budget}: {len(rows)} implementations in "
          f"{len(by_file)} spec files, {total_s:.0f} s\n")
    print(tabulate(records, args.device))
    print(f"\n### By expected verdict\n\n{tabulate_by_class(records)}")
    disagreements = [r for r in records if not r["agrees"]]
    print(f"\n### Disagreements ({len(disagreements)})\n")
    for r in disagreements:
        needs = f" needs={','.join(r['needs'])}" if r["needs"] else ""
        print(f"- {r['file']} {r['op']}/{r['impl']}: expected {r['expected']}, got {r['observed']}{needs} -- "
              f"{r['reason'] or '(no reason)'}")
    print("\nPer spec file: " + ", ".join(f"{f} {run.duration_s:.0f} s" for f, run in runs.items()))
    if args.summary:
        args.summary.parent.mkdir(parents=True, exist_ok=True)
        args.summary.write_text(json.dumps({"device": args.device, "budget": args.budget, "duration_s": total_s,
                                            "rows": records}, indent=2) + "\n")
    return 1 if args.strict and disagreements else 0


if __name__ == "__main__":
    raise SystemExit(main())
