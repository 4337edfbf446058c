"""qonnx 1.0.0's ``InferDataTypes`` and ``InferDataLayouts`` with dict lookups: qonnx's own passes
run on an :class:`~.indexed.IndexedModel` of the model (their writes, and the custom ops'
``infer_node_datatype`` they call, go through ``set_tensor_datatype`` / ``set_tensor_layout``, which
the view keeps indexed). qonnx's scan of the annotations per lookup made them quadratic: each runs
after most of FINN's streamlining passes."""

from __future__ import annotations

from qonnx.transformation import infer_data_layouts, infer_datatypes

from quark.torch.extensions.brevitas._backend.qonnx_passes.indexed import IndexedModel


class InferDataTypes(infer_datatypes.InferDataTypes):
    """qonnx's ``InferDataTypes`` on dict lookups: the same annotations."""

    def apply(self, model):
        _, changed = super().apply(IndexedModel(model))
        return model, changed


class InferDataLayouts(infer_data_layouts.InferDataLayouts):
    """qonnx's ``InferDataLayouts`` on dict lookups: the same annotations."""

    def apply(self, model):
        _, changed = super().apply(IndexedModel(model))
        return model, changed
