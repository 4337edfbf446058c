"""FINN's one-rewrite-per-call passes swept to their fixed point in one call, and the ``ModelWrapper``
the FINN target's steps run FINN on: :class:`FinnModelWrapper`, the package's
:class:`~...qonnx_passes.wrapper.FastModelWrapper` with these passes among its equivalents.

FINN's ``FoldQuantWeights`` and ``MoveTransposePastEltwise`` make one rewrite per ``apply``, then infer
every shape of the graph (the first also builds an execution context holding every tensor), and
``transform`` calls them again: DenseNet-121's conversion spent 136 s in the first, EfficientNet-B0's
layout group moved 98 transposes a second each with the second. FINN's ``RoundAndClipThresholds``
rounds one MultiThreshold per ``apply`` and re-infers every datatype in a deep copy of the model
(DenseNet-121: 722 of them, 300 of its 560 s of streamlining). Each sweep below gives the graph FINN's
pass gives (the tests compare the bytes).

FINN's moves of identical operations past a join (``MoveIdenticalOpPastJoinOp``: transposes, scales
and biases past concatenations, additions, multiplications) look every input of every join up with
``find_producer``, a scan of the graph, on every call, mostly to find that nothing moves: DenseNet-121's
58 concatenations of up to 25 inputs each, in every round of the layout and residual groups.
:class:`JoinMoveWhereMovable` looks the producers up once, in a dict, and calls FINN's pass only when
some join passes the tests FINN's pass makes before it changes anything; :class:`ForkMoveWhereMovable`
does the same for its moves past forks (``MoveOpPastFork``: a consumer scan per node).
"""

from __future__ import annotations

import numpy as np
from finn.transformation.qonnx.fold_quant_weights import FoldQuantWeights
from finn.transformation.streamline import reorder
from finn.transformation.streamline.reorder import MoveTransposePastEltwise
from finn.transformation.streamline.round_thresholds import RoundAndClipThresholds
from qonnx.core.datatype import DataType
from qonnx.transformation.base import Transformation
from qonnx.transformation.infer_shapes import InferShapes

from quark.torch.extensions.brevitas._backend.qonnx_passes.wrapper import QONNX_EQUIVALENTS, FastModelWrapper


class _Sweep(FastModelWrapper):
    """The model while a one-rewrite-per-call FINN pass is swept. The pass's ``transform(InferShapes())``
    after each rewrite runs qonnx's cleanup in place (its ``SortGraph`` orders the nodes the next
    rewrite scans, and the graph FINN's pass leaves), ONNX's shape inference left to the end of the
    sweep (between rewrites it only restores shapes the rewrite deleted, which nothing in the pass
    reads back); an execution context reads a tensor from the initializers when it is first used
    (qonnx's allocates every tensor of the graph)."""

    def transform(self, transformation, make_deepcopy=True, cleanup=True, *args, **kwargs):
        if type(transformation) is InferShapes:
            transformation, make_deepcopy = _Unchanged(), False
        return super().transform(transformation, make_deepcopy, cleanup, *args, **kwargs)

    def make_empty_exec_context(self):
        return _InitializerContext(self)


class _Unchanged(Transformation):
    """Nothing: what ``transform`` runs of the pass's shape inference during a sweep (then the cleanup)."""

    def apply(self, model):
        return model, False


class _InitializerContext(dict):
    """An execution context that reads a tensor it was not given from the model's initializers."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def __missing__(self, name):
        value = self.model.get_initializer(name)
        if value is None:
            raise KeyError(f"{name} is neither an initializer nor computed in this sweep")
        return value


def in_one_sweep(apply, model):
    """FINN's one-rewrite-per-call ``apply`` called on ``model`` (as :class:`_Sweep`, the same graph)
    until it changes nothing; shapes inferred once at the end. A pass that returns another model than
    it was given (a rewrite through ``transform``) ends the sweep there: the caller's loop calls it
    again, as it calls FINN's pass."""
    sweep, changed_any = _Sweep.of(model), False
    while True:
        result, changed = apply(sweep)
        changed_any = changed_any or changed
        if not changed or result is not sweep:
            break
    return FinnModelWrapper.of(result).transform(InferShapes()), changed_any


class FoldQuantWeightsInOneSweep(FoldQuantWeights):
    """FINN's ``FoldQuantWeights``, every constant quantizer folded in one call."""

    def apply(self, model):
        return in_one_sweep(super().apply, model)


class TransposesPastEltwiseInOneSweep(MoveTransposePastEltwise):
    """FINN's ``MoveTransposePastEltwise``, every transpose moved in one call."""

    def apply(self, model):
        return in_one_sweep(super().apply, model)


class RoundThresholdsInOneSweep(RoundAndClipThresholds):
    """FINN's ``RoundAndClipThresholds``. FINN's pass goes through the thresholding nodes in order,
    rounds and annotates each, and stops after the first it changes, to infer the datatypes again. Here
    FINN's pass runs once (with the datatypes as they stand), then the MultiThresholds on integer inputs
    that follow are rounded and annotated in one sweep, in node order, with FINN's formula (rounding
    thresholds changes no datatype another node's rounding reads: a MultiThreshold's output type is its
    ``out_dtype``), up to the first node the sweep leaves to FINN (a fixed-point input, a hardware layer
    with thresholds); then FINN's pass again, which goes on from there or, finding nothing more to
    round, sets every threshold once more, in node order, as its last call does."""

    def apply(self, model):
        model, changed = super().apply(model)
        if not changed:
            return model, False
        for node in model.graph.node:
            if node.op_type.startswith(("Thresholding", "MVAU", "VVAU")):
                break
            if node.op_type != "MultiThreshold":
                continue
            thresholds = model.get_initializer(node.input[1])
            dtype = model.get_tensor_datatype(node.input[0])
            if thresholds is None or not (dtype.is_integer() or dtype.is_fixed_point()):
                continue
            if not dtype.is_integer():
                break
            rounded = np.clip(np.ceil(thresholds), dtype.min(), dtype.max() + 1).astype(np.float32)
            model.set_initializer(node.input[1], rounded)
            if dtype in {"INT64", "UINT64"}:
                tdt = dtype
            elif dtype.signed():
                tdt = DataType.get_smallest_possible(-(dtype.max() + 1) - 1)
            else:
                tdt = DataType.get_smallest_possible(dtype.max() + 1)
            model.set_tensor_datatype(node.input[1], tdt)
        return super().apply(model)


