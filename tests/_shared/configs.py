"""Specs and configs of the main API that many tests quantize with (the config layer only).

``A8`` / ``W8`` are Quark's usual 8-bit activation (per tensor) and weight (per output channel)
specs; ``layer_config(**roles)`` is a ``Config`` of one global ``QuantizationConfig``.
"""

from __future__ import annotations

from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.type import Dtype, QSchemeType, ScaleType
from quark.torch.quantization.observer import PerChannelMinMaxObserver, PerTensorMinMaxObserver

#: int8 with every other field left to the normaliser's defaults (symmetric, per tensor, min-max)
INT8 = QuantizationSpec(dtype=Dtype.int8)
A8 = QuantizationSpec(dtype=Dtype.int8, observer_cls=PerTensorMinMaxObserver)
A8_POF2 = QuantizationSpec(dtype=Dtype.int8, observer_cls=PerTensorMinMaxObserver, scale_type=ScaleType.pof2)
W8 = QuantizationSpec(
    dtype=Dtype.int8, observer_cls=PerChannelMinMaxObserver, qscheme=QSchemeType.per_channel, ch_axis=0
)
W8_POF2 = QuantizationSpec(dtype=Dtype.int8, observer_cls=PerTensorMinMaxObserver, scale_type=ScaleType.pof2)
#: uint8 asymmetric (a zero point), per tensor
U8_ASYM = QuantizationSpec(dtype=Dtype.uint8, symmetric=False)
#: a bias spec without an observer: scale = input scale x weight scale
B32 = QuantizationSpec(dtype=Dtype.int32)


def layer_config(**roles) -> Config:
    """A ``Config`` whose global layer config quantizes ``roles`` (``weight=W8, input_tensors=A8``)."""
    return Config(global_quant_config=QuantizationConfig(**roles))


W8A8 = layer_config(weight=W8, input_tensors=A8)
#: W8A8 with the layers' outputs quantized too
W8A8_IO = layer_config(weight=W8, input_tensors=INT8, output_tensors=INT8)
W8A8_POF2 = layer_config(weight=W8_POF2, input_tensors=A8_POF2, bias=B32)
WEIGHT_ONLY = layer_config(weight=W8)

#: the algorithm tests' 4-bit weights: per group of 16 inputs, per output channel, per tensor, unsigned per group
W4G16 = QuantizationSpec(dtype=Dtype.int4, qscheme=QSchemeType.per_group, ch_axis=1, group_size=16)
W4C = QuantizationSpec(dtype=Dtype.int4, qscheme=QSchemeType.per_channel, ch_axis=0)
W4T = QuantizationSpec(dtype=Dtype.int4)
U4G16 = QuantizationSpec(
    dtype=Dtype.uint4, symmetric=False, qscheme=QSchemeType.per_group, ch_axis=1, group_size=16
)
#: GPTQ / AWQ fields that take the weight spec's values
FROM_SPEC = {"bit": None, "sym": None, "group_size": None}


def algo_config(weight, pre=None, post=None, inputs=None) -> Config:
    """``weight`` (and ``inputs``) quantized, ``pre`` before quantization, ``post`` after calibration."""
    return Config(
        QuantizationConfig(weight=weight, input_tensors=inputs), pre_quant_opt_config=pre, algo_config=post
    )
