"""A script written for AMD Quark's Brevitas extension, running unchanged on this package.

The imports and everything between the two ``# ---`` lines are code as AMD Quark's extension documents it: its
``config``, ``algos`` and ``api`` modules under their usual aliases, a ``Config`` with pre-processing
(``Preprocess``, ``ActivationEqualization``) and post-quantization algorithms (``GPTQ``,
``BiasCorrection``), a classification ``DataLoader`` of ``(images, targets)`` for calibration,
``ModelQuantizer.quantize_model`` and ``ModelExporter.export_onnx_model`` (QCDQ ONNX). The model
is the digits CNN that ships with this package, trained for a few seconds on scikit-learn's real
handwritten digits; the script prints float and quantized test accuracy and writes the ONNX file
(which this package also executes in ONNX Runtime and compares with the torch model).

    python examples/quark_extension_script.py [--output digits_w4a8.onnx]
"""

from __future__ import annotations

import argparse

import torch

import quark.torch.extensions.brevitas.algos as brevitas_algos  # the extension's imports, as in Quark
import quark.torch.extensions.brevitas.api as brevitas_api
import quark.torch.extensions.brevitas.config as brevitas_config
from quark.torch.examples import digits  # the model and data (this package's, not Quark's)
from quark.torch.quantization.config.type import QSchemeType, ScaleType


def evaluate(model: torch.nn.Module, loader) -> float:
    """Top-1 accuracy in percent, the plain loop a Quark user writes."""
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for images, targets in loader:
            correct += int((model(images).argmax(1) == targets).sum())
            total += len(targets)
    return 100.0 * correct / total


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="digits_w4a8.onnx")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    model, data = digits.trained_cnn(seed=0)
    calib_loader, test_loader = data.loader("train", batch_size=64), data.loader("test", batch_size=256)
    export_path = args.output

    # --- AMD Quark Brevitas-extension code, unchanged
    weight_spec = brevitas_config.QuantizationSpec(
        bit_width=4, qscheme=QSchemeType.per_channel, symmetric=True, scale_type=ScaleType.float
    )
    input_spec = brevitas_config.QuantizationSpec(
        bit_width=8, qscheme=QSchemeType.per_tensor, symmetric=True, scale_type=ScaleType.pof2
    )
    global_config = brevitas_config.QuantizationConfig(input_tensors=input_spec, weight=weight_spec)
    quant_config = brevitas_config.Config(
        global_quant_config=global_config,
        pre_quant_opt_config=[
            brevitas_algos.Preprocess(),
            brevitas_algos.ActivationEqualization(is_layerwise=True, alpha=0.5),
        ],
        algo_config=[brevitas_algos.GPTQ(act_order=True), brevitas_algos.BiasCorrection()],
    )
    quantizer = brevitas_api.ModelQuantizer(quant_config)
    quant_model = quantizer.quantize_model(model, calib_loader)

    dummy_input = torch.randn(1, 1, 8, 8)
    exporter = brevitas_api.ModelExporter(export_path)
    exporter.export_onnx_model(quant_model, dummy_input)
    # ---

    float_acc, quant_acc = evaluate(model, test_loader), evaluate(quant_model, test_loader)
    print(f"float test accuracy {float_acc:.2f}%, W4 per channel / A8 pof2 {quant_acc:.2f}% "
          f"({quant_acc - float_acc:+.2f} points); wrote {export_path}")
    return {"model": model, "quant_model": quant_model, "float_accuracy": float_acc,
            "quant_accuracy": quant_acc, "example": dummy_input}


if __name__ == "__main__":
    main()
