"""``qonnx_index.indexed_lookups()``: qonnx's answers (objects, None, exceptions, first matches),
indexes kept exact through ModelWrapper's mutators, the patch restored on exit and per thread,
qonnx's and FINN's real passes giving byte-identical graphs with and without it (FINN's front end
to the dataflow partition on the FINN-style zoo networks of ``_shared.finn_zoo``, the first steps on
torchvision's SqueezeNet), and the FINN pipeline and the QONNX verification running inside it."""

from __future__ import annotations

import copy
import importlib.util
import math
import random
import threading
import warnings

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto
from onnx import helper as oh

pytest.importorskip("qonnx.core.modelwrapper", reason="qonnx is not installed (the export extra)")

from qonnx.core.datatype import DataType
from qonnx.core.modelwrapper import ModelWrapper

from quark.torch.extensions.brevitas._backend import qonnx_index
from quark.torch.extensions.brevitas._backend.qonnx_index import ALL_KINDS, indexed_lookups, region

PATCHED = (
    "get_tensor_valueinfo",
    "get_tensor_shape",
    "get_initializer",
    "find_producer",
    "find_consumers",
    "get_tensor_datatype",
    "get_tensor_layout",
    "set_tensor_shape",
    "set_initializer",
    "rename_tensor",
    "transform",
    "check_all_tensor_shapes_specified",
)
ORIGINAL = {name: vars(ModelWrapper)[name] for name in PATCHED}


def _graph() -> ModelWrapper:
    """Names that repeat where qonnx's first-match and error paths matter: a node consuming one
    tensor twice, two producers of one tensor, two initializers of one name, a value info given
    twice, annotations (one repeated, one not a literal), an optional empty input, an initializer
    without value info."""
    nodes = [
        oh.make_node("Add", ["x", "x"], ["a"], name="twice"),
        oh.make_node("Mul", ["a", "w"], ["b"], name="mul"),
        oh.make_node("Relu", ["b"], ["c"], name="relu0"),
        oh.make_node("Relu", ["b"], ["c"], name="relu1"),  # a second producer of c
        oh.make_node("Clip", ["c", "", "hi"], ["y"], name="clip"),
    ]
    inits = [
        onnx.numpy_helper.from_array(np.full((1, 4), 2.0, np.float32), "w"),
        onnx.numpy_helper.from_array(np.array(6.0, np.float32), "hi"),
        onnx.numpy_helper.from_array(np.arange(3, dtype=np.int64), "dup"),
        onnx.numpy_helper.from_array(np.arange(5, dtype=np.int64), "dup"),
    ]
    vis = [oh.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4]) for n in ("a", "b", "c", "b")]
    graph = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        inits,
        value_info=vis,
    )
    model = ModelWrapper(oh.make_model(graph), fix_missing_initializer_valueinfo=False)
    model.set_tensor_datatype("a", DataType["INT4"])
    model.set_tensor_layout("a", ["N", "C"])
    model.set_tensor_datatype("c", DataType["UINT4"])
    qa = model.graph.quantization_annotation.add()
    qa.tensor_name = "c"  # a repeated annotation: qonnx's get_by_name raises
    qa = model.graph.quantization_annotation.add()
    qa.tensor_name = "y"  # a layout that is no literal: qonnx eval()s it, the index hands it to qonnx
    qa.quant_parameter_tensor_names.add(key="tensor_layout", value="list('NC')")
    return model


NAMES = ("x", "a", "b", "c", "y", "w", "hi", "dup", "", "missing", None, 3)


def _answers(model: ModelWrapper, name) -> dict:
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
    }
    out = {}
    for key, call in calls.items():
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out[key] = ("value", call(), [str(w.message) for w in caught])
        except Exception as error:  # noqa: BLE001  the exception is part of qonnx's answer
            out[key] = ("raised", type(error), str(error))
    return out


def _same(expected, actual, identity: bool) -> bool:
    if isinstance(expected, np.ndarray):
        return (
            isinstance(actual, np.ndarray)
            and expected.dtype == actual.dtype
            and np.array_equal(expected, actual)
            and (expected is not actual)
        )
    if isinstance(expected, (list, tuple)):
        return (
            type(expected) is type(actual)
            and len(expected) == len(actual)
            and all(_same(e, a, identity) for e, a in zip(expected, actual))
        )
    if hasattr(expected, "SerializeToString"):
        if identity:
            return expected is actual
        return type(expected) is type(actual) and expected.SerializeToString() == actual.SerializeToString()
    return expected == actual


