"""`opgate diff` and `opgate history` on real reports (tests/data/reports, recorded from real runs)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from opgate.model.errors import InputError
from opgate.reporting.diff import diff_reports, parse_threshold
from opgate.reporting.history import append_run, figure_trend, last_run_like, list_runs
from opgate.reporting.json_report import read_json

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "tests" / "data" / "reports"
TWO = REPORTS / "inspect_two_targets.v2.json"      # compress_size.o + sm89.cubin on h100, l4
THREE = REPORTS / "inspect_three_targets.v2.json"  # the same binaries on h100, l4, t4: sm89.cubin fails on t4


def opgate(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "opgate", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_new_target_failure_is_a_regression_with_exit_1() -> None:
    done = opgate("diff", str(TWO), str(THREE))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "new failures (1):" in done.stdout and "sm89_cubin@t4: - -> failed" in done.stdout
    assert "REGRESSION" in done.stdout.splitlines()[-1]
    back = opgate("diff", str(THREE), str(TWO), "--json")
    assert back.returncode == 0
    data = json.loads(back.stdout)
    assert not data["regressed"] and [c["check_id"] for c in data["removed"]][-1].endswith("@t4")


def test_same_report_has_no_change_and_exit_0() -> None:
    done = opgate("diff", str(TWO), str(TWO))
    assert done.returncode == 0 and "0 new failure(s), 0 fixed, 0 figure(s) moved" in done.stdout


def test_figures_moved_beyond_threshold_show_both_values() -> None:
    """Two real verify runs sharing verify.softmax.torch.{float32,float16}: examples/ops/softmax.py and
    tests/data/verify/softmax_spec.py (other sizes) give the same check other figures."""
    base = read_json(REPORTS / "verify_softmax_quick_cpu.v2.json")
    new = read_json(REPORTS / "verify_softmax_bugs_cpu.v2.json")
    diff = diff_reports(base, new, threshold=0.05)
    assert diff.moved, "no figure moved"
    for move in diff.moved:
        assert abs(move.after - move.before) > 0.05 * abs(move.before) and move.key.startswith("verify.")
        assert "dtype=" in move.labels, move
    assert {c.check_id for c in diff.new_failures} >= {"verify.softmax.triton_tail_bug.float32"}
    loose = diff_reports(base, new, threshold=1e9)
    assert not [m for m in loose.moved if m.change != float("inf")]


def test_schema1_base_diffs_against_schema2_new() -> None:
    diff = diff_reports(read_json(REPORTS / "inspect_fleet.v1.json"), read_json(THREE))
    assert diff.verb == "inspect"


def test_bad_diff_input_is_one_line_exit_2(tmp_path: Path) -> None:
    not_report = tmp_path / "x.json"
    not_report.write_text('{"hello": 1}')
    for args, words in (((str(TWO), str(not_report)), "is not an opgate report"),
                        ((str(TWO), str(tmp_path / "missing.json")), "does not exist"),
                        ((str(REPORTS / "doctor_basic_cpu.v1.json"), str(TWO)), "cannot diff an 'opgate doctor'"),
                        ((str(TWO), str(THREE), "--threshold", "five"), "--threshold 'five' is not a number")):
        done = opgate("diff", *args)
        assert done.returncode == 2 and words in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_threshold_parsing() -> None:
    assert parse_threshold("5%") == pytest.approx(0.05) and parse_threshold("0.1") == pytest.approx(0.1)
    with pytest.raises(InputError):
        parse_threshold("-1%")


def test_sqlite_history_lists_runs_trends_and_finds_the_previous_run(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    first, second = read_json(TWO), read_json(THREE)
    assert append_run(db, first) == 1 and append_run(db, second) == 2
    runs = list_runs(db)
    assert [r.run_id for r in runs] == [1, 2] and runs[1].exit_code == 1 and runs[0].verb == "inspect"
    trend = figure_trend(db, "inspect.target_sm", labels="target=l4")
    assert [p.value for p in trend] == [89.0, 89.0, 89.0, 89.0]  # two binaries x two runs, sm_89
    previous = last_run_like(db, second)
    assert previous is not None and previous[0] == 1
    done = opgate("diff", "--against-last", db, str(THREE))
    assert done.returncode == 1 and f"{db} run 1 -> " in done.stdout
    listing = opgate("history", db, "--figure", "inspect.target_sm", "--labels", "target=t4")
    assert listing.returncode == 0 and "trend of inspect.target_sm" in listing.stdout and " 75 " in listing.stdout


def test_history_option_appends_a_real_run(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    data = ROOT / "tests" / "data" / "inspect"
    for _ in range(2):
        done = opgate("inspect", str(data / "compress_size.o"), "--targets", "h100", "--history", str(db),
                      "--html", str(tmp_path / "i.html"))
        assert done.returncode == 0 and "appended to" in done.stdout, done.stdout + done.stderr
    assert [r.run_id for r in list_runs(str(db))] == [1, 2]
    assert (tmp_path / "i.html").read_text().startswith("<!DOCTYPE html>")
    bad = opgate("inspect", str(data / "compress_size.o"), "--history", str(tmp_path / "no" / "such" / "h.db"))
    assert bad.returncode == 2 and "does not exist" in bad.stderr
    bad_html = opgate("inspect", str(data / "compress_size.o"), "--html", str(tmp_path / "no" / "i.html"))
    assert bad_html.returncode == 2 and "--html" in bad_html.stderr and "Traceback" not in bad_html.stderr


POSTGRES_BIN = Path("/usr/lib/postgresql/15/bin")


@pytest.mark.skipif(not (POSTGRES_BIN / "initdb").exists() or shutil.which("runuser") is None,
                    reason="PostgreSQL server binaries (Debian's postgresql package) not installed")
def test_postgresql_history_works_the_same(tmp_path: Path) -> None:
    pytest.importorskip("psycopg2", reason="psycopg2 driver not installed (pip install psycopg2-binary)")
    sys.path.insert(0, str(Path(__file__).parent))
    from tests_postgres import temporary_postgres  # noqa: E402

    with temporary_postgres() as url:
        assert append_run(url, read_json(TWO)) == 1 and append_run(url, read_json(THREE)) == 2
        assert [r.run_id for r in list_runs(url)] == [1, 2]
        assert last_run_like(url, read_json(THREE))[0] == 1
