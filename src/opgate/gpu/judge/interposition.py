"""Pure judging of the symbol-interposition probe's JSON (opgate.probes.interposition): every key CUDA entry point
served by something other than the vendor library is a finding. The doctor's `doctor.interposition` check
(opgate.doctor.interposition) runs the probe and calls it."""

from __future__ import annotations

from typing import Any, Mapping

from opgate.model.results import Figure, Outcome, slug


def judge_providers(report: Mapping[str, Any]) -> tuple[Outcome, list[str], list[Figure]]:
    """Pure judgement of the probe's JSON: every provider that is not the vendor library fails."""
    from opgate.probes.interposition import how_it_got_there, is_vendor_provider

    findings, figures = [], []
    for symbol, provider in report["providers"].items():
        if provider is None:
            figures.append(Figure(symbol, "not provided (library not installed)", key=f"interposition.{slug(symbol)}"))
            continue
        figures.append(Figure(symbol, provider, key=f"interposition.{slug(symbol)}"))
        if not is_vendor_provider(symbol, provider):
            how = how_it_got_there(provider, report.get("ld_preload", []), report.get("preload_file", []))
            findings.append(f"{symbol} is provided by {provider} via {how}")
    return (Outcome.FAILED if findings else Outcome.PASSED), findings, figures
