"""Repro (no opgate, GPU): FlagGems' apply_rotary_pos_emb refuses a cos/sin cache whose last dim is not contiguous.

    python repro/gems_rotary_noncontiguous_cos.py      # needs a CUDA GPU and flag_gems 5.0.2

opgate's transposed layout of the cos/sin caches made gems_rotary raise "AssertionError: cos must be contiguous at
the last dimension" (flag_gems/fused/rotary_embedding.py checks cos.stride(-1) == 1 before it computes). That is
an explicit precondition, not a wrong answer: the same values made contiguous give the right result.
"""

import torch

import flag_gems

torch.manual_seed(0)
T, H, D, S = 4, 2, 8, 16
q, k = torch.randn(T, H, D, device="cuda"), torch.randn(T, H, D, device="cuda")
pos = torch.tensor([0, 3, 7, 15], device="cuda")
cos_t = torch.randn(D // 2, S, device="cuda").t()  # [S, D/2], last dim strided
sin_t = torch.randn(D // 2, S, device="cuda").t()
try:
    flag_gems.apply_rotary_pos_emb(q, k, cos_t, sin_t, position_ids=pos, rotary_interleaved=False)
    print("non-contiguous cos: accepted")
except AssertionError as exc:
    print(f"non-contiguous cos: AssertionError: {exc}")
q2, _ = flag_gems.apply_rotary_pos_emb(q, k, cos_t.contiguous(), sin_t.contiguous(), position_ids=pos,
                                       rotary_interleaved=False)
c = torch.cat([cos_t[pos], cos_t[pos]], -1)[:, None, :]
s = torch.cat([sin_t[pos], sin_t[pos]], -1)[:, None, :]
x1, x2 = q.chunk(2, -1)
want = q * c + torch.cat([-x2, x1], -1) * s
print(f"contiguous copy: max |q - truth| {(q2 - want).abs().max().item():.3g}")
