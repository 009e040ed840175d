"""Repro (no opgate, GPU): FlagGems' group norm is wrong when the channels per group are not a power of two.

    python repro/gems_group_norm_group_size.py      # needs a CUDA GPU and flag_gems 5.0.2

opgate failed gems_group_norm `[tail]` (forward) and `[gradient]` in every dtype on the H200 (2026-12-02) at the
sizes it added with G = 3 channels per group (declared: 8 and 16). The kernel (flag_gems/ops/groupnorm.py) loads a
block of next_power_of_2(group_size) channels and masks it with `channel < C` instead of `offset < group_size`, so a
group of 3 also reads, normalizes and writes the first channel of the next group. Output of this script on the H200
is in docs/ (library corpus RESULTS.md, sixth session).
"""

import torch
import torch.nn.functional as F

import flag_gems

GROUPS = 32
flag_gems.only_enable(include=["group_norm", "group_norm_backward"])  # as the library corpus spec does
worst = 0.0
for batch, channels, spatial in [(1, 96, 1), (2, 320, 64), (4, 256, 196), (2, 512, 64)]:
    torch.manual_seed(0)
    x = torch.randn(batch, channels, spatial, dtype=torch.float64)
    w = torch.rand(channels, dtype=torch.float64) + 0.5
    b = torch.randn(channels, dtype=torch.float64)
    dy = torch.randn(batch, channels, spatial, dtype=torch.float64)
    xt = x.clone().requires_grad_(True)
    want = F.group_norm(xt, GROUPS, w, b, 1e-5)
    (want_dx,) = torch.autograd.grad(want, xt, dy)
    xg = x.float().cuda().requires_grad_(True)
    got = F.group_norm(xg, GROUPS, w.float().cuda(), b.float().cuda(), 1e-5)
    (got_dx,) = torch.autograd.grad(got, xg, dy.float().cuda())
    err = (got.double().cpu() - want).abs().max().item()
    err_dx = (got_dx.double().cpu() - want_dx).abs().max().item()
    worst = max(worst, err, err_dx)
    print(f"B={batch} C={channels} HW={spatial} channels/group={channels // GROUPS}: "
          f"max |y - truth| {err:.3g}, max |dx - truth| {err_dx:.3g}")
raise SystemExit(1 if worst > 1e-3 else 0)
