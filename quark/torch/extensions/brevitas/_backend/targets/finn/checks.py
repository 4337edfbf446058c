"""Each build step checked against the torch model, in the package's runner and in FINN's builder.

A build's ``verify_input_npy`` holds a few inputs and ``verify_expected_output_npy`` the torch model's
outputs on them (the files FINN's own ``verify_steps`` read). After every step of the package that
is checked, the graph is executed on the inputs (:mod:`...qonnx_passes.execution`, qonnx's semantics)
and its outputs compared with the expected ones: a step may not take the graph further from torch than
the cleaned QONNX graph is (its own difference, measured by the first step and carried in the model's
metadata) plus ``rtol * max(1, max|expected|)``; once the graph ends in a top-k, its indices must be
the expected outputs' top-k exactly. Each check is recorded in the model's metadata
(:data:`RECORDS`), so a build's checks travel with its model through FINN's builder too.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from quark.torch.extensions.brevitas._backend.export.verify import float_tolerance, max_diff
from quark.torch.extensions.brevitas._backend.targets.finn.errors import FinnError

logger = logging.getLogger(__name__)

#: metadata keys: the checks so far (JSON list of :class:`StepCheck`), the QONNX graph's own difference
#: to the expected outputs, the file the build started from
RECORDS, BASELINE, SOURCE = "quark_step_checks", "quark_check_baseline", "quark_source"

#: op types that end a graph in top-k indices
TOP_K_OPS = ("TopK", "LabelSelect")


@dataclass(frozen=True)
class StepCheck:
    """One step: how far its graph's outputs are from the expected ones, its node types, its time."""

    name: str
    max_abs_diff: float | None  # None: not checked (no verification data, or a step after the partition)
    op_types: dict[str, int]
    seconds: float = 0.0  # the step itself, without the check's execution

    def describe(self) -> str:
        ops = ", ".join(f"{k} x{v}" for k, v in sorted(self.op_types.items()))
        diff = "not checked" if self.max_abs_diff is None else f"max |diff| {self.max_abs_diff:.3g}"
        return f"{self.name} ({self.seconds:.1f} s): {diff}; {ops}"


def op_types(model: Any) -> dict[str, int]:
    return dict(Counter(n.op_type for n in model.graph.node))


def records(model: Any) -> list[StepCheck]:
    """The checks recorded in ``model``'s metadata, in the order the steps ran."""
    text = model.get_metadata_prop(RECORDS)
    return [StepCheck(**entry) for entry in json.loads(text)] if text else []


def record(model: Any, check: StepCheck) -> None:
    """Append ``check`` to ``model``'s records and log it."""
    model.set_metadata_prop(RECORDS, json.dumps([asdict(r) for r in (*records(model), check)]))
    logger.info("FINN %s", check.describe())


def carry_records(source: Any, target: Any) -> None:
    """Copy the build's metadata (checks, baseline, source) from ``source`` to ``target`` (a model a
    step made anew, such as a dataflow partition)."""
    for key in (RECORDS, BASELINE, SOURCE):
        value = source.get_metadata_prop(key)
        if value is not None:
            target.set_metadata_prop(key, value)


def top_indices(outputs: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest outputs, largest first (ties: lower index first)."""
    return np.argsort(-outputs, axis=-1, kind="stable")[..., :k]


@dataclass
class Verification:
    """A build's verification data, loaded once (and the ONNX Runtime sessions its executions keep)."""

    inputs: np.ndarray
    expected: np.ndarray

    def __post_init__(self):
        from quark.torch.extensions.brevitas._backend.qonnx_passes.execution import Sessions

        self.sessions = Sessions()

    def run(self, model: Any) -> np.ndarray:
        from quark.torch.extensions.brevitas._backend.qonnx_passes.execution import execute

        return execute(model, [self.inputs], self.sessions)[0]


#: the verification data of the builds this process ran lately (path, modification time) -> data;
#: a build's steps are separate calls (FINN's builder passes only the model and its config), so the
#: inputs and the sessions their executions made are kept for the next step
_LOADED: dict[tuple[str, str, float], Verification] = {}
_KEPT = 2


def verification(cfg: Any) -> Verification | None:
    """The verification data ``cfg``'s files hold, or None when it names none."""
    if not cfg.verify_input_npy or not cfg.verify_expected_output_npy:
        return None
    key = (
        os.path.abspath(cfg.verify_input_npy),
        os.path.abspath(cfg.verify_expected_output_npy),
        os.path.getmtime(cfg.verify_input_npy),
    )
    if key not in _LOADED:
        while len(_LOADED) >= _KEPT:
            _LOADED.pop(next(iter(_LOADED)))
        inputs = np.load(cfg.verify_input_npy).astype(np.float32)
        expected = np.load(cfg.verify_expected_output_npy).astype(np.float32)
        if len(inputs) != len(expected):
            raise FinnError(
                f"verify_input_npy holds {len(inputs)} inputs and verify_expected_output_npy {len(expected)} outputs; "
                "one output per input"
            )
        _LOADED[key] = Verification(inputs, expected)
    return _LOADED[key]


#: what to check when a step changes the outputs
HINTS: dict[str, str] = {
    "step_quark_qonnx_to_finn": (
        " (FINN's thresholds round ties up, whatever the Quant node's rounding_mode: the package's QONNX export "
        "writes every other rounding as exact thresholds; a QONNX file from elsewhere must round half up)"
    ),
}


def check_step(model: Any, cfg: Any, name: str, seconds: float, *, baseline: bool = False) -> StepCheck:
    """Execute ``model`` on the build's verification inputs, compare, record; raise :class:`FinnError`
    naming the step when it took the graph further from the expected outputs than allowed.
    ``baseline``: this is the first graph of the build (its difference is the one later steps keep)."""
    data = verification(cfg)
    if data is None:
        check = StepCheck(name, None, op_types(model), seconds)
        record(model, check)
        return check
    produced = data.run(model)
    source = model.get_metadata_prop(SOURCE) or "the model"
    if any(model.get_nodes_by_op_type(t) for t in TOP_K_OPS):
        k = produced.shape[-1]
        labels = top_indices(data.expected, k)
        diff = max_diff(produced.reshape(labels.shape), labels)
        allowed = 0.0
    else:
        diff = max_diff(produced.reshape(data.expected.shape), data.expected) if produced.size == data.expected.size else np.inf
        if baseline:
            model.set_metadata_prop(BASELINE, repr(diff))
        allowed = float(model.get_metadata_prop(BASELINE) or 0.0) + float_tolerance([data.expected], cfg.rtol)
    check = StepCheck(name, diff, op_types(model), seconds)
    record(model, check)
    if not diff <= allowed:
        raise FinnError(
            f"FINN step '{name}' changed the outputs of {source}: max |diff| to torch {diff:.6g} > allowed "
            f"{allowed:.6g} on {len(data.inputs)} inputs" + HINTS.get(name, "")
        )
    return check
