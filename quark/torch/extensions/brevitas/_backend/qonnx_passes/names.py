"""qonnx 1.0.0's tensor renaming with dict lookups: ``rename_tensor`` scans every value info,
initializer, annotation and node per name, and these passes rename every tensor of the graph."""

from __future__ import annotations

from qonnx.transformation.base import Transformation

from quark.torch.extensions.brevitas._backend.qonnx_passes.indexed import IndexedModel


class GiveUniqueTensorNames(Transformation):
    """qonnx's ``GiveUniqueTensorNames``: value infos, inputs and outputs renamed ``tensor_<i>`` in
    that order."""

    def apply(self, model):
        view = IndexedModel(model)
        for index, name in enumerate(view.get_all_tensor_names()):
            view.rename_tensor(name, f"tensor_{index}")
        return model, False


class GiveReadableTensorNames(Transformation):
    """qonnx's ``GiveReadableTensorNames``: after ``GiveUniqueTensorNames`` (through ``transform``,
    with its cleanup), each node's outputs ``<node>_out<k>`` and initializer inputs ``<node>_param<k>``,
    the graph's inputs ``global_in[_<i>]`` and outputs ``global_out[_<i>]``."""

    def apply(self, model):
        model = model.transform(GiveUniqueTensorNames())
        view = IndexedModel(model)
        for node in model.graph.node:
            assert node.name != "", "Found empty node name"
            for index, name in enumerate(list(node.output)):
                view.rename_tensor(name, f"{node.name}_out{index}")
            parameters = [name for name in node.input if view.is_initializer(name)]
            for index, name in enumerate(parameters):
                view.rename_tensor(name, f"{node.name}_param{index}")
        for index, vi in enumerate(model.graph.input):
            view.rename_tensor(vi.name, "global_in" if index == 0 else f"global_in_{index}")
        for index, vi in enumerate(model.graph.output):
            view.rename_tensor(vi.name, "global_out" if index == 0 else f"global_out_{index}")
        return model, False
