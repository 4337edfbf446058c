"""One call: a QONNX file (or a quantized torch model) to a directory ready for FINN's
``build_dataflow`` with Vivado: the QONNX file, the dataflow parent and partition, the folding and
build configurations, the estimate report and the verification result.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from quark.torch.extensions.brevitas._backend.export.verify import (
    FLOAT_RTOL,
    execute_qonnx,
    float_tolerance,
    max_diff,
)
from quark.torch.extensions.brevitas._backend.targets.finn.errors import FinnError
from quark.torch.extensions.brevitas._backend.targets.finn.estimate import (
    ESTIMATED,
    FOLDING_ATTRIBUTES,
    MVAU_WWIDTH_MAX,
    Estimate,
    fold_and_estimate,
    plain,
)
from quark.torch.extensions.brevitas._backend.targets.finn.parts import FpgaPart, resolve
from quark.torch.extensions.brevitas._backend.targets.finn.pipeline import (
    as_array,
    dataflow_from_qonnx,
    require_finn,
    top_indices,
)
from quark.torch.extensions.brevitas._backend.targets.pipeline import StepCheck
from quark.torch.quantization.files import atomic_path, write_text

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Verification:
    """The hardware-layer graph executed in Python (qonnx ``execute_onnx``) against a reference."""

    reference: str  # "torch" (expected outputs given) or "QONNX"
    samples: int
    max_abs_diff: float
    identical_predictions: int  # samples whose argmax (or top-k indices) equals the reference's
    allowed: float

    @property
    def predictions_identical(self) -> bool:
        return self.identical_predictions == self.samples

    @property
    def passed(self) -> bool:
        return self.predictions_identical and self.max_abs_diff <= self.allowed


@dataclass(frozen=True)
class DataflowExport:
    """What :func:`export_finn_dataflow` wrote and found."""

    directory: str
    files: dict[str, str]  # role -> path
    steps: tuple[StepCheck, ...]
    outside: tuple[str, ...]
    float_layers: tuple[str, ...]
    estimate: Estimate
    verification: Verification

    def __str__(self) -> str:
        v, e = self.verification, self.estimate
        lines = [
            f"FINN dataflow in {self.directory}: one partition of {len(e.layers)} hardware layers; "
            + f"outside: {', '.join(self.outside) or 'nothing'}",
            *("  " + s.describe() for s in self.steps),
            (
                f"  verified on {v.samples} samples against {v.reference}: max |diff| {v.max_abs_diff:.3g} "
                f"(allowed {v.allowed:.3g}), identical predictions {v.identical_predictions}/{v.samples} "
                f"-> {'PASS' if v.passed else 'FAIL'}"
            ),
            f"  {e.part.part} at {e.clock_mhz:g} MHz: {e.fps:,.0f} fps, "
            + ", ".join(f"{r} {e.totals[r]:,.0f} ({100 * e.utilization[r]:.1f} %)" for r in ESTIMATED),
            *("  problem: " + p for p in e.problems),
        ]
        return "\n".join(lines)


def export_finn_dataflow(
    qonnx_path: str | os.PathLike,
    inputs: Any,
    output_dir: str | os.PathLike,
    *,
    expected: Any = None,
    part: str = "xc7z020clg400-1",
    target_fps: float | None = None,
    clock_mhz: float = 100.0,
    top_k: int | None = None,
    check_samples: int = 4,
    rtol: float = FLOAT_RTOL,
    mvau_wwidth_max: int = MVAU_WWIDTH_MAX,
) -> DataflowExport:
    """From a QONNX file to a directory ready for FINN's ``build_dataflow`` (with Vivado).

    Runs :func:`dataflow_from_qonnx` (each step checked on the first ``check_samples`` inputs),
    executes the hardware-layer graph on every input and compares it with ``expected`` (the
    torch model's outputs; default: the QONNX graph's), then :func:`fold_and_estimate` for
    ``part``. Writes to ``output_dir``:

    - ``model.qonnx.onnx``: the QONNX file;
    - ``dataflow_parent.onnx`` / ``dataflow_partition.onnx``: FINN's parent graph (host-side layout
      nodes and one StreamingDataflowPartition) and the partition, specialized for ``part`` and folded;
    - ``folding_config.json``: the folding of every layer (FINN's ``folding_config_file`` format);
    - ``build_config.json``: the settings of FINN's ``DataflowBuildConfig`` for the rest of the build;
    - ``estimate.md`` / ``estimate.json``: per-layer and total resources, cycles, fps, latency against
      the part's capacity, and what keeps the design from the target or the part;
    - ``verification.json``: the step checks and the hardware graph against torch.

    The verified graph is the hardware-layer graph before specialization: the specialized HLS/RTL
    layers run only in FINN's cppsim/rtlsim, which need Vivado; folding does not change what a
    layer computes.

    Raises:
        FinnError: a step failed or changed the outputs, nodes stayed outside the hardware, or
            the hardware graph differs from ``expected``; names the step, node (and torch module) or
            sample count.
        ValueError: unknown part, bad clock or target.
    """
    require_finn()
    from finn.util.config import extract_model_config_to_json
    from qonnx.custom_op.registry import getCustomOp

    samples = as_array(inputs, "inputs")
    if samples.ndim < 2:
        raise ValueError(f"inputs: expected a batch of samples (batch first), got shape {samples.shape}")
    fpga = resolve(part) if not isinstance(part, FpgaPart) else part  # fail before the long steps
    out = os.fspath(output_dir)
    os.makedirs(out, exist_ok=True)
    files = {"qonnx": os.path.join(out, "model.qonnx.onnx")}
    if os.path.abspath(qonnx_path) != os.path.abspath(files["qonnx"]):
        with atomic_path(files["qonnx"]) as temp:
            shutil.copyfile(os.fspath(qonnx_path), temp)
    dataflow = dataflow_from_qonnx(files["qonnx"], samples[:check_samples], out, top_k=top_k, rtol=rtol)
    verification = _verify(dataflow.parent, samples, expected, top_k, rtol, files["qonnx"])
    folded, estimate = fold_and_estimate(
        dataflow.partition, fpga, target_fps=target_fps, clock_mhz=clock_mhz, mvau_wwidth_max=mvau_wwidth_max
    )
    files.update(
        {
            "partition": os.path.join(out, "dataflow_partition.onnx"),
            "parent": os.path.join(out, "dataflow_parent.onnx"),
            "folding_config": os.path.join(out, "folding_config.json"),
            "build_config": os.path.join(out, "build_config.json"),
            "estimate_md": os.path.join(out, "estimate.md"),
            "estimate_json": os.path.join(out, "estimate.json"),
            "verification": os.path.join(out, "verification.json"),
        }
    )
    # every file is written beside its name and renamed when complete (quark.torch.quantization.files)
    with atomic_path(files["partition"]) as temp:
        folded.save(temp)
    getCustomOp(dataflow.parent.get_nodes_by_op_type("StreamingDataflowPartition")[0]).set_nodeattr(
        "model", files["partition"]
    )
    with atomic_path(files["parent"]) as temp:
        dataflow.parent.save(temp)
    with atomic_path(files["folding_config"]) as temp:
        extract_model_config_to_json(folded, temp, list(FOLDING_ATTRIBUTES))
    _write_json(files["build_config"], _build_config(fpga, clock_mhz, files["folding_config"]))
    write_text(files["estimate_md"], estimate.markdown())
    _write_json(files["estimate_json"], estimate.to_json())
    result = DataflowExport(
        out,
        files,
        tuple(dataflow.steps),
        tuple(dataflow.outside),
        tuple(dataflow.float_layers),
        estimate,
        verification,
    )
    _write_json(
        files["verification"],
        {
            "steps": [asdict(s) for s in result.steps],
            "outside_partition": list(result.outside),
            "float_layers": list(result.float_layers),
            "hardware_graph": {
                **asdict(verification),
                "predictions_identical": verification.predictions_identical,
                "passed": verification.passed,
            },
        },
    )
    if not verification.passed:
        raise FinnError(
            f"the hardware-layer graph differs from {verification.reference} on {verification.samples} samples: max "
            f"|diff| {verification.max_abs_diff:.6g} (allowed {verification.allowed:.6g}), predictions "
            f"identical on {verification.identical_predictions} of {verification.samples}; files are in {out}"
        )
    logger.info("%s", result)
    return result


def _verify(parent, samples, expected, top_k, rtol, qonnx_path) -> Verification:
    """The hardware-layer graph on every sample against torch's outputs (or the QONNX graph's)."""
    produced = execute_qonnx(parent, [samples])[0]
    if expected is None:
        from quark.torch.extensions.brevitas._backend.targets.finn.pipeline import prepare

        reference, name = prepare(qonnx_path, samples)[2][0], "QONNX"
    else:
        reference, name = as_array(expected, "expected"), "torch"
    if top_k is not None:
        labels = top_indices(reference, top_k)
        indices = produced.reshape(labels.shape)
        identical = int(np.all(indices == labels, axis=-1).sum())
        return Verification(name, len(samples), max_diff(indices, labels), identical, 0.0)
    reference = reference.reshape(produced.shape)
    identical = int((produced.argmax(-1) == reference.argmax(-1)).sum())
    return Verification(
        name,
        len(samples),
        max_diff(produced, reference),
        identical,
        float_tolerance([reference], rtol),
    )


def _build_config(fpga: FpgaPart, clock_mhz: float, folding_config: str) -> dict[str, Any]:
    """Settings of FINN's ``DataflowBuildConfig`` (``finn.builder.build_dataflow_config``) that
    continue from ``dataflow_partition.onnx``: it is specialized and folded, so the build starts
    at code generation."""
    return {
        "output_dir": "finn_build",
        "fpga_part": fpga.part,
        "board": fpga.boards[0],
        "shell_flow_type": "vitis_alveo" if fpga.part.startswith("xcu") else "vivado_zynq",
        "synth_clk_period_ns": 1e3 / clock_mhz,
        "folding_config_file": os.path.basename(folding_config),
        "steps": [
            "step_minimize_bit_width",
            "step_generate_estimate_reports",
            "step_hw_codegen",
            "step_hw_ipgen",
            "step_set_fifo_depths",
            "step_create_stitched_ip",
            "step_synthesize_bitfile",
            "step_make_driver",
            "step_deployment_package",
        ],
        "generate_outputs": [
            "estimate_reports",
            "stitched_ip",
            "bitfile",
            "pynq_driver",
            "deployment_package",
        ],
    }


def _write_json(path: str, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, default=plain))
