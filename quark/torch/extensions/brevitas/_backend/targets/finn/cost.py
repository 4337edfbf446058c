"""FINN's cost of one network at many per-layer bit widths, without exporting each candidate.

The dataflow partition of a network has the same hardware layers whatever the bit widths (2 bits
and up: 1-bit layers become XNOR layers, another structure). What the widths change are the data
types FINN's estimate functions read. So one partition (the *template*, from a probe export) is
re-annotated per candidate: each MVAU / VVAU gets its layer's integer weights at the candidate's
weight width, each thresholding layer (a Thresholding, or an MVAU with thresholds) its site's
output type and ``2^b - 1`` thresholds; then FINN's own passes run as in
:mod:`.steps` run them (``step_quark_specialize_layers``, ``step_quark_minimize_bit_width``) and FINN's per-layer estimate functions
(``lut_estimation``, ``bram_estimation``, ``uram_estimation``, ``dsp_estimation``,
``get_exp_cycles``) are called at every folding of every layer.

A layer's cost depends only on the widths of a few variables (its weights, the sites whose
quantizers produce its inputs and its output), found by tracing the template. Costs are cached per
(layer, those widths): a candidate network is a sum of table look-ups (microseconds), and the
tables are the terms of the integer program in :mod:`quark.torch.extensions.brevitas.search`.

Folding is chosen per layer: of the foldings that meet the target's cycles per frame, the one using
the fewest of the chosen resource (then LUT, BRAM, DSP, URAM). Layers of a dataflow pipeline are
independent in their folding, so the per-layer minimum is the network's minimum at that target:
never more than FINN's ``SetFolding`` (which raises SIMD, then PE, until each layer meets the
target), under the same bound ``SIMD x weight bits <= mvau_wwidth_max``. Where FINN couples two
layers (a depthwise sliding window feeding a Pool or VVAU: the window's SIMD is the consumer's PE)
they are folded as one.

Thresholds are synthesized (the real ones come from calibration): ``2^b - 1`` integers spread over
the layer's input range and one past it (a threshold no input reaches), so FINN's
``MinimizeWeightBitWidth`` gives them the input's width plus one bit, the widest real thresholds
take (narrower where calibration keeps them inside the input's range). The effect on the totals is measured against full exports in
``tests/targets/finn/test_cost.py``.
"""

from __future__ import annotations

import copy
import itertools
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from quark.torch.extensions.brevitas._backend.targets.finn import front_end
from quark.torch.extensions.brevitas._backend.targets.finn.build_config import MVAU_WWIDTH_MAX
from quark.torch.extensions.brevitas._backend.targets.finn.estimate import ESTIMATED
from quark.torch.extensions.brevitas._backend.targets.finn.origins import run_transform
from quark.torch.extensions.brevitas._backend.targets.finn.parts import FpgaPart, resolve

logger = logging.getLogger(__name__)

#: metric (the resource the search minimizes) -> FINN's resource name
METRICS: dict[str, str] = {"lut": "LUT", "bram": "BRAM_18K", "dsp": "DSP", "uram": "URAM"}


def _channels(attribute: str):
    return lambda op: int(op.get_nodeattr(attribute))


def _output_channels(op) -> int:
    return int(op.get_normal_output_shape()[-1])


#: generic op type -> its folding attributes and their upper bounds (FINN's SetFolding: PE divides
#: the output channels, SIMD the input channels); a layer not listed keeps its only folding
FOLDING: dict[str, tuple[tuple[str, Any], ...]] = {
    "MVAU": (("SIMD", _channels("MW")), ("PE", _channels("MH"))),
    "VVAU": (("PE", _channels("Channels")),),
    "Thresholding": (("PE", _channels("NumChannels")),),
    "DuplicateStreams": (("PE", _channels("NumChannels")),),
    "GlobalAccPool": (("PE", _channels("NumChannels")),),
    "ElementwiseAdd": (("PE", _output_channels),),
    "ElementwiseMul": (("PE", _output_channels),),
    "ElementwiseSub": (("PE", _output_channels),),
    "LabelSelect": (("PE", _channels("Labels")),),
    "Pool": (("PE", _channels("Channels")),),
    "FMPadding": (("SIMD", _channels("NumChannels")),),
    "ConvolutionInputGenerator": (("SIMD", _channels("IFMChannels")),),
    "StreamingConcat": (("SIMD", _output_channels),),
}
#: consumers whose PE sets the SIMD of the depthwise sliding window feeding them (SetFolding's
#: ``depthwise_op_exceptions``): folded as one with it
COUPLED = frozenset({"Pool", "VVAU"})


