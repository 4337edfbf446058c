"""Per-layer bit widths chosen against FINN's own cost: an accuracy-versus-resource front for a part.

The search space: the weight width of every compute layer and the output width of every activation
site with its own quantizer (ReLU outputs, residual additions) of :func:`~.presets.finn`'s graph-mode
config; the network input keeps its 8 bits. Each candidate is priced by
:class:`~._backend.targets.finn.cost.CostModel` (FINN's per-layer estimate functions, folded per
layer for the target fps) and scored by per-variable sensitivities measured by PTQ on the
calibration data. See ``docs/search.md`` for the method and its limits.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from quark.torch.extensions.brevitas import presets
from quark.torch.quantization.config.config import Config, QATSpec, QuantizationConfig, TQTSpec
from quark.torch.quantization.config.spec import ACTIVATION_ROLES, Role
from quark.torch.quantization.config.type import TQTThresholdInitMeth

if TYPE_CHECKING:  # qonnx and FINN load only when a search runs
    from quark.torch.extensions.brevitas._backend.targets.finn.cost import CostModel

logger = logging.getLogger(__name__)

#: the widths searched unless told otherwise
DEFAULT_BITS = (2, 3, 4, 8)
#: the widths the variables take while the others are measured (the sensitivities' reference)
REFERENCE_BITS = 8
#: the network input's width in the uniform baselines (``presets.finn``'s default: 8-bit pixels)
INPUT_BITS = 8
#: the peak learning rate and the epochs of a measured point's QAT unless told otherwise (the
#: recipe of ``examples/digits_qat_finn.py``: 99.44 % on the digits ResidualCNN at W4A4)
QAT_LR, QAT_EPOCHS = 1e-3, 8


#: the search's QAT unless told otherwise: TQT (trained power-of-two thresholds, initialised at
#: three standard deviations; batch norm folded into the weights), as ``examples/digits_qat_finn.py``.
#: Trained thresholds matter most at the low widths the search reaches: on the digits ResidualCNN,
#: 8 epochs took W2A2 from 72.4 % (the PTQ thresholds kept) to 85.2 %, W3A3 from 98.3 % to 99.2 %.
QAT_SPEC: QATSpec = TQTSpec(TQTThresholdInitMeth._3SD)


@dataclass(frozen=True)
class Variable:
    """One width the search chooses: a layer's weights, a site's own activation quantizer, or the
    network input's quantizer (``kind="input"``, when searched)."""

    kind: str  # "weight" | "act" | "input"
    site: str
    roles: tuple[str, ...]
    signed: bool

    @property
    def name(self) -> str:
        return f"{self.site}:{self.kind}"


def variables(
    model: nn.Module, calibration: Any, *, qat_spec: QATSpec | None = None, network_input: bool = False
) -> list[Variable]:
    """The search's variables of ``model`` under :func:`~.presets.finn`: each compute layer's weight,
    each site with its own activation quantizer, and with ``network_input`` the network input's
    quantizer (one input only: its width is the FPGA's input interface, ``round(x / scale)`` fed
    by the host, as FINN's bnn_pynq TFC takes 1- or 2-bit pixels)."""
    from quark.torch.extensions.brevitas.api import ModelQuantizer

    quantizer = ModelQuantizer(presets.finn(4, 4, qat_spec=qat_spec))
    quantizer.quantize_model(model, calibration, progress=False)
    found = []
    inputs = [plan for plan in quantizer.plans if plan.module_type.__name__ == "GraphInput"]
    if network_input:
        if len(inputs) != 1:
            raise ValueError(f"variables(network_input=True): one network input searched; the model has {len(inputs)}")
        found.append(Variable("input", inputs[0].name, ("input_tensors",), bool(inputs[0].specs[Role.input_tensors].signed)))
    for plan in quantizer.plans:
        if plan.module_type.__name__ == "GraphInput":
            continue
        if plan.specs.get(Role.weight) is not None:
            found.append(Variable("weight", plan.name, ("weight",), True))
        own = tuple(r for r in ACTIVATION_ROLES if plan.specs.get(r) is not None and r not in plan.upstream)
        if own:
            found.append(Variable("act", plan.name, own, bool(plan.specs[own[-1]].signed)))
    return found


def config(
    widths: Mapping[str, int],
    space: Sequence[Variable],
    *,
    qat_spec: QATSpec | None = None,
    base_bits: int = REFERENCE_BITS,
) -> Config:
    """The :func:`~.presets.finn` config with ``widths`` (variable name -> bits) per layer and site
    in ``layer_quant_config`` (the network input's, when searched, in ``layer_type_quant_config``);
    variables not named keep ``base_bits``."""
    base = presets.finn(base_bits, base_bits, qat_spec=qat_spec)
    per_layer: dict[str, dict[str, Any]] = {}
    for variable in space:
        bits = widths.get(variable.name, base_bits)
        uniform = presets.finn(bits, bits, input_bits=bits, input_signed=variable.signed, qat_spec=qat_spec)
        if variable.kind == "input":
            base.layer_type_quant_config["GraphInput"] = uniform.layer_type_quant_config["GraphInput"]
            continue
        if variable.kind == "weight":
            spec = uniform.global_quant_config.weight
        elif variable.signed:
            spec = uniform.global_quant_config.input_tensors
        else:
            spec = uniform.layer_type_quant_config["ReLU"].output_tensors
        for role in variable.roles:
            per_layer.setdefault(variable.site, {})[role] = spec
    base.layer_quant_config = {site: QuantizationConfig(**roles) for site, roles in per_layer.items()}
    return base


