"""Where a quantized model loses: each quantizer's error, in the module names of the user's model.

Three figures per quantizer, each a signal-to-quantization-noise ratio in dB (higher is better):

- ``alone``: the network's output with only this quantizer on against the output with none on
  (what this quantizer costs by itself; the report is sorted by it, worst first);
- ``local``: its output against its input with every quantizer on (the noise it adds where it
  sits; for a weight, the weight against the float weight);
- ``accumulated``: its output with every quantizer on against the same tensor with none on (the
  noise of everything up to and including it).

The reference is the quantized model with its quantizers switched off (Brevitas' own
``disable_quant``), so every tensor has a float counterpart at the same place, whatever the
rewrites did; ``float_model``, when given, is compared at the output only. Bias quantizers (their
scales follow the inputs') are on in the all-on run only.
"""

from __future__ import annotations

import contextlib
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from brevitas.proxy.parameter_quant import WeightQuantProxyFromInjectorBase
from brevitas.proxy.quant_proxy import QuantProxyFromInjector
from torch import nn

from quark.torch.extensions.brevitas._backend.data import batches as progress_batches
from quark.torch.extensions.brevitas._backend.data import device_dtype, model_inputs, move
from quark.torch.extensions.brevitas._backend.evaluation import Energy, in_eval, output_tensor, plain
from quark.torch.extensions.brevitas._backend.switches import ROLES, only, quantizers

#: child names graph mode gives the quantizer it wraps around an activation, pool or addition
GRAPH_WRAPPERS = ("quant", "output_quant")


@dataclass(frozen=True)
class QuantizerError:
    """One quantizer: where it sits (``module``, ``tensor``), its width, its SQNRs in dB."""

    module: str
    layer_type: str
    tensor: str
    bits: int | None
    alone_db: float
    local_db: float
    accumulated_db: float | None

    @property
    def label(self) -> str:
        return f"{self.module or '(model)'} ({self.layer_type}) {self.tensor}"


@dataclass
class Analysis:
    """Every quantizer of a model, the worst (lowest ``alone_db``) first, and the output's SQNR."""

    quantizers: list[QuantizerError]
    output_db: float
    agreement: float | None
    float_output_db: float | None = None
    samples: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def worst(self) -> QuantizerError:
        return self.quantizers[0]

    def table(self) -> str:
        """A plain-text table, worst first."""
        rows = [("quantizer", "bits", "alone dB", "local dB", "accumulated dB")]
        for q in self.quantizers:
            accumulated = "-" if q.accumulated_db is None else _db(q.accumulated_db)
            rows.append((q.label, str(q.bits or "-"), _db(q.alone_db), _db(q.local_db), accumulated))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))) for row in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        summary = f"network output: {_db(self.output_db)} dB against the model with its quantizers off"
        if self.agreement is not None:
            summary += f"; top-1 agreement {100 * self.agreement:.2f} % over {self.samples} samples"
        if self.float_output_db is not None:
            summary += f"; {_db(self.float_output_db)} dB against the float model"
        return "\n".join([*lines, "", summary, *self.notes])

    def to_dict(self) -> dict[str, Any]:
        return {
            "output_db": _finite(self.output_db),
            "float_output_db": _finite(self.float_output_db),
            "agreement": self.agreement,
            "samples": self.samples,
            "quantizers": [
                {
                    "module": q.module,
                    "layer_type": q.layer_type,
                    "tensor": q.tensor,
                    "bits": q.bits,
                    "alone_db": _finite(q.alone_db),
                    "local_db": _finite(q.local_db),
                    "accumulated_db": _finite(q.accumulated_db),
                }
                for q in self.quantizers
            ],
        }


def _db(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.1f}"


def _finite(value: float | None) -> float | str | None:
    return "inf" if value is not None and math.isinf(value) else value


