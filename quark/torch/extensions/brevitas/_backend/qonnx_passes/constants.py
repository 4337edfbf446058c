"""qonnx 1.0.0's constant folding and ``cleanup_model`` in one pass over the graph.

qonnx's ``FoldConstants`` folds one node per ``apply``, then infers every shape of the graph again,
and ``transform`` calls it again from the first node (qonnx issue #104: it stops after each change so
as not to edit the node list it iterates). A Brevitas QONNX export computes its scales, zero points
and bias quantizers in constant subgraphs, so the folding is quadratic in the graph: DenseNet-121's
export spent minutes in it before its verification could execute a node.
"""

from __future__ import annotations

from qonnx.transformation.base import Transformation

from quark.torch.extensions.brevitas._backend.qonnx_passes.execution import Executor, _Context

#: the quantizers qonnx's cleanup keeps (its ``preserve_qnt_ops=True``)
PRESERVED = ("Quant", "BipolarQuant", "QuantizeLinear", "DequantizeLinear")


class FoldConstantsInOnePass(Transformation):
    """qonnx's ``FoldConstants``: a node with only constant inputs (or a ``Shape`` of a known shape, or
    no input) becomes an initializer holding its output, except ``exclude_op_types``. Every such node
    in one pass, in order: the graph is sorted, so a node's constant producers come before it and are
    folded by the time it is reached, as qonnx's restart from the first node finds them; shapes are
    inferred once after it."""

    def __init__(self, exclude_op_types=PRESERVED):
        super().__init__()
        self.exclude_op_types = tuple(exclude_op_types)

    def apply(self, model):
        from quark.torch.extensions.brevitas._backend.qonnx_passes.shapes import InferShapes

        executor = Executor(model, checked=False)
        view, context = executor.view, _Context(executor.view)
        opset = model.model.opset_import[0].version
        folded = []
        for index, node in enumerate(model.graph.node):
            if node.op_type in self.exclude_op_types:
                continue
            constant = all(view.is_initializer(name) for name in node.input)
            known_shape = node.op_type == "Shape" and view.get_tensor_shape(node.input[0]) is not None
            if not (constant or known_shape):
                continue
            for name in node.input:  # qonnx's 'touch': value infos of the initializers
                view.get_tensor_shape(name, fix_missing_init_shape=True)
            executor.execute_node(node, context, opset)
            view.set_initializer(node.output[0], context[node.output[0]])
            folded.append(index)
        for index in reversed(folded):
            del model.graph.node[index]
        if folded:
            model = model.transform(InferShapes(), make_deepcopy=False, cleanup=False)
        return model, bool(folded)


def cleanup_model(model):
    """qonnx's ``cleanup_model(model)`` (defaults: quantizers preserved, no size override, conv biases
    kept) on a :class:`~.wrapper.FastModelWrapper` of ``model``, returned."""
    from qonnx.transformation.general import (
        GiveReadableTensorNames,
        GiveUniqueNodeNames,
        GiveUniqueParameterTensors,
        RemoveStaticGraphInputs,
        RemoveUnusedTensors,
    )
    from qonnx.transformation.infer_shapes import InferShapes
    from qonnx.transformation.quant_constant_folding import FoldTransposeIntoQuantInit

    from quark.torch.extensions.brevitas._backend.qonnx_passes.wrapper import FastModelWrapper

    model = FastModelWrapper.of(model)
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
