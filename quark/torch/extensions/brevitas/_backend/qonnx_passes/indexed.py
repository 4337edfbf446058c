"""A qonnx ``ModelWrapper`` over the same ``ModelProto`` whose lookups are answered from dicts.

Why this is hand-written: qonnx's ``ModelWrapper`` keeps nothing but the protobuf, so every
``find_producer``, ``find_consumers``, ``get_initializer``, ``get_tensor_shape``,
``get_tensor_datatype`` ... scans the graph's nodes, value infos, initializers or annotations again
(qonnx 1.0.0 has no index, option or hook for it). A pass that looks up every tensor of the graph is
then quadratic in its size: most of FINN's front-end time on 50+ layer networks.

:class:`IndexedModel` is for one pass at a time: the pass (one of this package's, see
:mod:`.wrapper`) builds it over the model it was given, and while it lives every write to the value
infos, initializers, annotations and node outputs of the graph must go through its methods, which
keep the dicts equal to what qonnx's scans would find (same objects, first match first, the same
``AssertionError`` for a repeated value info). Nodes' inputs may be rewritten directly only by a
pass that keeps :meth:`consumers_changed` informed. Outside such a pass, use the model itself.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import onnx
import onnx.helper as oh
import onnx.numpy_helper as np_helper
from qonnx.core.datatype import DataType
from qonnx.core.modelwrapper import ModelWrapper
from qonnx.util.basic import random_string

#: qonnx's ``get_tensor_datatype`` for a tensor without an annotation: ONNX element type -> DataType
_ELEMENT_DATATYPES = {onnx.TensorProto.FLOAT: "FLOAT32", onnx.TensorProto.FLOAT16: "FLOAT16"}
_VI_CONTAINERS = ("input", "output", "value_info")


class IndexedModel(ModelWrapper):
    """``model``'s graph with dict lookups; its writes update the dicts (see the module docstring)."""

    def __init__(self, model: ModelWrapper):  # no ModelWrapper.__init__: the proto is shared, not checked
        self._model_proto = model.model
        self.fix_float64 = getattr(model, "fix_float64", False)
        self._vis: dict[str, list[Any]] | None = None
        self._inits: dict[str, Any] | None = None
        self._annotations: dict[str, Any] | None = None
        self._producers: dict[str, Any] | None = None
        self._consumers: dict[str, list[Any]] | None = None

    # -- the dicts, built on first use ----------------------------------------------------------------

    @property
    def vis(self) -> dict[str, list[tuple[str, Any]]]:
        """tensor name -> [(container, value info)] in qonnx's order: inputs, outputs, value_info."""
        if self._vis is None:
            self._vis = defaultdict(list)
            for container in _VI_CONTAINERS:
                for vi in getattr(self.graph, container):
                    self._vis[vi.name].append((container, vi))
        return self._vis

    @property
    def inits(self) -> dict[str, Any]:
        if self._inits is None:
            self._inits = {}
            for tensor in self.graph.initializer:
                self._inits.setdefault(tensor.name, tensor)
        return self._inits

    @property
    def annotations(self) -> dict[str, Any]:
        if self._annotations is None:
            self._annotations = {}
            for annotation in self.graph.quantization_annotation:
                self._annotations.setdefault(annotation.tensor_name, annotation)
        return self._annotations

    @property
    def producers(self) -> dict[str, Any]:
        if self._producers is None:
            self._producers = {}
            for node in self.graph.node:
                for name in node.output:
                    self._producers.setdefault(name, node)
        return self._producers

    @property
    def consumers(self) -> dict[str, list[Any]]:
        if self._consumers is None:
            self._consumers = defaultdict(list)
            for node in self.graph.node:
                for name in node.input:
                    self._consumers[name].append(node)
        return self._consumers

    def consumers_changed(self) -> None:
        """Forget the producers and consumers (a pass rewired nodes directly)."""
        self._producers = self._consumers = None

    # -- lookups ------------------------------------------------------------------------------------

    def get_tensor_valueinfo(self, tensor_name):
        found = self.vis.get(tensor_name) or ()
        assert len(found) <= 1, "Multiple ValueInfoProto found for " + tensor_name
        return found[0][1] if found else None

    def get_tensor_shape(self, tensor_name, fix_missing_init_shape=False):
        vi = self.get_tensor_valueinfo(tensor_name)
        if vi is not None:
            return [d.dim_value for d in vi.type.tensor_type.shape.dim]
        value, dtype = self.get_initializer(tensor_name, return_dtype=True)
        if value is None:
            return None
        if fix_missing_init_shape:
            self.set_tensor_shape(tensor_name, value.shape, dtype=dtype)
        return list(value.shape)

    def get_initializer(self, tensor_name, return_dtype=False):
        tensor = self.inits.get(tensor_name)
        if tensor is None:
            return (None, None) if return_dtype else None
        value = np_helper.to_array(tensor)
        return (value, tensor.data_type) if return_dtype else value

    def is_initializer(self, tensor_name: str) -> bool:
        """Whether the graph has an initializer of this name (without converting it)."""
        return tensor_name in self.inits

    def find_producer(self, tensor_name):
        return self.producers.get(tensor_name)

    def find_consumers(self, tensor_name):
        return list(self.consumers.get(tensor_name, ()))

    def get_all_tensor_names(self):
        return [vi.name for c in ("value_info", "input", "output") for vi in getattr(self.graph, c)]

    def make_new_valueinfo_name(self):
        candidate = random_string()
        while candidate in self.vis:
            candidate = random_string()
        return candidate

    def _annotation_value(self, tensor_name: str, key: str) -> str | None:
        annotation = self.annotations.get(tensor_name)
        if annotation is None:
            return None
        entry = next((e for e in annotation.quant_parameter_tensor_names if e.key == key), None)
        return None if entry is None else entry.value

    def get_tensor_datatype(self, tensor_name):
        value = self._annotation_value(tensor_name, "finn_datatype")
        if value is not None:
            return DataType[value]
        vi = self.get_tensor_valueinfo(tensor_name)
        if vi is None:
            _, element = self.get_initializer(tensor_name, return_dtype=True)
        else:
            element = vi.type.tensor_type.elem_type
        return DataType[_ELEMENT_DATATYPES.get(element, "FLOAT32")]

    def get_tensor_layout(self, tensor_name):
        value = self._annotation_value(tensor_name, "tensor_layout")
        return None if value is None else eval(value)

    def get_tensor_sparsity(self, tensor_name):
        value = self._annotation_value(tensor_name, "tensor_sparsity")
        return None if value is None else eval(value)

    # -- writes -------------------------------------------------------------------------------------

    def _annotate(self, tensor_name: str, key: str, value: str | None) -> None:
        """qonnx's annotation setters: the entry ``key`` of the tensor's first annotation set to
        ``value`` (``None``: the entry cleared, as ``set_tensor_datatype(name, None)``), the
        annotation and the entry created when missing."""
        annotation = self.annotations.get(tensor_name)
        if annotation is None:
            if value is None:
                return
            annotation = onnx.TensorAnnotation()
            annotation.tensor_name = tensor_name
            annotation.quant_parameter_tensor_names.append(onnx.StringStringEntryProto(key=key, value=value))
            self.graph.quantization_annotation.append(annotation)
            self.annotations[tensor_name] = self.graph.quantization_annotation[-1]
            return
        entry = next((e for e in annotation.quant_parameter_tensor_names if e.key == key), None)
        if entry is not None:
            if value is None:
                entry.Clear()
            else:
                entry.value = value
        elif value is not None:
            annotation.quant_parameter_tensor_names.append(onnx.StringStringEntryProto(key=key, value=value))

    def set_tensor_datatype(self, tensor_name, datatype):
        self._annotate(tensor_name, "finn_datatype", None if datatype is None else datatype.name)

    def set_tensor_layout(self, tensor_name, data_layout):
        assert type(data_layout) is list, "data_layout must be a list"
        self._annotate(tensor_name, "tensor_layout", str(data_layout))

    def set_tensor_sparsity(self, tensor_name, sparsity_dict):
        self._annotate(tensor_name, "tensor_sparsity", str(sparsity_dict))

    def set_tensor_shape(self, tensor_name, tensor_shape, dtype=None):
        """qonnx's: a new value info in the container that holds the tensor's (its output's if both
        inputs and outputs do, value_info if none), in place of the first there."""
        old = self.get_tensor_valueinfo(tensor_name)
        if dtype is None:
            dtype = onnx.TensorProto.FLOAT if old is None else old.type.tensor_type.elem_type
        new = oh.make_tensor_value_info(tensor_name, dtype, tensor_shape)
        found = self.vis[tensor_name]
        held = {container for container, _ in found}
        container = "output" if "output" in held else "input" if "input" in held else "value_info"
        place = getattr(self.graph, container)
        first = next((entry for entry in found if entry[0] == container), None)
        index = None
        if first is not None:
            found.remove(first)
            if container != "value_info":
                index = [vi.name for vi in place].index(tensor_name)
            place.remove(first[1])
        if index is None:
            place.append(new)
            found.append((container, place[-1]))
        else:
            place.insert(index, new)
            found.append((container, place[index]))
        found.sort(key=lambda entry: _CONTAINER_ORDER[entry[0]])

    def set_initializer(self, tensor_name, tensor_value):
        proto = np_helper.from_array(tensor_value)
        proto.name = tensor_name
        graph = self.graph
        old = self.inits.pop(tensor_name, None)
        if old is not None:
            graph.initializer.remove(old)
            later = next((t for t in graph.initializer if t.name == tensor_name), None)  # a repeated name
            if later is not None:
                self.inits[tensor_name] = later
        graph.initializer.append(proto)
        self.inits.setdefault(tensor_name, graph.initializer[-1])
        self.set_tensor_shape(tensor_name, list(tensor_value.shape), proto.data_type)

    def del_initializer(self, initializer_name):
        old = self.inits.pop(initializer_name, None)
        if old is not None:
            self.graph.initializer.remove(old)
            later = next((t for t in self.graph.initializer if t.name == initializer_name), None)
            if later is not None:
                self.inits[initializer_name] = later

    def rename_tensor(self, old_name, new_name):
        """qonnx's ``rename_tensor`` from the dicts: the first value info of each container, the first
        initializer and annotation, and the first use in every node's inputs and outputs. A name
        already in use, or used twice by one node, is renamed by qonnx's own scan and the dicts rebuilt."""
        users = {id(n): n for n in self.consumers.get(old_name, ())}
        producer = self.producers.get(old_name)
        if producer is not None:
            users[id(producer)] = producer
        taken = bool(self.vis.get(new_name)) or any(
            new_name in table for table in (self.inits, self.annotations, self.producers)
        )
        repeated = any(list(n.input).count(old_name) + list(n.output).count(old_name) > 1 for n in users.values())
        if taken or repeated or self.consumers.get(new_name):
            ModelWrapper.rename_tensor(self, old_name, new_name)
            self._vis = self._inits = self._annotations = None
            self.consumers_changed()
            return
        entries = self.vis.pop(old_name, [])
        for container in _VI_CONTAINERS:  # the first of each container
            entry = next((e for e in entries if e[0] == container), None)
            if entry is not None:
                entry[1].name = new_name
                entries.remove(entry)
                self.vis[new_name].append(entry)
        if entries:
            self.vis[old_name] = entries
        for table, field in ((self.inits, "name"), (self.annotations, "tensor_name")):
            item = table.pop(old_name, None)
            if item is not None:
                setattr(item, field, new_name)
                table[new_name] = item
        for node in users.values():
            if old_name in node.input:
                node.input[list(node.input).index(old_name)] = new_name
            if old_name in node.output:
                node.output[list(node.output).index(old_name)] = new_name
        if old_name in self.consumers:
            self.consumers[new_name] = self.consumers.pop(old_name)
        if producer is not None:
            self.producers[new_name] = self.producers.pop(old_name)


_CONTAINER_ORDER = {name: i for i, name in enumerate(_VI_CONTAINERS)}
