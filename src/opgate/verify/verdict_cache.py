"""Verdicts of spec files that did not change, reused: a re-run of an unchanged library judges nothing again.

A spec file's results are stored after a run that judged all of it, and reused by a later run whose key for that
file is the same. The key is everything a verdict can depend on, read without importing the spec:

- the spec file's bytes and those of every module inside its repository it imports (statically, as
  `--changed-since` follows them: verify/spec_files.local_imports);
- every installed distribution and its version (a new fla-core, torch or Triton misses), Python's version and the
  platform;
- opgate's own version and sources (a new judging rule misses);
- the GPUs NVML sees (name, UUID, memory) and the driver's version, or that there is none;
- the environment variables that steer opgate, the kernels' compilers and CUDA (OPGATE_*, TRITON_*, CUDA_*, ...);
- the options that change what is judged (budget, seed, dtypes, stages, sanitizer tools, timeouts, time budget,
  extras, shrinking); not --jobs or the output files.

What is stored: the file's results (calibration and every check) and its operators' case counts, only when every
task of the file ran and none ended in `error`: a could-not-judge result may not recur, so it is judged again. A
failure is stored like a pass: nothing changed, so it still fails (exit 1). An interrupted run (Ctrl-C, a CI job's
time limit) stores the files it judged wholly before the interrupt (every operator calibrated, every task finished:
PreparedRun.complete_files), so the next run judges only the rest.

A reused result carries extra["cached_from"] (when and by which run it was judged) and the report's
extra["verdict_cache"] lists the reused and stored files; the terminal says how many. What the static key cannot
see: a module imported dynamically (importlib, a path computed at run time), a data file the spec reads, a
library edited in place without a version change, the GPU's clocks and load (timings are reused as measured).
`--no-cache` (OPGATE_CACHE=0) judges everything again; OPGATE_VERDICT_CACHE=0 too, but keeps the bound terms'
cache. The folder is the bound cache's ($OPGATE_CACHE_DIR, ...).
A folder that cannot be written or an entry that cannot be read is a miss, never an error: the cache only saves time.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
import sys
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from opgate.model.results import CheckResult, Outcome

if TYPE_CHECKING:
    from opgate.verify.engine import VerifyRequest

CACHE_FORMAT = 1
FOLDER = "verdicts"
VERDICT_CACHE_ENV = "OPGATE_VERDICT_CACHE"  # "0": judge every file again, keep the bound cache
# Environment variables whose prefix marks them as steering opgate, the kernels' compilers or the GPU stack.
ENV_PREFIXES = ("OPGATE_", "TRITON_", "CUDA_", "CUBLAS", "CUDNN", "NCCL_", "TORCH", "PYTORCH_", "NVIDIA_", "LD_",
                "OMP_", "MKL_", "GEMS_", "FLA_")
# ... except these, which only say where things go, or how many processes and threads do the same work and when (as
# --jobs)
ENV_IGNORED = ("OPGATE_CACHE_DIR", "OPGATE_CACHE", "OPGATE_VERDICT_CACHE", "TRITON_CACHE_DIR",
               "TORCHINDUCTOR_CACHE_DIR", "OPGATE_CALIBRATION_PROCESSES", "OPGATE_CALIBRATION_THREADS",
               "OPGATE_SPARE_WORKERS", "OPGATE_COMPILE_AHEAD", "OPGATE_WORKER_MEMORY_LOG", "OPGATE_PLAN_ORDER",
               "OPGATE_CALIBRATION_APART_PROCESSES", "OPGATE_COMPILE_AHEAD_ORDER",
               "OPGATE_WARM_UP_SLOT_FLOOR", "OPGATE_COMPILE_AHEAD_SLOT_FLOOR")


@dataclass(frozen=True)
class CachedFile:
    """One spec file's stored verdicts (`partial`: of the checks an earlier run finished, verify/resumed.py)."""

    results: tuple[CheckResult, ...]
    case_counts: Mapping[str, int]
    judged_at: str
    settled: tuple[str, ...] = ()  # a partial entry's operators whose calibration and checks all finished
    partial: bool = False
    settled_dtypes: Mapping[str, tuple[str, ...]] = dataclass_field(default_factory=dict)  # ... and operator x dtypes


def _digest_files(digest: Any, paths: Sequence[Path], root: Path | None = None) -> None:
    for path in paths:
        name = str(path.relative_to(root)) if root is not None else path.name
        digest.update(name.encode() + b"\0")
        try:
            digest.update(path.read_bytes())
        except OSError as exc:  # unreadable: keyed by the reason, so it misses once it can be read
            digest.update(f"unreadable: {exc}".encode())
        digest.update(b"\0")


