"""Accumulator-aware weights (``A2QSpec``): the bound, EP-init, and the promises a built model makes.

- :func:`l1_bound`: the largest L1 norm of a channel's integer weights that keeps its dot product with
  any N-bit input within a signed P-bit accumulator (A2Q's and A2Q+'s, as Brevitas computes them in
  ``AccumulatorAwareParameterPreScaling.calc_max_l1_norm``).
- :func:`ep_init`: the A2Q+ paper's Euclidean-projection initialisation of a freshly built layer,
  by Brevitas' own ``apply_ep_init`` (``brevitas_examples.imagenet_classification.a2q.ep_init``).
  ``mapping.build_layer`` runs it on every accumulator-aware layer it builds, so both backends give
  layers that start inside the bound.
- :func:`promises`: every accumulator-aware layer of a built model, with its promised width, weight
  bits, input grid and dot-product length (the FINN export checks and reports them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from quark.torch.extensions.brevitas._backend.quantizers import AccumulatorAwareWeightProxy


def l1_bound(accumulator_bits: int, input_bits: int, input_signed: bool, zero_centered: bool) -> float:
    """The bound on ``||q||_1`` per output channel.

    A2Q (Colbert et al. 2023, eq. 12): ``(2^(P-1) - 1) * 2^(signed - N)``: |q . x| <= ||q||_1 max|x|
    with max|x| = 2^(N-1) (signed) or < 2^N (unsigned). A2Q+ (Colbert et al. 2024): with zero-centred
    weights the positive and negative parts of q each hold at most half the norm, and q . x ranges
    over (2^N - 1) times a part: ``(2^P - 2) / (2^N - 1)``, whatever the sign of the input.
    """
    if zero_centered:
        return (2.0**accumulator_bits - 2.0) / (2.0**input_bits - 1.0)
    return (2.0 ** (accumulator_bits - 1) - 1.0) * 2.0 ** (int(input_signed) - input_bits)


def narrowest_useful(input_bits: int, input_signed: bool, zero_centered: bool) -> int:
    """The smallest accumulator width at which a channel may hold a nonzero integer weight: A2Q needs
    ``||q||_1 >= 1`` within the bound, A2Q+ a positive and a negative unit (its parts hold half the
    bound each)."""
    need = 2.0 if zero_centered else 1.0
    return next(p for p in range(2, 65) if l1_bound(p, input_bits, input_signed, zero_centered) >= need)


def worst_case_bits(weight_bits: int, input_bits: int, input_signed: bool, length: int) -> int:
    """Signed accumulator bits of a dot product of ``length`` weights of the signed ``weight_bits``
    type (INT<b>: -2^(b-1) .. 2^(b-1) - 1) with any input on the ``input_bits`` grid, without a bound
    on the weights: the width an unconstrained layer needs in the worst case. FINN's data-type bound
    (``MinimizeAccumulatorWidth`` with ``datatype_only``: every weight at the type's minimum or
    maximum), then its rule: ``ceil(log2(max(-min, 1 + max))) + 1``."""
    weights = (-(2 ** (weight_bits - 1)), 2 ** (weight_bits - 1) - 1)
    inputs = (-(2 ** (input_bits - 1)), 2 ** (input_bits - 1) - 1) if input_signed else (0, 2**input_bits - 1)
    products = [length * w * x for w in weights for x in inputs]
    low, high = min(products), max(products)
    return math.ceil(math.log2(max(-low, 1 + high))) + 1


def layers(model: nn.Module) -> list[tuple[str, nn.Module, AccumulatorAwareWeightProxy]]:
    """(name, layer, proxy) of every layer of ``model`` whose weight quantizer is accumulator-aware."""
    found = []
    for name, module in model.named_modules():
        proxy = getattr(module, "weight_quant", None)
        if isinstance(proxy, AccumulatorAwareWeightProxy) and proxy.is_quant_enabled:
            found.append((name, module, proxy))
    return found


@dataclass(frozen=True)
class Promise:
    """What an accumulator-aware layer promises: its signed accumulator width, and what that bounds."""

    module: str
    accumulator_bits: int
    method: str  # "A2Q+" or "A2Q"
    weight_bits: int
    input_bits: int
    input_signed: bool
    dot_length: int  # weights per output channel (the dot product's length)
    channel_norms: tuple[int, ...]  # ||q||_1 of each output channel's integer weights, as trained

    @property
    def unconstrained_bits(self) -> int:
        """Signed bits the same layer needs in the worst case without the bound (:func:`worst_case_bits`)."""
        return worst_case_bits(self.weight_bits, self.input_bits, self.input_signed, self.dot_length)


def integer_weights(layer: nn.Module) -> torch.Tensor:
    """The layer's integer weights q (its quantized weight over its scale, rounded: exact on the grid)."""
    with torch.no_grad():
        quant = layer.quant_weight()
        return torch.round(quant.value / quant.scale)


def promises(model: nn.Module) -> dict[str, Promise]:
    """Module name -> :class:`Promise` of every accumulator-aware layer of ``model``."""
    found = {}
    for name, layer, proxy in layers(model):
        spec = proxy.quant_injector.quark_spec
        norms = integer_weights(layer).abs().flatten(1).sum(1)
        found[name] = Promise(
            name,
            spec.accumulator_bits,
            "A2Q+" if spec.zero_centered else "A2Q",
            spec.bit_width,
            int(proxy.input_bit_width),
            proxy.input_signed,
            layer.weight[0].numel(),
            tuple(int(v) for v in norms.tolist()),
        )
    return found


class _QuantizeWeights(nn.Module):
    """What Brevitas' ``apply_ep_init`` runs as ``model(inp)``: it only needs the forward to reach each
    layer's A2Q pre-scaling module with (weights, input bit width, input sign). Brevitas reads the
    last two from the layer's quantized input; our proxy has them from the plan, so quantizing the
    weights (``quant_weight()``) reaches it without data."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, _: torch.Tensor) -> torch.Tensor:
        return self.layer.quant_weight().value


def ep_init(layer: nn.Module) -> None:
    """EP-init (Colbert et al. 2024, A2Q+ section 4.2) of a freshly built accumulator-aware layer, in
    place: its float weights are projected per output channel onto the L1 ball of radius
    ``scale x bound`` (Duchi et al.'s projection) and the weight-norm parameter g is clamped to that
    radius, so that training starts inside the bound instead of from a clamped g. Brevitas'
    ``apply_ep_init`` itself, run on the layer alone (it projects ``nn.Linear`` and ``nn.Conv2d``
    weights, the layers ``rules/layers.py`` admits). Without data: see :class:`_QuantizeWeights`.
    The layer's training mode is kept (``apply_ep_init`` leaves the model in eval mode)."""
    if not any(isinstance(m, AccumulatorAwareWeightProxy) and m.is_quant_enabled for m in layer.modules()):
        return
    from brevitas_examples.imagenet_classification.a2q.ep_init import apply_ep_init

    training = layer.training
    weight = layer.weight
    with torch.inference_mode(False):
        apply_ep_init(_QuantizeWeights(layer), torch.zeros(()))
    layer.train(training)
    if layer.weight is not weight:  # the parameter object must stay the one optimizers hold
        raise RuntimeError("EP-init replaced the layer's weight parameter")
