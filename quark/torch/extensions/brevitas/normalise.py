"""How the plan reads the Brevitas extension's config: its ``QuantizationSpec`` normalised into
``TensorQuant``, and its ``Config`` viewed as the plan needs it.

:func:`register` tells the plan (the extension's package does it when it loads), so the plan takes
both flavours while the config layer knows nothing of the extension. No Brevitas import.
"""

from __future__ import annotations

from quark.torch.extensions.brevitas.config import Config, ParamType, QuantizationSpec, QuantType
from quark.torch.quantization.config.spec import ACTIVATION_ROLES, BIPOLAR_BITS, A2QSpec
from quark.torch.quantization.config.type import QSchemeType, ScaleType
from quark.torch.quantization.observer import (
    MeanAbsObserver,
    ObserverBase,
    PerChannelMinMaxObserver,
    PerTensorMinMaxObserver,
    PerTensorMSEObserver,
    PerTensorPercentileObserver,
    UnitScaleObserver,
)
from quark.torch.quantization.plan import ConfigView, register_config_view
from quark.torch.quantization.tensor_quant import (
    Format,
    TensorQuant,
    a2q_weight,
    batch_norm_folding,
    check_role,
    fail,
    register_normaliser,
    tqt_observer,
)

#: the extension's stats-based activation statistic (Brevitas' default, as in Quark).
EXT_ACT_PERCENTILE = 99.999

_EXT_OBSERVERS: dict[tuple[ParamType, bool, QSchemeType], type[ObserverBase]] = {
    # (param_type, is activation, qscheme) -> statistic
    (ParamType.stats, False, QSchemeType.per_tensor): PerTensorMinMaxObserver,
    (ParamType.stats, False, QSchemeType.per_channel): PerChannelMinMaxObserver,
    (ParamType.stats, True, QSchemeType.per_tensor): PerTensorPercentileObserver,
    (ParamType.mse, False, QSchemeType.per_tensor): PerTensorMSEObserver,
    (ParamType.mse, False, QSchemeType.per_channel): PerTensorMSEObserver,
    (ParamType.mse, True, QSchemeType.per_tensor): PerTensorMSEObserver,
}


def normalise_ext(spec: QuantizationSpec, role: str, where: str) -> TensorQuant:
    if spec.bit_width == BIPOLAR_BITS:
        return _ext_bipolar(spec, role, where)
    if role == "bias" and spec.quant_type is not QuantType.int_quant:
        raise fail(where, "bias quantization must be integer (quant_type=QuantType.int_quant)")
    if role == "bias":
        # The extension's bias takes scale = input scale x weight scale: only bit_width and
        # scale_type (checked against the product) apply; other fields must keep their defaults.
        defaults = QuantizationSpec()
        changed = [
            f for f in ("qscheme", "symmetric", "param_type", "qat_spec") if getattr(spec, f) != getattr(defaults, f)
        ]
        if changed:
            raise fail(
                where,
                f"a bias spec sets bit_width (and scale_type) only; its scale is input scale x weight scale, "
                f"so {', '.join(f'{f}={getattr(spec, f)}' for f in changed)} cannot be honoured",
            )
        return check_role(
            TensorQuant(bit_width=spec.bit_width, signed=True, bias_scale_from_product=True, scale_type=spec.scale_type),
            role,
            where,
        )
    if isinstance(spec.qat_spec, A2QSpec):
        return check_role(_ext_a2q(spec, role, where), role, where)
    key = (spec.param_type, role in ACTIVATION_ROLES, spec.qscheme)
    if key not in _EXT_OBSERVERS:
        allowed = sorted(f"{p.name}/{q.name}" for p, act, q in _EXT_OBSERVERS if act == key[1])
        raise fail(
            where,
            f"param_type={spec.param_type.name} with qscheme={spec.qscheme.name} is not supported for "
            f"{role}; supported param_type/qscheme: {allowed}",
        )
    observer, tqt = tqt_observer(spec.qat_spec, _EXT_OBSERVERS[key])
    if spec.quant_type is QuantType.float_quant:
        return check_role(_ext_float(spec, observer, where), role, where)
    tq = TensorQuant(
        bit_width=spec.bit_width,
        signed=spec.symmetric,  # the extension quantizes asymmetric tensors on an unsigned grid
        symmetric=spec.symmetric,
        qscheme=spec.qscheme,
        scale_type=spec.scale_type,
        observer=observer,
        percentile=EXT_ACT_PERCENTILE if observer is PerTensorPercentileObserver else None,
        tqt=tqt,
        **batch_norm_folding(spec.qat_spec, role),
    )
    return check_role(tq, role, where)


