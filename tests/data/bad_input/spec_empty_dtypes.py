"""An operator with dtypes=[]: it used to be dropped while the other operators passed (issue #28)."""
import torch

import opgate

scaled = opgate.Operator("scaled", reference=lambda x: x * 2, inputs=[opgate.TensorSpec("x", ("N",))],
                         dims={"N": [8]}, dtypes=[])


@scaled.implementation("torch", backend="torch")
def _scaled(x):
    return x * 2


doubled = opgate.Operator("doubled", reference=lambda x: x + x, inputs=[opgate.TensorSpec("x", ("N",))],
                          dims={"N": [8]}, dtypes=["float32"])


@doubled.implementation("torch", backend="torch")
def _doubled(x):
    return torch.add(x, x)
