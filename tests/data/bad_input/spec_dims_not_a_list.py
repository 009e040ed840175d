"""dims={"N": 8} (a size, not a list of sizes): it used to say "'int' object is not iterable" (issue #28)."""
import opgate

scaled = opgate.Operator("scaled", reference=lambda x: x * 2, inputs=[opgate.TensorSpec("x", ("N",))],
                         dims={"N": 8})


@scaled.implementation("torch", backend="torch")
def _scaled(x):
    return x * 2
