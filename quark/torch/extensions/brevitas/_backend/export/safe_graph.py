"""Check an ONNX graph before it is executed: files from elsewhere run only standard ops and QONNX's quantizers.

Executing a graph runs code the file chooses. ONNX Runtime runs its own kernels, but qonnx's
``execute_onnx``, its shape inference and its cleanup import the Python module that each node's
*domain* names (``importlib.import_module(node.domain)`` in ``qonnx.custom_op.registry``): a node
with ``domain="antigravity"`` imports that module, and a ``GenericPartition`` node loads and
executes another file named by its ``model`` attribute. So every graph is checked before it is
handed to qonnx or ONNX Runtime (the FINN hand-off and dataflow take QONNX files by path; the
exporter checks its own graph the same way before verifying it):

- ``onnx.checker.check_model``: structure, IR version, the schema of every standard op;
- the opset of the standard domain within what the pinned onnx knows (:data:`OPSETS`);
- every node, in subgraphs and local functions too, of an allowed domain and op (:data:`ALLOWED_OPS`);
- external data (weights in side files) only inside the file's own directory.

Every problem is collected and raised in one :class:`UnsafeGraphError`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import onnx
from onnx import external_data_helper

from quark.common.errors import RefusedError

#: standard-domain opsets accepted: from the oldest the exporters write to the newest onnx knows
OPSETS = range(7, onnx.defs.onnx_opset_version() + 1)

#: QONNX's quantizers and the ops FINN's front end reads, all executed by numpy code in qonnx
_QONNX_OPS = frozenset(
    {
        "Quant", "IntQuant", "BipolarQuant", "FloatQuant", "Trunc", "MultiThreshold",
        "Im2Col", "MaxPoolNHWC", "QuantAvgPool2d", "XnorPopcountMatMul",
    }
)  # fmt: skip


@dataclass(frozen=True)
class Allowed:
    """The ops of one domain that may be executed (``None``: every op with an ONNX schema), and why."""

    domain: str
    ops: frozenset[str] | None
    why: str


ALLOWED_OPS: tuple[Allowed, ...] = (
    Allowed("", None, "standard ONNX, checked against its schemas; run by ONNX Runtime's kernels"),
    Allowed("ai.onnx", None, "the standard domain by its full name"),
    Allowed("qonnx.custom_op.general", _QONNX_OPS, "QONNX's quantizers, as Brevitas writes them"),
    Allowed("onnx.brevitas", _QONNX_OPS, "the same ops under the domain older Brevitas releases wrote"),
    Allowed(
        "com.microsoft",
        frozenset({"QuantizeLinear", "DequantizeLinear"}),
        "ONNX Runtime's 16-bit Q/DQ before opset 21, as the QCDQ exporter writes them (A16W8)",
    ),
)
# Left out on purpose: GenericPartition (executes another file, named in the graph), DebugMarker
# (no use in a model), and every other domain (qonnx would import a module of that name).
_BY_DOMAIN = {row.domain: row for row in ALLOWED_OPS}


class UnsafeGraphError(RefusedError):
    """The graph may not be executed; ``problems`` lists one line per reason."""

    def __init__(self, message: str, problems: list[str]):
        super().__init__(message)
        self.problems = problems


def load_checked(path: str | os.PathLike) -> onnx.ModelProto:
    """Load the ONNX file at ``path`` and :func:`check` it, external data included; nothing in it
    is executed or imported before the check passes."""
    path = os.fspath(path)
    model = onnx.load(path, load_external_data=False)
    problems = _external_data_problems(model, os.path.dirname(os.path.abspath(path)))
    if problems:
        raise UnsafeGraphError(_message(path, problems), problems)
    external_data_helper.load_external_data_for_model(model, os.path.dirname(os.path.abspath(path)))
    check(model, path)
    return model


def check(model: onnx.ModelProto, where: str = "the graph") -> None:
    """Raise :class:`UnsafeGraphError` listing every reason ``model`` may not be executed."""
    problems = []
    try:
        onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, ValueError) as error:
        problems.append(f"onnx.checker: {str(error).strip().splitlines()[0]}")
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset not in OPSETS:
        problems.append(f"standard opset {opset}; allowed {OPSETS.start}..{OPSETS.stop - 1}")
    refused = sorted({(n.domain, n.op_type) for n in _nodes(model) if not _allowed(n)})
    problems += [f"node {op!r} of domain {domain!r} is not allowed; {_ALLOWED_TEXT}" for domain, op in refused]
    if problems:
        raise UnsafeGraphError(_message(where, problems), problems)


def _allowed(node: onnx.NodeProto) -> bool:
    row = _BY_DOMAIN.get(node.domain)
    return row is not None and (row.ops is None or node.op_type in row.ops)


def _graphs(model: onnx.ModelProto) -> Iterator[onnx.GraphProto]:
    """The main graph and every subgraph in it (If, Loop, Scan bodies), nested ones included."""
    pending = [model.graph]
    while pending:
        graph = pending.pop()
        yield graph
        for node in graph.node:
            pending += _subgraphs(node)


def _subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    return [g for a in node.attribute for g in ([a.g] if a.HasField("g") else []) + list(a.graphs)]


def _nodes(model: onnx.ModelProto) -> Iterator[onnx.NodeProto]:
    """Every node: of the graph, of its subgraphs and of local functions (and their subgraphs)."""
    for graph in _graphs(model):
        yield from graph.node
    for function in model.functions:
        pending = list(function.node)
        while pending:
            node = pending.pop()
            yield node
            pending += [n for g in _subgraphs(node) for n in g.node]


def _tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every stored tensor: initializers and tensor attributes (Constant values), wherever they are."""
    for graph in _graphs(model):
        yield from graph.initializer
    for node in _nodes(model):
        for attribute in node.attribute:
            yield from ([attribute.t] if attribute.HasField("t") else []) + list(attribute.tensors)


def _external_data_problems(model: onnx.ModelProto, directory: str) -> list[str]:
    problems = []
    root = os.path.realpath(directory)
    for tensor in _tensors(model):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        location = next((e.value for e in tensor.external_data if e.key == "location"), "")
        target = os.path.realpath(os.path.join(root, location))
        if os.path.isabs(location) or os.path.commonpath([target, root]) != root:
            problems.append(f"tensor {tensor.name!r} reads external data {location!r} outside the file's directory")
    return problems


def _message(where: str, problems: list[str]) -> str:
    return f"{where}: refused before execution ({len(problems)} problem(s)):\n  " + "\n  ".join(problems)


_ALLOWED_TEXT = "allowed: " + "; ".join(
    f"domain {row.domain!r}: {'any standard op' if row.ops is None else ', '.join(sorted(row.ops))}"
    for row in ALLOWED_OPS
    if row.domain != "onnx.brevitas"
) + " (and 'onnx.brevitas', the old name of the QONNX domain)"


def markdown() -> str:
    """The allow-list as markdown (docs/export.md embeds it; a test keeps it in sync)."""
    lines = ["| domain | ops that may run | why |", "|---|---|---|"]
    for row in ALLOWED_OPS:
        ops = "any op with an ONNX schema" if row.ops is None else ", ".join(f"`{op}`" for op in sorted(row.ops))
        lines.append(f"| `{row.domain!r}` | {ops} | {row.why} |")
    return "\n".join(lines)
