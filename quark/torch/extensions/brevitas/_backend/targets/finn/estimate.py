"""Fit and speed of a dataflow partition on an FPGA part: FINN's layer specialisation, folding for
a target throughput, and its resource and cycle estimates, reported per layer and in total against
the part's capacity, with the layer that limits the design and what to change.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, replace
from functools import partial
from typing import Any

from quark.torch.extensions.brevitas._backend.targets.finn.origins import layer_module
from quark.torch.extensions.brevitas._backend.targets.finn.parts import FpgaPart

logger = logging.getLogger(__name__)

#: resources FINN's analytical models estimate (no flip-flop model), compared with the part
ESTIMATED = ("LUT", "BRAM_18K", "URAM", "DSP")
#: above this share of a resource a design fits on paper only: placement and routing on a full device
#: commonly fail, and FINN's estimates leave out FIFO depths its build sets by simulation and the shell
TIGHT = 0.85
#: folding attributes reported per layer
REPORTED_FOLDING = (
    "depth",  # a FIFO's
    "PE",
    "SIMD",
    "parallel_window",
    "ram_style",
    "ram_style_thresholds",
    "resType",
    "mem_mode",
    "runtime_writeable_weights",
)


@dataclass(frozen=True)
class LayerEstimate:
    """One hardware layer: FINN's resource and cycle estimates at its folding."""

    name: str
    op_type: str
    module: str | None
    resources: dict[str, float]  # ESTIMATED -> count
    cycles: int  # per frame
    folding: dict[str, Any]  # PE, SIMD, ... where the layer has them
    shape: dict[str, Any]  # the attributes that bound the folding (MW, MH, NumChannels, ...)
    arithmetic: str = ""  # matrix-vector layers: "XNOR-popcount" or "<input type> x <weight type>"


