"""A spec whose reference is slow on purpose (a sleep per call), so each dtype's calibration takes seconds: the
overlap test (tests/verify/test_verify_overlap.py) sees the first dtype's numerics start while the next dtype
still calibrates."""

import time

import torch

import opgate


def _slow_relu(x):
    time.sleep(0.01)
    return torch.relu(x)


relu = opgate.Operator(
    "slow_relu",
    reference=_slow_relu,
    inputs=[opgate.TensorSpec("x", ("M", "N"))],
    dims={"M": [4], "N": [16]},
    dtypes=["float32", "float16"],
)


@relu.implementation("torch", backend="torch")
def _torch(x):
    return torch.relu(x)