def place(model: nn.Module, path: str) -> tuple[str, str, str]:
    """(module, its type, the tensor) a quantizer at ``path`` quantizes, as the user's model names them:
    ``3.weight_quant`` -> ("3", "QuantConv2d", "weight"); graph mode's ``2.quant.act_quant`` (the
    quantizer put after activation ``2``) -> ("2", "ReLU", "output")."""
    owner, _, attribute = path.rpartition(".")
    tensor = ROLES[attribute]
    parent, _, child = owner.rpartition(".")
    if attribute == "act_quant" and child in GRAPH_WRAPPERS:
        owner = parent
    elif attribute == "act_quant" and owner.endswith("input_quant") and "." not in owner:
        return "", "GraphInput", "input"
    module = model.get_submodule(owner) if owner else model
    inner = [m for n, m in module.named_children() if n not in GRAPH_WRAPPERS and not isinstance(m, QuantProxyFromInjector)]
    layer_type = type(inner[0]).__name__ if isinstance(module, nn.Sequential) and len(inner) == 1 else type(module).__name__
    return owner, layer_type, tensor


def _bits(proxy: QuantProxyFromInjector) -> int | None:
    with contextlib.suppress(Exception):  # proxies of minifloat / MX formats have no single integer width
        return int(proxy.bit_width())
    return None


@torch.no_grad()
def analyze(
    qmodel: nn.Module,
    data: Iterable[Any],
    float_model: nn.Module | None = None,
    *,
    num_batches: int | None = None,
    progress: bool = True,
) -> Analysis:
    """Each quantizer's error on ``data`` (batches as calibration takes them), the worst first."""
    every = quantizers(qmodel)
    if not every:
        raise ValueError("analyze: the model has no quantizer that is on (was it quantized with ModelQuantizer?)")
    device, dtype = device_dtype(qmodel)
    local: dict[str, Energy] = defaultdict(Energy)
    accumulated: dict[str, Energy] = defaultdict(Energy)
    alone: dict[str, Energy] = defaultdict(Energy)
    output, against_float = Energy(), Energy()
    agree = samples = 0
    seen: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = defaultdict(list)
    recording = [True]  # off in the one-quantizer passes, which compare outputs only

    def record(name: str):
        return lambda _m, args, out: seen[name].append((plain(args[0]), plain(out))) if recording[0] else None

    hooks = [proxy.register_forward_hook(record(name)) for name, proxy in every.items()]
    try:
        with in_eval(qmodel, float_model):
            for batch in progress_batches(data, num_batches, progress=progress, desc="analyze"):
                args, kwargs = model_inputs(qmodel, move(batch, device, dtype))
                seen.clear()
                recording[0] = True
                with only(qmodel, set(), every, biases=False):
                    reference = output_tensor(qmodel(*args, **kwargs))
                float_sites = dict(seen)
                seen.clear()
                quantized = output_tensor(qmodel(*args, **kwargs))
                for name, calls in seen.items():
                    for (given, result), (_, float_result) in zip(calls, float_sites.get(name, [])):
                        local[name].add(given, result)
                        if not isinstance(every[name], WeightQuantProxyFromInjectorBase):
                            accumulated[name].add(float_result, result)
                recording[0] = False
                for name in every:
                    with only(qmodel, {name}, every, biases=False):
                        alone[name].add(reference, output_tensor(qmodel(*args, **kwargs)))
                output.add(reference, quantized)
                if float_model is not None:
                    against_float.add(output_tensor(float_model(*args, **kwargs)), quantized)
                if reference.dim() >= 2:
                    agree += int((reference.argmax(-1) == quantized.argmax(-1)).sum())
                    samples += reference.shape[0]
    finally:
        for hook in hooks:
            hook.remove()
    if not output.signal and not output.noise:
        raise ValueError("analyze: data gave no batch")
    errors = []
    for name, proxy in every.items():
        module, layer_type, tensor = place(qmodel, name)
        is_weight = isinstance(proxy, WeightQuantProxyFromInjectorBase)
        errors.append(
            QuantizerError(
                module=module,
                layer_type=layer_type,
                tensor=tensor,
                bits=_bits(proxy),
                alone_db=alone[name].db,
                local_db=local[name].db,
                accumulated_db=None if is_weight else accumulated[name].db,
            )
        )
    errors.sort(key=lambda e: (e.alone_db, e.local_db))
    return Analysis(
        quantizers=errors,
        output_db=output.db,
        agreement=agree / samples if samples else None,
        float_output_db=against_float.db if float_model is not None else None,
        samples=samples,
    )