def generic(op_type: str) -> str:
    """``MVAU_hls`` -> ``MVAU``."""
    return op_type.rsplit("_", 1)[0] if op_type.endswith(("_hls", "_rtl")) else op_type


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass(frozen=True)
class Option:
    """One folding of one layer (with the window it drives, if coupled): FINN's estimates."""

    folding: dict[str, dict[str, int]]  # template node name -> attributes
    cycles: int
    resources: dict[str, float]
    op_types: tuple[str, ...]


@dataclass(frozen=True)
class LayerCost:
    """The folding chosen for one layer at one set of widths."""

    node: str
    option: Option
    meets_target: bool


@dataclass(frozen=True)
class NetworkCost:
    """A candidate's totals: FINN's estimates summed over its layers at their chosen folding."""

    totals: dict[str, float]
    max_cycles: int
    clock_mhz: float
    target_fps: float | None
    part: FpgaPart
    layers: tuple[LayerCost, ...]
    meets_target: bool = field(default=True)

    @property
    def fps(self) -> float:
        return self.clock_mhz * 1e6 / self.max_cycles

    @property
    def fits(self) -> bool:
        return all(self.totals[r] <= self.part.capacity[r] for r in ESTIMATED)

    @property
    def folding(self) -> dict[str, dict[str, int]]:
        """Layer name of the specialized partition (as ``estimate.md`` names it) -> folding attributes:
        a ``FinnBuildConfig.folding``."""
        return {name: attrs for layer in self.layers for name, attrs in layer.option.folding.items()}


