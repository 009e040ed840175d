"""A correct operator whose implementation sleeps, so a run can be interrupted mid-way (SIGINT tests)."""
import time

import opgate

double = opgate.Operator(
    "double",
    reference=lambda x: x * 2,
    inputs=[opgate.TensorSpec("x", ("N",))],
    dims={"N": [8]},
    dtypes=["float32"],
)


@double.implementation("torch")
def double_torch(x):
    time.sleep(30)
    return x + x
