"""Point 3 of issue 11: files from strangers (ONNX files).

An ONNX file is checked (``onnx.checker``, opset, an op allow-list, external data) before anything in
it is executed or imported: by qonnx, ONNX Runtime, or the FINN hand-off and dataflow.
"""

from __future__ import annotations

import sys

import numpy as np
import onnx
import pytest
import torch
from _shared import REPO
from _shared.configs import W8A8_IO
from _shared.models import batches, mlp
from _shared.quantize import quantize
from onnx import TensorProto, helper, numpy_helper

from quark.torch.extensions.brevitas._backend.export import safe_graph
from quark.torch.extensions.brevitas._backend.export.safe_graph import UnsafeGraphError
from quark.torch.extensions.brevitas.api import ModelExporter


def _graph(nodes, opsets=(("", 17),), initializers=(), ir_version=8) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        initializer=list(initializers),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets], ir_version=ir_version)


@pytest.fixture
def canary(tmp_path, monkeypatch):
    """A module that, when imported, leaves a file: the proof that a file made qonnx import it."""
    module = "quark_test_canary"
    (tmp_path / f"{module}.py").write_text(f"open({str(tmp_path / 'imported')!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, module, raising=False)
    return module, tmp_path / "imported"


def test_qonnx_imports_the_module_a_node_domain_names(tmp_path, canary):
    """The upstream behaviour the check guards against (qonnx.custom_op.registry); if this starts
    failing, qonnx stopped importing domains and the allow-list is belt and braces only."""
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.util.cleanup import cleanup_model

    module, imported = canary
    path = tmp_path / "evil.onnx"
    onnx.save(_graph([helper.make_node("Anything", ["x"], ["y"], domain=module)], opsets=(("", 17), (module, 1))), path)
    with pytest.raises(Exception, match="Custom op_type Anything is currently not supported"):
        cleanup_model(ModelWrapper(str(path)))
    assert imported.exists()


def test_finn_handoff_refuses_a_foreign_domain_before_importing_it(tmp_path, canary):
    from quark.torch.extensions.brevitas.api import finn_handoff

    module, imported = canary
    path = tmp_path / "evil.onnx"
    onnx.save(_graph([helper.make_node("Anything", ["x"], ["y"], domain=module)], opsets=(("", 17), (module, 1))), path)
    with pytest.raises(UnsafeGraphError, match=rf"(?s)evil.onnx: refused before execution .*node 'Anything' of domain '{module}' is not allowed"):
        finn_handoff(path, torch.zeros(1, 4))
    assert not imported.exists()


def test_finn_dataflow_refuses_a_foreign_domain_before_importing_it(tmp_path, canary):
    from quark.torch.extensions.brevitas._backend.targets.finn.dataflow import export_finn_dataflow

    module, imported = canary
    path = tmp_path / "evil.onnx"
    onnx.save(_graph([helper.make_node("Anything", ["x"], ["y"], domain=module)], opsets=(("", 17), (module, 1))), path)
    with pytest.raises(UnsafeGraphError, match=rf"node 'Anything' of domain '{module}' is not allowed"):
        export_finn_dataflow(path, np.zeros((1, 4), np.float32), tmp_path / "out")
    assert not imported.exists()


def _relu():
    return helper.make_node("Relu", ["x"], ["y"])


UNSAFE_GRAPHS = [
    pytest.param(
        _graph([helper.make_node("GenericPartition", ["x"], ["y"], domain="qonnx.custom_op.general", model="/etc/other.onnx")],
               opsets=(("", 17), ("qonnx.custom_op.general", 1))),
        r"node 'GenericPartition' of domain 'qonnx.custom_op.general' is not allowed",
        id="generic-partition-runs-another-file",
    ),
    pytest.param(
        _graph([helper.make_node("If", ["c"], ["y"], then_branch=helper.make_graph(
            [helper.make_node("Evil", [], ["t"], domain="os")], "then", [], [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 4])]),
            else_branch=helper.make_graph([], "else", [], []))], opsets=(("", 17), ("os", 1))),
        r"node 'Evil' of domain 'os' is not allowed",
        id="foreign-op-in-a-subgraph",
    ),
    pytest.param(_graph([_relu()], opsets=(("", 99),)), r"standard opset 99; allowed 7..26", id="opset-too-new"),
    pytest.param(_graph([_relu()], opsets=(("", 1),)), r"standard opset 1; allowed 7..26", id="opset-too-old"),
    pytest.param(_graph([helper.make_node("NoSuchOp", ["x"], ["y"])]), r"onnx.checker: .*NoSuchOp", id="unknown-standard-op"),
    pytest.param(_graph([helper.make_node("Relu", ["missing"], ["y"])]), r"onnx.checker: .*missing", id="dangling-input"),
    pytest.param(_graph([_relu()], ir_version=99), r"onnx.checker: .*ir_version", id="ir-version-too-new"),
]


@pytest.mark.parametrize(("model", "match"), UNSAFE_GRAPHS)
def test_graphs_that_may_not_run_are_refused(tmp_path, model, match):
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    with pytest.raises(UnsafeGraphError, match=match):
        safe_graph.load_checked(path)


