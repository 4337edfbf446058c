"""The zoo: every model quantized with main-API configs, exported to both formats, executed and
compared. Exact graphs match torch bit for bit; the others within 1 LSB of the quantized output.
With the dynamo exporter, every failure is one the support table predicts."""

from __future__ import annotations

import pytest
from _shared.zoo import CONFIGS, ZOO, quantized

from quark.torch.extensions.brevitas.api import ModelExporter, UnsupportedExportError

METHODS = {"qcdq": "export_onnx_model", "qonnx": "export_qonnx_model"}
#: zoo models whose int8-pof2 graph is exact: all but the encoder (LayerNorm and softmax stay float); the batch
#: norm of tfc / cnv / resnet_bn is folded by the XINT8 preset (MergeBatchNorm)
EXACT_UNDER_POF2 = {"resnet", "mobilenet", "conv1d", "two_inputs", "concat", "tfc", "cnv", "resnet_bn"}


@pytest.fixture(scope="module")
def models():
    cache = {}

    def get(name, config):
        if (name, config) not in cache:
            cache[(name, config)] = quantized(name, config)
        return cache[(name, config)]

    return get


@pytest.mark.parametrize("fmt", METHODS)
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("name", ZOO)
def test_zoo_exports_and_verifies(tmp_path, models, name, config, fmt):
    qmodel, example = models(name, config)
    report = getattr(ModelExporter(tmp_path / f"{name}.onnx"), METHODS[fmt])(qmodel, example)
    assert report.passed
    assert all(o.lsb is not None for o in report.outputs)  # zoo outputs are quantized: LSBs are meaningful
    assert report.max_diff_lsb <= 1
    if config == "int8-pof2":
        assert report.exact is (name in EXACT_UNDER_POF2)
    if report.exact:
        assert report.max_abs_diff == 0 and report.tolerance_lsb == 0


@pytest.mark.slow
@pytest.mark.parametrize("fmt", METHODS)
@pytest.mark.parametrize("name", ["conv1d", "encoder", "two_inputs"])
def test_dynamo_zoo_fails_only_where_the_table_says(tmp_path, models, name, fmt):
    outcomes = {}
    for config in CONFIGS:
        qmodel, example = models(name, config)
        try:
            report = getattr(ModelExporter(tmp_path / f"{name}.onnx", dynamo=True), METHODS[fmt])(
                qmodel, example
            )
            outcomes[config] = "verified" if report.passed else "differs"
        except UnsupportedExportError:
            outcomes[config] = "refused"
    assert set(outcomes.values()) <= {"verified", "refused"}
    if name == "encoder":
        assert set(outcomes.values()) == {"refused"}
    if fmt == "qcdq":
        assert outcomes["int8-pof2"] == "refused"  # quantized int32 biases
