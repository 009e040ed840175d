"""dtypes="float32" (a string, not a list): it used to be read as dtypes 'f', 'l', ... (issue #28)."""
import opgate

scaled = opgate.Operator("scaled", reference=lambda x: x * 2, inputs=[opgate.TensorSpec("x", ("N",))],
                         dims={"N": [8]}, dtypes="float32")


@scaled.implementation("torch", backend="torch")
def _scaled(x):
    return x * 2