@dataclass(frozen=True)
class Estimate:
    """Fit and speed of the folded dataflow on a part, at a clock and a target throughput."""

    part: FpgaPart
    clock_mhz: float
    target_fps: float | None
    layers: tuple[LayerEstimate, ...]
    max_cycles: int
    bottleneck: str
    critical_path_cycles: int
    folding_notes: tuple[str, ...]  # what FINN's SetFolding reported
    problems: tuple[str, ...] = ()  # does not fit / misses the target: the layer and what to change
    #: accumulator-aware layers (A2QSpec): their accumulators against the promise, and the LUTs saved
    #: (``accumulators.AccumulatorCheck``; set by the dataflow export)
    accumulators: tuple[Any, ...] = ()
    #: the streams' glue FINN inserts in its build: width converters between layers of different stream
    #: widths and FIFOs, priced at FINN's default depths (its ``step_set_fifo_depths`` sizes them by RTL
    #: simulation, with Vivado)
    glue: tuple[LayerEstimate, ...] = ()

    @property
    def totals(self) -> dict[str, float]:
        """The layers' resources (what the width search's cost model prices)."""
        return {r: float(sum(layer.resources[r] for layer in self.layers)) for r in ESTIMATED}

    @property
    def design_totals(self) -> dict[str, float]:
        """The layers' and the glue's resources: what the part must hold."""
        return {r: self.totals[r] + float(sum(g.resources[r] for g in self.glue)) for r in ESTIMATED}

    @property
    def utilization(self) -> dict[str, float]:
        capacity = self.part.capacity
        return {
            r: (v / capacity[r] if capacity[r] else (math.inf if v else 0.0)) for r, v in self.design_totals.items()
        }

    @property
    def margin(self) -> dict[str, float]:
        """What the part has left of each resource after the design (negative: short by that much)."""
        return {r: self.part.capacity[r] - v for r, v in self.design_totals.items()}

    @property
    def tight(self) -> tuple[str, ...]:
        """The resources used beyond :data:`TIGHT` of the part's."""
        return tuple(r for r, u in self.utilization.items() if TIGHT < u <= 1.0)

    @property
    def fps(self) -> float:
        return self.clock_mhz * 1e6 / self.max_cycles

    @property
    def latency_ms(self) -> float:
        return self.critical_path_cycles / (self.clock_mhz * 1e3)

    @property
    def fits(self) -> bool:
        return all(u <= 1.0 for u in self.utilization.values())

    @property
    def meets_target(self) -> bool:
        return self.target_fps is None or self.fps >= self.target_fps * (1 - 1e-9)

    def to_json(self) -> dict[str, Any]:
        return {
            "part": asdict(self.part),
            "clock_mhz": self.clock_mhz,
            "target_fps": self.target_fps,
            "estimated_fps": self.fps,
            "latency_ms": self.latency_ms,
            "max_cycles": self.max_cycles,
            "bottleneck": self.bottleneck,
            "critical_path_cycles": self.critical_path_cycles,
            "totals": self.totals,
            "design_totals": self.design_totals,
            "utilization": self.utilization,
            "margin": self.margin,
            "fits": self.fits,
            "tight": list(self.tight),
            "meets_target": self.meets_target,
            "target_cycles": self.target_cycles,
            "layers_over_target": [layer.name for layer in self.layers if not self.within_target(layer)],
            "problems": list(self.problems),
            "folding_notes": list(self.folding_notes),
            "layers": [asdict(layer) for layer in self.layers],
            "glue": [asdict(g) for g in self.glue],
            "accumulators": [check.to_json() for check in self.accumulators],
        }

    @property
    def target_cycles(self) -> float | None:
        """Cycles per frame the target allows each layer (clock / target fps)."""
        return None if self.target_fps is None else self.clock_mhz * 1e6 / self.target_fps

    def within_target(self, layer: LayerEstimate) -> bool:
        return self.target_cycles is None or layer.cycles <= self.target_cycles * (1 + 1e-9)

    def verdict(self) -> str:
        """One sentence: the target (met or not, and by what), and the fit on the part."""
        if self.target_fps is None:
            speed = f"no target fps (every layer PE = SIMD = 1): {self.fps:,.0f} fps estimated"
        else:
            slow = [layer.name for layer in self.layers if not self.within_target(layer)]
            speed = (
                f"target {self.target_fps:,.0f} fps: **{'met' if self.meets_target else 'missed'}**, {self.fps:,.0f} fps "
                f"estimated ({'every layer within' if not slow else f'{len(slow)} layer(s) over'} "
                f"{self.target_cycles:,.0f} cycles per frame)"
            )
        used = ", ".join(
            f"{r} {100 * self.utilization[r]:.1f} % ({self.margin[r]:,.0f} {'left' if self.margin[r] >= 0 else 'short'})"
            for r in ESTIMATED
            if self.part.capacity[r] or self.design_totals[r]
        )
        fits = "no" if not self.fits else f"tight ({', '.join(self.tight)} over {100 * TIGHT:.0f} %)" if self.tight else "yes"
        return f"{speed}; fits {self.part.part}: **{fits}** ({used}; FIFOs and width converters included)"

    def markdown(self) -> str:
        target = self.target_cycles
        lines = [
            f"# FINN estimate: {self.part.part} at {self.clock_mhz:g} MHz",
            "",
            self.verdict()[0].upper() + self.verdict()[1:] + ".",
            "",
            (
                f"Slowest layer {self.bottleneck}: {self.max_cycles:,} cycles per frame; latency {self.latency_ms:.4g} ms "
                f"({self.critical_path_cycles:,} cycles through the pipeline)."
            ),
            "",
            "| layer | module | arithmetic | folding | cycles | "
            + ("within target | " if target is not None else "")
            + " | ".join(ESTIMATED)
            + " |",
            "|---|---|---|---|---|" + ("---|" if target is not None else "") + "---|" * len(ESTIMATED),
        ]
        pad = "| " if target is not None else ""
        for layer in self.layers:
            folding = ", ".join(f"{k}={v}" for k, v in layer.folding.items() if k in ("PE", "SIMD"))
            figures = " | ".join(f"{layer.resources[r]:,.0f}" for r in ESTIMATED)
            within = (("yes" if self.within_target(layer) else "**no**") + " | ") if target is not None else ""
            lines.append(
                f"| {layer.name} | {layer.module or ''} | {layer.arithmetic} | {folding} | {layer.cycles:,} | {within}{figures} |"
            )
        totals, design = self.totals, self.design_totals
        glue = {r: design[r] - totals[r] for r in ESTIMATED}
        rows = (
            ("layers", totals),
            (f"FIFOs and width converters ({len(self.glue)})", glue),
            ("**total**", design),
            (f"**{self.part.part}**", self.part.capacity),
            ("**left**", self.margin),
        )
        for label, values in rows:
            lines.append(f"| {label} | | | | | {pad}" + " | ".join(f"{values[r]:,.0f}" for r in ESTIMATED) + " |")
        lines.append(
            f"| **used** | | | | | {pad}" + " | ".join(f"{100 * self.utilization[r]:.1f} %" for r in ESTIMATED) + " |"
        )
        if self.tight:
            lines += [
                "",
                (
                    f"Tight: {', '.join(self.tight)} over {100 * TIGHT:.0f} % of the part. Placement and routing on a "
                    "full device commonly fail there; FINN's estimates leave out the FIFO depths its build sets by "
                    "simulation and the shell around the design. Lower target_fps or the bit widths, or choose a "
                    "larger part."
                ),
            ]
        deep = [g for g in self.glue if g.folding.get("depth", 0) > DEEP_FIFO]
        if deep:
            lines += [
                "",
                (
                    "Deep FIFOs (a branch holding a whole frame while the other reduces it: squeeze-excite's map "
                    "beside its pooled gate; without them the dataflow stalls):"
                ),
                "",
                *(
                    f"- {g.name} (module '{g.module}'): depth {g.folding['depth']:,}, "
                    + ", ".join(f"{r} {g.resources[r]:,.0f}" for r in ESTIMATED if g.resources[r])
                    for g in deep
                ),
            ]
        if self.problems:
            lines += ["", "## Problems", "", *(f"- {p}" for p in self.problems)]
        if self.accumulators:
            from quark.torch.extensions.brevitas._backend.targets.finn.accumulators import (
                markdown as accumulator_table,
            )

            lines += ["", accumulator_table(self.accumulators).rstrip("\n")]
        if self.folding_notes:
            context = (
                "they come from its intermediate passes; the table above is the final folding, and every layer "
                "is within the target"
                if self.meets_target and target is not None
                else "the table above is the final folding"
            )
            lines += ["", f"## FINN's folding log (SetFolding's warnings: {context})", "", *(f"- {n}" for n in self.folding_notes)]
        lines += [
            "",
            (
                f"Capacity: {self.part.source}. Estimates: FINN's analytical models (res_estimation, "
                "exp_cycles_per_layer, dataflow_performance); no flip-flop model. FIFOs and width converters: "
                "FINN's InsertDWC and InsertFIFO at FINN's default depths (deeper where a branch must hold a whole "
                "frame: the package's), as its build inserts them before step_set_fifo_depths sizes the FIFOs by "
                "RTL simulation (deeper FIFOs cost more). Modules: the "
                "torch module each layer implements (padding and sliding windows with the layer they feed)."
            ),
        ]
        return "\n".join(lines) + "\n"


