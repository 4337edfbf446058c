"""qonnx's cleanup with constant folding in one pass over the graph.

Why this is hand-written: qonnx 1.0.0's ``FoldConstants`` folds one node per ``apply``, then infers
every shape of the graph again, and ``ModelWrapper.transform`` calls it again from the first node
(qonnx issue #104: it stops after each change so as not to edit the node list it iterates). A
Brevitas QONNX export computes its scales, zero points and bias quantizers in constant subgraphs,
so the folding is quadratic in the graph: DenseNet-121's export spent minutes in it before its
verification could execute a node. :class:`FoldConstantsInOnePass` folds the same nodes in the same
order (the graph is topologically sorted, so a node's constant producers come before it and are
folded by the time it is reached, as qonnx's restart from the first node finds them) and infers the
shapes once; :func:`cleanup_model` is qonnx's ``cleanup_model`` with it. The graphs are the same
as qonnx's (``tests/export/test_qonnx_fold.py`` compares them).
"""

from __future__ import annotations

from qonnx.transformation.base import Transformation

#: the quantizers qonnx's cleanup keeps (its ``preserve_qnt_ops=True``)
PRESERVED = ("Quant", "BipolarQuant", "QuantizeLinear", "DequantizeLinear")


class FoldConstantsInOnePass(Transformation):
    """qonnx's ``FoldConstants``: a node with only constant inputs (or a ``Shape`` of a known shape, or
    no input) becomes an initializer holding its output, except ``exclude_op_types``; every such node
    of the graph in one pass, shapes inferred once after it."""

    def __init__(self, exclude_op_types=PRESERVED):
        super().__init__()
        self.exclude_op_types = tuple(exclude_op_types)

    def apply(self, model):
        import qonnx.core.onnx_exec as oxe
        from qonnx.transformation.infer_shapes import InferShapes

        opset_version = model.model.opset_import[0].version
        context = model.make_empty_exec_context()
        folded = []
        for node in model.graph.node:
            if node.op_type in self.exclude_op_types:
                continue
            constant = all(model.get_initializer(name) is not None for name in node.input)
            known_shape = node.op_type == "Shape" and model.get_tensor_shape(node.input[0]) is not None
            if not (constant or known_shape):
                continue
            for name in node.input:  # qonnx's 'touch': value infos of the initializers
                model.get_tensor_shape(name, fix_missing_init_shape=True)
            oxe.execute_node(node, context, model.graph, opset_version=opset_version)
            model.set_initializer(node.output[0], context[node.output[0]])
            folded.append(node)
        for node in folded:
            model.graph.node.remove(node)
        if folded:
            model = model.transform(InferShapes())
        return model, bool(folded)


def cleanup_model(model):
    """qonnx's ``cleanup_model(model)`` (defaults: quantizers preserved, no size override, conv biases
    kept) with :class:`FoldConstantsInOnePass` for its ``FoldConstants``."""
    from qonnx.transformation.general import (
        GiveReadableTensorNames,
        GiveUniqueNodeNames,
        GiveUniqueParameterTensors,
        RemoveStaticGraphInputs,
        RemoveUnusedTensors,
    )
    from qonnx.transformation.infer_shapes import InferShapes
    from qonnx.transformation.quant_constant_folding import FoldTransposeIntoQuantInit

    for node in model.graph.node:  # qonnx's "temporary fix for QONNX op domains"
        if node.op_type in ("Quant", "Trunc", "BipolarQuant"):
            node.domain = "qonnx.custom_op.general"
    for transform in (
        InferShapes(),
        GiveUniqueParameterTensors(),
        FoldConstantsInOnePass(),
        FoldTransposeIntoQuantInit(),
        RemoveUnusedTensors(),
        RemoveStaticGraphInputs(),
        GiveUniqueNodeNames(),
        GiveReadableTensorNames(),
    ):
        model = model.transform(transform)
    return model
