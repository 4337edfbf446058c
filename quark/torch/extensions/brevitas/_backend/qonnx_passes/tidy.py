"""qonnx 1.0.0's tidying passes in linear time, each giving the graph qonnx's gives (the tests compare
the bytes). ``ModelWrapper.transform`` runs five of them after every transformation (its
``cleanup``), so on deep graphs their quadratic lookups were most of FINN's front-end time.

Each is a qonnx ``Transformation`` that reaches its fixed point in one ``apply`` (qonnx's ``transform``
repeats an ``apply`` until it reports no change; these report the change of that fixed point only
where qonnx's last call would). :class:`NodeOrder` follows the order qonnx's ``SortGraph`` gives
between the steps of the passes that remove one node at a time and clean up after each
(``RemoveIdentityOps`` here, ``FoldConstants`` in :mod:`.constants`).
"""

from __future__ import annotations

import functools
import heapq
import warnings
from collections import Counter, defaultdict

import numpy as np
from qonnx.transformation.base import Transformation
from qonnx.transformation.double_to_single_float import DoubleToSingleFloat
from qonnx.util.basic import get_by_name

from quark.torch.extensions.brevitas._backend.qonnx_passes.indexed import IndexedModel


class RemoveUnusedTensors(Transformation):
    """qonnx's ``RemoveUnusedTensors``: initializers, value infos and annotations of tensors no node
    reads or writes are removed (qonnx removes while iterating, skipping the item after each one it
    removes, and is called again until nothing is left: the same items go, the rest keep their order)."""

    def apply(self, model):
        graph = model.graph
        used = {name for node in graph.node for name in (*node.input, *node.output)}
        for container, key in (("initializer", "name"), ("value_info", "name"), ("quantization_annotation", "tensor_name")):
            items = getattr(graph, container)
            for index in reversed(range(len(items))):
                if getattr(items[index], key) not in used:
                    del items[index]
        return model, False


class RemoveStaticGraphInputs(Transformation):
    """qonnx's ``RemoveStaticGraphInputs``: a graph input that has an initializer moves to value_info,
    in qonnx's order: qonnx removes while iterating, so each pass moves every other input of a run
    of static ones (the one after each moved one is skipped), and is called again until none is left."""

    def apply(self, model):
        graph = model.graph
        initializers = {tensor.name for tensor in graph.initializer}
        inputs, moved = list(graph.input), []
        while any(vi.name in initializers for vi in inputs):
            kept, index = [], 0
            while index < len(inputs):
                if inputs[index].name in initializers:
                    moved.append(inputs[index])
                    kept += inputs[index + 1 : index + 2]  # skipped by qonnx's iteration this pass
                    index += 2
                else:
                    kept.append(inputs[index])
                    index += 1
            inputs = kept
        for vi in moved:
            graph.value_info.append(vi)
            graph.input.remove(vi)
        return model, False


class SortCommutativeInputsInitializerLast(Transformation):
    """qonnx's ``SortCommutativeInputsInitializerLast``: the inputs of Add, Mul, And, Or, Xor and Sum
    nodes reordered dynamic ones first, initializers last, each group in its order."""

    def apply(self, model):
        initializers = {tensor.name for tensor in model.graph.initializer}
        changed = False
        for node in model.graph.node:
            changed = sort_commutative_inputs(node, initializers) or changed
        return model, changed


COMMUTATIVE = frozenset({"Add", "Mul", "And", "Or", "Xor", "Sum"})


def sort_commutative_inputs(node, initializers) -> bool:
    """SortCommutativeInputsInitializerLast on one node (``initializers``: their names); whether it changed."""
    if node.op_type not in COMMUTATIVE:
        return False
    dynamic = [name for name in node.input if name not in initializers]
    ordered = [*dynamic, *(name for name in node.input if name not in dynamic)]
    if ordered == list(node.input):
        return False
    node.input[:] = ordered
    return True


class GiveUniqueParameterTensors(Transformation):
    """qonnx's ``GiveUniqueParameterTensors``: an initializer read a second time (by another node or
    another input) is copied under a new name for that use. Only the copies are converted to arrays
    (qonnx converts every initializer input of every node to learn that it is one: EfficientNet-Lite0's
    streamlining converted 381,000 of them, 38 of its 96 s)."""

    def apply(self, model):
        view = IndexedModel(model)
        seen: set[str] = set()
        for node in model.graph.node:
            for index, name in enumerate(list(node.input)):
                if not view.is_initializer(name):
                    continue
                if name not in seen:
                    seen.add(name)
                    continue
                value = view.get_initializer(name)
                new_name = view.make_new_valueinfo_name()
                view.set_initializer(new_name, value)
                view.set_tensor_datatype(new_name, view.get_tensor_datatype(name))
                node.input[index] = new_name
        return model, False


