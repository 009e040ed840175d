"""An operator with one correct implementation and one that kills its own process."""

import os

import opgate

double = opgate.Operator(
    "double",
    reference=lambda x: x * 2,
    inputs=[opgate.TensorSpec("x", ("N",))],
    dims={"N": [64]},
    dtypes=["float32"],
)


@double.implementation("torch")
def double_torch(x):
    return x + x


@double.implementation("crashes", backend="torch")
def double_crashes(x):
    os.abort()  # SIGABRT, as a segfaulting extension would die
