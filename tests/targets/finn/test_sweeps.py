"""``targets/finn/sweeps``: FINN's one-rewrite-per-call passes swept give FINN's graph byte for byte,
and the FINN target's front end gives the same graphs on ``FinnModelWrapper`` as on qonnx's plain
``ModelWrapper`` (where qonnx's and FINN's own passes run).

The sweeps (``FoldQuantWeights``, ``MoveTransposePastEltwise``, ``RoundAndClipThresholds``) against
FINN's passes on graphs made for them; then the front end (``front_end.prepare``'s cleanup, conversion,
clip absorption, streamlining, accumulating pools, hardware layers, the dataflow partition) run both
ways on the FINN-style zoo networks of ``_shared.finn_zoo``: the same bytes after every stage, the same
outputs; and every call the plain run made of a pass in ``FinnModelWrapper.EQUIVALENTS`` (FINN's passes
calling qonnx's included) repeated through both wrappers, on FINN's own intermediate graphs. Python's
``random`` (qonnx's and FINN's new tensor names) is seeded before each run and compared after."""

from __future__ import annotations

import copy
import random
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

pytest.importorskip(
    "finn.transformation.qonnx.convert_qonnx_to_finn",
    reason="finn-plus is not installed (pip install --no-deps finn-plus==1.6.1; see docs/export.md)",
)

from qonnx.core.datatype import DataType
from qonnx.core.modelwrapper import ModelWrapper
from qonnx.core.onnx_exec import execute_onnx

from quark.torch.extensions.brevitas._backend.targets.finn.sweeps import FinnModelWrapper

F = TensorProto.FLOAT
QONNX_OP = {"domain": "qonnx.custom_op.general"}


def _bytes(model) -> bytes:
    return model.model.SerializeToString()


def _difference(ours: bytes, theirs: bytes) -> str:
    """Where two serialized models first differ: the graph field and the item, both printed."""
    a, b = onnx.ModelProto.FromString(ours), onnx.ModelProto.FromString(theirs)
    for field in ("node", "initializer", "input", "output", "value_info", "quantization_annotation"):
        mine, finns = getattr(a.graph, field), getattr(b.graph, field)
        for index in range(max(len(mine), len(finns))):
            x = mine[index] if index < len(mine) else None
            y = finns[index] if index < len(finns) else None
            if x != y:
                return f"graph.{field}[{index}] ({len(mine)} vs {len(finns)} items):\n{x}\nFINN's:\n{y}"
    return "outside the graph's lists"


def _run(cls, proto_bytes: bytes, build, **transform_kwargs):
    """``build()`` through ``cls``'s ``transform`` on a fresh copy, seeded: (bytes, random state after,
    the exception)."""
    random.seed(0)
    np.random.seed(0)
    model = cls(onnx.ModelProto.FromString(proto_bytes), fix_missing_initializer_valueinfo=False)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = model.transform(build(), **transform_kwargs)
    except Exception as error:  # noqa: BLE001  FINN's exception is part of its answer
        return None, random.getstate(), (type(error), str(error))
    return _bytes(result), random.getstate(), None


def _assert_as_finn(proto_bytes: bytes, build, label: str = "", **transform_kwargs) -> bool:
    """FinnModelWrapper's sweep gives the bytes (and the random draws) of FINN's pass through qonnx's
    ModelWrapper; returns whether the pass changed the graph."""
    theirs = _run(ModelWrapper, proto_bytes, build, **transform_kwargs)
    ours = _run(FinnModelWrapper, proto_bytes, build, **transform_kwargs)
    what = f"{build.__name__} on {label or 'the graph'}"
    assert ours[2] == theirs[2], f"{what}: {ours[2]} vs FINN's {theirs[2]}"
    assert ours[0] == theirs[0], f"{what}: the graphs differ at {_difference(ours[0], theirs[0])}"
    assert ours[1] == theirs[1], f"{what}: drew another number of random names"
    return theirs[0] is not None and theirs[0] != proto_bytes


# -- the sweeps on graphs made for them -------------------------------------------------------------


