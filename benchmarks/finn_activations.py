"""Each activation FINN has no layer for, as the hardware the package makes of it, priced by FINN's
estimates: SiLU, HardSwish, GELU, Mish, Sigmoid, HardSigmoid, Tanh, ELU after the first convolution
of a small CNN (conv 3->16, batch norm, activation, conv 16->16, batch norm, ReLU, global pool,
linear; 3x16x16, random weights, batch-norm statistics of the data) at 2, 4 and 8 bits.

For each: the form the package chose (one ``Thresholding`` layer where the map from input levels to
output levels never decreases, else two on a ``DuplicateStreams`` and an ``ElementwiseSub``), its
layers' LUT / BRAM_18K and cycles per frame from ``export_finn_dataflow``'s estimate (PE 1, no
target fps, xc7z020clg400-1), the hardware graph's largest difference to torch on 64 images, and
beside it what a ``Lookup`` table of the 2^k input levels would cost (FINN's ``Lookup_hls``
estimates for H x W x C lookups of one entry each: it does not fold, one element a cycle).

    .venv/bin/python benchmarks/finn_activations.py [--bits 2 4 8] [--activations SiLU ...]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
import warnings
from pathlib import Path

import torch
from torch import nn

ACTIVATIONS = ("SiLU", "Hardswish", "GELU", "Mish", "Sigmoid", "Hardsigmoid", "Tanh", "ELU")
SIZE, CHANNELS = 16, 16
PART = "xc7z020clg400-1"
#: the layers that compute the activation (the first convolution's own thresholds aside)
FORM = ("Thresholding", "DuplicateStreams", "ElementwiseSub")


def _network(activation: str) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, CHANNELS, 3, padding=1), nn.BatchNorm2d(CHANNELS), getattr(nn, activation)(),
        nn.Conv2d(CHANNELS, CHANNELS, 3, padding=1), nn.BatchNorm2d(CHANNELS), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(CHANNELS, 10),
    ).train()  # fmt: skip
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _ in range(4):
            model(torch.rand(16, 3, SIZE, SIZE, generator=generator))
    return model.eval()


def _lookup_estimate(bits: int, out_bits: int) -> tuple[float, float, int]:
    """(LUT as LUTRAM, or BRAM_18K as block RAM; cycles) of FINN's Lookup_hls holding 2^bits entries
    of out_bits, for every element of the activation's SIZE x SIZE x CHANNELS map."""
    from onnx import TensorProto, helper
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.custom_op.registry import getCustomOp

    elements = SIZE * SIZE * CHANNELS
    node = helper.make_node(
        "Lookup_hls", ["index", "table"], ["out"], domain="finn.custom_op.fpgadataflow.hls", backend="fpgadataflow",
        NumEmbeddings=2**bits, EmbeddingDim=1, EmbeddingType=f"INT{out_bits}", InputType=f"UINT{bits}",
        InputShape=[1, elements], ram_style="auto",
    )  # fmt: skip
    graph = helper.make_graph(
        [node],
        "lookup",
        [helper.make_tensor_value_info("index", TensorProto.FLOAT, [1, elements])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, elements, 1])],
    )
    op = getCustomOp(ModelWrapper(helper.make_model(graph)).graph.node[0])
    op.set_nodeattr("ram_style", "distributed")
    lut = float(op.lut_estimation(PART))
    op.set_nodeattr("ram_style", "block")
    return lut, float(op.bram_estimation(PART)), int(op.get_exp_cycles())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bits", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--activations", nargs="+", default=list(ACTIVATIONS))
    args = parser.parse_args()
    logging.getLogger("quark").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)

    from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer
    from quark.torch.extensions.brevitas.presets import finn

    print(
        f"{'activation':<12}{'bits':>5}  {'form':<26}{'LUT':>7}{'BRAM':>6}{'cycles':>8}  "
        f"{'lookup LUT':>10}{'or BRAM':>8}{'cycles':>8}{'max |hw - torch|':>18}{'seconds':>9}"
    )
    images = torch.rand(64, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(2))
    for activation in args.activations:
        for bits in args.bits:
            start = time.perf_counter()
            calibration = [torch.rand(16, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(3))]
            qmodel = ModelQuantizer(finn(weight_bits=bits, act_bits=bits)).quantize_model(
                _network(activation), calibration, progress=False
            )
            with tempfile.TemporaryDirectory() as directory:
                result = ModelExporter(Path(directory)).export_finn_dataflow(qmodel, images, integer_input=True)
            layers = [
                layer
                for layer in result.estimate.layers
                if layer.op_type.startswith(FORM) and not (layer.op_type.startswith("Thresholding") and layer.module == "0")
            ]
            kinds = sorted({layer.op_type.rsplit("_", 1)[0] for layer in layers})
            form = "2 thresholds, difference" if "ElementwiseSub" in kinds else "1 threshold"
            lut = sum(layer.resources["LUT"] for layer in layers)
            bram = sum(layer.resources["BRAM_18K"] for layer in layers)
            cycles = max((layer.cycles for layer in layers), default=0)
            table = _lookup_estimate(bits, bits)
            print(
                f"{activation:<12}{bits:>5}  {form:<26}{lut:>7,.0f}{bram:>6,.0f}{cycles:>8,}  "
                f"{table[0]:>10,.0f}{table[1]:>8,.0f}{table[2]:>8,}{result.verification.max_abs_diff:>18.3g}"
                f"{time.perf_counter() - start:>9.1f}"
            )


if __name__ == "__main__":
    main()
