"""scripts/dashboard_screenshot.py's drawing, from Prometheus answers shaped as its API gives them (the whole script,
with a real opgate serve and Prometheus, is run by hand: docs/deploy.md)."""

from __future__ import annotations

import json

from opgate_testing import REPO, script_module

SCRIPT = REPO / "scripts" / "dashboard_screenshot.py"


def _script():
    return script_module(SCRIPT, "dashboard_screenshot")


def test_each_panel_kind_is_drawn_and_an_empty_one_says_why() -> None:
    script = _script()
    instant = [{"metric": {"__name__": "opgate_check_outcome", "check": "doctor.container", "instance": "h:1"},
                "value": [100.0, "2"]}]
    ranged = [{"metric": {"check": "doctor.container"}, "values": [[100.0, "0"], [102.0, "2"], [104.0, "1"]]}]
    assert ">2</div>" in script.draw_stat(instant)
    assert "doctor.container" in script.draw_table(instant, needs_gpu=False)
    assert "needs a GPU" in script.draw_table([], needs_gpu=True) and "GPU" not in script.draw_table([], False)
    assert script.draw_timeseries(ranged, 100.0, 104.0, 400, 200).count("<polyline") == 1
    status = script.draw_status(ranged, 100.0, 104.0, 400)
    assert status.count('class="cell"') == 3 and script.OUTCOME_COLOURS[2] in status


def test_every_panel_of_the_shipped_dashboard_fits_the_page_and_its_queries_have_no_variables_left() -> None:
    script = _script()
    board = json.loads(script.DASHBOARD.read_text())
    bottom = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in board["panels"]) * script.ROW_PX
    assert script.page_height(board) > bottom
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            assert "$" not in script.concrete(target["expr"], 2), target["expr"]
