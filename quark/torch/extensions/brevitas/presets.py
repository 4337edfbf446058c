"""Ready-made main-API configs for deployment targets. Pure config: importing this module needs
neither Brevitas nor ONNX.

- :func:`xint8`: the AMD IPU / NPU (Ryzen AI) XINT8 scheme: symmetric int8 weights and
  activations with power-of-two scales, half-even rounding, int32 biases with scale = input scale
  x weight scale, ``target_device=DeviceType.IPU``. Export it with
  ``ModelExporter(path).export_onnx_model(qmodel, x, plans=quantizer.plans)``: the exporter then
  checks the config before and the QDQ graph after export (opset 17, static shapes, pof2 scales,
  zero points 0, int8 weights, int32 biases).
"""

from __future__ import annotations

from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.type import DeviceType, Dtype, QSchemeType, RoundType, ScaleType
from quark.torch.quantization.observer import PerTensorMinMaxObserver

__all__ = ["xint8"]


def xint8(exclude: list[str] | None = None) -> Config:
    """XINT8 for the AMD IPU: int8 symmetric per-tensor pof2 weights and inputs, int32 bias.

    Args:
        exclude: module name patterns left in float (they then run on the CPU).
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
    return Config(global_quant_config=layer, exclude=list(exclude or []))
