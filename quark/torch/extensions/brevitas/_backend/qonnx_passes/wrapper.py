"""qonnx's ``ModelWrapper`` with its whole-graph passes run by linear-time equivalents.

:class:`FastModelWrapper` is a ``ModelWrapper`` (any qonnx or FINN transformation takes it) whose
``transform`` runs, for a transformation of a type in its :attr:`~FastModelWrapper.EQUIVALENTS` table,
this package's equivalent instead (the same graph: each is tested byte for byte against qonnx's on
real networks), whose ``cleanup`` (what ``transform`` runs after every transformation) is made of
equivalents, and whose ``check_all_tensor_shapes_specified`` (what every ``ModelWrapper(...)`` runs)
looks tensors up in dicts. A transformation that returns a plain ``ModelWrapper`` has its result
wrapped again, so FINN's passes, which call ``model.transform(...)`` for their sub-passes, keep
running on it. Nothing of qonnx or FINN is modified: the speed is in the class the package's steps
hand to them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, ClassVar

from qonnx.core.modelwrapper import ModelWrapper
from qonnx.transformation import (
    fold_constants,
    general,
    infer_data_layouts,
    infer_datatypes,
    infer_shapes,
    remove,
)
from qonnx.transformation.base import Transformation
from qonnx.transformation.double_to_single_float import DoubleToSingleFloat

from quark.torch.extensions.brevitas._backend.qonnx_passes import annotations, constants, names, shapes, tidy
from quark.torch.extensions.brevitas._backend.qonnx_passes.indexed import IndexedModel

#: qonnx's transformation type -> this package's equivalent, built from the instance given (its options)
Equivalents = dict[type, Callable[[Any], Transformation]]

QONNX_EQUIVALENTS: Equivalents = {
    infer_shapes.InferShapes: lambda t: shapes.InferShapes(),
    infer_datatypes.InferDataTypes: lambda t: annotations.InferDataTypes(t.allow_scaledint_dtypes),
    infer_data_layouts.InferDataLayouts: lambda t: annotations.InferDataLayouts(),
    general.RemoveUnusedTensors: lambda t: tidy.RemoveUnusedTensors(),
    general.RemoveStaticGraphInputs: lambda t: tidy.RemoveStaticGraphInputs(),
    general.SortGraph: lambda t: tidy.SortGraph(),
    general.SortCommutativeInputsInitializerLast: lambda t: tidy.SortCommutativeInputsInitializerLast(),
    general.GiveUniqueParameterTensors: lambda t: tidy.GiveUniqueParameterTensors(),
    general.GiveUniqueTensorNames: lambda t: names.GiveUniqueTensorNames(),
    general.GiveReadableTensorNames: lambda t: names.GiveReadableTensorNames(),
    remove.RemoveIdentityOps: lambda t: tidy.RemoveIdentityOps(t.atol),
    fold_constants.FoldConstants: lambda t: constants.FoldConstantsInOnePass(t.exclude_op_types),
}


class FastModelWrapper(ModelWrapper):
    """A ``ModelWrapper`` whose ``transform`` runs :attr:`EQUIVALENTS` in place of qonnx's passes."""

    #: transformation type -> its equivalent (subclasses add rows: the FINN target's sweeps)
    EQUIVALENTS: ClassVar[Equivalents] = QONNX_EQUIVALENTS

    @classmethod
    def of(cls, model: ModelWrapper | Any) -> FastModelWrapper:
        """``model`` as this class, over the same ``ModelProto`` (itself if it is one already); a path
        or ``ModelProto`` is loaded as ``ModelWrapper`` loads it."""
        if isinstance(model, cls):
            return model
        if not isinstance(model, ModelWrapper):
            return cls(model)
        lifted = cls(model.model, fix_missing_initializer_valueinfo=False)
        lifted.fix_float64 = model.fix_float64
        return lifted

    def equivalent(self, transformation: Transformation) -> Transformation:
        """The transformation this wrapper runs for ``transformation``: its equivalent, or itself."""
        build = self.EQUIVALENTS.get(type(transformation))
        return transformation if build is None else build(transformation)

    def transform(
        self,
        transformation: Transformation,
        make_deepcopy: bool = True,
        cleanup: bool = True,
        apply_to_subgraphs: bool = False,
        use_preorder_traversal: bool = True,
    ) -> FastModelWrapper:
        """qonnx's ``transform`` (apply until nothing changes, then ``cleanup``), with the equivalent
        of ``transformation`` and the result kept this class. Subgraphs are qonnx's business."""
        if apply_to_subgraphs:
            result = super().transform(transformation, make_deepcopy, cleanup, True, use_preorder_traversal)
            return self.of(result)
        model = copy.deepcopy(self) if make_deepcopy else self
        if self.fix_float64:
            model, _ = DoubleToSingleFloat().apply(model)
        transformation = self.equivalent(transformation)
        changed = True
        while changed:
            model, changed = transformation.apply(model)
            model = self.of(model)
        if cleanup:
            model.cleanup()
        return model

    def cleanup(self) -> FastModelWrapper:
        """qonnx's cleanup: unused tensors removed, static inputs moved, nodes sorted, commutative
        inputs ordered, parameter tensors made unique; in place."""
        for transformation in tidy.CLEANUP:
            self.transform(transformation(), make_deepcopy=False, cleanup=False)
        return self

    def check_all_tensor_shapes_specified(self, fix_missing_init_shape: bool = False) -> bool:
        return IndexedModel(self).check_all_tensor_shapes_specified(fix_missing_init_shape)


def cleanup_model(model):
    """qonnx's ``cleanup_model(model)`` (defaults: quantizers preserved, no size override, conv biases
    kept) on a :class:`FastModelWrapper` of ``model``, returned."""
    from qonnx.transformation.general import (
        GiveReadableTensorNames,
        GiveUniqueNodeNames,
        GiveUniqueParameterTensors,
        RemoveStaticGraphInputs,
        RemoveUnusedTensors,
    )
    from qonnx.transformation.infer_shapes import InferShapes
    from qonnx.transformation.quant_constant_folding import FoldTransposeIntoQuantInit

    model = FastModelWrapper.of(model)
    for node in model.graph.node:  # qonnx's "temporary fix for QONNX op domains"
        if node.op_type in ("Quant", "Trunc", "BipolarQuant"):
            node.domain = "qonnx.custom_op.general"
    for transform in (
        InferShapes(),
        GiveUniqueParameterTensors(),
        constants.FoldConstantsInOnePass(),
        FoldTransposeIntoQuantInit(),
        RemoveUnusedTensors(),
        RemoveStaticGraphInputs(),
        GiveUniqueNodeNames(),
        GiveReadableTensorNames(),
    ):
        model = model.transform(transform)
    return model
