"""A reference that is random on every call: it was calibrated to a 19% budget and everything passed (issue #28)."""
import torch, opgate
noisy = opgate.Operator("noisy", reference=lambda x: x * 2 + torch.randn_like(x) * 0.1,
                        inputs=[opgate.TensorSpec("x", ("N",))], dims={"N": [8]})
@noisy.implementation("torch", backend="torch")
def _n(x): return x * 2
