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
``AssertionError`` for a repeated value info; where qonnx's ``get_by_name`` raises for a name given
twice, a repeated initializer or annotation, qonnx's own method answers). Nodes' inputs may be
rewritten directly only by a pass that keeps :meth:`consumers_changed` informed. Outside such a pass,
use the model itself.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import onnx
import onnx.helper as oh
import onnx.numpy_helper as np_helper
from qonnx.core.datatype import DataType
from qonnx.core.modelwrapper import ModelWrapper
from qonnx.util.basic import get_by_name, random_string

#: qonnx's ``get_tensor_datatype`` for a tensor without an annotation: ONNX element type -> DataType
_ELEMENT_DATATYPES = {onnx.TensorProto.FLOAT: "FLOAT32", onnx.TensorProto.FLOAT16: "FLOAT16"}
_VI_CONTAINERS = ("input", "output", "value_info")


class IndexedModel(ModelWrapper):
    """``model``'s graph with dict lookups; its writes update the dicts (see the module docstring)."""

    def __init__(self, model: ModelWrapper):  # no ModelWrapper.__init__: the proto is shared, not checked
        self._model_proto = model.model
        self.fix_float64 = getattr(model, "fix_float64", False)
        self._vis: dict[str, list[tuple[str, Any, int]]] | None = None
        self._next_rank = 0
        self._inits: dict[str, Any] | None = None
        self._annotations: dict[str, Any] | None = None
        self._producers: dict[str, Any] | None = None
        self._consumers: dict[str, list[Any]] | None = None
        #: names given to more than one initializer, annotation or node output (see _first)
        self.repeated: dict[str, set[str]] = {}

    # -- the dicts, built on first use ----------------------------------------------------------------

    @property
    def vis(self) -> dict[str, list[tuple[str, Any, int]]]:
        """tensor name -> [(container, value info, rank)], rank the value info's place in qonnx's
        order (inputs, outputs, value_info): kept by a value info replaced in place, new for one
        appended to value_info."""
        if self._vis is None:
            self._vis = defaultdict(list)
            vis = [(container, vi) for container in _VI_CONTAINERS for vi in getattr(self.graph, container)]
            for rank, (container, vi) in enumerate(vis):
                self._vis[vi.name].append((container, vi, rank))
            self._next_rank = len(vis)
        return self._vis

    def _first(self, kind: str, named) -> dict[str, Any]:
        """name -> the first item of that name in ``named`` ((name, item) pairs), the names given
        twice kept in ``repeated[kind]``."""
        first: dict[str, Any] = {}
        repeated = self.repeated[kind] = set()
        for name, item in named:
            if name in first:
                repeated.add(name)
            else:
                first[name] = item
        return first

    @property
    def inits(self) -> dict[str, Any]:
        if self._inits is None:
            self._inits = self._first("initializer", ((t.name, t) for t in self.graph.initializer))
        return self._inits

    @property
    def annotations(self) -> dict[str, Any]:
        if self._annotations is None:
            annotations = self.graph.quantization_annotation
            self._annotations = self._first("annotation", ((a.tensor_name, a) for a in annotations))
        return self._annotations

    @property
    def producers(self) -> dict[str, Any]:
        if self._producers is None:
            self._producers = self._first("producer", ((name, n) for n in self.graph.node for name in n.output))
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
        while self.vis.get(candidate):
            candidate = random_string()
        return candidate

    def _annotation(self, tensor_name: str):
        """The tensor's annotation (qonnx's ``get_by_name``, raising as it does for a name annotated twice)."""
        annotation = self.annotations.get(tensor_name)
        if tensor_name in self.repeated["annotation"]:
            return get_by_name(self.graph.quantization_annotation, tensor_name, "tensor_name")
        return annotation

    def _annotation_value(self, tensor_name: str, key: str) -> str | None:
        annotation = self._annotation(tensor_name)
        entry = None if annotation is None else get_by_name(annotation.quant_parameter_tensor_names, key, "key")
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
        annotation = self._annotation(tensor_name)
        if annotation is None:
            if value is None:
                return
            annotation = onnx.TensorAnnotation()
            annotation.tensor_name = tensor_name
            annotation.quant_parameter_tensor_names.append(onnx.StringStringEntryProto(key=key, value=value))
            self.graph.quantization_annotation.append(annotation)
            self.annotations[tensor_name] = self.graph.quantization_annotation[-1]
            return
        entry = get_by_name(annotation.quant_parameter_tensor_names, key, "key")
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
        found = self.vis[tensor_name]  # at most one entry: get_tensor_valueinfo asserted it
        container = found[0][0] if found else "value_info"
        place = getattr(self.graph, container)
        if container == "value_info":
            if found:
                place.remove(found[0][1])
            place.append(new)
            found[:] = [(container, place[-1], self._next_rank)]
            self._next_rank += 1
        else:  # in place, keeping the order of the graph's inputs or outputs
            index = [vi.name for vi in place].index(tensor_name)
            del place[index]
            value_info = self.graph.value_info
            if len(place) == len(value_info) and place == value_info:  # qonnx tests the container with ==:
                place.append(new)  # equal to value_info, it is appended to (the ranks built again)
                self._vis = None
                return
            place.insert(index, new)
            found[:] = [(container, place[index], found[0][2])]

    def set_initializer(self, tensor_name, tensor_value):
        proto = np_helper.from_array(tensor_value)
        proto.name = tensor_name
        self._remove_initializer(tensor_name)
        self.graph.initializer.append(proto)
        if tensor_name in self.inits:
            self.repeated["initializer"].add(tensor_name)
        else:
            self.inits[tensor_name] = self.graph.initializer[-1]
        self.set_tensor_shape(tensor_name, list(tensor_value.shape), proto.data_type)

    def del_initializer(self, initializer_name):
        if initializer_name in self.inits and initializer_name in self.repeated["initializer"]:
            get_by_name(self.graph.initializer, initializer_name)  # qonnx's: raises for a name given twice
        self._remove_initializer(initializer_name)

    def _remove_initializer(self, tensor_name: str) -> None:
        """The first initializer of this name removed, the next of the name (if given twice) first."""
        old = self.inits.pop(tensor_name, None)
        if old is None:
            return
        self.graph.initializer.remove(old)
        if tensor_name in self.repeated["initializer"]:
            rest = [t for t in self.graph.initializer if t.name == tensor_name]
            self.inits[tensor_name] = rest[0]
            if len(rest) == 1:
                self.repeated["initializer"].discard(tensor_name)

    def rename_tensor(self, old_name, new_name):
        """qonnx's ``rename_tensor`` from the dicts: the value info of each container, the initializer
        and annotation, and the name in every node's inputs and outputs. Where qonnx's scan does more
        (a name in use already, given twice in one container or to one node's inputs or outputs, or
        produced twice) or raises, qonnx's own renames and the dicts are rebuilt."""
        users = {id(n): n for n in self.consumers.get(old_name, ())}
        producer = self.producers.get(old_name)
        if producer is not None:
            users[id(producer)] = producer
        entries = self.vis.get(old_name, [])
        taken = bool(self.vis.get(new_name) or self.consumers.get(new_name)) or any(
            new_name in table for table in (self.inits, self.annotations, self.producers)
        )
        repeated = (
            len({container for container, _, _ in entries}) < len(entries)
            or any(old_name in names for names in self.repeated.values())
            or any(list(n.input).count(old_name) > 1 or list(n.output).count(old_name) > 1 for n in users.values())
        )
        if taken or repeated:
            try:
                ModelWrapper.rename_tensor(self, old_name, new_name)
            finally:
                self._vis = self._inits = self._annotations = None
                self.consumers_changed()
            return
        if entries:
            for _, vi, _ in entries:
                vi.name = new_name
            self.vis[new_name] = self.vis.pop(old_name)
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