def _thresholds() -> ModelWrapper:
    """MultiThresholds on signed, unsigned, fixed-point and float inputs (some thresholds beyond the
    input's range), and one on the output of another whose annotation is stale: FINN's first call
    rounds with the datatypes as they stand, infers them, and the rest are rounded with the new ones."""
    inputs = {"a": "INT4", "b": "UINT8", "c": "FLOAT32", "d": "FIXED<8,4>"}
    nodes, outputs = [], []
    for k, name in enumerate(inputs):
        nodes.append(helper.make_node("MultiThreshold", [name, f"t{k}"], [f"y{k}"], out_dtype="UINT2", **QONNX_OP))
        outputs.append(helper.make_tensor_value_info(f"y{k}", F, [1, 3]))
    nodes.append(helper.make_node("MultiThreshold", ["y0", "t4"], ["z"], out_dtype="UINT2", **QONNX_OP))
    outputs.append(helper.make_tensor_value_info("z", F, [1, 3]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, F, [1, 3]) for n in inputs], outputs)
    model = ModelWrapper(helper.make_model(graph))
    rng = np.random.default_rng(0)
    for k, (name, dtype) in enumerate(inputs.items()):
        model.set_tensor_datatype(name, DataType[dtype])
        model.set_initializer(f"t{k}", (rng.normal(size=(3, 3)) * 200).astype(np.float32))
    model.set_initializer("t4", np.array([[-9.5, 0.5, 2.5]] * 3, np.float32))
    model.set_tensor_datatype("y0", DataType["INT4"])  # stale: the MultiThreshold gives UINT2
    return model


def test_thresholds_rounded_in_one_sweep_as_finns_pass_rounds_them():
    from finn.transformation.streamline.round_thresholds import RoundAndClipThresholds

    model = _thresholds()
    for cleanup in (True, False):
        assert _assert_as_finn(_bytes(model), RoundAndClipThresholds, "thresholds", cleanup=cleanup)
    ours = FinnModelWrapper(_bytes(model)).transform(RoundAndClipThresholds())
    assert not np.array_equal(ours.get_initializer("t0"), model.get_initializer("t0"))  # rounded
    np.testing.assert_array_equal(ours.get_initializer("t2"), model.get_initializer("t2"))  # float input
    np.testing.assert_array_equal(ours.get_initializer("t4"), [[0, 1, 3]] * 3)  # clipped as UINT2 (not INT4)


def _transposes() -> ModelWrapper:
    """Transposes before chains of Add / Mul with constants (channel-wise, scalar), in two branches."""
    nodes, outputs = [], []
    for branch in range(2):
        x, prev = f"r{branch}", f"t{branch}"  # the pass drops its input's shape: not a graph input's
        nodes.append(helper.make_node("Relu", [f"x{branch}"], [x]))
        nodes.append(helper.make_node("Transpose", [x], [prev], perm=[0, 2, 3, 1]))
        for k, op in enumerate(("Mul", "Add", "Mul")[: 2 + branch]):
            out = f"y{branch}_{k}"
            nodes.append(helper.make_node(op, [prev, f"c{branch}_{k}"], [out]))
            prev = out
        outputs.append(helper.make_tensor_value_info(prev, F, [1, 4, 4, 3]))
    inputs = [helper.make_tensor_value_info(f"x{b}", F, [1, 3, 4, 4]) for b in range(2)]
    model = ModelWrapper(helper.make_model(helper.make_graph(nodes, "g", inputs, outputs)))
    rng = np.random.default_rng(0)
    for branch in range(2):
        for k in range(2 + branch):
            shape = (1, 1, 1, 3) if k != 1 else (1,)  # channel-wise (NHWC) and scalar constants
            model.set_initializer(f"c{branch}_{k}", rng.normal(size=shape).astype(np.float32))
    from qonnx.transformation.infer_shapes import InferShapes

    return model.transform(InferShapes())


def test_transposes_past_eltwise_in_one_sweep_as_finns_pass():
    from finn.transformation.streamline.reorder import MoveTransposePastEltwise

    model = _transposes()
    for cleanup in (True, False):
        assert _assert_as_finn(_bytes(model), MoveTransposePastEltwise, "transposes", cleanup=cleanup)
    ours = FinnModelWrapper(_bytes(model)).transform(MoveTransposePastEltwise())
    outputs = {vi.name for vi in ours.graph.output}
    assert all(t.output[0] in outputs for t in ours.get_nodes_by_op_type("Transpose"))  # moved to the ends
    rng = np.random.default_rng(1)
    inputs = {f"x{b}": rng.normal(size=(1, 3, 4, 4)).astype(np.float32) for b in range(2)}
    expected, got = execute_onnx(model, inputs), execute_onnx(ours, inputs)
    assert all(np.allclose(got[k], v, rtol=1e-6) for k, v in expected.items())


