"""A convolutional classifier from transformers, quantized with the XINT8 preset and exported for
the AMD IPU / NPU (Ryzen AI) as QDQ ONNX, checked against the IPU's requirements and verified.

The network is transformers' ResNet with a small random configuration (no download): the point is
the flow, not the accuracy. Every convolution and the classifier get int8 power-of-two weights
and inputs with int32 biases; the export executes the written graph in ONNX Runtime and compares
it with the torch model, then checks opset 17, static shapes, power-of-two scales, zero points 0,
int8 weights and int32 biases of scale s_in x s_w.

    python examples/ipu_transformers_resnet.py [--output resnet_xint8.onnx]
"""

from __future__ import annotations

import argparse
import os

import torch
from torch import nn

from quark.torch.examples.compat import declare_missing_torchvision_ops

declare_missing_torchvision_ops()  # transformers imports torchvision where installed
from transformers import ResNetConfig, ResNetForImageClassification

from quark.torch.extensions.brevitas import presets
from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer


class Logits(nn.Module):
    """The transformers model with a plain tensor in and out (what an ONNX graph takes)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values=pixel_values).logits


def resnet() -> nn.Module:
    torch.manual_seed(0)
    config = ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic", num_labels=10)
    return Logits(ResNetForImageClassification(config)).eval()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="resnet_xint8.onnx")
    args = parser.parse_args(argv)

    model = resnet()
    images = torch.rand(64, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    calib, held_out = images[:48].split(16), images[48:]
    quantizer = ModelQuantizer(presets.xint8())
    qmodel = quantizer.quantize_model(model, calib, progress=False)
    print(quantizer.summary(), "\n")

    with torch.no_grad():
        ref, out = model(held_out), qmodel(held_out)
    cosine = float(nn.functional.cosine_similarity(out, ref, dim=1).mean())
    agree = float((out.argmax(1) == ref.argmax(1)).float().mean())
    print(f"held-out logits vs float: mean cosine {cosine:.4f}, top-1 agreement {100 * agree:.0f}%")

    report = ModelExporter(args.output).export_onnx_model(qmodel, held_out[:1])  # the preset targets the IPU
    print(report)
    print(f"wrote {args.output} ({os.path.getsize(args.output) / 1024:.0f} KiB)")
    return {"cosine": cosine, "agreement": agree, "report": report}


if __name__ == "__main__":
    main()
