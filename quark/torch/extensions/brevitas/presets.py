"""Ready-made main-API configs for deployment targets. Pure config: importing this module needs
neither Brevitas nor ONNX.

- :func:`xint8`: the AMD IPU / NPU (Ryzen AI) XINT8 scheme: symmetric int8 weights and
  activations with power-of-two scales, half-even rounding, int32 biases with scale = input scale
  x weight scale, ``target_device=DeviceType.IPU``. Export it with
  ``ModelExporter(path).export_onnx_model(qmodel, x, plans=quantizer.plans)``: the exporter then
  checks the config before and the QDQ graph after export (opset 17, static shapes, pof2 scales,
  zero points 0, int8 weights, int32 biases).
- :func:`a8w8`, :func:`a16w8`: the Ryzen AI flow's A8W8 / A16W8: 8- / 16-bit activations with
  float scales (unsigned, asymmetric by default), int8 symmetric weights per tensor or per output
  channel, int32 biases with scale = input scale x weight scale, ``target_device=DeviceType.IPU``.
  16-bit Q/DQ are written in the ``com.microsoft`` domain at the IPU's opset 17.
- :func:`bf16`, :func:`bfp16`: every activation and weight cast to bfloat16, or in AMD's BFP16
  blocks (8 elements sharing an 8-bit exponent, Quark 0.13's ``Dtype.bfp16``), biases float,
  ``target_device=DeviceType.IPU``.
- :func:`finn`: FINN's integer dataflow on FPGAs: graph mode, power-of-two scales, zero points 0,
  unsigned quantizers after ReLU, an unsigned 8-bit network input, rounding ties up (FINN's
  MultiThreshold), ``target_device=DeviceType.FINN``. Export with
  ``ModelExporter(path).export_qonnx_model(qmodel, x)``: the exporter checks the config before and
  the QONNX graph after export.
- :func:`hls4ml`: hls4ml's fixed-point firmware on FPGAs: graph mode, power-of-two scales per
  tensor, zero points 0, half-even rounding (hls4ml's ``AP_RND_CONV``), integer biases on the
  product of the input and weight scales, batch norm merged, ``target_device=DeviceType.HLS4ML``.
  Export with ``ModelExporter(directory).export_hls4ml_project(qmodel, x)``.
"""

from __future__ import annotations

from quark.torch.quantization.config.algorithms import BiasCorrection, MergeBatchNorm
from quark.torch.quantization.config.config import (
    A2QSpec,
    Config,
    QATSpec,
    QuantizationConfig,
    QuantizationSpec,
)
from quark.torch.quantization.config.type import (
    DeviceType,
    Dtype,
    QSchemeType,
    QuantizationMode,
    RoundType,
    ScaleType,
)
from quark.torch.quantization.observer import (
    ObserverBase,
    PerChannelMinMaxObserver,
    PerTensorMinMaxObserver,
    PerTensorMSEObserver,
    UnitScaleObserver,
)

__all__ = ["a8w8", "a16w8", "bf16", "bfp16", "finn", "hls4ml", "xint8"]


def xint8(exclude: list[str] | None = None, *, graph: bool = False, merge_batch_norm: bool = True) -> Config:
    """XINT8 for the AMD IPU: int8 symmetric per-tensor pof2 weights and inputs, int32 bias.

    Args:
        exclude: module name patterns left in float (they then run on the CPU).
        graph: graph mode (every tensor between layers quantized, residual additions and
            concatenations on one scale); default: layer by layer.
        merge_batch_norm: fold batch norm into the layer before it first (``MergeBatchNorm``), as
            the NPU's compiler does: a float batch norm between a convolution and its quantizer is
            no integer graph.
    """
    int8_pof2 = QuantizationSpec(
        dtype=Dtype.int8,
        observer_cls=PerTensorMinMaxObserver,
        qscheme=QSchemeType.per_tensor,
        symmetric=True,
        scale_type=ScaleType.pof2,
        round_method=RoundType.half_even,
        is_dynamic=False,
    )
    bias = QuantizationSpec(dtype=Dtype.int32, round_method=RoundType.half_even)  # no observer: s_in * s_w
    layer = QuantizationConfig(
        input_tensors=int8_pof2, weight=int8_pof2, bias=bias, target_device=DeviceType.IPU
    )
    return _npu(layer, exclude, graph, merge_batch_norm)


