#!/usr/bin/env python3
"""opgate's comparator on an external suite: the ONNX backend node tests.

For every node test case the onnx package generates (`onnx.backend.test.case.node.collect_testcases`), the
model runs in ONNX Runtime (the candidate, CPU provider) and in `onnx.reference.ReferenceEvaluator` (a second,
independent implementation of the same meaning in the same dtype). The expected outputs stored with the test
are the truth. Two verdicts per float output:

- ONNX's rule: `np.testing.assert_allclose(ort, expected, rtol, atol)` with the test's tolerance (default
  rtol 1e-3, atol 1e-7), one fixed tolerance for every dtype;
- opgate's rule, calibrated as `opgate verify` does: ORT passes when its RMSE and p99.9 error against the truth
  stay within 2x the ReferenceEvaluator's own error in that dtype, or within the per-dtype floor
  (FLOOR_EPS x eps x the truth's magnitude), whichever is larger; NaN/Inf where the truth is finite fails.
Integer, bool and string outputs are compared exactly by both rules.

    PYTHONPATH=src python scripts/onnx_conformance.py [--json OUT] [--limit N]
Prints a summary table and every disagreement with the numbers that explain it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from collections import Counter
from typing import Any

import numpy as np

from opgate.verify.calibrate import FLOOR_EPS, K_QUANTILE, K_RMSE

DTYPE_NAMES = {np.dtype(np.float64): "float64", np.dtype(np.float32): "float32", np.dtype(np.float16): "float16"}


def error_stats(candidate: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    cand = candidate.astype(np.float64)
    true = truth.astype(np.float64)
    finite = np.isfinite(true)
    unexpected = int(np.sum(finite & ~np.isfinite(cand)))
    missed = int(np.sum(~finite & ~((np.isnan(true) & np.isnan(cand)) | (true == cand))))
    both = finite & np.isfinite(cand)
    err = np.abs(cand[both] - true[both])
    mag = np.abs(true[both])
    return {
        "rmse": float(np.sqrt(np.mean(err**2))) if err.size else 0.0,
        "p999": float(np.quantile(err, 0.999)) if err.size else 0.0,
        "max_abs": float(err.max()) if err.size else 0.0,
        "truth_rms": float(np.sqrt(np.mean(mag**2))) if mag.size else 0.0,
        "truth_p999": float(np.quantile(mag, 0.999)) if mag.size else 0.0,
        "nonfinite_unexpected": unexpected,
        "nonfinite_missed": missed,
    }


def opgate_rule(ort: np.ndarray, ref: np.ndarray, truth: np.ndarray) -> tuple[bool, dict[str, Any]]:
    if ort.shape != truth.shape:
        return False, {"problem": f"shape {ort.shape} vs {truth.shape}"}
    if ref.shape != truth.shape:  # the second reference disagrees on shape: judge by the floor alone
        ref = truth
    dtype = DTYPE_NAMES.get(truth.dtype)
    cand, base = error_stats(ort, truth), error_stats(ref, truth)
    if dtype is None:  # bfloat16 and others: numpy has no eps; use float32's
        dtype = "float32"
    eps = float(np.finfo(np.float32 if dtype not in DTYPE_NAMES.values() else dtype).eps)
    floor_rmse = FLOOR_EPS[dtype] * eps * cand["truth_rms"]
    floor_q = FLOOR_EPS[dtype] * eps * cand["truth_p999"]
    budget_rmse = max(K_RMSE * base["rmse"], floor_rmse)
    budget_q = max(K_QUANTILE * base["p999"], floor_q)
    ok = (cand["nonfinite_unexpected"] == 0 and cand["nonfinite_missed"] <= base["nonfinite_missed"]
          and cand["rmse"] <= budget_rmse and cand["p999"] <= budget_q)
    return ok, {"dtype": dtype, "ort": cand, "reference_evaluator": base, "budget_rmse": budget_rmse,
                "budget_p999": budget_q}


def onnx_rule(ort: np.ndarray, truth: np.ndarray, rtol: float, atol: float) -> bool:
    try:
        np.testing.assert_allclose(ort, truth, rtol=rtol, atol=atol)
    except AssertionError:
        return False
    return True


def exact(a: np.ndarray, b: np.ndarray) -> bool:
    try:
        return bool(np.array_equal(np.asarray(a), np.asarray(b)))
    except Exception:  # noqa: BLE001 - ragged or object outputs
        return False


def explain(row: dict[str, Any]) -> str:
    d = row["detail"]
    if "problem" in d:
        return d["problem"]
    o, r = d["ort"], d["reference_evaluator"]
    return (f"ORT rmse {o['rmse']:.3g} / p99.9 {o['p999']:.3g} / max {o['max_abs']:.3g} vs budget {d['budget_rmse']:.3g} / "
            f"{d['budget_p999']:.3g} (ReferenceEvaluator's own rmse {r['rmse']:.3g}, truth rms {o['truth_rms']:.3g}); "
            f"ONNX rtol {row['rtol']:g} atol {row['atol']:g}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    parser.add_argument("--limit", type=int, default=0)
    args = parser.parse_args()
    import onnxruntime as ort
    from onnx.backend.test.case.node import collect_testcases
    from onnx.reference import ReferenceEvaluator

    ort.set_default_logger_severity(3)
    cases = collect_testcases()
    if args.limit:
        cases = cases[: args.limit]
    started = time.perf_counter()
    counts: Counter[str] = Counter()
    rows: list[dict[str, Any]] = []
    for case in cases:
        model = case.model
        for index, (inputs, expected) in enumerate(case.data_sets):
            name = f"{case.name}[{index}]"
            feeds = {i.name: v for i, v in zip(model.graph.input, inputs)}
            try:
                session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
                ort_out = session.run(None, feeds)
            except Exception as exc:  # noqa: BLE001 - an op/opset ORT does not implement is a category
                counts["ORT cannot run the model"] += 1
                rows.append({"case": name, "category": "ort_error", "error": str(exc).splitlines()[0][:200]})
                continue
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    ref_out = ReferenceEvaluator(model).run(None, feeds)
            except Exception as exc:  # noqa: BLE001
                counts["ReferenceEvaluator cannot run the model"] += 1
                rows.append({"case": name, "category": "ref_error", "error": str(exc).splitlines()[0][:200]})
                continue
            for k, (got, ref, truth) in enumerate(zip(ort_out, ref_out, expected)):
                row: dict[str, Any] = {"case": f"{name}.out{k}", "rtol": case.rtol, "atol": case.atol}
                if isinstance(truth, (list, tuple)) or isinstance(got, (list, tuple)):
                    # Sequence outputs: each element judged by both rules; all must pass.
                    pairs = list(zip(got, ref, truth)) if len(got) == len(truth) else []
                    both = [(opgate_rule(np.asarray(g), np.asarray(r), np.asarray(t))[0]
                             if np.asarray(t).dtype.kind == "f" else exact(g, t),
                             onnx_rule(np.asarray(g), np.asarray(t), case.rtol, case.atol)
                             if np.asarray(t).dtype.kind == "f" else exact(g, t)) for g, r, t in pairs]
                    row.update(category="sequence", opgate=bool(pairs) and all(a for a, _ in both),
                               onnx=bool(pairs) and all(b for _, b in both))
                    verdict = ("both pass" if row["opgate"] and row["onnx"] else "both fail"
                               if not (row["opgate"] or row["onnx"]) else
                               "opgate passes, ONNX fails" if row["opgate"] else "opgate fails, ONNX passes")
                    row["verdict"] = verdict
                    counts[verdict] += 1
                    rows.append(row)
                    continue
                got, ref, truth = np.asarray(got), np.asarray(ref), np.asarray(truth)
                if got.shape != truth.shape:
                    row.update(category="shape mismatch", opgate=False, onnx=False)
                elif truth.dtype.kind in "fc" and truth.dtype.kind != "c":
                    ok, detail = opgate_rule(got, ref if ref.shape == truth.shape else truth, truth)
                    row.update(category="float", opgate=ok, onnx=onnx_rule(got, truth, case.rtol, case.atol),
                               detail=detail)
                else:
                    same = exact(got, truth)
                    row.update(category="exact", opgate=same, onnx=same)
                verdict = ("both pass" if row["opgate"] and row["onnx"] else "both fail" if not (row["opgate"] or row["onnx"])
                           else "opgate passes, ONNX fails" if row["opgate"] else "opgate fails, ONNX passes")
                row["verdict"] = verdict
                counts[verdict] += 1
                rows.append(row)
    elapsed = time.perf_counter() - started
    print(f"ONNX backend node tests: {len(cases)} test cases, {sum(1 for r in rows if 'verdict' in r)} outputs compared, "
          f"{elapsed:.0f} s")
    print("| outcome | outputs |\n|---|---|")
    for key, value in counts.most_common():
        print(f"| {key} | {value} |")
    disagreements = [r for r in rows if r.get("verdict", "").startswith("opgate") or r.get("verdict") == "both fail"]
    print("\nDisagreements and shared failures:")
    for row in disagreements:
        why = explain(row) if "detail" in row else f"{row['category']} output"
        print(f"- {row['case']}: {row['verdict']}: {why}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"counts": counts, "rows": rows, "seconds": elapsed}, handle, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
