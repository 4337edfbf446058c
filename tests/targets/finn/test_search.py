"""The width search's two searches on a synthetic cost table (no FINN run): the integer program's
front equals the brute-force Pareto front over every assignment, and the greedy walk is monotone
and never beats that front. The tables go through the real ``CostModel`` (folding choice, target,
capacity); only FINN's per-layer figures are made up."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
import torch

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


# -- choosing the points to measure, the measured front -------------------------------------------------


@dataclasses.dataclass
class _Priced:
    totals: dict[str, float]


def _candidates(luts):
    return [search.Candidate({"v": i}, float(-i), _Priced({"LUT": float(lut)})) for i, lut in enumerate(luts)]


def test_spread_measures_points_evenly_over_the_metric_up_to_the_cap():
    front = _candidates([100, 101, 102, 103, 150, 190, 200, 260, 400])

    def names(chosen):
        return [c.cost.totals["LUT"] for c in chosen]

    assert names(search.spread(front, None, "LUT")) == [100, 101, 102, 103, 150, 190, 200, 260, 400]
    assert names(search.spread(front, None, "LUT", cap=200)) == [100, 101, 102, 103, 150, 190, 200]
    # 3 values evenly over 100..200: 100, 150, 200 (by index they would be 100, 103, 200)
    assert names(search.spread(front, 3, "LUT", cap=200)) == [100, 150, 200]
    assert names(search.spread(front, 20, "LUT", cap=120)) == [100, 101, 102, 103]
    assert search.spread(front, 2, "LUT", cap=50) == []


def _point(name, lut, accuracy, uniform=False):
    totals = {"LUT": float(lut), "BRAM_18K": 0.0, "URAM": 0.0, "DSP": 0.0}
    return search.Point(name, {}, uniform, 0.0, accuracy, totals, dict(totals), 1.0, {}, dict(totals))


def test_the_measured_front_keeps_the_points_nothing_matches_or_beats():
    points = [_point("a", 100, 90.0), _point("b", 120, 89.0), _point("c", 120, 95.0), _point("d", 150, 95.0),
              _point("e", 200, 97.0, uniform=True), _point("f", 90, 50.0)]
    assert [p.name for p in search.measured_front(points, "LUT")] == ["f", "a", "c", "e"]
    assert search.knee(points, "LUT").name == "e"  # within 0.5 points of the best: only e
    assert search.knee(points, "LUT", tolerance=2.0).name == "c"


# -- the QAT recipe ---------------------------------------------------------------------------------------------


class _Recorder(torch.nn.Module):
    """A linear model that records the samples of every training batch (their first feature is the index)."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(2, 3)
        self.seen: list[list[int]] = []

    def forward(self, x):
        if self.training:
            self.seen.append(x[:, 0].long().tolist())
        return self.linear(x)


def _indexed_batches(n=20, size=8):
    x = torch.stack([torch.arange(n, dtype=torch.float32), torch.linspace(-1, 1, n)], 1)
    y = torch.arange(n) % 3
    return [(x[i : i + size], y[i : i + size]) for i in range(0, n, size)]


def test_qat_reshuffles_every_epoch_by_its_seed_and_decays_the_learning_rate_to_zero(monkeypatch):
    rates = []
    step = torch.optim.Adam.step

    def recorded(self, *args, **kwargs):
        rates.append(self.param_groups[0]["lr"])
        return step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Adam, "step", recorded)
    runs = {}
    for seed in (0, 0, 1):
        torch.manual_seed(123)
        model = _Recorder()
        search.qat(model, _indexed_batches(), epochs=3, lr=0.01, seed=seed)
        runs.setdefault(seed, []).append((model.seen, model.linear.weight.detach().clone()))
    (seen, weight), (seen_again, weight_again) = runs[0]
    assert seen == seen_again and torch.equal(weight, weight_again)  # deterministic in its seed
    assert seen != runs[1][0][0]  # another seed, another order
    epochs = [[i for batch in seen[e * 3 : (e + 1) * 3] for i in batch] for e in range(3)]
    assert all(sorted(epoch) == list(range(20)) for epoch in epochs)  # every sample once an epoch
    assert epochs[0] != epochs[1]  # reshuffled (digits.train repeats one order)
    assert [len(b) for b in seen[:3]] == [8, 8, 4]  # the first batch's size
    assert rates[0] == pytest.approx(0.01) and rates[:9] == sorted(rates[:9], reverse=True)
    assert rates[8] == pytest.approx(0.01 * 0.5 * (1 + np.cos(np.pi * 8 / 9)))  # cosine to 0 at step 9


