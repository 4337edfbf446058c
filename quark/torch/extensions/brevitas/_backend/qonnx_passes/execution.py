"""qonnx 1.0.0's ``execute_onnx``, node by node with its semantics, in linear time per sample.

qonnx builds, for every standard node and every sample, a one-node model from a scan of the graph's
value infos and a new ONNX Runtime session for it, allocates a zero tensor for every tensor of the
graph, looks every tensor's datatype up by a scan of the annotations and measures the rounding of
integer tensors with Python's ``max`` over their elements (none of it cached, optional or hooked). An
:class:`Executor` does the same steps on dict lookups, with one session per one-node model (the same
model, so ONNX Runtime's outputs) and NumPy's ``max``: FINN's front end executes its graph after
every step, and the verification of a QONNX export executes it on every example.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import onnx.helper as oh
import onnx.numpy_helper as np_helper
from onnx import AttributeProto
from qonnx.core.execute_custom_node import execute_custom_node
from qonnx.custom_op.registry import is_custom_op
from qonnx.util.basic import (
    get_execution_error_thresh,
    get_preferred_qonnx_opset,
    get_sanitize_quant_tensors,
    qonnx_make_model,
)
from qonnx.util.onnx import valueinfo_to_tensor

from quark.common.errors import QuarkBrevitasError
from quark.torch.extensions.brevitas._backend.qonnx_passes.indexed import IndexedModel


class ExecutionError(QuarkBrevitasError):
    """What qonnx's ``execute_onnx`` raises as a bare ``Exception``: the same messages."""


class _Context(dict):
    """qonnx's execution context, filled on first use: zeros of a tensor's value info, an
    initializer's array, ``None`` for the empty name (qonnx allocates them all up front)."""

    def __init__(self, view: IndexedModel):
        super().__init__()
        self.view = view

    def __missing__(self, name: str):
        if name == "":
            return None
        tensor = self.view.inits.get(name)
        found = self.view.vis.get(name)
        if found:  # qonnx fills value infos first, then overwrites with initializers
            value = valueinfo_to_tensor(found[-1][1])
        if tensor is not None:
            value = np_helper.to_array(tensor)
        elif not found:
            raise KeyError(name)
        self[name] = value
        return value

    def fill(self, names: Sequence[str]) -> None:
        """The entries qonnx's context would hold for ``names`` (a custom op reads and writes it as a dict)."""
        for name in names:
            if name not in self and (self.view.vis.get(name) or name in self.view.inits):
                self[name]


class Sessions(dict):
    """ONNX Runtime sessions of one-node models, by the model's bytes: one per model however often it
    runs (the same model gives the same outputs). Whoever executes a graph many times (a build's step
    checks) keeps one and passes it to each :class:`Executor`."""

    def get_or_make(self, model_bytes: bytes):
        session = self.get(model_bytes)
        if session is None:
            import onnxruntime as rt

            session = self[model_bytes] = rt.InferenceSession(model_bytes)  # qonnx's: default options
        return session


