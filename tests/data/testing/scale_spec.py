"""A tiny spec for the pytest plugin's test: a correct torch implementation and one that zeroes the last element."""

import opgate

scale = opgate.Operator(
    "scale",
    reference=lambda x: x * 2,
    inputs=[opgate.TensorSpec("x", ("N",))],
    dims={"N": [8, 33]},
    dtypes=["float32"],
)


@scale.implementation("torch")
def scale_torch(x):
    return x * 2


@scale.implementation("torch_drops_last", backend="torch")
def scale_drops_last(x):
    y = x * 2
    if y.numel():
        y.view(-1)[-1] = 0  # the bug: the last element is never written
    return y