def test_the_cost_models_weights_are_the_measured_points_starting_weights():
    """The searched price uses the integer weights the measured point starts its QAT from: PTQ
    under the same qat_spec, whose TQT weight spec folds batch norm into the weights (without it the
    integers differ, so the check is not vacuous)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    model.train()
    with torch.no_grad():
        for _ in range(4):
            model(torch.randn(32, 12) * 3 + 1)
    model.eval()
    data = [(torch.rand(16, 12), torch.randint(0, 4, (16,))) for _ in range(2)]
    space = search.variables(model, data, qat_spec=search.QAT_SPEC)
    priced = search.integer_weights(model, data, space, (3,), qat_spec=search.QAT_SPEC)
    widths = {v.name: 3 for v in space}
    start = search.quantize(model, data, search.config(widths, space, qat_spec=search.QAT_SPEC))
    assert priced.keys() == search.weights_of(start, space, widths).keys()
    for key, values in search.weights_of(start, space, widths).items():
        assert np.array_equal(priced[key], values), key
    unfolded = search.integer_weights(model, data, space, (3,), qat_spec=None)
    assert any(not np.array_equal(unfolded[k], priced[k]) for k in priced)


# -- a measured point confirmed from its files ----------------------------------------------------------------


@pytest.fixture(scope="module")
def searched_mlp(tmp_path_factory):
    pytest.importorskip(
        "finn.transformation.fpgadataflow.create_dataflow_partition",
        reason="finn-plus is not installed (pip install --no-deps finn-plus==1.6.1; see docs/export.md)",
    )
    from _shared import models

    g = torch.Generator().manual_seed(0)
    x = torch.rand(192, 1, 4, 4, generator=g)
    y = x.flatten(1)[:, :4].argmax(1)
    train = [(x[i : i + 32], y[i : i + 32]) for i in range(0, 128, 32)]
    evaluation = [(x[128:], y[128:])]
    model = torch.nn.Sequential(torch.nn.Flatten(), *models.mlp((16, 32, 4), seed=0)).eval()
    out = tmp_path_factory.mktemp("confirm")
    data = search.search(model, train, evaluation, x[:8], out, target_fps=100_000, bits=(2, 4), qat_epochs=1,
                         points=1, progress=False)
    return model, evaluation, x[:8], out, data


@pytest.mark.slow
def test_confirm_reproduces_each_point_from_its_files_and_names_each_wrong_claim(searched_mlp):
    model, evaluation, example, out, data = searched_mlp
    where = {"part": data["part"], "clock_mhz": data["clock_mhz"], "target_fps": data["target_fps"]}
    assert {p["name"] for p in data["points"]} >= {"W2A2", "W4A4"}
    for point in data["points"]:
        confirmed = search.confirm(model, out, point, evaluation, example, **where)
        assert confirmed["problems"] == [], confirmed["problems"]
        assert confirmed["accuracy"] == point["accuracy"] and confirmed["estimate"]["LUT"] == point["LUT"]
    point = data["points"][0]
    wrong = {
        "accuracy": {**point, "accuracy": point["accuracy"] + 0.1},
        "predicted LUT": {**point, "predicted": {**point["predicted"], "LUT": point["LUT"] * 1.06}},
        "estimated LUT": {**point, "estimated": {**point["estimated"], "LUT": point["LUT"] * 0.94}},
        "fps": None,
    }
    for claim, tampered in wrong.items():
        if tampered is None:  # a target the point's folding cannot meet
            problems = search.confirm(model, out, point, evaluation, example, **{**where, "target_fps": point["fps"] * 10})["problems"]
        else:
            problems = search.confirm(model, out, tampered, evaluation, example, **where)["problems"]
        assert len(problems) == 1 and claim.split()[0] in problems[0], (claim, problems)
    # another point's checkpoint in this point's place: it does not load, or its accuracy is not the claim
    other = next(p for p in data["points"] if p["accuracy"] != point["accuracy"])
    swapped = {**point, "checkpoint": other["checkpoint"]}
    try:
        problems = search.confirm(model, out, swapped, evaluation, example, **where)["problems"]
    except RuntimeError:
        problems = ["does not load"]
    assert problems


# -- the network input's width searched ---------------------------------------------------------------------


def _tiny_mlp():
    from _shared import models

    g = torch.Generator().manual_seed(0)
    x = torch.rand(192, 1, 4, 4, generator=g)
    y = x.flatten(1)[:, :4].argmax(1)
    model = torch.nn.Sequential(torch.nn.Flatten(), *models.mlp((16, 32, 4), seed=0)).eval()
    return model, [(x[i : i + 32], y[i : i + 32]) for i in range(0, 128, 32)], x


def test_the_network_inputs_width_is_a_variable_only_when_asked_and_baselines_keep_8_bit_inputs():
    model, train, x = _tiny_mlp()
    assert [v.kind for v in search.variables(model, train)] == ["weight", "act", "weight"]
    space = search.variables(model, train, network_input=True)
    assert [v.kind for v in space] == ["input", "weight", "act", "weight"] and not space[0].signed
    assert search.uniform_widths(space, 4) == {space[0].name: 8, **{v.name: 4 for v in space[1:]}}
    assert search.name_of(search.uniform_widths(space, 4), space) == "W4A4"
    assert search.name_of({v.name: 4 for v in space}, space) == "i4.w4.a4.w4"  # a 4-bit input is not W4A4
    outputs = {}
    for bits in (2, 8):
        cfg = search.config({space[0].name: bits, **{v.name: 4 for v in space[1:]}}, space)
        assert cfg.layer_type_quant_config["GraphInput"].input_tensors.dtype.value == f"uint{bits}"
        with torch.no_grad():
            outputs[bits] = search.quantize(model, train, cfg)(x)
    assert not torch.equal(outputs[2], outputs[8])  # the model computes on the narrower input


@pytest.mark.slow
def test_the_cost_model_prices_the_network_inputs_width_as_the_full_estimate(tmp_path):
    pytest.importorskip("finn.transformation.fpgadataflow.create_dataflow_partition", reason="finn-plus is not installed")
    from quark.torch.extensions.brevitas.api import ModelExporter

    model, train, x = _tiny_mlp()
    cost, space = search.build_cost_model(model, train, x[:8], target_fps=100_000, bits=(2, 4, 8), network_input=True,
                                          qat_spec=search.QAT_SPEC)
    first = next(u for u in cost.units if cost.names[u].startswith("MVAU"))
    assert space[0].name in cost.depends[first]  # the first layer's cost depends on the input's width
    luts = {}
    for bits in (2, 8):
        widths = {space[0].name: bits, **{v.name: 4 for v in space[1:]}}
        predicted = cost.cost(widths)
        qmodel = search.quantize(model, train, search.config(widths, space, qat_spec=search.QAT_SPEC))
        full = ModelExporter(tmp_path / f"i{bits}").export_finn_dataflow(
            qmodel, x[:8], target_fps=100_000, integer_input=True, folding=predicted.folding
        )
        assert full.verification.identical_predictions == full.verification.samples
        for resource in ("LUT", "BRAM_18K", "DSP"):
            assert predicted.totals[resource] == pytest.approx(full.estimate.totals[resource], rel=0.05, abs=1), resource
        luts[bits] = predicted.totals["LUT"]
    assert luts[2] < luts[8]


def test_sensitivities_after_qat_train_every_variant_and_the_reference(monkeypatch):
    model, train, _ = _tiny_mlp()
    space = search.variables(model, train, qat_spec=search.QAT_SPEC)
    ptq = search.sensitivities(model, train, space, (2, 8), qat_spec=search.QAT_SPEC)
    calls = []
    trained = search.qat

    def counted(qmodel, data, epochs, **kwargs):
        calls.append(epochs)
        return trained(qmodel, data, epochs, **kwargs)

    monkeypatch.setattr(search, "qat", counted)
    after = search.sensitivities(model, train, space, (2, 8), qat_spec=search.QAT_SPEC, qat_epochs=1)
    assert calls == [1] * (1 + len(space))  # the reference and each variable at 2 bits
    assert after.keys() == ptq.keys() and all(after[(v.name, 8)] == 0.0 for v in space)
    assert all(after[(v.name, 2)] != ptq[(v.name, 2)] for v in space)
