"""transformers' LlamaRMSNorm formula (x_hat rounded to the input dtype before the weight: Llama's own definition)
against a fused F.rms_norm reference, in half precision, forward and gradients: the spec of the held-out unsloth
RMSNorm (tests/data/verify/heldout_unsloth/unsloth_norms.py), its implementation the formula of
transformers.models.llama.modeling_llama.LlamaRMSNorm.forward in eager torch. Its gradients failed (float16 4.5x,
bfloat16 4.9x) until a half-precision term formed in the dtype was allowed for (calibrate.FORMED_IN_DTYPE)."""
import torch
import torch.nn.functional as F

import opgate


def _rms_ref(x, weight, eps):
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


rms = opgate.Operator(
    "rms_norm",
    reference=_rms_ref,
    inputs=[
        opgate.TensorSpec("x", ("M", "N"), requires_grad=True),
        opgate.TensorSpec("weight", ("N",), kind="uniform", low=0.5, high=1.5, requires_grad=True),
        opgate.Scalar("eps", 1e-6),
    ],
    dims={"M": [16, 3], "N": [2048, 1000]},
    dtypes=["float16", "bfloat16"],
)


@rms.implementation("llama_rms_norm_formula", backend="torch")
def _llama(x, weight, eps):
    input_dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + eps)
    return weight * h.to(input_dtype)