def test_external_data_outside_the_directory_is_refused(tmp_path):
    weight = numpy_helper.from_array(np.ones((1, 4), np.float32), "w")
    weight.data_location = TensorProto.EXTERNAL
    weight.ClearField("raw_data")
    for key, value in {"location": "../../etc/passwd", "offset": "0", "length": "16"}.items():
        weight.external_data.add(key=key, value=value)
    path = tmp_path / "model.onnx"
    onnx.save(_graph([helper.make_node("Add", ["x", "w"], ["y"])], initializers=[weight]), path)
    with pytest.raises(UnsafeGraphError, match=r"tensor 'w' reads external data '../../etc/passwd' outside the file's directory"):
        safe_graph.load_checked(path)


def test_external_data_beside_the_file_is_accepted(tmp_path):
    model = _graph([helper.make_node("Add", ["x", "w"], ["y"])], initializers=[numpy_helper.from_array(np.ones((1, 4), np.float32), "w")])
    path = tmp_path / "model.onnx"
    onnx.save(model, path, save_as_external_data=True, location="weights.bin", size_threshold=0)
    loaded = safe_graph.load_checked(path)
    assert numpy_helper.to_array(loaded.graph.initializer[0]).tolist() == [[1.0] * 4]


@pytest.mark.parametrize("method", ["export_onnx_model", "export_qonnx_model"])
def test_the_package_s_own_exports_pass_the_check(tmp_path, method):
    path = tmp_path / "model.onnx"
    assert getattr(ModelExporter(path), method)(quantize(W8A8_IO, mlp(seed=0), batches(3)), torch.randn(2, 12)).passed
    safe_graph.load_checked(path)


def test_the_allow_list_rows_each_say_why():
    assert all(row.why for row in safe_graph.ALLOWED_OPS)
    assert {row.domain for row in safe_graph.ALLOWED_OPS} == {
        "",
        "ai.onnx",
        "qonnx.custom_op.general",
        "onnx.brevitas",
        "com.microsoft",
    }


def _quant(domain: str) -> onnx.ModelProto:
    """A QONNX ``Quant`` node of ``domain`` (its scale, zero point and bit width as initializers)."""
    inits = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("s", 0.5), ("z", 0.0), ("b", 8.0))]
    node = helper.make_node("Quant", ["x", "s", "z", "b"], ["y"], domain=domain, signed=1, narrow=0, rounding_mode="ROUND")
    return _graph([node], opsets=(("", 17), (domain, 1)), initializers=inits)


def _ms_quantize_linear() -> onnx.ModelProto:
    """ONNX Runtime's 16-bit ``QuantizeLinear`` (domain com.microsoft), as the A16W8 export writes it."""
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "s"), numpy_helper.from_array(np.array(0, np.int16), "z")]
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], domain="com.microsoft")
    return _graph([node], opsets=(("", 17), ("com.microsoft", 1)), initializers=inits)


#: allow-list row (by domain) -> (a graph of an op it allows, the graph's problems besides the allow list:
#: onnx.checker's, for a node naming the standard domain by its full name)
ALLOWED_CASES = {
    "": (lambda: _graph([_relu()]), []),
    "ai.onnx": (
        lambda: _graph([helper.make_node("Relu", ["x"], ["y"], domain="ai.onnx")]),
        ["onnx.checker: No opset import for domain 'ai.onnx'"],
    ),
    "qonnx.custom_op.general": (lambda: _quant("qonnx.custom_op.general"), []),
    "onnx.brevitas": (lambda: _quant("onnx.brevitas"), []),
    "com.microsoft": (lambda: _ms_quantize_linear(), []),
}


def test_every_allow_list_row_has_a_case():
    assert set(ALLOWED_CASES) == {row.domain for row in safe_graph.ALLOWED_OPS}


def _problems(model: onnx.ModelProto) -> list[str]:
    try:
        safe_graph.check(model)
    except UnsafeGraphError as error:
        return error.problems
    return []


@pytest.mark.parametrize("row", safe_graph.ALLOWED_OPS, ids=lambda row: row.domain or "standard")
def test_every_allow_list_row_lets_its_ops_through_and_no_other(row):
    """The row's op passes the allow list (the case's graph has no other problem than the listed
    ones); a custom domain's row lets only its ops through."""
    build, others = ALLOWED_CASES[row.domain]
    assert _problems(build()) == others
    if row.ops is not None:
        other = _graph([helper.make_node("GenericPartition", ["x"], ["y"], domain=row.domain)], opsets=(("", 17), (row.domain, 1)))
        assert [p.split(";")[0] for p in _problems(other)] == [f"node 'GenericPartition' of domain '{row.domain}' is not allowed"]


def test_the_allow_list_in_the_docs_is_current():
    docs = (REPO / "docs" / "export.md").read_text()
    assert safe_graph.markdown() in docs, "docs/export.md: paste the output of safe_graph.markdown()"