def _ext_float(spec: QuantizationSpec, observer: type[ObserverBase], where: str) -> TensorQuant:
    """``QuantType.float_quant``: an OCP-style minifloat of any exponent / mantissa width."""
    e, m = spec.exponent_bit_width, spec.mantissa_bit_width
    if e is None or m is None:
        raise fail(where, "quant_type=QuantType.float_quant needs exponent_bit_width and mantissa_bit_width")
    if e < 1 or m < 0 or 1 + e + m != spec.bit_width:
        raise fail(
            where,
            f"bit_width={spec.bit_width} must equal 1 + exponent_bit_width + mantissa_bit_width "
            f"(1 + {e} + {m}), with exponent_bit_width >= 1 and mantissa_bit_width >= 0",
        )
    if not spec.symmetric:
        raise fail(where, "quant_type=QuantType.float_quant is symmetric: symmetric=False is not supported")
    if observer is PerTensorMSEObserver:
        raise fail(where, "param_type=ParamType.mse is not supported with quant_type=QuantType.float_quant")
    if spec.qat_spec is not None:
        raise fail(where, "qat_spec=TQTSpec needs quant_type=QuantType.int_quant")
    return TensorQuant(
        bit_width=spec.bit_width,
        signed=True,
        qscheme=spec.qscheme,
        scale_type=spec.scale_type,
        observer=observer,
        percentile=EXT_ACT_PERCENTILE if observer is PerTensorPercentileObserver else None,
        format=Format.minifloat,
        exponent_bit_width=e,
        mantissa_bit_width=m,
    )


#: the extension's spec fields an ``A2QSpec`` weight may set: field -> (allowed, why)
_A2Q_FIELDS: dict[str, tuple[tuple, str]] = {
    "quant_type": ((QuantType.int_quant,), "the bound is on integer weights"),
    "qscheme": ((QSchemeType.per_channel,), "A2Q bounds each output channel with its own learned scale"),
    "scale_type": ((ScaleType.float, ScaleType.pof2), "A2Q learns a scale per output channel, float or power-of-two"),
    "param_type": ((ParamType.stats,), "the scale starts from max |w| per channel and is learned"),
}


def _ext_a2q(spec: QuantizationSpec, role: str, where: str) -> TensorQuant:
    """``qat_spec=A2QSpec``: accumulator-aware weights (see ``A2QSpec``)."""
    fields = a2q_weight(spec.qat_spec, role, spec.symmetric, "symmetric=False (an unsigned grid)", where, spec.scale_type)
    for field_name, (allowed, why) in _A2Q_FIELDS.items():
        value = getattr(spec, field_name)
        if value not in allowed:
            shown = ", ".join(getattr(a, "name", str(a)) for a in allowed)
            raise fail(
                where,
                f"{field_name}={getattr(value, 'name', value)} is not supported with qat_spec=A2QSpec ({why}); allowed: {shown}",
            )
    return TensorQuant(bit_width=spec.bit_width, **fields)


#: the extension's spec fields a bipolar tensor cannot honour: field -> (allowed, why)
_BIPOLAR_FIELDS: dict[str, tuple[tuple, str]] = {
    "quant_type": ((QuantType.int_quant,), "a 1-bit tensor is sign(x) x scale, not a minifloat"),
    "symmetric": ((True,), "a bipolar tensor has no zero point: its levels are -1 and +1 times the scale"),
    "qat_spec": ((None,), "bipolar tensors train by the straight-through estimator"),
    "param_type": ((ParamType.stats,), "no search: the mean |w| is the L2-optimal scale of sign(w)"),
}


def _ext_bipolar(spec: QuantizationSpec, role: str, where: str) -> TensorQuant:
    """``bit_width=1``: bipolar, sign(x) x s. Weights: s = mean |w| (the L2-optimal sign scale), per
    tensor or per output channel; activations: s = 1, Brevitas' ``SignedBinaryActPerTensorConst`` (what
    FINN takes)."""
    if role == "bias":
        raise fail(
            where,
            "bit_width=1 is not supported for bias: a bias is added to the accumulator at full precision; "
            "allowed 2..32 (or no bias spec)",
        )
    for field_name, (allowed, why) in _BIPOLAR_FIELDS.items():
        value = getattr(spec, field_name)
        if value not in allowed:
            raise fail(where, f"{field_name}={value} is not supported with bit_width=1 ({why}); allowed: {allowed[0]}")
    tq = TensorQuant(
        bit_width=BIPOLAR_BITS,
        signed=True,
        qscheme=spec.qscheme,
        scale_type=spec.scale_type,
        observer=UnitScaleObserver if role in ACTIVATION_ROLES else MeanAbsObserver,
        format=Format.bipolar,
    )
    return check_role(tq, role, where)


def view_ext(config: Config) -> ConfigView:
    """The extension's Config has one global layer config; ``backend`` selects the rewriter. Its
    spec has no sign: graph mode gives non-negative tensors unsigned grids, as Brevitas' own graph
    quantization does."""
    algorithms = (*config.pre_quant_opt_config, *config.algo_config)
    return ConfigView(config.global_quant_config, {}, {}, [], config.backend, algorithms, signs_from_graph=True)


def register() -> None:
    """Let the plan read the extension's ``QuantizationSpec`` and ``Config``."""
    register_normaliser(QuantizationSpec, normalise_ext)
    register_config_view(Config, view_ext)
