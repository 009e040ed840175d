"""Replay tokens: one failing case, compact enough to paste into a bug report.

`ogv1.` + base64url(JSON {o: op, i: implementation, t: dtype, d: dims, s: case seed, r: regime,
l: layout, b: budget, p: plan seed}). The budget and plan seed let `--replay` rebuild the same
calibration, so the case is judged against exactly the budget it failed.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

from opgate.model.errors import InputError
from opgate.verify.inputs import Case

PREFIX = "ogv1."


@dataclass(frozen=True)
class ReplayToken:
    op: str
    impl: str
    dtype: str
    case: Case
    budget: str
    plan_seed: int

    def encode(self) -> str:
        payload = {"o": self.op, "i": self.impl, "t": self.dtype, "d": self.case.dims_dict, "s": self.case.seed,
                   "r": self.case.regime, "l": self.case.layout, "b": self.budget, "p": self.plan_seed}
        raw = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
        return PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, token: str) -> "ReplayToken":
        token = token.strip()
        hint = "copy the whole token from the failing result (it starts with ogv1.)"
        if not token.startswith(PREFIX):
            raise InputError(f"--replay {token[:24]!r} is not an opgate verify replay token; {hint}")
        body = token[len(PREFIX):]
        try:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            data = json.loads(raw)
            case = Case.from_dict({"dims": data["d"], "seed": data["s"], "regime": data["r"], "layout": data["l"],
                                   "origin": "replay"})
            return cls(str(data["o"]), str(data["i"]), str(data["t"]), case, str(data["b"]), int(data["p"]))
        except (binascii.Error, ValueError, KeyError, TypeError, UnicodeDecodeError):
            raise InputError(f"--replay token is damaged (it does not decode); {hint}") from None
