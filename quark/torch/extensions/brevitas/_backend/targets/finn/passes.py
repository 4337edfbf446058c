"""The project's own graph edits for FINN, as qonnx ``Transformation`` s like FINN's passes."""

from __future__ import annotations

import numpy as np
from qonnx.transformation.base import Transformation


class AbsorbClipIntoMultiThreshold(Transformation):
    """Clip(lo, hi) feeding only a MultiThreshold becomes part of it.

    FINN converts ReLU6 / Hardtanh + quantizer into Clip -> MultiThreshold and has no pass for
    the Clip, which then blocks streamlining (the scale and bias before it stay float). Exact:
    counting clip(x) >= t is counting always for t <= lo, never for t > hi, and x >= t between.
    """

    def apply(self, model):
        for node in model.graph.node:
            consumers = model.find_consumers(node.output[0]) if node.op_type == "Clip" else None
            if not consumers or len(consumers) != 1 or consumers[0].op_type != "MultiThreshold":
                continue
            names = [*node.input[1:3], "", ""][:2]  # min, max: optional inputs
            bounds = [model.get_initializer(name) if name else None for name in names]
            if any(name and bound is None for name, bound in zip(names, bounds)):
                continue  # bounds computed in the graph
            lo = -np.inf if bounds[0] is None else float(bounds[0])
            hi = np.inf if bounds[1] is None else float(bounds[1])
            threshold = consumers[0]
            values = model.get_initializer(threshold.input[1])
            values = np.where(values <= lo, -np.inf, np.where(values > hi, np.inf, values)).astype(values.dtype)
            model.set_initializer(threshold.input[1], values)
            threshold.input[0] = node.input[0]
            model.graph.node.remove(node)
            return model, True
        return model, False
