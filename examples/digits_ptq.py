"""Post-training quantization of a digits CNN with Quark configs, on Brevitas.

Trains a small CNN on scikit-learn's real handwritten digits, quantizes it with a config of each
flavour (AMD Quark's Brevitas extension and the main Quark API), and prints float vs quantized
test accuracy and what each layer got.

    python examples/digits_ptq.py     (make demo runs the longer journey, digits_qat_finn.py)
"""

import logging

import quark.torch.extensions.brevitas.api as brevitas_api
import quark.torch.extensions.brevitas.config as brevitas_config
from quark.torch.examples import digits
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.type import Dtype, QSchemeType, RoundType, ScaleType
from quark.torch.quantization.observer import PerChannelMinMaxObserver, PerTensorMinMaxObserver


def extension_w8a8() -> brevitas_config.Config:
    """AMD Quark Brevitas-extension code, unchanged: int8 weights and inputs, per tensor."""
    return brevitas_config.Config(
        global_quant_config=brevitas_config.QuantizationConfig(
            weight=brevitas_config.QuantizationSpec(), input_tensors=brevitas_config.QuantizationSpec()
        )
    )


def main_api_w4a8() -> Config:
    """Main Quark API: int4 per-channel weights, int8 power-of-two inputs, an 8-bit classifier."""
    w4 = QuantizationSpec(dtype=Dtype.int4, observer_cls=PerChannelMinMaxObserver, symmetric=True,
                          scale_type=ScaleType.float, round_method=RoundType.half_even,
                          qscheme=QSchemeType.per_channel, ch_axis=0, is_dynamic=False)
    a8 = QuantizationSpec(dtype=Dtype.int8, observer_cls=PerTensorMinMaxObserver, symmetric=True,
                          scale_type=ScaleType.pof2, round_method=RoundType.half_even,
                          qscheme=QSchemeType.per_tensor, is_dynamic=False)
    w8 = QuantizationSpec(dtype=Dtype.int8, observer_cls=PerChannelMinMaxObserver, symmetric=True,
                          qscheme=QSchemeType.per_channel, ch_axis=0)
    return Config(global_quant_config=QuantizationConfig(weight=w4, input_tensors=a8),
                  layer_quant_config={"10": QuantizationConfig(weight=w8)})


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    model, data = digits.trained_cnn(seed=0)
    float_acc = digits.accuracy(model, data)
    print(f"float model: test accuracy {float_acc:.2f}% on {len(data.test)} real digits\n")
    calib = data.loader("train", batch_size=64)
    for title, config in (("Brevitas-extension config, W8A8 per tensor", extension_w8a8()),
                          ("main Quark config, W4 per channel / A8 pof2", main_api_w4a8())):
        quantizer = brevitas_api.ModelQuantizer(config)
        qmodel = quantizer.quantize_model(model, calib, progress=False)
        acc = digits.accuracy(qmodel, data)
        print(f"== {title}: test accuracy {acc:.2f}% ({acc - float_acc:+.2f} points)")
        print(quantizer.summary(), "\n")


if __name__ == "__main__":
    main()
