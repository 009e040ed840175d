"""unsloth_losses.py, first run: the two errors opgate reported as the implementation's, outside opgate.

1. "RuntimeError: view size is not compatible with input tensor's size and stride" on transposed labels: raised by
   the SPEC's helper every_third_token_ignored (labels.clone() keeps a transposed label tensor's strides, and
   .view(-1) then fails), not by unsloth: fast_cross_entropy_loss itself takes the same transposed labels.
2. "AssertionError: Torch not compiled with CUDA enabled" at vocab > 65536: unsloth's chunked forward asks
   torch.cuda.current_device() for a CPU tensor (cross_entropy_loss._chunked_evict_policy, through
   rope_embedding._eviction_hints_ok), which a CPU build of torch refuses: a CUDA query the first _unsloth_env.py
   did not answer (a shim gap on a CPU machine; on a GPU the call is answered).

Run: python repro/cross_entropy_run1_spec_and_shim.py   (no opgate import; uses the first run's helper verbatim)
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import _unsloth_env  # noqa: E402,F401
import torch  # noqa: E402
import unsloth.kernels.cross_entropy_loss as ce  # noqa: E402


def every_third_token_ignored_run1(labels):  # the first run's helper, verbatim
    labels = labels.clone()
    labels.view(-1)[::3] = -100
    return labels


torch.manual_seed(0)
B, S, V = 2, 2, 1
labels_t = torch.randint(0, V, (S, B)).t()  # a transposed (B, S) label tensor
logits = torch.randn(B, S, V)
try:
    every_third_token_ignored_run1(labels_t)
    print("1. helper: no error")
except RuntimeError as e:
    print("1. helper raised:", str(e)[:90])
fixed = labels_t.contiguous().clone()
fixed.view(-1)[::3] = -100
lab_t = fixed.t().contiguous().t()  # the same values, transposed strides again
print("   library on transposed labels:", ce.fast_cross_entropy_loss(logits, lab_t).item(),
      "F.cross_entropy:", torch.nn.functional.cross_entropy(logits.reshape(-1, V), lab_t.reshape(-1)).item())

logits = torch.randn(1, 1, 70000)
labels = torch.randint(0, 70000, (1, 1))
cuda_current_device = torch.cuda.current_device
if not _unsloth_env._has_gpu() and getattr(torch.cuda.current_device, "_heldout_answer", False):
    torch.cuda.current_device = _unsloth_env._ORIGINAL_CUDA["current_device"]  # the unanswered query, as in run 1
try:
    print("2. V=70000:", ce.fast_cross_entropy_loss(logits, labels).item())
except AssertionError as e:
    print("2. V=70000 raised AssertionError:", e)
torch.cuda.current_device = cuda_current_device
print("   with the query answered:", ce.fast_cross_entropy_loss(logits, labels).item(),
      "F.cross_entropy:", torch.nn.functional.cross_entropy(logits.reshape(-1, 70000), labels.reshape(-1)).item())
