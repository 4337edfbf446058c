"""Quantization-aware training helpers for models returned by ``ModelQuantizer``.

The quantized model trains in any ordinary PyTorch loop; these helpers cover the rest:

- :func:`freeze`: end of training. Fixes every quantization parameter and bakes weights that
  have learned (TQT) scales into their quantized values; outputs are unchanged, bit for bit.
- :func:`uncalibrated_quantizers`: the static activation quantizers that were neither calibrated
  nor loaded from a checkpoint (``quantize_model(..., calibrate=False)`` builds them so).
- :func:`load_float_weights`: copy a float model's state_dict into the quantized model; the
  quantizers' own state (scales, thresholds, flags) stays as it is.
- :func:`freeze_batch_norm`: stop the statistics of batch norms folded during QAT now.

Batch norm kept during QAT is folded into the layer before it (``TQTSpec.fold_batch_norm``, see
:mod:`.folding`); :func:`freeze` merges it, so the frozen model is that of merged batch norm.
Measured with ``benchmarks/digits_qat.py``, merging batch norm into the convolutions
before quantization (``pre_quant_opt_config=[Preprocess()]``) trains as well as keeping it float
during QAT, and the trained graph is then the deployed graph: nothing changes at freeze. What
keeps a run steady (unsigned grids on non-negative inputs above all; batch norm; thresholds'
learning rate), measured with ``benchmarks/qat_stability.py``: ``docs/qat.md``, "Steady runs".
"""

from __future__ import annotations

from typing import Any

import torch
from brevitas.core.scaling.standalone import ParameterScaling
from brevitas.proxy.parameter_quant import DecoupledWeightQuantProxyFromInjector, WeightQuantProxyFromInjector
from brevitas.proxy.quant_proxy import QuantProxyFromInjector
from torch import nn

from quark.torch.extensions.brevitas._backend import folding
from quark.torch.extensions.brevitas._backend.calibrate import require_calibrated, uncalibrated

__all__ = ["freeze", "freeze_batch_norm", "load_float_weights", "uncalibrated_quantizers"]


def freeze_batch_norm(model: nn.Module) -> int:
    """Stop the statistics of every batch norm folded during QAT from updating, now (PyTorch's
    ``freeze_bn_stats``; ``TQTSpec.freeze_batch_norm_steps`` does it after a number of steps);
    from then on those layers compute merged batch norm. Returns how many were frozen."""
    return folding.freeze_batch_norm(model)


def freeze(model: nn.Module, bake_weights: bool = True) -> nn.Module:
    """Fix all quantization parameters for deployment; returns ``model`` in eval mode.

    A layer with a batch norm folded in during QAT becomes the layer of merged batch norm (weight
    ``w * gamma / sqrt(running_var + eps)``, its bias folded likewise), with the same quantizers.

    Quantizer parameters (scales, thresholds, zero points) stop requiring gradients. A weight
    whose scale is a learned parameter (TQT) is replaced by its quantized value, on which its
    quantizer is the identity; weights whose scale derives from their own statistics keep their
    float values (baking would move the statistic and so the scale), and so do accumulator-aware
    weights (``A2QSpec``): their pre-clipping scale is the L1 norm of their zero-centred weights over
    g, which baking would move. A model with static activation
    quantizers that were never calibrated is refused (:class:`UncalibratedModelError`): freezing
    would fix placeholder scales. ``bake_weights=False`` keeps every weight's float values (outputs
    are unchanged either way).
    """
    require_calibrated(model, "freeze")
    folding.merge(model)
    model.eval()
    for proxy in model.modules():
        if isinstance(proxy, QuantProxyFromInjector):
            for param in proxy.parameters():
                param.requires_grad_(False)
    if not bake_weights:
        return model
    with torch.no_grad():
        for layer in model.modules():
            proxy = getattr(layer, "weight_quant", None)
            learned = isinstance(getattr(getattr(proxy, "tensor_quant", None), "scaling_impl", None), ParameterScaling)
            # weight-normalised quantizers (A2Q) divide by the weight's own norm: not the identity on their output
            normalised = isinstance(proxy, DecoupledWeightQuantProxyFromInjector)
            if isinstance(proxy, WeightQuantProxyFromInjector) and proxy.is_quant_enabled and learned and not normalised:
                layer.weight.copy_(layer.quant_weight().value)
    return model


def uncalibrated_quantizers(model: nn.Module) -> list[str]:
    """Names of static activation quantizers neither calibrated nor loaded from a checkpoint."""
    return uncalibrated(model)


def load_float_weights(quant_model: nn.Module, float_state_dict: dict[str, Any]) -> None:
    """Load a float model's weights into ``quant_model``.

    Every float key must exist in the quantized model (else ``KeyError`` listing them); the
    quantized model's extra keys, its quantizers' state, are left as they are. A batch norm folded
    into a layer during QAT takes its keys where it is now (``bn.weight`` -> ``conv.bn.weight``).
    """
    moved = folding.float_keys(quant_model)
    float_state_dict = {_moved(key, moved): value for key, value in float_state_dict.items()}
    for bn_prefix in moved.values():  # a float weight is w, not the folded weight an absorbed layer holds
        layer = bn_prefix[: -len("bn.")]
        if layer + "weight" in float_state_dict:
            float_state_dict[layer + "batch_norm_absorbed"] = torch.tensor(False)
    own = quant_model.state_dict()
    unknown = sorted(set(float_state_dict) - set(own))
    if unknown:
        raise KeyError(f"load_float_weights: keys not in the quantized model: {unknown[:20]}")
    quant_model.load_state_dict({**own, **float_state_dict})


def _moved(key: str, moved: dict[str, str]) -> str:
    prefix = next((p for p in moved if key.startswith(p)), None)
    return key if prefix is None else moved[prefix] + key[len(prefix) :]
