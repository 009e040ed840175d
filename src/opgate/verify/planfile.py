"""The hand-off from the parent to an implementation's child process: the cases, their float64 truth
and their calibrated budgets for one op x dtype, computed once in the parent and read by every
implementation of that op x dtype (torch.save, loaded with weights_only=True: tensors and plain data).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opgate.verify.calibrate import OutputBudget
from opgate.verify.inputs import Case

FORMAT = 1


@dataclass
class PlanFile:
    op: str
    dtype: str
    budget: str  # the budget name (quick | standard | thorough)
    base_seed: int
    cases: list[Case]
    truths: list[list[Any]]  # [case][output] float64 (or integer) tensors
    budgets: list[list[OutputBudget]]  # [case][output]
    masks: list[list[Any]]  # [case][output] baseline non-finite mask or None
    out_dtypes: list[str]
    pooled_rmse: list[float]
    pooled_quantile: list[float]
    n_calibration_cases: int
    summary: dict[str, Any] = field(default_factory=dict)

    def save(self, path: Path) -> None:
        import torch

        torch.save({
            "format": FORMAT, "op": self.op, "dtype": self.dtype, "budget": self.budget, "base_seed": self.base_seed,
            "cases": [c.to_dict() for c in self.cases], "truths": self.truths,
            "budgets": [[b.to_dict() for b in row] for row in self.budgets], "masks": self.masks,
            "out_dtypes": self.out_dtypes, "pooled_rmse": self.pooled_rmse, "pooled_quantile": self.pooled_quantile,
            "n_calibration_cases": self.n_calibration_cases, "summary": self.summary,
        }, str(path))

    @classmethod
    def load(cls, path: Path) -> "PlanFile":
        import torch

        data = torch.load(str(path), weights_only=True)
        if data.get("format") != FORMAT:
            raise ValueError(f"plan file {path} has format {data.get('format')!r}, expected {FORMAT}")
        return cls(
            op=data["op"], dtype=data["dtype"], budget=data["budget"], base_seed=int(data["base_seed"]),
            cases=[Case.from_dict(c) for c in data["cases"]], truths=data["truths"],
            budgets=[[OutputBudget.from_dict(b) for b in row] for row in data["budgets"]], masks=data["masks"],
            out_dtypes=list(data["out_dtypes"]), pooled_rmse=list(data["pooled_rmse"]),
            pooled_quantile=list(data["pooled_quantile"]), n_calibration_cases=int(data["n_calibration_cases"]),
            summary=dict(data["summary"]),
        )