def uniform_widths(space: Sequence[Variable], bits: int) -> dict[str, int]:
    """The uniform baseline ``W{bits}A{bits}``: every weight and activation at ``bits``, the network
    input (when searched) at :data:`INPUT_BITS`, as ``presets.finn(bits, bits)``."""
    return {v.name: INPUT_BITS if v.kind == "input" else bits for v in space}


def quantize(model: nn.Module, calibration: Any, cfg: Config) -> nn.Module:
    from quark.torch.extensions.brevitas.api import ModelQuantizer

    return ModelQuantizer(cfg).quantize_model(model, calibration, progress=False)


def integer_weights(
    model: nn.Module, calibration: Any, space: Sequence[Variable], bits: Iterable[int], *, qat_spec: QATSpec | None = None
):
    """(weight variable name, bits) -> the layer's integer weights as an MVAU matrix: one PTQ per
    width (a weight's quantizer does not depend on the other layers' widths). ``qat_spec`` as the
    measured points' (a TQT weight spec folds batch norm into the weights: other integers)."""
    found = {}
    for b in bits:
        widths = {v.name: b for v in space}
        qmodel = quantize(model, calibration, config(widths, space, qat_spec=qat_spec))
        found.update(weights_of(qmodel, space, widths))
    return found


def weights_of(qmodel: nn.Module, space: Sequence[Variable], widths: Mapping[str, int]):
    """(weight variable name, its width) -> the quantized model's integer weights as an MVAU matrix."""
    from quark.torch.extensions.brevitas._backend.targets.finn.cost import integer_matrix

    modules = dict(qmodel.named_modules())
    with torch.no_grad():
        return {
            (v.name, widths[v.name]): integer_matrix(modules[v.site].quant_weight().int().cpu().numpy())
            for v in space
            if v.kind == "weight"
        }


def probe_widths(space: Sequence[Variable], bits: Sequence[int]) -> list[dict[str, int]]:
    """Assignments whose exports tell which hardware layer each variable drives: every weight
    variable (and every activation variable) gets a distinct sequence of widths across the probes."""
    kinds = {kind: [v for v in space if v.kind == kind] for kind in ("weight", "act", "input")}
    count = max(len(group) for group in kinds.values())
    probes = 1
    while len(bits) ** probes < count:
        probes += 1
    codes = list(itertools.product(bits, repeat=probes))
    return [
        {v.name: codes[i][p] for group in kinds.values() for i, v in enumerate(group)} for p in range(probes)
    ]


def build_cost_model(
    model: nn.Module,
    calibration: Any,
    example: torch.Tensor,
    *,
    part: str = "xc7z020clg400-1",
    clock_mhz: float = 100.0,
    target_fps: float | None = None,
    bits: Sequence[int] = DEFAULT_BITS,
    metric: str = "lut",
    space: Sequence[Variable] | None = None,
    workdir: str | os.PathLike | None = None,
    progress: bool = False,
    qat_spec: QATSpec | None = None,
    network_input: bool = False,
):
    """FINN's cost model of ``model`` at per-layer widths (``bits``, 2 and up; with ``network_input``
    the network input's width too, see :func:`variables`): probe exports to
    FINN's dataflow find which hardware layer each variable drives, then
    :class:`~._backend.targets.finn.cost.CostModel` prices every layer at every combination of its
    variables' widths, with the integer weights of a PTQ under ``qat_spec`` (the measured points'
    starting point). Returns (cost model, variables)."""
    from quark.torch.extensions.brevitas._backend.data import batches
    from quark.torch.extensions.brevitas._backend.targets.finn.cost import CostModel, map_probes
    from quark.torch.extensions.brevitas.api import ModelExporter
    from quark.torch.extensions.brevitas.finn_steps import FinnBuildConfig

    bits = tuple(sorted(set(bits)))
    if any(b < 2 for b in bits):
        raise ValueError(f"bits={list(bits)}: the cost model's probes need widths of 2 bits and up")
    if space is None:
        space = variables(model, calibration, qat_spec=qat_spec, network_input=network_input)
    space = list(space)
    probes = probe_widths(space, bits)
    codes = {v.name: tuple(widths[v.name] for widths in probes) for v in space}
    probe_build = FinnBuildConfig(part=part, clock_mhz=clock_mhz, integer_input=True)
    with tempfile.TemporaryDirectory(dir=workdir) as scratch:
        partitions = []
        for index, widths in enumerate(batches(probes, progress=progress, desc="cost model: probe exports")):
            qmodel = quantize(model, calibration, config(widths, space, qat_spec=qat_spec))
            result = ModelExporter(os.path.join(scratch, f"probe{index}")).export_finn_dataflow(qmodel, example, probe_build)
            partitions.append(result.files["unspecialized_partition"])
        template, weight_nodes, threshold_nodes = map_probes(
            partitions,
            {v.name: codes[v.name] for v in space if v.kind == "weight"},
            {v.name: codes[v.name] for v in space if v.kind == "act"},
            {v.name: codes[v.name] for v in space if v.kind == "input"},
        )
    weights = integer_weights(model, calibration, space, bits, qat_spec=qat_spec)
    cost = CostModel(
        template,
        weight_nodes,
        threshold_nodes,
        weights,
        part,
        clock_mhz=clock_mhz,
        target_fps=target_fps,
        metric=metric,
        input_variable=next((v.name for v in space if v.kind == "input"), None),
    )
    cost.fill(bits)
    return cost, space