#: the model's metadata key holding FINN's notes from SetFolding (JSON list), written by the folding step
FOLDING_NOTES = "quark_folding_notes"


def estimate(model, cfg) -> Estimate:
    """FINN's estimates of the folded partition ``model`` for ``cfg`` (a ``FinnBuildConfig``): cycles
    per layer (``AnnotateCycles``, ``exp_cycles_per_layer``), resources per layer (``res_estimation``)
    and the dataflow's throughput and latency (``dataflow_performance``), with what keeps it from the
    target or the part."""
    import json

    from finn.analysis.fpgadataflow.dataflow_performance import dataflow_performance
    from finn.analysis.fpgadataflow.exp_cycles_per_layer import exp_cycles_per_layer
    from finn.analysis.fpgadataflow.res_estimation import res_estimation
    from finn.transformation.fpgadataflow.annotate_cycles import AnnotateCycles

    from quark.torch.extensions.brevitas._backend.targets.finn.parts import resolve

    fpga = resolve(cfg.part)
    model = model.transform(AnnotateCycles())
    resources = model.analysis(partial(res_estimation, fpgapart=fpga.part))
    cycles = model.analysis(exp_cycles_per_layer)
    performance = model.analysis(dataflow_performance)
    layers = tuple(
        _layer_estimate(model, node, resources[node.name], cycles[node.name]) for node in model.graph.node
    )
    notes = json.loads(model.get_metadata_prop(FOLDING_NOTES) or "[]")
    glue = _glue(model, fpga.part)
    result = Estimate(
        fpga,
        float(cfg.clock_mhz),
        None if cfg.target_fps is None else float(cfg.target_fps),
        layers,
        int(performance["max_cycles"]),
        str(performance["max_cycles_node_name"]),
        int(performance["critical_path_cycles"]),
        tuple(dict.fromkeys(notes)),
        glue=glue,
    )
    result = replace(result, problems=tuple(_problems(result, cfg)))
    logger.info("FINN estimate on %s: %.0f fps, %s", fpga.part, result.fps, result.totals)
    return result