def _lookups(model) -> tuple[dict[str, object], dict[str, list]]:
    """tensor -> its producer (the first node writing it, as qonnx's ``find_producer`` answers) and
    tensor -> its consumers (in node order, a node once per input it reads it at, as ``find_consumers``)."""
    producer: dict[str, object] = {}
    consumers: dict[str, list] = {}
    for node in model.graph.node:
        for tensor in node.output:
            producer.setdefault(tensor, node)
        for tensor in node.input:
            consumers.setdefault(tensor, []).append(node)
    return producer, consumers


class JoinMoveWhereMovable(Transformation):
    """FINN's ``move`` (a ``MoveIdenticalOpPastJoinOp``), called only where it would change the graph:
    some join node (of ``move``'s join types, with more than one producer, or one with its first input
    a graph input) whose first producer is of ``move``'s operation types and whose producers ``move``
    calls identical; nothing else changes the graph in FINN's ``apply``. Producers from :func:`_lookups`."""

    def __init__(self, move: reorder.MoveIdenticalOpPastJoinOp):
        super().__init__()
        self.move = move

    def apply(self, model):
        if any(self._movable(model, node, producers) for node, producers in self._joins(model)):
            return self.move.apply(model)
        return model, False

    def _joins(self, model):
        producer, _ = _lookups(model)
        graph_inputs = {vi.name for vi in model.graph.input}
        for node in model.graph.node:
            if node.op_type not in self.move.join_node_op:
                continue
            producers = [producer.get(tensor) for tensor in node.input]
            found = sum(p is not None for p in producers)
            if found > (0 if node.input[0] in graph_inputs else 1):
                yield node, producers

    def _movable(self, model, node, producers) -> bool:
        if None in producers:  # FINN's pass reads each producer's op_type and fails: let it say so
            return True
        return producers[0].op_type in self.move.ops_to_move and bool(self.move.are_producers_identical(model, producers))


class ForkMoveWhereMovable(Transformation):
    """FINN's ``move`` (a ``MoveOpPastFork``), called only where it would change the graph (or fail
    as it fails): some node of ``move``'s operation types that is a fork and not a join, as qonnx's
    ``is_fork_node`` / ``is_join_node`` say, whose consumers are not all one node; otherwise only the
    shape inference FINN's pass ends with. Producers and consumers from :func:`_lookups`."""

    def __init__(self, move: reorder.MoveOpPastFork):
        super().__init__()
        self.move = move

    def apply(self, model):
        producer, consumers = _lookups(model)
        graph_inputs = {vi.name for vi in model.graph.input}
        graph_outputs = {vi.name for vi in model.graph.output}
        for node in model.graph.node:
            if node.op_type not in self.move.ops_to_move:
                continue
            successors = sum(len(consumers.get(t, ())) for t in node.output)
            if successors <= (0 if node.output[0] in graph_outputs else 1):
                continue  # not a fork
            predecessors = sum(producer.get(t) is not None for t in node.input)
            if predecessors > (0 if node.input[0] in graph_inputs else 1):
                continue  # a join
            first = consumers.get(node.output[0], [])
            if len(first) < 2 or any(c != first[0] for c in first[1:]):
                return self.move.apply(model)
        return model.transform(InferShapes()), False  # what FINN's pass ends with, moved or not


#: FINN's moves past forks that the FINN target's streamlining runs
FORK_MOVES = (reorder.MoveAddPastFork, reorder.MoveMulPastFork, reorder.MoveLinearPastFork, reorder.MoveTransposePastFork)

#: FINN's moves past joins that the FINN target's streamlining runs
JOIN_MOVES = (
    reorder.MoveTransposePastJoinAdd,
    reorder.MoveTransposePastJoinMul,
    reorder.MoveTransposePastJoinConcat,
    reorder.MoveMulPastJoinAdd,
    reorder.MoveMulPastJoinMul,
    reorder.MoveAddPastJoinAdd,
    reorder.MoveAffinePastJoinConcat,
    reorder.MoveMulPastJoinConcat,
    reorder.MoveAddPastJoinConcat,
)


class FinnModelWrapper(FastModelWrapper):
    """The ``ModelWrapper`` the FINN target's steps hand to FINN: qonnx's equivalents and FINN's
    sweeps (its ``EQUIVALENTS``)."""

    EQUIVALENTS = {
        **QONNX_EQUIVALENTS,
        FoldQuantWeights: lambda t: FoldQuantWeightsInOneSweep(),
        MoveTransposePastEltwise: lambda t: TransposesPastEltwiseInOneSweep(),
        RoundAndClipThresholds: lambda t: RoundThresholdsInOneSweep(),
        **dict.fromkeys(JOIN_MOVES, JoinMoveWhereMovable),
        **dict.fromkeys(FORK_MOVES, ForkMoveWhereMovable),
    }