#: activation bits of the float-scale integer presets -> (signed, unsigned) dtype
_ACT_DTYPES: dict[int, tuple[Dtype, Dtype]] = {8: (Dtype.int8, Dtype.uint8), 16: (Dtype.int16, Dtype.uint16)}
#: how the activation ranges of :func:`a8w8` / :func:`a16w8` are calibrated (AMD Quark ONNX's
#: ``calibrate_method`` MinMax / MinMSE) -> the observer
CALIBRATIONS: dict[str, type[ObserverBase]] = {"minmax": PerTensorMinMaxObserver, "mse": PerTensorMSEObserver}
#: weight granularity of the Ryzen AI flow -> (qscheme, observer, ch_axis)
_WEIGHT_GRANULARITY = {
    "per_tensor": (QSchemeType.per_tensor, PerTensorMinMaxObserver, None),
    "per_channel": (QSchemeType.per_channel, PerChannelMinMaxObserver, 0),
}


def _npu(
    layer: QuantizationConfig, exclude: list[str] | None, graph: bool, merge_batch_norm: bool
) -> Config:
    return Config(
        global_quant_config=layer,
        exclude=list(exclude or []),
        pre_quant_opt_config=[MergeBatchNorm()] if merge_batch_norm else [],
        quant_mode=QuantizationMode.fx_graph_mode if graph else QuantizationMode.eager_mode,
    )


def activation_spec(bits: int, *, symmetric: bool = False, calibration: str = "minmax") -> QuantizationSpec:
    """The activation spec of :func:`a8w8` (``bits=8``) and :func:`a16w8` (``bits=16``): float
    scales, half-even; unsigned asymmetric (zero point from the range), or signed symmetric; the
    range from ``calibration`` (:data:`CALIBRATIONS`). The sites
    :func:`~quark.torch.extensions.brevitas.mixing.mix` promotes get this spec with 16 bits."""
    return _activation_spec(bits, symmetric, calibration, "activation_spec")


def _activation_spec(bits: int, symmetric: bool, calibration: str, owner: str) -> QuantizationSpec:
    """:func:`activation_spec`, its errors naming ``owner`` (the preset the user called)."""
    if bits not in _ACT_DTYPES:
        raise ValueError(f"{owner}(bits={bits!r}): allowed {sorted(_ACT_DTYPES)}")
    if calibration not in CALIBRATIONS:
        raise ValueError(f"{owner}(calibration={calibration!r}): allowed {', '.join(map(repr, CALIBRATIONS))}")
    return QuantizationSpec(
        dtype=_ACT_DTYPES[bits][0 if symmetric else 1],
        observer_cls=CALIBRATIONS[calibration],
        qscheme=QSchemeType.per_tensor,
        symmetric=symmetric,
        scale_type=ScaleType.float,
        round_method=RoundType.half_even,
        is_dynamic=False,
    )


def _integer_npu(
    act_bits: int,
    weights: str,
    symmetric_activations: bool,
    calibration: str,
    exclude: list[str] | None,
    graph: bool,
    merge_batch_norm: bool,
    name: str,
) -> Config:
    if weights not in _WEIGHT_GRANULARITY:
        raise ValueError(f"{name}(weights={weights!r}): allowed {sorted(_WEIGHT_GRANULARITY)}")
    activations = _activation_spec(act_bits, symmetric_activations, calibration, name)
    qscheme, observer, ch_axis = _WEIGHT_GRANULARITY[weights]
    weight = QuantizationSpec(
        dtype=Dtype.int8,
        observer_cls=observer,
        qscheme=qscheme,
        ch_axis=ch_axis,
        symmetric=True,
        scale_type=ScaleType.float,
        round_method=RoundType.half_even,
    )
    bias = QuantizationSpec(dtype=Dtype.int32, round_method=RoundType.half_even)  # no observer: s_in * s_w
    layer = QuantizationConfig(
        input_tensors=activations,
        weight=weight,
        bias=bias,
        target_device=DeviceType.IPU,
    )
    return _npu(layer, exclude, graph, merge_batch_norm)


def a8w8(
    exclude: list[str] | None = None,
    *,
    weights: str = "per_channel",
    symmetric_activations: bool = False,
    calibration: str = "minmax",
    graph: bool = False,
    merge_batch_norm: bool = True,
) -> Config:
    """A8W8 for the AMD NPU: 8-bit activations with float scales (uint8 asymmetric, or int8
    symmetric with ``symmetric_activations``), int8 symmetric weights (``weights``: "per_channel"
    or "per_tensor"), int32 bias with scale = input scale x weight scale; ``calibration``: how the
    activation ranges are found, "minmax" (the default) or "mse" (the clipping range of least
    squared quantization error over the calibration data's histogram; :data:`CALIBRATIONS`).
    Other arguments as :func:`xint8`."""
    return _integer_npu(8, weights, symmetric_activations, calibration, exclude, graph, merge_batch_norm, "a8w8")


