"""Point 3 of issue 11: files from strangers.

Config files load through the safe YAML / JSON loaders and ``from_dict`` builds only registered
classes; checkpoints load with ``weights_only=True``; an ONNX file is checked (``onnx.checker``,
opset, an op allow-list, external data) before anything in it is executed or imported.
"""

from __future__ import annotations

import ast
import io
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import quark.torch.extensions.brevitas.config as bcfg
from quark.torch.extensions.brevitas._backend.export import safe_graph
from quark.torch.extensions.brevitas._backend.export.safe_graph import UnsafeGraphError
from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer
from quark.torch.quantization.config.config import Config
from robustness.helpers import W8A8, batches, mlp, quantize

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*(ROOT / "quark").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py"), *(ROOT / "examples").rglob("*.py")])

# -- config files ----------------------------------------------------------------------------------

YAML_ATTACKS = [
    "!!python/object/apply:os.system ['echo owned']\n",
    "global_quant_config: !!python/object/apply:os.system ['echo owned']\n",
    "global_quant_config: !!python/name:os.system\n",
]


@pytest.mark.parametrize("text", YAML_ATTACKS)
@pytest.mark.parametrize("flavour", [Config, bcfg.Config], ids=["main", "extension"])
def test_yaml_with_python_tags_is_refused(tmp_path, text, flavour):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=r"config.yaml' is not a valid YAML config: could not determine a constructor for the tag"):
        flavour.load(path)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('{"global_quant_config": ', r"config.json' is not a valid JSON config: Expecting value"),
        ("[1, 2]", r"top level must be a mapping, got list"),
    ],
)
def test_malformed_json_is_named(tmp_path, text, match):
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        Config.load(path)


IMPORT_PATHS = [
    ({"weight": {"dtype": "int8", "observer_cls": "os.system"}}, None, r"observer_cls='os.system' is not a registered observer; allowed: \["),
    (
        {"weight": {"dtype": "int8", "observer_cls": "quark.torch.quantization.observer.PerTensorMinMaxObserver"}},
        None,
        r"is not a registered observer",
    ),
    ({"weight": {"dtype": "int8", "qat_spec": {"name": "subprocess.Popen"}}}, None, r"qat_spec name='subprocess.Popen' is not known; allowed: \['TQTSpec'\]"),
    ({"weight": {"dtype": "int8"}}, {"algo_config": [{"name": "builtins.eval"}]}, r"algo_config name='builtins.eval' is not known; allowed: \["),
    ({"weight": {"dtype": "int8"}}, {"pre_quant_opt_config": [{"name": "os.system", "command": "x"}]}, r"name='os.system' is not known"),
]


@pytest.mark.parametrize(("layer", "extra", "match"), IMPORT_PATHS)
def test_from_dict_resolves_names_only_from_registries(layer, extra, match):
    with pytest.raises(ValueError, match=match):
        Config.from_dict({"global_quant_config": layer, **(extra or {})})


def test_a_layer_type_key_is_a_name_compared_with_class_names_never_imported():
    config = Config.from_dict({"global_quant_config": {}, "layer_type_quant_config": {"os.system": {"weight": {"dtype": "int8"}}}})
    assert list(config.layer_type_quant_config) == ["os.system"]
    with pytest.raises(ValueError, match=r"layer_type_quant_config\['os.system'\]: os.system is not a quantizable layer type"):
        ModelQuantizer(config).quantize_model(mlp())


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield node, ast.unparse(node.func)


#: calls that resolve names to code, or load objects, from data; (file, call) pairs allowed, with why
RESOLVING_CALLS = {"importlib.import_module", "__import__", "import_module", "eval", "exec", "locate", "pydoc.locate",
                   "yaml.load", "yaml.unsafe_load", "yaml.full_load", "pickle.load", "pickle.loads", "getattr(importlib",
                   "importlib.util.spec_from_file_location"}  # fmt: skip
ALLOWED_RESOLVING = {
    # module names that backend packages register in code (add_backend), never read from a file
    ("quark/torch/quantization/config/algorithms/registry.py", "importlib.import_module"),
    # module names that config flavours announce in code (add_flavour), never read from a file
    ("quark/torch/quantization/flavours.py", "importlib.import_module"),
    # the command line's --model / --data-module: code the user names on the command line (a module or a
    # file.py), or the file a checkpoint recorded for the model the same user named when quantizing
    ("quark/torch/extensions/brevitas/cli/inputs.py", "importlib.import_module"),
    ("quark/torch/extensions/brevitas/cli/inputs.py", "importlib.util.spec_from_file_location"),
}


def test_no_source_resolves_import_paths_or_loads_pickles():
    found = set()
    for path in SOURCES:
        for _, name in _calls(ast.parse(path.read_text())):
            if name in RESOLVING_CALLS:
                found.add((str(path.relative_to(ROOT)), name))
    assert found == ALLOWED_RESOLVING


def test_every_torch_load_passes_weights_only_true():
    loads = []
    for path in [*SOURCES, *sorted((ROOT / "tests").rglob("*.py"))]:
        for call, name in _calls(ast.parse(path.read_text())):
            if name == "torch.load":
                keywords = {k.arg: k.value for k in call.keywords}
                weights_only = keywords.get("weights_only")
                loads.append((str(path.relative_to(ROOT)), isinstance(weights_only, ast.Constant) and weights_only.value is True))
    assert all(ok for _, ok in loads), [where for where, ok in loads if not ok]


def test_no_numpy_load_allows_pickles():
    allowing = []
    for path in [*SOURCES, *sorted((ROOT / "tests").rglob("*.py"))]:
        for call, _ in _calls(ast.parse(path.read_text())):
            if any(k.arg == "allow_pickle" and not (isinstance(k.value, ast.Constant) and k.value.value is False) for k in call.keywords):
                allowing.append(str(path.relative_to(ROOT)))
    assert allowing == []


def test_a_quantized_checkpoint_loads_with_weights_only():
    """The state of a quantized model (scales, zero points, calibrated flags) is plain tensors."""
    qmodel = quantize(mlp(), batches())
    buffer = io.BytesIO()
    torch.save(qmodel.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    fresh = ModelQuantizer(W8A8).quantize_model(mlp(seed=1), calibrate=False, progress=False)
    fresh.load_state_dict(state)
    x = torch.randn(4, 12)
    assert torch.equal(fresh(x), qmodel(x))


# -- ONNX files ------------------------------------------------------------------------------------


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
    assert getattr(ModelExporter(path), method)(quantize(mlp(), batches()), torch.randn(2, 12)).passed
    safe_graph.load_checked(path)


def test_the_allow_list_rows_each_say_why():
    assert all(row.why for row in safe_graph.ALLOWED_OPS)
    assert {row.domain for row in safe_graph.ALLOWED_OPS} == {"", "ai.onnx", "qonnx.custom_op.general", "onnx.brevitas"}


def test_the_allow_list_in_the_docs_is_current():
    docs = (ROOT / "docs" / "export.md").read_text()
    assert safe_graph.markdown() in docs, "docs/export.md: paste the output of safe_graph.markdown()"
