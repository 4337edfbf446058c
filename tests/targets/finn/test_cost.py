"""The width search's cost model (``_backend/targets/finn/cost.py``) against FINN's full dataflow
estimate: on the digits ResidualCNN, a candidate's totals, at the folding the model chose, are
within 5 % of ``export_finn_dataflow``'s for uniform and mixed widths, and that folding meets the
target fps with no more of the resource than FINN's own SetFolding."""

from __future__ import annotations

import itertools

import pytest
import torch

pytest.importorskip(
    "finn.transformation.fpgadataflow.create_dataflow_partition",
    reason="finn-plus is not installed (pip install --no-deps finn-plus==1.6.1; see docs/export.md)",
)

from quark.torch.examples import digits
from quark.torch.extensions.brevitas import search
from quark.torch.extensions.brevitas.api import ModelExporter

PART, CLOCK_MHZ, TARGET_FPS = "xc7z020clg400-1", 100.0, 20_000
RESOURCES = ("LUT", "BRAM_18K", "URAM", "DSP")


@pytest.fixture(scope="module")
def network():
    data = digits.load(0)
    torch.manual_seed(0)
    model = digits.train(digits.ResidualCNN(), data, epochs=5, seed=0)
    x = torch.cat([batch[0] for batch in data.loader("test", batch_size=512)])
    return model, data, x


@pytest.fixture(scope="module")
def cost(network):
    model, data, x = network
    return search.build_cost_model(model, data.loader("train"), x[:8], part=PART, clock_mhz=CLOCK_MHZ, target_fps=TARGET_FPS)


def _mixed(space, pattern):
    return {v.name: pattern[i % len(pattern)] for i, v in enumerate(space)}


@pytest.mark.slow
@pytest.mark.parametrize("pattern", [(4,), (8,), (2, 8, 3), (8, 2, 4, 3)], ids=str)
def test_totals_within_5_percent_of_the_full_estimate(network, cost, pattern, tmp_path):
    model, data, x = network
    cost_model, space = cost
    widths = _mixed(space, pattern)
    predicted = cost_model.cost(widths)
    qmodel = search.quantize(model, data.loader("train"), search.config(widths, space))
    full = ModelExporter(tmp_path).export_finn_dataflow(
        qmodel, x[:8], part=PART, clock_mhz=CLOCK_MHZ, target_fps=TARGET_FPS, integer_input=True,
        folding=predicted.folding,
    ).estimate
    assert full.meets_target and predicted.meets_target
    assert predicted.max_cycles == full.max_cycles
    for resource in RESOURCES:
        assert predicted.totals[resource] == pytest.approx(full.totals[resource], rel=0.05, abs=1), resource
    # FINN's own folding for the same network and target uses at least as many LUTs
    finn = ModelExporter(tmp_path / "finn").export_finn_dataflow(
        qmodel, x[:8], part=PART, clock_mhz=CLOCK_MHZ, target_fps=TARGET_FPS, integer_input=True
    ).estimate
    assert full.totals["LUT"] <= finn.totals["LUT"] * 1.0001


@pytest.mark.slow
def test_every_candidate_is_priced_from_the_tables(cost):
    """No candidate runs FINN again: the tables hold every combination (benchmarks/width_pricing.py
    times the pricing)."""
    cost_model, space = cost
    evaluations = cost_model.evaluations
    prices = {pattern: cost_model.cost(_mixed(space, pattern)) for pattern in itertools.product((2, 3, 4, 8), repeat=3)}
    assert cost_model.evaluations == evaluations  # every combination was in the tables
    assert prices[(2, 2, 2)].totals["LUT"] < prices[(8, 8, 8)].totals["LUT"]  # and they are not all alike
