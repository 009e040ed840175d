"""The `opgate` command line. Each verb imports its machinery lazily so `--help` is instant."""

from __future__ import annotations

import os
import signal
import sys
import traceback
from enum import Enum
from pathlib import Path
from typing import List, NoReturn, Optional

import typer
from rich.console import Console

from opgate.cli.options import (history_option, html_option, json_report_option, junit_option, markdown_option,
                                strict_option, verbose_option)
from opgate.cli.console import make_console
from opgate.model.errors import InputError
from opgate.engine.interrupts import interruptible, raise_interrupt, report_of, take_caught
from opgate.model.results import ExitCode
from opgate.engine.runner import default_jobs

app = typer.Typer(
    name="opgate",
    help="Decide whether a GPU operator, and the host stack that runs it, is ready for production.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

err_console = Console(stderr=True, highlight=False, soft_wrap=True)


class Level(str, Enum):
    basic = "basic"
    standard = "standard"


def _check_outputs(json_path: Optional[Path] = None, junit_path: Optional[Path] = None,
                   out_dir: Optional[Path] = None) -> None:
    """Every output path is checked before any work (a report that cannot be written is bad input)."""
    from opgate.cli.outputs import check_output_folder, check_report_path

    check_report_path(json_path, "--json")
    check_report_path(junit_path, "--junit")
    check_output_folder(out_dir, "--out")
    from opgate.reporting.emit import ReportOutputs, plan_outputs

    plan_outputs(ReportOutputs(json=json_path, junit=junit_path))  # --html, --markdown: added by _check_more


def _emit_reports(report, json_path: Optional[Path], junit_path: Optional[Path], console: Console,
                  verbose: bool) -> None:
    """The terminal table, then --json and --junit through the one output layer (opgate.reporting.emit)."""
    from opgate.reporting.emit import ReportOutputs, emit
    from opgate.reporting.terminal import render_summary

    render_summary(report, console, verbose=verbose)
    emit(report, ReportOutputs(json=json_path, junit=junit_path), console.print)


def _check_more(html_path: Optional[Path], history_db: Optional[str], markdown_path: Optional[Path] = None) -> None:
    """--html, --markdown and --history are checked before any work, like --json and --junit (after them: no two
    name one file)."""
    from opgate.cli.outputs import check_distinct_outputs
    from opgate.reporting.emit import ReportOutputs, check_outputs, plan_outputs, planned_outputs

    planned = planned_outputs()
    check_distinct_outputs({"--json": planned.json, "--junit": planned.junit, "--html": html_path,
                            "--markdown": markdown_path, "--history": history_db})
    check_outputs(ReportOutputs(html=html_path, history=history_db, markdown=markdown_path))
    plan_outputs(ReportOutputs(json=planned.json, junit=planned.junit, html=html_path, markdown=markdown_path))


def _emit_more(report, html_path: Optional[Path], history_db: Optional[str], console: Console,
               markdown_path: Optional[Path] = None) -> None:
    """--html, --markdown and --history through the one output layer (opgate.reporting.emit)."""
    from opgate.reporting.emit import ReportOutputs, emit

    emit(report, ReportOutputs(html=html_path, history=history_db, markdown=markdown_path), console.print)


@app.command()
@interruptible
def doctor(
    level: Level = typer.Option(Level.basic, help="basic: software and deployment checks; "
                                "standard: adds measured GPU probes."),
    check: Optional[List[str]] = typer.Option(None, "--check", help="Run only this check (repeatable), "
                                               "e.g. --check interposition."),
    framework: Optional[List[str]] = typer.Option(None, "--framework", help="Python modules to import before "
                                                   "reading loaded libraries (repeatable; default: torch when "
                                                   "installed)."),
    json_path: Optional[Path] = json_report_option(),
    junit_path: Optional[Path] = junit_option("check"),
    html_path: Optional[Path] = html_option(),
    markdown_path: Optional[Path] = markdown_option(),
    history_db: Optional[str] = history_option(),
    strict: bool = strict_option(),
    fail_on_skip: bool = typer.Option(False, "--fail-on-skip", help="Treat skipped checks as failures (exit 1)."),
    require_gpu: bool = typer.Option(False, "--require-gpu", help="Fail (exit 1) when NVML sees no NVIDIA GPU, "
                                     "and fail every check skipped for want of one: for GPU hosts' CI."),
    jobs: int = typer.Option(4, "--jobs", min=1, max=64, help="Checks run at once, each in its own process."),
    verbose: bool = verbose_option("Show every figure in the terminal table."),
    list_checks: bool = typer.Option(False, "--list", help="List the registered checks, the levels each runs "
                                     "at, and exit."),
) -> None:
    """Is this host, container, driver and toolkit stack fit to run GPU operators?"""
    from opgate.checks.base import CheckContext
    from opgate.checks.registry import select_checks
    from opgate.cli.policy import apply_skip_policy
    from opgate.engine.session import run_session, tasks_for

    console = make_console()
    specs = select_checks("doctor.", check)
    if list_checks:
        _list_checks(specs, console)
        raise typer.Exit(0)
    _check_outputs(json_path, junit_path)
    _check_more(html_path, history_db, markdown_path)
    _check_frameworks(framework or [])
    ctx = CheckContext(verb="doctor", level=level.value, options={"frameworks": list(framework or [])})
    tasks, broken = tasks_for(specs, ctx)
    report = run_session("doctor", tasks, console, jobs=jobs, strict=strict, preset=broken,
                         extra={"level": level.value})
    if fail_on_skip or require_gpu:
        report = apply_skip_policy(report, fail_on_skip, require_gpu)
    _emit_reports(report, json_path, junit_path, console, verbose)
    _emit_more(report, html_path, history_db, console, markdown_path)
    raise typer.Exit(int(report.exit_code))


def _list_checks(specs, console: Console) -> None:
    """`doctor --list`: each check with the levels it runs at (basic runs at standard too)."""
    for spec in specs:
        try:
            levels = ", ".join(getattr(spec.load(), "levels", ("basic", "standard")))
        except Exception as exc:  # a broken plugin is listed, not fatal
            levels = f"cannot be imported: {type(exc).__name__}"
        console.print(f"{spec.name}  levels: {levels}  ({spec.target})", highlight=False)


def _check_frameworks(frameworks: List[str]) -> None:
    """`--framework NAME` must name an importable Python module (checked without importing it)."""
    import importlib.util

    for name in frameworks:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise InputError(f"--framework {name!r}: no Python module of that name is installed in this "
                             f"environment ({sys.executable}); give an importable module, e.g. --framework torch")


def _not_yet(verb: str) -> None:
    raise InputError(f"'opgate {verb}' is not yet available in this release; see the README for what ships now")


@app.command()
@interruptible
def inspect(
    paths: List[Path] = typer.Argument(..., help="Binaries (.so, executables, .o, .a), .cubin/.fatbin/.ptx "
                                       "files, wheels (.whl) or directories (searched recursively, Triton "
                                       "cache folders included)."),
    targets: Optional[str] = typer.Option(None, "--targets", help="Judge against these GPUs: catalogue names "
                                          "or architectures, comma-separated, each optionally @DRIVER, e.g. "
                                          "h100,a100@535.104.05,sm_89."),
    fleet: Optional[Path] = typer.Option(None, "--fleet", help="TOML fleet file: [[gpu]] tables with model "
                                         "(name or sm_XY), driver, optional name and count."),
    kernels: bool = typer.Option(False, "--kernels", help="Also list every kernel with registers, shared "
                                 "memory, stack, max threads and parameter size (decompresses the cubins)."),
    json_path: Optional[Path] = json_report_option(),
    junit_path: Optional[Path] = junit_option("binary x target"),
    html_path: Optional[Path] = html_option(),
    markdown_path: Optional[Path] = markdown_option(),
    history_db: Optional[str] = history_option(),
    deep: bool = typer.Option(False, "--deep", help="Also search data sections for fatbins a library embeds "
                              "and loads itself (cuFFT 12 does; cuobjdump does not list them)."),
    compare: bool = typer.Option(False, "--compare", help="Compare exactly two builds (e.g. nvcc and clang) kernel "
                                 "by kernel: SASS, PTX, resources, verdicts; exit 1 when a difference breaks a "
                                 "fleet target."),
    verbose: bool = verbose_option("One row per file and every verdict line (default: files with identical rows "
                                   "share one)."),
) -> None:
    """What machine code and PTX do these binaries carry, and will they run on the fleet?

    Exit code 1 when a binary cannot run on a target (no SASS and no PTX the driver can compile),
    2 when an input cannot be read.
    """
    from opgate.inspect.command import run_inspect
    from opgate.reporting.emit import ReportOutputs

    _check_outputs(json_path, junit_path)
    _check_more(html_path, history_db, markdown_path)
    console = make_console()
    outputs = ReportOutputs(html=html_path, history=history_db, markdown=markdown_path)
    if compare:
        from opgate.inspect.command import resolve_targets
        from opgate.inspect.compare import run_compare

        raise typer.Exit(run_compare(paths, resolve_targets(targets, fleet), json_path, console, junit_path,
                                     outputs=outputs))
    raise typer.Exit(run_inspect(paths, targets, fleet, kernels, json_path, console, junit_path, deep=deep,
                                 verbose=verbose, outputs=outputs))


class Budget(str, Enum):
    quick = "quick"
    standard = "standard"
    thorough = "thorough"


def _verify_stage_names() -> list[str]:
    from opgate.engine.stages import stage_names  # reads entry-point declarations only: no stage module is imported

    return list(stage_names())


@app.command()
@interruptible
def verify(
    specs: List[Path] = typer.Argument(..., metavar="PATH", help="Spec files (Python files that define "
                                       "opgate.Operator objects) or folders of them: one run, one report."),
    op: Optional[List[str]] = typer.Option(None, "--op", help="Verify only this operator (repeatable)."),
    impl: Optional[List[str]] = typer.Option(None, "--impl", help="Verify only this implementation (repeatable), "
                                             "e.g. --impl triton --impl torch.compile."),
    dtype: Optional[List[str]] = typer.Option(None, "--dtype", help="Verify only these dtypes (repeatable or "
                                              "comma-separated; default: the operator's dtypes)."),
    seed: int = typer.Option(0, "--seed", min=0, help="Base seed of the case plan."),
    budget: Budget = typer.Option(Budget.standard, "--budget", help="How many cases: quick (~18 for a 2-dim op), "
                                  "standard (~44), thorough (~100); see docs/verify-method.md."),
    json_path: Optional[Path] = json_report_option(),
    junit_path: Optional[Path] = junit_option("implementation x dtype"),
    html_path: Optional[Path] = html_option(),
    markdown_path: Optional[Path] = markdown_option(),
    history_db: Optional[str] = history_option(),
    replay: Optional[str] = typer.Option(None, "--replay", help="Re-run exactly one failing case from its "
                                         "replay token (ogv1....), against the same calibrated budget."),
    out: Path = typer.Option(Path("opgate-report"), "--out", help="Folder for artefacts: Triton IR per target, "
                             "checked ONNX models."),
    jobs: int = typer.Option(default_jobs(), "--jobs", min=1, max=64, help="Checks run at once, in warm "
                             "worker processes (one pool per implementation); default: one per CPU, 2 to 16."),
    extras: bool = typer.Option(False, "--extras/--no-extras", help="Also run opgate's cross-check of the "
                                "calibrated budget: the reference through torch.compile, ONNX Runtime (when the op "
                                "has no ONNX implementation) and TVM. Off by default: they judge opgate's budget, not "
                                "your implementations, and cost most of a CPU run (docs/benchmarks.md); naming one "
                                "with --impl runs it."),
    shrink: bool = typer.Option(True, "--shrink/--no-shrink", help="Shrink a failure to the smallest failing "
                                "case."),
    timeout: Optional[float] = typer.Option(None, "--timeout", min=1.0, help="Seconds one implementation x dtype "
                                            "may run before it is killed (default: 300/600/1800 by budget); "
                                            "also bounds the spec's import (default 120 s)."),
    case_timeout: Optional[float] = typer.Option(None, "--case-timeout", min=1.0, help="Seconds one call of an "
                                                 "implementation on one case may run before it counts as a hang "
                                                 "(a crash of that case; the other cases still run). Default: 300, "
                                                 "at most 90% of --timeout."),
    verbose: bool = verbose_option("Show every figure in the terminal table."),
    stages: str = typer.Option("numerics,runtime,sanitizer,recovery", "--stages", help="Comma-separated stages "
                               "(plugins of the opgate.verify.stages group; registered: "
                               f"{', '.join(_verify_stage_names())}). numerics always runs; runtime (GPU timing, "
                               "roofline fraction, CUDA graphs), sanitizer (compute-sanitizer, tools from "
                               "--sanitizer-tools), recovery (out-of-memory) need a GPU; ncu, qos and opgate "
                               "analyze's portability, occupancy, roofline are opt-in."),
    sanitizer_tools: str = typer.Option("all", "--sanitizer-tools", help="compute-sanitizer tools of the "
                                        "sanitizer stage, comma-separated: memcheck, racecheck, initcheck, "
                                        "synccheck, or all (one run per spec file and tool, shared by its implementations)."),
    fail_on_skip: bool = typer.Option(False, "--fail-on-skip", help="Treat skipped checks as failures (exit 1)."),
    require_gpu: bool = typer.Option(False, "--require-gpu", help="Fail (exit 1) when NVML sees no NVIDIA GPU, "
                                     "and fail every stage skipped for want of one: for GPU hosts' CI."),
    time_budget: Optional[float] = typer.Option(None, "--time-budget", min=0.0, help="Seconds of numerics per "
                                                "operator: cases that do not fit the backend's measured speed are "
                                                "not run, and the report names them (declared sizes always run). "
                                                "Default: 90/140/900 s by budget without a GPU, 120/240/1200 s "
                                                "with one; 0: no cap."),
    changed_since: Optional[str] = typer.Option(None, "--changed-since", metavar="GIT_REF", help="Verify only "
                                                "the spec files whose file, or a module inside the repository it "
                                                "imports, changed since this git ref (e.g. origin/main): for CI."),
    cache: bool = typer.Option(True, "--cache/--no-cache", help="Reuse the stored verdicts of spec files that did "
                               "not change (their file, local imports, installed packages, opgate, GPUs, options) "
                               "and the float64 bound terms of unchanged cases; --no-cache judges everything again "
                               "(same as OPGATE_CACHE=0)."),
    time_limit: Optional[float] = typer.Option(None, "--time-limit", min=1.0, help="Wall-clock seconds for the "
                                               "whole run: at the limit it stops as on SIGTERM, writes the report "
                                               "so far and keeps what it judged for the next run (exit 1 if a check "
                                               "failed, else 3). Set it inside a CI job's own limit."),
) -> None:
    """Is this operator correct on every backend and dtype, within a calibrated error budget?"""
    from opgate.verify.engine import VerifyRequest, parse_sanitizer_tools, parse_stages, run_verify
    from opgate.verify.spec_files import changed_specs, expand_spec_paths

    timer = None
    if time_limit is not None:  # counted from here: the spec load and the calibration are part of the run
        from opgate.engine.interrupts import stop_at_time_limit

        timer = stop_at_time_limit(time_limit)

    if not cache:  # the environment, so the calibration's children skip the bound cache too
        from opgate.verify.bounds_cache import CACHE_ENV

        os.environ[CACHE_ENV] = "0"
    console = make_console()
    chosen_stages = parse_stages(stages)
    dtypes = [d.strip() for entry in (dtype or []) for d in entry.split(",") if d.strip()]
    tools = parse_sanitizer_tools(sanitizer_tools)
    if replay is not None and not replay.strip():  # an empty token ran the whole plan instead of one case
        raise InputError("--replay needs a token (ogv1....) from a failing result's replay line")
    _check_outputs(json_path, junit_path, out)
    _check_more(html_path, history_db, markdown_path)
    files = expand_spec_paths(specs)
    if changed_since is not None:
        files, _ = changed_specs(files, changed_since)
        if not files:
            console.print(f"no spec file, and no module inside the repository one imports, changed since "
                          f"{changed_since}: nothing to verify — exit code 0", highlight=False)
            raise typer.Exit(0)
    request = VerifyRequest(
        spec_file=files[0], ops=list(op or []), impls=list(impl or []), dtypes=dtypes, seed=seed,
        budget=budget.value, replay=replay, out_dir=out, extras=extras, shrink=shrink, jobs=jobs,
        timeout_s=timeout, stages=chosen_stages, sanitizer_tools=tools, case_timeout_s=case_timeout,
        spec_files=tuple(files) if len(files) > 1 else (), time_budget_s=time_budget,
    )
    report = run_verify(request, console)
    if timer is not None:  # judged in time: the reports below are written whole
        timer.cancel()
    if fail_on_skip or require_gpu:
        from opgate.cli.policy import apply_skip_policy

        report = apply_skip_policy(report, fail_on_skip, require_gpu)
    _emit_reports(report, json_path, junit_path, console, verbose)
    _emit_more(report, html_path, history_db, console, markdown_path)
    raise typer.Exit(int(report.exit_code))


@app.command()
@interruptible
def analyze(
    spec_file: Path = typer.Argument(..., help="Operator spec file (the `opgate verify` format)."),
    targets: str = typer.Option("sm_75,sm_80,sm_86,sm_89,sm_90,sm_100,sm_120", "--targets",
                                help="Required targets: sm_XY or catalogue GPU keys, comma-separated."),
    optional_targets: str = typer.Option("", "--optional-targets",
                                         help="Targets compiled and reported, whose failures only warn."),
    gpus: str = typer.Option("t4,a100,a10,l40s,h100,b200,rtx5090", "--gpus",
                             help="Catalogue GPUs for the roofline (one per default target by default)."),
    stages: str = typer.Option("portability,occupancy,roofline", "--stages", help="Stages to run."),
    json_path: Optional[Path] = json_report_option(),
    junit_path: Optional[Path] = junit_option("check"),
    html_path: Optional[Path] = html_option(),
    markdown_path: Optional[Path] = markdown_option(),
    history_db: Optional[str] = history_option(),
    out_dir: Path = typer.Option(Path("opgate-report"), "--out", help="Report folder for the roofline charts."),
    jobs: int = typer.Option(max(1, min(4, os.cpu_count() or 1)), "--jobs", min=1, max=64,
                             help="Compiles run at once, each in its own process (default: CPUs, at most 4)."),
    compile_timeout: float = typer.Option(300.0, "--compile-timeout", min=1.0,
                                          help="Seconds one implementation may take to compile for one target."),
    verbose: bool = verbose_option("Also print every check with its figures."),
    allow_unknown_arch: bool = typer.Option(False, "--allow-unknown-arch", help="Accept a well-formed sm_XY "
                                            "that opgate's catalogue does not list (default: refused, exit 2)."),
) -> None:
    """Portability, occupancy and roofline for every target GPU, without a GPU. Exit 1: a required target fails."""
    from opgate.analyze.portability import parse_targets
    from opgate.analyze.render import render_matrix
    from opgate.analyze.run import AnalyzeOptions, parse_gpus, parse_stages, render_roofline, run_analyze
    from opgate.reporting.terminal import render_summary

    from opgate.engine.specload import check_spec_path

    check_spec_path(spec_file)
    _check_outputs(json_path, junit_path, out_dir)
    _check_more(html_path, history_db, markdown_path)
    console = make_console()
    required = parse_targets(targets, allow_unknown=allow_unknown_arch)
    optional = [t for t in parse_targets(optional_targets, allow_unknown=allow_unknown_arch)
                if t not in required] if optional_targets.strip() else []
    options = AnalyzeOptions(
        spec_file=spec_file.resolve(), targets=required, optional_targets=optional, gpus=parse_gpus(gpus),
        out_dir=out_dir, jobs=jobs, compile_timeout_s=compile_timeout, stages=parse_stages(stages),
    )
    report, findings = run_analyze(options, console)
    if findings.outcomes:
        render_matrix(findings.outcomes, [t.label for t in [*required, *optional]], console, verbose=verbose)
    render_roofline(findings, console, verbose=verbose)
    render_summary(report, console, verbose=verbose)  # analyze's: each problem with its remedy, the counts
    from opgate.reporting.emit import ReportOutputs, emit

    emit(report, ReportOutputs(json_path, junit_path, html_path, history_db, markdown_path), console.print)
    raise typer.Exit(int(report.exit_code))


@app.command()
@interruptible
def occupancy(
    gpu: Optional[str] = typer.Option(None, "--gpu", help="Catalogue GPU, e.g. h200 (or give --cc)."),
    cc: Optional[str] = typer.Option(None, "--cc", help="Compute capability, e.g. 9.0 or sm_90 (or give --gpu)."),
    threads: int = typer.Option(..., "--threads", help="Threads per block."),
    registers: int = typer.Option(..., "--registers", help="Registers per thread (ptxas -v / cuobjdump -res-usage)."),
    static_shared: int = typer.Option(0, "--static-shared", help="Static shared memory per block, bytes."),
    dynamic_shared: int = typer.Option(0, "--dynamic-shared", help="Dynamic shared memory per block, bytes."),
    carveout: Optional[int] = typer.Option(None, "--carveout", help="Preferred shared-memory carve-out, percent "
                                           "(default: no preference, the driver's default)."),
    barriers: int = typer.Option(1, "--barriers", help="Named barriers per block (CC >= 9 budgets them)."),
    json_path: Optional[Path] = json_report_option("Write the result as JSON to this file (atomically), or to "
                                                   "standard output with --json -."),
) -> None:
    """Active blocks and warps per SM, occupancy and what limits it (NVIDIA's occupancy calculator).

    Exit 0 when the block can be resident, 1 when it cannot (0 blocks per SM)."""
    import json

    from opgate.core.limits import sm_limits
    from opgate.core.occupancy import KernelLaunch
    from opgate.core.occupancy import occupancy as compute_occupancy
    from opgate.analyze.render import render_occupancy
    from opgate.core.gpus import lookup_gpu

    if (gpu is None) == (cc is None):
        raise InputError("give exactly one of --gpu (e.g. --gpu h200) or --cc (e.g. --cc 9.0)")
    if json_path is not None and str(json_path) != "-":
        _check_outputs(json_path)
    if gpu is not None:
        model = lookup_gpu(gpu)
        limits = sm_limits(model.compute_capability)
        label = f"{model.name} (CC {model.cc_text}, {model.sm_count} SMs)"
    else:
        limits = sm_limits(cc)  # type: ignore[arg-type]
        label = f"CC {limits.cc_text}"
    launch = KernelLaunch(threads_per_block=threads, registers_per_thread=registers,
                          static_shared_bytes=static_shared, dynamic_shared_bytes=dynamic_shared,
                          carveout_percent=carveout, block_barriers=barriers)
    result = compute_occupancy(launch, limits)
    if json_path is not None:
        text = json.dumps({"device": label, **result.to_dict()}, indent=2) + "\n"
        if str(json_path) == "-":
            print(text, end="")
        else:
            from opgate.engine.atomic import write_atomically

            write_atomically(json_path, text)
            render_occupancy(result, Console(highlight=False), label)
            print(f"JSON report: {json_path}")
    else:
        render_occupancy(result, Console(highlight=False), label)
    raise typer.Exit(0 if result.fits else 1)


@app.command()
def explain(
    reports: List[Path] = typer.Argument(..., help="Nsight Compute output: CSV from ncu --csv --page raw (or "
                                         "--page details), or .ncu-rep reports (read with ncu --import)."),
    gpu: Optional[str] = typer.Option(None, "--gpu", help="GPU the report was taken on, for the roofline ceilings "
                                      "(default: the device name in the report)."),
    kernel: Optional[str] = typer.Option(None, "--kernel", help="Only launches whose kernel name matches this "
                                         "regular expression."),
    json_path: Optional[Path] = json_report_option("Write the diagnoses as JSON (atomically)."),
    verbose: bool = verbose_option("Also print every figure of each diagnosis."),
    chart: Optional[Path] = typer.Option(None, "--chart", help="Draw the launches' roofline points against the "
                                         "HBM and L2 ceilings into this PNG (needs matplotlib)."),
) -> None:
    """Why is this kernel slow? The limiter of each profiled launch in one line, with its figures."""
    from opgate.gpu.explain import run_explain

    raise typer.Exit(run_explain(reports, gpu, kernel, json_path, verbose, make_console(), chart))


@app.command()
def diff(
    reports: List[Path] = typer.Argument(..., metavar="BASE.json NEW.json", help="Two reports of the same verb "
                                         "(opgate ... --json), or one NEW.json with --against-last."),
    threshold: str = typer.Option("5%", "--threshold", help="Report figures whose value moved by more than this "
                                  "relative change (5% or 0.05)."),
    against_last: Optional[str] = typer.Option(None, "--against-last", metavar="DB", help="Compare NEW.json "
                                               "with the previous run of the same verb and subject in this "
                                               "history database."),
    as_json: bool = typer.Option(False, "--json", help="Print the differences as JSON."),
) -> None:
    """New failures, fixed checks and moved figures between two runs. Exit 1 on a regression (a new failure)."""
    from opgate.reporting.diff_command import run_diff

    raise typer.Exit(run_diff(reports, threshold, against_last, as_json))


@app.command()
def history(
    db: str = typer.Argument(..., metavar="DB", help="History database: a SQLite path or a SQLAlchemy URL."),
    verb: Optional[str] = typer.Option(None, "--verb", help="Only runs of this verb."),
    subject: Optional[str] = typer.Option(None, "--subject", help="Only runs whose subject (spec file, "
                                          "binaries or host) contains this text."),
    figure: Optional[str] = typer.Option(None, "--figure", help="Print this figure key's trend, e.g. "
                                         "hbm.read_bandwidth or verify.runtime.median_time."),
    labels: Optional[str] = typer.Option(None, "--labels", help="With --figure: only labels containing this, "
                                         "e.g. gpu=0 or impl=triton."),
    limit: int = typer.Option(50, "--limit", min=1, help="Most recent runs listed."),
) -> None:
    """Runs stored with --history, per host, GPU and subject; with --figure, that figure's trend."""
    from opgate.reporting.history import figure_trend, list_runs, render_runs, render_trend

    for line in render_runs(list_runs(db, verb, subject, limit)):
        print(line)
    if figure:
        for line in render_trend(figure, figure_trend(db, figure, labels, verb, subject)):
            print(line)


@app.command()
def version() -> None:
    """Print opgate's version."""
    from opgate import __version__

    print(__version__)


def _print_version(value: Optional[bool]) -> None:
    if value:
        from opgate import __version__

        print(f"opgate {__version__}")
        raise typer.Exit(0)


@app.callback()
def _opgate(version: Optional[bool] = typer.Option(None, "--version", callback=_print_version, is_eager=True,
                                                    help="Print opgate's version and exit.")) -> None:
    pass


from opgate.plan.cli import plan_app  # noqa: E402  (the `plan` verbs; their machinery loads lazily)

app.add_typer(plan_app, name="plan")

# opgate fleet doctor|verify|inspect and opgate serve (issue 17): typer apps of their own, imported cheaply.
from opgate.fleet.cli import fleet_app  # noqa: E402
from opgate.fleet.serve import serve  # noqa: E402

app.add_typer(fleet_app)
app.command("serve")(serve)


def _verb(argv: Optional[List[str]]) -> str:
    args = sys.argv[1:] if argv is None else argv
    return next((a for a in args if not a.startswith("-")), "")


def _is_click(exc: BaseException, name: str) -> bool:
    """Whether exc is click's (typer vendors its own copy) exception `name` or a subclass of it."""
    return any(k.__name__ == name and "click" in k.__module__ for k in type(exc).__mro__)


def _run_app(argv: Optional[List[str]]) -> None:
    """The typer app without click's standalone mode: a usage error is one line (its four-line usage block said
    nothing the line does not), every other exit as click would make it."""
    try:
        code = app(args=argv, prog_name="opgate", standalone_mode=False)
    except Exception as exc:  # noqa: BLE001 - only click's own are handled here, the rest re-raised
        if _is_click(exc, "NoArgsIsHelpError"):  # bare `opgate` or `opgate plan`: the help, as before
            print(exc.ctx.get_help())  # type: ignore[attr-defined]
            sys.exit(int(ExitCode.BAD_INPUT))
        if _is_click(exc, "UsageError"):
            ctx = getattr(exc, "ctx", None)
            where = ctx.command_path if ctx is not None else "opgate"
            err_console.print(f"opgate: error: {exc.format_message()} (see '{where} --help')",  # type: ignore[attr-defined]
                              markup=False)
            sys.exit(int(ExitCode.BAD_INPUT))
        if _is_click(exc, "Abort"):  # click's own Ctrl-C outside a verb (at a prompt)
            raise KeyboardInterrupt from None
        raise
    if isinstance(code, int) and code:  # typer.Exit(code) is returned, not raised, outside standalone mode
        sys.exit(code)


def _interrupted(stop: KeyboardInterrupt) -> NoReturn:
    """Stop every child, write the report so far to the planned files (once: verify wrote it already), say where,
    exit 130."""
    from opgate.engine.children import kill_all_children
    from opgate.engine.interrupts import time_limit_reached
    from opgate.model.results import exit_code_at_time_limit
    from opgate.reporting.emit import emit_interrupted

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the cleanup short
    kill_all_children()
    report = report_of(stop)
    limit = time_limit_reached()
    if limit is not None:
        err_console.print(f"opgate: --time-limit {limit:g} s reached: the run stopped where it was", highlight=False)
    if report is not None:
        err_console.print(f"opgate: interrupted; every child process was stopped{emit_interrupted(report)}")
        said = report.extra.get("verdict_cache") or {}
        stored, partly = said.get("stored") or [], said.get("stored_in_part") or []
        if stored:  # verify/verdict_reuse.py: what the run judged wholly is not judged again
            err_console.print(f"opgate: {len(stored)} spec file(s) judged wholly before the interrupt are in the "
                              "verdict cache; the next run judges only the others", highlight=False)
        if partly:  # verify/resumed.py: nor are the finished checks of the others
            err_console.print(f"opgate: the finished checks of {len(partly)} spec file(s) judged in part are in the "
                              "verdict cache; the next run runs only their unfinished checks", highlight=False)
    else:
        err_console.print("opgate: interrupted before any check finished; every child process was stopped, "
                          "no report was written")
    if limit is not None:  # a limit the user set is not an interrupt: what was found, or that it could not judge all
        sys.exit(int(exit_code_at_time_limit(report.results if report is not None else ())))
    sys.exit(int(ExitCode.INTERRUPTED))


def main(argv: Optional[List[str]] = None) -> None:
    """Console entry point: maps the three kinds of failure to exit codes 2 and 3, an interrupt to 130."""
    from opgate.cli.optional import missing_module_message

    for stream in (sys.stdout, sys.stderr):  # PYTHONIOENCODING=ascii: a "—" in a summary line is a "?", not a crash
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")
    if hasattr(signal, "SIGTERM"):
        signal.signal(signal.SIGTERM, raise_interrupt)  # SIGTERM stops a run as Ctrl-C does
    signal.signal(signal.SIGINT, raise_interrupt)  # ... and a second one of either waits for the report
    take_caught()  # an interrupt a verb ended with before, outside main (a test calling the app), is not this one
    try:
        _run_app(argv)
    except InputError as exc:
        err_console.print(f"opgate: error: {exc}", markup=False)  # [[gpu]] is text, not rich markup
        sys.exit(int(ExitCode.BAD_INPUT))
    except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM outside a verb (a verb's: the SystemExit 130 below)
        _interrupted(stop)
    except SystemExit as exc:
        stop = take_caught() if exc.code == int(ExitCode.INTERRUPTED) else None
        if stop is not None:  # typer turned a verb's interrupt into exit 130; the report so far comes along
            _interrupted(stop)
        if exc.code == int(ExitCode.INTERRUPTED):  # typer turns a Ctrl-C outside a verb into a silent exit 130
            err_console.print("opgate: interrupted before any check started; no report was written")
        raise
    except ModuleNotFoundError as exc:
        message = missing_module_message(exc.name, _verb(argv))
        if message is None:
            traceback.print_exc()
            err_console.print("opgate: internal error (a bug in opgate); please report the traceback above")
            sys.exit(int(ExitCode.INTERNAL_ERROR))
        err_console.print(f"opgate: error: {message}", markup=False)
        sys.exit(int(ExitCode.BAD_INPUT))
    except Exception:
        traceback.print_exc()
        err_console.print("opgate: internal error (a bug in opgate); please report the traceback above")
        sys.exit(int(ExitCode.INTERNAL_ERROR))
    # typer exits through SystemExit; reaching here means no command ran
    sys.exit(0)


def console_main() -> None:
    """The `opgate` command and `python -m opgate`: main(), then, once every report is written and the output
    flushed, an exit that skips the interpreter's teardown when torch was loaded (unwinding torch, Triton and a
    CUDA context costs a second or two at the end of every verify). In-process callers (tests) use main()."""
    try:
        main()
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    if "torch" not in sys.modules:
        sys.exit(code)
    status = code if isinstance(code, int) else (0 if code is None else 1)
    if not isinstance(code, int) and code is not None:
        print(code, file=sys.stderr)
    from opgate.engine.children import exit_without_teardown

    exit_without_teardown(status)


if __name__ == "__main__":  # pragma: no cover
    console_main()