class Executor:
    """Executes one qonnx ``ModelWrapper`` as qonnx's ``execute_onnx`` does, as often as asked."""

    def __init__(self, model, checked: bool = True, sessions: Sessions | None = None):
        """``checked``: qonnx's checks of a whole graph's execution (shapes known, nodes sorted);
        ``sessions``: where to keep the ONNX Runtime sessions (default: with this executor)."""
        self.model = model
        self.view = IndexedModel(model)
        self.sessions = Sessions() if sessions is None else sessions
        self.opsets = model.get_opset_imports()
        if not checked:
            return
        if not self.view.check_all_tensor_shapes_specified():
            raise ExecutionError("Found unspecified tensor shapes, try infer_shapes")
        # qonnx's nodes_topologically_sorted: every producer of a tensor before every consumer of it
        last_producer: dict[str, int] = {}
        first_consumer: dict[str, int] = {}
        for index, node in enumerate(model.graph.node):
            for name in node.output:
                last_producer[name] = index
            for name in node.input:
                first_consumer.setdefault(name, index)
        if any(first_consumer.get(name, index) < index for name, index in last_producer.items()):
            raise AssertionError("Nodes must be topologically sorted.")
        if model.get_metadata_prop("exec_mode") not in (None, ""):
            raise ExecutionError('Metadata property "exec_mode" is set to an unknown value.')

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The graph's outputs on ``feeds`` (input name -> array of the input's shape)."""
        context = _Context(self.view)
        for name, value in feeds.items():
            if self.view.vis.get(name) or name in self.view.inits:
                expected = context[name].shape
                if expected != value.shape:
                    raise ExecutionError(
                        f"Shape mismatch for provided input {name}: found {expected} expected {value.shape} "
                    )
                context[name] = value
        sanitize = get_sanitize_quant_tensors() != 0
        for node in self.model.graph.node:
            if sanitize:
                self._sanitize(node.input, context)
            self.execute_node(node, context, self.opsets.get(node.domain, get_preferred_qonnx_opset()))
            if sanitize:
                self._sanitize(node.output, context)
        return {vi.name: context[vi.name] for vi in self.model.graph.output}

    def execute_node(self, node, context: _Context, opset: int) -> None:
        """qonnx's ``execute_node``: a custom op by its ``execute_node``, a standard one in ONNX Runtime."""
        if is_custom_op(node.domain, node.op_type):
            context.fill([*node.input, *node.output])
            execute_custom_node(node, context, self.model.graph, onnx_opset_version=opset)
        else:
            self._standard(node, context, opset)

    def _sanitize(self, names: Sequence[str], context: _Context) -> None:
        """qonnx's ``sanitize_quant_values``: integer tensors rounded within the error threshold."""
        for name in names:
            datatype = self.view.get_tensor_datatype(name)
            if not datatype.is_integer():
                continue
            values = context[name]
            allowed = datatype.allowed(values)
            updated = values
            if not (allowed.all() if isinstance(allowed, np.ndarray) else allowed):
                updated = np.round(values)
                warnings.warn(
                    f"The values of tensor {name} can't be represented with the set datatype annotation "
                    f"({datatype.name}), they will be rounded to match the datatype annotation."
                )
            error = _python_max(np.abs(np.asarray(values) - np.asarray(updated)))
            if not error <= get_execution_error_thresh():
                raise ExecutionError(
                    f"Rounding error is too high to match set QONNX datatype ({datatype}) for input {name}"
                )
            context[name] = updated

    def _standard(self, node, context: _Context, opset: int) -> None:
        """qonnx's one-node model of ``node`` run in ONNX Runtime (its session kept)."""
        vis = self.view.vis
        inputs = [vi for _, vi, _ in sorted((e for name in set(node.input) for e in vis.get(name, ())), key=_rank)]
        outputs = [
            vi
            for container, vi, _ in sorted((e for name in set(node.output) for e in vis.get(name, ())), key=_rank)
            if container != "input"
        ]
        for attribute in node.attribute:
            if attribute.type == AttributeProto.GRAPH:
                for inner in attribute.g.node:
                    read = [vi for vi in self.model.graph.value_info if vi.name in inner.input]
                    inputs += [vi for vi in read if vi not in inputs]
        graph = oh.make_graph(nodes=[node], name="single-node-exec", inputs=inputs, outputs=outputs)
        model = qonnx_make_model(graph)
        model.opset_import[0].version = opset
        results = self.sessions.get_or_make(model.SerializeToString()).run(None, {name: context[name] for name in node.input})
        names = [vi.name for vi in outputs]
        for name in node.output:
            if name not in names:
                raise ExecutionError(f"Output {name} not found in node outputs.")
            value = results[len(names) - 1 - names[::-1].index(name)]  # qonnx takes the last match
            if value.shape != context[name].shape:
                warnings.warn(
                    f"Output shapes disagree after node {node} execution: found {value.shape} vs expected "
                    f"{context[name].shape}"
                )
            context[name] = value


def _rank(entry) -> int:
    return entry[2]


def _python_max(values: np.ndarray):
    """Python's ``max`` over the elements, as qonnx takes it: a NaN first is the answer, a NaN later is
    passed over (it compares false)."""
    flat = values.reshape(-1)
    if flat.size and np.isnan(flat[0]):
        return flat[0]
    return np.nanmax(flat) if flat.size else max(flat)


def execute(model, inputs: Sequence[np.ndarray], sessions: Sessions | None = None) -> list[np.ndarray]:
    """The outputs of a QONNX or FINN graph on ``inputs`` (one array per graph input, batch first),
    as qonnx's ``execute_onnx`` computes them; a graph of batch size 1 (FINN's) runs one sample at a
    time and the outputs are stacked. ``sessions``: see :class:`Sessions`."""
    executor = Executor(model, sessions=sessions)
    names = [vi.name for vi in model.graph.input]
    shape = executor.view.get_tensor_shape(names[0])
    if not shape or shape[0] != 1 or len(inputs[0]) == 1:
        outputs = executor.run(dict(zip(names, inputs)))
        return [outputs[vi.name] for vi in model.graph.output]
    samples = [executor.run({n: x[k : k + 1] for n, x in zip(names, inputs)}) for k in range(len(inputs[0]))]
    return [np.concatenate([s[vi.name] for s in samples]) for vi in model.graph.output]