def _assert_same_answers(reference: ModelWrapper, model: ModelWrapper, identity: bool) -> None:
    for name in NAMES:
        expected, actual = _answers(reference, name), _answers(model, name)
        for key in expected:
            assert expected[key][0] == actual[key][0], (name, key, expected[key], actual[key])
            assert _same(expected[key][1:], actual[key][1:], identity), (name, key, expected[key], actual[key])


def test_lookups_answer_as_qonnx():
    model = _graph()
    with indexed_lookups():
        expected = {n: _answers(model, n) for n in NAMES}  # outside a region: qonnx's scans
        with region(ALL_KINDS):
            assert qonnx_index._table(model, qonnx_index.PROD, "c") is not None  # indexed here
            actual = {n: _answers(model, n) for n in NAMES}
    for name in NAMES:
        for key in expected[name]:
            e, a = expected[name][key], actual[name][key]
            assert e[0] == a[0] and _same(e[1:], a[1:], identity=True), (name, key, e, a)


def _mutations(model: ModelWrapper) -> list:
    return [
        lambda: model.set_tensor_shape("a", [2, 4]),  # in value_info
        lambda: model.set_tensor_shape("x", [3, 4]),  # a graph input
        lambda: model.set_tensor_shape("y", [5, 4], dtype=TensorProto.INT8),  # a graph output
        lambda: model.set_tensor_shape("new", [7]),  # no value info yet
        lambda: model.set_initializer("w", np.ones((1, 4), np.float32)),  # replaced
        lambda: model.set_initializer("dup", np.zeros(2, np.int64)),  # the first of two removed
        lambda: model.set_initializer("fresh", np.ones(3, np.float32)),
        lambda: model.get_tensor_shape("hi", fix_missing_init_shape=True),
        lambda: model.del_initializer("hi"),
        lambda: model.set_tensor_datatype("b", DataType["INT8"]),  # a new annotation
        lambda: model.set_tensor_datatype("a", DataType["UINT2"]),  # an existing one
        lambda: model.set_tensor_datatype("a", None),
        lambda: model.set_tensor_layout("x", ["N", "C"]),  # a new annotation
        lambda: model.set_tensor_layout("a", ["N", "H"]),  # an existing layout
        lambda: model.set_tensor_layout("b", ["N", "C"]),  # an annotation without a layout
        lambda: model.set_tensor_layout("b", ("N", "C")),  # not a list: qonnx's assertion
        lambda: model.set_tensor_datatype("c", DataType["INT2"]),  # annotated twice: qonnx raises
        lambda: model.rename_tensor("a", "a_renamed"),  # indexed rename
        lambda: model.rename_tensor("x", "b"),  # onto an existing name: qonnx's own
        lambda: model.rename_tensor("b", "b2"),  # a name given twice: qonnx's own
        lambda: model.rename_tensor("w", "w2"),
        lambda: model.rename_tensor("dup", "dup2"),  # two initializers: qonnx raises midway
    ]


def _snapshot(value):
    """A comparable copy of an answer, taken now (later writes change protobuf objects in place)."""
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, *(_snapshot(v) for v in value))
    if hasattr(value, "SerializeToString"):
        return (type(value).__name__, value.SerializeToString())
    return value if value is None or isinstance(value, (int, str, type)) else str(value)


def _run_steps(model: ModelWrapper) -> list:
    """After each mutation: its outcome, the graph's bytes and every lookup's answer."""
    record = []
    for do in _mutations(model):
        try:
            do()
            outcome = None
        except Exception as error:  # noqa: BLE001  compared between the runs
            outcome = (type(error), str(error))
        answers = {n: {k: _snapshot(v) for k, v in _answers(model, n).items()} for n in NAMES}
        record.append((outcome, model.model.SerializeToString(), answers))
    return record


def test_mutators_keep_the_indexes_exact():
    """One region open through every mutation: the indexes built at its first lookups must follow
    qonnx's writes (set_tensor_shape, set_initializer, del_initializer, set_tensor_datatype /
    layout, rename_tensor indexed and qonnx's own, a rename qonnx aborts midway)."""
    expected = _run_steps(_graph())
    with indexed_lookups(), region(ALL_KINDS):
        model = _graph()
        assert qonnx_index._table(model, qonnx_index.VI, "a") is not None
        actual = _run_steps(model)
        index = next(iter(qonnx_index._regions()[-1].indexes.values()))
        assert set(index.kinds) == ALL_KINDS  # the last answers came from the indexes
    for step, (e, a) in enumerate(zip(expected, actual)):
        assert e[0] == a[0], (step, e[0], a[0])
        assert e[1] == a[1], f"step {step}: the graphs differ"
        for name in NAMES:
            assert e[2][name] == a[2][name], (step, name)