#: FINN's default FIFO depth; a deeper one is listed under the table
DEEP_FIFO = 2
#: the streams' glue FINN's build inserts between layers
GLUE = ("StreamingDataWidthConverter", "StreamingFIFO")


def _glue(model, part: str) -> tuple[LayerEstimate, ...]:
    """The width converters and FIFOs FINN's build inserts (``InsertDWC``, ``InsertFIFO`` with shallow
    FIFOs at its default depths), specialized for ``part``, each with FINN's resource estimate; on a
    copy of ``model``."""
    from finn.analysis.fpgadataflow.res_estimation import res_estimation
    from finn.transformation.fpgadataflow.insert_dwc import InsertDWC
    from finn.transformation.fpgadataflow.insert_fifo import InsertFIFO
    from finn.transformation.fpgadataflow.specialize_layers import SpecializeLayers
    from qonnx.transformation.general import GiveUniqueNodeNames

    for transform in (InsertDWC(), SpecializeLayers(part), InsertFIFO(create_shallow_fifos=True), SpecializeLayers(part)):
        model = model.transform(transform)
    model = model.transform(GiveUniqueNodeNames())
    nodes = [node for node in model.graph.node if node.op_type.startswith(GLUE)]
    resources = model.analysis(partial(res_estimation, fpgapart=part))
    return tuple(_layer_estimate(model, node, resources[node.name], 0) for node in nodes)


#: node attributes that bound a layer's folding, reported with it
_SHAPE_ATTRIBUTES = (
    "MW",
    "MH",
    "Channels",
    "NumChannels",
    "IFMChannels",
    "Kernel",
    "Dim",
    "IFMDim",
    "numInputVectors",
)


def _layer_estimate(model, node, resources: dict[str, Any], cycles: float) -> LayerEstimate:
    from qonnx.custom_op.registry import getCustomOp

    op = getCustomOp(node)
    attributes = {a.name for a in node.attribute}

    def attrs(names):
        return {n: plain(op.get_nodeattr(n)) for n in names if n in attributes}

    return LayerEstimate(
        node.name,
        node.op_type,
        layer_module(model, node),
        {r: float(resources.get(r, 0)) for r in ESTIMATED},
        int(cycles),
        attrs(REPORTED_FOLDING),
        attrs(_SHAPE_ATTRIBUTES),
        _arithmetic(attrs(("binaryXnorMode", "inputDataType", "weightDataType"))),
    )


def _arithmetic(types: dict[str, Any]) -> str:
    """How a matrix-vector layer multiplies: XNOR and popcount (bipolar inputs and weights, FINN's
    ``binaryXnorMode``), else its input and weight types; empty for other layers."""
    if types.get("binaryXnorMode"):
        return "XNOR-popcount"
    if "weightDataType" in types:
        return f"{types.get('inputDataType', '?')} x {types['weightDataType']}"
    return ""


def plain(value):
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, bytes):
        return value.decode()
    return value.item() if hasattr(value, "item") else value


