"""Dict-indexed lookups for qonnx's ``ModelWrapper`` (qonnx 1.0.0) inside audited bulk routines.

Why this is hand-written: qonnx has no index. ``ModelWrapper`` keeps nothing but the ``ModelProto``,
and every ``find_producer`` / ``find_consumers`` / ``get_initializer`` / ``get_tensor_shape`` /
``get_tensor_datatype`` ... scans the graph's nodes, value infos, initializers or annotations anew
(qonnx 1.0.0 has no cache, option or hook for it; neither has FINN). The routines that call them once
per tensor, after every transformation, are quadratic in the graph's size, which is most of FINN's
front-end time on 50+ layer networks.

Invariant: an index is used only inside a *region*, is built at the region's first lookup and is
thrown away when the region ends; while it lives, it equals what qonnx's scan would find. It stays
equal because (1) every write the region's code makes between lookups either goes through one of
``ModelWrapper``'s patched mutators, which update or drop the indexes they touch, or leaves the
fields the region's trusted indexes read (``TRUSTS``) untouched, as audited in qonnx's source; (2) a
container whose length differs from the one the index was built at is rebuilt (a write nobody
foresaw that adds or removes items is caught); (3) ``transform`` runs its transformation in a region
that trusts nothing, and leaving any inner region drops the enclosing regions' indexes; (4) a
mutator that raises drops every index of the graph. Outside regions, and in threads that did not
open ``indexed_lookups()``, every lookup is qonnx's own scan. So graphs come out byte-identical
with and without it (``test_qonnx_index.py`` compares them after every step of FINN's front end
on real networks).

What it patches, while ``with indexed_lookups():`` is open (restored on exit, also on exceptions):

* the lookups ``get_tensor_valueinfo``, ``get_tensor_shape``, ``get_initializer``, ``find_producer``,
  ``find_consumers`` (and so ``find_consumer``, ``find_direct_predecessors`` / ``successors``),
  ``get_tensor_datatype`` and ``get_tensor_layout``: answered from dicts built once per region, with
  qonnx's results (the same protobuf objects, fresh arrays and lists, the same ``None``, the same
  first match and the same ``AssertionError`` / ``Exception`` when names repeat);
* the mutators ``set_tensor_shape``, ``set_initializer``, ``del_initializer``, ``rename_tensor``,
  ``set_tensor_datatype`` / ``layout`` / ``sparsity``: qonnx's writes (found through the indexes
  for ``rename_tensor`` and the annotation setters), then the indexes they affect are updated or
  dropped; ``transform`` runs its transformation in a region that trusts nothing;
* the *regions*, the only places an index is used (``TRUSTS``): ``ModelWrapper``'s
  ``check_all_tensor_shapes_specified`` (run by every ``ModelWrapper(...)``, so by every
  ``InferShapes``), ``InferShapes``' ``_hide_finn_ops``, the replaced routines (``REPLACED``,
  below, which trust no index themselves), the transformations ``transform`` runs after
  every transformation (``SortGraph``, ``SortCommutativeInputsInitializerLast``,
  ``GiveUniqueParameterTensors``, ``RemoveStaticGraphInputs``), ``InferDataTypes``,
  ``InferDataLayouts`` and the renaming passes (``GiveUniqueTensorNames``,
  ``GiveReadableTensorNames``, where ``rename_tensor`` itself runs from the indexes).

Four audited routines are also replaced (``REPLACED``): ``SortGraph.apply``, which ``transform`` runs
after every transformation, orders the nodes with ``list.index`` and the ``toposort`` package, both
quadratic on deep graphs; :func:`_sort_graph` gives the same order in linear time (DenseNet-121's
QONNX: 2.6 s a call with indexed lookups, 0.5 s). ``RemoveIdentityOps.apply`` (FINN's conversion
runs it) infers every shape again after each identity it removes; :func:`_remove_identity_ops`
removes them all in one sweep, the same graph. ``InferShapes.apply`` copies every weight through
ONNX's shape inference four times; :func:`_infer_shapes` infers on a copy without the weights' data,
the same graph. ``GiveUniqueParameterTensors.apply`` converts every weight to an array to learn
that it is one; :func:`_give_unique_parameter_tensors` converts only those it copies.

Why regions, not a cache validated per call: transformations mutate the protobuf directly
(``node.input[0] = name``, ``graph.node.remove(n)``), and with protobuf's upb runtime no such write
is observable. A check that sees every such write must read every name, which costs what the scan
it replaces costs (measured on a 705-node, 1,948-value-info graph: reading all value-info names
138 us vs 421 us for ``get_tensor_shape``; reading all node outputs 320 us vs 153 us for
``find_producer``), and lengths plus container identity plus a counter of ``ModelWrapper``'s own
mutators miss ``node.output[0] = name`` and a ``remove`` followed by an ``insert``, which FINN's
passes do between lookups. So an index lives only for the duration of one region, built at its
first lookup: each region is a routine whose source (and that of the custom ops' methods it calls)
was read for this, whose only writes between lookups are either through the patched mutators (which
keep the indexes exact) or to fields its trusted indexes do not read (``TRUSTS`` lists, per region,
which indexes it may use). Most of qonnx's quadratic cost sits in these routines: they run after
every transformation and look up every tensor of the graph (profiled on FINN's front end of
MobileNetV2; the lookups FINN's passes make themselves took under 1 % of it).

qonnx's ``execute_node`` reuses one ONNX Runtime session per one-node model (``qonnx_exec``).
qonnx's ``execute_onnx`` is a region too (it writes only to its execution context): its per-node
datatype lookups (``sanitize_quant_values``) scanned the annotations, DenseNet-121's QONNX took 560 s
a sample, 29 s indexed.

Where it is on: the FINN target's pipeline (``targets/finn/pipeline.finn_handoff`` /
``dataflow_from_qonnx``, ``targets/finn/dataflow.export_finn_dataflow``) and the QONNX export's
verification (``export/verify._run_qonnx``: qonnx's cleanup and shape inference) run inside
``indexed_lookups()``; ``QUARK_QONNX_INDEX=0`` in the environment turns it off.

Thread-agnostic: the class patch is installed by the first ``indexed_lookups()`` of the process and
removed by the last one to exit; indexes are used only in the thread that opened the context (other
threads, and code outside regions, get qonnx's own lookups' behaviour; the replaced routines,
``REPLACED``, run in every thread while the patch is installed, with qonnx's results; the replaced
``InferShapes`` writes its result into the model it was given, where qonnx's returns a new one and
leaves the given model with its custom ops hidden: ``transform`` deep-copies first, so no caller sees it). Written against qonnx 1.0.0
(``qonnx/core/modelwrapper.py``; any other version patches nothing); the patched functions must
keep their qonnx semantics, which the tests check answer by answer and graph by graph.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import logging
import math
import os
import threading
from collections.abc import Iterator

logger = logging.getLogger(__name__)

#: index kinds: value info (graph inputs, outputs, value_info), initializers, producers,
#: consumers, quantization annotations
VI, INIT, PROD, CONS, QA = "vi", "init", "prod", "cons", "qa"
ALL_KINDS = frozenset({VI, INIT, PROD, CONS, QA})

#: region -> the indexes it may use: every write it makes between lookups goes through a patched
#: mutator or leaves the fields these indexes read untouched (audited in qonnx 1.0.0's source)
TRUSTS: dict[str, frozenset[str]] = {
    # writes: set_tensor_shape (patched) only
    "ModelWrapper.check_all_tensor_shapes_specified": frozenset({VI, INIT}),
    # writes: graph.node remove / insert, after its last lookup
    "SortGraph.apply": frozenset({PROD}),
    # writes: set_initializer, set_tensor_datatype (patched), node.input[i] = ... (no PROD/CONS here)
    "GiveUniqueParameterTensors.apply": frozenset({INIT, VI, QA}),
    # writes: node.input[i] = ...
    "SortCommutativeInputsInitializerLast.apply": frozenset({INIT}),
    # writes: graph.value_info.append, graph.input.remove (no VI here)
    "RemoveStaticGraphInputs.apply": frozenset({INIT}),
    # writes: graph.node insert / remove; custom ops' make_shape_compatible_op build detached nodes
    # (or write through set_initializer / set_tensor_shape)
    "infer_shapes._hide_finn_ops": frozenset({VI, INIT}),
    # writes: nothing to the graph (the execution context only); per node, sanitize_quant_values reads
    # datatypes; custom ops' execute_node read attributes and the context (a partition executes its
    # own model, another ModelProto)
    "onnx_exec.execute_onnx": ALL_KINDS,
    # writes: set_tensor_datatype (patched); custom ops' infer_node_datatype: set_tensor_datatype,
    # set_nodeattr (node attributes, which no index reads)
    "InferDataTypes.apply": frozenset({QA, VI, INIT}),
    # writes: set_tensor_layout (patched)
    "InferDataLayouts.apply": frozenset({QA, VI, INIT}),
    # writes: rename_tensor (patched, indexed itself when every kind is trusted)
    "GiveUniqueTensorNames.apply": ALL_KINDS,
    # writes: rename_tensor; its nested transform(GiveUniqueTensorNames()) works on a copy
    "GiveReadableTensorNames.apply": ALL_KINDS,
    # replaced (_remove_identity_ops): graph.node.remove and rewiring between lookups, so no index
    "RemoveIdentityOps.apply": frozenset(),
    # replaced (_infer_shapes): rewrites the graph's fields; its _hide_finn_ops is a region itself
    "InferShapes.apply": frozenset(),
}

_LOOKUPS = (
    "get_tensor_valueinfo",
    "get_tensor_shape",
    "get_initializer",
    "find_producer",
    "find_consumers",
    "get_tensor_datatype",
    "get_tensor_layout",
)
_MUTATORS = (
    "set_tensor_shape",
    "set_initializer",
    "del_initializer",
    "set_tensor_sparsity",
)

#: qonnx versions whose source the regions were audited against
AUDITED_QONNX = ("1.0.0",)

_install_lock = threading.Lock()
_installed: dict[str, object] = {"count": 0}
_local = threading.local()


# -- the indexes ----------------------------------------------------------------------------------


class _GraphIndex:
    """Dicts over one GraphProto, built per kind on first use. Entries keep qonnx's first match
    and a count of repeats; the protobuf objects are the ones iteration yields (upb caches one
    wrapper per message while it is referenced, so they are the objects qonnx's scans return)."""

    def __init__(self, proto):
        self.proto, self.graph = proto, proto.graph
        self.kinds: dict[str, tuple[int, dict]] = {}  # kind -> (container lengths, dict)

    def _lengths(self, kind: str) -> int:
        g = self.graph
        if kind == VI:
            return len(g.input) + (len(g.output) << 20) + (len(g.value_info) << 40)
        if kind == INIT:
            return len(g.initializer)
        if kind == QA:
            return len(g.quantization_annotation)
        return len(g.node)

    def get(self, kind: str) -> dict:
        entry = self.kinds.get(kind)
        lengths = self._lengths(kind)
        if entry is not None and entry[0] == lengths:
            return entry[1]
        if entry is not None:  # a write the region's audit did not foresee: rebuild, and say so
            logger.debug("qonnx_index: %s container lengths changed outside the mutators; rebuilt", kind)
        table = _BUILDERS[kind](self.graph)
        self.kinds[kind] = (lengths, table)
        return table

    def drop(self, *kinds: str) -> None:
        for kind in kinds or tuple(self.kinds):
            self.kinds.pop(kind, None)

    def refresh_lengths(self, kind: str) -> None:
        entry = self.kinds.get(kind)
        if entry is not None:
            self.kinds[kind] = (self._lengths(kind), entry[1])


def _build_vi(graph) -> dict:
    table: dict[str, list] = {}
    for where, container in enumerate((graph.input, graph.output, graph.value_info)):
        for vi in container:
            entry = table.get(vi.name)
            if entry is None:
                table[vi.name] = [vi, 1, where]
            else:
                entry[1] += 1
    return table


def _build_init(graph) -> dict:
    table: dict[str, list] = {}
    for init in graph.initializer:
        table.setdefault(init.name, []).append(init)
    return table


def _build_prod(graph) -> dict:
    table: dict[str, list] = {}
    for node in graph.node:
        for name in node.output:
            table.setdefault(name, []).append(node)
    return table


def _build_cons(graph) -> dict:
    table: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            table.setdefault(name, []).append(node)
    return table


def _build_qa(graph) -> dict:
    table: dict[str, list] = {}
    for qa in graph.quantization_annotation:
        entry = table.get(qa.tensor_name)
        if entry is None:
            table[qa.tensor_name] = [qa, 1]
        else:
            entry[1] += 1
    return table


_BUILDERS = {VI: _build_vi, INIT: _build_init, PROD: _build_prod, CONS: _build_cons, QA: _build_qa}


# -- regions --------------------------------------------------------------------------------------


class _Region:
    __slots__ = ("indexes", "trusts")

    def __init__(self, trusts: frozenset[str]):
        self.trusts = trusts
        self.indexes: dict[int, _GraphIndex] = {}  # id(ModelProto) -> index (the index holds the proto)


def _enabled() -> bool:
    return getattr(_local, "depth", 0) > 0


def _regions() -> list[_Region]:
    regions = getattr(_local, "regions", None)
    if regions is None:
        regions = _local.regions = []
    return regions


def _table(model, kind: str, name) -> dict | None:
    """The index of ``kind`` for ``model``'s graph, or None: outside a region, in a region that
    does not trust ``kind``, or for a name that is not a string (left to qonnx's scan)."""
    regions = getattr(_local, "regions", None)
    if not regions or kind not in regions[-1].trusts or type(name) is not str:
        return None
    region = regions[-1]
    proto = model._model_proto
    index = region.indexes.get(id(proto))
    if index is None or index.proto is not proto:
        index = region.indexes[id(proto)] = _GraphIndex(proto)
    return index.get(kind)


def _indexes_of(model) -> Iterator[_GraphIndex]:
    """This model's indexes in every open region of this thread."""
    proto = model._model_proto
    for region in getattr(_local, "regions", ()):
        index = region.indexes.get(id(proto))
        if index is not None and index.proto is proto:
            yield index


@contextlib.contextmanager
def region(trusts: frozenset[str]) -> Iterator[None]:
    """A region trusting the indexes ``trusts`` (in this thread, inside ``indexed_lookups()``),
    with indexes of its own; the enclosing regions' indexes are dropped on exit. For audited code
    only: between its lookups, code in it must write the fields those indexes read only through
    ``ModelWrapper``'s mutators."""
    if not _enabled():
        yield
        return
    regions = _regions()
    regions.append(_Region(frozenset(trusts)))
    try:
        yield
    finally:
        regions.pop()
        for outer in regions:  # what this region wrote is not the enclosing regions' audit
            outer.indexes.clear()


def _region(key: str, function):
    """``function`` run as a region trusting ``TRUSTS[key]``."""
    trusts = TRUSTS[key]

    @functools.wraps(function)
    def run(*args, **kwargs):
        if not _enabled():
            return function(*args, **kwargs)
        with region(trusts):
            return function(*args, **kwargs)

    run.__qonnx_index_original__ = function
    return run


# -- the patched lookups (qonnx 1.0.0 semantics) --------------------------------------------------


def _patched_lookups(original: dict) -> dict:
    from onnx import TensorProto
    from onnx import numpy_helper as np_helper
    from qonnx.core.datatype import DataType
    from qonnx.util import basic as util

    onnx_to_qonnx = {TensorProto.FLOAT: "FLOAT32", TensorProto.FLOAT16: "FLOAT16"}

    def _vi_entry(self, tensor_name):
        table = _table(self, VI, tensor_name)
        if table is None:
            return None, False
        entry = table.get(tensor_name)
        if entry is not None and entry[1] > 1:
            assert entry[1] <= 1, "Multiple ValueInfoProto found for " + tensor_name
        return entry, True

    def get_tensor_valueinfo(self, tensor_name):
        entry, indexed = _vi_entry(self, tensor_name)
        if not indexed:
            return original["get_tensor_valueinfo"](self, tensor_name)
        return None if entry is None else entry[0]

    def get_tensor_shape(self, tensor_name, fix_missing_init_shape=False):
        entry, indexed = _vi_entry(self, tensor_name)
        if not indexed:
            return original["get_tensor_shape"](self, tensor_name, fix_missing_init_shape)
        if entry is not None:
            return [x.dim_value for x in entry[0].type.tensor_type.shape.dim]
        tensor_init, tensor_init_dtype = self.get_initializer(tensor_name, return_dtype=True)
        if tensor_init is None:
            return None
        if fix_missing_init_shape:
            self.set_tensor_shape(tensor_name, tensor_init.shape, dtype=tensor_init_dtype)
        return list(tensor_init.shape)

    def get_initializer(self, tensor_name, return_dtype=False):
        table = _table(self, INIT, tensor_name)
        if table is None:
            return original["get_initializer"](self, tensor_name, return_dtype)
        found = table.get(tensor_name)
        try:
            if found is None:
                raise ValueError(tensor_name)
            ret = np_helper.to_array(found[0])
            ret_dtype = found[0].data_type
            return (ret, ret_dtype) if return_dtype else ret
        except ValueError:  # qonnx's: a missing name or an array to_array refuses
            return (None, None) if return_dtype else None

    def find_producer(self, tensor_name):
        table = _table(self, PROD, tensor_name)
        if table is None:
            return original["find_producer"](self, tensor_name)
        found = table.get(tensor_name)
        return None if found is None else found[0]

    def find_consumers(self, tensor_name):
        table = _table(self, CONS, tensor_name)
        if table is None:
            return original["find_consumers"](self, tensor_name)
        return list(table.get(tensor_name, ()))

    def _annotation(self, tensor_name):
        table = _table(self, QA, tensor_name)
        entry = None if table is None else table.get(tensor_name)
        if table is not None and (entry is None or entry[1] == 1):
            return None if entry is None else entry[0]
        # not indexed, or a repeated name: qonnx's scan (which raises on repeats)
        return util.get_by_name(self._model_proto.graph.quantization_annotation, tensor_name, "tensor_name")

    def get_tensor_datatype(self, tensor_name):
        ret = _annotation(self, tensor_name)
        if ret is not None:
            ret = util.get_by_name(ret.quant_parameter_tensor_names, "finn_datatype", "key")
            if ret is not None:
                return DataType[ret.value]
        tensor_vi = self.get_tensor_valueinfo(tensor_name)
        if tensor_vi is None:
            _, onnx_dtype = self.get_initializer(tensor_name, return_dtype=True)
        else:
            onnx_dtype = tensor_vi.type.tensor_type.elem_type
        if onnx_dtype in onnx_to_qonnx:
            return DataType[onnx_to_qonnx[onnx_dtype]]
        return DataType["FLOAT32"]

    def get_tensor_layout(self, tensor_name):
        ret = _annotation(self, tensor_name)
        if ret is not None:
            ret = util.get_by_name(ret.quant_parameter_tensor_names, "tensor_layout", "key")
            if ret is not None:
                try:  # qonnx writes str(list): a literal, parsed without running anything
                    return ast.literal_eval(ret.value)
                except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                    pass  # not a literal: qonnx's own answer (which eval()s it), as without the index
                return original["get_tensor_layout"](self, tensor_name)
        return None

    patched = {
        "get_tensor_valueinfo": get_tensor_valueinfo,
        "get_tensor_shape": get_tensor_shape,
        "get_initializer": get_initializer,
        "find_producer": find_producer,
        "find_consumers": find_consumers,
        "get_tensor_datatype": get_tensor_datatype,
        "get_tensor_layout": get_tensor_layout,
    }
    for name, function in patched.items():
        functools.update_wrapper(function, original[name])
    return patched


# -- the patched mutators: qonnx's, then the indexes they touch kept exact or dropped -------------


def _after_set_tensor_shape(model, tensor_name, *_args, **_kwargs) -> None:
    for index in _indexes_of(model):
        entry = index.kinds.get(VI)
        if entry is None:
            continue
        old = entry[1].get(tensor_name)
        graph = index.graph
        if old is not None and old[1] > 1:
            index.drop(VI)
            continue
        where = old[2] if old is not None else 2
        if where == 2:
            new = graph.value_info[len(graph.value_info) - 1] if len(graph.value_info) else None
        else:
            container = graph.input if where == 0 else graph.output
            new = next((v for v in container if v.name == tensor_name), None)
        if new is None or new.name != tensor_name:
            index.drop(VI)
            continue
        entry[1][tensor_name] = [new, 1, where]
        index.refresh_lengths(VI)


def _after_set_initializer(model, tensor_name, *_args, **_kwargs) -> None:
    for index in _indexes_of(model):
        entry = index.kinds.get(INIT)
        if entry is None:
            continue
        graph = index.graph
        new = graph.initializer[len(graph.initializer) - 1] if len(graph.initializer) else None
        if new is None or new.name != tensor_name:
            index.drop(INIT)
            continue
        previous = entry[1].get(tensor_name, [])
        entry[1][tensor_name] = [*previous[1:], new]  # qonnx removed the first of that name, appended one
        index.refresh_lengths(INIT)


def _after_annotation(model, tensor_name, *_args, **_kwargs) -> None:
    for index in _indexes_of(model):
        entry = index.kinds.get(QA)
        if entry is None:
            continue
        graph = index.graph
        if entry[0] == index._lengths(QA):  # an annotation edited in place: same objects
            continue
        last = graph.quantization_annotation[len(graph.quantization_annotation) - 1]
        if entry[0] + 1 == index._lengths(QA) and last.tensor_name == tensor_name and tensor_name not in entry[1]:
            entry[1][tensor_name] = [last, 1]
            index.refresh_lengths(QA)
        else:
            index.drop(QA)


def _annotation_setter(function, key: str):
    """qonnx's ``set_tensor_datatype`` (``key`` "finn_datatype") or ``set_tensor_layout``
    ("tensor_layout"); in a region trusting the annotation index, the same writes with the
    annotation found through it (qonnx's own when the name is annotated twice: it raises)."""
    import onnx
    from qonnx.util import basic as util

    def value_of(argument):
        return argument.name if key == "finn_datatype" else str(argument)

    @functools.wraps(function)
    def setter(self, tensor_name, argument):
        table = _table(self, QA, tensor_name) if getattr(_local, "regions", None) else None
        entry = None if table is None else table.get(tensor_name)
        if table is None or (entry is not None and entry[1] > 1):
            return _mutator_call(function, _after_annotation, self, tensor_name, argument)
        if key == "tensor_layout":
            assert type(argument) is list, "data_layout must be a list"
        if entry is not None:
            found = util.get_by_name(entry[0].quant_parameter_tensor_names, key, "key")
            if found is not None:
                if argument is None:  # set_tensor_datatype(name, None)
                    found.Clear()
                else:
                    found.value = value_of(argument)
            elif argument is not None:
                item = onnx.StringStringEntryProto()
                item.key = key
                item.value = value_of(argument)
                entry[0].quant_parameter_tensor_names.append(item)
        elif argument is not None:
            annotation = onnx.TensorAnnotation()
            item = onnx.StringStringEntryProto()
            item.key = key
            item.value = value_of(argument)
            annotation.tensor_name = tensor_name
            annotation.quant_parameter_tensor_names.append(item)
            annotations = self._model_proto.graph.quantization_annotation
            annotations.append(annotation)
            table[tensor_name] = [annotations[len(annotations) - 1], 1]
            for index in _indexes_of(self):
                if index.kinds.get(QA, (None, None))[1] is table:
                    index.refresh_lengths(QA)
        return None

    setter.__qonnx_index_original__ = function
    return setter


def _drop(*kinds: str):
    def after(model, *_args, **_kwargs) -> None:
        for index in _indexes_of(model):
            index.drop(*kinds)

    return after


_AFTER = {
    "set_tensor_shape": _after_set_tensor_shape,
    "set_initializer": _after_set_initializer,
    "del_initializer": _drop(INIT),
    "set_tensor_sparsity": _after_annotation,
}


def _mutator_call(function, after, self, *args, **kwargs):
    """``function`` (a qonnx mutator), then ``after`` on the indexes; all dropped if it raises."""
    try:
        result = function(self, *args, **kwargs)
    except BaseException:  # qonnx may have written part of it: nothing indexed is trusted
        for index in _indexes_of(self):
            index.drop()
        raise
    after(self, *args, **kwargs)
    return result


def _mutator(name: str, function):
    after = _AFTER[name]

    @functools.wraps(function)
    def run(self, *args, **kwargs):
        if not getattr(_local, "regions", None):
            return function(self, *args, **kwargs)
        return _mutator_call(function, after, self, *args, **kwargs)

    run.__qonnx_index_original__ = function
    return run


def _transform(function):
    """``ModelWrapper.transform`` as a region trusting nothing: the transformation it runs was not
    audited, even when an audited routine calls it (the audited ones inside open their own)."""

    @functools.wraps(function)
    def transform(self, *args, **kwargs):
        if not _enabled():
            return function(self, *args, **kwargs)
        with region(frozenset()):
            return function(self, *args, **kwargs)

    transform.__qonnx_index_original__ = function
    return transform


def _rename_tensor(function):
    """qonnx's ``rename_tensor``; in a region trusting every index, and when neither name repeats
    nor the new one exists, the same writes found through the indexes (which then move the name)."""

    @functools.wraps(function)
    def rename_tensor(self, old_name, new_name):
        if not getattr(_local, "regions", None):
            return function(self, old_name, new_name)
        tables = {kind: _table(self, kind, old_name) for kind in (VI, INIT, QA, PROD, CONS)}
        if type(new_name) is str and None not in tables.values() and _rename_indexed(tables, old_name, new_name):
            return None
        try:
            return function(self, old_name, new_name)
        finally:
            for index in _indexes_of(self):
                index.drop()

    rename_tensor.__qonnx_index_original__ = function
    return rename_tensor


def _rename_indexed(tables: dict, old: str, new: str) -> bool:
    if old == new or any(new in table for table in tables.values()):
        return False
    vi, init, qa = tables[VI].get(old), tables[INIT].get(old), tables[QA].get(old)
    producers, consumers = tables[PROD].get(old, []), tables[CONS].get(old, [])
    if (vi and vi[1] > 1) or (init and len(init) > 1) or (qa and qa[1] > 1):
        return False  # qonnx's get_by_name raises midway: let qonnx do it
    if len({id(n) for n in producers}) != len(producers) or len({id(n) for n in consumers}) != len(consumers):
        return False  # a node naming it twice: qonnx renames its first occurrence only
    if vi:
        vi[0].name = new
    if init:
        init[0].name = new
    if qa:
        qa[0].tensor_name = new
    for node in consumers:
        node.input[list(node.input).index(old)] = new
    for node in producers:
        node.output[list(node.output).index(old)] = new
    for table in tables.values():
        if old in table:
            table[new] = table.pop(old)
    return True


# -- SortGraph in linear time -------------------------------------------------------------------------


def _sort_graph(self, model):
    """qonnx 1.0.0's ``SortGraph.apply`` with the same result in linear time.

    qonnx finds each predecessor's position with ``list.index`` and orders with the ``toposort``
    package, which rebuilds its table of remaining nodes once per level: both quadratic on deep
    graphs (DenseNet-121's 2,600 nodes: a second per call, and ``transform`` calls it after every
    transformation). Here positions come from a dict and each node's level (``toposort``'s round: 0
    without predecessors, else one more than its deepest predecessor's) from one pass; the order is
    ``toposort_flatten``'s, by level and then position. Nodes qonnx drops (no predecessor, and no
    input that is an initializer or a graph input, unless another node depends on them) are dropped
    alike; a cycle raises ``toposort``'s ``CircularDependencyError``."""
    from qonnx.util import basic as util
    from toposort import CircularDependencyError

    if len(model.graph.node) == 1:
        return (model, False)
    node_list = list(model.graph.node)
    position = {id(n): i for i, n in enumerate(node_list)}
    dependencies: dict[int, set[int]] = {}
    for index, node in enumerate(node_list):
        predecessors = model.find_direct_predecessors(node)
        if predecessors is None:
            if any(
                util.get_by_name(model.graph.initializer, name) or util.get_by_name(model.graph.input, name)
                for name in node.input
            ):
                dependencies[index] = set()
            continue
        found = [position.get(id(p)) for p in predecessors]
        dependencies[index] = {i if i is not None else node_list.index(p) for i, p in zip(found, predecessors)}
    for deps in list(dependencies.values()):  # toposort's extra items: depended on, not listed
        for dep in deps:
            dependencies.setdefault(dep, set())
    level: dict[int, int] = {}
    for start, first in dependencies.items():  # depth first, each node's level once its predecessors have theirs
        if start in level:
            continue
        stack, on_path = [(start, iter(first))], {start}
        while stack:
            item, pending = stack[-1]
            for dep in pending:
                if dep == item or dep in level:  # toposort discards self-dependencies
                    continue
                if dep in on_path:
                    raise CircularDependencyError({i: dependencies[i] for i in dependencies if i not in level})
                on_path.add(dep)
                stack.append((dep, iter(dependencies[dep])))
                break
            else:
                level[item] = 1 + max((level[d] for d in dependencies[item] if d != item), default=-1)
                on_path.discard(item)
                stack.pop()
    for node in node_list:
        model.graph.node.remove(node)
    for new_index, index in enumerate(sorted(level, key=lambda i: (level[i], i))):
        model.graph.node.insert(new_index, node_list[index])
    return (model, False)


# -- RemoveIdentityOps in one sweep -----------------------------------------------------------------


def _identity_operand(model, node, neutral: float, atol: float) -> bool:
    import numpy as np

    operand = model.get_initializer(node.input[1]) if len(node.input) > 1 else None
    return operand is not None and bool(np.isclose(operand, np.full_like(operand, neutral), atol=atol).all())


def _zero_pads(model, node, atol: float) -> bool:
    import numpy as np
    from qonnx.util.basic import get_by_name

    pads = get_by_name(node.attribute, "pads")
    pads = np.asarray(pads.ints, dtype=np.int64) if pads is not None else model.get_initializer(node.input[1])
    return pads is not None and bool((pads == 0).all())


def _identity_dropout(model, node, atol: float) -> bool:
    from qonnx.util.basic import get_by_name

    if model.model.opset_import[0].version < 12:
        ratio = get_by_name(node.attribute, "ratio")
        return ratio is not None and ratio.f == 0
    return len(node.input) == 1 or model.get_initializer(node.input[1]) == 0


#: qonnx 1.0.0's RemoveIdentityOps, op type -> whether a node of it is an identity
_IDENTITIES = {
    "Add": functools.partial(_identity_operand, neutral=0.0),
    "Sub": functools.partial(_identity_operand, neutral=0.0),
    "Mul": functools.partial(_identity_operand, neutral=1.0),
    "Div": functools.partial(_identity_operand, neutral=1.0),
    "Pad": _zero_pads,
    "Identity": lambda model, node, atol: True,
    "Dropout": _identity_dropout,
}


def _remove_identity_ops(self, model):
    """qonnx 1.0.0's ``RemoveIdentityOps.apply`` in one sweep: the same nodes removed, the same graph.

    qonnx removes the first identity it finds (an Add/Sub of zeros, a Mul/Div by ones, a zero Pad, an
    Identity, a no-op Dropout), re-infers every shape, cleans up and starts again: a shape inference
    per identity (DenseNet-121's QONNX has about 800, a second each). Removing one makes no other
    node an identity or not (the test reads the node's op type and second input's initializer; the
    rewiring renames the producer's output or the successors' inputs), so one pass over the nodes
    with the same test and the same ``remove_node_and_rewire`` removes the same set; shapes are
    inferred once at the end, and the cleanup after it orders the nodes as qonnx's last one does. A
    join node qonnx would warn about (and find again, forever) is left, with qonnx's warning."""
    from qonnx.transformation.infer_shapes import InferShapes
    from qonnx.transformation.remove import remove_node_and_rewire

    for node in list(model.graph.node):
        test = _IDENTITIES.get(node.op_type)
        if test is not None and test(model, node, atol=self.atol):
            remove_node_and_rewire(model, node)
    return model.transform(InferShapes()), False


# -- GiveUniqueParameterTensors without converting every weight ----------------------------------


def _give_unique_parameter_tensors(self, model):
    """qonnx 1.0.0's ``GiveUniqueParameterTensors.apply`` converting a weight to an array only where
    it copies it: the same graph.

    qonnx calls ``get_initializer`` on every input of every node to learn whether it is a parameter,
    which converts each weight to a numpy array, and ``transform`` runs it after every
    transformation: EfficientNet-Lite0's streamlining converted 381,000 initializers in it, 38 of its
    96 s. Here a name is a parameter when the graph has an initializer of that name, and only a
    repeated one is converted (to be copied, as qonnx copies it); one that qonnx's
    ``get_initializer`` cannot convert (it answers ``None``, so qonnx treats it as a dynamic input)
    is left alike, since only repeats are acted on."""
    graph = model.graph
    parameters = {tensor.name for tensor in graph.initializer}
    seen: set[str] = set()
    for node in graph.node:
        for index, name in enumerate(list(node.input)):
            if name not in parameters:
                continue
            if name not in seen:
                seen.add(name)
                continue
            value = model.get_initializer(name)
            if value is None:
                continue
            new_name = model.make_new_valueinfo_name()
            model.set_initializer(new_name, value)
            model.set_tensor_datatype(new_name, model.get_tensor_datatype(name))
            node.input[index] = new_name
    return (model, False)


# -- InferShapes without copying the weights -------------------------------------------------------

#: floating-point initializers of more elements than this go to ONNX's shape inference as name, type
#: and dims only (a weight); the inputs whose values it reads (Reshape's shape, Slice's starts, Pad's
#: pads, Resize's scales, Tile's repeats, Expand, ConstantOfShape, Range, TopK's K, ...) hold one value
#: per axis, and all but Resize's scales and Range's bounds are integers, which always keep their data
SHAPE_VALUES_MAX = 1024
_WEIGHT_TYPES = frozenset({1, 10, 11, 16})  # TensorProto FLOAT, FLOAT16, DOUBLE, BFLOAT16


def _infer_shapes(self, model):
    """qonnx 1.0.0's ``InferShapes.apply`` with ONNX's shape inference run on the graph without its
    weights' data: the same graph.

    qonnx hands the whole ``ModelProto`` to ``onnx.shape_inference.infer_shapes``, which serializes
    it, parses it in C++, infers, serializes the result and parses it back: four copies of every
    weight for shapes that depend on the weights' dims only. FINN's streamlining infers shapes about
    250 times on EfficientNet-Lite0 (its depthwise weights expanded dense, 221 MB): 126 of its
    218 s, 63 s of it serializing and parsing. Here inference gets a copy whose large initializers
    (floating point, over ``SHAPE_VALUES_MAX`` elements) keep their name, type and dims only, and every field it returns but the
    initializers is written back into the model (0.97 s -> 0.10 s a call on that graph, the same
    bytes); qonnx's custom ops are hidden and restored around it as qonnx does."""
    import onnx
    import onnx.shape_inference
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.transformation.infer_shapes import _hide_finn_ops, _restore_finn_ops

    hidden_ops = _hide_finn_ops(model)
    proto = model.model
    light = onnx.ModelProto()
    _copy_fields(proto, light, skip="graph")
    _copy_fields(proto.graph, light.graph, skip="initializer")
    for tensor in proto.graph.initializer:
        if tensor.data_type not in _WEIGHT_TYPES or math.prod(tensor.dims) <= SHAPE_VALUES_MAX:
            light.graph.initializer.add().CopyFrom(tensor)
        else:
            light.graph.initializer.add(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
    inferred = onnx.shape_inference.infer_shapes(light)
    _copy_fields(inferred, proto, skip="graph", clear=True)
    _copy_fields(inferred.graph, proto.graph, skip="initializer", clear=True)
    model = ModelWrapper(proto)
    _restore_finn_ops(model, hidden_ops)
    return (model, False)


def _copy_fields(source, target, skip: str, clear: bool = False) -> None:
    """Every field of protobuf message ``source`` but ``skip`` into ``target`` (each field of
    ``target`` cleared first with ``clear``, so that ``target`` ends with ``source``'s)."""
    if clear:
        for field, _ in target.ListFields():
            if field.name != skip:
                target.ClearField(field.name)
    for field, value in source.ListFields():
        if field.name == skip:
            continue
        if _is_repeated(field):
            getattr(target, field.name).extend(value)
        elif field.message_type is not None:
            getattr(target, field.name).CopyFrom(value)
        else:
            setattr(target, field.name, value)


def _is_repeated(field) -> bool:
    """Whether a protobuf field is repeated (``is_repeated`` from protobuf 6.31, ``label`` before)."""
    repeated = getattr(field, "is_repeated", None)
    return field.label == field.LABEL_REPEATED if repeated is None else repeated


#: audited qonnx routines replaced by linear-time ones with the same results (the regions run them)
REPLACED: dict[str, object] = {
    "SortGraph.apply": _sort_graph,
    "RemoveIdentityOps.apply": _remove_identity_ops,
    "InferShapes.apply": _infer_shapes,
    "GiveUniqueParameterTensors.apply": _give_unique_parameter_tensors,
}


# -- installing -----------------------------------------------------------------------------------


def _targets() -> list[tuple[object, str, object]]:
    """(owner, attribute, replacement) for every patched function."""
    from qonnx.core import onnx_exec
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.transformation import general, infer_data_layouts, infer_datatypes, infer_shapes, remove

    from quark.torch.extensions.brevitas._backend import qonnx_exec

    original = {name: getattr(ModelWrapper, name) for name in _LOOKUPS}
    targets: list[tuple[object, str, object]] = [
        (ModelWrapper, name, function) for name, function in _patched_lookups(original).items()
    ]
    targets += [(ModelWrapper, name, _mutator(name, getattr(ModelWrapper, name))) for name in _MUTATORS]
    targets.append((ModelWrapper, "rename_tensor", _rename_tensor(ModelWrapper.rename_tensor)))
    targets.append((ModelWrapper, "transform", _transform(ModelWrapper.transform)))
    for name, key in (("set_tensor_datatype", "finn_datatype"), ("set_tensor_layout", "tensor_layout")):
        targets.append((ModelWrapper, name, _annotation_setter(getattr(ModelWrapper, name), key)))
    for key in TRUSTS:
        owner_name, attribute = key.split(".")
        owner = {
            "ModelWrapper": ModelWrapper,
            "SortGraph": general.SortGraph,
            "GiveUniqueParameterTensors": general.GiveUniqueParameterTensors,
            "SortCommutativeInputsInitializerLast": general.SortCommutativeInputsInitializerLast,
            "RemoveStaticGraphInputs": general.RemoveStaticGraphInputs,
            "InferDataTypes": infer_datatypes.InferDataTypes,
            "InferDataLayouts": infer_data_layouts.InferDataLayouts,
            "GiveUniqueTensorNames": general.GiveUniqueTensorNames,
            "GiveReadableTensorNames": general.GiveReadableTensorNames,
            "infer_shapes": infer_shapes,
            "onnx_exec": onnx_exec,
            "RemoveIdentityOps": remove.RemoveIdentityOps,
            "InferShapes": infer_shapes.InferShapes,
        }[owner_name]
        targets.append((owner, attribute, _region(key, REPLACED.get(key, vars(owner)[attribute]))))
    targets.append((onnx_exec, "execute_node", qonnx_exec.cached(vars(onnx_exec)["execute_node"])))
    return targets


def _install() -> None:
    saved = []
    for owner, attribute, replacement in _targets():
        saved.append((owner, attribute, vars(owner)[attribute], replacement))
        setattr(owner, attribute, replacement)
    _installed["saved"] = saved


def _uninstall() -> None:
    from quark.torch.extensions.brevitas._backend import qonnx_exec

    qonnx_exec.clear()
    for owner, attribute, original, replacement in reversed(_installed.pop("saved")):
        if vars(owner).get(attribute) is not replacement:
            logger.warning("qonnx_index: %s.%s was replaced while patched; restoring qonnx's", owner, attribute)
        setattr(owner, attribute, original)


@contextlib.contextmanager
def indexed_lookups() -> Iterator[None]:
    """qonnx's ModelWrapper lookups from dict indexes inside the audited bulk routines (module
    docstring); qonnx's own functions are back when the last open context exits. With a qonnx
    version other than ``AUDITED_QONNX``, or with the environment variable ``QUARK_QONNX_INDEX=0``
    (read at each entry), it patches nothing."""
    if os.environ.get("QUARK_QONNX_INDEX", "1") == "0" or not _audited():
        yield
        return
    with _install_lock:
        if _installed["count"] == 0:
            _install()
        _installed["count"] += 1
    _local.depth = getattr(_local, "depth", 0) + 1
    try:
        yield
    finally:
        _local.depth -= 1
        with _install_lock:
            _installed["count"] -= 1
            if _installed["count"] == 0:
                _uninstall()


@functools.cache
def _audited() -> bool:
    from importlib.metadata import version

    found = version("qonnx")
    if found not in AUDITED_QONNX:
        logger.warning("qonnx_index: qonnx %s is not one of %s; lookups stay qonnx's own", found, AUDITED_QONNX)
        return False
    return True


def installed() -> bool:
    """Whether the patch is in place (some thread has an ``indexed_lookups()`` open)."""
    return _installed["count"] > 0
