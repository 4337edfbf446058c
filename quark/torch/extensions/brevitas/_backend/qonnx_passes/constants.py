"""qonnx 1.0.0's constant folding and ``cleanup_model`` without re-inferring every shape per node.

qonnx's ``FoldConstants`` folds one node per ``apply``, then infers every shape of the graph again
and cleans it up (``transform(InferShapes())``), and ``transform`` calls it again from the first node
(qonnx issue #104: it stops after each change so as not to edit the node list it iterates). A Brevitas
QONNX export computes its scales, zero points and bias quantizers in constant subgraphs, so the
folding is quadratic in the graph: DenseNet-121's export spent minutes in it before its verification
could execute a node.
"""

from __future__ import annotations

import heapq

from qonnx.transformation import fold_constants
from qonnx.transformation.base import Transformation

from quark.torch.extensions.brevitas._backend.qonnx_passes import tidy
from quark.torch.extensions.brevitas._backend.qonnx_passes.execution import Executor, Sessions, _Context
from quark.torch.extensions.brevitas._backend.qonnx_passes.indexed import IndexedModel

#: the quantizers qonnx's cleanup keeps (its ``preserve_qnt_ops=True``)
PRESERVED = ("Quant", "BipolarQuant", "QuantizeLinear", "DequantizeLinear")


class FoldConstantsInOnePass(Transformation):
    """qonnx's ``FoldConstants``: a node with only constant inputs (or a ``Shape`` of a tensor that has
    a value info, or no input) becomes an initializer holding its first output, except
    ``exclude_op_types``; qonnx's steps in qonnx's order, in one call.

    qonnx folds the first such node, infers every shape and cleans the graph up (``transform(
    InferShapes())``), and starts again from the first node of the graph sorted again. The first step
    is done so here; after it, where every computed tensor has a value info (inference then adds none
    later, so their order stays), the cleanup of each step follows the tensors it touched
    (:class:`~.tidy.NodeOrder` keeps SortGraph's order; the new initializer's readers get it last among
    commutative inputs, and a copy for every use but the first, in node order), and shapes are inferred
    before a ``Shape`` of a computed tensor (its dims may have been refined) and at the end. Otherwise
    every step is qonnx's step. A graph where qonnx's lookups raise or depend on the node order
    (:func:`~.tidy.well_formed`) is folded by qonnx's pass."""

    def __init__(self, exclude_op_types=PRESERVED):
        super().__init__()
        self.exclude_op_types = tuple(exclude_op_types)

    def apply(self, model):
        if not tidy.well_formed(IndexedModel(model)):
            return fold_constants.FoldConstants(list(self.exclude_op_types)).apply(model)
        folding = _Folding(model, self.exclude_op_types, Sessions())
        if not folding.step():
            return model, False
        if tidy.blind(IndexedModel(folding.model)):
            while folding.step():
                pass
        else:
            folding.run()
        return folding.model, False


class _Folding:
    """qonnx's folding steps on ``model`` (see FoldConstantsInOnePass); the model in ``self.model``."""

    def __init__(self, model, exclude_op_types: tuple[str, ...], sessions: Sessions):
        self.exclude, self.sessions = exclude_op_types, sessions
        self._restart(model)

    def _restart(self, model) -> None:
        """The tables built again on ``model``."""
        self.model = model
        self.executor = Executor(model, checked=False, sessions=self.sessions)
        self.view, self.context = self.executor.view, _Context(self.executor.view)
        self.unshaped = False  # whether a fold since the last shape inference may have changed shapes

    def foldable(self, node) -> bool:
        if node.op_type in self.exclude:
            return False
        if all(self.view.is_initializer(name) for name in node.input):
            return True
        return node.op_type == "Shape" and self.view.get_tensor_shape(node.input[0]) is not None

    def fold(self, node) -> None:
        """qonnx's fold of ``node``: its inputs' value infos, its output as an initializer."""
        for name in node.input:
            self.view.get_tensor_shape(name, fix_missing_init_shape=True)
        self.executor.execute_node(node, self.context, self.model.model.opset_import[0].version)
        self.view.set_initializer(node.output[0], self.context[node.output[0]])
        self.unshaped = True

    def step(self) -> bool:
        """qonnx's ``apply``: the first foldable node folded, shapes inferred, the graph cleaned up."""
        node = next((node for node in self.model.graph.node if self.foldable(node)), None)
        if node is None:
            return False
        self.fold(node)
        self.model.graph.node.remove(node)
        self._restart(tidy.clean(tidy.infer_shapes(self.model)))
        return True

    # -- the steps after the first, kept up to date -------------------------------------------------

    def _resort(self) -> None:
        """The order and the queue of foldable nodes built on the graph (sorted: SortGraph's order)."""
        order = self.order = tidy.NodeOrder(self.model.graph)
        self.inputs = {vi.name for vi in self.model.graph.input}
        self.queue = [(order.key(i), i) for i in order.order() if self.foldable(order.nodes[i])]
        heapq.heapify(self.queue)

    def _reinfer(self) -> None:
        self.order.write(self.model.graph)
        self._restart(tidy.infer_shapes(self.model))
        self._resort()

    def _next(self) -> int | None:
        """The first foldable node of the graph sorted (shapes inferred first if it is a Shape of a
        computed tensor)."""
        while self.queue:
            key, index = heapq.heappop(self.queue)
            node = self.order.nodes[index]
            if not (self.order.alive[index] and key == self.order.key(index) and self.foldable(node)):
                continue
            if node.op_type == "Shape" and self.unshaped and not self.view.is_initializer(node.input[0]):
                self._reinfer()
                continue
            return index
        return None

    def run(self) -> None:
        self._resort()
        while (index := self._next()) is not None:
            order = self.order
            node = order.nodes[index]
            self.fold(node)
            order.remove(index)
            name = node.output[0]
            order.add_source(name)
            moved = order.settle()
            if name in self.inputs:  # a computed graph input: qonnx's RemoveStaticGraphInputs moves it
                order.write(self.model.graph)
                tidy.RemoveStaticGraphInputs().apply(self.model)
                self._resort()
                order, moved = self.order, []
            readers = sorted(set(order.readers[name]), key=order.key)
            for reader in readers:
                tidy.sort_commutative_inputs(order.nodes[reader], self.view.inits)
            tidy.give_copies(self.view, order, name)
            for reader in (*readers, *moved):
                if order.alive[reader] and self.foldable(order.nodes[reader]):
                    heapq.heappush(self.queue, (order.key(reader), reader))
        self.order.write(self.model.graph)
        if self.unshaped:
            self.model = tidy.infer_shapes(self.model)
        self.model = tidy.clean(self.model)