def a16w8(
    exclude: list[str] | None = None,
    *,
    weights: str = "per_channel",
    symmetric_activations: bool = False,
    calibration: str = "minmax",
    graph: bool = False,
    merge_batch_norm: bool = True,
) -> Config:
    """A16W8 for the AMD NPU: 16-bit activations with float scales (uint16 asymmetric, or int16
    symmetric with ``symmetric_activations``), int8 symmetric weights (``weights``: "per_channel"
    or "per_tensor"), int32 bias with scale = input scale x weight scale; ``calibration`` as
    :func:`a8w8`. The 16-bit QuantizeLinear / DequantizeLinear are written in ONNX Runtime's
    ``com.microsoft`` domain at the IPU's opset 17 (the standard ops take 16 bits from opset 21). Other arguments as :func:`xint8`."""
    return _integer_npu(16, weights, symmetric_activations, calibration, exclude, graph, merge_batch_norm, "a16w8")


def bf16(exclude: list[str] | None = None, *, graph: bool = False, merge_batch_norm: bool = True) -> Config:
    """BF16 for the AMD NPU: every activation (input of Conv / Linear) and weight cast to bfloat16
    (round to nearest even), biases float. Exported as Cast(bfloat16) -> Cast(float) pairs."""
    cast = QuantizationSpec(dtype=Dtype.bfloat16)
    layer = QuantizationConfig(input_tensors=cast, weight=cast, target_device=DeviceType.IPU)
    return _npu(layer, exclude, graph, merge_batch_norm)


def bfp16(exclude: list[str] | None = None, *, graph: bool = False, merge_batch_norm: bool = True) -> Config:
    """BFP16 for the AMD NPU (AMD Quark 0.13's ``Dtype.bfp16``): every activation and weight in
    blocks of 8 along the reduction axis sharing an 8-bit exponent, 8-bit two's complement
    elements; biases float. The reduction dimension of every quantized layer must be a multiple of
    8. Exported as int8 QuantizeLinear / DequantizeLinear per block, the exponents computed in the
    graph."""
    block = QuantizationSpec(dtype=Dtype.bfp16, ch_axis=-1, group_size=8)
    layer = QuantizationConfig(input_tensors=block, weight=block, target_device=DeviceType.IPU)
    return _npu(layer, exclude, graph, merge_batch_norm)


#: bit width -> (signed, unsigned) integer dtype of the main API; 1 bit: bipolar, {-1, +1} x scale,
#: for both (after ReLU the sign replaces the activation, see :func:`finn`)
_INTEGERS: dict[int, tuple[Dtype, Dtype]] = {
    bits: (signed, unsigned)
    for bits, signed, unsigned in (
        (1, Dtype.bipolar, Dtype.bipolar),
        (2, Dtype.int2, Dtype.uint2),
        (3, Dtype.int3, Dtype.uint3),
        (4, Dtype.int4, Dtype.uint4),
        (8, Dtype.int8, Dtype.uint8),
    )
}