class SortGraph(Transformation):
    """qonnx's ``SortGraph``: the nodes in ``toposort_flatten``'s order (by level: 0 without
    predecessors, else one more than the deepest predecessor's; then by position), nodes without
    predecessors and without an initializer or graph input among their inputs dropped unless another
    depends on them, a cycle raising ``toposort``'s ``CircularDependencyError``. qonnx finds each
    predecessor's position with ``list.index`` and ``toposort`` rebuilds its table once per level:
    DenseNet-121's 2,600 nodes took a second a call, after every transformation."""

    def apply(self, model):
        nodes = list(model.graph.node)
        if len(nodes) == 1:
            return model, False
        level = _levels(_dependencies(nodes, _Sources(model.graph)))
        order = sorted(level, key=lambda i: (level[i], i))
        if order == list(range(len(nodes))):
            return model, False
        del model.graph.node[:]
        model.graph.node.extend(nodes[i] for i in order)
        return model, False


def _dependencies(nodes, sources) -> dict[int, set[int]]:
    """SortGraph's table: node index -> the indices of its predecessors (the first producer of each
    input), for the nodes that have some or read an initializer or graph input, and the nodes they
    depend on (toposort's extra items)."""
    producer: dict[str, int] = {}
    for index, node in enumerate(nodes):
        for name in node.output:
            producer.setdefault(name, index)
    dependencies: dict[int, set[int]] = {}
    for index, node in enumerate(nodes):
        predecessors = {producer[name] for name in node.input if name in producer}
        if predecessors:
            dependencies[index] = predecessors
        elif any(sources.holds(name) for name in node.input):
            dependencies[index] = set()
    for predecessors in list(dependencies.values()):
        for index in predecessors:
            dependencies.setdefault(index, set())
    return dependencies


def _levels(dependencies: dict[int, set[int]]) -> dict[int, int]:
    """toposort's level of each item (self-dependencies dropped); a cycle raises toposort's error."""
    level: dict[int, int] = {}
    for start, first in dependencies.items():  # depth first: a node's level once its predecessors have
        if start in level:  # theirs
            continue
        stack, on_path = [(start, iter(first))], {start}
        while stack:
            item, pending = stack[-1]
            for dependency in pending:
                if dependency == item or dependency in level:
                    continue
                if dependency in on_path:
                    from toposort import toposort_flatten

                    toposort_flatten(dependencies)  # raises CircularDependencyError with toposort's data
                on_path.add(dependency)
                stack.append((dependency, iter(dependencies[dependency])))
                break
            else:
                level[item] = 1 + max((level[d] for d in dependencies[item] if d != item), default=-1)
                on_path.discard(item)
                stack.pop()
    return level