def _problems(estimate: Estimate, cfg) -> list[str]:
    """What keeps the design from the target or the part: the layer, its numbers, what to change."""
    problems = []
    if not estimate.meets_target:
        target_cycles = estimate.clock_mhz * 1e6 / estimate.target_fps
        slow = sorted(
            (layer for layer in estimate.layers if layer.cycles > target_cycles),
            key=lambda item: -item.cycles,
        )
        named = [
            layer
            for layer in slow
            if any(
                note.startswith(layer.name + ":") or f"Node {layer.name} " in note
                for note in estimate.folding_notes
            )
        ]
        limiting = named or slow[:1]
        for layer in limiting:
            problems.append(
                f"throughput: layer {layer.name} ({layer.op_type}{_module(layer)}, {_shape(layer)}) needs "
                f"{layer.cycles:,} cycles per frame at {_folding(layer)}; the target {estimate.target_fps:g} fps at "
                f"{estimate.clock_mhz:g} MHz allows {target_cycles:,.0f}: {_speed_fix(layer, estimate, cfg)}"
            )
        others = [layer.name for layer in slow if layer not in limiting]
        if others:
            problems.append(
                f"throughput: {len(others)} more layer(s) ({', '.join(others[:6])}{', ...' if len(others) > 6 else ''}) "
                f"were folded only down to the limiting layer's {estimate.max_cycles:,} cycles (FINN's two-pass "
                "relaxation); they follow once it is fixed"
            )
    for resource, used in estimate.utilization.items():
        if used <= 1.0:
            continue
        largest = sorted(estimate.layers, key=lambda item: -item.resources[resource])[:3]
        names = ", ".join(
            f"{layer.name}{_module(layer)} {layer.resources[resource]:,.0f}" for layer in largest
        )
        problems.append(
            f"fit: {estimate.totals[resource]:,.0f} {resource} estimated, {estimate.part.part} has "
            f"{estimate.part.capacity[resource]:,}; largest: {names}: {FIT_FIXES[resource]}"
        )
    return problems


def _module(layer: LayerEstimate) -> str:
    return f", module {layer.module!r}" if layer.module else ""


def _shape(layer: LayerEstimate) -> str:
    return ", ".join(f"{k}={v}" for k, v in layer.shape.items()) or "no shape attributes"


def _folding(layer: LayerEstimate) -> str:
    return (
        ", ".join(f"{k}={layer.folding[k]}" for k in ("PE", "SIMD") if k in layer.folding)
        or "its only folding"
    )


#: resource -> what lowers it
FIT_FIXES: dict[str, str] = {
    "LUT": "lower target_fps (less parallel layers use fewer LUTs), lower the bit widths of weights and "
    "activations, or choose a larger part",
    "BRAM_18K": "weights and thresholds live in block RAM: use fewer or narrower weights (lower weight bit "
    "width, fewer channels), a part with more BRAM/URAM, or ram_style='distributed' in the folding config",
    "URAM": "use fewer or narrower weights, or a part with more URAM",
    "DSP": "lower target_fps, or weights and activations of at most 4 bits (FINN maps them to LUTs)",
}


def _speed_fix(layer: LayerEstimate, estimate: Estimate, cfg) -> str:
    best = f"at most {estimate.fps:,.0f} fps at this folding"
    shape, folding = layer.shape, layer.folding
    if any(name == layer.name for name, _ in cfg.folding.layers):
        return f"its folding is the one given (folding[{layer.name!r}]): raise its PE / SIMD, or lower target_fps ({best})"
    mvau_wwidth_max = cfg.mvau_wwidth_max
    if layer.op_type.startswith("MVAU") and folding.get("SIMD", 0) < shape.get("MW", 0):
        return (
            f"SIMD is bounded by mvau_wwidth_max={mvau_wwidth_max} >= SIMD x weight bits: lower the weight bit "
            f"width, raise mvau_wwidth_max, lower target_fps ({best}) or raise clock_mhz"
        )
    return f"lower target_fps ({best}) or raise clock_mhz; FINN's SetFolding could not fold it further"
