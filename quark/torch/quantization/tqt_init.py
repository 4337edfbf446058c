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

How J is computed without a pass over every bin per candidate: with counts h, total T, C the
mass inside bins [0, i), r = C / T, and in group g the mass M_g over n_g non-empty bins (mean
m_g = M_g / n_g), a non-empty bin j < i contributes (r h_j - m_g)(log h_j - log m_g + log r) / C.
Summed over the bins (the clipped last bin aside),

    C J = sum_g (r A_g - m_g B_g) - (1 - r) C log r,
    A_g = sum_j h_j log(h_j / m_g),   B_g = sum_j log(h_j / m_g)   (over the group's non-empty bins),

and A_g, B_g come from prefix sums of h log h and log h read at the group's edges: O(levels)
work per candidate instead of O(bins). A_g and m_g B_g depend only on the group's edges; when
there are fewer possible groups (end, length) than candidates times levels (many levels: int8),
they are computed once per group in a table and gathered. The prefix sums are split into an
exact coarse part and a small remainder (:func:`_split`), so a group's sums keep float64
accuracy, and summing per group (A_g, B_g are small) avoids cancelling large totals. The last bin
i - 1, which holds the clipped mass in P, is corrected exactly. Divergences agree with the
literal per-bin construction (tests/_reference/tqt.py) to float64 rounding; a rounding below 0
is clamped to 0.
"""

from __future__ import annotations

import torch

__all__ = ["jeffreys_divergences", "jeffreys_threshold", "three_sd"]

#: divergences within this of the minimum count as equal (float64 sums of a few thousand terms)
TIE_TOLERANCE = 1e-12

_TINY = torch.finfo(torch.float64).tiny


def three_sd(mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """|mean| + 3 std."""
    return mean.abs() + 3 * std


def _split(v: torch.Tensor) -> torch.Tensor:
    """Rows v (shape (k, n)) as (coarse, v - coarse) pairs (2k, n) whose prefix sums give any range's
    sum to float64 accuracy.

    The coarse part is v rounded to a power-of-two grid fine enough that every partial sum is a
    multiple of it below 2^53 of it: its prefix sums are exact. The remainder is below half the
    grid, so its rounding errors are negligible. (A plain cumsum carries the rounding of all
    earlier bins into every difference.)
    """
    grid = torch.exp2(torch.ceil(torch.log2(v.abs().sum(1, keepdim=True).clamp(min=_TINY))) - 52)
    coarse = torch.round(v / grid) * grid
    return torch.stack([coarse, v - coarse], 1).flatten(0, 1)


def jeffreys_divergences(hist: torch.Tensor, levels: int, chunk: int = 2**16) -> torch.Tensor:
    """J(P_i, Q_i) for every candidate bin count i in [levels, len(hist)]; index k is i = levels + k.

    Candidates are evaluated in blocks of ``levels`` consecutive ones; a pass takes as many blocks
    as fit in ``chunk`` (candidate, group) pairs, at least one, which bounds memory. The result
    does not depend on ``chunk``.
    """
    n_bins = hist.numel()
    n_cand = n_bins - levels + 1
    n_blocks = -(-n_cand // levels)
    device = hist.device
    # candidate i = levels (1 + t) + rho, block t, rho < levels: group g spans bins
    # [ceil(g i / levels), ceil((g + 1) i / levels)), i.e. the edges of block 0 shifted by t g.
    # The last block is completed with candidates on empty bins past the histogram, dropped at the end.
    hist = torch.nn.functional.pad(hist.to(torch.float64), (0, (n_blocks + 1) * levels - 1 - n_bins))
    filled = hist > 0
    log_h = torch.where(filled, torch.log(hist), 0.0)
    # sums over bins [0, k): mass, non-empty bins (exact for counts), h log h and log h (split)
    rows = torch.cat([torch.stack([hist, filled.to(torch.float64)]), _split(torch.stack([hist * log_h, log_h]))])
    prefix = torch.nn.functional.pad(torch.cumsum(rows, 1), (1, 0))

    def group_terms(sums: torch.Tensor) -> torch.Tensor:
        """A_g, m_g B_g and m_g (see the module docstring) from the groups' sums of the prefix rows."""
        m, n, hlogh, hlogh_fine, logs, logs_fine = sums
        mean = m / n.clamp(min=1)
        log_mean = torch.log(mean.clamp(min=_TINY))
        return torch.stack([(hlogh + hlogh_fine) - m * log_mean, mean * ((logs + logs_fine) - n * log_mean), mean])

    g = torch.arange(levels + 1, device=device, dtype=torch.int32)
    rho = torch.arange(levels, device=device, dtype=torch.int32)[:, None]
    edges0 = torch.div(g * (levels + rho) + levels - 1, levels, rounding_mode="floor")  # (levels, levels + 1)
    longest = -(-hist.numel() // levels)
    tabulate = (hist.numel() + 1) * longest < n_blocks * levels * levels
    if tabulate:
        # every group [e - l, e), l <= longest, at e * longest + (longest - l): the window of prefix
        # rows ending at e (padded with zeros before bin 0) less each of its first entries
        window = torch.nn.functional.pad(prefix, (longest, 0)).unfold(1, longest + 1, 1)
        table = group_terms(window[..., longest:] - window[..., :longest]).flatten(1)
        index0 = edges0[:, 1:] * (longest - 1) + edges0[:, :-1] + longest  # e (longest - 1) + s + longest
        index_step = g[1:] * (longest - 1) + g[:-1]
    t = torch.arange(n_blocks, device=device, dtype=torch.int32)[:, None, None]
    per_pass = max(1, chunk // levels**2) * levels  # candidates
    if tabulate:
        index = (index0 + t * index_step).view(-1, levels)[:n_cand]  # (candidates, groups) into the table
        sum_a, sum_mb = (
            torch.cat([table[k].index_select(0, part.flatten()).view(-1, levels).sum(1) for part in index.split(per_pass)])
            for k in range(2)
        )
        m_last = table[2].index_select(0, index[:, -1])
    else:
        sums = []
        for edges in (edges0 + t * g).view(-1, levels + 1).split(per_pass):
            start, stop = edges[:, :-1].flatten(), edges[:, 1:].flatten()
            in_groups = torch.stack([row.index_select(0, stop) - row.index_select(0, start) for row in prefix])
            a, mb, mean = group_terms(in_groups).view(3, -1, levels)
            sums.append(torch.stack([a.sum(1), mb.sum(1), mean[:, -1]]))
        sum_a, sum_mb, m_last = torch.cat(sums, 1)
    sum_a, sum_mb, m_last = sum_a[:n_cand], sum_mb[:n_cand], m_last[:n_cand]

    mass, nonempty = prefix[:2, levels : n_bins + 1]  # over bins [0, i) of each candidate i
    total, populated = prefix[:2, n_bins]
    tail = total - mass
    r = mass / total
    log_r = torch.log(r)
    h = hist[levels - 1 : n_bins]  # bin i - 1
    # the last bin, i - 1, holds h + tail in P: its term with h + tail replaces the one with h
    p_last = torch.stack([h + tail, h])
    term = (r * p_last - m_last) * (torch.log(p_last) - torch.log(m_last.clamp(min=_TINY)) + log_r)
    cj = r * sum_a - sum_mb - tail / total * mass * log_r + torch.where(h > 0, term[0] - term[1], 0.0)
    divergence = torch.where(mass > 0, (cj / mass).clamp(min=0), 0.0)  # no mass inside: no term
    # out: clipped mass lands in an empty bin (infinite), or too few populated bins (uninformative)
    out = ((h == 0) & (tail > 0)) | (nonempty < torch.clamp(populated, max=levels))
    return torch.where(out, torch.inf, divergence)


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
