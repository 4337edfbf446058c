"""docs/quark013.md is generated from the code and stays in sync; every public name of AMD Quark
0.13's config API is importable here and has its row."""

from __future__ import annotations

from pathlib import Path

import pytest

from quark.torch.quantization import quark013
from quark.torch.quantization.config import config as config_module
from quark.torch.quantization.config.algorithms import ALGO_CONFIGS, QUARK013_ALGORITHMS
from quark.torch.quantization.config.datatype_specs import DATA_TYPE_SPECS
from quark.torch.quantization.observer import OBSERVERS

DOC = Path(__file__).resolve().parents[2] / "docs" / "quark013.md"


def test_quark013_doc_is_current():
    expected = quark013.DOC_HEADER + "\n" + quark013.markdown() + "\n"
    assert DOC.read_text() == expected, "regenerate: python -m quark.torch.quantization.quark013 > docs/quark013.md"


def _named() -> set[str]:
    return {part.strip() for section in quark013.rows().values() for row in section for part in row.name.split("/")}


@pytest.mark.parametrize("name", quark013.QUARK013_NAMES)
def test_every_quark013_config_name_is_importable_and_listed(name):
    assert hasattr(config_module, name), name
    assert name in _named()


def test_every_helper_observer_and_algorithm_config_has_a_row():
    named = _named()
    assert set(DATA_TYPE_SPECS) <= named
    assert set(quark013.QUARK_OBSERVERS) <= named and set(quark013.QUARK_OBSERVERS) <= set(OBSERVERS)
    assert {cls.__name__ for cls in QUARK013_ALGORITHMS} <= named
    assert all(cls in ALGO_CONFIGS.values() for cls in QUARK013_ALGORITHMS)


def test_rows_agree_with_the_behaviour():
    rows = {row.name: row for section in quark013.rows().values() for row in section}
    assert rows["AmdFP4Spec"].status == quark013.REFUSED and "float8_e5m3" in rows["AmdFP4Spec"].what
    assert rows["OCP_MXFP4Spec"].status == quark013.HONOURED and "mx fp4 block 32 e8m0 even" in rows["OCP_MXFP4Spec"].what
    assert rows["GPTAQConfig"].status == quark013.REFUSED and rows["QronosConfig"].status == quark013.MAPPED
    assert rows["MX6Spec"].status == quark013.BETTER