class NodeOrder:
    """The node order qonnx's ``SortGraph`` gives after each step of a pass that removes or rewires one
    node at a time, kept up to date without sorting the graph again. qonnx's ``FoldConstants`` and
    ``RemoveIdentityOps`` infer shapes after every step, through ``transform``, whose cleanup sorts the
    graph: the next step takes the first node of that order, and the last order is the graph's.

    SortGraph orders the nodes by (level, place in the list it is given). Run again after a step, a
    node whose level did not change keeps its place among the nodes of its level, and the nodes whose
    level dropped (these steps only lower levels) follow the nodes already at their new level, in their
    former order. So each node carries the key (level, arrival), arrival a counter given anew to the
    nodes that moved, in their former order, and a step recomputes the levels downstream of what it
    rewired only. For a graph in which every tensor has one producer and every initializer and graph
    input one name (see :func:`well_formed`); nodes are their indices in the list it was built on."""

    def __init__(self, graph):
        self.nodes = list(graph.node)
        self.sources = {tensor.name for tensor in graph.initializer} | {vi.name for vi in graph.input}
        self.producer: dict[str, int] = {}
        self.readers: dict[str, list[int]] = defaultdict(list)
        for index, node in enumerate(self.nodes):
            for name in node.output:
                self.producer[name] = index
            for name in node.input:
                self.readers[name].append(index)
        self.predecessors = [self._predecessors(index) for index in range(len(self.nodes))]
        self.dependents: list[set[int]] = [set() for _ in self.nodes]
        for index, predecessors in enumerate(self.predecessors):
            for predecessor in predecessors:
                self.dependents[predecessor].add(index)
        level = _levels(_dependencies(self.nodes, _NameSet(self.sources)))
        self.alive = [index in level or len(self.nodes) == 1 for index in range(len(self.nodes))]
        self.count = sum(self.alive)
        self.level = [level.get(index, 0) for index in range(len(self.nodes))]
        self.arrival = list(range(len(self.nodes)))
        self.arrivals = len(self.nodes)
        self._touched: set[int] = set()
        self._orphaned: set[int] = set()

    def key(self, index: int) -> tuple[int, int]:
        return self.level[index], self.arrival[index]

    def order(self) -> list[int]:
        """The nodes left, in SortGraph's order."""
        return sorted((i for i, alive in enumerate(self.alive) if alive), key=self.key)

    def write(self, graph) -> None:
        """The graph's nodes set to :meth:`order` (the node objects held here are copied)."""
        nodes = [self.nodes[index] for index in self.order()]
        del graph.node[:]
        graph.node.extend(nodes)

    def _predecessors(self, index: int) -> set[int]:
        return {self.producer[name] for name in self.nodes[index].input if name in self.producer}

    # -- a step: changes, then settle() ------------------------------------------------------------

    def remove(self, index: int) -> None:
        """The node leaves the graph."""
        node = self.nodes[index]
        self.alive[index] = False
        self.count -= 1
        for name in node.output:
            if self.producer.get(name) == index:
                del self.producer[name]
                self._touched.update(self.readers[name])
        for name in node.input:
            self.readers[name].remove(index)
        for predecessor in self.predecessors[index]:
            self.dependents[predecessor].discard(index)
            self._orphaned.add(predecessor)
        self.predecessors[index] = set()

    def set_input(self, index: int, slot: int, name: str) -> None:
        node = self.nodes[index]
        self.readers[node.input[slot]].remove(index)
        node.input[slot] = name
        self.readers[name].append(index)
        self._touched.add(index)

    def set_output(self, index: int, slot: int, name: str) -> None:
        node = self.nodes[index]
        old = node.output[slot]
        if self.producer.get(old) == index:
            del self.producer[old]
        node.output[slot] = name
        self.producer[name] = index
        self._touched.update(self.readers[old])
        self._touched.update(self.readers[name])

    def add_source(self, name: str) -> None:
        """``name`` is an initializer now."""
        self.sources.add(name)
        self._touched.update(self.readers[name])

    def settle(self) -> list[int]:
        """SortGraph after the step: predecessors and levels recomputed where the step rewired, the
        nodes SortGraph drops dropped, the nodes whose level dropped moved; returns the moved nodes."""
        pending: list[tuple[int, int]] = []
        for index in self._touched:
            if self.alive[index]:
                new = self._predecessors(index)
                for predecessor in self.predecessors[index] - new:
                    self.dependents[predecessor].discard(index)
                    self._orphaned.add(predecessor)
                for predecessor in new - self.predecessors[index]:
                    self.dependents[predecessor].add(index)
                self.predecessors[index] = new
                heapq.heappush(pending, (self.level[index], index))
        former: dict[int, tuple[int, int]] = {}
        done: set[int] = set()
        while pending:  # by former level: a node's predecessors settle before it
            _, index = heapq.heappop(pending)
            if index in done:
                continue
            done.add(index)
            level = 1 + max((self.level[p] for p in self.predecessors[index] if p != index), default=-1)
            if level != self.level[index]:
                former[index] = self.key(index)
                self.level[index] = level
                for dependent in self.dependents[index] - {index}:
                    heapq.heappush(pending, (self.level[dependent], dependent))
        for index in self._touched | self._orphaned if self.count > 1 else ():  # SortGraph sorts no single node
            node = self.nodes[index]
            floating = not self.predecessors[index] and not any(name in self.sources for name in node.input)
            if self.alive[index] and floating and not self.dependents[index]:
                self.remove(index)  # no predecessors: nothing else changes
        self._touched, self._orphaned = set(), set()
        moved = sorted((i for i in former if self.alive[i]), key=former.__getitem__)
        for index in moved:
            self.arrival[index] = self.arrivals
            self.arrivals += 1
        return moved


class _NameSet:
    """A set of names as SortGraph's sources (:class:`_Sources` for a well-formed graph)."""

    def __init__(self, names: set[str]):
        self.names = names

    def holds(self, name: str) -> bool:
        return name in self.names


