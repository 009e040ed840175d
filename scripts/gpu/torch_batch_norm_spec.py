"""PyTorch's own training-mode batch norm judged by opgate with attorch_batch_norm's spec (library_corpus/attorch_norms.py):
whether a float32 [gradient] failure at a batch of two is a kernel's defect or opgate's budget missing a cancellation
inside one aten op (repro/attorch_batch_norm_two_rows_grad.py). On a GPU the implementation runs PyTorch's CUDA kernel.

    python3 -m opgate verify scripts/gpu/torch_batch_norm_spec.py --stages numerics

H100 (torch 2.11.0+cu130), thirty-seventh session: forward and gradient pass, 49/49 cases each, the gradient's worst at
58% of its budget: the budgets that fail attorch's gradient at B = 2 pass PyTorch's CUDA kernel. On the CPU the
gradient fails [gradient] on a strided weight: PyTorch's own CPU defect, repro/torch_batch_norm_strided_weight_grad.py.
"""

import torch.nn.functional as F

import opgate

torch_batch_norm = opgate.Operator(
    "torch_batch_norm",
    reference=lambda x, w, b, eps: F.batch_norm(x, None, None, w, b, training=True, eps=eps),
    inputs=[
        opgate.TensorSpec("x", ("B", "C"), kind="uniform", low=-1.0, high=3.0, requires_grad=True),
        opgate.TensorSpec("w", ("C",), kind="uniform", low=0.5, high=1.5, requires_grad=True),
        opgate.TensorSpec("b", ("C",), requires_grad=True),
        opgate.Scalar("eps", 1e-5),
    ],
    dims={"B": [256, 31], "C": [512, 64]},
    dtypes=["float32"],
)


@torch_batch_norm.implementation("torch_batch_norm", backend="torch")
def _torch_batch_norm(x, w, b, eps):
    return F.batch_norm(x, None, None, w, b, training=True, eps=eps)
