"""Sensitivity-driven A8/A16 mixing for the AMD NPU: promote the fewest activation sites from 8 to
16 bits until a metric on evaluation data is met (AMD Quark ONNX's AMP, on this package's configs).

::

    from quark.torch.extensions.brevitas import presets
    from quark.torch.extensions.brevitas.mixing import mix

    result = mix(presets.a8w8(), model, calib_batches, eval_batches, metric="cosine", target=0.995)
    print(result)                       # what was promoted, the metric before / after, what it costs
    result.config.save("mixed.yaml")     # a Quark Config: the base plus layer_quant_config entries

How: the model is quantized twice from ``config``, as it is and with every 8-bit integer activation
spec widened to 16 bits (same observer, symmetry, scale type and rounding). A site is a module of the
plan with an activation quantizer of its own (layerwise: a layer's input; graph mode: each activation,
addition, concatenation and network input). The sensitivity of a site is measured on the *calibration*
data (forward passes only) from the end the target is nearer (``ranking="auto"``): how much the metric
rises when that site alone takes the 16-bit model's quantizers (``"promotion"``, from all 8-bit), or
how much it falls when that site alone goes back to 8 bits with every other site at 16 (``"demotion"``,
from all 16-bit). Sites do not add up: measured on all-MiniLM-L6-v2 A8W8 in graph mode to a cosine
of 0.995, promotion gains ranked 41 of 75 sites to 16 bits, demotion losses 20 (held-out cosine
0.9955 and 0.9959; ``benchmarks/npu_precisions.py``). The fewest most sensitive sites whose promotion meets ``target`` on the *evaluation* data are
found by bisection over their count; a last pass drops every promoted site whose removal keeps the
target. The mixed
config is then quantized as it is (calibrated on ``calib_data``) and the metric measured again on the
evaluation data: that is ``metric_mixed``, and ``met`` says whether it reaches the target (the search
used the 16-bit model's quantizers, calibrated with every site at 16 bits; the config calibrates
each site on the mixed model's own values, which may move the metric a little).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from quark.torch.extensions.brevitas._backend import mixing as numerics
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.spec import ACTIVATION_ROLES
from quark.torch.quantization.config.type import Dtype
from quark.torch.quantization.tensor_quant import normalise

__all__ = ["METRICS", "MixResult", "SiteCost", "mix", "widened"]

logger = logging.getLogger(__name__)

METRICS = numerics.METRICS
#: 8-bit activation dtype -> its 16-bit promotion
WIDER: dict[Dtype, Dtype] = {Dtype.int8: Dtype.int16, Dtype.uint8: Dtype.uint16}


@dataclass(frozen=True)
class SiteCost:
    """One activation site: its sensitivity (on the calibration data, the metric gained when promoted
    alone, or lost when demoted alone: :func:`mix`'s ``ranking``) and the activation values its
    quantizers produce per sample."""

    name: str
    gain: float
    elements: int


@dataclass
class MixResult:
    """What :func:`mix` found. ``config``: the base config with a ``layer_quant_config`` entry per
    promoted site; ``promoted``: those sites, in the order they were promoted; ``sites``: every
    activation site, most sensitive first; ``metric_8bit`` / ``metric_mixed`` / ``metric_16bit``:
    the metric on the evaluation data with no / the promoted / every site at 16 bits."""

    config: Config
    promoted: list[str]
    sites: list[SiteCost]
    metric: str
    target: float
    metric_8bit: float
    metric_mixed: float
    metric_16bit: float
    met: bool
    metric_search: float = float("nan")  # the metric of the promoted set during the search (swapped quantizers)
    evaluations: list[tuple[int, float]] = field(default_factory=list)
    ranking: str = "promotion"  # how the sensitivities were measured (mix's ``ranking``)

    @property
    def fraction_16bit(self) -> float:
        """Fraction of the activation sites at 16 bits."""
        return len(self.promoted) / len(self.sites) if self.sites else 0.0

    @property
    def bytes_per_sample(self) -> tuple[int, int]:
        """Activation bytes the quantizers produce per sample: (all at 8 bits, mixed)."""
        base = sum(s.elements for s in self.sites)
        promoted = set(self.promoted)
        return base, base + sum(s.elements for s in self.sites if s.name in promoted)

    @property
    def values_16bit(self) -> float:
        """Fraction of the activation values (per sample) at 16 bits."""
        base = sum(s.elements for s in self.sites)
        promoted = set(self.promoted)
        return sum(s.elements for s in self.sites if s.name in promoted) / base if base else 0.0

    def __str__(self) -> str:
        base, mixed = self.bytes_per_sample
        lines = [
            (
                f"A8/A16 mixing, metric {self.metric}, target {self.target:g}: {'met' if self.met else 'NOT met'} "
                f"(sensitivities by {self.ranking})"
            ),
            (
                f"  evaluation {self.metric}: all 8-bit {self.metric_8bit:.6g}, mixed {self.metric_mixed:.6g}, "
                f"all 16-bit {self.metric_16bit:.6g}"
            ),
            (
                f"  sites at 16 bits: {len(self.promoted)} of {len(self.sites)} ({self.fraction_16bit:.1%}); "
                f"activation values at 16 bits {self.values_16bit:.1%}"
            ),
            f"  activation bytes per sample: {base:,} all 8-bit -> {mixed:,} mixed (+{mixed - base:,})",
        ]
        gains = {s.name: s for s in self.sites}
        lines += [
            f"  promoted {name} (calibration {self.ranking} sensitivity {gains[name].gain:+.3g}, "
            f"{gains[name].elements:,} values per sample)"
            for name in self.promoted
        ]
        return "\n".join(lines)


def widened(spec: QuantizationSpec, where: str = "spec") -> QuantizationSpec:
    """``spec`` with its 8-bit integer dtype widened to 16 bits, every other field kept."""
    if not isinstance(spec, QuantizationSpec) or spec.dtype not in WIDER:
        allowed = ", ".join(d.name for d in WIDER)
        raise ValueError(
            f"mix: {where} has dtype {getattr(spec, 'dtype', spec)!r}; mixing promotes 8-bit integer activation specs "
            f"({allowed}) to 16 bits"
        )
    return dataclasses.replace(spec, dtype=WIDER[spec.dtype])


def _activation_specs(config: Config) -> list[tuple[str, QuantizationSpec]]:
    levels = [("global_quant_config", config.global_quant_config)]
    levels += [(f"layer_type_quant_config[{k!r}]", c) for k, c in config.layer_type_quant_config.items()]
    levels += [(f"layer_quant_config[{k!r}]", c) for k, c in config.layer_quant_config.items()]
    return [
        (f"{label}.{role}", getattr(cfg, role))
        for label, cfg in levels
        for role in ACTIVATION_ROLES
        if getattr(cfg, role) is not None
    ]


def _wide_config(config: Config) -> Config:
    """``config`` with every activation spec widened (errors name a spec that cannot be)."""
    wide = copy.deepcopy(config)
    for cfg in [wide.global_quant_config, *wide.layer_type_quant_config.values(), *wide.layer_quant_config.values()]:
        for role in ACTIVATION_ROLES:
            spec = getattr(cfg, role)
            if spec is not None:
                setattr(cfg, role, widened(spec, role))
    return wide


def _mixed_config(config: Config, plans: dict[str, Any], promoted: list[str]) -> Config:
    """``config`` plus one ``layer_quant_config`` entry per promoted site: its own activation roles widened."""
    specs = _activation_specs(config)
    mixed = copy.deepcopy(config)
    for name in promoted:
        plan = plans[name]
        roles = {}
        for role in ACTIVATION_ROLES:
            tq = plan.specs.get(role)
            if tq is None or role in plan.upstream:
                continue
            source = next(
                (s for where, s in specs if s.dtype in WIDER and _normalised(s, role, where) == tq), None
            )
            if source is None:
                raise RuntimeError(f"mix: no 8-bit spec of the config gives {role} of {name!r} ({tq.describe()})")
            roles[role] = widened(source, role)
        entry = copy.deepcopy(config.layer_quant_config.get(name)) or QuantizationConfig()
        for role, spec in roles.items():
            setattr(entry, role, spec)
        mixed.layer_quant_config[name] = entry
    return mixed


def _normalised(spec: QuantizationSpec, role: str, where: str):
    try:
        return normalise(spec, role, where)
    except ValueError:
        return None


def _promotion_gains(evaluate: Callable[[list[str]], float], sites: list[str]) -> dict[str, float]:
    """The metric gained by each site promoted alone, from all 8-bit."""
    base = evaluate([])
    return {site: evaluate([site]) - base for site in sites}


def _demotion_losses(evaluate: Callable[[list[str]], float], sites: list[str]) -> dict[str, float]:
    """The metric lost by each site demoted alone, from all 16-bit."""
    full = evaluate(sites)
    return {site: full - evaluate([s for s in sites if s != site]) for site in sites}


#: how :func:`mix` measures the sensitivities: (evaluate(promoted sites), sites) -> {site: sensitivity}
RANKINGS: dict[str, Callable[[Callable[[list[str]], float], list[str]], dict[str, float]]] = {
    "promotion": _promotion_gains,
    "demotion": _demotion_losses,
}


def mix(
    config: Config,
    model: nn.Module,
    calib_data: Iterable[Any],
    eval_data: Iterable[Any],
    *,
    metric: str | Callable[[Any, Any], float] = "cosine",
    target: float,
    output_fn: Callable[[nn.Module, Any], Any] | None = None,
    prune: bool = True,
    sensitivity_batches: int | None = None,
    ranking: str = "auto",
) -> MixResult:
    """Promote the fewest activation sites of ``config`` from 8 to 16 bits until ``metric`` on
    ``eval_data`` reaches ``target``.

    Args:
        config: a main-API ``Config`` whose activation specs are 8-bit integers (``presets.a8w8()``,
            ``presets.xint8()``, or your own); layerwise or graph mode.
        model: the float model (unchanged).
        calib_data: calibration batches (any form ``quantize_model`` takes; a list, not a one-shot
            generator: it is read several times); also where the sensitivities are measured.
        eval_data: the batches the metric is checked on.
        metric: ``"cosine"`` (mean cosine similarity of each sample's outputs with the float model's),
            ``"sqnr"`` (dB), or a callable ``(reference, candidate) -> float``, higher is better, on the
            outputs of all batches concatenated along the samples.
        target: the metric to reach.
        output_fn: ``(model, batch) -> tensor`` compared by the metric (default: the model's first
            output; e.g. a sentence embedding for a transformer encoder).
        prune: after reaching the target, drop each promoted site (least sensitive first) whose
            removal keeps the target.
        sensitivity_batches: measure the sensitivities on the first this many calibration batches
            (default: all); one forward pass over them per site.
        ranking: ``"promotion"`` (the metric gained by each site promoted alone from all 8-bit),
            ``"demotion"`` (lost by each site demoted alone from all 16-bit), or ``"auto"``: the end whose
            metric on the evaluation data is nearer ``target``.

    Returns:
        A :class:`MixResult` (``print`` it for the report). When even every site at 16 bits misses the
        target, ``met`` is False and every site is promoted (a warning says so).
    """
    if not isinstance(config, Config):
        raise TypeError(
            f"mix(config=...): expected quark.torch.quantization.config.config.Config, got {type(config).__name__}"
        )
    score = METRICS.get(metric) if isinstance(metric, str) else metric
    if score is None or not callable(score):
        raise ValueError(f"mix(metric={metric!r}): allowed {sorted(METRICS)} or a callable (reference, candidate) -> float")
    if not isinstance(target, (int, float)):
        raise TypeError(f"mix(target={target!r}): expected a number")
    if ranking not in ("auto", *RANKINGS):
        raise ValueError(f"mix(ranking={ranking!r}): allowed 'auto', {', '.join(map(repr, RANKINGS))}")
    if sensitivity_batches is not None and (not isinstance(sensitivity_batches, int) or sensitivity_batches <= 0):
        raise ValueError(f"mix(sensitivity_batches={sensitivity_batches!r}): expected a positive integer or None")
    calib_data, eval_data = list(calib_data), list(eval_data)
    if not calib_data or not eval_data:
        raise ValueError("mix: calib_data and eval_data must each hold at least one batch")
    output_fn = output_fn or numerics.first_output
    wide_config = _wide_config(config)  # a spec that cannot be widened fails here, before any work
    name = metric if isinstance(metric, str) else getattr(metric, "__name__", "metric")

    quantizer = ModelQuantizer(config)
    narrow = quantizer.quantize_model(model, calib_data, progress=False)
    wide = ModelQuantizer(wide_config).quantize_model(model, calib_data, progress=False)
    plans = {p.name: p for p in quantizer.plans}
    site_names = [n for n, p in plans.items() if p.quantized and numerics.activation_proxies(narrow, n)]
    logger.info("mix: %d activation sites", len(site_names))

    sensitivity_data = calib_data[:sensitivity_batches]
    calib_ref = numerics.outputs(model, sensitivity_data, output_fn)
    eval_ref = numerics.outputs(model, eval_data, output_fn)

    def evaluate(promoted: list[str], reference, data) -> float:
        with numerics.Swap(narrow, wide, promoted):
            return score(reference, numerics.outputs(narrow, data, output_fn))

    metric_8 = evaluate([], eval_ref, eval_data)
    metric_16 = evaluate(site_names, eval_ref, eval_data)
    if ranking == "auto":
        ranking = "demotion" if abs(metric_16 - target) < abs(target - metric_8) else "promotion"
    gains = RANKINGS[ranking](lambda promoted: evaluate(promoted, calib_ref, sensitivity_data), site_names)
    elements = numerics.elements_per_sample(narrow, site_names, calib_data[0])
    order = sorted(site_names, key=lambda s: -gains[s])
    sites = [SiteCost(s, gains[s], elements[s]) for s in order]

    evaluations = {0: metric_8, len(order): metric_16}
    # the fewest most sensitive sites meeting the target: bisection over how many are promoted (the
    # metric rises with the count on the whole; every count tried is recorded)
    low, high = 0, len(order)
    if metric_8 < target <= metric_16:
        while high - low > 1:
            middle = (low + high) // 2
            evaluations[middle] = evaluate(order[:middle], eval_ref, eval_data)
            low, high = (low, middle) if evaluations[middle] >= target else (middle, high)
    count = 0 if metric_8 >= target else high
    promoted = order[:count]
    current = evaluations[count]
    met = current >= target
    if met and prune:
        for site in reversed(list(promoted)):
            trial = [s for s in promoted if s != site]
            value = evaluate(trial, eval_ref, eval_data)
            if value >= target:
                promoted, current = trial, value
    if not met:
        logger.warning(
            "mix: %s %.6g with every one of the %d sites at 16 bits is below the target %g", name, current, len(order), target
        )
    mixed_config = _mixed_config(config, plans, promoted)
    mixed_model = ModelQuantizer(mixed_config).quantize_model(model, calib_data, progress=False)
    measured = score(eval_ref, numerics.outputs(mixed_model, eval_data, output_fn))
    if met and measured < target:
        logger.warning(
            "mix: the mixed config, calibrated as it is, gives %s %.6g, below the target %g that the search reached "
            "(%.6g); promote more sites or lower the target",
            name,
            measured,
            target,
            current,
        )
    return MixResult(
        config=mixed_config,
        promoted=promoted,
        sites=sites,
        metric=name,
        target=float(target),
        metric_8bit=metric_8,
        metric_mixed=measured,
        metric_16bit=metric_16,
        met=measured >= target,
        evaluations=sorted(evaluations.items()),
        metric_search=current,
        ranking=ranking,
    )