# -- sensitivity ---------------------------------------------------------------------------------------


@torch.no_grad()
def mean_loss(model: nn.Module, data: Iterable) -> float:
    """Mean cross-entropy of ``model`` over (inputs, integer labels) batches."""
    model.eval()
    total = count = 0.0
    for x, y in data:
        total += float(nn.functional.cross_entropy(model(x), y, reduction="sum"))
        count += len(y)
    return total / count


def sensitivities(
    model: nn.Module,
    calibration: Any,
    space: Sequence[Variable],
    bits: Sequence[int],
    *,
    progress: bool = False,
    qat_spec: QATSpec | None = None,
    qat_epochs: int = 0,
) -> dict[tuple[str, int], float]:
    """(variable name, bits) -> the rise of the calibration data's cross-entropy when that one
    variable is quantized to ``bits`` by PTQ and every other one to :data:`REFERENCE_BITS`, each
    network (and the reference) trained ``qat_epochs`` of :func:`qat` first (0: PTQ alone).

    Measured, not modelled: a PTQ pass quantizes activations as the deployed graph will (power-of-two
    scales, requantized residual additions), which a Hessian trace of the weights does not see; one
    pass per (variable, width) is cheap for the networks FINN maps. The search adds them up
    (HAWQ's separable model); the front's points are then measured (QAT and held-out accuracy).
    PTQ alone overstates what QAT cannot recover for low-width weights and understates it for a
    2-bit residual addition (docs/search.md, "Does PTQ rank widths for QAT?"); one epoch of QAT per
    variable and width orders those as the measured points do, at a few times the PTQ's time."""
    from quark.torch.extensions.brevitas._backend.data import batches
    from quark.torch.extensions.brevitas.qat import freeze

    def loss(widths: Mapping[str, int]) -> float:
        qmodel = quantize(model, calibration, config(widths, space, qat_spec=qat_spec))
        if qat_epochs:
            freeze(qat(qmodel, calibration, qat_epochs))
        return mean_loss(qmodel, calibration)

    reference = loss({})
    found = {}
    pairs = list(itertools.product(space, bits))
    how = f"{qat_epochs} QAT epoch(s)" if qat_epochs else "PTQ"
    for variable, b in batches(pairs, progress=progress, desc=f"sensitivities ({how} per variable and width)"):
        if b == REFERENCE_BITS:
            found[(variable.name, b)] = 0.0
            continue
        found[(variable.name, b)] = loss({variable.name: b}) - reference
    return found


# -- the two searches --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    widths: dict[str, int]
    score: float  # summed sensitivity
    cost: Any  # NetworkCost


def score(widths: Mapping[str, int], sensitivity: Mapping[tuple[str, int], float]) -> float:
    return float(sum(sensitivity[(name, b)] for name, b in widths.items()))


def _front(candidates: Iterable[Candidate], metric: str) -> list[Candidate]:
    """The candidates no other beats on both the metric and the score, by the metric."""
    from quark.torch.extensions.brevitas._backend.targets.finn.cost import METRICS

    resource = METRICS[metric]
    ordered = sorted(candidates, key=lambda c: (c.cost.totals[resource], c.score))
    front, best = [], math.inf
    for candidate in ordered:
        if candidate.score < best - 1e-12 and candidate.cost.fits and candidate.cost.meets_target:
            front.append(candidate)
            best = candidate.score
    return front


def greedy_front(cost, space: Sequence[Variable], sensitivity, bits: Sequence[int]) -> list[Candidate]:
    """From every variable at the widest width, lower one variable a step at a time, each time the
    one that saves the most of the metric per unit of sensitivity added; every step is a point."""
    from quark.torch.extensions.brevitas._backend.targets.finn.cost import METRICS

    resource = METRICS[cost.metric]
    bits = sorted(bits)
    widths = {v.name: bits[-1] for v in space}
    points = [Candidate(dict(widths), score(widths, sensitivity), cost.cost(widths))]
    while True:
        moves = []
        for variable in space:
            step = bits.index(widths[variable.name])
            if step == 0:
                continue
            trial = {**widths, variable.name: bits[step - 1]}
            saved = points[-1].cost.totals[resource] - cost.cost(trial).totals[resource]
            added = score(trial, sensitivity) - points[-1].score
            moves.append((saved / max(added, 1e-9) if saved > 0 else -1 / max(added, 1e-9), trial))
        if not moves:
            break
        widths = max(moves, key=lambda m: m[0])[1]
        points.append(Candidate(dict(widths), score(widths, sensitivity), cost.cost(widths)))
    return _front(points, cost.metric)