def well_formed(view) -> bool:
    """Whether every tensor has one producer and at most one value info, and every initializer and
    annotation one name: where qonnx's lookups neither raise nor depend on the node order."""
    view.inits, view.annotations, view.producers  # noqa: B018  (build the tables and their repeats)
    return not any(view.repeated.values()) and all(len(entries) <= 1 for entries in view.vis.values())


#: what qonnx's ``ModelWrapper.cleanup`` runs, in its order
CLEANUP = (
    RemoveUnusedTensors,
    RemoveStaticGraphInputs,
    SortGraph,
    SortCommutativeInputsInitializerLast,
    GiveUniqueParameterTensors,
)


def blind(view) -> bool:
    """Whether some node output has neither a value info nor an initializer (a shape inference may add
    its value info after the value infos a step appends: such a graph takes qonnx's steps one by one)."""
    return any(
        name and not view.vis.get(name) and not view.is_initializer(name)
        for node in view.graph.node
        for name in node.output
    )


def clean(model):
    """qonnx's ``ModelWrapper.cleanup`` (as a pass's inner ``transform`` runs it: no float64 fix), with
    the equivalents; in place."""
    for transformation in CLEANUP:
        while transformation().apply(model)[1]:
            pass
    return model


class _Sources:
    """The graph's initializers and inputs by name, for SortGraph: qonnx looks a name up with
    ``get_by_name`` (initializers, then inputs), which raises for a name given twice."""

    def __init__(self, graph):
        self.containers = (graph.initializer, graph.input)
        self.names = [Counter(item.name for item in container) for container in self.containers]

    def holds(self, name: str) -> bool:
        for container, names in zip(self.containers, self.names):
            if names[name] > 1:
                get_by_name(container, name)  # raises, as in qonnx
            if names[name]:
                return True
        return False


def _identity_operand(view, node, neutral: float, atol: float) -> bool:
    operand = view.get_initializer(node.input[1])
    return operand is not None and bool(np.isclose(operand, np.full_like(operand, neutral), atol=atol).all())


def _zero_pads(view, node, atol: float) -> bool:
    pads = get_by_name(node.attribute, "pads")
    pads = np.asarray(pads.ints, dtype=np.int64) if pads is not None else view.get_initializer(node.input[1])
    return pads is not None and bool((pads == 0).all())


def _identity_dropout(view, node, atol: float) -> bool:
    if view.model.opset_import[0].version < 12:
        ratio = get_by_name(node.attribute, "ratio")
        return ratio is not None and ratio.f == 0
    return len(node.input) == 1 or view.get_initializer(node.input[1]) == 0


#: qonnx's RemoveIdentityOps: op type -> whether a node of it is an identity
_IDENTITIES = {
    "Add": functools.partial(_identity_operand, neutral=0.0),
    "Sub": functools.partial(_identity_operand, neutral=0.0),
    "Mul": functools.partial(_identity_operand, neutral=1.0),
    "Div": functools.partial(_identity_operand, neutral=1.0),
    "Pad": _zero_pads,
    "Identity": lambda view, node, atol: True,
    "Dropout": _identity_dropout,
}


