"""Explain CUDA error codes from data/cuda_errors.toml: what happened, is the context lost, what next."""

from __future__ import annotations

import re
from dataclasses import dataclass

from opgate.data import load_table


@dataclass(frozen=True)
class CudaErrorInfo:
    code: int
    name: str
    meaning: str
    sticky: bool  # the context is lost: the process must restart
    action: str
    source: str

    def one_line(self) -> str:
        lost = " The CUDA context is lost; the process must be restarted." if self.sticky else ""
        return f"CUDA error {self.code} ({self.name}): {self.meaning}.{lost} Next: {self.action}."


def cuda_error_table() -> dict[int, CudaErrorInfo]:
    return {
        int(row["code"]): CudaErrorInfo(int(row["code"]), row["name"], row["meaning"], bool(row["sticky"]),
                                        row["action"], row["source"])
        for row in load_table("cuda_errors")
    }


def explain_cuda_error(code: int) -> CudaErrorInfo | None:
    """The table's entry for `code`, or None when opgate has no explanation for it."""
    return cuda_error_table().get(int(code))


_CODE_IN_TEXT = re.compile(r"\b(?:error|code|status)[ =:(]*(\d{1,4})\b", re.IGNORECASE)
_NAME_IN_TEXT = re.compile(r"\b(cudaError\w+|CUDA_ERROR_\w+)\b")


def cuda_error_code_in(text: str) -> int | None:
    """Find a CUDA error code in an exception message or log line ("cudaErrorIllegalAddress",
    "CUDA_ERROR_ILLEGAL_ADDRESS", "(error 700)"); None when there is none."""
    table = cuda_error_table()
    by_name = {info.name.lower(): code for code, info in table.items()}
    for match in _NAME_IN_TEXT.finditer(text):
        name = match.group(1)
        if name.lower() in by_name:
            return by_name[name.lower()]
        if name.startswith("CUDA_ERROR_"):
            camel = "cudaError" + "".join(part.capitalize() for part in name[len("CUDA_ERROR_"):].split("_"))
            if camel.lower() in by_name:
                return by_name[camel.lower()]
    match = _CODE_IN_TEXT.search(text)
    return int(match.group(1)) if match else None