def milp_front(
    cost, space: Sequence[Variable], sensitivity, bits: Sequence[int], max_points: int = 200
) -> list[Candidate]:
    """The exact front by ``scipy.optimize.milp`` (the epsilon-constraint method): the least summed
    sensitivity under a budget of the metric, then the least metric at that sensitivity (a point
    of the front), then again under a budget just below that point's metric, until no network
    fits; within the part's capacity and with every layer at a folding that meets the target fps.
    Every point of the front is found (up to ``max_points``), cheapest last.

    Binary x[v, b] picks variable v's width; binary y[u, c] picks hardware unit u's combination c of
    its variables' widths; sum_c y[u, c] over the c with v at b equals x[v, b] (exact linking)."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    from quark.torch.extensions.brevitas._backend.targets.finn.cost import METRICS
    from quark.torch.extensions.brevitas._backend.targets.finn.estimate import ESTIMATED

    bits = sorted(bits)
    names = [v.name for v in space]
    x_index = {(n, b): i for i, (n, b) in enumerate(itertools.product(names, bits))}
    y_terms = []  # (unit, combo, LayerCost)
    for unit in cost.units:
        for combo, layer in cost.table(unit).items():
            if all(b in bits for b in combo):
                y_terms.append((unit, combo, layer))
    n = len(x_index) + len(y_terms)
    rows, low, high = [], [], []

    def row(entries: dict[int, float], lo: float, hi: float) -> None:
        vector = np.zeros(n)
        for i, value in entries.items():
            vector[i] += value
        rows.append(vector)
        low.append(lo)
        high.append(hi)

    for name in names:
        row({x_index[(name, b)]: 1.0 for b in bits}, 1, 1)
    for unit in cost.units:
        mine = [j for j, (u, _, _) in enumerate(y_terms) if u == unit]
        row({len(x_index) + j: 1.0 for j in mine}, 1, 1)
        for k, variable in enumerate(cost.depends[unit]):
            for b in bits:
                entries = {len(x_index) + j: 1.0 for j in mine if y_terms[j][1][k] == b}
                entries[x_index[(variable, b)]] = -1.0
                row(entries, 0, 0)
    for resource in ESTIMATED:
        capacity = cost.part.capacity[resource]
        row({len(x_index) + j: t[2].option.resources[resource] for j, t in enumerate(y_terms)}, -np.inf, capacity)
    objective = np.zeros(n)
    for (name, b), i in x_index.items():
        objective[i] = sensitivity[(name, b)]
    upper = np.ones(n)
    for j, (_, _, layer) in enumerate(y_terms):
        if not layer.meets_target:
            upper[len(x_index) + j] = 0
    resource = METRICS[cost.metric]
    metric_row = np.zeros(n)
    for j, (_, _, layer) in enumerate(y_terms):
        metric_row[len(x_index) + j] = layer.option.resources[resource]
    fixed = LinearConstraint(np.array(rows), low, high)
    integrality, bounds = np.ones(n), Bounds(0, upper)
    exact = {"mip_rel_gap": 0.0}  # HiGHS stops at a 1e-4 relative gap by default: scores are small
    # the budget steps below a point by less than any two networks' metrics differ (FINN's
    # estimates are sums of products of integers and a few fractions)
    step = 1e-6 * max(1.0, float(np.abs(metric_row).max()))
    points, budget = [], np.inf
    while len(points) < max_points:
        least = milp(objective, constraints=[fixed, LinearConstraint(metric_row[None, :], -np.inf, budget)],
                     integrality=integrality, bounds=bounds, options=exact)
        if least.x is None:
            break
        at_most = least.fun + 1e-9 * max(1.0, abs(least.fun))
        cheapest = milp(metric_row, constraints=[fixed, LinearConstraint(objective[None, :], -np.inf, at_most)],
                        integrality=integrality, bounds=bounds, options=exact)
        chosen = cheapest.x if cheapest.x is not None else least.x
        widths = {name: b for (name, b), i in x_index.items() if chosen[i] > 0.5}
        points.append(Candidate(widths, score(widths, sensitivity), cost.cost(widths)))
        budget = float(metric_row @ np.round(chosen)) - step
    return _front(points, cost.metric)


def name_of(widths: Mapping[str, int], space: Sequence[Variable]) -> str:
    """``W2A2`` for uniform widths (:func:`uniform_widths`), else each variable's width in order:
    ``w4.a3.w2...`` (``i4.w4...`` with the network input searched)."""
    values = {widths[v.name] for v in space if v.kind != "input"}
    if len(values) == 1 and dict(widths) == uniform_widths(space, next(iter(values))):
        return f"W{next(iter(values))}A{next(iter(values))}"
    return ".".join(f"{v.kind[0]}{widths[v.name]}" for v in space)


# -- measured points and the files a user keeps ------------------------------------------------------------


def accuracy(model: nn.Module, data: Iterable) -> float:
    """Top-1 accuracy in percent over (inputs, labels) batches (``api.evaluate``'s)."""
    from quark.torch.extensions.brevitas.api import evaluate

    return evaluate(model, data, progress=False).quantized_accuracy.top1


def qat(qmodel: nn.Module, train: Iterable, epochs: int, lr: float = QAT_LR, seed: int = 0) -> nn.Module:
    """The repository's steady QAT recipe (``digits.train(..., schedule="cosine")``, as in
    ``examples/digits_qat_finn.py``): one Adam for the whole run, cross-entropy, the learning rate
    cosine-decayed per step from ``lr`` to 0 at the end of the last epoch. The training samples are
    reshuffled every epoch (a generator seeded by ``seed``; ``digits.train`` repeats one order) into
    batches of the size of ``train``'s first batch."""
    batches = list(train)
    x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
    size = len(batches[0][1])
    torch.manual_seed(seed)
    order = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(qmodel.parameters(), lr=lr)
    steps = max(1, epochs * math.ceil(len(y) / size))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 0.5 * (1 + math.cos(math.pi * s / steps)))
    for _ in range(epochs):
        qmodel.train()
        for index in torch.randperm(len(y), generator=order).split(size):
            optimizer.zero_grad()
            nn.functional.cross_entropy(qmodel(x[index]), y[index]).backward()
            optimizer.step()
            schedule.step()
    return qmodel.eval()


