"""Point 3 of issue 11: files from strangers (the config layer and the sources).

Config files load through the safe YAML / JSON loaders and ``from_dict`` builds only registered
classes; no source resolves import paths from data or loads pickles; checkpoints load with
``weights_only=True``.
"""

from __future__ import annotations

import ast

import pytest
from _shared import REPO

import quark.torch.extensions.brevitas.config as bcfg
from quark.torch.quantization.config.config import Config

SOURCES = sorted([*(REPO / "quark").rglob("*.py"), *(REPO / "benchmarks").rglob("*.py"), *(REPO / "examples").rglob("*.py")])


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
    ({"weight": {"dtype": "int8", "qat_spec": {"name": "subprocess.Popen"}}}, None, r"qat_spec name='subprocess.Popen' is not known; allowed: \['A2QSpec', 'TQTSpec'\]"),
    ({"weight": {"dtype": "int8"}}, {"algo_config": [{"name": "builtins.eval"}]}, r"algo_config name='builtins.eval' is not known; allowed: \["),
    ({"weight": {"dtype": "int8"}}, {"pre_quant_opt_config": [{"name": "os.system", "command": "x"}]}, r"name='os.system' is not known"),
]


@pytest.mark.parametrize(("layer", "extra", "match"), IMPORT_PATHS)
def test_from_dict_resolves_names_only_from_registries(layer, extra, match):
    with pytest.raises(ValueError, match=match):
        Config.from_dict({"global_quant_config": layer, **(extra or {})})


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
    # quark.torch's lazy names (AMD Quark's entry points): module names in its own table, never read from a file
    ("quark/torch/__init__.py", "importlib.import_module"),
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
                found.add((str(path.relative_to(REPO)), name))
    assert found == ALLOWED_RESOLVING


def test_every_torch_load_passes_weights_only_true():
    loads = []
    for path in [*SOURCES, *sorted((REPO / "tests").rglob("*.py"))]:
        for call, name in _calls(ast.parse(path.read_text())):
            if name == "torch.load":
                keywords = {k.arg: k.value for k in call.keywords}
                weights_only = keywords.get("weights_only")
                loads.append((str(path.relative_to(REPO)), isinstance(weights_only, ast.Constant) and weights_only.value is True))
    assert all(ok for _, ok in loads), [where for where, ok in loads if not ok]


def test_no_numpy_load_allows_pickles():
    allowing = []
    for path in [*SOURCES, *sorted((REPO / "tests").rglob("*.py"))]:
        for call, _ in _calls(ast.parse(path.read_text())):
            if any(k.arg == "allow_pickle" and not (isinstance(k.value, ast.Constant) and k.value.value is False) for k in call.keywords):
                allowing.append(str(path.relative_to(REPO)))
    assert allowing == []
