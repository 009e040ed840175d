"""An operator with no implementation beside one that has one: it used to pass on opgate's own extras (issue #28)."""
import opgate

scaled = opgate.Operator("scaled", reference=lambda x: x * 2, inputs=[opgate.TensorSpec("x", ("N",))],
                         dims={"N": [8]})


@scaled.implementation("torch", backend="torch")
def _scaled(x):
    return x * 2


tripled = opgate.Operator("tripled", reference=lambda x: x * 3, inputs=[opgate.TensorSpec("x", ("N",))],
                          dims={"N": [8]})
