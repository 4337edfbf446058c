"""Configs written the way AMD Quark 0.13's documentation writes them, running unchanged here.

Everything in ``quark013_configs()`` is Quark 0.13 code: ``DataTypeSpec`` helpers with their string
fields (``scale_type="power_of_2"``, ``observer_method="percentile"``), ``QConfig`` / ``QLayerConfig``,
OCP MX as Quark writes it (the helpers, and a hand-written ``QTensorConfig`` with
``PerBlockMXObserver``, ``ScaleType.float`` and ``scale_format="e8m0"``), MX6 / BFP16, and a
``layer_type_quant_config`` keyed by ``nn.Linear`` (the block formats go on the Linear layers, whose
input features hold whole blocks). Each config quantizes the digits CNN that ships with this package
(trained for a few seconds on scikit-learn's real handwritten digits), calibrated on the training
split; the script prints the held-out test accuracy of each.

    python examples/quark013_configs.py [--float-epochs 30]
"""

from __future__ import annotations

import argparse
import copy

import torch
from torch import nn

from quark.torch.examples import digits  # the model and data (this package's, not Quark's)
from quark.torch.extensions.brevitas.api import ModelQuantizer


def quark013_configs() -> dict:
    # --- AMD Quark 0.13 code, unchanged
    from quark.torch.quantization.config.config import (
        Bfloat16Spec,
        BFP16Spec,
        FP8E4M3PerTensorSpec,
        Int4PerGroupSpec,
        Int8PerChannelSpec,
        Int8PerTensorSpec,
        MX6Spec,
        OCP_MXFP4Spec,
        OCP_MXINT8Spec,
        QConfig,
        QLayerConfig,
        QTensorConfig,
        Uint8PerTensorSpec,
    )
    from quark.torch.quantization.config.type import Dtype, QSchemeType, RoundType, ScaleType
    from quark.torch.quantization.observer import PerBlockMXObserver

    int8_weight = Int8PerChannelSpec(
        symmetric=True, scale_type="float", round_method="half_even", ch_axis=0, is_dynamic=False
    ).to_quantization_spec()
    uint8_input = Uint8PerTensorSpec(
        observer_method="percentile", symmetric=False, scale_type="float", round_method="half_even", is_dynamic=False
    ).to_quantization_spec()
    pof2 = Int8PerTensorSpec(
        observer_method="min_max", symmetric=True, scale_type="power_of_2", round_method="half_even", is_dynamic=False
    ).to_quantization_spec()
    convs_int8 = QLayerConfig(weight=int8_weight, input_tensors=uint8_input)

    def on_linear(weight, input_tensors=None) -> QConfig:
        return QConfig(
            global_quant_config=convs_int8,
            layer_type_quant_config={nn.Linear: QLayerConfig(weight=weight, input_tensors=input_tensors)},
        )

    mxfp8_by_hand = QTensorConfig(
        dtype=Dtype.fp8_e4m3,
        observer_cls=PerBlockMXObserver,
        symmetric=None,
        scale_type=ScaleType.float,
        scale_format="e8m0",
        scale_calculation_mode="even",
        round_method=RoundType.half_even,
        qscheme=QSchemeType.per_group,
        ch_axis=-1,
        group_size=32,
        is_dynamic=True,
    )
    configs = {
        "W8A8 int8, percentile inputs": QConfig(global_quant_config=convs_int8),
        "W8A8 int8, power-of-two scales": QConfig(global_quant_config=QLayerConfig(weight=pof2, input_tensors=pof2)),
        "FP8 e4m3": QConfig(
            global_quant_config=QLayerConfig(
                weight=FP8E4M3PerTensorSpec(observer_method="min_max", is_dynamic=False).to_quantization_spec(),
                input_tensors=FP8E4M3PerTensorSpec(observer_method="min_max", is_dynamic=False).to_quantization_spec(),
            )
        ),
        "bfloat16": QConfig(
            global_quant_config=QLayerConfig(
                weight=Bfloat16Spec().to_quantization_spec(), input_tensors=Bfloat16Spec().to_quantization_spec()
            )
        ),
        "Linear: W4 per group 32": on_linear(Int4PerGroupSpec(ch_axis=1, group_size=32).to_quantization_spec()),
        "Linear: OCP MXFP4": on_linear(
            OCP_MXFP4Spec(ch_axis=-1, is_dynamic=False).to_quantization_spec(),
            OCP_MXFP4Spec(ch_axis=-1, is_dynamic=True).to_quantization_spec(),
        ),
        "Linear: OCP MXINT8": on_linear(
            OCP_MXINT8Spec(ch_axis=-1).to_quantization_spec(), OCP_MXINT8Spec(ch_axis=-1).to_quantization_spec()
        ),
        "Linear: MXFP8 QTensorConfig by hand": on_linear(mxfp8_by_hand, mxfp8_by_hand),
        "Linear: MX6": on_linear(
            MX6Spec(ch_axis=-1, block_size=16).to_quantization_spec(),
            MX6Spec(ch_axis=-1, block_size=16).to_quantization_spec(),
        ),
        "Linear: BFP16": on_linear(
            BFP16Spec(ch_axis=-1).to_quantization_spec(), BFP16Spec(ch_axis=-1).to_quantization_spec()
        ),
    }
    # --- end of Quark code
    return configs


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--float-epochs", type=int, default=30)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    model, data = digits.trained_cnn(seed=0, epochs=args.float_epochs)
    calib = data.loader("train", batch_size=64)
    accuracy = {"float": digits.accuracy(model, data)}
    for name, config in quark013_configs().items():
        quantized = ModelQuantizer(config).quantize_model(copy.deepcopy(model), calib, progress=False)
        accuracy[name] = digits.accuracy(quantized, data)
    print("digits CNN, held-out test accuracy, configs written as AMD Quark 0.13 writes them")
    for name, value in accuracy.items():
        print(f"  {name:<40} {value:6.2f} %")
    return accuracy


if __name__ == "__main__":
    main()