@dataclass
class Point:
    """One measured point of the front (or a uniform baseline)."""

    name: str
    widths: dict[str, int]
    uniform: bool
    score: float
    accuracy: float
    predicted: dict[str, float]  # the cost model's totals with the point's trained weights
    estimated: dict[str, float] | None  # export_finn_dataflow's totals at the same folding
    fps: float
    folding: dict[str, dict[str, int]]
    searched: dict[str, float]  # the cost model's totals the search saw (the float model's PTQ weights)
    config: str = ""
    checkpoint: str = ""

    def total(self, resource: str) -> float:
        """The point's figure for ``resource``: FINN's full estimate, else the cost model's."""
        return (self.estimated or self.predicted)[resource]


def measure(
    model: nn.Module,
    cost,
    space: Sequence[Variable],
    widths: Mapping[str, int],
    train: Iterable,
    evaluation: Iterable,
    *,
    qat_epochs: int,
    score_: float,
    example: torch.Tensor | None = None,
    directory: str | None = None,
    qat_spec: QATSpec | None = None,
    qat_lr: float = QAT_LR,
    seed: int = 0,
    save_checkpoint: Callable[[str, Config, nn.Module], None] | None = None,
) -> Point:
    """PTQ and ``qat_epochs`` of QAT (:func:`qat`, ``qat_lr``, ``seed``) at ``widths``, held-out
    accuracy, and (with ``example``) the full FINN dataflow estimate at the cost model's folding,
    written under ``directory``: the config, the checkpoint (by ``save_checkpoint(path, config,
    quantized model)``; default: the quantized model's ``state_dict``) and the FINN directory."""
    from quark.torch.extensions.brevitas.api import ModelExporter
    from quark.torch.extensions.brevitas.qat import freeze

    cfg = config(widths, space, qat_spec=qat_spec)
    qmodel = quantize(model, train, cfg)
    if qat_epochs:
        qat(qmodel, train, qat_epochs, lr=qat_lr, seed=seed)
        freeze(qmodel)
    searched = cost.cost(widths)
    predicted = cost.with_weights(weights_of(qmodel, space, widths)).cost(widths)  # the trained weights' own implementation and widths
    name = name_of(widths, space)
    point = Point(
        name,
        dict(widths),
        name.startswith("W"),
        score_,
        accuracy(qmodel, evaluation),
        predicted.totals,
        None,
        predicted.fps,
        predicted.folding,
        searched.totals,
    )
    if directory is not None:
        os.makedirs(os.path.join(directory, "points", name), exist_ok=True)
        point.config = os.path.join("points", name, "config.yaml")
        point.checkpoint = os.path.join("points", name, "model.pt")
        cfg.save(os.path.join(directory, point.config))
        (save_checkpoint or _save_state_dict)(os.path.join(directory, point.checkpoint), cfg, qmodel)
        if example is not None:
            full = ModelExporter(os.path.join(directory, "points", name, "finn")).export_finn_dataflow(
                qmodel, example, cost.build_config(predicted.folding)
            )
            point.estimated = full.estimate.totals
    return point


def _save_state_dict(path: str, cfg: Config, qmodel: nn.Module) -> None:
    """The Python API's checkpoint: the quantized ``state_dict`` (re-load: :func:`load_point`)."""
    torch.save(qmodel.state_dict(), path)


def load_point(model: nn.Module, directory: str | os.PathLike, point: Mapping[str, Any]) -> nn.Module:
    """A measured point's quantized model from its files, as the Python API writes them: the float
    ``model`` quantized with the point's ``config.yaml`` (no calibration), then its ``model.pt``
    (the trained, frozen ``state_dict``) loaded strictly."""
    from quark.torch.extensions.brevitas.api import ModelQuantizer

    cfg = Config.load(os.path.join(directory, point["config"]))
    qmodel = ModelQuantizer(cfg).quantize_model(model, calibrate=False, progress=False)
    qmodel.load_state_dict(torch.load(os.path.join(directory, point["checkpoint"]), weights_only=True))
    return qmodel.eval()