def test_outside_regions_in_place_writes_are_seen():
    """FINN's passes rename through the protobuf between lookups: outside the audited regions
    every lookup is qonnx's scan, so it sees them."""
    model = _graph()
    with indexed_lookups():
        relu = model.find_producer("c")
        relu.output[0] = "renamed"
        assert model.find_producer("renamed") is relu
        model.graph.value_info[0].name = "a2"
        assert model.get_tensor_shape("a2") == [1, 4] and model.get_tensor_valueinfo("a") is None


def test_a_transformation_called_in_a_region_is_not_trusted():
    """An audited routine may call ``model.transform``; the transformation runs untrusted, and the
    enclosing region's indexes are rebuilt afterwards."""
    from qonnx.transformation.base import Transformation

    class RenameInPlace(Transformation):
        def apply(self, model):
            node = model.find_producer("a")
            node.output[0] = "a_new"
            assert model.find_producer("a_new") is node
            return model, False

    model = _graph()
    with indexed_lookups(), region(ALL_KINDS):
        assert model.find_producer("a") is not None  # the region's index is built
        model.transform(RenameInPlace(), make_deepcopy=False, cleanup=False)
        assert model.find_producer("a") is None
        assert model.find_producer("a_new").name == "twice"


def test_restored_on_exit_and_on_exceptions():
    with indexed_lookups():
        assert qonnx_index.installed()
        assert all(vars(ModelWrapper)[n] is not ORIGINAL[n] for n in PATCHED)
        with indexed_lookups():  # nested
            pass
        assert qonnx_index.installed()
    assert not qonnx_index.installed()
    assert all(vars(ModelWrapper)[n] is ORIGINAL[n] for n in PATCHED)
    with pytest.raises(KeyError), indexed_lookups():
        raise KeyError("inside")
    assert all(vars(ModelWrapper)[n] is ORIGINAL[n] for n in PATCHED)


def test_threads_share_the_patch_not_the_indexes():
    inside, release = threading.Event(), threading.Event()
    seen = {}

    def other():
        with indexed_lookups():
            inside.set()
            release.wait(10)
            seen["tables"] = qonnx_index._table(_graph(), qonnx_index.PROD, "c")

    thread = threading.Thread(target=other)
    thread.start()
    inside.wait(10)
    with indexed_lookups(), region(ALL_KINDS):
        assert qonnx_index._table(_graph(), qonnx_index.PROD, "c") is not None
    assert qonnx_index.installed()  # the other thread is still inside
    release.set()
    thread.join(10)
    assert seen["tables"] is None  # no region open in that thread
    assert not qonnx_index.installed()
    assert all(vars(ModelWrapper)[n] is ORIGINAL[n] for n in PATCHED)


# -- real graphs: qonnx's and FINN's passes, with and without the index ---------------------------

needs_finn = pytest.mark.skipif(
    importlib.util.find_spec("finn") is None,
    reason="finn-plus is not installed (pip install --no-deps finn-plus==1.6.1)",
)

#: qonnx's notices on every run of GemmToMatMul and InferDataLayouts
QONNX_NOTICES = pytest.mark.filterwarnings("ignore::UserWarning:qonnx")


def _seeded(function, *args):
    random.seed(0)
    np.random.seed(0)
    return function(*args)


def _verification_path(model: onnx.ModelProto):
    """What the exporter's QONNX verification runs: cleanup, shape inference, execution."""
    from qonnx.core.onnx_exec import execute_onnx
    from qonnx.transformation.infer_shapes import InferShapes
    from qonnx.util.cleanup import cleanup_model

    wrapper = cleanup_model(ModelWrapper(onnx.ModelProto.FromString(model.SerializeToString())))
    wrapper = wrapper.transform(InferShapes())
    x = np.random.default_rng(0).random(_input_shape(wrapper), dtype=np.float32)
    out = execute_onnx(wrapper, {wrapper.graph.input[0].name: x})[wrapper.graph.output[0].name]
    return [wrapper.model.SerializeToString()], out


