"""A picture of deploy/grafana/opgate-dashboard.json from real metrics, where Grafana itself cannot run.

Grafana is in neither Debian nor PyPI, and grafana.com is out of reach from the machines this project is built on,
so this script draws the dashboard's panels itself. It starts a real `opgate serve` on 127.0.0.1 (the basic doctor
every INTERVAL seconds, on this machine) and Debian's `prometheus` scraping it every 2 s with deploy/prometheus's
rules. After SECONDS it runs every panel's own queries (variables at All, as test_fleet_alerting does) against that
Prometheus: instant queries for stat and table panels, range queries over the recording for time series and status
history. It then lays the panels out by their gridPos on an HTML page and takes a screenshot with headless Chromium.
It is not Grafana's rendering: the layout, titles and queries are the dashboard's; the drawing is this script's.

    PYTHONPATH=src python scripts/dashboard_screenshot.py [--seconds 150] [--interval 10] [--out docs/img/dashboard.png]

Needs: prometheus (Debian), chromium and selenium (opgate[reports]). Exit 0 with the picture written, 2 when a tool
is missing (one line naming it).
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "opgate-dashboard.json"
RULES = ROOT / "deploy" / "prometheus" / "opgate-rules.yaml"
WIDTH_PX, ROW_PX = 1600, 34  # Grafana's grid: 24 columns, rows of ~30 px
OUTCOME_COLOURS = {-1: "#9e9e9e", 0: "#37872d", 1: "#e0b400", 2: "#c4162a", 3: "#8f3bb8"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read().decode())


def concrete(expr: str, step_s: int) -> str:
    """A panel query as Grafana sends it with every variable at All."""
    expr = expr.replace("$__rate_interval", f"{4 * step_s}s").replace("$__interval", f"{step_s}s")
    return re.sub(r"\$\{?\w+\}?", ".*", expr)


def start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(args, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def series_label(metric: dict[str, str]) -> str:
    shown = {k: v for k, v in metric.items() if k not in ("__name__", "job", "instance") and v != ""}
    return ", ".join(f"{k}={v}" for k, v in sorted(shown.items())) or metric.get("__name__", "value")


def number(value: str) -> str:
    x = float(value)
    return f"{x:.0f}" if abs(x) >= 100 or x == int(x) else f"{x:.3g}"


def draw_stat(results: list[dict[str, Any]]) -> str:
    if not results:
        return '<div class="none">no data</div>'
    return "".join(f'<div class="stat">{number(r["value"][1])}</div>' for r in results[:2])


def draw_table(results: list[dict[str, Any]], needs_gpu: bool) -> str:
    if not results:
        return f'<div class="none">no data{" (needs a GPU: opgate_gpu_info)" if needs_gpu else ""}</div>'
    keys = sorted({k for r in results for k in r["metric"] if k not in ("__name__", "job")})
    head = "".join(f"<th>{html.escape(k)}</th>" for k in keys) + "<th>value</th>"
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(r['metric'].get(k, ''))}</td>" for k in keys)
                   + f"<td>{number(r['value'][1])}</td></tr>" for r in results[:8])
    more = f'<div class="more">+{len(results) - 8} more</div>' if len(results) > 8 else ""
    return f"<table><tr>{head}</tr>{rows}</table>{more}"


def draw_timeseries(results: list[dict[str, Any]], start_s: float, end_s: float, width: int, height: int) -> str:
    points = [(float(t), float(v)) for r in results for t, v in r["values"]]
    if not points:
        return '<div class="none">no data</div>'
    low, high = min(v for _, v in points), max(v for _, v in points)
    span = (high - low) or max(abs(high), 1.0)
    plot_h = height - 18 * min(len(results), 4) - 10
    palette = ["#1f78c1", "#e24d42", "#6ed0e0", "#ef843c", "#629e51", "#ba43a9", "#cca300", "#447ebc"]

    def xy(t: float, v: float) -> str:
        x = (t - start_s) / (end_s - start_s) * (width - 60) + 50
        return f"{x:.1f},{plot_h - (v - low) / span * (plot_h - 10):.1f}"

    lines, legend = [], []
    for k, r in enumerate(results[:8]):
        colour = palette[k % len(palette)]
        lines.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.6" points="'
                     + " ".join(xy(float(t), float(v)) for t, v in r["values"]) + '"/>')
        if k < 4:
            legend.append(f'<div class="legend"><span style="background:{colour}"></span>'
                          f'{html.escape(series_label(r["metric"]))[:90]}</div>')
    more = f'<div class="more">+{len(results) - 4} more series</div>' if len(results) > 4 else ""
    axis = (f'<text x="2" y="12">{number(str(high))}</text><text x="2" y="{plot_h}">{number(str(low))}</text>')
    return (f'<svg width="{width}" height="{plot_h + 4}">{axis}{"".join(lines)}</svg>' + "".join(legend) + more)


def draw_status(results: list[dict[str, Any]], start_s: float, end_s: float, width: int) -> str:
    if not results:
        return '<div class="none">no data</div>'
    rows = []
    for r in results[:10]:
        cells = []
        values = [(float(t), float(v)) for t, v in r["values"]]
        for (t, v), (t_next, _) in zip(values, values[1:] + [(end_s, 0.0)]):
            left = (t - start_s) / (end_s - start_s) * 100
            share = (t_next - t) / (end_s - start_s) * 100
            cells.append(f'<div class="cell" style="left:{left:.2f}%;width:{share:.2f}%;'
                         f'background:{OUTCOME_COLOURS.get(int(v), "#555")}"></div>')
        rows.append(f'<div class="srow"><div class="sname">{html.escape(series_label(r["metric"]))[:48]}</div>'
                    f'<div class="sbar">{"".join(cells)}</div></div>')
    more = f'<div class="more">+{len(results) - 10} more</div>' if len(results) > 10 else ""
    key = "".join(f'<span class="key" style="background:{OUTCOME_COLOURS[v]}"></span>{name} '
                  for v, name in ((0, "passed"), (1, "warned"), (2, "failed"), (3, "error"), (-1, "skipped")))
    return "".join(rows) + more + f'<div class="more">{key}</div>'


def page_height(board: dict[str, Any]) -> int:
    """The page's height in pixels: the lowest panel's bottom edge."""
    return max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in board["panels"]) * ROW_PX + 90


def render(board: dict[str, Any], prometheus: str, start_s: float, end_s: float, step_s: int, note: str) -> str:
    panels = []
    height = 0
    for panel in board["panels"]:
        grid = panel["gridPos"]
        left, top = grid["x"] / 24 * WIDTH_PX, grid["y"] * ROW_PX + 70
        width, tall = grid["w"] / 24 * WIDTH_PX - 8, grid["h"] * ROW_PX - 8
        height = max(height, top + tall)
        results: list[dict[str, Any]] = []
        ranged = panel["type"] in ("timeseries", "status-history")
        for target in panel.get("targets", []):
            query = concrete(target["expr"], step_s)
            if ranged:
                url = f"{prometheus}/api/v1/query_range?" + urllib.parse.urlencode(
                    {"query": query, "start": start_s, "end": end_s, "step": step_s})
            else:
                url = f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": query, "time": end_s})
            results += get_json(url)["data"]["result"]
        if panel["type"] == "stat":
            body = draw_stat(results)
        elif panel["type"] == "table":
            needs_gpu = any("opgate_gpu_info" in t["expr"] for t in panel.get("targets", []))
            body = draw_table(results, needs_gpu)
        elif panel["type"] == "status-history":
            body = draw_status(results, start_s, end_s, int(width))
        else:
            body = draw_timeseries(results, start_s, end_s, int(width) - 10, int(tall) - 30)
        panels.append(f'<div class="panel" style="left:{left:.0f}px;top:{top:.0f}px;width:{width:.0f}px;'
                      f'height:{tall:.0f}px"><div class="title">{html.escape(panel["title"])}</div>{body}</div>')
    style = """body{margin:0;background:#111217;color:#ccccdc;font:12px sans-serif}
.head{position:absolute;left:8px;top:8px}.head h1{font-size:18px;margin:0 0 4px}.head p{margin:0;color:#8e8e9e}
.panel{position:absolute;background:#181b1f;border:1px solid #2c3235;border-radius:2px;padding:4px 6px;
overflow:hidden;box-sizing:border-box}.title{font-weight:600;margin-bottom:4px}
.stat{font-size:38px;font-weight:600;color:#73bf69}.none{color:#8e8e9e;padding-top:10px}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #2c3235;padding:2px 4px;text-align:left;
white-space:nowrap}.legend span{display:inline-block;width:10px;height:3px;margin-right:4px;vertical-align:middle}
.more{color:#8e8e9e}svg text{fill:#8e8e9e;font-size:10px}.srow{display:flex;height:16px;margin:2px 0}
.sname{width:38%;overflow:hidden;white-space:nowrap}.key{display:inline-block;width:10px;height:10px;margin:0 3px}
.sbar{position:relative;flex:1}.cell{position:absolute;top:1px;height:13px}"""
    return (f"<!doctype html><html><head><meta charset='utf-8'><style>{style}</style></head><body>"
            f"<div class='head'><h1>{html.escape(board['title'])}</h1><p>{html.escape(note)}</p></div>"
            f"{''.join(panels)}<div style='position:absolute;top:{height + 10:.0f}px;height:1px'></div></body></html>")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=150, help="how long Prometheus records before the picture")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between opgate serve's doctor runs")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "dashboard.png")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    from opgate.reporting.browser import browser_missing, headless_chromium, screenshot

    prometheus_bin = shutil.which("prometheus")
    missing = None if prometheus_bin else "prometheus (Debian package prometheus)"
    missing = missing or browser_missing()
    if missing:
        print(f"dashboard_screenshot: cannot run without {missing}", file=sys.stderr)
        return 2
    board = json.loads(DASHBOARD.read_text())
    with tempfile.TemporaryDirectory(prefix="opgate-dashboard-") as tmp:
        work = Path(tmp)
        serve_port, prom_port = free_port(), free_port()
        env_python = [sys.executable, "-m", "opgate", "serve", "--host", "127.0.0.1", "--port", str(serve_port),
                      "--interval", str(args.interval)]
        config = {"global": {"scrape_interval": "2s", "evaluation_interval": "2s"}, "rule_files": [str(RULES)],
                  "scrape_configs": [{"job_name": "opgate", "static_configs": [
                      {"targets": [f"127.0.0.1:{serve_port}"]}]}]}
        (work / "prometheus.yml").write_text(json.dumps(config))
        os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
        serve = start(env_python, work / "serve.log")
        prometheus = start([prometheus_bin, f"--config.file={work / 'prometheus.yml'}",
                            f"--storage.tsdb.path={work / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}",
                            "--log.level=warn"], work / "prometheus.log")
        url = f"http://127.0.0.1:{prom_port}"
        try:
            began = time.time()
            time.sleep(args.seconds)
            end = time.time()
            note = (f"Drawn by scripts/dashboard_screenshot.py, not by Grafana: each panel's own queries against a "
                    f"real Prometheus that scraped a real `opgate serve` (the basic doctor every {args.interval:g} s)"
                    f" on this machine for {args.seconds} s. No GPU here: the GPU panels have no data.")
            page = work / "dashboard.html"
            page.write_text(render(board, url, began, end, 2, note))
            with headless_chromium(WIDTH_PX, page_height(board)) as driver:
                screenshot(driver, page, args.out)
        finally:
            stop(serve)
            stop(prometheus)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
