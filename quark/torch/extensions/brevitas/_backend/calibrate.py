"""Calibration: observe static activation quantizers' inputs, then set their scales and zero points.

Every static activation proxy built by :mod:`.mapping` carries its normalised spec; calibration
attaches that spec's observer to the proxy's input, runs the batches through the model with
activation quantization disabled (weights stay quantized), and writes the observed range into the
proxy's learned scale (and zero point), from which Brevitas computes Quark's scale.

It also watches the sign of every input to a signed symmetric integer quantizer and names those
that never saw a negative value (an image in [0, 1], a ReLU output): they use half of their grid
(a warning below 8 bits, an info message from 8 bits on). Measured with
``benchmarks/qat_stability.py`` on the digits CNN, unsigned inputs instead of signed ones were the
largest single gain of W4A4 and W2A2 TQT QAT.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from brevitas.graph.calibrate import QuantizationStatusManager
from brevitas.proxy.parameter_quant import BiasQuantProxyFromInjector, WeightQuantProxyFromInjectorBase
from brevitas.proxy.runtime_quant import ActQuantProxyFromInjectorBase
from brevitas.quant_tensor import _unpack_quant_tensor
from torch import nn

from quark.common.errors import RefusedError
from quark.torch.extensions.brevitas._backend import data
from quark.torch.quantization.config.type import Dtype
from quark.torch.quantization.observer import PerTensorMinMaxObserver
from quark.torch.quantization.tensor_quant import Format, TensorQuant

logger = logging.getLogger(__name__)

#: buffer on every static activation quantizer: True once calibrated (saved in state_dict).
CALIBRATED_FLAG = "quark_calibrated"
#: the largest calibrated threshold (see set_range)
MAX_THRESHOLD = 2.0**127


def add_calibrated_flags(model: nn.Module) -> None:
    """Give every static activation quantizer its (persistent) calibrated flag, set to False."""
    for _, proxy, _ in static_act_proxies(model):
        if not hasattr(proxy, CALIBRATED_FLAG):
            proxy.register_buffer(CALIBRATED_FLAG, torch.zeros((), dtype=torch.bool))


def static_act_proxies(model: nn.Module) -> list[tuple[str, ActQuantProxyFromInjectorBase, TensorQuant]]:
    """Activation quantizers of ``model`` built from a Quark spec that take their range from calibration."""
    found = []
    for name, proxy in model.named_modules():
        if isinstance(proxy, ActQuantProxyFromInjectorBase) and proxy.is_quant_enabled:
            injector = proxy.quant_injector  # a stock Brevitas injector has no quark_spec (and raises on getattr)
            spec = injector.quark_spec if "quark_spec" in injector else None
            if spec is not None and spec.needs_calibration:
                found.append((name, proxy, spec))
    return found


class UncalibratedModelError(RefusedError):
    """A model whose static activation quantizers were never calibrated was exported or frozen."""


#: what to tell someone holding a model that is not calibrated
HOW_TO_CALIBRATE = (
    "ModelQuantizer(config).quantize_model(model, calib_loader), "
    "quark.torch.extensions.brevitas.api.calibrate(qmodel, calib_loader), an algorithm's "
    "apply(qmodel, calib_loader) (GPTQ, GPFQ, GPFA2Q, Qronos, BiasCorrection, CalibrateBatchNorm, ... calibrate "
    "first), or a calibrated checkpoint (load_state_dict)"
)


def uncalibrated(model: nn.Module) -> list[str]:
    """Names of the static activation quantizers neither calibrated nor loaded from a checkpoint."""
    return [name for name, proxy, _ in static_act_proxies(model) if not bool(getattr(proxy, CALIBRATED_FLAG, True))]


def require_calibrated(model: nn.Module, action: str) -> None:
    """Raise :class:`UncalibratedModelError` if ``model`` has uncalibrated static activation quantizers:
    their scales are placeholders (1.0), so whatever ``action`` produces would be meaningless."""
    names = uncalibrated(model)
    if names:
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        raise UncalibratedModelError(
            f"{action}: {len(names)} static activation quantizers were never calibrated ({shown}); their scales "
            f"are placeholders. Calibrate them first: {HOW_TO_CALIBRATE}"
        )


def calibrate_on_first_call(model: nn.Module) -> None:
    """AMD Quark's warm-up of trained quantizers (``TQTObserver``, ``LSQObserver``), for a model quantized
    with an empty calibration list (Quark's QAT scripts pass ``[]`` and train directly): the model's
    first call calibrates its static activation quantizers on that call's inputs, then runs as called.

    Only trained thresholds and scales (TQT, LSQ) start so: their starting point is what training moves
    from. Any other uncalibrated static quantizer is a ``ValueError`` naming them (an empty calibration
    list for those is a mistake: their range would come from one batch and never move).
    """
    fixed = [name for name, _, spec in static_act_proxies(model) if not (spec.tqt or spec.lsq)]
    if fixed:
        shown = ", ".join(fixed[:5]) + (f" and {len(fixed) - 5} more" if len(fixed) > 5 else "")
        raise ValueError(
            f"calibration received no batch (calib_loader / dataloader is empty), and {len(fixed)} static activation "
            f"quantizers take their range from it ({shown}); only trained TQT / LSQ quantizers (TQTObserver with "
            "qat_spec=TQTSpec(...), LSQObserver) may start from the first training batch. Pass calibration batches"
        )
    model.register_forward_pre_hook(_calibrate_on_this_call, with_kwargs=True)
    logger.info(
        "no calibration batch: the %d TQT / LSQ activation quantizers calibrate on the model's first call, as AMD "
        "Quark's TQTObserver / LSQObserver warm up",
        len(static_act_proxies(model)),
    )


def _calibrate_on_this_call(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """The forward pre-hook of :func:`calibrate_on_first_call` (a module-level function, so that the model
    still deep-copies and pickles): removes itself, then calibrates on this call's inputs."""
    for key in [key for key, hook in model._forward_pre_hooks.items() if hook is _calibrate_on_this_call]:
        del model._forward_pre_hooks[key]
        model._forward_pre_hooks_with_kwargs.pop(key, None)
    if uncalibrated(model):
        calibrate(model, data.CalibrationData([data.Call(args, kwargs)], progress=False))


def calibrate_first(run: Any) -> Any:
    """An algorithm's ``run`` that calibrates the model's uncalibrated static activation quantizers on
    the algorithm's data before it runs (AMD Quark's extension lets ``quantize_model(model)`` return a
    model without data, and its scripts then call e.g. ``GPTQ().apply(qmodel, loader)``)."""

    def run_calibrated(config: Any, model: nn.Module, calib_data: Any) -> nn.Module:
        names = uncalibrated(model)
        if names and calib_data is not None:
            logger.info(
                "%s: calibrating %d uncalibrated static activation quantizers on its data first",
                type(config).__name__,
                len(names),
            )
            calibrate(model, calib_data)
        return run(config, model, calib_data)

    return run_calibrated


def calibrate(model: nn.Module, calib_data: Iterable[Any] | data.CalibrationData, allow_empty: bool = False) -> int:
    """Run the calibration data through ``model`` and initialise every static activation quantizer.

    Returns the number of batches used. Raises ``ValueError`` when no batch arrived (unless
    ``allow_empty``: then nothing is set and 0 is returned) or a quantizer saw no data (its layer was
    never called).
    """
    proxies = static_act_proxies(model)
    # Bias scales derive from input scales, which are off during calibration: bias quant is too.
    biases = [m for m in model.modules() if isinstance(m, BiasQuantProxyFromInjector) and m.is_quant_enabled]
    observers = {}
    signs: dict[str, PerTensorMinMaxObserver] = {}  # signed zero-centred grids: does any input go negative?
    hooks = []
    for name, proxy, spec in proxies:
        qmin, qmax = spec.grid
        # an unsigned symmetric grid covers [0, max(x, 0)]: its observer must not fold |x| in
        observer = spec.observer(symmetric=spec.symmetric and spec.signed, qmin=qmin, qmax=qmax, ch_axis=spec.ch_axis)
        observers[name] = observer
        hooks.append(proxy.register_forward_pre_hook(lambda _m, args, obs=observer: obs(_unpack_quant_tensor(args[0]))))
        if _signed_zero_centred(spec):
            # what the grid receives is the output of the proxy's activation (Identity for layer
            # inputs, ReLU in a QuantReLU): observe that, not the proxy's input
            signs[name] = sign = PerTensorMinMaxObserver(symmetric=False)
            activation = proxy.fused_activation_quant_proxy.activation_impl
            hooks.append(activation.register_forward_hook(lambda _m, _args, out, obs=sign: obs(_unpack_quant_tensor(out))))
        proxy.disable_quant = True
    for bias in biases:
        bias.disable_quant = True
    was_training = model.training
    model.eval()
    # graph mode hands QuantTensors on; with quantization off, layers must return plain tensors
    returned = QuantizationStatusManager.disable_return_quant_tensor(model)
    used = 0
    try:
        with torch.no_grad(), weights_quantized_once(model):
            for batch in data.calibration_data(calib_data).passes("calibration"):
                _calibration_step(model, batch)
                used += 1
    finally:
        for hook in hooks:
            hook.remove()
        for proxy in [p for _, p, _ in proxies] + biases:
            proxy.disable_quant = False
        QuantizationStatusManager.restore_return_quant_tensor(model, returned)
        model.train(was_training)
    for observer in [*observers.values(), *signs.values()]:  # no-op unless torch.distributed is initialised
        observer.sync()
    if not used and not any(obs.num_batches for obs in observers.values()):
        if allow_empty:
            return 0
        raise ValueError("calibration received no batch: calib_loader is empty")
    silent = [name for name, obs in observers.items() if not obs.num_batches]
    if silent:
        raise ValueError(f"these activation quantizers saw no data during calibration (layer never called): {silent}")
    ranges = {name: observers[name].calculate_range() for name, _, _ in proxies}
    # the inputs were finite (data.run_batch checks): the model itself produced NaN or inf (overflow)
    infinite = [name for name, (lo, hi) in ranges.items() if not bool(torch.isfinite(lo).all() and torch.isfinite(hi).all())]
    if infinite:
        raise ValueError(
            f"these activation quantizers observed NaN or inf during calibration: {infinite}; the calibration inputs "
            "are finite, so the model computed them (an overflow, or a division by zero, before these layers)"
        )
    for name, proxy, spec in proxies:
        set_range(proxy, spec, *ranges[name])
        getattr(proxy, CALIBRATED_FLAG).fill_(True)
    warn_unused_sign(
        {name: spec for name, _, spec in proxies if name in signs and signs[name].num_batches},
        {name: float(obs.min_val) for name, obs in signs.items() if obs.num_batches},
    )
    logger.info("calibrated %d activation quantizers on %d batches", len(proxies), used)
    return used


@contextlib.contextmanager
def weights_quantized_once(model: nn.Module) -> Iterator[None]:
    """Within the block, each weight quantizer returns its last output again for the same, unchanged
    weight tensor (same storage, shape, strides and version counter) instead of quantizing it again:
    calibration runs every batch through the same weights. A weight computed anew each call (a folded
    batch norm's) misses the cache and is quantized as before; a weight rewritten through ``.data``
    inside the block (which bumps no version counter) would not, and nothing here does that.
    Measured on transformers' ResNet (PTQ benchmark, 8 batches): weight quantization was 55 % of the
    calibration forward passes. A ``forward`` set on a quantizer instance before (another wrapper)
    is wrapped, and put back after."""
    proxies = [m for m in model.modules() if isinstance(m, WeightQuantProxyFromInjectorBase) and m.is_quant_enabled]
    previous = [vars(proxy).get("forward") for proxy in proxies]
    for proxy in proxies:
        proxy.forward = _quantize_once(proxy.forward)
    try:
        yield
    finally:
        for proxy, forward in zip(proxies, previous, strict=True):
            if forward is None:
                del proxy.forward
            else:
                proxy.forward = forward


def _quantize_once(forward: Any) -> Any:
    last: list[Any] = [None, None, None]  # key, output, the weight (held: its storage cannot be reused)

    def cached(weight: torch.Tensor, *args: Any) -> Any:
        if args or weight.is_inference():  # one that reads its layer's input too (accumulator-aware ones);
            return forward(weight, *args)  # an inference tensor has no version counter
        key = (weight.data_ptr(), weight.shape, weight.stride(), weight._version, weight.dtype, weight.device)
        if last[0] != key:
            last[:] = key, forward(weight), weight
        return last[1]

    return cached


def _calibration_step(model: nn.Module, batch: Any) -> None:
    """One calibration batch; the model's own error on it becomes a :class:`data.BatchError` naming its inputs."""
    try:
        data.run_batch(model, batch)
    except data.BatchError:
        raise
    except Exception as error:
        raise data.BatchError(
            f"the model raised {type(error).__name__} on the batch ({data.describe_batch(model, batch)}): {error}. "
            f"Check that the batches fit {type(model).__name__}.forward (a tensor, a tuple/list of its positional "
            "inputs or a dict of keyword inputs, of the shapes and dtypes it takes); if the float model runs this "
            "batch, its quantized version failing on it is a bug to report"
        ) from error


def _signed_zero_centred(spec: TensorQuant) -> bool:
    """An integer grid symmetric about 0 with negative levels: half of it is lost on inputs >= 0."""
    return spec.format is Format.integer and spec.signed and spec.symmetric


#: below this width an unused sign bit is a warning, from it on an info message: at 8 bits the
#: loss measured nothing (digits W8A8 PTQ, 0.00 points) and the AMD IPU (XINT8) requires signed
#: int8 activations, so its users could not act on a warning.
SIGN_WARNING_BELOW_BITS = 8


def warn_unused_sign(specs: dict[str, TensorQuant], minima: dict[str, float]) -> list[str]:
    """Name the signed zero-centred quantizers whose calibration inputs were never negative.

    Their negative levels stay unused: a b-bit quantizer keeps the 2^(b-1) levels of a (b-1)-bit
    unsigned one. One message names them all, each with the unsigned dtype to use instead: a
    warning for widths below :data:`SIGN_WARNING_BELOW_BITS`, an info message otherwise.
    Returns their names (empty: nothing to say).
    """
    unused = [name for name, spec in specs.items() if minima.get(name, -1.0) >= 0]
    for low_bit in (True, False):
        names = [n for n in unused if (specs[n].bit_width < SIGN_WARNING_BELOW_BITS) == low_bit]
        if names:
            listed = "; ".join(
                f"{n}: int{specs[n].bit_width}, min {minima[n]:g} -> {_unsigned(specs[n].bit_width)}" for n in names
            )
            logger.log(
                logging.WARNING if low_bit else logging.INFO,
                "signed activation quantizers whose calibration inputs were never negative use half of their "
                "grid (%s). Quantize non-negative tensors (images in [0, 1], ReLU outputs) on an unsigned grid "
                "of the same width; both config flavours accept the main API's QuantizationSpec with it.",
                listed,
            )
    return unused


def _unsigned(bits: int) -> str:
    dtype = Dtype.__members__.get(f"uint{bits}")
    return f"Dtype.{dtype.name}" if dtype is not None else "symmetric=False (unsigned grid with a zero point)"


#: what a learned scale parameter holds, from the calibrated threshold: TQT learns log2 of the
#: threshold, LSQ the scale itself (threshold / integer threshold); the others the threshold
LEARNED_VALUES = {
    "tqt": lambda threshold, spec: torch.log2(threshold),
    "lsq": lambda threshold, spec: threshold / spec.threshold_levels,
}


def set_range(proxy: ActQuantProxyFromInjectorBase, spec: TensorQuant, lo: torch.Tensor, hi: torch.Tensor) -> None:
    """Write the range [lo, hi] into the proxy's learned threshold (and zero point)."""
    tensor_quant = proxy.fused_activation_quant_proxy.tensor_quant
    if spec.symmetric:
        threshold = hi if not spec.signed else torch.maximum(-lo, hi)
    else:
        threshold = hi - lo
        zero_point = tensor_quant.zero_point_impl.value
        zero_point.data.copy_((-lo).to(zero_point).expand_as(zero_point))
    # [tiny, 2^127]: a zero range still gives a positive scale, and neither a power-of-two scale
    # (rounded up: 2^128 is inf) nor the grid's far end (qmin x scale, beyond the range) overflows
    threshold = torch.clamp(threshold, min=torch.finfo(torch.float32).tiny, max=MAX_THRESHOLD)
    value = tensor_quant.scaling_impl.value
    threshold = next((learned(threshold, spec) for flag, learned in LEARNED_VALUES.items() if getattr(spec, flag)), threshold)
    value.data.copy_(threshold.to(value).expand_as(value))
