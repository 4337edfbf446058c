"""The width search's two searches on a synthetic cost table (no FINN run): the integer program's
front equals the brute-force Pareto front over every assignment, and the greedy walk is monotone
and never beats that front. The tables go through the real ``CostModel`` (folding choice, target,
capacity); only FINN's per-layer figures are made up."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from quark.torch.extensions.brevitas import search
from quark.torch.extensions.brevitas._backend.targets.finn.cost import CostModel, Option
from quark.torch.extensions.brevitas._backend.targets.finn.parts import resolve

BITS = (2, 3, 4, 8)
#: variables and the ones each hardware unit's cost depends on (as CostModel._depends traces them)
SPACE = [
    search.Variable("weight", "conv0", ("weight",), True),
    search.Variable("act", "relu0", ("output_tensors",), False),
    search.Variable("weight", "conv1", ("weight",), True),
    search.Variable("act", "relu1", ("output_tensors",), False),
]
DEPENDS = {0: ("conv0:weight", "relu0:act"), 1: ("conv1:weight", "relu0:act", "relu1:act"), 2: ("relu1:act",)}
CLOCK_MHZ, TARGET_FPS = 100.0, 100_000.0  # 1,000 cycles per frame


class TableCost(CostModel):
    """A CostModel whose per-layer options are given: each unit and width combination has a fast
    folding (meets the target) and a slow, cheaper one (does not); a few combinations have only the
    slow one. The part's LUTs are cut so that the widest networks do not fit."""

    def __init__(self, seed: int, lut_capacity: float):
        rng = np.random.default_rng(seed)
        part = resolve("xc7z020clg400-1")
        self.part = dataclasses.replace(part, capacity={**part.capacity, "LUT": lut_capacity})
        self.clock_mhz, self.target_fps, self.metric = CLOCK_MHZ, TARGET_FPS, "lut"
        self.names = [f"unit{u}" for u in DEPENDS]
        self.units, self.depends, self.owner = list(DEPENDS), dict(DEPENDS), {}
        self._cache, self.evaluations = {}, 0
        for unit, variables in DEPENDS.items():
            for combo in itertools.product(BITS, repeat=len(variables)):
                size = float(np.prod(combo))
                fast = {"LUT": float(rng.integers(1, 40)) * size, "BRAM_18K": float(rng.integers(0, 3)), "URAM": 0.0, "DSP": 0.0}
                slow = {**fast, "LUT": fast["LUT"] / 2}
                options = [Option({self.names[unit]: {"PE": 1}}, 4_000, slow, ("X",))]
                if rng.random() > 0.1:
                    options.append(Option({self.names[unit]: {"PE": 4}}, 900, fast, ("X",)))
                self._cache[(unit, combo)] = tuple(options)


def _sensitivity(seed: int) -> dict[tuple[str, int], float]:
    """Positive, rising as the width falls, 0 at 8 bits (as the PTQ sensitivities are, mostly)."""
    rng = np.random.default_rng(seed)
    found = {}
    for variable in SPACE:
        scale = rng.uniform(0.01, 1.0)
        for b in BITS:
            found[(variable.name, b)] = 0.0 if b == 8 else scale * rng.uniform(0.5, 1.5) * 2.0 ** (8 - b)
    return found


def _brute_force(cost, sensitivity):
    """Every assignment that fits and meets the target; the Pareto front of (LUT, summed sensitivity)."""
    feasible = []
    for values in itertools.product(BITS, repeat=len(SPACE)):
        widths = {v.name: b for v, b in zip(SPACE, values)}
        network = cost.cost(widths)
        if network.fits and network.meets_target:
            feasible.append((network.totals["LUT"], search.score(widths, sensitivity)))
    front, best = [], np.inf
    for lut, value in sorted(feasible):
        if value < best - 1e-12:
            front.append((lut, value))
            best = value
    return front, len(feasible)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_integer_programs_front_is_the_brute_force_front(seed):
    cost = TableCost(seed, lut_capacity=20_000)
    sensitivity = _sensitivity(seed)
    expected, feasible = _brute_force(cost, sensitivity)
    assert 0 < feasible < len(BITS) ** len(SPACE)  # the target and the capacity each exclude networks
    found = search.milp_front(cost, SPACE, sensitivity, BITS)
    assert [c.cost.totals["LUT"] for c in found] == [lut for lut, _ in expected]
    assert [c.score for c in found] == pytest.approx([value for _, value in expected], rel=1e-9, abs=1e-12)
    assert len(expected) >= 5  # a front worth tracing


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_greedy_walk_is_monotone_and_never_beats_the_exact_front(seed):
    cost = TableCost(seed, lut_capacity=20_000)
    sensitivity = _sensitivity(seed)
    greedy = search.greedy_front(cost, SPACE, sensitivity, BITS)
    assert greedy
    luts = [c.cost.totals["LUT"] for c in greedy]
    scores = [c.score for c in greedy]
    assert luts == sorted(luts) and all(a > b for a, b in itertools.pairwise(scores))
    for cheaper, dearer in itertools.pairwise(greedy):  # the walk only lowers widths
        assert all(cheaper.widths[v.name] <= dearer.widths[v.name] for v in SPACE)
    assert all(c.cost.fits and c.cost.meets_target for c in greedy)
    exact, _ = _brute_force(cost, sensitivity)
    for candidate in greedy:
        assert any(lut <= candidate.cost.totals["LUT"] and value <= candidate.score + 1e-12 for lut, value in exact)


def test_name_of_names_uniform_points_as_baselines():
    assert search.name_of({v.name: 4 for v in SPACE}, SPACE) == "W4A4"
    assert search.name_of(dict(zip([v.name for v in SPACE], (8, 3, 2, 4))), SPACE) == "w8.a3.w2.a4"