@lru_cache(maxsize=1)
def opgate_digest() -> str:
    """opgate's version and every source file of the package: any change to opgate judges everything again."""
    from opgate import __version__

    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256(__version__.encode())
    _digest_files(digest, sorted(package.rglob("*.py")), package)
    return digest.hexdigest()


@lru_cache(maxsize=1)
def installed_distributions() -> tuple[str, ...]:
    """`name==version` of every installed distribution, sorted (what the spec's libraries and their kernels are);
    an editable install (pip install -e) also by its source files' sizes and times, since its version stays the same
    while its kernels are edited."""
    from importlib import metadata

    found = set()
    for dist in metadata.distributions():
        entry = f"{(dist.metadata['Name'] or '?').lower()}=={dist.version}"
        source = _editable_source(dist)
        if source is not None and entry.split("==")[0] != "opgate":  # opgate: opgate_digest() reads its sources
            entry += f" editable {source} {_tree_stamp(source)}"
        found.add(entry)
    return tuple(sorted(found))


def _editable_source(dist: Any) -> Path | None:
    """The project folder of an editable install (PEP 610's direct_url.json), else None."""
    try:
        info = json.loads(dist.read_text("direct_url.json") or "{}")
    except (ValueError, OSError):
        return None
    url = str(info.get("url", ""))
    if not (info.get("dir_info") or {}).get("editable") or not url.startswith("file://"):
        return None
    from urllib.parse import unquote, urlparse

    return Path(unquote(urlparse(url).path))


def _tree_stamp(folder: Path) -> str:
    """A digest of every Python source's path, size and modification time below `folder` (not its bytes: a big
    project's tree is stat()ed in milliseconds, read in seconds)."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*.py")):
        if any(part.startswith(".") or part in ("__pycache__", "build", "node_modules") for part in
               path.relative_to(folder).parts[:-1]):
            continue
        try:
            stat = path.stat()
        except OSError:
            continue
        digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    return digest.hexdigest()[:16]


def gpu_facts() -> list[str]:
    """Each GPU NVML sees (name, UUID, memory) and the driver's version; one line saying why when there is none."""
    from opgate.probes.nvml import NvmlUnavailable, query

    try:
        from opgate.probes.nvml import nvml_session

        with nvml_session() as nv:
            facts = [f"driver {query(nv.nvmlSystemGetDriverVersion)}"]
            for index in range(int(nv.nvmlDeviceGetCount())):
                handle = nv.nvmlDeviceGetHandleByIndex(index)
                memory = query(nv.nvmlDeviceGetMemoryInfo, handle)
                facts.append(f"{index}: {query(nv.nvmlDeviceGetName, handle)} {query(nv.nvmlDeviceGetUUID, handle)} "
                             f"{getattr(memory, 'total', '?')} B")
            return facts
    except NvmlUnavailable as exc:
        return [f"no GPU: {exc}"]
    except Exception as exc:  # an NVML that starts but fails a query: keyed by it, judged again when it works
        return [f"NVML failed: {type(exc).__name__}: {exc}"]


def steering_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    return {name: value for name, value in sorted(environ.items())
            if name.startswith(ENV_PREFIXES) and name not in ENV_IGNORED}


# VerifyRequest fields that do not change what is judged: which files (keyed one by one), how many at once, where
# artefacts go. Every other field, a new one included, is part of the key.
NOT_JUDGING_FIELDS = ("spec_file", "spec_files", "jobs", "out_dir")


def judged_options(request: "VerifyRequest") -> dict[str, Any]:
    """The request's options that change what is judged (every field but NOT_JUDGING_FIELDS)."""
    import dataclasses

    return {f.name: getattr(request, f.name) for f in dataclasses.fields(request) if f.name not in NOT_JUDGING_FIELDS}


def _repository_root(spec: Path) -> Path:
    """The git work tree holding the spec, else the spec's own folder (its imports are followed from there)."""
    from opgate.model.errors import InputError
    from opgate.verify.spec_files import Repository

    try:
        return Repository.of(spec).root
    except InputError:
        return spec.parent


