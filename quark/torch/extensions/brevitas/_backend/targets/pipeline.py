"""The one checked runner of a target's pipeline: each pass applied in order, the graph executed
after it on a few samples and compared with the reference, one :class:`StepCheck` recorded per pass;
a pass that fails or changes the outputs raises the target's error, naming the pass."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from quark.torch.extensions.brevitas._backend.targets.target import Step

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepCheck:
    """One pass, executed on the check samples and compared with the reference."""

    name: str
    max_abs_diff: float
    op_types: dict[str, int]
    seconds: float = 0.0  # the pass itself, without the check's execution

    def describe(self) -> str:
        ops = ", ".join(f"{k} x{v}" for k, v in sorted(self.op_types.items()))
        return f"{self.name} ({self.seconds:.1f} s): max |diff| {self.max_abs_diff:.3g}; {ops}"


def op_types(model: Any) -> dict[str, int]:
    return dict(Counter(n.op_type for n in model.graph.node))


#: expected(model after a pass) -> (reference outputs, allowed |difference|)
Expectation = Callable[[Any], tuple[list[np.ndarray], float]]


def run_checked(
    model: Any,
    steps: Sequence[Step],
    samples: Sequence[np.ndarray],
    expected: Expectation,
    *,
    error: type[Exception],
    source: str,
    label: str = "FINN",
    hints: dict[str, str] | None = None,
) -> tuple[Any, list[StepCheck]]:
    """Apply ``steps`` to ``model`` (a qonnx ``ModelWrapper``), executing it on ``samples`` after
    each and comparing with ``expected(model)``; returns the final model and the records.

    Raises ``error`` naming the target (``label``), the pass and ``source`` when a pass fails or
    changes the outputs beyond what ``expected`` allows (``hints``: a sentence per pass name, added
    to the message).
    """
    from quark.torch.extensions.brevitas._backend.export.verify import max_diff
    from quark.torch.extensions.brevitas._backend.qonnx_passes.execution import Sessions, execute

    records, sessions = [], Sessions()
    for name, step in steps:
        try:
            start = time.perf_counter()
            model = step(model)
            seconds = time.perf_counter() - start
            produced = execute(model, samples, sessions)
        except error:
            raise  # a step's own refusal names what it refuses
        except Exception as failure:
            raise error(f"{label} step '{name}' failed on {source}: {type(failure).__name__}: {failure}") from failure
        reference, allowed = expected(model)
        diff = max((max_diff(p, r) for p, r in zip(produced, reference)), default=0.0)
        records.append(StepCheck(name, diff, op_types(model), seconds))
        logger.info("%s %s", label, records[-1].describe())
        if not diff <= allowed:
            raise error(
                f"{label} step '{name}' changed the outputs of {source}: max |diff| {diff:.6g} > allowed {allowed:.6g}"
                + (hints or {}).get(name, "")
            )
    return model, records