def _input_shape(wrapper) -> list[int]:
    return wrapper.get_tensor_shape(wrapper.graph.input[0].name)


def _front_end(model: onnx.ModelProto, work_dir: str, stages: int | None = None):
    """FINN's front end as the dataflow export runs it; the graph after each stage and the outputs."""
    from qonnx.core.onnx_exec import execute_onnx
    from qonnx.util.cleanup import cleanup_model

    from quark.torch.extensions.brevitas._backend.targets.finn import pipeline
    from quark.torch.extensions.brevitas._backend.targets.finn.origins import tag_origins

    wrapper = ModelWrapper(onnx.ModelProto.FromString(model.SerializeToString()))
    tag_origins(wrapper)
    wrapper = pipeline.batch_one(cleanup_model(wrapper))
    graphs = [wrapper.model.SerializeToString()]
    steps = [step for _, step in pipeline.FRONT_END] + [lambda m: pipeline._partition(m, work_dir)[0]]
    for step in steps[:stages]:
        wrapper = step(wrapper)
        graphs.append(wrapper.model.SerializeToString())
    x = np.random.default_rng(0).random(_input_shape(wrapper), dtype=np.float32)
    return graphs, execute_onnx(wrapper, {wrapper.graph.input[0].name: x})[wrapper.graph.output[0].name]


def _assert_identical(run, *args) -> None:
    """``run(*args)`` plainly (the index switched off, also where the package turns it on) and
    inside ``indexed_lookups()``: the same graph bytes after every stage, the same outputs."""
    assert not qonnx_index.installed()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("QUARK_QONNX_INDEX", "0")
        plain = _seeded(run, *args)
    with indexed_lookups():
        indexed = _seeded(run, *args)
    assert not qonnx_index.installed()
    assert len(plain[0]) == len(indexed[0])
    for stage, (p, i) in enumerate(zip(plain[0], indexed[0])):
        assert p == i, f"stage {stage}: the graphs differ"
    np.testing.assert_array_equal(plain[1], indexed[1])


@pytest.fixture(scope="module")
def finn_zoo_exports(tmp_path_factory):
    """The repo's FINN-style networks (residual, concat, depthwise), exported as QONNX."""
    from _shared import finn_zoo as zoo

    from quark.torch.extensions.brevitas.api import ModelExporter

    train, test = zoo.digits_batches()
    done = {}
    for name in ("resnet", "concat", "mobilenet"):
        path = tmp_path_factory.mktemp(name) / "m.qonnx.onnx"
        ModelExporter(path).export_qonnx_model(zoo.calibrated(name, train[:2]), test[:2], verify=False)
        done[name] = onnx.load(str(path))
    return done


@needs_finn
@QONNX_NOTICES
@pytest.mark.parametrize("name", ["resnet", "concat", "mobilenet"])
def test_finn_front_end_identical(finn_zoo_exports, name, tmp_path):
    """cleanup_model, InferShapes, FoldConstants, ConvertQONNXtoFINN, Streamline (with
    LowerConvsToMatMul and the residual passes), the convert_to_hw Infer* passes and
    CreateDataflowPartition: the same bytes after every stage, the same outputs."""
    _assert_identical(_front_end, finn_zoo_exports[name], str(tmp_path / "partitions"))
    _assert_identical(_verification_path, finn_zoo_exports[name])


@pytest.mark.slow
@needs_finn
@QONNX_NOTICES
def test_torchvision_network_identical(tmp_path):
    """A real torchvision network (SqueezeNet 1.1, W4A4 graph mode): FINN's cleanup (the export
    verification's passes) and ConvertQONNXtoFINN give the same bytes."""
    from quark.torch.examples import vision_zoo

    if vision_zoo.missing_libraries():
        missing = ", ".join(vision_zoo.missing_libraries())
        pytest.skip(f"not installed: {missing} (pip install --no-deps torchvision timm)")
    from quark.torch.extensions.brevitas import presets
    from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer

    entry = vision_zoo.ZOO["squeezenet1_1"]
    model = entry.build(seed=0)
    qmodel = ModelQuantizer(presets.finn(weight_bits=4, act_bits=4)).quantize_model(
        model, [entry.sample(4, seed=1)], progress=False
    )
    path = tmp_path / "squeezenet.qonnx.onnx"
    with torch.no_grad():
        ModelExporter(path).export_qonnx_model(qmodel, entry.sample(1, seed=2), verify=False)
    _assert_identical(_front_end, onnx.load(str(path)), str(tmp_path / "partitions"), 1)