class VerdictCache:
    """The stored verdicts of one run's spec files (see the module's docstring)."""

    def __init__(self, root: Path, options: Mapping[str, Any], environment: Mapping[str, Any]) -> None:
        self.root = root
        gpus = list(environment.get("gpus", []))
        self.gpu_present = len(gpus) > 1  # a driver line and at least one device (gpu_facts)
        self._common = json.dumps({"format": CACHE_FORMAT, "options": options, **environment}, sort_keys=True,
                                  default=str)
        self._keys: dict[Path, str] = {}

    @classmethod
    def for_request(cls, request: "VerifyRequest") -> "VerdictCache | None":
        """The cache for this run, or None: the cache is off (--no-cache, OPGATE_CACHE=0), or the run replays one
        case or picks operators or implementations by name (those judge a part of a file: always afresh)."""
        from opgate.verify.bounds_cache import cache_root

        root = cache_root()
        off = os.environ.get(VERDICT_CACHE_ENV, "1").strip().lower() in ("0", "off", "false", "no")
        if root is None or off or request.replay or request.ops or request.impls:
            return None
        environment = {"opgate": opgate_digest(), "python": sys.version, "platform": platform.platform(),
                       "distributions": installed_distributions(), "gpus": gpu_facts(),
                       "environment": steering_environment()}
        return cls(root / FOLDER, judged_options(request), environment)

    def key(self, spec: Path) -> str:
        spec = Path(spec).resolve()
        if spec not in self._keys:
            from opgate.verify.spec_files import local_imports

            root = _repository_root(spec)
            digest = hashlib.sha256(self._common.encode())
            digest.update(str(spec).encode() + b"\0")
            _digest_files(digest, [spec])
            imported = sorted(local_imports(spec, root))
            digest.update(str(len(imported)).encode())
            _digest_files(digest, imported, None)
            digest.update("\0".join(str(p) for p in imported).encode())
            self._keys[spec] = digest.hexdigest()
        return self._keys[spec]

    def _entry(self, spec: Path, partial: bool = False) -> Path:
        key = self.key(spec)
        return self.root / key[:2] / (f"{key}.partial.json" if partial else f"{key}.json")

    def load(self, spec: Path, partial: bool = False) -> CachedFile | None:
        """The file's stored verdicts (`partial`: its partial entry), or None (not stored, unreadable, or from
        another format)."""
        try:
            data = json.loads(self._entry(spec, partial).read_text())
            if data.get("format") != CACHE_FORMAT or bool(data.get("partial")) != partial:
                return None
            results = tuple(CheckResult.from_dict(r) for r in data["results"])
            return CachedFile(results, dict(data.get("case_counts", {})), str(data["judged_at"]),
                              tuple(str(op) for op in data.get("settled", ())), partial,
                              {str(op): tuple(str(d) for d in dtypes)
                               for op, dtypes in dict(data.get("settled_dtypes", {})).items()})
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def store(self, spec: Path, results: Sequence[CheckResult], case_counts: Mapping[str, int],
              judged_at: str) -> bool:
        """Store a wholly judged file's verdicts (none an `error`), dropping its partial entry; whether it was
        stored."""
        if not results or any(r.outcome is Outcome.ERROR for r in results):
            return False
        stored = self._write(spec, {"results": [r.to_dict() for r in results], "case_counts": dict(case_counts),
                                    "judged_at": judged_at})
        if stored:
            self._entry(spec, partial=True).unlink(missing_ok=True)
        return stored

    def store_partial(self, spec: Path, results: Sequence[CheckResult], settled: Sequence[str],
                      case_counts: Mapping[str, int], judged_at: str,
                      settled_dtypes: Mapping[str, Sequence[str]] | None = None) -> bool:
        """Store the finished checks of a file judged in part (verify/resumed.py: `results` without an `error`,
        `settled` operators and operator x dtypes); whether it was stored."""
        if not results or any(r.outcome is Outcome.ERROR for r in results):
            return False
        return self._write(spec, {"partial": True, "results": [r.to_dict() for r in results],
                                  "settled": sorted(settled), "case_counts": dict(case_counts),
                                  "settled_dtypes": {op: sorted(d) for op, d in (settled_dtypes or {}).items()},
                                  "judged_at": judged_at})

    def _write(self, spec: Path, body: Mapping[str, Any]) -> bool:
        from opgate.engine.atomic import write_atomically

        document = {"format": CACHE_FORMAT, "spec_file": str(Path(spec).resolve()), **body}
        try:
            entry = self._entry(spec, partial=bool(body.get("partial")))
            entry.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(entry, json.dumps(document))
            return True
        except OSError:
            return False


def mark_reused(result: CheckResult, judged_at: str) -> CheckResult:
    """A stored result as this run reports it: saying when it was judged (a result stored again after a run that
    reused it keeps the time it was judged)."""
    import dataclasses

    extra = result.extra or {}
    return dataclasses.replace(result, extra={**extra, "cached_from": extra.get("cached_from") or judged_at})


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
