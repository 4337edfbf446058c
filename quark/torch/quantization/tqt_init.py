"""Threshold initialisation of TQT (Jain et al., arXiv 1903.08066), on the tensor's own device.

- ``_3SD``: t = |mean(x)| + 3 std(x) (population standard deviation).
- ``_LL_J``: Algorithm 1 of Settle et al. (arXiv 1805.07941). For every candidate number of
  histogram bins ``i`` (the threshold is the upper edge of bin ``i - 1``), the reference
  distribution P is the histogram of |x| over those bins with all mass beyond them added to the
  last one (clipping); Q quantizes the same bins *without* that clipped mass into ``levels``
  groups of consecutive bins, spreading each group's mass evenly over its non-empty bins. Both
  are normalised. Where P > 0 but Q = 0 (the clipped mass lands in an empty bin) the divergence
  is infinite and the candidate is out; bins empty in both contribute nothing. A candidate whose
  range holds fewer non-empty bins than there are levels (or than the whole histogram has, if
  fewer) is out too: P and Q are normalised shapes, and with so few populated bins Q reproduces
  P whatever mass was clipped (one populated bin gives J = 0 at any clipping), so J says nothing
  there. The threshold minimising the Jeffreys divergence J(P, Q) = KL(P||Q) + KL(Q||P) wins;
  among ties (discrete data can fit several thresholds exactly), the largest, which clips least.

The search is vectorised over candidates (in chunks to bound memory), with no per-bin Python loop
and no copy to NumPy.
"""

from __future__ import annotations

import torch

__all__ = ["jeffreys_divergences", "jeffreys_threshold", "three_sd"]

#: divergences within this of the minimum count as equal (float64 sums of a few thousand terms)
TIE_TOLERANCE = 1e-12


def three_sd(mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """|mean| + 3 std."""
    return mean.abs() + 3 * std


def jeffreys_divergences(hist: torch.Tensor, levels: int, chunk: int = 256) -> torch.Tensor:
    """J(P_i, Q_i) for every candidate bin count i in [levels, len(hist)]; index k is i = levels + k."""
    hist = hist.to(torch.float64)
    n_bins = hist.numel()
    candidates = torch.arange(levels, n_bins + 1, device=hist.device)
    cumulative = torch.cumsum(hist, 0)
    populated = torch.cumsum((hist > 0).to(torch.int64), 0)  # non-empty bins in [0, i)
    informative = populated[candidates - 1] >= torch.clamp(populated[-1], max=levels)
    total = cumulative[-1]
    j = torch.arange(n_bins, device=hist.device)
    out = []
    for start in range(0, candidates.numel(), chunk):
        i = candidates[start : start + chunk, None]  # (C, 1)
        inside = j[None] < i  # (C, N)
        h = torch.where(inside, hist[None], 0.0)
        tail = total - cumulative[i - 1]  # mass beyond the candidate threshold
        p = h.scatter_add(1, i - 1, tail)
        level = torch.where(inside, torch.div(j[None] * levels, i, rounding_mode="floor"), levels)  # (C, N)
        mass = torch.zeros(i.shape[0], levels + 1, dtype=hist.dtype, device=hist.device).scatter_add_(1, level, h)
        nonempty = torch.zeros_like(mass).scatter_add_(1, level, (h > 0).to(hist.dtype))
        q = torch.where(h > 0, torch.gather(mass / nonempty.clamp(min=1), 1, level), 0.0)
        p, q = p / total, q / q.sum(1, keepdim=True).clamp(min=torch.finfo(hist.dtype).tiny)
        both = (p > 0) & (q > 0)
        ratio = torch.where(both, p / torch.where(both, q, 1.0), 1.0)
        divergence = torch.where(both, (p - q) * torch.log(ratio), 0.0).sum(1)
        out.append(torch.where(((p > 0) & (q == 0)).any(1), torch.inf, divergence))
    return torch.where(informative, torch.cat(out), torch.inf)


def jeffreys_threshold(hist: torch.Tensor, bin_width: float | torch.Tensor, levels: int) -> torch.Tensor:
    """Threshold minimising the Jeffreys divergence for a histogram of |x| with bins of ``bin_width``.

    ``levels`` is the number of quantization levels on one side: 2^(b-1) signed, 2^b unsigned.
    A histogram with no more than ``levels`` bins keeps its full range.
    """
    n_bins = hist.numel()
    if n_bins <= levels:
        return torch.as_tensor(bin_width * n_bins, dtype=torch.float32, device=hist.device)
    divergences = jeffreys_divergences(hist, levels)
    ties = divergences <= divergences.min() + TIE_TOLERANCE
    best = torch.argmax(ties * torch.arange(1, ties.numel() + 1, device=ties.device))  # the largest tie
    return ((best + levels) * bin_width).to(torch.float32)
