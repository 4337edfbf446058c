"""qonnx 1.0.0's tidying passes in linear time, each giving the graph qonnx's gives (the tests compare
the bytes). ``ModelWrapper.transform`` runs five of them after every transformation (its
``cleanup``), so on deep graphs their quadratic lookups were most of FINN's front-end time.

Each is a qonnx ``Transformation`` that reaches its fixed point in one ``apply`` (qonnx's ``transform``
repeats an ``apply`` until it reports no change; these report the change of that fixed point only
where qonnx's last call would).
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
from qonnx.transformation.base import Transformation
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
    """qonnx's ``RemoveStaticGraphInputs``: a graph input that has an initializer moves to value_info."""

    def apply(self, model):
        graph = model.graph
        initializers = {tensor.name for tensor in graph.initializer}
        static = [vi for vi in graph.input if vi.name in initializers]
        for vi in static:
            graph.value_info.append(vi)
            graph.input.remove(vi)
        return model, False


class SortCommutativeInputsInitializerLast(Transformation):
    """qonnx's ``SortCommutativeInputsInitializerLast``: the inputs of Add, Mul, And, Or, Xor and Sum
    nodes reordered dynamic ones first, initializers last, each group in its order."""

    COMMUTATIVE = frozenset({"Add", "Mul", "And", "Or", "Xor", "Sum"})

    def apply(self, model):
        initializers = {tensor.name for tensor in model.graph.initializer}
        changed = False
        for node in model.graph.node:
            if node.op_type not in self.COMMUTATIVE:
                continue
            dynamic = [name for name in node.input if name not in initializers]
            ordered = [*dynamic, *(name for name in node.input if name not in dynamic)]
            if ordered != list(node.input):
                changed = True
                node.input[:] = ordered
        return model, changed


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
        from toposort import CircularDependencyError

        nodes = list(model.graph.node)
        if len(nodes) == 1:
            return model, False
        producer: dict[str, int] = {}
        for index, node in enumerate(nodes):
            for name in node.output:
                producer.setdefault(name, index)
        sources = {t.name for t in model.graph.initializer} | {vi.name for vi in model.graph.input}
        dependencies: dict[int, set[int]] = {}
        for index, node in enumerate(nodes):
            predecessors = {producer[name] for name in node.input if name in producer}
            if predecessors:
                dependencies[index] = predecessors
            elif any(name in sources for name in node.input):
                dependencies[index] = set()
        for predecessors in list(dependencies.values()):  # toposort's extra items: depended on, not listed
            for index in predecessors:
                dependencies.setdefault(index, set())
        level: dict[int, int] = {}
        for start, first in dependencies.items():  # depth first: a node's level once its predecessors have
            if start in level:  # theirs
                continue
            stack, on_path = [(start, iter(first))], {start}
            while stack:
                item, pending = stack[-1]
                for dependency in pending:
                    if dependency == item or dependency in level:  # toposort drops self-dependencies
                        continue
                    if dependency in on_path:
                        raise CircularDependencyError({i: dependencies[i] for i in dependencies if i not in level})
                    on_path.add(dependency)
                    stack.append((dependency, iter(dependencies[dependency])))
                    break
                else:
                    level[item] = 1 + max((level[d] for d in dependencies[item] if d != item), default=-1)
                    on_path.discard(item)
                    stack.pop()
        order = sorted(level, key=lambda i: (level[i], i))
        if order == list(range(len(nodes))):
            return model, False
        del model.graph.node[:]
        model.graph.node.extend(nodes[i] for i in order)
        return model, False


def _identity_operand(view, node, neutral: float, atol: float) -> bool:
    operand = view.get_initializer(node.input[1]) if len(node.input) > 1 else None
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
    no-op Dropouts removed and rewired (qonnx's ``remove_node_and_rewire``), shapes inferred after.

    qonnx removes the first identity it finds, infers every shape and starts again: a shape inference
    per identity (DenseNet-121's QONNX has about 800). Removing one makes no other node an identity
    or not (the test reads the node's op type and constant operand; the rewiring renames the
    producer's output or the successors' inputs), so one sweep in the same order removes the same
    nodes, the same way; shapes are inferred once. A join node is left, with qonnx's warning."""

    def __init__(self, atol: float = 1e-05):
        super().__init__()
        self.atol = atol

    def apply(self, model):
        from quark.torch.extensions.brevitas._backend.qonnx_passes.shapes import InferShapes

        view = IndexedModel(model)
        outputs = {vi.name for vi in model.graph.output}
        inputs = {vi.name for vi in model.graph.input}
        nodes = list(model.graph.node)
        position = {id(node): index for index, node in enumerate(nodes)}
        removed = [
            index
            for index, node in enumerate(nodes)
            if (test := _IDENTITIES.get(node.op_type)) is not None
            and test(view, node, atol=self.atol)
            and _remove_node_and_rewire(view, node, inputs, outputs, position)
        ]
        for index in reversed(removed):
            del model.graph.node[index]
        return model.transform(InferShapes(), make_deepcopy=False, cleanup=False), False


def _successors(view, node) -> list:
    return [c for name in node.output for c in view.consumers.get(name, ())]


def _remove_node_and_rewire(view, node, inputs: set[str], outputs: set[str], position: dict[int, int]) -> bool:
    """qonnx's ``remove_node_and_rewire`` on the view's dicts, which it keeps up to date (``position``:
    each node's place in the graph, which orders the consumers as qonnx's scan finds them); the node
    is taken out of the dicts, and out of the graph by the caller. Returns whether it was removed."""
    predecessors = [view.producers[name] for name in node.input if name in view.producers]
    if len(predecessors) > (0 if node.input[0] in inputs else 1):
        warnings.warn("Removing join-node operation is currently not supported")
        return False
    producer = view.producers.get(node.input[0])
    forks = producer is not None and len(_successors(view, producer)) > (0 if producer.output[0] in outputs else 1)
    if producer is not None and not forks:
        del view.producers[producer.output[0]]
        producer.output[0] = node.output[0]
        view.producers[node.output[0]] = producer
    else:
        successors = _successors(view, node)
        assert successors, "Whole graph is one node."
        for successor in successors:
            for index, name in enumerate(successor.input):
                if name == node.output[0]:
                    successor.input[index] = node.input[0]
        readers = {id(c): c for c in view.consumers.get(node.input[0], ())}
        readers.update((id(s), s) for s in successors)
        view.consumers[node.input[0]] = sorted(
            (c for c in readers.values() for name in c.input if name == node.input[0]), key=lambda c: position[id(c)]
        )
        view.consumers.pop(node.output[0], None)
    for name in node.input:
        view.consumers[name] = [c for c in view.consumers.get(name, ()) if c is not node]
    for name in node.output:
        if view.producers.get(name) is node:
            del view.producers[name]
    return True
