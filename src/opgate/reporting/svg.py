"""Inline SVG charts drawn in Python: no JavaScript library, no network, nothing to load.

Three shapes cover the report: a scatter/line chart (log or linear axes, reference lines, failures marked),
horizontal bands (a measured figure against its threshold), and a verdict matrix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape
from typing import Sequence

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")
STATUS_COLOURS = {"native": "#2e7d32", "passed": "#2e7d32", "jit": "#f9a825", "warned": "#f9a825",
                  "unsupported": "#c62828", "failed": "#c62828", "error": "#6a1b9a", "skipped": "#9e9e9e"}


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    failed: bool = False
    tip: str = ""


@dataclass
class Series:
    name: str
    points: list[Point] = field(default_factory=list)
    line: bool = False  # join the points (a calculator curve) instead of dots
    tick: bool = False  # a short horizontal dash per point (a per-case budget)


@dataclass(frozen=True)
class RefLine:
    y: float
    label: str


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1e4 or abs(value) < 1e-2:
        return f"{value:.0e}"
    return f"{value:.3g}"


class _Axis:
    def __init__(self, values: Sequence[float], log: bool, lo_px: float, hi_px: float) -> None:
        finite = [v for v in values if math.isfinite(v) and (v > 0 or not log)]
        self.log = log and bool(finite)
        if not finite:
            finite = [0.0, 1.0]
        lo, hi = min(finite), max(finite)
        if self.log:
            lo, hi = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
            if lo == hi:
                lo, hi = lo - 1, hi + 1
        else:
            lo = min(lo, 0.0)
            if hi == lo:
                hi = lo + 1.0
            hi = hi * 1.08 if hi > 0 else hi + 1
        self.lo, self.hi, self.lo_px, self.hi_px = lo, hi, lo_px, hi_px

    def px(self, value: float) -> float:
        if self.log:
            value = math.log10(max(value, 10.0 ** self.lo))
        return self.lo_px + (value - self.lo) / (self.hi - self.lo) * (self.hi_px - self.lo_px)

    def ticks(self) -> list[float]:
        if self.log:
            return [10.0 ** e for e in range(int(self.lo), int(self.hi) + 1)]
        return [self.lo + (self.hi - self.lo) * i / 4 for i in range(5)]


def scatter_chart(title: str, series: Sequence[Series], x_label: str, y_label: str, log_x: bool = False,
                  log_y: bool = False, ref_lines: Sequence[RefLine] = (), chart_id: str = "") -> str:
    width, height, left, right, top, bottom = 640, 340, 70, 170, 30, 45
    xs = [p.x for s in series for p in s.points]
    ys = [p.y for s in series for p in s.points] + [r.y for r in ref_lines]
    x_axis = _Axis(xs, log_x, left, width - right)
    y_axis = _Axis(ys, log_y, height - bottom, top)
    out = [f'<svg class="chart" id="{escape(chart_id)}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} '
           f'{height}" width="{width}" height="{height}" role="img" aria-label="{escape(title)}">',
           f'<text x="{left}" y="18" class="title">{escape(title)}</text>',
           f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{height - top - bottom}" '
           'class="frame"/>']
    for tick in x_axis.ticks():
        x = x_axis.px(tick)
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{height - bottom}" class="grid"/>'
                   f'<text x="{x:.1f}" y="{height - bottom + 14}" class="tick" text-anchor="middle">{_fmt(tick)}</text>')
    for tick in y_axis.ticks():
        y = y_axis.px(tick)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" class="grid"/>'
                   f'<text x="{left - 4}" y="{y + 4:.1f}" class="tick" text-anchor="end">{_fmt(tick)}</text>')
    out.append(f'<text x="{(left + width - right) / 2}" y="{height - 8}" class="axis" text-anchor="middle">'
               f'{escape(x_label)}</text>')
    out.append(f'<text x="14" y="{(top + height - bottom) / 2}" class="axis" text-anchor="middle" '
               f'transform="rotate(-90 14 {(top + height - bottom) / 2})">{escape(y_label)}</text>')
    for ref in ref_lines:
        y = y_axis.px(ref.y)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" class="ref"/>'
                   f'<text x="{width - right - 4}" y="{y - 4:.1f}" class="tick" text-anchor="end">'
                   f'{escape(ref.label)}</text>')
    for index, one in enumerate(series):
        colour = PALETTE[index % len(PALETTE)]
        points = sorted(one.points, key=lambda p: (p.x, p.y)) if one.line else one.points
        if one.line and len(points) > 1:
            path = " ".join(f"{x_axis.px(p.x):.1f},{y_axis.px(p.y):.1f}" for p in points)
            out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.5" '
                       'stroke-dasharray="5 3"/>')
        else:
            for p in points:
                x, y = x_axis.px(p.x), y_axis.px(p.y)
                tip = f"<title>{escape(p.tip)}</title>" if p.tip else ""
                if one.tick:
                    out.append(f'<line x1="{x - 6:.1f}" y1="{y:.1f}" x2="{x + 6:.1f}" y2="{y:.1f}" stroke="{colour}" '
                               f'stroke-width="2">{tip}</line>')
                elif p.failed:
                    out.append(f'<g class="fail-mark"><path d="M{x - 5:.1f},{y - 5:.1f} L{x + 5:.1f},{y + 5:.1f} '
                               f'M{x - 5:.1f},{y + 5:.1f} L{x + 5:.1f},{y - 5:.1f}" stroke="#c62828" '
                               f'stroke-width="2.5"/>{tip}</g>')
                else:
                    out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{colour}" fill-opacity="0.8">'
                               f'{tip}</circle>')
        legend_y = top + 14 + index * 16
        out.append(f'<rect x="{width - right + 10}" y="{legend_y - 9}" width="10" height="10" fill="{colour}"/>'
                   f'<text x="{width - right + 24}" y="{legend_y}" class="tick">{escape(one.name[:24])}</text>')
    if any(p.failed for s in series for p in s.points):
        legend_y = top + 14 + len(series) * 16
        out.append(f'<text x="{width - right + 10}" y="{legend_y}" class="tick" fill="#c62828">x = failed case</text>')
    out.append("</svg>")
    return "".join(out)


@dataclass(frozen=True)
class Band:
    label: str
    value: float
    threshold: float
    comparison: str
    passed: bool
    unit: str = ""


def band_chart(title: str, bands: Sequence[Band], chart_id: str = "") -> str:
    """One row per figure: the measured bar against its threshold marker, each row on its own scale."""
    row_h, left, bar_w = 26, 330, 260
    width, height = left + bar_w + 110, 30 + row_h * len(bands)
    out = [f'<svg class="chart" id="{escape(chart_id)}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} '
           f'{height}" width="{width}" height="{height}" role="img" aria-label="{escape(title)}">',
           f'<text x="4" y="18" class="title">{escape(title)}</text>']
    for index, band in enumerate(bands):
        y = 28 + index * row_h
        scale = max(abs(band.value), abs(band.threshold), 1e-30) * 1.25
        bar = bar_w * abs(band.value) / scale
        mark = left + bar_w * abs(band.threshold) / scale
        colour = STATUS_COLOURS["passed" if band.passed else "failed"]
        tip = escape(f"{band.label}: {band.value:g} {band.unit}")
        out.append(f'<text x="{left - 6}" y="{y + 14}" class="tick" text-anchor="end">{escape(band.label[:52])}</text>'
                   f'<rect x="{left}" y="{y + 3}" width="{bar:.1f}" height="16" fill="{colour}" fill-opacity="0.75">'
                   f'<title>{tip}</title></rect>'
                   f'<line x1="{mark:.1f}" y1="{y}" x2="{mark:.1f}" y2="{y + 22}" class="ref"/>'
                   f'<text x="{left + bar_w + 6}" y="{y + 14}" class="tick">{_fmt(band.value)} {escape(band.unit)} '
                   f'({escape(band.comparison)} {_fmt(band.threshold)})</text>')
    out.append("</svg>")
    return "".join(out)


def matrix_chart(title: str, rows: Sequence[str], columns: Sequence[str], cells: dict[tuple[str, str], str],
                 chart_id: str = "") -> str:
    """A coloured cell per row x column with its status word (inspect: binary x target verdicts)."""
    cell_w, cell_h, left, top = 92, 24, min(360, 12 + 7 * max((len(r) for r in rows), default=8)), 46
    width, height = left + cell_w * len(columns) + 10, top + cell_h * len(rows) + 10
    out = [f'<svg class="chart" id="{escape(chart_id)}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} '
           f'{height}" width="{width}" height="{height}" role="img" aria-label="{escape(title)}">',
           f'<text x="4" y="18" class="title">{escape(title)}</text>']
    for c, column in enumerate(columns):
        out.append(f'<text x="{left + c * cell_w + cell_w / 2}" y="{top - 8}" class="tick" text-anchor="middle">'
                   f'{escape(column)}</text>')
    for r, row in enumerate(rows):
        y = top + r * cell_h
        out.append(f'<text x="{left - 6}" y="{y + 16}" class="tick" text-anchor="end">{escape(row[-50:])}</text>')
        for c, column in enumerate(columns):
            status = cells.get((row, column), "")
            colour = STATUS_COLOURS.get(status, "#eeeeee")
            x = left + c * cell_w
            tip = escape(f"{row} on {column}: {status or 'n/a'}")
            out.append(f'<rect x="{x + 1}" y="{y + 1}" width="{cell_w - 2}" height="{cell_h - 2}" fill="{colour}">'
                       f'<title>{tip}</title></rect>'
                       f'<text x="{x + cell_w / 2}" y="{y + 16}" class="cell" text-anchor="middle">'
                       f'{escape(status)}</text>')
    out.append("</svg>")
    return "".join(out)
