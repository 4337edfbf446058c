"""The FINN estimate report says one thing: the verdict, each layer against the target's cycles and
FINN's folding log agree; hardware layers are named after the torch module they implement."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper
from qonnx.core.modelwrapper import ModelWrapper

from quark.torch.extensions.brevitas._backend.targets.finn.estimate import Estimate, LayerEstimate
from quark.torch.extensions.brevitas._backend.targets.finn.origins import ORIGIN, layer_module
from quark.torch.extensions.brevitas._backend.targets.finn.parts import FpgaPart

PART = FpgaPart("xc7z020clg400-1", ("Pynq-Z1",), {"LUT": 53200, "FF": 106400, "BRAM_18K": 280, "URAM": 0, "DSP": 220}, "test")
NOTE = "One or more nodes did not reach the target throughput."


def layer(name: str, cycles: int, module: str = "conv") -> LayerEstimate:
    resources = {"LUT": 100.0, "BRAM_18K": 1.0, "URAM": 0.0, "DSP": 0.0}
    return LayerEstimate(name, name.rsplit("_", 1)[0], module, resources, cycles, {"PE": 1, "SIMD": 1}, {})


def estimate(target_fps: float | None, cycles: tuple[int, ...], notes: tuple[str, ...] = ()) -> Estimate:
    layers = tuple(layer(f"MVAU_hls_{i}", c) for i, c in enumerate(cycles))
    worst = max(layers, key=lambda item: item.cycles)
    return Estimate(PART, 100.0, target_fps, layers, worst.cycles, worst.name, sum(cycles), notes)


def test_a_met_target_is_met_everywhere_in_the_report():
    e = estimate(10_000, (9_000, 5_000), notes=(NOTE,))
    report = e.markdown()
    assert e.meets_target and "Target 10,000 fps: **met**, 11,111 fps estimated (every layer within 10,000 cycles" in report
    assert report.count("| yes |") == 2 and "**no**" not in report
    # FINN's note from its first folding pass is shown as what it is, not as the verdict
    assert "they come from its intermediate passes; the table above is the final folding, and every layer is within the target" in report
    assert e.to_json()["layers_over_target"] == []


def test_a_missed_target_names_the_layers_over_it():
    e = estimate(20_000, (9_000, 4_000), notes=(NOTE,))
    report = e.markdown()
    assert not e.meets_target and "Target 20,000 fps: **missed**, 11,111 fps estimated (1 layer(s) over 5,000 cycles" in report
    assert "| MVAU_hls_0 | conv |  | PE=1, SIMD=1 | 9,000 | **no** |" in report  # arithmetic: none given
    assert "| MVAU_hls_1 | conv |  | PE=1, SIMD=1 | 4,000 | yes |" in report
    assert e.to_json()["layers_over_target"] == ["MVAU_hls_0"]


def test_without_a_target_no_column_claims_one():
    report = estimate(None, (9_000,)).markdown()
    assert "No target fps (every layer PE = SIMD = 1): 11,111 fps estimated" in report and "within target" not in report


def test_feeders_and_scales_are_named_after_the_layer_they_serve():
    """A padding and sliding-window pair feeding a pool are the pool's (not the batch norm tagged
    near them); a constant scale after a matrix layer is that layer's."""
    def node(op, inputs, outputs, module=None):
        n = helper.make_node(op, inputs, outputs, name=f"{op}_0")
        if module:
            entry = n.metadata_props.add()
            entry.key, entry.value = ORIGIN, module
        return n

    nodes = [
        node("FMPadding_rtl", ["x"], ["a"], "bn1"),
        node("ConvolutionInputGenerator_rtl", ["a"], ["b"], "bn1"),
        node("Pool_hls", ["b"], ["c"], "pool"),
        node("MVAU_hls", ["c", "w"], ["d"], "head"),
        node("ElementwiseMul_hls", ["d", "s"], ["y"], "input_quant"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor("w", TensorProto.FLOAT, [4, 4], np.ones(16)), helper.make_tensor("s", TensorProto.FLOAT, [1], [0.5])],
    )
    model = ModelWrapper(helper.make_model(graph))
    named = {n.op_type: layer_module(model, n) for n in model.graph.node}
    assert named == {
        "FMPadding_rtl": "pool",
        "ConvolutionInputGenerator_rtl": "pool",
        "Pool_hls": "pool",
        "MVAU_hls": "head",
        "ElementwiseMul_hls": "head",
    }
