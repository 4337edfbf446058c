"""``_backend/qonnx_passes``: each equivalent gives qonnx 1.0.0's graph byte for byte.

Every row of ``FastModelWrapper.EQUIVALENTS`` is run through a plain qonnx ``ModelWrapper`` (qonnx's
own pass and cleanup) and through ``FastModelWrapper`` (the equivalent and the equivalents' cleanup) on
real graphs: QONNX exports of the zoo, as exported, after qonnx's cleanup, and changed where a pass has
something to do (nodes shuffled, initializers listed as graph inputs, a weight shared, commutative
inputs swapped, unused tensors), and the arguments qonnx's ``cleanup_model`` hands each pass; the same
``model.model.SerializeToString()`` and the same draws of Python's ``random`` (qonnx names new tensors
with ``random_string``), and at least one graph each pass changes. Then the cases real graphs rarely
reach: :class:`IndexedModel`'s answers and writes against a plain ``ModelWrapper``'s on a graph of
repeated names, SortGraph on shuffled graphs and cycles, identities whose removal reorders or creates
others, folding whose order the cleanup decides, and the :class:`Executor` against qonnx's
``execute_onnx`` (repeated names, sanitization, its refusals)."""

from __future__ import annotations

import copy
import math
import random
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as oh

pytest.importorskip("qonnx.core.modelwrapper", reason="qonnx is not installed (the export extra)")

from qonnx.core.datatype import DataType
from qonnx.core.modelwrapper import ModelWrapper
from qonnx.core.onnx_exec import execute_onnx

from quark.torch.extensions.brevitas._backend.qonnx_passes import execution, shapes, tidy
from quark.torch.extensions.brevitas._backend.qonnx_passes.indexed import IndexedModel
from quark.torch.extensions.brevitas._backend.qonnx_passes.wrapper import (
    QONNX_EQUIVALENTS,
    FastModelWrapper,
    cleanup_model,
)

F = TensorProto.FLOAT
#: qonnx's notices (GemmToMatMul, InferDataLayouts, the rounding of sanitized tensors)
QONNX_NOTICES = pytest.mark.filterwarnings("ignore::UserWarning")


def _init(name: str, value) -> onnx.TensorProto:
    return onnx.numpy_helper.from_array(np.asarray(value), name)


def _model(nodes, inputs, outputs, initializers=(), value_info=(), opset: int = 13, fix: bool = True) -> ModelWrapper:
    """A ModelWrapper of the graph (``fix``: with value infos added for initializers, as qonnx's default)."""
    graph = oh.make_graph(nodes, "g", inputs, outputs, list(initializers), value_info=list(value_info))
    proto = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    return ModelWrapper(proto, fix_missing_initializer_valueinfo=fix)


def _run(cls, proto_bytes: bytes, build, **transform_kwargs):
    """``build()``'s transformation through ``cls``'s ``transform`` on a fresh copy of the graph, seeded:
    (the graph's bytes, Python's random state after, the exception) - what must be qonnx's."""
    random.seed(0)
    np.random.seed(0)
    model = cls(onnx.ModelProto.FromString(proto_bytes), fix_missing_initializer_valueinfo=False)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = model.transform(build(), **transform_kwargs)
    except Exception as error:  # noqa: BLE001  qonnx's exception is part of its answer
        return None, random.getstate(), (type(error), str(error))
    return result.model.SerializeToString(), random.getstate(), None


def _difference(ours: bytes, theirs: bytes) -> str:
    """Where two serialized models first differ: the graph field and the item, both printed."""
    a, b = onnx.ModelProto.FromString(ours), onnx.ModelProto.FromString(theirs)
    for field in ("node", "initializer", "input", "output", "value_info", "quantization_annotation"):
        mine, qonnxs = getattr(a.graph, field), getattr(b.graph, field)
        for index in range(max(len(mine), len(qonnxs))):
            x = mine[index] if index < len(mine) else None
            y = qonnxs[index] if index < len(qonnxs) else None
            if x != y:
                return f"graph.{field}[{index}] ({len(mine)} vs {len(qonnxs)} items):\n{x}\nqonnx's:\n{y}"
    return "outside the graph's lists"


def _assert_as_qonnx(proto_bytes: bytes, build, label: str = "", **transform_kwargs) -> bool:
    """The equivalent of ``build()`` gives qonnx's bytes (and draws as many random names); returns
    whether the pass changed the graph."""
    theirs = _run(ModelWrapper, proto_bytes, build, **transform_kwargs)
    ours = _run(FastModelWrapper, proto_bytes, build, **transform_kwargs)
    what = f"{build.__name__} on {label or 'the graph'} ({transform_kwargs})"
    assert ours[2] == theirs[2], f"{what}: {ours[2]} vs qonnx's {theirs[2]}"
    assert ours[0] == theirs[0], f"{what}: the graphs differ at {_difference(ours[0], theirs[0])}"
    assert ours[1] == theirs[1], f"{what}: drew another number of random names"
    return theirs[0] is not None and theirs[0] != proto_bytes


def _bytes(model) -> bytes:
    return model.model.SerializeToString()


# -- real graphs -----------------------------------------------------------------------------------

EXPORTS = [("resnet", "int8-pof2"), ("mobilenet", "int8-float"), ("concat", "int8-pof2"), ("conv1d", "int8-float")]
#: graph mode with the FINN preset: batch norms and biases in constant subgraphs, and the encoder's
#: attention computes its head size from a Shape (Shape, Gather, Add, Div, Mul folded in chains)
GRAPH_EXPORTS = ["resnet_bn", "encoder"]


def _export(qmodel, example) -> onnx.ModelProto:
    import tempfile
    from pathlib import Path

    from quark.torch.extensions.brevitas.api import ModelExporter

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "m.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ModelExporter(path).export_qonnx_model(qmodel, example, verify=False)
        return onnx.load(path)


@pytest.fixture(scope="module")
def exports() -> dict[str, onnx.ModelProto]:
    """QONNX exports of the zoo (layer by layer, integer and float scales; graph mode, FINN preset)."""
    import torch
    from _shared.zoo import ZOO, quantized, with_statistics

    from quark.torch.extensions.brevitas.api import ModelQuantizer
    from quark.torch.extensions.brevitas.presets import finn

    done = {f"{name}-{config}": _export(*quantized(name, config)) for name, config in EXPORTS}
    for name in GRAPH_EXPORTS:
        x = ZOO[name].sample(torch.Generator().manual_seed(0))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            qmodel = ModelQuantizer(finn()).quantize_model(with_statistics(name), [x], progress=False)
        done[f"graph-{name}"] = _export(qmodel, x)
    return done


def _shuffled(proto: onnx.ModelProto, seed: int) -> onnx.ModelProto:
    proto = copy.deepcopy(proto)
    nodes = list(proto.graph.node)
    random.Random(seed).shuffle(nodes)
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)
    return proto


