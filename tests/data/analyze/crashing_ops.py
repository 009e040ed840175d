"""A launcher that kills its process, as a compiler crash would: `opgate analyze` must report it and go on."""

from __future__ import annotations

import os
import sys

import opgate

crash = opgate.Operator("crash", reference=lambda x: x, inputs=[opgate.TensorSpec("x", (16,))])


@crash.implementation("triton")
def crash_triton(x):
    print("simulated compiler crash", file=sys.stderr, flush=True)
    os._exit(7)