def finn(
    weight_bits: int = 4,
    act_bits: int = 4,
    input_bits: int = 8,
    *,
    input_signed: bool = False,
    add_bits: int | None = None,
    layer_weight_bits: dict[str, int] | None = None,
    unsigned: tuple[str, ...] = ("ReLU",),
    per_channel_weights: bool = False,
    qat_spec: QATSpec | None = None,
    accumulator_bits: int | None = None,
    layer_accumulator_bits: dict[str, int | None] | None = None,
    zero_centered: bool = True,
    exclude: list[str] | None = None,
    bias_correction: bool = True,
) -> Config:
    """FINN's integer dataflow (graph mode): every tensor between layers quantized, zero points 0.

    Weights: ``int{weight_bits}`` symmetric, power-of-two scales (per output channel when
    ``per_channel_weights``). Activations (the network input, activations, additions,
    concatenations): ``int{act_bits}``, power-of-two scales, ``RoundType.half_up`` (FINN's
    MultiThreshold rounds ties up); the outputs of the activation types in ``unsigned`` take
    ``uint{act_bits}`` (FINN converts only unsigned quantizers after ReLU). The network input:
    ``uint{input_bits}`` (``int`` with ``input_signed``). Biases stay float (FINN folds them into
    thresholds). ``qat_spec`` (e.g. ``TQTSpec(TQTThresholdInitMeth._3SD)``) trains the thresholds.

    Binary networks (FINN's XNOR-popcount layers, Brevitas' ``bnn_pynq`` TFC / CNV): ``weight_bits=1``
    gives bipolar weights, sign(w) x mean|w| (a power of two), and ``act_bits=1`` bipolar activations,
    sign(x) with scale 1 (what FINN takes): the activation types in ``unsigned`` (whose outputs are never negative,
    so their sign would be +1 everywhere) are replaced by the sign, a binary network's activation
    (BinaryNet; ``bnn_pynq``: batch norm, then the sign). Mixed W1A2 / W2A2 combine as the widths
    say. Bipolar quantizers train by the straight-through estimator: ``qat_spec`` applies to the
    integer quantizers only. A bipolar network input (``input_bits=1``) needs ``input_signed``.

    Below 4 bits, the usual FINN practice (Brevitas' ``bnn_pynq`` ResNet: 8-bit first and last
    layer) is expressed with ``layer_weight_bits`` and ``add_bits``; docs/graph.md ("Targets")
    has the measured effect of each on the digits network.

    Accumulator-aware weights (``accumulator_bits``: A2Q+, or A2Q with ``zero_centered=False``;
    see ``A2QSpec``): every layer's integer dot product then fits a signed accumulator of that
    many bits, which the FINN export checks on every MVAU / VVAU after FINN's
    ``MinimizeAccumulatorWidth`` and reports with the LUTs it saves. Their weights are per output
    channel with learned scales rounded to powers of two (as every scale of this preset: with float
    weight scales torch's float sums and FINN's integer ones can round a tie apart, measured on the
    digits CNN; FINN folds them into the next thresholds), rounded toward zero; ``qat_spec`` then
    trains the activations' thresholds only. docs/qat.md
    ("Accumulator-aware quantization") has the accuracy against accumulator width on the digits CNN.

    Args:
        weight_bits, act_bits, input_bits: 1 (bipolar), 2, 3, 4 or 8.
        input_signed: the network input can be negative.
        add_bits: bit width of the residual additions (both operands, requantized to one scale,
            and the sum); None: ``act_bits``. Another width needs an addition in the model.
        layer_weight_bits: layer name -> bit width of its weight (e.g. ``{"stem.0": 8, "fc": 8}``:
            first and last layer at 8 bits); each name must be a layer of the model, as
            ``layer_quant_config`` requires.
        unsigned: activation types (class names) whose outputs are non-negative; every type named
            must occur in the model, as ``layer_type_quant_config`` requires.
        per_channel_weights: one weight scale per output channel (FINN folds them into the
            thresholds of the next layer).
        qat_spec: quantization-aware training of every scale (of the activations only with
            ``accumulator_bits``).
        accumulator_bits: the signed accumulator width every weighted layer promises (A2Q / A2Q+
            weights, ``A2QSpec``); None: unconstrained.
        layer_accumulator_bits: layer name -> its accumulator width, overriding
            ``accumulator_bits`` (None: that layer unconstrained, e.g. ``{"0": None}`` for a first
            layer taking 8-bit pixels); each name must be a layer of the model.
        zero_centered: with an accumulator width: A2Q+ (True, zero-centred weights, the relaxed
            bound) or A2Q (False).
        exclude: module name patterns left float.
        bias_correction: after calibration, each layer's bias absorbs the mean shift quantization
            causes on the calibration data (``BiasCorrection``, in ``algo_config``). At 4 bits it is
            most of PTQ's accuracy on CNNs with a global average pool (which keeps the mean shift of
            4-bit weights and sparse ReLU outputs while it averages the noise away): on MNIST, 25.5 % ->
            90.1 % (float 93.8 %; seed 0 of ``benchmarks/first_hour.py``). It costs one pass over the
            calibration data per layer; biases stay float (FINN folds them into thresholds).
    """
    widths = {
        "weight_bits": weight_bits,
        "act_bits": act_bits,
        "input_bits": input_bits,
        "add_bits": add_bits,
    }
    widths |= {f"layer_weight_bits[{layer!r}]": bits for layer, bits in (layer_weight_bits or {}).items()}
    for name, bits in widths.items():
        if bits is not None and bits not in _INTEGERS:
            raise ValueError(f"finn({name}={bits!r}): allowed {sorted(_INTEGERS)}")
    accumulators = {"accumulator_bits": accumulator_bits}
    accumulators |= {f"layer_accumulator_bits[{layer!r}]": bits for layer, bits in (layer_accumulator_bits or {}).items()}
    for name, bits in accumulators.items():
        if bits is not None:
            A2QSpec(bits)  # checks the width (A2QSpec.accumulator_bit_width=...)
    if not isinstance(zero_centered, bool):
        raise TypeError(f"finn(zero_centered={zero_centered!r}): expected True (A2Q+) or False (A2Q)")
    if not isinstance(bias_correction, bool):
        raise TypeError(f"finn(bias_correction={bias_correction!r}): expected True or False")
    constrained = [name for name, bits in accumulators.items() if bits is not None]
    if constrained and (weight_bits == 1 or 1 in (layer_weight_bits or {}).values()):
        raise ValueError(
            f"finn({', '.join(constrained)}) with bipolar weights (weight_bits=1): accumulator-aware weights are "
            "integers of 2..8 bits; allowed: weight_bits 2, 3, 4 or 8"
        )
    if input_bits == 1 and not input_signed:
        raise ValueError(
            "finn(input_bits=1) needs input_signed=True: the sign of a non-negative input (pixels in [0, 1]) is +1 "
            "everywhere (bnn_pynq maps pixels to 2x - 1 first)"
        )

    def activation(dtype: Dtype) -> QuantizationSpec:
        if dtype is Dtype.bipolar:  # sign(x), scale 1 (FINN's bipolar activations): trained by the straight-through estimator
            return QuantizationSpec(dtype=dtype, observer_cls=UnitScaleObserver)
        return QuantizationSpec(
            dtype=dtype,
            observer_cls=PerTensorMinMaxObserver,
            symmetric=True,
            scale_type=ScaleType.pof2,
            round_method=RoundType.half_up,
            qat_spec=qat_spec,
        )

    def weight(bits: int, accumulator: int | None = None) -> QuantizationSpec:
        if accumulator is not None:  # A2Q / A2Q+: learned pof2 scales per output channel, toward zero
            return QuantizationSpec(
                dtype=_INTEGERS[bits][0],
                qscheme=QSchemeType.per_channel,
                ch_axis=0,
                symmetric=True,
                scale_type=ScaleType.pof2,
                round_method=RoundType.toward_zero,
                qat_spec=A2QSpec(accumulator, zero_centered=zero_centered),
            )
        if bits == 1:  # sign(w) x mean|w|, per tensor or per output channel
            return QuantizationSpec(
                dtype=Dtype.bipolar,
                qscheme=QSchemeType.per_channel if per_channel_weights else QSchemeType.per_tensor,
                ch_axis=0 if per_channel_weights else None,
                scale_type=ScaleType.pof2,
            )
        if per_channel_weights:  # TQT learns one threshold per tensor: per-channel scales follow the weights
            return QuantizationSpec(
                dtype=_INTEGERS[bits][0],
                observer_cls=PerChannelMinMaxObserver,
                qscheme=QSchemeType.per_channel,
                ch_axis=0,
                symmetric=True,
                scale_type=ScaleType.pof2,
            )
        return QuantizationSpec(
            dtype=_INTEGERS[bits][0],
            observer_cls=PerTensorMinMaxObserver,
            symmetric=True,
            scale_type=ScaleType.pof2,
            qat_spec=qat_spec,
        )

    network_input = activation(_INTEGERS[input_bits][0 if input_signed else 1])
    non_negative = QuantizationConfig(output_tensors=activation(_INTEGERS[act_bits][1]))
    per_type = {"GraphInput": QuantizationConfig(input_tensors=network_input)}
    if add_bits not in (None, act_bits):
        per_type["Add"] = QuantizationConfig(input_tensors=activation(_INTEGERS[add_bits][0]))
    per_layer = dict(layer_accumulator_bits or {})
    layers = dict.fromkeys([*(layer_weight_bits or {}), *per_layer])
    return Config(
        global_quant_config=QuantizationConfig(
            input_tensors=activation(_INTEGERS[act_bits][0]),
            weight=weight(weight_bits, accumulator_bits),
            target_device=DeviceType.FINN,
        ),
        layer_quant_config={
            layer: QuantizationConfig(
                weight=weight(
                    (layer_weight_bits or {}).get(layer, weight_bits),
                    per_layer.get(layer, accumulator_bits),
                )
            )
            for layer in layers
        },
        layer_type_quant_config=per_type | {name: non_negative for name in unsigned},
        exclude=list(exclude or []),
        algo_config=[BiasCorrection()] if bias_correction else None,
        quant_mode=QuantizationMode.fx_graph_mode,
    )