# -- where the package turns it on -----------------------------------------------------------------


def _installed_while(monkeypatch, owner, name: str) -> list[bool]:
    """Replace ``owner.name`` by a spy recording whether the index is installed, then calling it."""
    seen: list[bool] = []
    original = getattr(owner, name)

    def spy(*args, **kwargs):
        seen.append(qonnx_index.installed())
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, spy)
    return seen


@needs_finn
@QONNX_NOTICES
def test_the_finn_pipeline_and_the_qonnx_verification_run_indexed(finn_zoo_exports, tmp_path, monkeypatch):
    """finn_handoff (and dataflow_from_qonnx, export_finn_dataflow: the same decorator) and the
    QONNX export's verification run inside indexed_lookups(); QUARK_QONNX_INDEX=0 turns it off."""
    from _shared import finn_zoo

    from quark.torch.extensions.brevitas._backend.export import verify
    from quark.torch.extensions.brevitas._backend.targets.finn import dataflow, pipeline

    path = tmp_path / "concat.qonnx.onnx"
    onnx.save(finn_zoo_exports["concat"], str(path))
    x = finn_zoo.digits_batches()[1][:2].numpy()  # real digits
    in_handoff = _installed_while(monkeypatch, pipeline, "run_checked")
    in_verification = _installed_while(monkeypatch, verify, "execute_qonnx")
    for switch, expected in (("1", True), ("0", False)):
        monkeypatch.setenv("QUARK_QONNX_INDEX", switch)
        in_handoff.clear()
        pipeline.finn_handoff(path, x, tmp_path / f"finn{switch}.onnx")
        assert in_handoff == [expected]
        in_verification.clear()
        verify._run_qonnx(finn_zoo_exports["concat"], [x])
        assert in_verification and set(in_verification) == {expected}
    assert (tmp_path / "finn1.onnx").read_bytes() == (tmp_path / "finn0.onnx").read_bytes()
    assert not qonnx_index.installed()
    for function in (pipeline.dataflow_from_qonnx, dataflow.export_finn_dataflow):
        assert function.__wrapped__.__name__ == function.__name__  # contextlib's decorator form


def _shuffled(proto: onnx.ModelProto, seed: int) -> ModelWrapper:
    model = ModelWrapper(proto.__deepcopy__())
    nodes = list(model.graph.node)
    random.Random(seed).shuffle(nodes)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def _sorted_both(model: ModelWrapper) -> tuple[bytes, bytes]:
    from qonnx.transformation.general import SortGraph

    # outside indexed_lookups(): qonnx's own
    qonnx_sorted = SortGraph().apply(ModelWrapper(model.model.__deepcopy__()))[0]
    with indexed_lookups():
        ours = ModelWrapper(model.model.__deepcopy__()).transform(SortGraph(), cleanup=False)
    return ours.model.SerializeToString(), qonnx_sorted.model.SerializeToString()


@pytest.mark.parametrize("name", ["resnet", "concat", "mobilenet"])
def test_sort_graph_orders_as_qonnx_on_shuffled_graphs(finn_zoo_exports, name):
    for seed in range(3):
        ours, theirs = _sorted_both(_shuffled(finn_zoo_exports[name], seed))
        assert ours == theirs


def test_sort_graph_keeps_and_drops_what_qonnx_does_and_refuses_cycles():
    from toposort import CircularDependencyError

    nodes = [
        oh.make_node("Relu", ["b"], ["c"], name="late"),
        oh.make_node("Constant", [], ["k"], name="used_constant", value=onnx.numpy_helper.from_array(np.ones(4, np.float32))),
        oh.make_node("Constant", [], ["unused"], name="floating", value=onnx.numpy_helper.from_array(np.ones(4, np.float32))),
        oh.make_node("Add", ["x", "k"], ["b"], name="early"),
        oh.make_node("Mul", ["c", "w"], ["y"], name="last"),
    ]  # fmt: skip
    graph = oh.make_graph(
        nodes, "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        initializer=[onnx.numpy_helper.from_array(np.ones(4, np.float32), "w")],
    )  # fmt: skip
    model = ModelWrapper(oh.make_model(graph))
    ours, theirs = _sorted_both(model)
    assert ours == theirs
    assert [n.name for n in ModelWrapper(onnx.load_from_string(ours)).graph.node] == ["used_constant", "early", "late", "last"]
    cyclic = ModelWrapper(model.model.__deepcopy__())
    cyclic.graph.node[3].input[0] = "c"  # early reads late's output: a cycle
    from qonnx.transformation.general import SortGraph

    with pytest.raises(CircularDependencyError):
        SortGraph().apply(ModelWrapper(cyclic.model.__deepcopy__()))
    with indexed_lookups(), pytest.raises(CircularDependencyError):
        ModelWrapper(cyclic.model.__deepcopy__()).transform(SortGraph(), cleanup=False)