def _perturbed(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A real graph with work for every tidying pass: nodes in reverse order, the initializers after
    the first listed as graph inputs (as torch's ``keep_initializers_as_inputs`` writes them), one
    weight read by a second node and one twice by a node, the initializer first among the inputs of
    Add / Mul nodes, an unused initializer, value info and annotation."""
    proto = copy.deepcopy(proto)
    graph = proto.graph
    model = ModelWrapper(proto, fix_missing_initializer_valueinfo=False)
    nodes = list(graph.node)[::-1]
    del graph.node[:]
    graph.node.extend(nodes)
    described = {vi.name: vi for vi in graph.value_info}
    for tensor in list(graph.initializer)[1:]:
        vi = described.get(tensor.name)
        graph.input.append(vi or oh.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
        if vi is not None:
            graph.value_info.remove(vi)
    scalars = [t.name for t in graph.initializer if not t.dims]
    quants = [n for n in graph.node if n.op_type == "Quant" and n.input[1] in scalars and n.input[3] in scalars]
    if len(quants) > 1:
        quants[1].input[3] = quants[0].input[3]  # a bit width read by a second node
        quants[0].input[2] = quants[0].input[3]  # and one read twice (as the zero point: 0 < bits)
    for node in graph.node:
        if node.op_type in ("Add", "Mul") and model.get_initializer(node.input[1]) is not None:
            node.input[:] = [node.input[1], node.input[0]]
    graph.initializer.append(_init("unused_weight", np.ones(3, np.float32)))
    graph.value_info.append(oh.make_tensor_value_info("unused_tensor", F, [3]))
    ModelWrapper(proto, fix_missing_initializer_valueinfo=False).set_tensor_datatype("unused_tensor", DataType["INT4"])
    return proto


@pytest.fixture(scope="module")
def real(exports) -> tuple[dict[str, bytes], list[tuple]]:
    """Real graphs as the passes meet them: each export as qonnx loads it, after qonnx's cleanup and
    shape and datatype inference, and perturbed; one shuffled. And every call of a pass in the
    EQUIVALENTS that qonnx's ``cleanup_model`` made on the way (passes calling passes included): its
    transformation, the graph, transform's flags and the random state, to be repeated through both
    wrappers (recorded with ModelWrapper.transform wrapped for the time of the runs)."""
    from qonnx.transformation.infer_datatypes import InferDataTypes
    from qonnx.transformation.infer_shapes import InferShapes
    from qonnx.util.cleanup import cleanup_model as qonnx_cleanup

    states, calls = {}, []
    original = ModelWrapper.transform

    def recording(self, transformation, make_deepcopy=True, cleanup=True, *args, **kwargs):
        if type(transformation) in QONNX_EQUIVALENTS and not args and not kwargs:
            calls.append((copy.deepcopy(transformation), _bytes(self), make_deepcopy, cleanup, random.getstate()))
        return original(self, transformation, make_deepcopy, cleanup, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, proto in exports.items():
            loaded = ModelWrapper(copy.deepcopy(proto))
            states[f"{name} loaded"] = _bytes(loaded)
            random.seed(0)
            patch.setattr(ModelWrapper, "transform", recording)
            cleaned = qonnx_cleanup(loaded)
            patch.setattr(ModelWrapper, "transform", original)
            cleaned = cleaned.transform(InferShapes()).transform(InferDataTypes())
            states[f"{name} cleaned"] = _bytes(cleaned)
            states[f"{name} perturbed"] = _perturbed(cleaned.model).SerializeToString()
        states["resnet shuffled"] = _shuffled(exports["resnet-int8-pof2"], 0).SerializeToString()
    return states, calls


ROWS = sorted(QONNX_EQUIVALENTS, key=lambda t: t.__name__)


@QONNX_NOTICES
@pytest.mark.parametrize("transformation", ROWS, ids=lambda t: t.__name__)
def test_each_equivalent_gives_qonnxs_graph_on_real_graphs(real, transformation):
    """The row's equivalent against qonnx's pass, with and without transform's cleanup, on every real
    graph (the pass must change some), and on every call qonnx's cleanup_model made of it."""
    states, recorded = real
    changed = []
    for name, proto_bytes in states.items():
        for cleanup in (True, False):
            changed.append((name, _assert_as_qonnx(proto_bytes, transformation, name, cleanup=cleanup)))
    assert any(flag for _, flag in changed), f"no real graph is changed by {transformation.__name__}"
    for instance, proto_bytes, make_deepcopy, cleanup, state in (c for c in recorded if type(c[0]) is transformation):
        outcomes = []
        for cls in (ModelWrapper, FastModelWrapper):
            random.setstate(state)
            model = cls(onnx.ModelProto.FromString(proto_bytes), fix_missing_initializer_valueinfo=False)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = model.transform(copy.deepcopy(instance), make_deepcopy=make_deepcopy, cleanup=cleanup)
            outcomes.append((_bytes(result), random.getstate()))
        assert outcomes[1][0] == outcomes[0][0], _difference(outcomes[1][0], outcomes[0][0])
        assert outcomes[1][1] == outcomes[0][1], f"{transformation.__name__}: another number of random draws"


def test_every_row_is_exercised_by_cleanup_model_or_the_states(real):
    """What qonnx's cleanup_model calls (so the replays above are not empty) besides what only the
    FINN front end calls (tests/targets/finn/test_sweeps.py repeats those on FINN's graphs)."""
    from qonnx.transformation.infer_data_layouts import InferDataLayouts
    from qonnx.transformation.infer_datatypes import InferDataTypes
    from qonnx.transformation.remove import RemoveIdentityOps

    called = {type(c[0]) for c in real[1]}
    assert called == set(QONNX_EQUIVALENTS) - {InferDataTypes, InferDataLayouts, RemoveIdentityOps}


@QONNX_NOTICES
@pytest.mark.parametrize("name", [f"{n}-{c}" for n, c in EXPORTS] + [f"graph-{n}" for n in GRAPH_EXPORTS])
def test_cleanup_model_gives_qonnxs_graph(exports, name):
    """``wrapper.cleanup_model`` against ``qonnx.util.cleanup.cleanup_model``: the same bytes, the same
    random draws, fewer seconds."""
    from qonnx.util.cleanup import cleanup_model as qonnx_cleanup

    proto = exports[name]
    graphs = []
    for clean in (qonnx_cleanup, cleanup_model):
        random.seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graphs.append((_bytes(clean(ModelWrapper(copy.deepcopy(proto)))), random.getstate()))
    assert graphs[0] == graphs[1]


# -- IndexedModel: qonnx's answers and writes on a graph of repeated names ------------------------


def _tricky() -> ModelWrapper:
    """Names that repeat where qonnx's first-match and error paths matter: a node reading a tensor
    twice, two producers of one tensor, two initializers of one name, a value info given twice,
    annotations (one given twice, one layout not a literal), an optional empty input, an initializer
    without value info, an annotation with a sparsity."""
    nodes = [
        oh.make_node("Add", ["x", "x"], ["a"], name="twice"),
        oh.make_node("Mul", ["a", "w"], ["b"], name="mul"),
        oh.make_node("Relu", ["b"], ["c"], name="relu0"),
        oh.make_node("Relu", ["b"], ["c"], name="relu1"),  # a second producer of c
        oh.make_node("Clip", ["c", "", "hi"], ["y"], name="clip"),
    ]
    initializers = [
        _init("w", np.full((1, 4), 2.0, np.float32)),
        _init("hi", np.array(6.0, np.float32)),
        _init("dup", np.arange(3, dtype=np.int64)),
        _init("dup", np.arange(5, dtype=np.int64)),
    ]
    value_info = [oh.make_tensor_value_info(n, F, [1, 4]) for n in ("a", "b", "c", "b")]
    model = _model(
        nodes, [oh.make_tensor_value_info("x", F, [1, 4])], [oh.make_tensor_value_info("y", F, [1, 4])],
        initializers, value_info, fix=False,
    )  # fmt: skip
    model.set_tensor_datatype("a", DataType["INT4"])
    model.set_tensor_layout("a", ["N", "C"])
    model.set_tensor_sparsity("a", {"dim": 1})
    model.set_tensor_datatype("c", DataType["UINT4"])
    annotation = model.graph.quantization_annotation.add()
    annotation.tensor_name = "c"  # annotated twice: qonnx's get_by_name raises
    annotation = model.graph.quantization_annotation.add()
    annotation.tensor_name = "y"  # a layout that is no literal: qonnx eval()s it
    annotation.quant_parameter_tensor_names.add(key="tensor_layout", value="list('NC')")
    annotation.quant_parameter_tensor_names.add(key="finn_datatype", value="INT8")
    annotation.quant_parameter_tensor_names.add(key="finn_datatype", value="INT2")  # a key given twice
    return model


NAMES = ("x", "a", "b", "c", "y", "w", "hi", "dup", "", "missing", None, 3, "a_renamed", "w2", "new", "fresh")


def _answers(model, name) -> dict:
    calls = {
        "valueinfo": lambda: model.get_tensor_valueinfo(name),
        "shape": lambda: model.get_tensor_shape(name),
        "initializer": lambda: model.get_initializer(name),
        "initializer+dtype": lambda: model.get_initializer(name, return_dtype=True),
        "producer": lambda: model.find_producer(name),
        "consumers": lambda: model.find_consumers(name),
        "consumer": lambda: model.find_consumer(name),
        "datatype": lambda: model.get_tensor_datatype(name),
        "layout": lambda: model.get_tensor_layout(name),
        "sparsity": lambda: model.get_tensor_sparsity(name),
    }
    out = {}
    for key, call in calls.items():
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out[key] = ("value", _snapshot(call()), [str(w.message) for w in caught])
        except Exception as error:  # noqa: BLE001  the exception is part of qonnx's answer
            out[key] = ("raised", type(error), str(error))
    return out


def _snapshot(value):
    """A comparable copy of an answer, taken now (later writes change protobuf objects in place)."""
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, *(_snapshot(v) for v in value))
    if hasattr(value, "SerializeToString"):
        return (type(value).__name__, value.SerializeToString())
    return value if value is None or isinstance(value, (int, str, type, dict)) else str(value)


def test_indexed_lookups_answer_as_qonnx_with_the_same_objects():
    model = _tricky()
    view = IndexedModel(model)
    for name in NAMES:
        assert _answers(view, name) == _answers(model, name), name
    for name in ("x", "a", "y"):  # the very value infos, initializers and nodes of the graph
        assert view.get_tensor_valueinfo(name) is model.get_tensor_valueinfo(name)
    assert view.find_producer("c") is model.find_producer("c") is model.graph.node[2]
    assert [n.name for n in view.find_consumers("x")] == ["twice", "twice"]
    assert view.get_tensor_layout("y") == ["N", "C"]
    with pytest.raises(AssertionError, match="Multiple ValueInfoProto found for b"):
        view.get_tensor_shape("b")
    with pytest.raises(Exception, match="Found multiple get_by_name matches"):
        view.get_tensor_datatype("c")
    with pytest.raises(Exception, match="Found multiple get_by_name matches"):
        view.get_tensor_datatype("y")


def _writes(model) -> list:
    """qonnx's writes, each checked after the one before (the view's tables must follow them)."""
    return [
        lambda: model.set_tensor_shape("a", [2, 4]),  # in value_info: moves to its end
        lambda: model.set_tensor_shape("x", [3, 4]),  # a graph input: in place
        lambda: model.set_tensor_shape("y", [5, 4], dtype=TensorProto.INT8),  # a graph output: in place
        lambda: model.set_tensor_shape("new", [7]),  # no value info yet
        lambda: model.set_tensor_shape("b", [1]),  # given twice: qonnx's assertion
        lambda: model.set_initializer("w", np.ones((1, 4), np.float32)),  # replaced
        lambda: model.set_initializer("dup", np.zeros(2, np.int64)),  # the first of two replaced
        lambda: model.set_initializer("dup", np.ones(2, np.int64)),  # again: the second of the name now first
        lambda: model.set_initializer("fresh", np.ones(3, np.float32)),
        lambda: model.get_tensor_shape("hi", fix_missing_init_shape=True),  # an initializer gets a value info
        lambda: model.del_initializer("hi"),
        lambda: model.del_initializer("dup"),  # given twice: qonnx's get_by_name raises
        lambda: model.set_tensor_datatype("b", DataType["INT8"]),  # a new annotation
        lambda: model.set_tensor_datatype("a", DataType["UINT2"]),  # an existing one
        lambda: model.set_tensor_datatype("a", None),  # cleared
        lambda: model.set_tensor_datatype("a", DataType["INT3"]),  # set again after clearing
        lambda: model.set_tensor_datatype("missing", None),  # nothing to clear
        lambda: model.set_tensor_datatype("c", DataType["INT2"]),  # annotated twice: qonnx raises
        lambda: model.set_tensor_datatype("y", DataType["INT2"]),  # a key given twice: qonnx raises
        lambda: model.set_tensor_layout("x", ["N", "C"]),  # a new annotation
        lambda: model.set_tensor_layout("a", ["N", "H"]),  # an existing layout
        lambda: model.set_tensor_layout("b", ["N", "C"]),  # an annotation without a layout
        lambda: model.set_tensor_layout("b", ("N", "C")),  # not a list: qonnx's assertion
        lambda: model.set_tensor_sparsity("a", {"dim": 0}),
        lambda: model.set_tensor_sparsity("w", {"dim": 1}),
        lambda: model.rename_tensor("a", "a_renamed"),  # the fast path: value info, annotation, nodes
        lambda: model.rename_tensor("w", "w2"),  # an initializer with a value info and an annotation
        lambda: model.rename_tensor("fresh", "new"),  # onto a name in use: qonnx's own
        lambda: model.rename_tensor("x", "x2"),  # read twice by one node: qonnx's own
        lambda: model.rename_tensor("c", "c2"),  # two producers, annotated twice: qonnx's own (raises)
        lambda: model.rename_tensor("b", "b2"),  # two value infos: qonnx's own (raises midway)
        lambda: model.rename_tensor("dup", "dup2"),  # two initializers: qonnx raises midway
        lambda: model.rename_tensor("y", "a_renamed"),  # onto a renamed name
        lambda: model.rename_tensor("missing", "ghost"),  # nothing of that name
        lambda: model.set_initializer("x2", np.zeros((3, 4), np.float32)),  # a graph input gets a value
        lambda: model.get_tensor_shape("dup", fix_missing_init_shape=True),
        lambda: model.make_new_valueinfo_name(),
        lambda: model.check_all_tensor_shapes_specified(fix_missing_init_shape=True),
    ]


def _record(model, reader) -> list:
    """After each write through ``model``: its outcome, the graph's bytes and ``reader``'s answers
    (``model`` a plain ModelWrapper, or a view whose ``_bytes`` are its model's)."""
    record = []
    random.seed(0)
    for write in _writes(model):
        try:
            outcome = ("value", _snapshot(write()))
        except Exception as error:  # noqa: BLE001  compared with qonnx's
            outcome = ("raised", type(error), str(error))
        answers = {name: _answers(reader, name) for name in NAMES}
        record.append((outcome, _bytes(model), answers))
    return record


def test_indexed_writes_keep_its_tables_answering_as_qonnx():
    """One view through every write (its tables built before the first): each write does to the graph
    what qonnx's does (or raises what it raises), and afterwards every lookup answers as qonnx's."""
    plain = _tricky()
    expected = _record(plain, plain)
    view = IndexedModel(_tricky())
    for name in NAMES:  # the tables built now, before the writes
        _answers(view, name)
    actual = _record(view, view)
    for step, (e, a) in enumerate(zip(expected, actual, strict=True)):
        assert a[0] == e[0], f"write {step}: {a[0]} vs qonnx's {e[0]}"
        assert a[1] == e[1], f"write {step}: the graphs differ at {_difference(a[1], e[1])}"
        for name in NAMES:
            assert a[2][name] == e[2][name], f"write {step}, {name!r}"


def test_set_tensor_shape_appends_where_qonnx_takes_the_inputs_for_value_info():
    """qonnx picks the container to append to with ``==``: graph inputs equal to value_info once the
    tensor's own value info is removed are appended to, not inserted into."""
    vi = [oh.make_tensor_value_info(n, F, [2]) for n in ("x", "a", "y")]
    graph = [oh.make_node("Add", ["x", "a"], ["y"])], [vi[0], vi[1]], [vi[2]]
    written = []
    for wrap in (lambda m: m, IndexedModel):
        model = _model(*graph, value_info=[copy.deepcopy(vi[1])], fix=False)
        view = wrap(model)
        view.set_tensor_shape("x", [3])
        written.append((_bytes(model), _answers(view, "x"), _answers(view, "a")))
    assert written[1] == written[0]
    assert [v.name for v in onnx.ModelProto.FromString(written[0][0]).graph.input] == ["a", "x"]


def test_rename_takes_the_fast_path_where_qonnx_renames_one_of_each():
    """The fast path keeps the tables (no rebuild) and renames what qonnx's scan renames."""
    model = _tricky()
    view = IndexedModel(model)

    def tables():
        return view._vis, view._inits, view._annotations, view._producers, view._consumers

    built = (view.vis, view.inits, view.annotations, view.producers, view.consumers)
    view.rename_tensor("a", "a2")
    view.rename_tensor("w", "w2")
    assert all(table is kept for table, kept in zip(tables(), built, strict=True))
    plain = _tricky()
    plain.rename_tensor("a", "a2")
    plain.rename_tensor("w", "w2")
    assert _bytes(view) == _bytes(plain)
    view.rename_tensor("x", "x2")  # read twice by a node: qonnx's own, the tables rebuilt
    assert view._vis is None and view._consumers is None
    plain.rename_tensor("x", "x2")
    assert _bytes(view) == _bytes(plain)


# -- SortGraph -----------------------------------------------------------------------------------


def _sorted_both(proto: onnx.ModelProto) -> tuple:
    from qonnx.transformation.general import SortGraph

    outcomes = []
    for sort in (SortGraph(), tidy.SortGraph()):
        try:
            outcomes.append(_bytes(sort.apply(ModelWrapper(copy.deepcopy(proto)))[0]))
        except Exception as error:  # noqa: BLE001  compared
            outcomes.append((type(error), str(error), getattr(error, "data", None)))
    return tuple(outcomes)


@pytest.mark.parametrize("name", ["resnet-int8-pof2", "concat-int8-pof2", "mobilenet-int8-float", "graph-encoder"])
def test_sort_graph_orders_shuffled_real_graphs_as_qonnx(exports, name):
    for seed in range(4):
        theirs, ours = _sorted_both(_shuffled(exports[name], seed))
        assert ours == theirs, seed


def test_sort_graph_keeps_and_drops_what_qonnx_does_and_refuses_cycles_alike():
    nodes = [
        oh.make_node("Relu", ["b"], ["c"], name="late"),
        oh.make_node("Constant", [], ["k"], name="used_constant", value=_init("v", np.ones(4, np.float32))),
        oh.make_node("Constant", [], ["unused"], name="floating", value=_init("v", np.ones(4, np.float32))),
        oh.make_node("Add", ["x", "k"], ["b"], name="early"),
        oh.make_node("Relu", ["dangling"], ["d"], name="dangling_leaf"),
        oh.make_node("Relu", ["nothing"], ["e"], name="dangling_fed"),
        oh.make_node("Add", ["e", "c"], ["f"], name="join"),
        oh.make_node("Mul", ["f", "w"], ["y"], name="last"),
    ]
    model = _model(
        nodes, [oh.make_tensor_value_info("x", F, [4])], [oh.make_tensor_value_info("y", F, [4])],
        [_init("w", np.ones(4, np.float32))],
    )  # fmt: skip
    theirs, ours = _sorted_both(model.model)
    assert ours == theirs
    kept = [n.name for n in onnx.ModelProto.FromString(ours).graph.node]
    assert kept == ["used_constant", "dangling_fed", "early", "late", "join", "last"]
    cyclic = copy.deepcopy(model.model)
    cyclic.graph.node[3].input[0] = "c"  # early reads late's output: a cycle
    theirs, ours = _sorted_both(cyclic)
    assert theirs[0].__name__ == "CircularDependencyError" and ours == theirs
    single = _model([oh.make_node("Relu", ["nothing"], ["y"])], [], [oh.make_tensor_value_info("y", F, [4])])
    assert _sorted_both(single.model)[0] == _sorted_both(single.model)[1] == _bytes(single)  # one node: kept


def test_sort_graph_raises_as_qonnx_for_a_name_given_twice():
    """qonnx looks up the inputs of a node without predecessors with get_by_name, which raises for an
    initializer or graph input given twice."""
    model = _model(
        [oh.make_node("Add", ["w", "x"], ["y"]), oh.make_node("Relu", ["y"], ["z"])],
        [oh.make_tensor_value_info("x", F, [4])], [oh.make_tensor_value_info("z", F, [4])],
        [_init("w", np.ones(4, np.float32)), _init("w", np.zeros(4, np.float32))],
    )  # fmt: skip
    theirs, ours = _sorted_both(model.model)
    assert theirs[0] is Exception and ours == theirs


# -- the tidying passes on graphs made for them ---------------------------------------------------


def test_static_inputs_move_in_qonnxs_order():
    """qonnx removes graph inputs while iterating them: a run of static inputs moves every other one
    per call (s1, s3, s5, then s2, s6, then s4)."""
    names = ["x", "s1", "s2", "s3", "s4", "s5", "s6", "z", "s7"]
    nodes = [oh.make_node("Sum", names, ["y"])]
    statics = [n for n in names if n.startswith("s")]
    model = _model(
        nodes, [oh.make_tensor_value_info(n, F, [2]) for n in names], [oh.make_tensor_value_info("y", F, [2])],
        [_init(n, np.ones(2, np.float32)) for n in statics],
    )  # fmt: skip
    from qonnx.transformation.general import RemoveStaticGraphInputs

    assert _assert_as_qonnx(_bytes(model), RemoveStaticGraphInputs, cleanup=False)
    moved = ModelWrapper(_bytes(model)).transform(RemoveStaticGraphInputs(), cleanup=False)
    assert [vi.name for vi in moved.graph.value_info] == ["s1", "s3", "s5", "s7", "s2", "s6", "s4"]


def _identities() -> ModelWrapper:
    """Every identity qonnx's RemoveIdentityOps removes (Add/Sub of zeros, Mul/Div by ones, a zero
    Pad, Identity, Dropout), in chains, before a fork, after a fork and at the output, beside
    operations that are not identities (an Add of ones, a Mul by 2)."""
    nodes = [
        oh.make_node("Relu", ["x"], ["r"], name="relu"),
        oh.make_node("Mul", ["r", "one"], ["m1"], name="mul_one"),
        oh.make_node("Add", ["m1", "zero"], ["a1"], name="add_zero"),
        oh.make_node("Identity", ["a1"], ["fork"], name="identity"),
        oh.make_node("Div", ["fork", "one"], ["d1"], name="div_one"),
        oh.make_node("Sub", ["fork", "zero"], ["s1"], name="sub_zero"),
        oh.make_node("Add", ["d1", "one"], ["a2"], name="add_one"),
        oh.make_node("Mul", ["s1", "two"], ["m2"], name="mul_two"),
        oh.make_node("Add", ["a2", "m2"], ["sum"], name="join"),
        oh.make_node("Pad", ["sum", "pads"], ["p"], name="pad_zero"),
        oh.make_node("Dropout", ["p"], ["dr"], name="dropout"),
        oh.make_node("Mul", ["dr", "one"], ["y"], name="mul_one_out"),
    ]
    initializers = [
        _init("one", np.ones(4, np.float32)), _init("zero", np.zeros(4, np.float32)),
        _init("two", np.full(4, 2, np.float32)), _init("pads", np.zeros(4, np.int64)),
    ]  # fmt: skip
    return _model(nodes, [oh.make_tensor_value_info("x", F, [1, 4])], [oh.make_tensor_value_info("y", F, [1, 4])], initializers)


def _branches() -> ModelWrapper:
    """Two branches whose identities sit at different depths: removing IB first lowers b1 and B, so
    qonnx's next SortGraph puts B before A, and A joins B's level only later (B stays first)."""
    nodes = [
        oh.make_node("Relu", ["x"], ["a0"], name="a0"),
        oh.make_node("Identity", ["x"], ["ib"], name="IB"),
        oh.make_node("Identity", ["a0"], ["ia"], name="IA"),
        oh.make_node("Relu", ["ib"], ["b1"], name="b1"),
        oh.make_node("Relu", ["ia"], ["A"], name="A"),
        oh.make_node("Relu", ["b1"], ["B"], name="B"),
    ]
    outputs = [oh.make_tensor_value_info("A", F, [4]), oh.make_tensor_value_info("B", F, [4])]
    return _model(nodes, [oh.make_tensor_value_info("x", F, [4])], outputs)


def _identities_made_by_the_cleanup() -> ModelWrapper:
    """An Identity of an initializer feeding the first input of an Add, another a Mul twice: removed,
    the Add reads zeros first, qonnx's cleanup puts them last (the Add is an identity now), and the
    shared ones get a copy (both Muls are identities)."""
    nodes = [
        oh.make_node("Relu", ["x"], ["r"], name="relu"),
        oh.make_node("Identity", ["zero"], ["z"], name="id"),
        oh.make_node("Add", ["z", "r"], ["s"], name="add"),
        oh.make_node("Identity", ["one"], ["o"], name="id1"),
        oh.make_node("Mul", ["s", "o"], ["t"], name="mul"),
        oh.make_node("Mul", ["t", "o"], ["y"], name="mul2"),
    ]
    initializers = [_init("zero", np.zeros(4, np.float32)), _init("one", np.ones(4, np.float32))]
    return _model(nodes, [oh.make_tensor_value_info("x", F, [4])], [oh.make_tensor_value_info("y", F, [4])], initializers)


@QONNX_NOTICES
@pytest.mark.parametrize("build", [_identities, _branches, _identities_made_by_the_cleanup])
@pytest.mark.parametrize("shaped", [True, False], ids=["shaped", "unshaped"])
def test_identities_removed_in_qonnxs_steps(build, shaped):
    """With every tensor shaped (the steps kept up to date) and without (qonnx's steps one by one),
    through transform with and without its cleanup: qonnx's graph, and the same outputs as before."""
    from qonnx.transformation.infer_shapes import InferShapes
    from qonnx.transformation.remove import RemoveIdentityOps

    model = build()
    proto_bytes = _bytes(model.transform(InferShapes()) if shaped else model)
    for cleanup in (True, False):
        assert _assert_as_qonnx(proto_bytes, RemoveIdentityOps, build.__name__, cleanup=cleanup)
    before = model.transform(InferShapes())
    after = FastModelWrapper(proto_bytes).transform(RemoveIdentityOps())
    x = np.random.default_rng(0).normal(size=before.get_tensor_shape("x")).astype(np.float32)
    for name in (vi.name for vi in before.graph.output):
        np.testing.assert_array_equal(execute_onnx(after, {"x": x})[name], execute_onnx(before, {"x": x})[name])


def test_identity_removal_orders_nodes_as_qonnxs_repeated_sorts():
    from qonnx.transformation.infer_shapes import InferShapes
    from qonnx.transformation.remove import RemoveIdentityOps

    ours = FastModelWrapper(_bytes(_branches().transform(InferShapes()))).transform(RemoveIdentityOps())
    assert [n.name for n in ours.graph.node] == ["a0", "b1", "B", "A"]  # one sort would give a0, b1, A, B
    ours = FastModelWrapper(_bytes(_identities_made_by_the_cleanup())).transform(RemoveIdentityOps())
    assert [n.name for n in ours.graph.node] == ["relu"]


def test_graphs_where_qonnx_raises_or_depends_on_the_order_are_left_to_qonnxs_passes():
    """A tensor produced twice (the tricky graph): the equivalents hand the graph to qonnx's passes."""
    from qonnx.transformation.fold_constants import FoldConstants
    from qonnx.transformation.remove import RemoveIdentityOps

    model = _tricky()
    del model.graph.quantization_annotation[:]
    del model.graph.value_info[3]
    del model.graph.initializer[2:]
    assert not tidy.well_formed(IndexedModel(model))
    for build in (RemoveIdentityOps, FoldConstants):
        _assert_as_qonnx(_bytes(model), build, "a tensor produced twice")


# -- shape inference -----------------------------------------------------------------------------


def _shape_values() -> ModelWrapper:
    """Shapes that depend on initializer values (Reshape, Slice, Pad, Tile, Expand, Resize, Range,
    ConstantOfShape) beside weights larger than ``SHAPE_VALUES_MAX`` (a MatMul, a Conv) and qonnx
    custom ops (a MultiThreshold, a Quant) whose other inputs only they read; every value info left to
    inference, initializers without value infos."""
    big = shapes.SHAPE_VALUES_MAX + 1
    channels = big // 72 + 1
    rng = np.random.default_rng(0)
    qonnx_op = {"domain": "qonnx.custom_op.general"}
    nodes = [
        oh.make_node("Quant", ["x", "scale", "zero", "bits"], ["xq"], name="quant", signed=1, narrow=0,
                     rounding_mode="ROUND", **qonnx_op),
        oh.make_node("Conv", ["xq", "conv_w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        oh.make_node("MultiThreshold", ["c", "thresholds"], ["t"], name="mt", **qonnx_op),
        oh.make_node("Reshape", ["t", "shape"], ["r"], name="reshape"),
        oh.make_node("MatMul", ["r", "fc_w"], ["m"], name="matmul"),
        oh.make_node("Slice", ["m", "starts", "ends", "axes"], ["s"], name="slice"),
        oh.make_node("Pad", ["s", "pads"], ["p"], name="pad"),
        oh.make_node("Tile", ["p", "repeats"], ["tl"], name="tile"),
        oh.make_node("Expand", ["tl", "expand"], ["e"], name="expand"),
        oh.make_node("Unsqueeze", ["e", "axes_u"], ["u"], name="unsqueeze"),
        oh.make_node("Resize", ["u", "", "scales"], ["y"], name="resize"),
        oh.make_node("Range", ["start", "limit", "delta"], ["range"], name="range"),
        oh.make_node("ConstantOfShape", ["shape_c"], ["filled"], name="constant_of_shape"),
    ]  # fmt: skip
    initializers = [
        _init("scale", np.float32(0.5)), _init("zero", np.float32(0)), _init("bits", np.float32(8)),
        _init("conv_w", rng.normal(size=(channels, 8, 3, 3)).astype(np.float32)),
        _init("thresholds", np.zeros((channels, 3), np.float32)),
        _init("shape", np.array([1, -1], np.int64)),
        _init("fc_w", rng.normal(size=(channels * 36, 40)).astype(np.float32)),
        _init("starts", np.array([3], np.int64)), _init("ends", np.array([30], np.int64)),
        _init("axes", np.array([1], np.int64)), _init("pads", np.array([0, 2, 0, 1], np.int64)),
        _init("repeats", np.array([2, 1], np.int64)), _init("expand", np.array([3, 1, 1], np.int64)),
        _init("axes_u", np.array([0], np.int64)), _init("scales", np.array([1, 1, 2, 0.5], np.float32)),
        _init("start", np.float32(1)), _init("limit", np.float32(7)), _init("delta", np.float32(2)),
        _init("shape_c", np.array([2, 5], np.int64)),
    ]  # fmt: skip
    outputs = [oh.make_tensor_value_info(name, F, None) for name in ("y", "range", "filled")]
    return _model(nodes, [oh.make_tensor_value_info("x", F, [1, 8, 6, 6])], outputs, initializers, fix=False)


def test_infer_shapes_without_the_weights_gives_qonnxs_graph():
    """Value infos for the initializers standard nodes read, none for those only custom ops read (qonnx
    adds them with custom ops still hidden), shapes from the values of shape inputs, the weights
    untouched."""
    from qonnx.transformation.infer_shapes import InferShapes

    model = _shape_values()
    assert max(math.prod(t.dims) for t in model.graph.initializer) > shapes.SHAPE_VALUES_MAX
    for cleanup in (True, False):
        assert _assert_as_qonnx(_bytes(model), InferShapes, "shape values", cleanup=cleanup)
    ours = FastModelWrapper(_bytes(model), fix_missing_initializer_valueinfo=False).transform(InferShapes())
    assert ours.get_tensor_shape("y") == [1, 3, 4, 15] and ours.get_tensor_shape("range") == [3]
    assert ours.get_tensor_shape("filled") == [2, 5] and ours.get_tensor_shape("t") == [1, 15, 6, 6]
    assert ours.get_tensor_valueinfo("thresholds") is None and ours.get_tensor_valueinfo("scale") is None
    assert ours.get_tensor_valueinfo("conv_w") is not None
    assert [n.domain for n in ours.graph.node if n.op_type in ("MultiThreshold", "Quant")] == ["qonnx.custom_op.general"] * 2
    np.testing.assert_array_equal(ours.get_initializer("fc_w"), model.get_initializer("fc_w"))


def test_infer_shapes_keeps_the_values_of_integer_initializers_of_any_size():
    """A shape input of more than ``SHAPE_VALUES_MAX`` values: integer initializers keep their data."""
    from qonnx.transformation.infer_shapes import InferShapes

    rank = shapes.SHAPE_VALUES_MAX + 1
    model = _model(
        [oh.make_node("ConstantOfShape", ["shape"], ["y"], name="fill")], [],
        [oh.make_tensor_value_info("y", F, None)], [_init("shape", np.ones(rank, np.int64))],
    )  # fmt: skip
    assert _assert_as_qonnx(_bytes(model), InferShapes)
    assert FastModelWrapper(_bytes(model)).transform(InferShapes()).get_tensor_shape("y") == [1] * rank


def test_the_wrapper_keeps_its_class_and_qonnxs_float64_flag():
    """A transformation's result is a FastModelWrapper (passes calling passes keep the equivalents);
    after shape inference ``fix_float64`` is off, as on qonnx's new wrapper."""
    from qonnx.transformation.general import GiveUniqueNodeNames
    from qonnx.transformation.infer_shapes import InferShapes

    for cls in (ModelWrapper, FastModelWrapper):
        model = cls(_bytes(_identities()), fix_float64=True)
        assert model.transform(InferShapes()).fix_float64 is False
        assert model.transform(GiveUniqueNodeNames()).fix_float64 is True
    model = FastModelWrapper(_bytes(_identities()))
    assert type(model.transform(GiveUniqueNodeNames())) is FastModelWrapper
    assert FastModelWrapper.of(model) is model and type(FastModelWrapper.of(ModelWrapper(model.model))) is FastModelWrapper


def test_give_unique_parameter_tensors_gives_qonnxs_graph():
    """A weight shared by two nodes and twice by one (each repeat copied, its datatype with it), a
    weight used once, a dynamic input."""
    from qonnx.transformation.general import GiveUniqueParameterTensors

    nodes = [
        oh.make_node("Mul", ["x", "w"], ["a"], name="first"),
        oh.make_node("Mul", ["a", "w"], ["b"], name="second"),
        oh.make_node("Add", ["w", "w"], ["ww"], name="twice"),
        oh.make_node("Add", ["b", "ww"], ["c"], name="join"),
        oh.make_node("Mul", ["c", "once"], ["y"], name="once"),
    ]
    model = _model(
        nodes, [oh.make_tensor_value_info("x", F, [1, 4])], [oh.make_tensor_value_info("y", F, [1, 4])],
        [_init("w", np.arange(4, dtype=np.float32)), _init("once", np.full(4, 3, np.float32))],
    )  # fmt: skip
    model.set_tensor_datatype("w", DataType["INT4"])
    for cleanup in (True, False):
        assert _assert_as_qonnx(_bytes(model), GiveUniqueParameterTensors, cleanup=cleanup)
    ours = FastModelWrapper(_bytes(model)).transform(GiveUniqueParameterTensors(), cleanup=False)
    uses = [ours.graph.node[0].input[1], ours.graph.node[1].input[1], *ours.graph.node[2].input]
    assert len(set(uses)) == 4 and all(ours.get_tensor_datatype(u) == DataType["INT4"] for u in uses)


# -- constant folding ------------------------------------------------------------------------------


def _constant(name: str, value) -> onnx.NodeProto:
    return oh.make_node("Constant", [], [name], name=f"{name}_node", value=_init(name, np.asarray(value, np.float32)))


def _chains() -> ModelWrapper:
    """y = Reshape(Quant(x * (c1 + c2) / Identity(c3) + n), Shape(...)): Constant nodes, chains of
    constant nodes between dynamic ones (foldable only once those before them are), a Shape of a
    computed tensor, and a Quant that stays."""
    nodes = [
        _constant("c1", [1.5, 2.0, 0.5, 4.0]),
        oh.make_node("Mul", ["x", "c1"], ["m"]),
        _constant("c2", [0.25, 0.25, 0.25, 0.25]),
        oh.make_node("Add", ["c1", "c2"], ["c12"]),
        oh.make_node("Mul", ["m", "c12"], ["m2"]),
        oh.make_node("Identity", ["c3"], ["c3i"]),
        oh.make_node("Div", ["m2", "c3i"], ["d"]),
        oh.make_node("Shape", ["d"], ["s"]),
        oh.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
        oh.make_node("ReduceSum", ["sf"], ["n"], keepdims=0),
        oh.make_node("Add", ["d", "n"], ["e"]),
        oh.make_node("Quant", ["e", "qs", "qz", "qb"], ["q"], domain="qonnx.custom_op.general",
                     narrow=0, signed=1, rounding_mode="ROUND"),
        oh.make_node("Reshape", ["q", "s"], ["y"]),
    ]  # fmt: skip
    initializers = [_init(n, np.asarray(v, np.float32)) for n, v in (("c3", [2.0, 2.0, 4.0, 8.0]), ("qs", 0.5), ("qz", 0.0), ("qb", 8.0))]
    model = _model(nodes, [oh.make_tensor_value_info("x", F, [2, 4])], [oh.make_tensor_value_info("y", F, [2, 4])], initializers, opset=17)
    model.model.opset_import.append(oh.make_opsetid("qonnx.custom_op.general", 1))
    return model


def _resorted_chains() -> ModelWrapper:
    """Two constant chains whose second links are listed in the other order than their first: qonnx
    folds j0, k0, then (its SortGraph having moved them to the front) j1 before k1, and leaves Y before X."""
    nodes = [
        oh.make_node("Relu", ["x"], ["p"], name="p"),
        oh.make_node("Relu", ["x"], ["q"], name="q"),
        _constant("j0", [1, 2, 3, 4]),
        _constant("k0", [1, 2, 3, 4]),
        oh.make_node("Neg", ["k0"], ["k1"], name="K1"),
        oh.make_node("Neg", ["j0"], ["j1"], name="J1"),
        oh.make_node("Add", ["q", "k1"], ["X"], name="X"),
        oh.make_node("Add", ["p", "j1"], ["Y"], name="Y"),
    ]
    outputs = [oh.make_tensor_value_info("X", F, [4]), oh.make_tensor_value_info("Y", F, [4])]
    return _model(nodes, [oh.make_tensor_value_info("x", F, [4])], outputs)


def _shared_folds() -> ModelWrapper:
    """A folded value read by three nodes (qonnx's cleanup copies it for the second and third under
    random names before they fold), one of them an Add reading it first, and a Shape of a tensor whose
    shape is known only once the Reshape's shape is folded."""
    nodes = [
        oh.make_node("Relu", ["x"], ["r"], name="relu"),
        oh.make_node("Div", ["a", "b"], ["d"], name="div"),
        oh.make_node("Mul", ["d", "b"], ["m1"], name="mul1"),
        oh.make_node("Add", ["d", "r"], ["added"], name="add"),
        oh.make_node("Mul", ["d", "a"], ["m2"], name="mul2"),
        oh.make_node("Concat", ["m1", "m2"], ["cat"], name="concat", axis=0),
        oh.make_node("Cast", ["cat"], ["shape"], name="cast", to=TensorProto.INT64),
        oh.make_node("Reshape", ["added", "shape"], ["reshaped"], name="reshape"),
        oh.make_node("Shape", ["reshaped"], ["s"], name="shape_of"),
        oh.make_node("Cast", ["s"], ["sf"], name="cast2", to=TensorProto.FLOAT),
        oh.make_node("ReduceSum", ["sf"], ["total"], name="sum", keepdims=1),
        oh.make_node("Add", ["reshaped", "total"], ["y"], name="out"),
    ]
    initializers = [_init("a", np.float32([2.0])), _init("b", np.float32([1.0]))]  # shape [a, a * a / b]
    return _model(nodes, [oh.make_tensor_value_info("x", F, [8])], [oh.make_tensor_value_info("y", F, None)], initializers)


@QONNX_NOTICES
@pytest.mark.parametrize("build", [_chains, _resorted_chains, _shared_folds])
@pytest.mark.parametrize("shaped", [True, False], ids=["shaped", "unshaped"])
def test_constants_fold_in_qonnxs_steps(build, shaped):
    """qonnx's graph (fold order, the cleanup's sorts and copies, Shapes of shapes inferred after the
    folds before them), with and without transform's cleanup; unshaped, qonnx's failure to execute a
    node without value infos; the outputs of the graph as before."""
    from qonnx.transformation.fold_constants import FoldConstants
    from qonnx.transformation.infer_shapes import InferShapes

    model = build()
    proto_bytes = _bytes(model.transform(InferShapes()) if shaped else model)
    for cleanup in (True, False):
        assert _assert_as_qonnx(proto_bytes, FoldConstants, build.__name__, cleanup=cleanup) or not shaped
    if not shaped:
        return
    before = model.transform(InferShapes())
    after = FastModelWrapper(proto_bytes).transform(FoldConstants()).transform(InferShapes())
    x = np.arange(math.prod(before.get_tensor_shape("x")), dtype=np.float32).reshape(before.get_tensor_shape("x"))
    for name in (vi.name for vi in before.graph.output):
        np.testing.assert_array_equal(execute_onnx(after, {"x": x})[name], execute_onnx(before, {"x": x})[name])


def test_folding_order_and_copies_as_qonnxs():
    from qonnx.transformation.fold_constants import FoldConstants
    from qonnx.transformation.infer_shapes import InferShapes

    ours = FastModelWrapper(_bytes(_resorted_chains().transform(InferShapes()))).transform(FoldConstants())
    assert [n.name for n in ours.graph.node] == ["p", "q", "Y", "X"]
    assert [t.name for t in ours.graph.initializer] == ["j1", "k1"]
    ours = FastModelWrapper(_bytes(_chains().transform(InferShapes()))).transform(FoldConstants())
    assert [n.op_type for n in ours.graph.node] == ["Mul", "Mul", "Div", "Add", "Quant", "Reshape"]


def test_cleanup_model_folds_constant_chains_as_qonnx():
    from qonnx.util.cleanup import cleanup_model as qonnx_cleanup

    for build in (_chains, _resorted_chains, _shared_folds):
        graphs = []
        for clean in (qonnx_cleanup, cleanup_model):
            random.seed(0)
            graphs.append((_bytes(clean(build())), random.getstate()))
        assert graphs[1] == graphs[0], build.__name__


# -- execution -----------------------------------------------------------------------------------


def _outcome(run):
    """``run()``'s outputs (copied) and warnings, or its exception's type and message (whitespace
    folded: qonnx writes some messages over several indented lines)."""
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            outputs = run()
    except Exception as error:  # noqa: BLE001  compared with qonnx's
        kind = "assertion" if isinstance(error, AssertionError) else "error"
        return kind, " ".join(str(error).split())
    values = {name: (value.dtype.str, value.shape, value.tobytes()) for name, value in outputs.items()}
    return values, sorted({" ".join(str(w.message).split()) for w in caught})


def _assert_executes_as_qonnx(model: ModelWrapper, feeds: dict) -> tuple:
    theirs = _outcome(lambda: execute_onnx(model, feeds))
    ours = _outcome(lambda: execution.Executor(FastModelWrapper.of(model)).run(feeds))
    assert ours == theirs
    return theirs


@QONNX_NOTICES
@pytest.mark.parametrize("name", [f"{n}-{c}" for n, c in EXPORTS] + [f"graph-{n}" for n in GRAPH_EXPORTS])
def test_executor_gives_execute_onnxs_outputs_on_exports(exports, name):
    """After qonnx's cleanup and shape inference (the QONNX verification's graph): the same outputs,
    bit for bit, run after run from the kept sessions (one per one-node model), and through
    ``execute`` sample by sample on a graph of batch size 1."""
    from qonnx.transformation.change_batchsize import ChangeBatchSize
    from qonnx.transformation.infer_shapes import InferShapes
    from qonnx.util.cleanup import cleanup_model as qonnx_cleanup

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = qonnx_cleanup(ModelWrapper(copy.deepcopy(exports[name]))).transform(InferShapes())
    inputs = [vi.name for vi in model.graph.input]
    rng = np.random.default_rng(0)
    feeds = {n: rng.random(model.get_tensor_shape(n), dtype=np.float32) for n in inputs}
    expected, _ = _assert_executes_as_qonnx(model, feeds)
    executor = execution.Executor(FastModelWrapper.of(model))
    for _ in range(2):
        outputs = executor.run(feeds)
        assert {k: (v.dtype.str, v.shape, v.tobytes()) for k, v in outputs.items()} == expected
    standard = {n.SerializeToString() for n in model.graph.node if n.domain in ("", "ai.onnx")}
    assert 0 < len(executor.sessions) <= len(standard)
    if model.get_nodes_by_op_type("Reshape"):  # shapes written for the batch: no batch of 1
        return
    single = model.transform(ChangeBatchSize(1)).transform(InferShapes())
    batch = [feeds[n][:2] for n in inputs]
    samples = [execute_onnx(single, {n: x[i : i + 1] for n, x in zip(inputs, batch)}) for i in range(2)]
    for output, vi in zip(execution.execute(single, batch), single.graph.output, strict=True):
        np.testing.assert_array_equal(output, np.concatenate([sample[vi.name] for sample in samples]))


def test_executor_builds_qonnxs_one_node_models_where_names_repeat():
    """A name among the graph's inputs, outputs and value_info at once: qonnx's one-node model lists
    every match (its filters), and takes the last match of an output."""
    nodes = [oh.make_node("Relu", ["a"], ["b"], name="relu"), oh.make_node("Neg", ["b"], ["c"], name="neg")]
    vi = [oh.make_tensor_value_info(n, F, [2]) for n in ("a", "b", "c")]
    model = _model(
        nodes, [vi[0]], [vi[1], vi[0], vi[2]], value_info=[copy.deepcopy(vi[0]), copy.deepcopy(vi[1])], fix=False,
    )  # fmt: skip
    _assert_executes_as_qonnx(model, {"a": np.array([-1.0, 2.0], np.float32)})
    model = _model(nodes, [vi[0]], [vi[2]], value_info=[vi[1], copy.deepcopy(vi[1])], fix=False)
    _assert_executes_as_qonnx(model, {"a": np.array([-1.0, 2.0], np.float32)})


def test_executor_takes_outer_values_into_subgraphs_as_qonnx():
    """An If whose branches read a tensor of the outer graph: qonnx lists its value info among the
    one-node model's inputs (and then feeds only the node's own inputs: ONNX Runtime's refusal is
    qonnx's outcome)."""
    then_branch = oh.make_graph([oh.make_node("Neg", ["t"], ["o"])], "then", [], [oh.make_tensor_value_info("o", F, [2])])
    else_branch = oh.make_graph([oh.make_node("Relu", ["t"], ["e"])], "else", [], [oh.make_tensor_value_info("e", F, [2])])
    nodes = [
        oh.make_node("Abs", ["x"], ["t"], name="abs"),
        oh.make_node("If", ["cond"], ["y"], name="if", then_branch=then_branch, else_branch=else_branch),
    ]
    model = _model(
        nodes, [oh.make_tensor_value_info("x", F, [2]), oh.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [oh.make_tensor_value_info("y", F, [2])], value_info=[oh.make_tensor_value_info("t", F, [2])],
    )  # fmt: skip
    outcome = _assert_executes_as_qonnx(model, {"x": np.array([-1.0, 2.0], np.float32), "cond": np.array(True)})
    assert outcome == ("error", "Required inputs (['t']) are missing from input feed (['cond']).")


def _annotated() -> ModelWrapper:
    """x (INT8) * 0.5 -> y (INT4): qonnx rounds annotated integer tensors before and after each node."""
    model = _model(
        [oh.make_node("Mul", ["x", "half"], ["y"], name="mul")], [oh.make_tensor_value_info("x", F, [4])],
        [oh.make_tensor_value_info("y", F, [4])], [_init("half", np.float32(0.5))],
    )  # fmt: skip
    model.set_tensor_datatype("x", DataType["INT8"])
    model.set_tensor_datatype("y", DataType["INT4"])
    return model


@pytest.mark.parametrize(
    "x",
    [
        [2.0, 4.0, -6.0, 0.0],  # on the grids
        [2.0, 4.002, -6.0, 0.0],  # rounded within qonnx's threshold, with its warning
        [3.0, 4.0, -6.0, 0.0],  # y = 1.5: too far from INT4
        [np.nan, 4.0, -6.0, 0.0],  # NaN first: Python's max is NaN, qonnx refuses
        [2.0, np.nan, -6.0, 0.0],  # NaN later: Python's max passes over it
        [40.0, 4.0, -6.0, 0.0],  # y = 20, outside INT4: rounding keeps it, no error
    ],
)
def test_executor_sanitizes_as_qonnx(x):
    _assert_executes_as_qonnx(_annotated(), {"x": np.asarray(x, np.float32)})


def test_executor_sanitizes_only_when_qonnx_does(monkeypatch):
    monkeypatch.setenv("SANITIZE_QUANT_TENSORS", "0")
    outputs, _ = _assert_executes_as_qonnx(_annotated(), {"x": np.asarray([3.0, 4.0, -6.0, 0.0], np.float32)})
    assert np.frombuffer(outputs["y"][2], np.float32)[0] == 1.5
    monkeypatch.setenv("SANITIZE_QUANT_TENSORS", "1")
    monkeypatch.setenv("ERROR_THRESH", "0.6")
    _assert_executes_as_qonnx(_annotated(), {"x": np.asarray([3.0, 4.0, -6.0, 0.0], np.float32)})


def test_executor_refuses_what_qonnx_refuses():
    """Unsorted nodes (every producer of a tensor before every reader: a tensor produced twice, a node
    reading its own output), a tensor without a shape, an input of another shape, an exec_mode."""
    relu = oh.make_node("Relu", ["x"], ["a"], name="relu")
    neg = oh.make_node("Neg", ["a"], ["y"], name="neg")
    vis = {n: oh.make_tensor_value_info(n, F, [2]) for n in ("x", "a", "y")}
    feeds = {"x": np.array([-1.0, 2.0], np.float32)}

    def graph(nodes, value_info=(vis["a"],)):
        return _model(nodes, [vis["x"]], [vis["y"]], value_info=value_info, fix=False)

    assert _assert_executes_as_qonnx(graph([neg, relu]), feeds)[0] == "assertion"
    second = oh.make_node("Abs", ["x"], ["a"], name="abs")  # a produced again, after its reader
    assert _assert_executes_as_qonnx(graph([relu, neg, second]), feeds)[0] == "assertion"
    looped = oh.make_node("Max", ["x", "a"], ["a"], name="loop")  # reads its own output: sorted for qonnx
    assert _assert_executes_as_qonnx(graph([looped, neg]), feeds)[0] != "assertion"
    assert _assert_executes_as_qonnx(graph([relu, neg], value_info=()), feeds)[0] == "error"
    assert _assert_executes_as_qonnx(graph([relu, neg]), {"x": np.zeros(3, np.float32)})[0] == "error"
    model = graph([relu, neg])
    model.set_metadata_prop("exec_mode", "remote")
    assert _assert_executes_as_qonnx(model, feeds)[0] == "error"


def test_repeated_fields_are_recognized_with_and_without_is_repeated():
    """protobuf before 6.31 has no ``FieldDescriptor.is_repeated``; its ``label`` says the same."""
    node, name = (onnx.GraphProto.DESCRIPTOR.fields_by_name[f] for f in ("node", "name"))
    assert shapes._is_repeated(node) and not shapes._is_repeated(name)

    class OldField:  # the descriptor's attributes that protobuf 4.25 - 6.30 have
        LABEL_REPEATED, LABEL_OPTIONAL = 3, 1

        def __init__(self, label):
            self.label = label

    assert shapes._is_repeated(OldField(3)) and not shapes._is_repeated(OldField(1))