def confirm(
    model: nn.Module,
    directory: str | os.PathLike,
    point: Mapping[str, Any],
    evaluation: Iterable,
    example: torch.Tensor,
    *,
    part: str,
    clock_mhz: float,
    target_fps: float | None,
    load: Callable[[str, Mapping[str, Any]], nn.Module] | None = None,
    tolerance: float = 0.05,
    workdir: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """One point of ``pareto.json`` measured again from its files alone: its checkpoint re-loaded
    (``load(directory, point)``; default :func:`load_point` with the float ``model``), its accuracy on
    ``evaluation`` and a new full ``export_finn_dataflow`` estimate at its folding (under
    ``workdir``, default a temporary directory). Returns ``accuracy``, ``estimate`` (FINN's totals),
    ``fps`` and ``problems``: each claim of ``point`` that did not reproduce (the accuracy, not
    equal; the cost model's ``predicted`` figure and the recorded full estimate of each resource,
    off the new estimate by more than ``tolerance`` (relative; 1 unit for BRAM / DSP / URAM); the
    target fps, missed). Empty ``problems``: the point is confirmed."""
    from quark.torch.extensions.brevitas._backend.targets.finn.estimate import ESTIMATED
    from quark.torch.extensions.brevitas.api import ModelExporter

    directory = os.fspath(directory)
    qmodel = (load or (lambda d, p: load_point(model, d, p)))(directory, point)
    measured = accuracy(qmodel, evaluation)
    problems = []
    if measured != point["accuracy"]:
        problems.append(f"{point['name']}: accuracy {measured:.4f} % from the checkpoint, {point['accuracy']:.4f} % claimed")
    from quark.torch.extensions.brevitas.finn_steps import FinnBuildConfig

    build = FinnBuildConfig(part=part, clock_mhz=clock_mhz, target_fps=target_fps, integer_input=True, folding=point["folding"])
    with tempfile.TemporaryDirectory(dir=workdir) as scratch:
        full = ModelExporter(os.path.join(scratch, "finn")).export_finn_dataflow(qmodel, example, build)
    estimate = full.estimate
    for claim in ("predicted", "estimated"):
        for resource in ESTIMATED:
            claimed, again = float((point.get(claim) or {}).get(resource, math.nan)), float(estimate.totals[resource])
            slack = tolerance * again if resource == "LUT" else max(1.0, tolerance * again)
            if not abs(claimed - again) <= slack:
                problems.append(f"{point['name']}: {claim} {resource} {claimed:,.0f}, FINN's estimate again {again:,.0f}")
    if target_fps is not None and not estimate.fps >= target_fps * (1 - 1e-9):
        problems.append(f"{point['name']}: {estimate.fps:,.0f} fps, target {target_fps:,.0f}")
    return {"name": point["name"], "accuracy": measured, "estimate": dict(estimate.totals), "fps": estimate.fps, "problems": problems}


def knee(points: Sequence[Point], resource: str, tolerance: float = 0.5) -> Point:
    """The point with the least ``resource`` whose accuracy is within ``tolerance`` points of the best."""
    best = max(p.accuracy for p in points)
    return min((p for p in points if p.accuracy >= best - tolerance), key=lambda p: p.total(resource))


def measured_front(points: Sequence[Point], resource: str) -> list[Point]:
    """The measured points no other measured point matches or beats on both accuracy and
    ``resource`` (strictly on one), by ``resource``."""
    front, best = [], -math.inf
    for p in sorted(points, key=lambda p: (p.total(resource), -p.accuracy)):
        if p.accuracy > best:
            front.append(p)
            best = p.accuracy
    return front


def spread(front: Sequence[Candidate], count: int | None, resource: str, cap: float = math.inf) -> list[Candidate]:
    """The front's points to measure: those with ``resource`` at most ``cap``; ``count`` of them
    spread evenly over their range of ``resource`` (for each of ``count`` evenly spaced values from
    the cheapest to the dearest, the nearest point; a point nearest to two values is measured
    once), or every one when ``count`` is None."""
    within = sorted((c for c in front if c.cost.totals[resource] <= cap), key=lambda c: c.cost.totals[resource])
    if count is None or len(within) <= count:
        return within
    values = np.array([c.cost.totals[resource] for c in within])
    chosen = sorted({int(np.argmin(np.abs(values - t))) for t in np.linspace(values[0], values[-1], count)})
    return [within[i] for i in chosen]


def plot(points: Sequence[Point], path: str, resource: str, title: str, zoom: float = 3.0) -> None:
    """``pareto.png``: held-out accuracy against FINN's full estimate of ``resource``. Left, every
    measured point; right, those within ``zoom`` points of the best accuracy (where the choice is
    made). In both: the measured front as a line, the uniform baselines labelled with their names
    and figures, the knee (``chosen.yaml``) ringed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    unit = {"LUT": "LUTs", "BRAM_18K": "BRAM_18K blocks", "DSP": "DSP slices", "URAM": "URAM blocks"}[resource]
    figure, panels = plt.subplots(1, 2, figsize=(13, 5.2))
    searched = [p for p in points if not p.uniform]
    front = measured_front(points, resource)
    best = knee(points, resource)
    top = max(p.accuracy for p in points)
    for axes, shown in zip(panels, (points, [p for p in points if p.accuracy >= top - zoom])):
        here = [p for p in searched if p in shown]
        axes.plot([p.total(resource) for p in here], [p.accuracy for p in here], "o", color="tab:blue", alpha=0.45,
                  label="searched widths (each measured)")
        line = [p for p in front if p in shown]
        axes.plot([p.total(resource) for p in line], [p.accuracy for p in line], "-", color="tab:blue",
                  label="measured front")
        for p in shown:
            if p.uniform:
                axes.plot(p.total(resource), p.accuracy, "s", color="tab:red", markersize=8)
                axes.annotate(f"{p.name}\n{p.total(resource):,.0f}, {p.accuracy:.2f} %", (p.total(resource), p.accuracy),
                              textcoords="offset points", xytext=(6, -22), fontsize=8, color="tab:red")
        axes.plot([], [], "s", color="tab:red", label="uniform baselines (same procedure)")
        axes.plot(best.total(resource), best.accuracy, "o", markersize=14, markerfacecolor="none", color="black",
                  label=f"knee (chosen.yaml): {best.name}\n{best.total(resource):,.0f}, {best.accuracy:.2f} %")
        axes.set_xlabel(f"{unit} (FINN's full dataflow estimate)")
        axes.set_ylabel("held-out top-1 accuracy (%)")
        low = min(p.accuracy for p in shown)
        axes.set_ylim(max(0.0, low - (2 if axes is panels[0] else 0.5)), top + (1 if axes is panels[0] else 0.4))
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=8, loc="lower right")
    panels[0].set_title("every measured point", fontsize=10)
    panels[1].set_title(f"within {zoom:g} points of the best accuracy", fontsize=10)
    figure.suptitle(title, fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def search(
    model: nn.Module,
    train: Iterable,
    evaluation: Iterable,
    example: torch.Tensor,
    output_dir: str | os.PathLike,
    *,
    part: str = "xc7z020clg400-1",
    target_fps: float | None = None,
    clock_mhz: float = 100.0,
    bits: Sequence[int] = DEFAULT_BITS,
    qat_epochs: int = 0,
    metric: str = "lut",
    points: int | None = 4,
    upto: str | None = None,
    qat_spec: QATSpec | None = QAT_SPEC,
    qat_lr: float = QAT_LR,
    seed: int = 0,
    network_input: bool = False,
    sensitivity_epochs: int = 0,
    progress: bool = True,
    save_checkpoint: Callable[[str, Config, nn.Module], None] | None = None,
) -> dict[str, Any]:
    """Per-layer widths of ``model`` (a float model under :func:`~.presets.finn`) against FINN's cost.

    Builds the cost model (:func:`build_cost_model`), measures per-variable sensitivities on
    ``train`` (:func:`sensitivities`), traces the metric-versus-sensitivity front with the integer
    program (:func:`milp_front`) and the greedy walk (:func:`greedy_front`), then measures points of
    the integer program's front and the uniform baselines W2A2 / W3A3 / W4A4 / W8A8 by the same
    procedure (PTQ, ``qat_epochs`` of QAT (:func:`qat`: ``qat_spec``, ``qat_lr``, ``seed``),
    accuracy on ``evaluation``, the full FINN estimate at the cost model's folding). ``network_input``:
    the network input's width is searched too (:func:`variables`; the baselines keep 8-bit inputs).
    ``sensitivity_epochs``: the sensitivities after that many epochs of QAT (0: PTQ). The points
    measured: those no dearer than the uniform baseline ``upto`` (e.g. ``"W4A4"``, as the search
    priced it; None: the whole front), ``points`` of them spread evenly over their range of the
    metric (:func:`spread`; None: every one). ``train`` / ``evaluation``: (inputs, integer labels)
    batches; ``example``: inputs for the FINN exports. Writes to ``output_dir``: ``pareto.json``,
    ``pareto.png``, ``chosen.yaml`` (the knee: the fewest of the metric within 0.5 points of the best
    accuracy) and ``points/<name>/`` (``config.yaml``, the checkpoint ``model.pt`` written by
    ``save_checkpoint(path, config, quantized model)`` (default: its ``state_dict``, re-loaded by
    :func:`load_point`; the command line writes its own checkpoint format), the FINN directory
    ``finn/``). The cost model and the sensitivities are kept in ``output_dir/cache/`` under a
    digest of the model, the training data and the arguments that shape them: a second run with
    the same ones reuses them. Returns pareto.json's data.
    """
    import json
    import time

    from quark.torch.extensions.brevitas._backend.data import batches
    from quark.torch.extensions.brevitas._backend.targets.finn.cost import METRICS
    from quark.torch.extensions.brevitas._backend.targets.finn.parts import resolve

    if metric not in METRICS:
        raise ValueError(f"search(metric={metric!r}): allowed {sorted(METRICS)}")
    bits = tuple(sorted({int(b) for b in bits}))
    if not bits or bits[0] < 2:
        raise ValueError(f"search(bits={list(bits)}): widths of 2 bits and up (1-bit layers are another FINN structure)")
    if not (isinstance(qat_epochs, int) and qat_epochs >= 0):
        raise ValueError(f"search(qat_epochs={qat_epochs!r}): expected an integer >= 0")
    if not (points is None or (isinstance(points, int) and points >= 1)):
        raise ValueError(f"search(points={points!r}): expected an integer >= 1, or None (every point)")
    baselines = {f"W{b}A{b}": b for b in bits}
    if upto is not None and upto not in baselines:
        raise ValueError(f"search(upto={upto!r}): a uniform baseline of bits={list(bits)}: {sorted(baselines)}, or None")
    resolve(part)  # an unknown part fails here, before the long steps
    out = os.fspath(output_dir)
    os.makedirs(out, exist_ok=True)
    train, evaluation = list(train), list(evaluation)
    cache = _Cache(
        os.path.join(out, "cache"), model, train, example, part, clock_mhz, target_fps, bits, metric, _spec_key(qat_spec),
        *(["network input"] if network_input else []),
        *([f"sensitivity after {sensitivity_epochs} QAT epochs"] if sensitivity_epochs else []),
    )
    timings = {}
    start = time.perf_counter()
    cost, space = cache.get("cost", lambda: build_cost_model(
        model, train, example, part=part, clock_mhz=clock_mhz, target_fps=target_fps, bits=bits, metric=metric,
        progress=progress, qat_spec=qat_spec, network_input=network_input,
    ))
    timings["cost model"] = time.perf_counter() - start
    start = time.perf_counter()
    sensitivity = cache.get(
        "sensitivity",
        lambda: sensitivities(
            model, train, space, bits, progress=progress, qat_spec=qat_spec, qat_epochs=sensitivity_epochs
        ),
    )
    timings["sensitivities"] = time.perf_counter() - start
    start = time.perf_counter()
    exact = milp_front(cost, space, sensitivity, bits)
    timings["milp"] = time.perf_counter() - start
    start = time.perf_counter()
    greedy = greedy_front(cost, space, sensitivity, bits)
    timings["greedy"] = time.perf_counter() - start
    resource = METRICS[metric]
    uniform = [Candidate(uniform_widths(space, b), 0.0, None) for b in bits]
    cap = math.inf if upto is None else cost.cost(uniform_widths(space, baselines[upto])).totals[resource]
    chosen = [c for c in spread(exact, points, resource, cap) if not name_of(c.widths, space).startswith("W")]
    start = time.perf_counter()
    measured = [
        measure(
            model, cost, space, c.widths, train, evaluation, qat_epochs=qat_epochs,
            score_=score(c.widths, sensitivity), example=example, directory=out, save_checkpoint=save_checkpoint,
            qat_spec=qat_spec, qat_lr=qat_lr, seed=seed,
        )
        for c in batches(chosen + uniform, progress=progress, desc="measured points (PTQ, QAT, FINN estimate)")
    ]
    timings["measure"] = time.perf_counter() - start
    best = knee(measured, resource)
    config(best.widths, space, qat_spec=qat_spec).save(os.path.join(out, "chosen.yaml"))
    where = f"{part} at {clock_mhz:g} MHz" + (f", target {target_fps:,.0f} fps" if target_fps else "")
    plot(measured, os.path.join(out, "pareto.png"), resource, f"{where}; {qat_epochs} QAT epochs per point")

    def front_json(front):
        return [{"name": name_of(c.widths, space), "score": c.score, "totals": c.cost.totals} for c in front]

    data = {
        "part": part,
        "clock_mhz": clock_mhz,
        "target_fps": target_fps,
        "metric": metric,
        "bits": list(bits),
        "qat_epochs": qat_epochs,
        "qat": {"spec": _spec_key(qat_spec), "lr": qat_lr, "seed": seed},
        "sensitivity_epochs": sensitivity_epochs,
        "variables": [v.name for v in space],
        # LUT, BRAM_18K, URAM, DSP of each point: FINN's full estimate of its trained network
        "points": [{**p.__dict__, **(p.estimated or p.predicted)} for p in measured],
        "measured_front": [p.name for p in measured_front(measured, resource)],
        "chosen": best.name,
        "fronts": {"milp": front_json(exact), "greedy": front_json(greedy)},
        "seconds": timings,
        "cached": sorted(cache.hits),
        "finn_evaluations": cost.evaluations,
    }
    with open(os.path.join(out, "pareto.json"), "w") as handle:
        json.dump(data, handle, indent=2)
    return data


def _spec_key(spec: QATSpec | None) -> str | None:
    """The QAT spec as it enters the cache's digest and pareto.json."""
    return None if spec is None else repr(spec)


class _Cache:
    """The search's slow intermediate results (the cost model, the sensitivities) in ``directory``,
    named by a digest of everything they depend on: the model's state, the training data, the
    example, the part, clock, target, widths and metric. Written as ONNX, ``.npz`` without object
    arrays and JSON, never pickles: a directory handed over by someone else runs no code."""

    def __init__(self, directory: str, model: nn.Module, train: list, example: torch.Tensor, *arguments: Any):
        import hashlib

        digest = hashlib.sha256(repr(arguments).encode())
        digest.update(type(model).__qualname__.encode())
        tensors = [*model.state_dict().values(), example, *(t for batch in train for t in batch)]
        for tensor in tensors:
            digest.update(str((tuple(tensor.shape), tensor.dtype)).encode())
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
        self.directory, self.key, self.hits = directory, digest.hexdigest()[:16], set()

    def get(self, name: str, compute: Callable[[], Any]) -> Any:
        """``compute()``'s value, or the one saved by an earlier run (``SERIALIZERS[name]``)."""
        save, load = SERIALIZERS[name]
        path = os.path.join(self.directory, f"{name}-{self.key}")
        if os.path.isdir(path):
            logger.info("search: %s from %s", name, path)
            self.hits.add(name)
            return load(path)
        value = compute()
        partial = f"{path}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        save(value, partial)
        os.replace(partial, path)  # complete or absent
        return value


def _save_cost(value: tuple[CostModel, list[Variable]], path: str) -> None:
    cost, space = value
    cost.save(path)
    with open(os.path.join(path, "variables.json"), "w") as handle:
        json.dump([[v.kind, v.site, list(v.roles), v.signed] for v in space], handle)


def _load_cost(path: str) -> tuple[CostModel, list[Variable]]:
    from quark.torch.extensions.brevitas._backend.targets.finn.cost import CostModel

    with open(os.path.join(path, "variables.json")) as handle:
        space = [Variable(kind, site, tuple(roles), signed) for kind, site, roles, signed in json.load(handle)]
    return CostModel.load(path), space


def _save_sensitivity(value: dict[tuple[str, int], float], path: str) -> None:
    os.makedirs(path)
    with open(os.path.join(path, "sensitivity.json"), "w") as handle:
        json.dump([[name, bits, rise] for (name, bits), rise in value.items()], handle)


def _load_sensitivity(path: str) -> dict[tuple[str, int], float]:
    with open(os.path.join(path, "sensitivity.json")) as handle:
        return {(name, int(bits)): float(rise) for name, bits, rise in json.load(handle)}


#: what :class:`_Cache` keeps: name -> (save(value, directory), load(directory))
SERIALIZERS: dict[str, tuple[Callable[[Any, str], None], Callable[[str], Any]]] = {
    "cost": (_save_cost, _load_cost),
    "sensitivity": (_save_sensitivity, _load_sensitivity),
}
