"""Point 1 of issue 11: bad input gets one clear error and changes nothing (exports: paths and example inputs)."""

from __future__ import annotations

import pytest
import torch
from _shared.configs import W8A8_IO
from _shared.models import batches, mlp
from _shared.quantize import assert_unchanged, quantize, snapshot

from quark.torch.extensions.brevitas._backend.data import BatchError
from quark.torch.extensions.brevitas.api import ModelExporter


@pytest.fixture(scope="module")
def qmodel():
    return quantize(W8A8_IO, mlp(seed=0), batches(3))


def test_export_into_a_missing_directory_creates_it(qmodel, tmp_path):
    path = tmp_path / "new" / "deeper" / "model.onnx"
    report = ModelExporter(path).export_onnx_model(qmodel, torch.randn(2, 12))
    assert report.passed and path.is_file()
    assert sorted(p.name for p in path.parent.iterdir()) == ["model.onnx"]  # no temporary file left


def test_export_to_a_directory_is_refused_before_exporting(qmodel, tmp_path):
    before = snapshot(qmodel)
    with pytest.raises(IsADirectoryError, match=r"is a directory; give the path of a file to write"):
        ModelExporter(tmp_path).export_onnx_model(qmodel, torch.randn(2, 12))
    assert_unchanged(before, qmodel)


def test_export_below_a_file_is_refused_before_exporting(qmodel, tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match=r"file'? is a file, not a directory"):
        ModelExporter(tmp_path / "file" / "model.onnx").export_qonnx_model(qmodel, torch.randn(2, 12))
    assert (tmp_path / "file").read_text() == "x"


def test_export_inputs_with_nan_are_named(qmodel, onnx_path):
    with pytest.raises(BatchError, match=r"export input 'input' \(float32\[2, 12\]\) holds 24 NaN"):
        ModelExporter(onnx_path).export_onnx_model(qmodel, torch.full((2, 12), float("nan")))
    assert not onnx_path.exists()
