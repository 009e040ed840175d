"""Per-verb renderers: what a report of one verb shows beyond what every report shows, registered by the verb.

The reporters (terminal, HTML, Markdown, the run history, the replay line) render every report the same way and
ask the report's verb for the rest: its terminal summary, its charts, extra HTML sections, the Markdown table, the
subject its runs are compared by, the command that re-runs one of its checks. A verb's package declares one
`VerbRenderers` under the `opgate.report.renderers` entry-point group (name: the verb, as `RunReport.verb` says it;
value: "module:OBJECT"), exactly as a check is declared, so a third-party verb or plugin adds its own without
touching opgate; `"fleet"` serves "fleet doctor" too (a verb's first word, when the whole has none). A field left
None, or a verb with nothing registered, gets the rendering every report gets, which each reporter keeps beside its
use of the field (terminal.render_summary, charts.charts_for, html.render_html, markdown, history.subject_of,
replay.replay_command).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Callable, Optional

from opgate.engine.plugins import RENDERERS_GROUP, entry_points, load
from opgate.model.results import CheckResult, RunReport

if TYPE_CHECKING:
    from rich.console import Console

Chart = tuple[str, str, str]  # (id, caption, inline SVG)
HtmlSection = tuple[str, str, str]  # (id, heading, HTML body: escaped by whoever builds it)


@dataclass(frozen=True)
class MarkdownTable:
    """The Markdown summary's table: its head lines and rows; `carries_reasons` False when its rows say no reason,
    so the summary lists the skipped checks by reason below it."""

    head: tuple[str, ...]
    rows: tuple[str, ...]
    carries_reasons: bool = True


@dataclass(frozen=True)
class VerbRenderers:
    """What one verb renders its own way; None: the generic rendering (opgate.reporting.terminal's summary, the
    figures-against-thresholds chart, no extra HTML section, one Markdown row per check, the host as the history
    subject, `opgate VERB` as the replay line)."""

    terminal: Optional[Callable[[RunReport, "Console", bool], None]] = None  # (report, console, verbose)
    charts: Optional[Callable[[RunReport], list[Chart]]] = None
    html_sections: Optional[Callable[[RunReport], list[HtmlSection]]] = None  # after the charts
    markdown_table: Optional[Callable[[RunReport], MarkdownTable]] = None
    history_subject: Optional[Callable[[RunReport], str]] = None  # what runs of the same thing share
    replay_command: Optional[Callable[[RunReport, CheckResult], str]] = None  # re-runs just that check


GENERIC = VerbRenderers()


@lru_cache(maxsize=None)
def renderers_for(verb: str) -> VerbRenderers:
    """The renderers registered for `verb` (else for its first word), or GENERIC."""
    declared = entry_points(RENDERERS_GROUP)
    target = declared.get(verb) or declared.get(verb.split(" ", 1)[0])
    if target is None:
        return GENERIC
    renderers = load(target)
    if not isinstance(renderers, VerbRenderers):
        raise TypeError(f"the {RENDERERS_GROUP} entry point {verb!r} = {target!r} is a {type(renderers).__name__}, "
                        "not an opgate.reporting.renderers.VerbRenderers")
    return renderers