class CostModel:
    """FINN's per-layer costs over per-layer widths for one partition, part, clock and target.

    Args:
        template: the dataflow partition (qonnx ``ModelWrapper``) before specialization and folding
            (``partitions/partition_0.onnx`` of an export).
        weight_nodes: template node name -> the weight variable it takes its weights from.
        threshold_nodes: template node name -> the activation variable whose width its output has.
        weights: (weight variable, bits) -> the layer's integer weights (MW x MH, any order of rows).
        part, clock_mhz, target_fps, mvau_wwidth_max: as ``FinnBuildConfig``'s.
        metric: the resource folding minimizes first (a key of :data:`METRICS`).
        input_variable: the variable whose width the partition's input has (the network input's
            quantizer, when searched); None: the input keeps the template's type.
    """

    def __init__(
        self,
        template,
        weight_nodes: Mapping[str, str],
        threshold_nodes: Mapping[str, str],
        weights: Mapping[tuple[str, int], np.ndarray],
        part: str | FpgaPart,
        *,
        clock_mhz: float = 100.0,
        target_fps: float | None = None,
        mvau_wwidth_max: int = MVAU_WWIDTH_MAX,
        metric: str = "lut",
        input_variable: str | None = None,
    ):
        if metric not in METRICS:
            raise ValueError(f"metric={metric!r}: allowed {sorted(METRICS)}")
        self.template = template
        self.part = part if isinstance(part, FpgaPart) else resolve(part)
        self.clock_mhz, self.target_fps = float(clock_mhz), target_fps
        self.mvau_wwidth_max, self.metric = mvau_wwidth_max, metric
        self.names = [node.name for node in template.graph.node]
        self.weight_nodes, self.threshold_nodes = dict(weight_nodes), dict(threshold_nodes)
        self.weights = dict(weights)
        self.input_variable = input_variable
        found = set(self.weight_nodes.values()) | set(self.threshold_nodes.values())
        self.variables = sorted(found | ({input_variable} if input_variable else set()))
        self.owner = self._coupling()
        self.units = [i for i in range(len(self.names)) if self.owner.get(i) is None]
        self.depends = {i: self._depends(i) for i in self.units}
        self._cache: dict[tuple[int, tuple[int, ...]], tuple[Option, ...]] = {}
        self.evaluations = 0

    def build_config(self, folding: Mapping[str, Mapping[str, Any]] | None = None):
        """The ``FinnBuildConfig`` of this cost model's part, clock, target and bound, with an integer
        network input (as its probes were exported) and ``folding``."""
        from quark.torch.extensions.brevitas._backend.targets.finn.build_config import FinnBuildConfig

        return FinnBuildConfig(
            part=self.part.part,
            clock_mhz=self.clock_mhz,
            target_fps=self.target_fps,
            mvau_wwidth_max=self.mvau_wwidth_max,
            integer_input=True,
            folding=folding,
        )

    # -- saved and restored without pickles (a cache directory may come from elsewhere) ---------------

    def save(self, directory: str) -> None:
        """The template as ONNX, the integer weights as ``.npz`` (no object arrays) and everything else,
        the per-layer table included, as JSON."""
        os.makedirs(directory, exist_ok=True)
        self.template.save(os.path.join(directory, "template.onnx"))
        keys = sorted(self.weights)
        np.savez(os.path.join(directory, "weights.npz"), *(self.weights[k] for k in keys))
        table = [
            [index, list(widths), [[o.folding, o.cycles, o.resources, list(o.op_types)] for o in options]]
            for (index, widths), options in self._cache.items()
        ]
        state = {
            "weight_nodes": self.weight_nodes,
            "threshold_nodes": self.threshold_nodes,
            "weights": [list(k) for k in keys],
            "part": self.part.part,
            "clock_mhz": self.clock_mhz,
            "target_fps": self.target_fps,
            "mvau_wwidth_max": self.mvau_wwidth_max,
            "metric": self.metric,
            "input_variable": self.input_variable,
            "table": table,
            "evaluations": self.evaluations,
        }
        with open(os.path.join(directory, "cost.json"), "w") as handle:
            json.dump(state, handle)

    @classmethod
    def load(cls, directory: str) -> CostModel:
        """A cost model :meth:`save` wrote (``ValueError`` if the files are not one)."""
        from qonnx.core.modelwrapper import ModelWrapper

        with open(os.path.join(directory, "cost.json")) as handle:
            state = json.load(handle)
        with np.load(os.path.join(directory, "weights.npz"), allow_pickle=False) as arrays:
            weights = {(name, int(bits)): arrays[f"arr_{i}"] for i, (name, bits) in enumerate(state["weights"])}
        model = cls(
            ModelWrapper(os.path.join(directory, "template.onnx")),
            state["weight_nodes"],
            state["threshold_nodes"],
            weights,
            state["part"],
            clock_mhz=state["clock_mhz"],
            target_fps=state["target_fps"],
            mvau_wwidth_max=state["mvau_wwidth_max"],
            metric=state["metric"],
            input_variable=state.get("input_variable"),
        )
        model._cache = {
            (index, tuple(widths)): tuple(Option(f, c, r, tuple(t)) for f, c, r, t in options)
            for index, widths, options in state["table"]
        }
        model.evaluations = state["evaluations"]
        return model

    # -- structure ---------------------------------------------------------------------------------

    def _coupling(self) -> dict[int, int | None]:
        """Index of a depthwise window -> index of the Pool / VVAU folding it (others: None)."""
        graph, owner = self.template, {}
        for i, node in enumerate(graph.graph.node):
            if generic(node.op_type) in COUPLED:
                producer = graph.find_producer(node.input[0])
                if producer is not None and generic(producer.op_type) == "ConvolutionInputGenerator":
                    owner[self.names.index(producer.name)] = i
        return owner

    def _depends(self, index: int) -> tuple[str, ...]:
        """The variables whose widths a unit's cost depends on: its own and its inputs' producers'."""
        graph = self.template
        nodes = [graph.graph.node[index]] + [graph.graph.node[j] for j, o in self.owner.items() if o == index]
        found: set[str] = set()
        for node in nodes:
            for variables in (self.weight_nodes, self.threshold_nodes):
                if node.name in variables:
                    found.add(variables[node.name])
            found |= self._upstream(node, set())
        return tuple(sorted(found))

    def _upstream(self, node, seen: set[str]) -> set[str]:
        found = set()
        for tensor in node.input:
            if self.template.get_initializer(tensor) is not None:
                continue
            producer = self.template.find_producer(tensor)
            if producer is None and self.input_variable and tensor == self.template.graph.input[0].name:
                found.add(self.input_variable)
            if producer is None or producer.name in seen:
                continue
            seen.add(producer.name)
            if producer.name in self.threshold_nodes:
                found.add(self.threshold_nodes[producer.name])
            else:
                found |= self._upstream(producer, seen)
        return found

    # -- FINN on one assignment ----------------------------------------------------------------------

    def annotated(self, widths: Mapping[str, int]):
        """The template with ``widths`` (variable -> bits) applied, specialized for the part and
        minimized as the build's steps do it (nodes in the template's order, named as the build names
        them)."""
        from finn.transformation.fpgadataflow.minimize_weight_bit_width import MinimizeWeightBitWidth
        from qonnx.core.datatype import DataType
        from qonnx.custom_op.registry import getCustomOp
        from qonnx.transformation.infer_datatypes import InferDataTypes

        from quark.torch.extensions.brevitas._backend.targets.finn.sweeps import FinnModelWrapper

        model = FinnModelWrapper(copy.deepcopy(self.template.model))
        if self.input_variable is not None:  # the host feeds round(x / scale) at this width
            name = model.graph.input[0].name
            signed = model.get_tensor_datatype(name).signed()
            model.set_tensor_datatype(name, DataType[f"{'INT' if signed else 'UINT'}{widths[self.input_variable]}"])
        nodes = {node.name: node for node in model.graph.node}
        for name, variable in self.weight_nodes.items():
            bits, node = widths[variable], nodes[name]
            values = self.weights[(variable, bits)]
            model.set_initializer(node.input[1], np.asarray(values, dtype=np.float32))
            model.set_tensor_datatype(node.input[1], DataType[f"INT{bits}"])
            getCustomOp(node).set_nodeattr("weightDataType", f"INT{bits}")
        thresholds = {}
        for name, variable in self.threshold_nodes.items():
            bits, node = widths[variable], nodes[name]
            op = getCustomOp(node)
            signed = DataType[op.get_nodeattr("outputDataType")].signed()
            datatype = DataType[f"{'INT' if signed else 'UINT'}{bits}"]
            op.set_nodeattr("outputDataType", datatype.name)
            if "ActVal" in {a.name for a in node.attribute} or node.op_type == "MVAU":
                op.set_nodeattr("ActVal", int(datatype.min()) if signed else 0)
            if "numSteps" in {a.name for a in node.attribute}:
                op.set_nodeattr("numSteps", 2**bits - 1)
            tensor = node.input[2] if node.op_type == "MVAU" else node.input[1]
            rows = model.get_initializer(tensor).shape[0]
            thresholds[name] = (tensor, rows, 2**bits - 1)
            model.set_initializer(tensor, np.zeros((rows, 2**bits - 1), dtype=np.float32))
        order = [node.name for node in model.graph.node]
        model = run_transform(model, InferDataTypes())  # the inputs' types, before FINN picks HLS or RTL
        model = front_end.minimize_bit_width(front_end.specialize_layers(model, self.part.part))
        # synthesized thresholds over each layer's input range (the accumulator's for an MVAU)
        for index, name in enumerate(order):
            if name not in thresholds:
                continue
            node = model.graph.node[index]
            op = getCustomOp(node)
            tensor, rows, steps = thresholds[name]
            source = op.get_accumulator_datatype() if generic(node.op_type) == "MVAU" else op.get_input_datatype(0)
            low, high = float(source.min()), float(source.max()) + 1
            spread = np.round(np.linspace(low, high, steps))  # both ends: the widest FINN keeps
            model.set_initializer(tensor, np.tile(spread, (rows, 1)).astype(np.float32))
        for transform in (MinimizeWeightBitWidth(), InferDataTypes()):
            model = run_transform(model, transform)
        return model

    def evaluate(self, widths: Mapping[str, int]) -> None:
        """FINN's estimates of every unit at every folding for ``widths``, into the cache."""
        from qonnx.custom_op.registry import getCustomOp

        model = self.annotated(widths)
        self.evaluations += 1
        nodes = list(model.graph.node)
        for index in self.units:
            key = (index, tuple(widths[v] for v in self.depends[index]))
            if key in self._cache:
                continue
            node = nodes[index]
            op = getCustomOp(node)
            kind = generic(node.op_type)
            window = next((j for j, o in self.owner.items() if o == index), None)
            window_op = getCustomOp(nodes[window]) if window is not None else None
            axes = [(attribute, divisors(bound(op))) for attribute, bound in FOLDING.get(kind, ())]
            options = []
            for values in itertools.product(*(choices for _, choices in axes)):
                folding = dict(zip((a for a, _ in axes), values))
                if kind == "MVAU" and folding["SIMD"] * op.get_input_datatype(1).bitwidth() > self.mvau_wwidth_max:
                    continue  # FINN's bound on the weight stream per PE (SetFolding's mvau_wwidth_max)
                for attribute, value in folding.items():
                    op.set_nodeattr(attribute, value)
                chosen = {node.name: folding}
                parts = [op]
                if window_op is not None:
                    window_op.set_nodeattr("SIMD", folding["PE"])
                    chosen[nodes[window].name] = {"SIMD": folding["PE"]}
                    parts.append(window_op)
                resources = {r: 0.0 for r in ESTIMATED}
                for part in parts:
                    for resource, value in _estimates(part, self.part.part).items():
                        resources[resource] += value
                cycles = max(int(part.get_exp_cycles()) for part in parts)
                options.append(Option(chosen, cycles, resources, tuple(p.onnx_node.op_type for p in parts)))
            if not options:  # every folding over the bound: FINN keeps SIMD = 1
                options.append(_single(op, node.name, self.part.part))
            self._cache[key] = tuple(options)

    def with_weights(self, weights: Mapping[tuple[str, int], np.ndarray]) -> CostModel:
        """A copy that prices ``weights`` ((weight variable, bits) -> integer matrix, e.g. a trained
        point's) instead of the ones it was built with, its tables empty (filled on demand).

        The weights' values, not only their width, choose a layer's implementation: on parts with
        DSP48E1 slices (7-series), FINN's SpecializeLayers makes an MVAU without thresholds the RTL
        MVU (DSPs, no LUTs for the products) only when no weight is ``-2^(b-1)`` (narrow range),
        else the HLS MVAU (LUTs); ``MinimizeWeightBitWidth`` narrows a layer whose weights stay
        small. QAT moves weights across both lines, so a measured point is re-priced with its own."""
        other = copy.copy(self)
        other.weights = {**self.weights, **weights}
        other._cache, other.evaluations = {}, 0
        return other

    # -- tables and candidates ---------------------------------------------------------------------------

    def fill(self, bits: tuple[int, ...]) -> None:
        """Evaluate until every unit has a cost at every combination of its variables' ``bits``
        (greedy cover: each evaluation sets every variable so that as many units as possible get a
        combination they lack)."""
        missing = {
            i: [c for c in itertools.product(bits, repeat=len(self.depends[i])) if (i, c) not in self._cache]
            for i in self.units
        }
        while any(missing.values()):
            widths: dict[str, int] = {}
            for i in sorted(self.units, key=lambda u: -len(missing[u])):
                for combo in missing[i]:
                    wanted = dict(zip(self.depends[i], combo))
                    if all(widths.get(v, b) == b for v, b in wanted.items()):
                        widths.update(wanted)
                        break
            widths = {v: widths.get(v, bits[0]) for v in self.variables}
            self.evaluate(widths)
            for i in self.units:
                key = tuple(widths[v] for v in self.depends[i])
                missing[i] = [c for c in missing[i] if c != key]
        logger.info("cost model: %d FINN evaluations for %d layers at widths %s", self.evaluations, len(self.units), bits)

    def choose(self, options: tuple[Option, ...]) -> tuple[Option, bool]:
        """The folding of one unit: the cheapest meeting the target (else the fastest)."""
        order = [METRICS[self.metric], "LUT", "BRAM_18K", "DSP", "URAM"]
        limit = None if self.target_fps is None else self.clock_mhz * 1e6 / self.target_fps * (1 + 1e-9)
        meeting = [o for o in options if limit is None or o.cycles <= limit]
        if meeting:
            return min(meeting, key=lambda o: ([o.resources[r] for r in order], o.cycles)), True
        return min(options, key=lambda o: (o.cycles, [o.resources[r] for r in order])), False

    def table(self, index: int) -> dict[tuple[int, ...], LayerCost]:
        """One unit's chosen folding per combination of its variables' widths (from the cache)."""
        found = {}
        for (i, combo), options in self._cache.items():
            if i == index:
                option, meets = self.choose(options)
                found[combo] = LayerCost(self.names[index], option, meets)
        return found

    def cost(self, widths: Mapping[str, int]) -> NetworkCost:
        """A candidate's FINN cost (evaluating FINN where the cache lacks a combination)."""
        layers = []
        for index in self.units:
            key = (index, tuple(widths[v] for v in self.depends[index]))
            if key not in self._cache:
                self.evaluate(widths)
            option, meets = self.choose(self._cache[key])
            layers.append(LayerCost(self.names[index], option, meets))
        totals = {r: float(sum(layer.option.resources[r] for layer in layers)) for r in ESTIMATED}
        max_cycles = max(layer.option.cycles for layer in layers)
        return NetworkCost(
            totals,
            max_cycles,
            self.clock_mhz,
            self.target_fps,
            self.part,
            tuple(layers),
            all(layer.meets_target for layer in layers),
        )


