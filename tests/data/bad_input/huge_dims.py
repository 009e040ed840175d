"""Bad-input corpus: a case of 2^40 elements (8 TB in float64), refused up front."""
import opgate

add = opgate.Operator(
    "add",
    reference=lambda a: a + 1,
    inputs=[opgate.TensorSpec("a", ("M", "N"))],
    dims={"M": [1 << 20], "N": [1 << 20]},
    exact_dims=["M", "N"],
    dtypes=["float32"],
)


@add.implementation("torch")
def add_torch(a):
    return a + 1
