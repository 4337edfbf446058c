"""Exact comparison of tensors, the one way every numerics test compares (no quark import)."""

from __future__ import annotations

import torch


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape and values, compared in float64; NaN equals NaN."""
    a, b = a.detach().to(torch.float64), b.detach().to(torch.float64)
    return a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all())


def exact(actual: torch.Tensor, expected: torch.Tensor, *, broadcast: bool = False, equal_nan: bool = True) -> None:
    """Assert ``actual`` equals ``expected`` exactly (NaN equals NaN unless ``equal_nan=False``), dtype included.

    ``broadcast``: ``expected`` is expanded to ``actual``'s shape and cast to its dtype first (a
    per-tensor reference against a per-element result).
    """
    if broadcast:
        expected = expected.expand_as(actual).to(actual.dtype)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    torch.testing.assert_close(actual, expected, atol=0, rtol=0, equal_nan=equal_nan)
