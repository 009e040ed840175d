"""Run Python code under NVIDIA compute-sanitizer in a child process and turn its report into findings.

Tools: memcheck, racecheck, initcheck, synccheck. The child is started as

    compute-sanitizer --tool T --print-limit N --error-exitcode 86 --log-file LOG
                      --target-processes all [tool options] python ...

and the log (the sanitizer's own output, apart from the program's) is parsed into `SanitizerFinding`s:
kind, severity, kernel, source location, address, thread and block. The parser follows the report format
documented in the Compute Sanitizer user guide (https://docs.nvidia.com/compute-sanitizer/ComputeSanitizer/)
and needs no GPU; tests feed it recorded text.

`opgate verify --stages sanitizer` runs its children through `run_under_sanitizer`; the planted-bug suite
and the standalone runner live in tests/data/gpu/gpu_sanitizer_tool.py.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import opgate

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
ERROR_EXITCODE = 86
DEFAULT_PRINT_LIMIT = 50
SANITIZER_ENV = "OPGATE_COMPUTE_SANITIZER"


class SanitizerNotFound(Exception):
    """compute-sanitizer is not installed where opgate looks; the message says where it looked."""


# ------------------------------------------------------------------------------------------ parsing
@dataclass(frozen=True)
class SanitizerFinding:
    tool: str
    kind: str  # invalid_access, uninitialized_read, race, hazard, barrier_error, stream_ordered_race,
    #            api_error, leak, other
    severity: str  # "error" or "warning"
    message: str  # the report's first line
    kernel: str | None = None  # function name without parameters, e.g. "planted_oob_write"
    function: str | None = None  # as reported, e.g. "scaleArray(float *, float)"
    pc_offset: str | None = None
    file: str | None = None
    line: int | None = None
    address: str | None = None
    address_note: str = ""  # "is out of bounds", "is misaligned", ...
    access: str | None = None  # read / write / atomic
    size_bytes: int | None = None
    memory_space: str | None = None  # __global__, __shared__, __local__
    thread: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    hazard_count: int | None = None
    cuda_error: int | None = None  # api_error: the CUDA error code
    api_call: str | None = None
    details: tuple[str, ...] = ()
    # Python frames of the host backtrace ("fn in file.py:line", innermost first), when the sanitizer saved
    # one: the line of the user's code that launched the kernel.
    python_frames: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {key: (list(value) if isinstance(value, tuple) else value)
                for key, value in self.__dict__.items()}


@dataclass
class _Draft:
    tool: str
    kind: str
    severity: str
    message: str
    fields: dict[str, Any] = field(default_factory=dict)
    details: list[str] = field(default_factory=list)

    python_frames: list[str] = field(default_factory=list)

    def freeze(self) -> SanitizerFinding:
        return SanitizerFinding(tool=self.tool, kind=self.kind, severity=self.severity, message=self.message,
                                details=tuple(self.details), python_frames=tuple(self.python_frames),
                                **self.fields)


@dataclass(frozen=True)
class SanitizerReport:
    tool: str
    findings: tuple[SanitizerFinding, ...]
    error_summary: int | None  # "ERROR SUMMARY: N errors"
    racecheck_summary: tuple[int, int, int] | None  # (hazards displayed, errors, warnings)
    lines: int

    @property
    def errors(self) -> tuple[SanitizerFinding, ...]:
        return tuple(f for f in self.findings if f.severity == "error")

    @property
    def reported_error_count(self) -> int:
        """What the sanitizer itself counted (summary lines), falling back to parsed error findings."""
        counted = [n for n in (self.error_summary,
                               self.racecheck_summary[1] if self.racecheck_summary else None) if n is not None]
        return max(counted) if counted else len(self.errors)


_PREFIX = re.compile(r"^=+(?: |$)")
_ACCESS = re.compile(r"^Invalid (?P<space>__\w+__|\w+) (?P<access>read|write|atomic)\w*"
                     r"(?: of size (?P<size>[\d,]+) bytes?)?", re.IGNORECASE)
_UNINIT = re.compile(r"^Uninitialized (?P<space>__\w+__) memory (?P<access>read|access)\w*"
                     r"(?: of size (?P<size>[\d,]+) bytes?)?", re.IGNORECASE)
_RACE = re.compile(r"^(?P<sev>Error|Warning|ERROR|WARNING): Race reported between (?P<a1>\w+) access at "
                   r"(?P<loc1>.+?)(?:\s+and (?P<a2>\w+) access at (?P<loc2>.+?))?"
                   r"(?:\s+\[(?P<hazards>[\d,]+) hazards?\])?\s*$")
_HAZARD = re.compile(r"^(?P<sev>Error|Warning|ERROR|WARNING): Potential (?P<type>RAW|WAR|WAW) hazard detected at "
                     r"(?P<space>__\w+__) (?P<addr>0x[0-9a-fA-F]+) in block \((?P<block>[\d, ]+)\)")
# Hardware exceptions memcheck reports per warp, e.g. "Warp illegal address" (seen on the H200 for a kernel
# reading memory another stream had already freed with cudaFreeAsync).
_WARP_EXCEPTION = re.compile(r"^Warp (?P<what>illegal address|out-of-range address|misaligned address|"
                             r"illegal instruction|invalid address space|invalid pc|hardware stack overflow)",
                             re.IGNORECASE)
_BARRIER = re.compile(r"^Barrier error detected\.?\s*(?P<what>.*)$", re.IGNORECASE)
_SYNC_OTHER = re.compile(r"^(?:Invalid arguments?|Invalid barrier|Illegal barrier)\b.*", re.IGNORECASE)
# cudaErrorMemoryAllocation, and the driver's CUDA_ERROR_OUT_OF_MEMORY, share code 2 (data/cuda_errors.toml)
OUT_OF_MEMORY_ERROR = 2
_API = re.compile(r"^Program hit (?P<name>\w+) \(error (?P<code>\d+)\) due to \"(?P<text>[^\"]*)\" on CUDA API "
                  r"call to (?P<call>\w+)")
_LEAK = re.compile(r"^Leaked (?P<size>[\d,]+) bytes at (?P<addr>0x[0-9a-fA-F]+)")
_ERROR_SUMMARY = re.compile(r"ERROR SUMMARY: (?P<n>[\d,]+) errors?")
_RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY: (?P<h>[\d,]+) hazards? displayed \((?P<e>[\d,]+) errors?, "
                           r"(?P<w>[\d,]+) warnings?\)")
_BY_THREAD = re.compile(r"^by thread \((?P<t>[\d, ]+)\) in block \((?P<b>[\d, ]+)\)")
_THREAD_AT = re.compile(r"^(?P<access>Read|Write) Thread \((?P<t>[\d, ]+)\) at (?P<loc>.+)$")
_AT = re.compile(r"^at (?P<loc>.+)$")
_ADDRESS = re.compile(r"^(?:Address|Access at|Access to|Access) (?P<addr>0x[0-9a-fA-F]+)\s*(?P<note>.*)$")
_AND_ACCESS = re.compile(r"^and (?P<a2>\w+) access at (?P<loc2>.+?)(?:\s+\[(?P<hazards>[\d,]+) hazards?\])?\s*$")
_PYTHON_FRAME = re.compile(r"^Host Frame: (?P<fn>[\w.<>]+) in (?P<file>\S+\.py):(?P<line>\d+)\s*$")
_STREAM_ORDERED = re.compile(r"use[- ]after[- ]free|use[- ]before[- ]alloc|stream[- ]ordered", re.IGNORECASE)
_NOISE = ("COMPUTE-SANITIZER", "Saved host backtrace", "Host Frame", "Device Frame", "LEAK SUMMARY",
          "Target application returned an error", "Tool (")


def _int(text: str | None) -> int | None:
    return int(text.replace(",", "")) if text else None


def _triple(text: str) -> tuple[int, int, int]:
    parts = [int(p) for p in text.replace(" ", "").split(",") if p]
    parts += [0] * (3 - len(parts))
    return parts[0], parts[1], parts[2]


def parse_location(text: str) -> dict[str, Any]:
    """Split a sanitizer location into function/kernel, pc offset, file and line.

    Handles the layouts compute-sanitizer has printed: `kern+0x70 in file.cu:12`,
    `kern(int *, int)+0x70 in /p/file.cu:12`, `kern+0x70`, `0x70 in kern`, and
    `0x278 in /p/file.cu:113:Kern(Matrix, Matrix)`.
    """
    out: dict[str, Any] = {}
    text = text.strip()
    head, sep, tail = text.rpartition(" in ")
    if not sep:
        head, tail = text, ""
    function: str | None = None
    match = re.match(r"^(?P<func>.*?)\+(?P<pc>0x[0-9a-fA-F]+)$", head)
    if match and match.group("func"):
        function, out["pc_offset"] = match.group("func"), match.group("pc")
    elif re.match(r"^0x[0-9a-fA-F]+$", head):
        out["pc_offset"] = head
    elif head:
        function = head
    if tail:
        file_line_func = re.match(r"^(?P<file>.+?):(?P<line>\d+):(?P<func>.+)$", tail)
        file_line = re.match(r"^(?P<file>.+?):(?P<line>\d+)$", tail)
        if file_line_func:
            out["file"], out["line"] = file_line_func.group("file"), int(file_line_func.group("line"))
            function = function or file_line_func.group("func")
        elif file_line:
            out["file"], out["line"] = file_line.group("file"), int(file_line.group("line"))
        elif function is None:
            function = tail
    if function:
        out["function"] = function.strip()
        out["kernel"] = kernel_name(function)
    return out


def kernel_name(function: str) -> str:
    """'void ns::kern<int>(int *, float)' -> 'ns::kern<int>'; 'kern' -> 'kern'."""
    name = function.strip()
    depth = 0
    start = 0
    for index, char in enumerate(name):
        if char == "<":
            depth += 1
        elif char == ">":
            depth -= 1
        elif char == " " and depth == 0:
            start = index + 1  # a return type or qualifier before the name
        elif char == "(" and depth == 0:  # the parameter list begins
            return name[start:index].strip() or name
    return name[start:].strip() or name


def _new_finding(tool: str, text: str) -> _Draft | None:
    """A report header line starts a finding; None for lines that are not findings."""
    if m := _ACCESS.match(text):
        kind = "stream_ordered_race" if _STREAM_ORDERED.search(text) else "invalid_access"
        return _Draft(tool, kind, "error", text, {"memory_space": m.group("space"),
                                                  "access": m.group("access").lower(),
                                                  "size_bytes": _int(m.group("size"))})
    if m := _UNINIT.match(text):
        return _Draft(tool, "uninitialized_read", "error", text,
                      {"memory_space": m.group("space"), "access": "read", "size_bytes": _int(m.group("size"))})
    if m := _RACE.match(text):
        draft = _Draft(tool, "race", "error" if m.group("sev").lower() == "error" else "warning", text)
        draft.fields.update(parse_location(m.group("loc1")))
        draft.fields["access"] = m.group("a1").lower()
        if m.group("hazards"):
            draft.fields["hazard_count"] = _int(m.group("hazards"))
        return draft
    if m := _HAZARD.match(text):
        return _Draft(tool, "hazard", "error" if m.group("sev").lower() == "error" else "warning", text,
                      {"memory_space": m.group("space"), "address": m.group("addr"),
                       "block": _triple(m.group("block"))})
    if _BARRIER.match(text) or _SYNC_OTHER.match(text):
        return _Draft(tool, "barrier_error", "error", text)
    if m := _API.match(text):
        return _Draft(tool, "api_error", "error", text, {"cuda_error": int(m.group("code")), "api_call": m.group("call")})
    if m := _LEAK.match(text):
        return _Draft(tool, "leak", "error", text, {"size_bytes": _int(m.group("size")), "address": m.group("addr")})
    if _STREAM_ORDERED.search(text):
        return _Draft(tool, "stream_ordered_race", "error", text)
    if m := _WARP_EXCEPTION.match(text):
        return _Draft(tool, "invalid_access", "error", text, {"address_note": f"hardware exception: {m.group('what').lower()}"})
    if text.startswith(("Error", "ERROR", "Invalid", "Uninitialized", "Misaligned", "Out-of-range",
                        "Hardware exception", "Malloc/Free error", "Fatal", "Internal")):
        return _Draft(tool, "other", "error", text)
    return None


def _add_detail(draft: _Draft, text: str) -> None:
    draft.details.append(text)
    if _STREAM_ORDERED.search(text) and draft.kind == "invalid_access":
        draft.kind = "stream_ordered_race"
    if m := _BY_THREAD.match(text):
        draft.fields.setdefault("thread", _triple(m.group("t")))
        draft.fields.setdefault("block", _triple(m.group("b")))
    elif m := _THREAD_AT.match(text):
        draft.fields.setdefault("thread", _triple(m.group("t")))
        for key, value in parse_location(m.group("loc")).items():
            draft.fields.setdefault(key, value)
    elif m := _AND_ACCESS.match(text):
        if m.group("hazards"):
            draft.fields.setdefault("hazard_count", _int(m.group("hazards")))
        for key, value in parse_location(m.group("loc2")).items():
            draft.fields.setdefault(key, value)
    elif m := _AT.match(text):
        for key, value in parse_location(m.group("loc")).items():
            draft.fields.setdefault(key, value)
    elif m := _ADDRESS.match(text):
        draft.fields.setdefault("address", m.group("addr"))
        draft.fields["address_note"] = (draft.fields.get("address_note", "") + " " + m.group("note")).strip()
    elif text.startswith("and is ") or text.startswith("and ") and "allocation" in text:
        draft.fields["address_note"] = (draft.fields.get("address_note", "") + " " + text).strip()


def parse_sanitizer_output(text: str, tool: str = "memcheck") -> SanitizerReport:
    """Parse compute-sanitizer's report (its log file, or stdout with the program's lines mixed in)."""
    findings: list[SanitizerFinding] = []
    current: _Draft | None = None
    error_summary: int | None = None
    race_summary: tuple[int, int, int] | None = None
    lines = text.splitlines()
    for raw in lines:
        prefix = _PREFIX.match(raw)
        if not prefix:
            continue  # the program's own output
        body = raw[prefix.end():]
        text_line = body.strip()
        if not text_line:
            continue
        if m := _ERROR_SUMMARY.search(text_line):
            error_summary = _int(m.group("n"))
            continue
        if m := _RACE_SUMMARY.search(text_line):
            race_summary = (_int(m.group("h")) or 0, _int(m.group("e")) or 0, _int(m.group("w")) or 0)
            continue
        indented = body.startswith("    ") or body.startswith("\t")
        if indented and current is not None:
            if m := _PYTHON_FRAME.match(text_line):
                current.python_frames.append(f"{m.group('fn')} in {m.group('file')}:{m.group('line')}")
            elif not text_line.startswith(("Host Frame", "Device Frame", "Saved host backtrace")):
                _add_detail(current, text_line)
            continue
        if text_line.startswith(_NOISE):
            continue
        draft = _new_finding(tool, text_line)
        if draft is not None:
            if current is not None:
                findings.append(current.freeze())
            current = draft
    if current is not None:
        findings.append(current.freeze())
    return SanitizerReport(tool, tuple(findings), error_summary, race_summary, len(lines))


# ------------------------------------------------------------------------------------------ running
def find_compute_sanitizer() -> str:
    """Path of compute-sanitizer: $OPGATE_COMPUTE_SANITIZER, PATH, $CUDA_HOME / $CUDA_PATH, /usr/local/cuda*."""
    looked: list[str] = []
    explicit = os.environ.get(SANITIZER_ENV)
    if explicit:
        if os.access(explicit, os.X_OK):
            return explicit
        raise SanitizerNotFound(f"${SANITIZER_ENV}={explicit} is not an executable file")
    on_path = shutil.which("compute-sanitizer")
    if on_path:
        return on_path
    looked.append("PATH")
    roots = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT")]
    roots += ["/usr/local/cuda", *sorted(glob.glob("/usr/local/cuda-*"), reverse=True), "/opt/cuda"]
    for root in [r for r in roots if r]:
        for candidate in (Path(root) / "bin" / "compute-sanitizer",
                          Path(root) / "compute-sanitizer" / "compute-sanitizer"):
            looked.append(str(candidate))
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    raise SanitizerNotFound("compute-sanitizer not found (looked in " + ", ".join(looked[:6])
                            + ", ...); install the CUDA toolkit's compute-sanitizer or set "
                            f"${SANITIZER_ENV} to its path")


@functools.lru_cache(maxsize=8)
def _help_text(path: str) -> str:
    try:
        done = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout + done.stderr


def supports_option(path: str, option: str) -> bool:
    """Whether this compute-sanitizer lists `option` in its --help (options come and go by release)."""
    return option in _help_text(path)


@dataclass(frozen=True)
class SanitizerRun:
    """One compute-sanitizer run. `log_path`: where its log was kept (None: a run given no path, whose log was read
    and removed)."""

    tool: str
    command: tuple[str, ...]
    returncode: int | None
    timed_out: bool
    duration_s: float
    report: SanitizerReport
    stdout_tail: str
    stderr_tail: str
    log_path: str | None
    error_exitcode: int = ERROR_EXITCODE

    @property
    def sanitizer_flagged(self) -> bool:
        """The sanitizer said it found errors (its exit code or its summary), parsed or not."""
        return self.returncode == self.error_exitcode or self.report.reported_error_count > 0

    @property
    def out_of_memory_only(self) -> bool:
        """Every error in the log is a CUDA API call that ran out of device memory (a cudaMalloc with the
        allocator's caches off): about the GPU's memory, which the rest of a library run may hold, not about the
        memory safety of the code under test."""
        findings = self.report.findings
        return bool(findings) and all(f.kind == "api_error" and f.cuda_error == OUT_OF_MEMORY_ERROR
                                      for f in findings)

    @property
    def crashed_without_findings(self) -> bool:
        """compute-sanitizer was killed by a signal (its own crash, or the instrumented program's that it passed
        on) and its log names no error: nothing opgate can attribute to the code under test. Seen once in 464
        runs of a library on the H100: racecheck killed by SIGSEGV 6.7 s in, before the program's first call,
        while the same command ran clean in the next run (forty-third session)."""
        return (not self.timed_out and self.returncode is not None and self.returncode < 0
                and not self.report.findings and not self.sanitizer_flagged)

    def exit_text(self) -> str:
        """'was killed by signal 11 (SIGSEGV)', 'exited with code 1'."""
        return describe_exit(self.returncode)

    def last_words(self) -> str:
        """The last line the sanitizer or the program left (stderr, else the sanitizer's log), for a reason."""
        log = Path(self.log_path) if self.log_path else None
        for text in (self.stderr_tail, log.read_text(errors="replace") if log and log.is_file() else ""):
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            if lines:
                return lines[-1][:300]
        return ""

    def to_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "command": list(self.command), "returncode": self.returncode,
                "timed_out": self.timed_out, "duration_s": round(self.duration_s, 3),
                "error_summary": self.report.error_summary, "racecheck_summary": self.report.racecheck_summary,
                "findings": [f.to_dict() for f in self.report.findings[:20]],
                "findings_total": len(self.report.findings), "stdout_tail": self.stdout_tail,
                "stderr_tail": self.stderr_tail, "log_path": self.log_path}


def describe_exit(returncode: int | None) -> str:
    """A process's end in words: Popen's returncode is minus the signal that killed it."""
    if returncode is None:
        return "did not end"
    if returncode < 0:
        from opgate.engine.children import known_signal

        name = known_signal(returncode)
        return f"was killed by signal {-returncode}" + (f" ({name})" if name else "")
    return f"exited with code {returncode}"


def _kill_group(proc: subprocess.Popen[Any]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_under_sanitizer(command: Sequence[str], tool: str = "memcheck", *, tool_options: Sequence[str] = (),
                        print_limit: int = DEFAULT_PRINT_LIMIT, error_exitcode: int = ERROR_EXITCODE,
                        timeout_s: float = 300.0, log_path: str | os.PathLike[str] | None = None,
                        env: dict[str, str] | None = None, sanitizer: str | None = None) -> SanitizerRun:
    """Run `command` under `compute-sanitizer --tool tool`; SanitizerNotFound when it is not installed. The log goes
    to `log_path` and stays there; given none, it goes to a temporary folder that is removed once read (one was left
    in /tmp by every run, racecheck's logs among them)."""
    if tool not in TOOLS:
        from opgate.model.errors import InputError

        raise InputError(f"sanitizer tool {tool!r} is not one of {', '.join(TOOLS)}")
    path = sanitizer or find_compute_sanitizer()
    if log_path is None:
        with tempfile.TemporaryDirectory(prefix="opgate-sanitizer-") as folder:
            run = run_under_sanitizer(command, tool, tool_options=tool_options, print_limit=print_limit,
                                      error_exitcode=error_exitcode, timeout_s=timeout_s,
                                      log_path=Path(folder) / f"{tool}.log", env=env, sanitizer=path)
        return dataclasses.replace(run, log_path=None)
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    full = [path, "--tool", tool, "--print-limit", str(print_limit), "--error-exitcode", str(error_exitcode),
            "--log-file", str(log_path), "--target-processes", "all", *tool_options, *command]
    child_env = dict(os.environ if env is None else env)
    package_root = str(Path(opgate.__file__).resolve().parents[1])
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, child_env.get("PYTHONPATH", "")) if p)
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    started = time.perf_counter()
    timed_out = False
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(full, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=child_env,
                                start_new_session=True)
        try:
            returncode: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.wait()
            returncode, timed_out = None, True
        except BaseException:  # interrupted (SIGTERM from an outer timeout, Ctrl-C): leave no GPU process behind
            _kill_group(proc)
            proc.wait()
            raise
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
    log_text = log_path.read_text(errors="replace") if log_path.is_file() else ""
    # Without --log-file support the report lands on stdout; the prefix tells the two apart.
    report = parse_sanitizer_output(log_text or stdout, tool)
    return SanitizerRun(tool, tuple(full), returncode, timed_out, time.perf_counter() - started, report,
                        stdout[-3000:], stderr[-3000:], str(log_path), error_exitcode)


def supported_tool_options(path: str, options: Sequence[tuple[str, str]]) -> tuple[list[str], list[str]]:
    """(command-line words of the (option, value) pairs this compute-sanitizer knows, the options it does not)."""
    used: list[str] = []
    dropped: list[str] = []
    for option, value in options:
        if supports_option(path, option):
            used += [option, value]
        else:
            dropped.append(option)
    return used, dropped