class RemoveIdentityOps(Transformation):
    """qonnx's ``RemoveIdentityOps``: Add / Sub of zeros, Mul / Div by ones, zero Pads, Identities and
    no-op Dropouts removed and rewired (qonnx's ``remove_node_and_rewire``); qonnx's steps in qonnx's
    order, in one call.

    qonnx removes the first identity of the graph, infers every shape and cleans the graph up
    (``transform(InferShapes())``), and starts again: a shape inference and a cleanup per identity
    (DenseNet-121's QONNX has about 800). The first step is done so here; after it, where every
    computed tensor has a value info, the cleanup of each step follows what the step rewired
    (:class:`NodeOrder` keeps SortGraph's order, which the next step scans; a rewired node gets its
    initializers last if commutative and a copy of an initializer it now shares, and may be an
    identity now) and shapes are inferred once at the end (the test and the rewiring read none);
    otherwise every step is qonnx's step. A join node is left with qonnx's warning (qonnx's pass would
    then repeat forever). A graph where qonnx's lookups raise or depend on the node order
    (:func:`well_formed`) is left to qonnx's pass."""

    def __init__(self, atol: float = 1e-05):
        super().__init__()
        self.atol = atol

    def apply(self, model):
        from qonnx.transformation import remove

        if not well_formed(IndexedModel(model)):
            return remove.RemoveIdentityOps(self.atol).apply(model)
        model, removed = self._step(model)
        if not removed:
            return model, False
        view = IndexedModel(model)
        if blind(view):
            while removed:
                model, removed = self._step(model)
            return model, False
        order = NodeOrder(model.graph)
        identities = {i for i in order.order() if self._identity(view, order.nodes[i])}  # a node's inputs
        queue = [(order.key(i), i) for i in identities]  # decide it: only the rewired ones are tested again
        heapq.heapify(queue)
        while queue:
            key, index = heapq.heappop(queue)
            if not (order.alive[index] and key == order.key(index) and index in identities):
                continue
            rewired = self._remove(view, order, index)
            if rewired is None:
                continue
            moved = order.settle()
            readers = sorted(rewired, key=order.key)
            for reader in readers:
                sort_commutative_inputs(order.nodes[reader], view.inits)
            if readers and view.is_initializer(order.nodes[index].input[0]):
                give_copies(view, order, order.nodes[index].input[0])
            for reader in readers:
                (identities.add if self._identity(view, order.nodes[reader]) else identities.discard)(reader)
            for other in (*readers, *moved):
                if order.alive[other] and other in identities:
                    heapq.heappush(queue, (order.key(other), other))
        order.write(model.graph)
        return clean(infer_shapes(model)), False

    def _step(self, model):
        """qonnx's ``apply``: the first identity of the graph removed, shapes inferred, the graph cleaned
        up; and whether one was removed."""
        view, order = IndexedModel(model), NodeOrder(model.graph)
        first = next((i for i, node in enumerate(order.nodes) if self._identity(view, node)), None)
        removed = first is not None and self._remove(view, order, first) is not None
        if removed:
            model.graph.node.remove(order.nodes[first])
        return clean(infer_shapes(model)), removed

    def _identity(self, view, node) -> bool:
        test = _IDENTITIES.get(node.op_type)
        return test is not None and bool(test(view, node, atol=self.atol))

    @staticmethod
    def _remove(view, order: NodeOrder, index: int) -> list[int] | None:
        """qonnx's ``remove_node_and_rewire`` of node ``index``: its producer made to write its output,
        or (no producer, or a fork) its successors made to read its input. Returns the successors
        rewired, None for a join node (left, with qonnx's warning)."""
        node = order.nodes[index]
        outputs = {vi.name for vi in view.graph.output}
        predecessors = [order.producer[name] for name in node.input if name in order.producer]
        if len(predecessors) > (0 if node.input[0] in {vi.name for vi in view.graph.input} else 1):
            warnings.warn("Removing join-node operation is currently not supported")
            return None
        producer = order.producer.get(node.input[0])
        if producer is not None:  # qonnx's is_fork_node
            fed = [r for name in order.nodes[producer].output for r in order.readers[name]]
            fork = len(fed) > (0 if order.nodes[producer].output[0] in outputs else 1)
        if producer is not None and not fork:
            order.remove(index)
            order.set_output(producer, 0, node.output[0])
            return []
        successors = sorted({r for name in node.output for r in order.readers[name]})
        assert successors, "Whole graph is one node."
        order.remove(index)
        for successor in successors:
            for slot, name in enumerate(order.nodes[successor].input):
                if name == node.output[0]:
                    order.set_input(successor, slot, node.input[0])
        return successors


def infer_shapes(model):
    """What a pass's ``model.transform(InferShapes())`` does before the cleanup, in place."""
    from quark.torch.extensions.brevitas._backend.qonnx_passes.shapes import InferShapes

    if getattr(model, "fix_float64", False):
        DoubleToSingleFloat().apply(model)
    return model.transform(InferShapes(), make_deepcopy=False, cleanup=False)


def give_copies(view, order: NodeOrder, name: str) -> None:
    """qonnx's GiveUniqueParameterTensors for one initializer ``name`` in a graph where it alone may be
    shared: every use after the first, in :class:`NodeOrder`'s order, reads a copy under a new name."""
    first = True
    for reader in sorted(set(order.readers[name]), key=order.key):
        for slot, used in enumerate(list(order.nodes[reader].input)):
            if used != name:
                continue
            if first:
                first = False
                continue
            copy = view.make_new_valueinfo_name()
            view.set_initializer(copy, view.get_initializer(name))
            view.set_tensor_datatype(copy, view.get_tensor_datatype(name))
            order.add_source(copy)
            order.set_input(reader, slot, copy)
