"""Screenshots of the example HTML reports into docs/img/ (headless Chromium through Selenium).

    PYTHONPATH=src python scripts/report_screenshots.py [REPORT.json ...]

Without arguments: the recorded real runs in tests/data/reports (doctor basic on a CPU host, inspect with a
fleet matrix, verify of examples/ops/softmax.py --budget quick on CPU, analyze of tests/data/analyze).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from opgate.reporting.browser import browser_missing, headless_chromium, screenshot
from opgate.reporting.html import write_html
from opgate.reporting.json_report import read_json

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = {
    "doctor_basic_cpu.v1.json": "report-doctor-cpu.png",
    "inspect_fleet.v1.json": "report-inspect-fleet.png",
    "verify_softmax_quick_cpu.v2.json": "report-verify-softmax-cpu.png",
    "verify_softmax_bugs_cpu.v2.json": "report-verify-failures-cpu.png",
    "analyze_ops.v1.json": "report-analyze.png",
}


def main(argv: list[str]) -> int:
    why = browser_missing()
    if why:
        print(f"cannot take screenshots: {why}")
        return 2
    jobs = {Path(a): Path(a).with_suffix(".png").name for a in argv} or {
        ROOT / "tests" / "data" / "reports" / k: v for k, v in DEFAULT.items()}
    with tempfile.TemporaryDirectory() as tmp, headless_chromium(1280, 1100) as driver:
        for report_path, png in jobs.items():
            html = Path(tmp) / (report_path.stem + ".html")
            write_html(read_json(report_path), html)
            screenshot(driver, html, ROOT / "docs" / "img" / png)
            print(f"docs/img/{png}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