@pytest.mark.parametrize("name", ["resnet", "mobilenet"])
def test_execution_in_a_region_gives_qonnxs_outputs(finn_zoo_exports, name):
    """qonnx's ``execute_onnx`` writes nothing to the graph: inside ``indexed_lookups()`` it runs as a
    region (its per-node datatype lookups indexed: DenseNet-121, one sample, 560 s -> 29 s) and gives
    every tensor as qonnx does."""
    from qonnx.core import onnx_exec
    from qonnx.transformation.infer_shapes import InferShapes

    model = ModelWrapper(finn_zoo_exports[name]).transform(InferShapes())
    x = np.random.default_rng(0).random(model.get_tensor_shape(model.graph.input[0].name), dtype=np.float32)
    feeds = {model.graph.input[0].name: x}
    plain = onnx_exec.execute_onnx(model, feeds, return_full_exec_context=True)
    with indexed_lookups():
        assert getattr(onnx_exec.execute_onnx, "__qonnx_index_original__", None) is not None  # the region
        indexed = onnx_exec.execute_onnx(model, feeds, return_full_exec_context=True)
    assert not hasattr(onnx_exec.execute_onnx, "__qonnx_index_original__")  # restored
    assert plain.keys() == indexed.keys() and all(np.array_equal(plain[k], indexed[k]) for k in plain)


def test_cached_sessions_run_qonnxs_one_node_models(finn_zoo_exports):
    """``qonnx_exec``: inside ``indexed_lookups()`` a standard node runs in a kept ONNX Runtime session of
    the one-node model qonnx builds (the same value infos, in qonnx's order, also when a name repeats
    across inputs, outputs and value_info); every tensor as qonnx's own execution gives it, again
    from the kept sessions, and the sessions are dropped when the context exits."""
    from onnx import helper

    from quark.torch.extensions.brevitas._backend import qonnx_exec

    graph = finn_zoo_exports["concat"].graph
    table = qonnx_exec._value_infos(graph)
    for node in graph.node:
        for names, containers in ((node.input, ("input", "output", "value_info")), (node.output, ("output", "value_info"))):
            expected = [x for c in containers for x in getattr(graph, c) if x.name in names]
            assert qonnx_exec._matching(table, names, containers) == expected
    repeated = helper.make_graph(
        [helper.make_node("Relu", ["a"], ["b"])], "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2]), helper.make_tensor_value_info("a", TensorProto.FLOAT, [2])],
        value_info=[helper.make_tensor_value_info("a", TensorProto.FLOAT, [2]), helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])],
    )  # fmt: skip
    inputs = qonnx_exec._matching(qonnx_exec._value_infos(repeated), ["a"], ("input", "output", "value_info"))
    assert [x.name for x in inputs] == ["a", "a", "a"]  # qonnx's filters keep every match
    from qonnx.core import onnx_exec
    from qonnx.transformation.infer_shapes import InferShapes

    model = ModelWrapper(finn_zoo_exports["concat"]).transform(InferShapes())
    x = np.random.default_rng(1).random(model.get_tensor_shape(model.graph.input[0].name), dtype=np.float32)
    feeds = {model.graph.input[0].name: x}
    plain = onnx_exec.execute_onnx(model, feeds, return_full_exec_context=True)
    with indexed_lookups():
        runs = [onnx_exec.execute_onnx(model, feeds, return_full_exec_context=True) for _ in range(2)]
        kept = len(qonnx_exec._sessions)
    assert kept == sum(1 for n in model.graph.node if n.domain in ("", "ai.onnx"))  # one per standard node
    assert all(np.array_equal(plain[k], run[k]) for run in runs for k in plain)
    assert not qonnx_exec._sessions and not qonnx_exec._value_info_tables  # dropped on exit


