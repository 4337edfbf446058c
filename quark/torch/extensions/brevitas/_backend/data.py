"""The one batch loop: calibration, the algorithms and export inputs all take data through here.

Accepted data: a DataLoader or any iterable of batches, each

- a tensor: the single input;
- a tuple or list: as many leading elements as ``forward`` has required positional inputs (a
  classifier's ``(inputs, targets)`` gives ``inputs``), all of them when it takes ``*args``;
- a dict: keyword arguments, restricted to those ``forward`` accepts unless it takes ``**kwargs``.

Tensors move to the model's device; floating tensors take the model's floating dtype, integer
tensors (token ids) stay integer.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm


def batches(data: Iterable[Any], num_batches: int | None = None, progress: bool = True, desc: str = "") -> Iterator[Any]:
    """The first ``num_batches`` batches of ``data`` (all when None), behind a progress bar."""
    try:
        total = len(data)  # type: ignore[arg-type]
    except TypeError:
        total = num_batches
    else:
        total = total if num_batches is None else min(total, num_batches)
    if num_batches is not None:
        data = itertools.islice(data, num_batches)
    yield from tqdm(data, total=total, desc=desc, disable=not progress, leave=False)


@dataclass(frozen=True)
class CalibrationData:
    """The user's data as every pass over it sees it: at most ``num_batches`` batches, behind a
    progress bar unless ``progress`` is False."""

    source: Iterable[Any]
    num_batches: int | None = None
    progress: bool = True

    def passes(self, desc: str) -> Iterator[Any]:
        """One pass over the data."""
        return batches(self.source, self.num_batches, self.progress, desc)

    def __iter__(self) -> Iterator[Any]:
        """One pass (an algorithm of the user's own, written for a DataLoader, iterates it so)."""
        return self.passes("algorithm")


def calibration_data(data: Any) -> CalibrationData | None:
    """``data`` (a DataLoader, an iterable, or already :class:`CalibrationData`) as CalibrationData."""
    return data if data is None or isinstance(data, CalibrationData) else CalibrationData(data)


def run_batch(model: nn.Module, batch: Any) -> Any:
    """Call ``model`` on one batch of any accepted form (see the module docstring)."""
    device, dtype = device_dtype(model)
    batch = move(batch, device, dtype)
    if isinstance(batch, torch.Tensor):
        return model(batch)
    params = inspect.signature(model.forward).parameters.values()
    if isinstance(batch, Mapping):
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            accepted = {p.name for p in params}
            batch = {k: v for k, v in batch.items() if k in accepted}
        return model(**batch)
    if isinstance(batch, (tuple, list)):
        if any(p.kind is p.VAR_POSITIONAL for p in params):
            return model(*batch)
        required = sum(
            p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty for p in params
        )
        return model(*batch[: max(required, 1)])
    raise TypeError(f"batch of type {type(batch).__name__}: expected a tensor, tuple, list or dict")


def device_dtype(model: nn.Module) -> tuple[torch.device, torch.dtype]:
    """Device and floating dtype of the model's first floating parameter or buffer (CPU float32 if none)."""
    for p in itertools.chain(model.parameters(), model.buffers()):
        if p.is_floating_point():
            return p.device, p.dtype
    return torch.device("cpu"), torch.float32


def move(obj: Any, device: torch.device, dtype: torch.dtype) -> Any:
    """``obj`` with every tensor on ``device``; floating tensors in ``dtype``, others keep theirs."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device=device, dtype=dtype if obj.is_floating_point() else None)
    if isinstance(obj, Mapping):
        return {k: move(v, device, dtype) for k, v in obj.items()}
    if isinstance(obj, (tuple, list)):
        return type(obj)(move(v, device, dtype) for v in obj)
    return obj
