"""One call: a QONNX file to a directory FINN's own builder takes from there (with Vivado): the QONNX
file, the package's build run on it (:mod:`.runner`: FINN's front end to one dataflow partition,
specialized and folded for the part), the hardware graph verified on every input, the estimate, and
the files of FINN's build (``build_config.json``, ``build.py``, the folding, the verification data).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from quark.torch.extensions.brevitas._backend.accumulator import Promise
from quark.torch.extensions.brevitas._backend.export.verify import FLOAT_RTOL, float_tolerance, max_diff
from quark.torch.extensions.brevitas._backend.targets.finn import accumulators as accumulator_checks
from quark.torch.extensions.brevitas._backend.targets.finn import execute, runner
from quark.torch.extensions.brevitas._backend.targets.finn.build_config import (
    FOLDING_ATTRIBUTES,
    FinnBuildConfig,
)
from quark.torch.extensions.brevitas._backend.targets.finn.checks import StepCheck, records, top_indices
from quark.torch.extensions.brevitas._backend.targets.finn.errors import FinnError
from quark.torch.extensions.brevitas._backend.targets.finn.estimate import (
    DEEP_FIFO,
    Estimate,
    estimate,
    plain,
)
from quark.torch.extensions.brevitas._backend.targets.finn.front_end import PARENT, float_layers, require_finn
from quark.torch.extensions.brevitas._backend.targets.finn.interface import IntegerInput
from quark.torch.extensions.brevitas._backend.targets.finn.origins import named
from quark.torch.extensions.brevitas._backend.targets.finn.steps import step_names
from quark.torch.quantization.files import atomic_path, write_text

logger = logging.getLogger(__name__)

#: inputs the build's steps check each graph on (the first of the inputs given)
CHECK_SAMPLES = 4


@dataclass(frozen=True)
class Verification:
    """The hardware-layer graph executed on every sample against a reference."""

    reference: str  # "torch" (expected outputs given) or "QONNX"
    samples: int
    max_abs_diff: float
    identical_predictions: int  # samples whose argmax (or top-k indices) equals the reference's
    allowed: float
    #: what executed the hardware-layer graph: the batched executor (``execute.BATCHED``, bit-exact to
    #: FINN's Python execution) or, for a graph it cannot compute exactly, FINN's Python execution
    engine: str

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
    integer_input: IntegerInput | None = None  # the network input FINN takes, where it takes integers

    @property
    def accumulators(self) -> tuple[accumulator_checks.AccumulatorCheck, ...]:
        """The accumulator-aware layers' accumulators in FINN, against their promise (``A2QSpec``)."""
        return self.estimate.accumulators

    def to_json(self) -> dict[str, Any]:
        """The result as JSON data (the command line's ``--json``)."""
        return {
            "directory": self.directory,
            "files": dict(self.files),
            "steps": [asdict(s) for s in self.steps],
            "outside_partition": list(self.outside),
            "float_layers": list(self.float_layers),
            "verification": {
                **asdict(self.verification),
                "predictions_identical": self.verification.predictions_identical,
                "passed": self.verification.passed,
            },
            "estimate": self.estimate.to_json(),
        }

    def __str__(self) -> str:
        v, e = self.verification, self.estimate
        lines = [
            f"FINN dataflow in {self.directory}: one partition of {len(e.layers)} hardware layers; "
            + f"outside: {', '.join(self.outside) or 'nothing'}",
            *("  " + s.describe() for s in self.steps),
            "  hardware layers computing on floats: " + (", ".join(self.float_layers) or "none"),
            (
                f"  verified on {v.samples} samples against {v.reference}: max |diff| {v.max_abs_diff:.3g} "
                f"(allowed {v.allowed:.3g}), identical predictions {v.identical_predictions}/{v.samples} "
                f"-> {'PASS' if v.passed else 'FAIL'}; executed by the {v.engine}"
            ),
            f"  {e.part.part} at {e.clock_mhz:g} MHz: " + e.verdict().replace("**", ""),
            *("  problem: " + p for p in e.problems),
        ]
        if self.accumulators:
            saved = sum(c.luts_saved for c in self.accumulators)
            held = sum(c.holds for c in self.accumulators)
            lines.append(
                f"  accumulators (A2QSpec): {held}/{len(self.accumulators)} within their promise after FINN's "
                f"MinimizeAccumulatorWidth; {saved:,.0f} LUTs saved against the unconstrained accumulators"
            )
            lines += ["    " + c.describe() for c in self.accumulators]
        return "\n".join(lines)