def _identities_graph() -> ModelWrapper:
    """Every identity qonnx's RemoveIdentityOps removes (Add/Sub of zeros, Mul/Div by ones, a zero
    Pad, Identity, Dropout), in chains, before a fork, after a fork and at the output, beside
    operations that are not identities (an Add of ones, a Mul by 2)."""
    f = TensorProto.FLOAT
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
    graph = oh.make_graph(
        nodes, "identities", [oh.make_tensor_value_info("x", f, [1, 4])], [oh.make_tensor_value_info("y", f, [1, 4])],
        initializer=[
            onnx.numpy_helper.from_array(np.ones(4, np.float32), "one"),
            onnx.numpy_helper.from_array(np.zeros(4, np.float32), "zero"),
            onnx.numpy_helper.from_array(np.full(4, 2, np.float32), "two"),
            onnx.numpy_helper.from_array(np.zeros(4, np.int64), "pads"),
        ],
    )  # fmt: skip
    return ModelWrapper(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)]))


def test_remove_identity_ops_in_one_sweep_gives_qonnxs_graph():
    from qonnx.core.onnx_exec import execute_onnx
    from qonnx.transformation.infer_shapes import InferShapes
    from qonnx.transformation.remove import RemoveIdentityOps

    model = _identities_graph().transform(InferShapes())
    x = {"x": np.random.default_rng(0).normal(size=(1, 4)).astype(np.float32)}
    theirs = model.transform(RemoveIdentityOps())
    with indexed_lookups():
        assert RemoveIdentityOps.apply.__wrapped__ is qonnx_index._remove_identity_ops
        ours = model.transform(RemoveIdentityOps())
    assert [n.name for n in ours.graph.node] == [n.name for n in theirs.graph.node] == ["relu", "add_one", "mul_two", "join"]
    assert ours.model.SerializeToString() == theirs.model.SerializeToString()
    np.testing.assert_array_equal(execute_onnx(ours, x)["y"], execute_onnx(model, x)["y"])


