"""The exact fixed-point types of the hls4ml target (:mod:`...targets.hls4ml.precision`), checked
against references written from the definitions: the bound of a dot product by enumerating the
corners of the input box, the width of a type by listing every integer it must hold, and the types
of an exported graph by executing it in qonnx on real digits and checking every tensor lies on its
grid and within its range."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from _shared.quantize import quantize

from quark.torch.examples import digits
from quark.torch.extensions.brevitas import presets
from quark.torch.extensions.brevitas._backend.targets.hls4ml.precision import (
    Fixed,
    PrecisionError,
    Precisions,
    _dot_bound,
    average_frac,
    frac_of,
)
from quark.torch.extensions.brevitas._backend.targets.hls4ml.project import prepare, quantized_input
from quark.torch.extensions.brevitas.api import ModelExporter


@pytest.mark.parametrize("lo, hi", [(0, 0), (0, 1), (0, 255), (-128, 127), (-129, 127), (-1, 0), (-5, 300), (3, 9)])
def test_width_is_the_least_that_holds_every_integer(lo, hi):
    fixed = Fixed(0, lo, hi)
    width = fixed.width
    if fixed.signed:
        representable = range(-(2 ** (width - 1)), 2 ** (width - 1))
        smaller = range(-(2 ** (width - 2)), 2 ** (width - 2)) if width > 1 else range(0)
    else:
        representable, smaller = range(2**width), range(2 ** (width - 1))
    assert lo in representable and hi in representable
    assert width == 1 or not (lo in smaller and hi in smaller)


def test_hls_spelling_puts_the_binary_point_at_the_scale():
    assert Fixed(8, 0, 255).hls() == "ufixed<8,0>"  # pixels k / 256
    assert Fixed(3, -8, 7).hls() == "fixed<4,1>"  # int4 at scale 1/8
    assert Fixed(-2, -8, 7).hls() == "fixed<4,6>"  # int4 at scale 4


def test_dot_bound_equals_the_extremes_over_the_input_box():
    rng = np.random.default_rng(0)
    for _ in range(20):
        rows = rng.integers(-8, 8, size=(3, 5))
        x = Fixed(0, int(rng.integers(-4, 1)), int(rng.integers(0, 6)))
        corners = np.array(list(itertools.product((x.lo, 0, x.hi), repeat=5)))  # zero: the padding
        sums = corners @ rows.T
        assert _dot_bound(x, rows) == (int(sums.min()), int(sums.max()))


@pytest.mark.parametrize("f, k, count", [(-1, 0, 3), (0, 0, 3), (2, 1, 36), (4, -1, 49), (1, 3, 5), (-2, -1, 9)])
def test_a_truncated_average_rounds_as_the_exact_one(f, k, count):
    """hls4ml divides a sum by N in its accumulator type, truncating to ``average_frac`` bits; then the
    next quantizer rounds half to even on grid 2^-k. Reference: exact rationals, every sum in a range."""
    from fractions import Fraction

    frac = average_frac(f, k, count)

    def half_even(value: Fraction) -> int:
        scaled = value * Fraction(2) ** k
        low = scaled.numerator // scaled.denominator
        rest = scaled - low
        return low + (rest > Fraction(1, 2) or (rest == Fraction(1, 2) and low % 2 == 1))

    for total in range(-300, 301):
        exact = Fraction(total) / Fraction(2) ** f / count
        truncated = Fraction((exact * 2**frac).numerator // (exact * 2**frac).denominator, 2**frac)
        assert half_even(truncated) == half_even(exact), (total, exact, truncated)


def test_a_tensor_zero_everywhere_is_spelled_on_the_integer_grid():
    """All-zero weights give [0, 0] on the product's grid (2^-46, say): ufixed<1,-45> broke ap_types."""
    assert Fixed(46, 0, 0).hls() == "ufixed<1,1>" and Fixed(46, 0, 0).aligned(50) == Fixed(50, 0, 0)


def test_width_of_negative_ranges_is_the_least():
    assert Fixed(0, -1, -1).width == 1 and Fixed(0, -8, -8).width == 4 and Fixed(0, -9, -3).width == 5


def test_a_scale_that_is_no_power_of_two_is_refused_by_name():
    assert frac_of(np.array([0.125]), "Quant q") == 3
    with pytest.raises(PrecisionError, match=r"Quant q: scale 0\.1 is not a power of two"):
        frac_of(np.array([0.1]), "Quant q")
    with pytest.raises(PrecisionError, match="differ within the tensor"):
        frac_of(np.array([0.5, 0.25]), "Quant q")


@pytest.fixture(scope="module")
def residual_graph(tmp_path_factory):
    """The digits ResidualCNN at W4A4 with the hls4ml preset, its QONNX as hls4ml reads it, and real inputs."""
    torch.manual_seed(0)
    data = digits.load()
    model = digits.ResidualCNN()
    digits.train(model, data, epochs=1)
    qmodel = quantize(presets.hls4ml(4, 4), model, data.loader("train"))
    path = tmp_path_factory.mktemp("hls4ml") / "model.onnx"
    ModelExporter(path).export_qonnx_model(qmodel, data.test.tensors[0][:1])
    return prepare(str(path)), data.test.tensors[0][:64].numpy()


def test_every_tensor_lies_on_its_grid_and_within_its_range(residual_graph):
    from qonnx.core.onnx_exec import execute_onnx

    model, x = residual_graph
    types = Precisions(model).types
    name = model.graph.input[0].name
    checked = set()
    for sample in quantized_input(model, np.moveaxis(x[:16], 1, -1)):  # the firmware's input: quantized
        context = execute_onnx(model, {name: sample[None].astype(np.float32)}, return_full_exec_context=True)
        for tensor, fixed in types.items():
            scaled = context[tensor].astype(np.float64) * 2.0**fixed.frac
            assert np.array_equal(scaled, np.round(scaled)), f"{tensor} off its grid 2^-{fixed.frac}"
            assert scaled.min() >= fixed.lo and scaled.max() <= fixed.hi, f"{tensor} outside [{fixed.lo}, {fixed.hi}]"
            checked.add(tensor)
    ops = {n.op_type for n in model.graph.node if n.output[0] in checked}
    assert {"Conv", "Add", "Relu", "MaxPool", "MatMul", "Quant"} <= ops