def _quant_weights() -> ModelWrapper:
    """Constant quantizers before MatMul / Add (scaled: FINN moves the scale behind them, and before
    the Add's other input), one of unit scale, and a per-channel one before a Conv."""
    from qonnx.transformation.infer_datatypes import InferDataTypes
    from qonnx.transformation.infer_shapes import InferShapes

    rng = np.random.default_rng(0)
    nodes, prev, constants = [], "x", {}
    for k, (op, scale) in enumerate([("MatMul", 0.05), ("Add", 0.25), ("MatMul", 1.0), ("MatMul", 0.125)]):
        shape = (4, 4) if op == "MatMul" else (1, 4)
        constants.update({f"w{k}": rng.normal(size=shape) * 4 * scale, f"s{k}": scale, f"z{k}": 0.0, f"b{k}": 4.0})
        quant = helper.make_node("Quant", [f"w{k}", f"s{k}", f"z{k}", f"b{k}"], [f"q{k}"], signed=1, narrow=0,
                                 rounding_mode="ROUND", **QONNX_OP)  # fmt: skip
        nodes += [quant, helper.make_node(op, [prev, f"q{k}"], [f"y{k}"])]
        prev = f"y{k}"
    nodes.append(helper.make_node("Reshape", [prev, "to_image"], ["image"]))
    nodes.append(helper.make_node("Quant", ["cw", "cs", "z0", "b0"], ["cq"], signed=1, narrow=0, rounding_mode="ROUND", **QONNX_OP))
    nodes.append(helper.make_node("Conv", ["image", "cq"], ["y"], kernel_shape=[1, 1]))
    constants.update({"to_image": np.array([2, 4, 1, 1]), "cw": rng.normal(size=(3, 4, 1, 1)) * 2, "cs": np.full((3, 1, 1, 1), 0.5)})
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", F, [2, 4])], [helper.make_tensor_value_info("y", F, [2, 3, 1, 1])]
    )
    model = ModelWrapper(helper.make_model(graph))
    for name, value in constants.items():
        model.set_initializer(name, np.asarray(value, dtype=np.int64 if name == "to_image" else np.float32))
    return model.transform(InferShapes()).transform(InferDataTypes())


