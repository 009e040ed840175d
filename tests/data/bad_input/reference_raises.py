"""Bad-input corpus: an operator whose reference raises (was exit 3, 'a bug in opgate')."""
import opgate


def broken_reference(x):
    raise ZeroDivisionError("the reference divides by zero on purpose")


double = opgate.Operator(
    "double",
    reference=broken_reference,
    inputs=[opgate.TensorSpec("x", ("N",))],
    dims={"N": [8]},
    dtypes=["float32"],
)


@double.implementation("torch")
def double_torch(x):
    return x + x
