"""The FINN hand-off: a QONNX export through qonnx cleanup, FINN's ``ConvertQONNXtoFINN`` and
``Streamline``, executed after every step and compared with the cleaned QONNX graph.

FINN comes from the optional package finn-plus (``pip install --no-deps finn-plus==1.6.1``, see
docs/export.md for the pieces it imports).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from quark.torch.extensions.brevitas._backend.export.safe_graph import load_checked
from quark.torch.quantization.files import atomic_path

logger = logging.getLogger(__name__)

#: relative tolerance of each FINN step against the cleaned QONNX graph (the steps fold scales
#: and biases into thresholds in float arithmetic)
FINN_RTOL = 1e-5


class FinnHandoffError(RuntimeError):
    """A FINN step failed or changed the graph's outputs."""


@dataclass(frozen=True)
class FinnStep:
    name: str
    max_abs_diff: float
    op_types: tuple[str, ...]


@dataclass(frozen=True)
class FinnReport:
    path: str
    steps: tuple[FinnStep, ...]
    input_datatypes: tuple[str, ...]

    def __str__(self) -> str:
        lines = [f"FINN hand-off {self.path} (inputs {', '.join(self.input_datatypes)})"]
        lines += [
            f"  {s.name}: max |diff| {s.max_abs_diff:.3g}; ops {sorted(set(s.op_types))}" for s in self.steps
        ]
        return "\n".join(lines)


#: streamlining passes of FINN: ``Streamline`` for chains, ``StreamlinePlus`` also moves scales
#: and biases through forks, residual additions and concatenations
STREAMLINERS = ("Streamline", "StreamlinePlus")


def absorb_clip_into_multithreshold():
    """A qonnx transformation: Clip(lo, hi) feeding only a MultiThreshold becomes part of it.

    FINN converts ReLU6 / Hardtanh + quantizer into Clip -> MultiThreshold and has no pass for
    the Clip, which then blocks streamlining (the scale and bias before it stay float). Exact:
    counting clip(x) >= t is counting always for t <= lo, never for t > hi, and x >= t between.
    """
    from qonnx.transformation.base import Transformation

    class AbsorbClipIntoMultiThreshold(Transformation):
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

    return AbsorbClipIntoMultiThreshold


def _finn_transforms(streamline: str):
    if streamline not in STREAMLINERS:
        raise ValueError(f"finn_handoff(streamline={streamline!r}): allowed {list(STREAMLINERS)}")
    try:
        from finn.transformation.qonnx.convert_qonnx_to_finn import ConvertQONNXtoFINN
        from finn.transformation.streamline import Streamline
        from finn.transformation.streamline.streamline_plus import StreamlinePlus
    except ImportError as error:
        raise ImportError(
            f"the FINN hand-off needs finn-plus ({error}); install it with "
            "`pip install --no-deps finn-plus==1.6.1` and the pieces listed in docs/export.md"
        ) from error
    passes = {"Streamline": Streamline, "StreamlinePlus": StreamlinePlus}
    return [
        ("ConvertQONNXtoFINN", ConvertQONNXtoFINN),
        ("AbsorbClipIntoMultiThreshold", absorb_clip_into_multithreshold()),
        (streamline, passes[streamline]),
    ]


def finn_handoff(
    qonnx_path: str | os.PathLike,
    inputs: torch.Tensor | Sequence[torch.Tensor],
    output_path: str | os.PathLike | None = None,
    *,
    rtol: float = FINN_RTOL,
    streamline: str = "Streamline",
) -> FinnReport:
    """Run a QONNX file through qonnx cleanup, ConvertQONNXtoFINN, the absorption of clips into
    thresholds (ReLU6, Hardtanh) and Streamline on ``inputs`` (``streamline="StreamlinePlus"`` for
    residual and concatenating networks).

    Every step's outputs must equal the cleaned QONNX graph's within ``rtol * max(1, max|ref|)``.
    The streamlined graph is written to ``output_path`` (default: ``<name>_finn.onnx``).

    Raises:
        UnsafeGraphError: the file holds ops other than standard ONNX and QONNX's quantizers (it is
            checked before anything in it is executed, see ``safe_graph``).
        ImportError: finn-plus is not installed.
        FinnHandoffError: a step fails or changes the outputs; names the step.
    """
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx
    from qonnx.transformation.infer_datatypes import InferDataTypes
    from qonnx.transformation.infer_shapes import InferShapes
    from qonnx.util.cleanup import cleanup_model

    transforms = _finn_transforms(streamline)
    qonnx_path = os.fspath(qonnx_path)
    tensors = [inputs] if isinstance(inputs, torch.Tensor) else list(inputs)
    feeds = [t.detach().float().cpu().numpy() for t in tensors]

    def run(model) -> list[np.ndarray]:
        out = execute_onnx(model, {i.name: x for i, x in zip(model.graph.input, feeds)})
        return [out[o.name] for o in model.graph.output]

    # checked before qonnx reads it: qonnx imports the module each node's domain names
    model = cleanup_model(ModelWrapper(load_checked(qonnx_path))).transform(InferShapes()).transform(InferDataTypes())
    reference = run(model)
    steps = [FinnStep("qonnx cleanup", 0.0, tuple(n.op_type for n in model.graph.node))]
    for name, transform in transforms:
        try:
            model = model.transform(transform())
            produced = run(model)
        except Exception as error:
            raise FinnHandoffError(
                f"FINN step {name} failed on {qonnx_path}: {type(error).__name__}: {error}"
            ) from error
        diff = max(float(np.max(np.abs(p - r))) for p, r in zip(produced, reference))
        allowed = rtol * max(1.0, max(float(np.max(np.abs(r))) for r in reference))
        steps.append(FinnStep(name, diff, tuple(n.op_type for n in model.graph.node)))
        if not diff <= allowed:
            raise FinnHandoffError(
                f"FINN step {name} changed the outputs of {qonnx_path}: max |diff| {diff:.6g} > allowed {allowed:.6g}"
            )
    output_path = os.fspath(output_path) if output_path else os.path.splitext(qonnx_path)[0] + "_finn.onnx"
    with atomic_path(output_path) as temp:  # complete or not at all (quark.torch.quantization.files)
        model.save(temp)
    report = FinnReport(
        output_path, tuple(steps), tuple(str(model.get_tensor_datatype(i.name)) for i in model.graph.input)
    )
    logger.info("%s", report)
    return report
