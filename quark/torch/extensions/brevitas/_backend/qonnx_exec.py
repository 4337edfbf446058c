"""qonnx's ``execute_node`` for standard ONNX nodes with ONNX Runtime sessions reused.

Why this is hand-written: qonnx 1.0.0 executes a graph node by node and runs each standard node by
building a one-node model and a new ``onnxruntime.InferenceSession`` for it, every time (no cache,
option or hook). The FINN pipeline executes its graph after every pass, one sample at a time, so the
same one-node models are compiled again and again: on DenseNet-121's QONNX (2,600 nodes) about
17 ms a node and sample. :func:`execute_node` builds the one-node model as qonnx does and keeps
its session under the model's bytes (a node, its attributes and the value infos of its inputs and
outputs, the opset): the same model gets the same session, so the outputs are ONNX Runtime's for
that model, as qonnx's. ``qonnx_index.indexed_lookups()`` installs it with the lookup indexes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

#: sessions kept (least recently used dropped first)
MAX_SESSIONS = 4096

_sessions: OrderedDict[bytes, object] = OrderedDict()
_lock = threading.Lock()


def _session(model_bytes: bytes):
    import onnxruntime as rt

    with _lock:
        session = _sessions.get(model_bytes)
        if session is not None:
            _sessions.move_to_end(model_bytes)
            return session
    session = rt.InferenceSession(model_bytes)  # qonnx's: default options and providers
    with _lock:
        _sessions[model_bytes] = session
        while len(_sessions) > MAX_SESSIONS:
            _sessions.popitem(last=False)
    return session


#: id(graph) -> (graph, container lengths, {container: {name: [(position, value info)]}}); a few graphs
_value_info_tables: OrderedDict[int, tuple] = OrderedDict()
MAX_GRAPHS = 4


def _value_infos(graph) -> dict:
    """The graph's value infos by container and name, built once per graph (rebuilt when a container's
    length changed; kept with the graph, so its id is not reused meanwhile)."""
    lengths = (len(graph.input), len(graph.output), len(graph.value_info))
    with _lock:
        entry = _value_info_tables.get(id(graph))
        if entry is not None and entry[0] is graph and entry[1] == lengths:
            _value_info_tables.move_to_end(id(graph))
            return entry[2]
    table = {}
    for container in ("input", "output", "value_info"):
        by_name: dict[str, list] = {}
        for position, vi in enumerate(getattr(graph, container)):
            by_name.setdefault(vi.name, []).append((position, vi))
        table[container] = by_name
    with _lock:
        _value_info_tables[id(graph)] = (graph, lengths, table)
        while len(_value_info_tables) > MAX_GRAPHS:
            _value_info_tables.popitem(last=False)
    return table


def _matching(table: dict, names, containers: tuple[str, ...]) -> list:
    """qonnx's ``filter(lambda x: x.name in names, container)`` for each container in turn: every value
    info whose name is among ``names``, in container order (names checked again: a rename in place)."""
    wanted = set(names)
    found = []
    for container in containers:
        hits = sorted((hit for name in wanted for hit in table[container].get(name, ())), key=lambda h: h[0])
        found += [vi for _, vi in hits if vi.name in wanted]
    return found


def clear() -> None:
    """Drop every kept session (``indexed_lookups()`` does when its last context exits)."""
    with _lock:
        _sessions.clear()
        _value_info_tables.clear()


def cached(original):
    """qonnx's ``execute_node`` (``original``) with sessions reused for standard nodes without
    subgraph attributes; custom ops and nodes with subgraphs run as qonnx runs them."""
    import functools

    from onnx import AttributeProto, helper
    from qonnx.custom_op.registry import is_custom_op
    from qonnx.util.basic import qonnx_make_model

    @functools.wraps(original)
    def execute_node(node, context, graph, opset_version, return_full_exec_context=False):
        if is_custom_op(node.domain, node.op_type) or any(a.type == AttributeProto.GRAPH for a in node.attribute):
            return original(node, context, graph, opset_version, return_full_exec_context)
        # qonnx's one-node model, field for field: the value infos naming an input (graph inputs,
        # then outputs, then value_info, each in graph order), then those naming an output
        found = _value_infos(graph)
        node_inputs = _matching(found, node.input, ("input", "output", "value_info"))
        node_outputs = _matching(found, node.output, ("output", "value_info"))
        node_graph = helper.make_graph(nodes=[node], name="single-node-exec", inputs=node_inputs, outputs=node_outputs)
        node_model = qonnx_make_model(node_graph)
        node_model.opset_import[0].version = opset_version
        outputs = _session(node_model.SerializeToString()).run(None, {name: context[name] for name in node.input})
        names = [o.name for o in node_outputs]
        for name in node.output:
            if name not in names:
                raise RuntimeError(f"Output {name} not found in node outputs.")  # qonnx raises Exception
            value = outputs[len(names) - 1 - names[::-1].index(name)]  # qonnx takes the last match
            if value.shape != context[name].shape:
                import warnings

                warnings.warn(
                    f"Output shapes disagree after node {node} execution: found {value.shape} vs expected "
                    f"{context[name].shape}"
                )
            context[name] = value

    execute_node.__qonnx_index_original__ = original
    return execute_node
