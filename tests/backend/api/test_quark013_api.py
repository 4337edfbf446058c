"""Every public name of AMD Quark 0.13's main modules (recorded once from the amd-quark 0.13 wheel:
``tests/_reference/quark013_public_names.json``) against this package's: each is in the table of
``quark013_api`` (the table of ``docs/quark013.md``) and does what its row says: a provided name
resolves to an object of the recorded kind, a refused one raises naming itself and the row's reason
(on use for the stubs, on import for Quark's internals, also through ``from module import name``),
and Quark's own imports come from outside Quark."""

from __future__ import annotations

import importlib
import inspect
import json

import pytest
from _shared import REPO

from quark.torch.quantization.quark013_api import (
    API_NAMES,
    IMPORTED,
    PROVIDED,
    REFUSED,
    QuarkFeatureRefused,
    QuarkNameRefused,
)

RECORDED = json.loads((REPO / "tests" / "_reference" / "quark013_public_names.json").read_text())["modules"]
CASES = [(module, name) for module, names in RECORDED.items() for name in sorted(names)]
#: the recorded kind of an object -> what it must be here
KINDS = {"class": inspect.isclass, "function": callable, "module": inspect.ismodule}


def test_the_recording_holds_the_modules_the_issue_names():
    assert set(RECORDED) == set(API_NAMES)
    assert len(RECORDED["quark.torch.quantization.config.config"]) == 125  # the count AMD's module has


@pytest.mark.parametrize("module", sorted(RECORDED))
def test_the_table_has_exactly_the_recorded_names(module):
    assert set(API_NAMES[module]) == set(RECORDED[module])


@pytest.mark.parametrize(("module", "name"), CASES)
def test_each_name_resolves_or_refuses_as_its_row_says(module, name):
    status, what = API_NAMES[module][name]
    kind, origin = RECORDED[module][name]
    mod = importlib.import_module(module)
    if status == PROVIDED:
        value = getattr(mod, name)
        assert KINDS.get(kind, lambda v: True)(value), (name, kind, value)
        assert getattr(value, "refusal", None) is None and not str(getattr(value, "__doc__", "")).startswith("Refused")
    elif status == REFUSED:
        try:
            value = getattr(mod, name)
        except QuarkNameRefused as error:  # Quark's internals: refused on import, naming it and why
            assert f"{module}.{name}: {what}" == str(error)
            with pytest.raises(QuarkNameRefused, match=name):
                exec(f"from {module} import {name}", {})  # noqa: S102  (the reason survives from-imports)
        else:  # a stub: exists, refuses when used
            with pytest.raises(QuarkFeatureRefused) as raised:
                value()
            assert name in str(raised.value) and what in str(raised.value)
    else:
        assert status == IMPORTED
        assert not (origin or "").startswith("quark") or kind == "module", (name, origin)
        try:
            getattr(mod, name)  # this module may have it too (typing.Any, ...)
        except QuarkNameRefused as error:  # else reading it says where it comes from
            assert f"{name}: Quark's module imports it from `{what.split('`')[1]}`" in str(error)


def test_quark_entry_points_import_as_quark_scripts_write_them():
    from quark.torch import (  # noqa: F401
        ModelExporter,
        ModelQuantizer,
        export_onnx,
        export_safetensors,
        import_model_from_safetensors,
        load_params,
        save_params,
    )
    from quark.torch.extensions.brevitas.api import ModelQuantizer as ExtensionQuantizer

    assert ModelQuantizer is ExtensionQuantizer  # one machinery, two entry points


def test_an_unknown_name_is_a_plain_attribute_error():
    import quark.torch

    with pytest.raises(AttributeError, match="no attribute 'nothing_of_quark'") as raised:
        quark.torch.nothing_of_quark  # noqa: B018
    assert not isinstance(raised.value, ImportError)
