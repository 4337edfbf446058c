"""Readers of written ONNX graphs (onnx): node types and initializers."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper


def op_types(path) -> list[str]:
    return [n.op_type for n in onnx.load(str(path)).graph.node]


def initializers(path) -> dict[str, np.ndarray]:
    return {i.name: numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer}
