"""FINN's streamlining with qonnx's own ``InferShapes`` and ``GiveUniqueParameterTensors`` and with
the indexed lookups' replacements (``qonnx_index._infer_shapes``: shape inference on a copy without
the weights' data; ``_give_unique_parameter_tensors``: only copied weights converted), side by side.

For each network of ``quark.torch.examples.vision_zoo`` (random weights, 3x32x32, W4A4
``presets.finn()`` graph mode): export its QONNX once, take it through the pipeline's conversion and
clip absorption, then run the pipeline's ``_streamline`` ``--repeats`` times each way, interleaved
(replaced, qonnx's, replaced, ...), both inside ``indexed_lookups()`` (the other replacements and
the indexes on in both), Python's random generators seeded alike before each run. Printed: the
seconds of each run and whether the streamlined graphs are byte-identical.

    PYTHONPATH=. .venv/bin/python benchmarks/finn_streamline_speed.py [--networks efficientnet_lite0] [--repeats 1]

Needs finn-plus, torchvision and timm (``pip install --no-deps torchvision timm``).
"""

from __future__ import annotations

import random
import tempfile
import time
from unittest import mock

import numpy as np
from finn_fold_speed import export, main

#: the replacements this benchmark takes out for qonnx's own
COMPARED = ("InferShapes.apply", "GiveUniqueParameterTensors.apply")


def bench(name: str, repeats: int) -> str:
    from qonnx.core.modelwrapper import ModelWrapper

    from quark.torch.extensions.brevitas._backend import qonnx_index
    from quark.torch.extensions.brevitas._backend.targets.finn import pipeline

    path = tempfile.mktemp(suffix=".onnx")
    export(name, path)
    with qonnx_index.indexed_lookups():
        model = pipeline.prepare(path, np.zeros((1, 3, 32, 32), np.float32))[0]
        for _, step in pipeline.FRONT_END[:2]:  # conversion, clips
            model = step(model)
    start_bytes = model.model.SerializeToString()
    seconds: dict[str, list[float]] = {"replaced": [], "qonnx's": []}
    graphs = {}
    for _ in range(repeats):
        for way, removed in (("replaced", ()), ("qonnx's", COMPARED)):
            with mock.patch.dict(qonnx_index.REPLACED):  # read when indexed_lookups() installs its patch
                for key in removed:
                    del qonnx_index.REPLACED[key]
                with qonnx_index.indexed_lookups():
                    random.seed(0)
                    np.random.seed(0)
                    start = time.perf_counter()
                    graphs[way] = pipeline._streamline(
                        ModelWrapper(type(model.model).FromString(start_bytes))
                    )
                    seconds[way].append(time.perf_counter() - start)
    same = graphs["replaced"].model.SerializeToString() == graphs["qonnx's"].model.SerializeToString()
    times = "; ".join(f"{way} {' / '.join(f'{s:.1f}' for s in runs)} s" for way, runs in seconds.items())
    return f"{name}: streamlining {times}; graphs byte-identical {same}"


if __name__ == "__main__":
    main(bench, __doc__, networks=("efficientnet_lite0",), repeats=1)
