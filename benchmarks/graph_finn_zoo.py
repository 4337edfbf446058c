"""Graph mode + FINN on the export zoo: node counts before and after FINN, float nodes left, and
FINN's dataflow (one partition of hardware layers) with its estimate for a Pynq-Z1.

For the TFC-like MLP, the CNV-like CNN, the ResNet-like network with batch norm, the network with
a concatenation and the MobileNet-like network (depthwise, ReLU6): quantize in graph mode with the
FINN preset (W4A4, batch-norm statistics from data), export QONNX (verified), make the input
integer, run the FINN hand-off (ConvertQONNXtoFINN, clip absorption, StreamlinePlus), and report
the exported and streamlined node counts, the float nodes left between the first and last compute
layer, and the largest difference to torch. Then ``ModelExporter.export_finn_dataflow`` (integer
input, xc7z020clg400-1 at 100 MHz, folded for 50,000 fps): hardware layers, nodes left on the
host, the hardware graph's largest difference to torch, LUT / BRAM_18K / DSP and estimated fps.

    .venv/bin/python benchmarks/graph_finn_zoo.py
"""

from __future__ import annotations

import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from _shared.zoo import ZOO, calibration

from quark.torch.extensions.brevitas._backend.targets.finn import interface as finn_interface
from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer, finn_handoff
from quark.torch.extensions.brevitas.presets import finn

NETWORKS = {"tfc": ("ReLU",), "cnv": ("ReLU",), "resnet_bn": ("ReLU",), "concat": ("ReLU",), "mobilenet": ("ReLU6",)}


def main() -> None:
    logging.getLogger("quark").setLevel(logging.ERROR)
    torch.set_num_threads(1)
    print(
        f"{'network':<11}{'exported':>9}{'FINN':>6}{'float nodes':>13}{'max |FINN - torch|':>20}"
        f"{'hw layers':>10}  {'host':<24}{'max |hw - torch|':>16}{'LUT':>8}{'BRAM':>6}{'DSP':>5}{'est. fps':>10}"
        f"{'seconds':>9}"
    )
    for name, unsigned in NETWORKS.items():
        start = time.perf_counter()
        torch.manual_seed(0)
        model = ZOO[name].build().train()
        with torch.no_grad():  # batch-norm statistics of the data, as a trained network has
            for batch in calibration(ZOO[name], batches=4, seed=5):
                model(batch)
        qmodel = ModelQuantizer(finn(unsigned=unsigned)).quantize_model(
            model.eval(), calibration(ZOO[name]), progress=False
        )
        x = ZOO[name].sample(torch.Generator().manual_seed(1))
        with tempfile.TemporaryDirectory() as directory:
            path = Path(directory) / f"{name}.onnx"
            assert ModelExporter(path).export_qonnx_model(qmodel, x).passed
            exported = len(onnx.load(str(path)).graph.node)
            integer = finn_interface.integer_input(path, Path(directory) / "int.onnx")
            x_int = torch.clamp(torch.floor(x / integer.scale + 0.5), 0, 255)
            report = finn_handoff(Path(directory) / "int.onnx", x_int)
            from qonnx.core.modelwrapper import ModelWrapper

            from quark.torch.extensions.brevitas._backend.export.verify import execute_qonnx

            streamlined = ModelWrapper(report.path)
            out = execute_qonnx(streamlined, [x_int.numpy()])[0]
            diff = float(np.max(np.abs(out - qmodel(x).detach().numpy())))
            floats = finn_interface.float_operations(streamlined)
            dataflow = ModelExporter(Path(directory) / "dataflow").export_finn_dataflow(
                qmodel, x, part="xc7z020clg400-1", clock_mhz=100.0, target_fps=50_000, integer_input=True
            )
            e, v = dataflow.estimate, dataflow.verification
            print(
                f"{name:<11}{exported:>9}{len(streamlined.graph.node):>6}{len(floats):>13}{diff:>20.3g}"
                f"{len(e.layers):>10}  {', '.join(dataflow.outside) or '-':<24}{v.max_abs_diff:>16.3g}"
                f"{e.totals['LUT']:>8,.0f}{e.totals['BRAM_18K']:>6,.0f}{e.totals['DSP']:>5,.0f}{e.fps:>10,.0f}"
                f"{time.perf_counter() - start:>9.1f}"
            )


if __name__ == "__main__":
    main()
