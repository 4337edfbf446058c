"""qonnx's cleanup with constant folding in one pass (``_backend/qonnx_fold``) gives qonnx's graph.

Compared field by field with ``qonnx.util.cleanup.cleanup_model`` on QONNX exports of the zoo (layer
by layer and graph mode, integer and float scales): the same nodes in the same order (names, op
types, inputs, outputs, attributes), the same initializers (name -> values), value infos and
datatype annotations; and the one-pass fold runs fewer shape inferences.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

pytest.importorskip("qonnx", reason="needs qonnx (pip install -e '.[all]')")

from _shared.zoo import GRAPH_ZOO, quantized
from qonnx.core.modelwrapper import ModelWrapper
from qonnx.util.cleanup import cleanup_model as qonnx_cleanup

from quark.torch.extensions.brevitas._backend import qonnx_fold
from quark.torch.extensions.brevitas.api import ModelExporter


def _graph(model: ModelWrapper) -> dict:
    g = model.graph
    return {
        "nodes": [
            (n.name, n.op_type, n.domain, list(n.input), list(n.output), [a.SerializeToString() for a in n.attribute])
            for n in g.node
        ],
        "initializers": {i.name: onnx.numpy_helper.to_array(i) for i in g.initializer},
        "value_info": sorted(v.SerializeToString() for v in [*g.input, *g.output, *g.value_info]),
        "annotations": sorted(a.SerializeToString() for a in g.quantization_annotation),
    }


def _export(tmp_path, name: str, config: str) -> onnx.ModelProto:
    qmodel, example = quantized(name, config)
    path = tmp_path / f"{name}.onnx"
    ModelExporter(path).export_qonnx_model(qmodel, example, verify=False)
    return onnx.load(path)


@pytest.mark.parametrize("config", ["int8-pof2", "int8-float"])
@pytest.mark.parametrize("name", ["resnet", "mobilenet", "concat", "conv1d"])
def test_one_pass_cleanup_gives_qonnx_cleanups_graph(tmp_path, name, config):
    proto = _export(tmp_path, name, config)
    ours, theirs = _graph(qonnx_fold.cleanup_model(ModelWrapper(proto))), _graph(qonnx_cleanup(ModelWrapper(proto)))
    assert ours["nodes"] == theirs["nodes"]
    assert ours["initializers"].keys() == theirs["initializers"].keys()
    assert all(np.array_equal(ours["initializers"][k], theirs["initializers"][k]) for k in theirs["initializers"])
    assert ours["value_info"] == theirs["value_info"] and ours["annotations"] == theirs["annotations"]


def _constant_chains() -> onnx.ModelProto:
    """y = Reshape(x * (c1 + c2) / Identity(c3) + Shape-derived values, shape from Shape(x)); Constant nodes,
    chains of constant nodes interleaved with dynamic ones (a node foldable only once those before it are),
    a Shape of a static tensor, and a Quant that must stay."""
    from onnx import TensorProto, helper

    def const(name, value):
        return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(np.asarray(value, np.float32)))

    nodes = [
        const("c1", [1.5, 2.0, 0.5, 4.0]),
        helper.make_node("Mul", ["x", "c1"], ["m"]),
        const("c2", [0.25, 0.25, 0.25, 0.25]),
        helper.make_node("Add", ["c1", "c2"], ["c12"]),
        helper.make_node("Mul", ["m", "c12"], ["m2"]),
        helper.make_node("Identity", ["c3"], ["c3i"]),
        helper.make_node("Div", ["m2", "c3i"], ["d"]),
        helper.make_node("Shape", ["d"], ["s"]),
        helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["sf"], ["n"], keepdims=0),
        helper.make_node("Add", ["d", "n"], ["e"]),
        helper.make_node("Quant", ["e", "qs", "qz", "qb"], ["q"], domain="qonnx.custom_op.general",
                         narrow=0, signed=1, rounding_mode="ROUND"),
        helper.make_node("Reshape", ["q", "s"], ["y"]),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "chains",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        initializer=[
            onnx.numpy_helper.from_array(np.asarray(v, np.float32), n)
            for n, v in (("c3", [2.0, 2.0, 4.0, 8.0]), ("qs", 0.5), ("qz", 0.0), ("qb", 8.0))
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("qonnx.custom_op.general", 1)])


def test_constant_chains_fold_as_qonnx_folds_them():
    from qonnx.core.onnx_exec import execute_onnx
    from qonnx.transformation.infer_shapes import InferShapes

    proto = _constant_chains()
    ours_model = qonnx_fold.cleanup_model(ModelWrapper(proto))
    ours, theirs = _graph(ours_model), _graph(qonnx_cleanup(ModelWrapper(proto)))
    assert ours["nodes"] == theirs["nodes"]
    assert ours["initializers"].keys() == theirs["initializers"].keys()
    assert all(np.array_equal(ours["initializers"][k], theirs["initializers"][k]) for k in theirs["initializers"])
    assert ours["value_info"] == theirs["value_info"]
    assert [n[1] for n in ours["nodes"]] == ["Mul", "Mul", "Div", "Add", "Quant", "Reshape"]  # the rest folded
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    name_in, name_out = ours_model.graph.input[0].name, ours_model.graph.output[0].name
    before = execute_onnx(ModelWrapper(proto).transform(InferShapes()), {"x": x})["y"]
    assert np.array_equal(execute_onnx(ours_model, {name_in: x})[name_out], before)


def test_the_graph_mode_finn_export_folds_alike_with_fewer_shape_inferences(tmp_path, monkeypatch):
    from _shared.zoo import with_statistics
    from qonnx.transformation.infer_shapes import InferShapes

    from quark.torch.extensions.brevitas.api import ModelQuantizer
    from quark.torch.extensions.brevitas.presets import finn

    assert "resnet_bn" in GRAPH_ZOO
    model = with_statistics("resnet_bn")
    import torch

    x = torch.rand(4, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    qmodel = ModelQuantizer(finn()).quantize_model(model, [x], progress=False)
    ModelExporter(tmp_path / "m.onnx").export_qonnx_model(qmodel, x, verify=False)
    proto = onnx.load(tmp_path / "m.onnx")
    calls = {"n": 0}
    original = InferShapes.apply

    def counted(self, model):
        calls["n"] += 1
        return original(self, model)

    monkeypatch.setattr(InferShapes, "apply", counted)
    theirs = _graph(qonnx_cleanup(ModelWrapper(proto)))
    qonnx_calls, calls["n"] = calls["n"], 0
    ours = _graph(qonnx_fold.cleanup_model(ModelWrapper(proto)))
    assert ours["nodes"] == theirs["nodes"] and ours["initializers"].keys() == theirs["initializers"].keys()
    assert calls["n"] < qonnx_calls  # qonnx infers every shape again after each folded node
