"""The one batch loop: calibration, the algorithms and export inputs all take data through here.

Accepted data: a DataLoader or any iterable of batches, each

- a tensor: the single input;
- a tuple or list: as many leading elements as ``forward`` has required positional inputs (a
  classifier's ``(inputs, targets)`` gives ``inputs``), all of them when it takes ``*args``;
- a dict: keyword arguments, restricted to those ``forward`` accepts unless it takes ``**kwargs``;
- a :class:`Call`: the arguments of a call of the model as they were given (calibration on the
  model's first call, :func:`..calibrate.calibrate_on_first_call`).

Tensors move to the model's device; floating tensors take the model's floating dtype, integer
tensors (token ids) stay integer.

Every input the model is given is checked first: NaN or inf, or a batch of an unknown form, is a
:class:`BatchError` naming the input (its position or key, dtype and shape); calibration raises
one too when the model fails on a batch. ``quantize_model`` adds which pass and batch it was,
from :attr:`CalibrationData.position`.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from quark.common.errors import RefusedError


def batches(data: Iterable[Any], num_batches: int | None = None, progress: bool = True, desc: str = "") -> Iterator[Any]:
    """The first ``num_batches`` batches of ``data`` (all when None), behind a progress bar."""
    total = _length(data, num_batches)
    if num_batches is not None:
        data = itertools.islice(data, num_batches)
    yield from tqdm(data, total=total, desc=desc, disable=not progress, leave=False)


def _length(data: Iterable[Any], num_batches: int | None) -> int | None:
    try:
        total = len(data)  # type: ignore[arg-type]
    except TypeError:
        return num_batches
    return total if num_batches is None else min(total, num_batches)


class BatchError(RefusedError):
    """A batch the model cannot take: NaN or inf in an input, an unknown form, or the model fails on it."""


@dataclass
class Position:
    """Where the passes over the data are: the pass (``desc``), batches started, batches expected."""

    desc: str = ""
    batch: int = 0
    total: int | None = None
    passes: int = 0

    def __str__(self) -> str:
        of = f" of {self.total}" if self.total is not None else ""
        return f"batch {self.batch}{of}, index {self.batch - 1}"


@dataclass(frozen=True)
class CalibrationData:
    """The user's data as every pass over it sees it: at most ``num_batches`` batches, behind a
    progress bar unless ``progress`` is False. ``position`` says where the passes are."""

    source: Iterable[Any]
    num_batches: int | None = None
    progress: bool = True
    position: Position = field(default_factory=Position, compare=False)

    def __post_init__(self) -> None:
        if not (isinstance(self.source, Iterable) or hasattr(type(self.source), "__getitem__")):
            raise TypeError(
                f"calib_loader of type {type(self.source).__name__}: expected a DataLoader or an iterable of batches "
                "(tensors, tuples/lists or dicts)"
            )

    def passes(self, desc: str) -> Iterator[Any]:
        """One pass over the data.

        A one-shot iterator (a generator) serves one pass; a second one is an error, not an empty pass.
        """
        if self.position.passes and isinstance(self.source, Iterator):
            raise ValueError(
                f"calib_loader is an iterator ({type(self.source).__name__}), which can be read once, and {desc!r} "
                f"needs another pass over it (after {self.position.desc!r}); pass a list or a DataLoader"
            )
        self.position.desc, self.position.batch, self.position.total = desc, 0, _length(self.source, self.num_batches)
        self.position.passes += 1
        for batch in batches(self.source, self.num_batches, self.progress, desc):
            self.position.batch += 1
            yield batch

    def __iter__(self) -> Iterator[Any]:
        """One pass (an algorithm of the user's own, written for a DataLoader, iterates it so)."""
        return self.passes("algorithm")


@dataclass(frozen=True)
class Call:
    """A batch that is the positional and keyword arguments of one call of the model."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def calibration_data(data: Any) -> CalibrationData | None:
    """``data`` (a DataLoader, an iterable, or already :class:`CalibrationData`) as CalibrationData."""
    return data if data is None or isinstance(data, CalibrationData) else CalibrationData(data)


class ForwardStopped(BaseException):
    """Raised by a forward hook once it has what it needs: the rest of the model is not run. Callers
    catch it around :func:`run_batch`; a ``BaseException``, so that an ``except Exception`` in the
    model's own forward lets it through."""


def run_batch(model: nn.Module, batch: Any) -> Any:
    """Call ``model`` on one batch of any accepted form (see the module docstring).

    Raises :class:`BatchError` when the batch's form is unknown or an input holds NaN or inf.
    """
    args, kwargs = model_inputs(model, move(batch, *device_dtype(model)))
    check_finite(named_inputs(args, kwargs))
    return model(*args, **kwargs)


def describe_batch(model: nn.Module, batch: Any) -> str:
    """The inputs ``model`` takes from ``batch``, e.g. ``input 0: float32[8, 12]``, for messages."""
    try:
        args, kwargs = model_inputs(model, batch)
    except BatchError:
        return describe(batch)
    described = ", ".join(f"{name}: {describe(value)}" for name, value in named_inputs(args, kwargs)) or "no input"
    ignored = sorted(set(batch) - set(kwargs)) if isinstance(batch, Mapping) else []
    if ignored:
        params = ", ".join(inspect.signature(model.forward).parameters)
        described += f"; keys {ignored} ignored: {type(model).__name__}.forward takes ({params})"
    return described


def named_inputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(f"input {i}", a) for i, a in enumerate(args)] + [(f"input {k!r}", v) for k, v in kwargs.items()]


def model_inputs(model: nn.Module, batch: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The positional and keyword arguments ``model`` is called with for ``batch``."""
    if isinstance(batch, torch.Tensor):
        return (batch,), {}
    if isinstance(batch, Call):
        return batch.args, batch.kwargs
    params = inspect.signature(model.forward).parameters.values()
    if isinstance(batch, Mapping):
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            accepted = {p.name for p in params}
            batch = {k: v for k, v in batch.items() if k in accepted}
        return (), dict(batch)
    if isinstance(batch, (tuple, list)):
        if any(p.kind is p.VAR_POSITIONAL for p in params):
            return tuple(batch), {}
        required = sum(
            p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty for p in params
        )
        return tuple(batch[: max(required, 1)]), {}
    hint = " (convert NumPy arrays with torch.from_numpy)" if type(batch).__module__ == "numpy" else ""
    raise BatchError(f"batch of type {type(batch).__name__}: expected a tensor, tuple, list or dict{hint}")


def check_finite(named: Iterable[tuple[str, Any]]) -> None:
    """Raise :class:`BatchError` naming every floating input (``(name, value)`` pairs) that holds NaN or inf.

    Quantization ranges are statistics of the data: one NaN makes a scale NaN, one inf an infinite one.
    """
    bad = []
    for name, value in named:
        if isinstance(value, torch.Tensor) and (value.is_floating_point() or value.is_complex()):
            finite = torch.isfinite(value)
            if not bool(finite.all()):
                nans = int(torch.isnan(value).sum())
                bad.append(f"{name} ({describe(value)}) holds {nans} NaN and {int((~finite).sum()) - nans} inf values")
    if bad:
        raise BatchError(f"{'; '.join(bad)}: quantization ranges would be NaN or infinite; clean or drop the batch")


def describe(value: Any) -> str:
    """``float32[8, 12]`` for a tensor, the type name otherwise."""
    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}"
    return type(value).__name__


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