def _estimates(op, part: str) -> dict[str, float]:
    return {
        "LUT": float(op.lut_estimation(part)),
        "BRAM_18K": float(op.bram_estimation(part)),
        "URAM": float(op.uram_estimation(part)),
        "DSP": float(op.dsp_estimation(part)),
    }


def _single(op, name: str, part: str) -> Option:
    return Option({name: {}}, int(op.get_exp_cycles()), _estimates(op, part), (op.onnx_node.op_type,))


def integer_matrix(weights: np.ndarray) -> np.ndarray:
    """A torch layer's integer weights (out, in, k...) as an MVAU matrix (MW x MH): rows in
    torch's order (FINN's is a permutation of them; the estimates read only the values and the
    column each belongs to)."""
    values = np.asarray(weights)
    return values.reshape(values.shape[0], -1).T.copy()


def map_probes(
    partitions: list[str],
    weight_codes: Mapping[str, tuple[int, ...]],
    act_codes: Mapping[str, tuple[int, ...]],
    input_codes: Mapping[str, tuple[int, ...]] | None = None,
):
    """Which hardware layer each variable drives, from the dataflow partitions of probe exports
    (``partitions/partition_0.onnx``) whose variables had distinct sequences of widths
    (``weight_codes`` / ``act_codes``: variable -> its width in each probe). Returns (the first
    partition as the template, template node -> weight variable, template node -> activation
    variable whose width its output has). ``input_codes``: the network input's variable, when
    searched, whose widths the partition's input must have had across the probes (checked)."""
    from qonnx.core.datatype import DataType
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.custom_op.registry import getCustomOp

    templates = [ModelWrapper(path) for path in partitions]
    structure = [[(n.name, n.op_type) for n in t.graph.node] for t in templates]
    if any(s != structure[0] for s in structure):
        raise RuntimeError(f"the probe exports have different hardware layers: {structure}")
    for name, code in (input_codes or {}).items():
        found = tuple(t.get_tensor_datatype(t.graph.input[0].name).bitwidth() for t in templates)
        if found != tuple(code):
            raise RuntimeError(f"the partitions' input widths {found} across the probes are not {name}'s {tuple(code)}")
    by_weight = {code: name for name, code in weight_codes.items()}
    by_act = {code: name for name, code in act_codes.items()}
    weight_nodes, threshold_nodes = {}, {}
    for index, node in enumerate(templates[0].graph.node):
        ops = [getCustomOp(t.graph.node[index]) for t in templates]
        if node.op_type in ("MVAU", "VVAU"):
            code = tuple(DataType[op.get_nodeattr("weightDataType")].bitwidth() for op in ops)
            if code not in by_weight:
                raise RuntimeError(f"{node.name}: weight widths {code} across the probes match no layer")
            weight_nodes[node.name] = by_weight[code]
        thresholded = node.op_type == "Thresholding" or (node.op_type == "MVAU" and not ops[0].get_nodeattr("noActivation"))
        if thresholded:
            code = tuple(DataType[op.get_nodeattr("outputDataType")].bitwidth() for op in ops)
            if code not in by_act:
                raise RuntimeError(f"{node.name}: output widths {code} across the probes match no site")
            threshold_nodes[node.name] = by_act[code]
    return templates[0], weight_nodes, threshold_nodes