def _debug_marker() -> ModelWrapper:
    """FINN's pass removes a DebugMarker behind a weight quantizer by rebuilding the model (a deep copy
    through ``transform``): the sweep goes on with that model and ends where FINN's does."""
    from qonnx.transformation.infer_shapes import InferShapes

    nodes = [
        helper.make_node("Quant", ["w", "s", "z", "b"], ["q"], signed=1, narrow=0, rounding_mode="ROUND", **QONNX_OP),
        helper.make_node("DebugMarker", ["q"], ["qd"], export_debug_name="dbg", **QONNX_OP),
        helper.make_node("Transpose", ["qd"], ["qt"], perm=[1, 0]),
        helper.make_node("MatMul", ["x", "qt"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", F, [2, 4])], [helper.make_tensor_value_info("y", F, [2, 3])]
    )
    model = ModelWrapper(helper.make_model(graph))
    rng = np.random.default_rng(0)
    for name, value in {"w": rng.normal(size=(3, 4)), "s": 0.25, "z": 0.0, "b": 4.0}.items():
        model.set_initializer(name, np.asarray(value, dtype=np.float32))
    return model.transform(InferShapes())


@pytest.mark.parametrize("build", [_quant_weights, _debug_marker])
def test_quant_weights_folded_in_one_sweep_as_finns_pass(build):
    from finn.transformation.qonnx.fold_quant_weights import FoldQuantWeights

    model = build()
    for cleanup in (True, False):
        assert _assert_as_finn(_bytes(model), FoldQuantWeights, build.__name__, cleanup=cleanup)
    ours = FinnModelWrapper(_bytes(model)).transform(FoldQuantWeights())
    assert not ours.get_nodes_by_op_type("Quant") and type(ours) is FinnModelWrapper
    x = {"x": np.random.default_rng(1).normal(size=(2, 4)).astype(np.float32)}
    name = model.graph.output[0].name
    np.testing.assert_allclose(execute_onnx(ours, x)[name], execute_onnx(model, x)[name], rtol=1e-5, atol=1e-5)


# -- FINN's front end, plain and on FinnModelWrapper --------------------------------------------------

#: cheapest first: each network is exported and run plainly when a test first needs it
NETWORKS = ["mobilenet", "concat", "resnet"]


class _Exports(dict):
    """The repo's FINN-style networks (depthwise, concat, residual), exported as QONNX when first asked."""

    def __missing__(self, name: str) -> onnx.ModelProto:
        import tempfile
        from pathlib import Path

        from _shared import finn_zoo as zoo

        from quark.torch.extensions.brevitas.api import ModelExporter

        if not hasattr(self, "digits"):
            self.digits = zoo.digits_batches()
        train, test = self.digits
        with tempfile.TemporaryDirectory() as directory, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            path = Path(directory) / f"{name}.qonnx.onnx"
            ModelExporter(path).export_qonnx_model(zoo.calibrated(name, train[:2]), test[:2], verify=False)
            self[name] = onnx.load(path)
        return self[name]


@pytest.fixture(scope="module")
def finn_zoo_exports() -> dict[str, onnx.ModelProto]:
    return _Exports()


def _stages(work_dir):
    """The front end after ``prepare``: (name, step), as the build steps run them."""
    from quark.torch.extensions.brevitas._backend.targets.finn import front_end
    from quark.torch.extensions.brevitas._backend.targets.finn.build_config import MAX_MULTITHRESHOLD_BITS

    def partition(model):
        import pathlib

        partition = front_end.create_dataflow_partition(model, pathlib.Path(work_dir))
        parent = onnx.load(str(pathlib.Path(work_dir) / front_end.PARENT))
        return partition, parent.SerializeToString()

    return [
        ("ConvertQONNXtoFINN", lambda m: front_end.to_finn(m, MAX_MULTITHRESHOLD_BITS)),
        ("absorb clips", front_end.absorb_clips),
        ("streamline", front_end.streamline),
        ("accumulating pools", front_end.accumulating_pools),
        ("convert to hardware layers", front_end.convert_to_hw),
        ("dataflow partition", partition),
    ]


def _front_end(proto: onnx.ModelProto, fast: bool, work_dir) -> tuple[list, np.ndarray]:
    """The front end on ``proto``: ``front_end.prepare`` on a FinnModelWrapper (fast), or its steps with
    qonnx's own cleanup on a plain ModelWrapper; the graph's bytes after each stage, and the partition
    parent's, and the outputs of the last graph before the partition on an input."""
    from qonnx.util.cleanup import cleanup_model as qonnx_cleanup

    from quark.torch.extensions.brevitas._backend.qonnx_passes.execution import execute
    from quark.torch.extensions.brevitas._backend.targets.finn import front_end
    from quark.torch.extensions.brevitas._backend.targets.finn.origins import tag_origins

    random.seed(0)
    np.random.seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if fast:
            model = front_end.prepare(FinnModelWrapper(copy.deepcopy(proto)))
        else:
            model = ModelWrapper(copy.deepcopy(proto))
            tag_origins(model)
            model = front_end.batch_one(qonnx_cleanup(model))
        graphs = [("prepare", _bytes(model), type(model))]
        for name, step in _stages(work_dir):
            if name == "dataflow partition":
                x = np.random.default_rng(0).random(model.get_tensor_shape(model.graph.input[0].name), dtype=np.float32)
                outputs = execute(model, [x])[0] if fast else execute_onnx(model, {model.graph.input[0].name: x})[model.graph.output[0].name]
                model, parent = step(model)
                graphs.append(("dataflow parent", parent, None))
            else:
                model = step(model)
            graphs.append((name, _bytes(model), type(model)))
    return graphs, outputs


class _PlainRuns(dict):
    """The plain front end on a network when first asked, with every call of a pass in
    FinnModelWrapper.EQUIVALENTS it made recorded (ModelWrapper.transform wrapped for the time of the
    run): (its transformation, the graph, transform's flags, the random states)."""

    def __init__(self, exports, tmp_path_factory):
        super().__init__()
        self.exports, self.tmp_path_factory = exports, tmp_path_factory

    def __missing__(self, name: str):
        calls: list = []
        original = ModelWrapper.transform

        def recording(model, transformation, make_deepcopy=True, cleanup=True, *args, **kwargs):
            if type(transformation) in FinnModelWrapper.EQUIVALENTS and not args and not kwargs:
                state = (random.getstate(), np.random.get_state())
                calls.append((copy.deepcopy(transformation), _bytes(model), make_deepcopy, cleanup, state))
            return original(model, transformation, make_deepcopy, cleanup, *args, **kwargs)

        work_dir = self.tmp_path_factory.mktemp(f"{name}-partitions")
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(ModelWrapper, "transform", recording)
            graphs, outputs = _front_end(self.exports[name], fast=False, work_dir=work_dir)
        self[name] = (graphs, outputs, calls, work_dir)
        return self[name]


@pytest.fixture(scope="module")
def plain_runs(finn_zoo_exports, tmp_path_factory):
    return _PlainRuns(finn_zoo_exports, tmp_path_factory)


@pytest.mark.parametrize("name", NETWORKS)
def test_finn_front_end_gives_the_same_graphs_on_finn_model_wrapper(finn_zoo_exports, plain_runs, name):
    """prepare (qonnx's cleanup, batch 1), ConvertQONNXtoFINN, clip absorption, Streamline with the
    residual passes and LowerConvsToMatMul, accumulating pools, the convert_to_hw Infer* passes and
    CreateDataflowPartition: the same bytes after every stage and the same outputs, the graphs kept as
    FinnModelWrapper throughout."""
    plain, outputs, _, work_dir = plain_runs[name]
    fast, fast_outputs = _front_end(finn_zoo_exports[name], fast=True, work_dir=work_dir)
    assert [stage for stage, _, _ in fast] == [stage for stage, _, _ in plain]
    for (stage, ours, cls), (_, theirs, _) in zip(fast, plain):
        assert ours == theirs, f"{name}, {stage}: the graphs differ at {_difference(ours, theirs)}"
        assert cls in (FinnModelWrapper, None), f"{name}, {stage}: {cls.__name__}"
    np.testing.assert_array_equal(fast_outputs, outputs)


ROWS = sorted(FinnModelWrapper.EQUIVALENTS, key=lambda t: t.__name__)


@pytest.mark.parametrize("name", NETWORKS)
@pytest.mark.parametrize("transformation", ROWS, ids=lambda t: t.__name__)
def test_each_equivalent_gives_finns_graph_on_finns_graphs(plain_runs, transformation, name):
    """Every call the plain front end made of the row's pass on the network (FINN's passes calling
    qonnx's included; each graph once), repeated from the same random state through both wrappers, and
    the pass on the graph after every stage: the same bytes and random draws. FINN's two passes the front end calls
    through ``transform`` change some of these graphs (the layout group calls MoveTransposePastEltwise's
    ``apply`` itself: its sweep is checked above; that each of qonnx's passes changes some real graph,
    tests/export/test_qonnx_passes.py checks)."""
    seen, changed = set(), False
    graphs, _, calls, _ = plain_runs[name]
    for instance, proto_bytes, make_deepcopy, cleanup, (state, np_state) in calls:
        if type(instance) is not transformation or (proto_bytes, make_deepcopy, cleanup) in seen:
            continue
        seen.add((proto_bytes, make_deepcopy, cleanup))
        outcomes = []
        for cls in (ModelWrapper, FinnModelWrapper):
            random.setstate(state)
            np.random.set_state(np_state)
            model = cls(onnx.ModelProto.FromString(proto_bytes), fix_missing_initializer_valueinfo=False)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = model.transform(copy.deepcopy(instance), make_deepcopy=make_deepcopy, cleanup=cleanup)
            outcomes.append((_bytes(result), random.getstate()))
        assert outcomes[1][0] == outcomes[0][0], _difference(outcomes[1][0], outcomes[0][0])
        assert outcomes[1][1] == outcomes[0][1], "another number of random draws"
        changed = changed or outcomes[0][0] != proto_bytes
    for stage, proto_bytes, _ in graphs:
        if stage != "dataflow parent":
            changed = _assert_as_finn(proto_bytes, transformation, f"{name} after {stage}") or changed
    if transformation.__name__ in ("FoldQuantWeights", "RoundAndClipThresholds"):
        assert changed