def _shape_values_graph() -> ModelWrapper:
    """Shapes that depend on initializer values (Reshape, Slice, Pad, Tile, Expand, Resize, Range,
    ConstantOfShape) beside weights larger than ``SHAPE_VALUES_MAX`` (a MatMul, a Conv) and a qonnx
    custom op (MultiThreshold), every value_info left to inference."""
    f = TensorProto.FLOAT
    big = qonnx_index.SHAPE_VALUES_MAX + 1

    def init(name, value):
        return onnx.numpy_helper.from_array(np.asarray(value), name)

    nodes = [
        oh.make_node("Conv", ["x", "conv_w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        oh.make_node("MultiThreshold", ["c", "thresholds"], ["t"], name="mt", domain="qonnx.custom_op.general"),
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
    ]
    rng = np.random.default_rng(0)
    graph = oh.make_graph(
        nodes, "shape_values", [oh.make_tensor_value_info("x", f, [1, 8, 6, 6])],
        [oh.make_tensor_value_info("y", f, None), oh.make_tensor_value_info("range", f, None),
         oh.make_tensor_value_info("filled", f, None)],
        initializer=[
            init("conv_w", rng.normal(size=(big // 72 + 1, 8, 3, 3)).astype(np.float32)),
            init("thresholds", np.zeros((big // 72 + 1, 3), np.float32)),
            init("shape", np.array([1, -1], np.int64)),
            init("fc_w", rng.normal(size=((big // 72 + 1) * 36, 40)).astype(np.float32)),
            init("starts", np.array([3], np.int64)), init("ends", np.array([30], np.int64)),
            init("axes", np.array([1], np.int64)), init("pads", np.array([0, 2, 0, 1], np.int64)),
            init("repeats", np.array([2, 1], np.int64)), init("expand", np.array([3, 1, 1], np.int64)),
            init("axes_u", np.array([0], np.int64)), init("scales", np.array([1, 1, 2, 0.5], np.float32)),
            init("start", np.float32(1)), init("limit", np.float32(7)), init("delta", np.float32(2)),
            init("shape_c", np.array([2, 5], np.int64)),
        ],
    )  # fmt: skip
    return ModelWrapper(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)]))


def test_infer_shapes_without_the_weights_gives_qonnxs_graph():
    from qonnx.transformation.infer_shapes import InferShapes

    model = _shape_values_graph()
    assert max(math.prod(t.dims) for t in model.graph.initializer) > qonnx_index.SHAPE_VALUES_MAX
    theirs = _seeded(model.transform, InferShapes())
    with indexed_lookups():
        assert InferShapes.apply.__wrapped__ is qonnx_index._infer_shapes
        ours = _seeded(model.transform, InferShapes())
    assert ours.model.SerializeToString() == theirs.model.SerializeToString()
    assert ours.get_tensor_shape("y") == [1, 3, 4, 15] and ours.get_tensor_shape("range") == [3]
    assert ours.get_tensor_shape("filled") == [2, 5] and ours.get_tensor_shape("t") == [1, 15, 6, 6]
    assert [n.domain for n in ours.graph.node if n.op_type == "MultiThreshold"] == ["qonnx.custom_op.general"]  # restored
    np.testing.assert_array_equal(ours.get_initializer("fc_w"), model.get_initializer("fc_w"))


def test_give_unique_parameter_tensors_gives_qonnxs_graph():
    """A weight shared by two nodes and twice by one (each repeat copied, its datatype with it), a
    weight used once, a dynamic input: the same graph as qonnx's pass, converting only the repeats."""
    from qonnx.core.datatype import DataType
    from qonnx.transformation.general import GiveUniqueParameterTensors

    f = TensorProto.FLOAT
    nodes = [
        oh.make_node("Mul", ["x", "w"], ["a"], name="first"),
        oh.make_node("Mul", ["a", "w"], ["b"], name="second"),
        oh.make_node("Add", ["w", "w"], ["ww"], name="twice"),
        oh.make_node("Add", ["b", "ww"], ["c"], name="join"),
        oh.make_node("Mul", ["c", "once"], ["y"], name="once"),
    ]
    graph = oh.make_graph(
        nodes, "shared", [oh.make_tensor_value_info("x", f, [1, 4])], [oh.make_tensor_value_info("y", f, [1, 4])],
        initializer=[
            onnx.numpy_helper.from_array(np.arange(4, dtype=np.float32), "w"),
            onnx.numpy_helper.from_array(np.full(4, 3, np.float32), "once"),
        ],
    )  # fmt: skip
    model = ModelWrapper(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)]))
    model.set_tensor_datatype("w", DataType["INT4"])
    theirs = _seeded(GiveUniqueParameterTensors().apply, copy.deepcopy(model))[0]
    with indexed_lookups():
        assert GiveUniqueParameterTensors.apply.__wrapped__ is qonnx_index._give_unique_parameter_tensors
        ours = _seeded(GiveUniqueParameterTensors().apply, copy.deepcopy(model))[0]
    assert ours.model.SerializeToString() == theirs.model.SerializeToString()
    renamed = [n.input for n in ours.graph.node][:3]
    assert len({renamed[0][1], renamed[1][1], renamed[2][0], renamed[2][1]}) == 4  # four uses, four tensors
    assert all(ours.get_tensor_datatype(name) == DataType["INT4"] for name in (renamed[1][1], *renamed[2]))


def test_infer_shapes_keeps_the_values_of_integer_initializers_of_any_size():
    """A shape input of more than ``SHAPE_VALUES_MAX`` values (absurd, but ONNX reads it): integer
    initializers keep their data, so the output's shape is inferred as qonnx infers it."""
    from qonnx.transformation.infer_shapes import InferShapes

    rank = qonnx_index.SHAPE_VALUES_MAX + 1
    graph = oh.make_graph(
        [oh.make_node("ConstantOfShape", ["shape"], ["y"], name="fill")], "big_shape", [],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[onnx.numpy_helper.from_array(np.ones(rank, np.int64), "shape")],
    )  # fmt: skip
    model = ModelWrapper(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)]))
    theirs = _seeded(model.transform, InferShapes())
    with indexed_lookups():
        ours = _seeded(model.transform, InferShapes())
    assert ours.get_tensor_shape("y") == [1] * rank
    assert ours.model.SerializeToString() == theirs.model.SerializeToString()


def test_repeated_fields_are_recognized_with_and_without_is_repeated():
    """protobuf before 6.31 has no ``FieldDescriptor.is_repeated``; its ``label`` says the same."""
    node, name = (onnx.GraphProto.DESCRIPTOR.fields_by_name[f] for f in ("node", "name"))
    assert qonnx_index._is_repeated(node) and not qonnx_index._is_repeated(name)

    class OldField:  # the descriptor's attributes that protobuf 4.25 - 6.30 have
        LABEL_REPEATED, LABEL_OPTIONAL = 3, 1

        def __init__(self, label):
            self.label = label

    assert qonnx_index._is_repeated(OldField(3)) and not qonnx_index._is_repeated(OldField(1))
