"""The package's own qonnx transformations for hls4ml, on hand-built graphs: what they remove, keep
and rewrite (the compiled projects in test_project.py check the numbers end to end)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from qonnx.core.modelwrapper import ModelWrapper

from quark.torch.extensions.brevitas._backend.targets.hls4ml.layout import StaleTransposes, ZeroPaddedMaxPools
from quark.torch.extensions.brevitas._backend.targets.hls4ml.precision import CHANNELS_LAST


def _graph(nodes, shapes: dict[str, list[int]], first: str, last: str) -> ModelWrapper:
    values = {name: helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in shapes.items()}
    inner = [v for name, v in values.items() if name not in (first, last)]
    graph = helper.make_graph(nodes, "g", [values[first]], [values[last]], value_info=inner)
    return ModelWrapper(helper.make_model(graph))


@pytest.mark.parametrize(
    "annotated, kept",
    [([1, 2, 2, 4], False), ([1, 2, 4, 2], True)],
    ids=["stale", "real"],
)
def test_a_transpose_goes_only_when_annotated_with_its_input_shape(annotated, kept):
    """(0, 2, 3, 1) on [1, 2, 2, 4] makes [1, 2, 4, 2]; annotated [1, 2, 2, 4], it is one qonnx meant to
    cancel, and its consumer reads its input."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="r0"),
        helper.make_node("Transpose", ["a"], ["b"], name="t", perm=[0, 2, 3, 1]),
        helper.make_node("Relu", ["b"], ["y"], name="r1"),
    ]
    model = _graph(nodes, {"x": [1, 2, 2, 4], "a": [1, 2, 2, 4], "b": annotated, "y": annotated}, "x", "y")
    model = model.transform(StaleTransposes())
    assert [n.name for n in model.graph.node] == (["r0", "t", "r1"] if kept else ["r0", "r1"])
    assert list(model.graph.node[-1].input) == (["b"] if kept else ["a"])


def test_a_padded_max_pool_on_an_unsigned_input_is_zero_padded_first():
    """ONNX's pads (top, left, bottom, right) = (1, 0, 2, 1) become the NHWC Pad's begins and ends."""
    pool = helper.make_node(
        "MaxPool", ["a"], ["y"], name="pool", domain=CHANNELS_LAST, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 2, 1]
    )
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r0"), pool]
    model = _graph(nodes, {"x": [1, 6, 6, 4], "a": [1, 6, 6, 4], "y": [1, 4, 3, 4]}, "x", "y")
    model = model.transform(ZeroPaddedMaxPools(lambda tensor: tensor == "a"))
    pad, pool = model.graph.node[1], model.graph.node[2]
    assert pad.op_type == "Pad" and pool.op_type == "MaxPool" and pool.input[0] == pad.output[0]
    assert np.array_equal(model.get_initializer(pad.input[1]), [0, 1, 0, 0, 0, 2, 1, 0])
    assert model.get_tensor_shape(pad.output[0]) == [1, 9, 7, 4]
    assert next(list(a.ints) for a in pool.attribute if a.name == "pads") == [0, 0, 0, 0]


def test_a_padded_max_pool_on_a_signed_input_keeps_its_padding():
    pool = helper.make_node(
        "MaxPool", ["x"], ["y"], name="pool", domain=CHANNELS_LAST, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]
    )
    model = _graph([pool], {"x": [1, 6, 6, 4], "y": [1, 3, 3, 4]}, "x", "y")
    assert [n.op_type for n in model.transform(ZeroPaddedMaxPools(lambda tensor: False)).graph.node] == ["MaxPool"]