#: the widths :func:`hls4ml` takes -> (signed, unsigned) dtype
_HLS4ML_INTEGERS: dict[int, tuple[Dtype, Dtype]] = {
    bits: dtypes for bits, dtypes in (*_INTEGERS.items(), (16, (Dtype.int16, Dtype.uint16))) if bits > 1
}


def hls4ml(
    weight_bits: int = 8,
    act_bits: int = 8,
    input_bits: int = 8,
    *,
    input_signed: bool = False,
    bias_bits: int = 32,
    unsigned: tuple[str, ...] = ("ReLU",),
    qat_spec: QATSpec | None = None,
    exclude: list[str] | None = None,
) -> Config:
    """hls4ml's fixed-point firmware (graph mode): every tensor between layers quantized, so that each
    is an ``ap_fixed`` type and the compiled C++ equals the model exactly.

    Weights: ``int{weight_bits}`` symmetric, one power-of-two scale per tensor (hls4ml folds a weight's
    Quant node into its type only so). Activations (the network input, activations, additions,
    concatenations): ``int{act_bits}``, power-of-two scales, ``RoundType.half_even`` (hls4ml rounds a
    Quant node ``ROUND`` as ``AP_RND_CONV``, half to even); the outputs of the activation types in
    ``unsigned`` take ``uint{act_bits}``. The network input: ``uint{input_bits}`` (``int`` with
    ``input_signed``). Biases: ``int{bias_bits}`` on the product of the input and weight scales (added to
    the integer sum exactly). Batch norm is merged into the layer before it first (``MergeBatchNorm``).
    ``qat_spec`` (e.g. ``TQTSpec(TQTThresholdInitMeth._3SD)``) trains the power-of-two thresholds.

    Args:
        weight_bits, act_bits, input_bits: 2, 3, 4, 8 or 16.
        input_signed: the network input can be negative.
        bias_bits: 16 or 32.
        unsigned: activation types (class names) whose outputs are non-negative; each must occur in
            the model, as ``layer_type_quant_config`` requires.
        qat_spec: quantization-aware training of the weight and activation scales.
        exclude: module name patterns left float (the hls4ml target refuses a float layer's output
            between quantized ones).
    """
    widths = {"weight_bits": weight_bits, "act_bits": act_bits, "input_bits": input_bits}
    for name, bits in widths.items():
        if bits not in _HLS4ML_INTEGERS:
            raise ValueError(f"hls4ml({name}={bits!r}): allowed {sorted(_HLS4ML_INTEGERS)}")
    biases = {16: Dtype.int16, 32: Dtype.int32}
    if bias_bits not in biases:
        raise ValueError(f"hls4ml(bias_bits={bias_bits!r}): allowed {sorted(biases)}")

    def pof2(dtype: Dtype, qat: QATSpec | None) -> QuantizationSpec:
        return QuantizationSpec(
            dtype=dtype,
            observer_cls=PerTensorMinMaxObserver,
            symmetric=True,
            scale_type=ScaleType.pof2,
            round_method=RoundType.half_even,
            qat_spec=qat,
        )

    bias = QuantizationSpec(dtype=biases[bias_bits], round_method=RoundType.half_even)  # no observer: s_in * s_w
    network_input = pof2(_HLS4ML_INTEGERS[input_bits][0 if input_signed else 1], qat_spec)
    non_negative = QuantizationConfig(output_tensors=pof2(_HLS4ML_INTEGERS[act_bits][1], qat_spec))
    return Config(
        global_quant_config=QuantizationConfig(
            input_tensors=pof2(_HLS4ML_INTEGERS[act_bits][0], qat_spec),
            weight=pof2(_HLS4ML_INTEGERS[weight_bits][0], qat_spec),
            bias=bias,
            target_device=DeviceType.HLS4ML,
        ),
        layer_type_quant_config={"GraphInput": QuantizationConfig(input_tensors=network_input)}
        | {name: non_negative for name in unsigned},
        exclude=list(exclude or []),
        pre_quant_opt_config=[MergeBatchNorm()],
        quant_mode=QuantizationMode.fx_graph_mode,
    )