def export_finn_dataflow(
    qonnx_path: str | os.PathLike,
    inputs: Any,
    output_dir: str | os.PathLike,
    config: FinnBuildConfig | None = None,
    *,
    expected: Any = None,
    integer_input: IntegerInput | None = None,
    accumulators: Mapping[str, Promise] | None = None,
) -> DataflowExport:
    """From a QONNX file to a directory FINN's builder continues from (with Vivado).

    Runs the package's build (``config``'s steps, by default the front end to one dataflow partition,
    specialized and folded for ``config.part``), each step checked on the first :data:`CHECK_SAMPLES`
    inputs against ``expected`` (the torch model's outputs; default: the QONNX graph's); executes the
    hardware-layer graph on every input (:mod:`.execute`: batched, bit-exact to FINN's Python
    execution) against ``expected``; estimates the folded partition. ``integer_input``: what the
    exporter made of the network input (the host's scale, written in the README). Writes to
    ``output_dir``:

    - ``model.qonnx.onnx``: the QONNX file (and, with ``integer_input``, ``model_integer_input.qonnx.onnx``:
      the same graph taking the input quantizer's integers, where the build starts);
    - ``dataflow_parent.onnx`` / ``dataflow_partition.onnx``: FINN's parent graph (host-side layout
      nodes and one StreamingDataflowPartition) and the partition, specialized for the part and folded;
    - ``folding_config.json``: the folding of every layer (FINN's ``folding_config_file``);
    - ``build_config.json`` and ``build.py``: FINN's ``build_dataflow_cfg`` from the QONNX file with
      the package's steps, then FINN's own to a bitfile; ``verify_input.npy`` /
      ``verify_expected_output.npy``: the inputs and torch's outputs its ``verify_steps`` compare;
    - ``estimate.md`` / ``estimate.json``: per-layer and total resources, cycles, fps, latency against
      the part's capacity, the margin left, and what keeps the design from the target or the part;
    - ``verification.json``: the step checks and the hardware graph against torch.

    ``accumulators`` (module -> ``accumulator.Promise``, read from the model's ``A2QSpec`` layers): after
    FINN's MinimizeAccumulatorWidth, each such layer's MVAU / VVAU must be within the promised width.

    The verified graph is the hardware-layer graph before specialization: the specialized HLS/RTL
    layers run only in FINN's cppsim/rtlsim, which need Vivado (FINN's ``verify_steps`` in
    ``build_config.json`` check them there); folding does not change what a layer computes.

    Raises:
        FinnError: a step failed or changed the outputs, nodes stayed outside the hardware, the
            hardware graph differs from ``expected``, or an accumulator-aware layer's accumulator is
            beyond its promise; names the step, node (and torch module), sample count or layer.
        FinnConfigError: a setting of ``config`` (the part, the clock, the target, the folding).
    """
    require_finn()
    from finn.util.config import extract_model_config_to_json
    from qonnx.custom_op.registry import getCustomOp

    config = config or FinnBuildConfig()
    samples = as_array(inputs, "inputs")
    if samples.ndim < 2:
        raise ValueError(f"inputs: expected a batch of samples (batch first), got shape {samples.shape}")
    out = os.path.abspath(os.fspath(output_dir))
    os.makedirs(out, exist_ok=True)
    files = {role: os.path.join(out, name) for role, name in FILES.items()}
    files["unspecialized_partition"] = os.path.join(out, "intermediate_models", "supported_op_partitions", "partition_0.onnx")
    if integer_input is None:
        del files["integer_input_qonnx"]
    source = files["integer_input_qonnx" if integer_input is not None else "qonnx"]
    if os.path.abspath(qonnx_path) != source:
        with atomic_path(source) as temp:
            shutil.copyfile(os.fspath(qonnx_path), temp)
    model = runner.load(source)
    if expected is None:
        reference, reference_name = _qonnx_outputs(source, samples), "QONNX"
    else:
        reference, reference_name = as_array(expected, "expected"), "torch"
    np.save(files["verify_input"], samples[:CHECK_SAMPLES])
    np.save(files["verify_expected_output"], reference[:CHECK_SAMPLES])
    config = replace(
        config,
        output_dir=out,
        verify_input_npy=files["verify_input"],
        verify_expected_output_npy=files["verify_expected_output"],
    )
    logger.info("FINN build: %s", ", ".join(step_names(config)))
    folded = runner.run(model, config)
    parent = runner.load_intermediate(config.intermediate_models_directory() / PARENT)
    logger.info("FINN hardware-layer graph: executing it on %d samples", len(samples))
    verification = _verify(parent, samples, reference, reference_name, config)
    result_estimate = estimate(folded, config)
    result_estimate = replace(
        result_estimate, accumulators=accumulator_checks.check(folded, accumulators or {}, config.fpga_part)
    )
    # every file is written beside its name and renamed when complete (quark.torch.quantization.files)
    with atomic_path(files["partition"]) as temp:
        folded.save(temp)
    getCustomOp(parent.get_nodes_by_op_type("StreamingDataflowPartition")[0]).set_nodeattr("model", files["partition"])
    with atomic_path(files["parent"]) as temp:
        parent.save(temp)
    with atomic_path(files["folding_config"]) as temp:
        extract_model_config_to_json(folded, temp, list(FOLDING_ATTRIBUTES))
        _without_default_fifos(temp)
    _write_json(files["build_config"], finn_build_config(config, integer_input))
    write_text(files["estimate_md"], result_estimate.markdown())
    _write_json(files["estimate_json"], result_estimate.to_json())
    outside = [named(parent, n) for n in parent.graph.node if n.op_type != "StreamingDataflowPartition"]
    partition = runner.load_intermediate(files["unspecialized_partition"])
    result = DataflowExport(
        out,
        files,
        tuple(records(folded)),
        tuple(outside),
        tuple(float_layers(partition)),
        result_estimate,
        verification,
        integer_input,
    )
    write_text(files["build_script"], BUILD_SCRIPT.replace("{MODEL}", os.path.basename(source)))
    os.chmod(files["build_script"], 0o755)
    write_text(files["readme"], _readme(result))
    _write_json(
        files["verification"],
        {
            "integer_input": None if integer_input is None else asdict(integer_input),
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
    broken = accumulator_checks.problems(result_estimate.accumulators)
    if broken:
        raise FinnError(
            f"accumulators beyond their promise after FINN's MinimizeAccumulatorWidth; files are in {out}", broken
        )
    if not verification.passed:
        raise FinnError(
            f"the hardware-layer graph differs from {verification.reference} on {verification.samples} samples: max "
            f"|diff| {verification.max_abs_diff:.6g} (allowed {verification.allowed:.6g}), predictions "
            f"identical on {verification.identical_predictions} of {verification.samples}; files are in {out}"
        )
    logger.debug("%s", result)
    return result


@dataclass(frozen=True)
class FinnReport:
    """What :func:`finn_handoff` wrote: the streamlined graph, its steps, its input datatypes."""

    path: str
    steps: tuple[StepCheck, ...]
    input_datatypes: tuple[str, ...]

    def __str__(self) -> str:
        lines = [f"FINN hand-off {self.path} (inputs {', '.join(self.input_datatypes)})"]
        return "\n".join([*lines, *("  " + s.describe() for s in self.steps)])


def finn_handoff(
    qonnx_path: str | os.PathLike,
    inputs: Any,
    output_path: str | os.PathLike | None = None,
    *,
    expected: Any = None,
) -> FinnReport:
    """The FINN build's hand-off steps (:data:`~.steps.HANDOFF`: qonnx cleanup, ``ConvertQONNXtoFINN``,
    the clips of ReLU6 / Hardtanh absorbed into thresholds, streamlining) on a QONNX file, each step
    checked on ``inputs`` (a batch) against ``expected`` (default: the cleaned QONNX graph's outputs).
    Writes the streamlined graph to ``output_path`` (default: ``<name>_finn.onnx``).

    Raises:
        UnsafeGraphError: the file holds ops other than standard ONNX and QONNX's quantizers (checked
            before anything in it is executed, see ``safe_graph``).
        ImportError: finn-plus is not installed.
        FinnError: a step fails or changes the outputs; names the step.
    """
    import tempfile

    from quark.torch.extensions.brevitas._backend.targets.finn.steps import HANDOFF

    require_finn()
    qonnx_path = os.fspath(qonnx_path)
    samples = as_array(inputs, "inputs")
    reference = _qonnx_outputs(qonnx_path, samples) if expected is None else as_array(expected, "expected")
    with tempfile.TemporaryDirectory(prefix="finn_handoff_") as scratch:
        np.save(os.path.join(scratch, "input.npy"), samples)
        np.save(os.path.join(scratch, "expected.npy"), reference)
        config = FinnBuildConfig(
            steps=HANDOFF,
            output_dir=scratch,
            verify_input_npy=os.path.join(scratch, "input.npy"),
            verify_expected_output_npy=os.path.join(scratch, "expected.npy"),
        )
        model = runner.run(runner.load(qonnx_path), config)
    output_path = os.fspath(output_path) if output_path else os.path.splitext(qonnx_path)[0] + "_finn.onnx"
    with atomic_path(output_path) as temp:  # complete or not at all (quark.torch.quantization.files)
        model.save(temp)
    datatypes = tuple(str(model.get_tensor_datatype(i.name)) for i in model.graph.input)
    report = FinnReport(output_path, tuple(records(model)), datatypes)
    logger.info("%s", report)
    return report


@dataclass
class Dataflow:
    """FINN's front end and partition on a QONNX file: the parent graph, its one partition, the checks."""

    parent: Any  # ModelWrapper: host-side nodes + one StreamingDataflowPartition
    partition: Any  # ModelWrapper: the hardware layers, before specialization
    steps: list[StepCheck]
    outside: list[str]  # nodes of the parent graph outside the partition
    float_layers: list[str]  # hardware layers with a float input or output


def dataflow_from_qonnx(
    qonnx_path: str | os.PathLike,
    inputs: Any,
    work_dir: str | os.PathLike,
    config: FinnBuildConfig | None = None,
    *,
    expected: Any = None,
) -> Dataflow:
    """The build's steps up to one dataflow partition (:data:`~.steps.FRONT_END` and the partition
    step) on a QONNX file, each checked on ``inputs`` against ``expected`` (default: the cleaned QONNX
    graph's outputs); the partition's files under ``work_dir``.

    Raises:
        FinnError: a step fails or changes the outputs, or nodes remain outside the hardware (each
            named with its torch module and the change that fixes it).
    """
    from quark.torch.extensions.brevitas._backend.targets.finn.steps import FRONT_END

    require_finn()
    work = os.path.abspath(os.fspath(work_dir))
    os.makedirs(work, exist_ok=True)
    samples = as_array(inputs, "inputs")
    reference = _qonnx_outputs(os.fspath(qonnx_path), samples) if expected is None else as_array(expected, "expected")
    np.save(os.path.join(work, FILES["verify_input"]), samples)
    np.save(os.path.join(work, FILES["verify_expected_output"]), reference)
    config = replace(
        config or FinnBuildConfig(),
        steps=(*FRONT_END, "step_quark_create_dataflow_partition"),
        start_step=None,
        stop_step=None,
        output_dir=work,
        verify_input_npy=os.path.join(work, FILES["verify_input"]),
        verify_expected_output_npy=os.path.join(work, FILES["verify_expected_output"]),
    )
    partition = runner.run(runner.load(qonnx_path), config)
    parent = runner.load_intermediate(config.intermediate_models_directory() / PARENT)
    outside = [named(parent, n) for n in parent.graph.node if n.op_type != "StreamingDataflowPartition"]
    return Dataflow(parent, partition, records(partition), outside, float_layers(partition))


#: the files of a dataflow directory: role -> name
FILES: dict[str, str] = {
    "qonnx": "model.qonnx.onnx",
    "integer_input_qonnx": "model_integer_input.qonnx.onnx",
    "partition": "dataflow_partition.onnx",
    "parent": "dataflow_parent.onnx",
    "folding_config": "folding_config.json",
    "build_config": "build_config.json",
    "build_script": "build.py",
    "verify_input": "verify_input.npy",
    "verify_expected_output": "verify_expected_output.npy",
    "estimate_md": "estimate.md",
    "estimate_json": "estimate.json",
    "verification": "verification.json",
    "readme": "README.md",
}


def as_array(value: Any, name: str) -> np.ndarray:
    """One tensor or array as float32 numpy."""
    if hasattr(value, "detach"):
        value = value.detach().cpu().float().numpy()
    try:
        return np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{name}: expected one tensor or array, got {type(value).__name__}") from error


def _qonnx_outputs(qonnx_path: str, samples: np.ndarray) -> np.ndarray:
    """The cleaned QONNX graph's outputs (batch size 1, as FINN runs it) on ``samples``."""
    from quark.torch.extensions.brevitas._backend.qonnx_passes.execution import execute
    from quark.torch.extensions.brevitas._backend.targets.finn.front_end import prepare

    return execute(prepare(runner.load(qonnx_path)), [samples])[0]


def relocate(result: DataflowExport, directory: str | os.PathLike) -> DataflowExport:
    """Move the directory ``result`` describes to ``directory`` (replacing a FINN directory written
    there before) and point the parent graph at the partition's new path; returns the moved result.

    The command line writes the directory beside its name and moves it there when complete, so that
    a failed export leaves nothing behind.
    """
    import onnx

    source, target = os.path.abspath(result.directory), os.path.abspath(os.fspath(directory))
    backup = None
    if os.path.exists(target):
        backup = f"{target}.{os.getpid()}.old"
        os.replace(target, backup)
    try:
        os.replace(source, target)
    except OSError:
        if backup:
            os.replace(backup, target)
        raise
    if backup:
        shutil.rmtree(backup, ignore_errors=True)
    files = {role: os.path.join(target, os.path.relpath(path, source)) for role, path in result.files.items()}
    parent = onnx.load(files["parent"])
    for node in parent.graph.node:
        for attribute in node.attribute:
            if node.op_type == "StreamingDataflowPartition" and attribute.name == "model":
                attribute.s = files["partition"].encode()
    with atomic_path(files["parent"]) as temp:
        onnx.save(parent, temp)
    return replace(result, directory=target, files=files)


def _verify(parent, samples: np.ndarray, reference: np.ndarray, name: str, config: FinnBuildConfig) -> Verification:
    """The hardware-layer graph on every sample against the reference (torch's outputs, or the QONNX
    graph's), executed on the whole batch by :func:`execute.execute` (bit-exact to FINN's Python
    execution, which it runs instead where it cannot compute a node exactly)."""
    execution = execute.execute(parent, [samples])
    produced = execution.outputs[0]
    if config.top_k is not None:
        labels = top_indices(reference, config.top_k)
        indices = produced.reshape(labels.shape)
        identical = int(np.all(indices == labels, axis=-1).sum())
        return Verification(name, len(samples), max_diff(indices, labels), identical, 0.0, execution.engine)
    reference = reference.reshape(produced.shape)
    # a sample's prediction: the argmax over all its outputs (a feature map's too: one per sample)
    flat = (produced.reshape(len(samples), -1), reference.reshape(len(samples), -1))
    identical = int((flat[0].argmax(-1) == flat[1].argmax(-1)).sum())
    return Verification(
        name,
        len(samples),
        max_diff(produced, reference),
        identical,
        float_tolerance([reference], FLOAT_RTOL),
        execution.engine,
    )


#: FINN's own steps after the package's front end and partition, to a bitfile (FINN's defaults)
FINN_BACK_END: tuple[str, ...] = (
    "step_specialize_layers",
    "step_target_fps_parallelization",
    "step_apply_folding_config",
    "step_minimize_bit_width",
    "step_transpose_decomposition",
    "step_generate_estimate_reports",
    "step_hw_codegen",
    "step_hw_ipgen",
    "step_set_fifo_depths",
    "step_create_stitched_ip",
    "step_measure_rtlsim_performance",
    "step_synthesize_bitfile",
    "step_make_driver",
    "step_deployment_package",
)
#: the module FINN's builder imports the package's steps from (``module.step`` names)
STEPS_MODULE = "quark.torch.extensions.brevitas.finn_steps"


def finn_build_config(config: FinnBuildConfig, integer_input: IntegerInput | None = None) -> dict[str, Any]:
    """The settings of FINN's ``DataflowBuildConfig`` for the directory: from the QONNX file, the
    package's front end and partition (its steps by module path), then FINN's own steps to a bitfile;
    the part, board and clock, ``folding_config.json`` applied after SetFolding (so edits to it reach the
    build), and FINN's ``verify_steps`` on the cppsim and rtlsim models against the verification files
    (which the package's steps check every graph against too). Paths are relative to the directory."""
    from quark.torch.extensions.brevitas._backend.targets.finn.parts import resolve
    from quark.torch.extensions.brevitas._backend.targets.finn.steps import FRONT_END

    fpga = resolve(config.part)
    ours = [*FRONT_END, "step_quark_create_dataflow_partition"]
    settings = {
        "output_dir": "finn_build",
        "fpga_part": fpga.part,
        "board": fpga.boards[0],
        "shell_flow_type": "vitis_alveo" if fpga.part.startswith("xcu") else "vivado_zynq",
        "synth_clk_period_ns": 1e3 / config.clock_mhz,
        "target_fps": config.target_fps,
        "mvau_wwidth_max": config.mvau_wwidth_max,
        "max_multithreshold_bit_width": config.max_multithreshold_bit_width,
        "folding_config_file": FILES["folding_config"],
        "steps": [f"{STEPS_MODULE}.{name}" for name in ours] + list(FINN_BACK_END),
        "generate_outputs": ["estimate_reports", "stitched_ip", "rtlsim_performance", "bitfile", "pynq_driver", "deployment_package"],
        "save_intermediate_models": True,
        "verify_steps": ["folded_hls_cppsim", "stitched_ip_rtlsim"],
        "verify_input_npy": FILES["verify_input"],
        "verify_expected_output_npy": FILES["verify_expected_output"],
    }
    return {k: v for k, v in settings.items() if v is not None}


#: ``build.py`` in the directory: FINN's builder on the QONNX file with the package's steps
BUILD_SCRIPT = '''#!/usr/bin/env python3
"""Build this FINN dataflow directory with FINN's builder (written by quark-brevitas).

    python build.py [--output-dir DIR] [--stop-step STEP] [--check]

It runs FINN's build_dataflow_cfg on {MODEL} with build_config.json: the package's steps
(quark.torch.extensions.brevitas.finn_steps: FINN's front end to one dataflow partition, every graph
checked against verify_input.npy / verify_expected_output.npy), then FINN's own steps: specialization,
folding_config.json applied, code generation, IP, FIFO sizing, the stitched IP, the bitfile, the PYNQ
driver and a deployment package, with FINN's verify_steps in its C++ and RTL simulations. FINN's
command line does the same: finn build build_config.json {MODEL}

Needs quark-brevitas and finn-plus (its builder's dependencies: `pip install quark-brevitas[finn]`),
and Vivado and Vitis HLS on PATH for the steps from code generation on (source Vivado's
settings64.sh); --stop-step runs up to a step (those before code generation need no Vivado).
--check names what is missing and stops.
"""

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODEL = "{MODEL}"  # the QONNX file the build starts from
TOOLS = ("vivado", "vitis_hls")
FIRST_VIVADO_STEP = "step_hw_codegen"  # from here on: Vitis HLS headers (C++ simulation) and Vivado


def missing(vivado_steps: bool = True) -> list[str]:
    """What this machine lacks for the build, each once: the package's steps, FINN's builder, Vivado
    (its tools only when ``vivado_steps``: the build goes as far as a step that runs them)."""
    # FINN's settings from the environment, as its own command line sets them: its working files here
    os.environ.setdefault("FINN_BUILD_DIR", str(HERE / "finn_build" / "work"))
    os.makedirs(os.environ["FINN_BUILD_DIR"], exist_ok=True)
    problems = []
    try:
        import quark.torch.extensions.brevitas.finn_steps  # noqa: F401
    except ImportError as error:
        problems.append(f"the package's steps do not import ({error}): pip install quark-brevitas[finn]")
    vivado = "Vivado: XILINX_VIVADO is not set (source Vivado's settings64.sh)"
    try:
        import finn.builder.build_dataflow  # noqa: F401
    except Exception as error:  # noqa: BLE001 - said as what is missing
        # FINN's builder loads its simulator (finn.xsi), which needs Vivado, when imported
        problems.append(vivado if "XILINX_VIVADO" in str(error) else f"FINN's builder does not import ({type(error).__name__}: {error})")
    for tool in TOOLS if vivado_steps else ():
        if shutil.which(tool) is None:
            problems.append(f"{tool} is not on PATH (source Vivado's settings64.sh)")
    return problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", help="where FINN writes the build (default: build_config.json's output_dir)")
    parser.add_argument("--stop-step", help="the last step to run (default: every step)")
    parser.add_argument("--check", action="store_true", help="check that FINN, the package and Vivado are there")
    args = parser.parse_args(argv)
    config = json.loads((HERE / "build_config.json").read_text())
    steps = [step.rsplit(".", 1)[-1] for step in config["steps"]]
    if args.stop_step and args.stop_step not in steps:
        parser.error(f"--stop-step {args.stop_step}: not a step of build_config.json; its steps: {', '.join(steps)}")
    last = steps.index(args.stop_step) if args.stop_step else len(steps) - 1
    vivado_steps = last >= steps.index(FIRST_VIVADO_STEP)
    problems = missing(vivado_steps=args.check or vivado_steps)
    if args.check or problems:
        for problem in problems:
            print(f"build.py: missing: {problem}", file=sys.stderr)
        if not problems:
            print(f"build.py: FINN, quark-brevitas and Vivado found: `python build.py` builds {config['board']}")
        return 2 if problems else 0
    from finn.builder.build_dataflow import build_dataflow_cfg
    from finn.builder.build_dataflow_config import DataflowBuildConfig

    cfg = DataflowBuildConfig.construct_from(HERE / "build_config.json")
    if args.output_dir:
        cfg.output_dir = str(Path(args.output_dir).resolve())
    if args.stop_step:
        cfg.stop_step = args.stop_step
    if not vivado_steps and cfg.verify_steps:
        print("build.py: FINN's verify_steps simulate in C++ and RTL (Vitis HLS, Vivado): off up to " + args.stop_step)
        cfg.verify_steps = []
    return build_dataflow_cfg(str(HERE / MODEL), cfg)


if __name__ == "__main__":
    os.chdir(HERE)
    sys.exit(main())
'''


def _readme(result: DataflowExport) -> str:
    """``README.md`` of the directory: what each file is, what was checked, what the host feeds, how to go on."""
    e, v = result.estimate, result.verification
    start = os.path.basename(result.files.get("integer_input_qonnx", result.files["qonnx"]))
    integer_row = (
        "\n| `model_integer_input.qonnx.onnx` | the same graph taking the input quantizer's integers (its scale "
        "folded into the first layer): where FINN's build starts |"
        if "integer_input_qonnx" in result.files
        else ""
    )
    return f"""# FINN dataflow directory

Written by quark-brevitas for {e.part.part} ({"/".join(e.part.boards)}) at {e.clock_mhz:g} MHz.

- Verified: the hardware-layer graph, executed by the {v.engine} on {v.samples} samples against {v.reference}:
  max |diff| {v.max_abs_diff:.3g}, identical predictions {v.identical_predictions}/{v.samples}
  ({"PASS" if v.passed else "FAIL"}).
- Estimated: {e.verdict().replace("**", "")}. Per layer: `estimate.md`.{_accumulator_line(e)}
- Input: {_host_input(result)}

## Files

| file | what |
|---|---|
| `model.qonnx.onnx` | the QONNX export of the quantized model (one sample per run, verified against torch){"" if integer_row else ": where FINN's build starts"} |{integer_row}
| `build_config.json` | FINN's `DataflowBuildConfig`: part, board, clock, the folding file, the steps (the package's front end, then FINN's to a bitfile), `verify_steps` and their files |
| `build.py` | runs that build with FINN's `build_dataflow_cfg` (`--check` names what is missing, `--stop-step` stops early) |
| `folding_config.json` | PE / SIMD / memory style of every layer, as `estimate.md` names them; the build applies it after FINN's SetFolding: edit it to trade speed for area |
| `verify_input.npy`, `verify_expected_output.npy` | inputs and the torch model's outputs on them: the package's steps check every graph against them, FINN's `verify_steps` its C++ and RTL simulations |
| `dataflow_parent.onnx` | FINN's parent graph: what stays on the host ({", ".join(result.outside) or "nothing"}) around one `StreamingDataflowPartition` |
| `dataflow_partition.onnx` | the partition as the package's build left it: hardware layers specialized for the part and folded |
| `intermediate_models/` | the parent and the partition as FINN's `CreateDataflowPartition` cut them, before specialization |
| `estimate.md`, `estimate.json` | FINN's per-layer cycles and LUT / BRAM / URAM / DSP estimates against the part, the margin left, what meets the target |
| `verification.json` | each step's check and the hardware graph against {v.reference} |

## To a bitfile

With quark-brevitas and finn-plus installed (`pip install quark-brevitas[finn]`) and Vivado and
Vitis HLS on PATH (source Vivado's `settings64.sh`):

```bash
python build.py --check                           # what is missing
python build.py                                   # or: finn build build_config.json {start}
```

FINN writes the stitched IP, the bitfile, the PYNQ driver and a deployment package under
`{finn_build_config(FinnBuildConfig(part=e.part.part))["output_dir"]}/` (`--output-dir` to choose).
The steps before code generation need no Vivado (`python build.py --stop-step step_generate_estimate_reports`).
"""


def _host_input(result: DataflowExport) -> str:
    """What the host feeds the accelerator."""
    interface = result.integer_input
    if interface is None:
        return "floats, as the torch model takes them; the accelerator's first layer thresholds them."
    return (
        f"integers ({interface.datatype}) of the network input's quantizer: the host feeds "
        f"`round(x / {interface.scale:g})` (clamped to {interface.datatype}) for an input `x` of the torch model."
    )


def _accumulator_line(e: Estimate) -> str:
    if not e.accumulators:
        return ""
    held = sum(c.holds for c in e.accumulators)
    saved = sum(c.luts_saved for c in e.accumulators)
    return (
        f"\n- Accumulators (A2QSpec): {held} of {len(e.accumulators)} layers within their promised width after FINN's "
        f"MinimizeAccumulatorWidth; {saved:,.0f} LUTs saved against unconstrained accumulators (`estimate.md`)."
    )


def _without_default_fifos(path: str) -> None:
    """FINN's folding file without the FIFO depths that are FINN's default (every layer has them): the
    deeper ones the package set (``passes.SkipBranchFifoDepths``) stand out."""
    with open(path) as file:
        config = json.load(file)
    for attributes in config.values():
        if all(d <= DEEP_FIFO for d in attributes.get("inFIFODepths", [DEEP_FIFO + 1])):
            attributes.pop("inFIFODepths")
    _write_json(path, config)


def _write_json(path: str, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, default=plain))
