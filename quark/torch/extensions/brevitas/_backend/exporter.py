"""``ModelExporter``: write a quantized model as QCDQ or QONNX and verify it, for a deployment target
and through its build. Above both :mod:`.export` (the formats, which know no target) and
:mod:`.targets` (their rules and builds).

One flow for both formats: check the model against the format's support table (and the target
device's requirements) -> export with Brevitas' manager inside a session that restores the model
-> check the written graph for the target -> execute it on the example inputs and compare with
the torch model.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any, TypedDict

import torch
from torch import nn
from typing_extensions import Unpack

from quark.torch.extensions.brevitas._backend import folding
from quark.torch.extensions.brevitas._backend.calibrate import require_calibrated
from quark.torch.extensions.brevitas._backend.export import support
from quark.torch.extensions.brevitas._backend.export.errors import (
    ExportFailedError,
    ExportVerificationError,
    TargetCheckError,
    UnsupportedExportError,
)
from quark.torch.extensions.brevitas._backend.export.extras import require_export_stack
from quark.torch.extensions.brevitas._backend.export.formats import EXPORTERS, FORMATS, ExportFormat
from quark.torch.extensions.brevitas._backend.export.inputs import (
    ExampleInputs,
    flatten_outputs,
)
from quark.torch.extensions.brevitas._backend.export.inputs import output_names as default_output_names
from quark.torch.quantization.config.type import DeviceType
from quark.torch.quantization.files import atomic_path, check_writable

logger = logging.getLogger(__name__)


class ExportOptions(TypedDict, total=False):
    """The keyword options of both exports (see :meth:`ModelExporter.export_onnx_model`)."""

    verify: bool
    tolerance_lsb: float | None
    target_device: DeviceType | str | None
    plans: Sequence[Any] | None
    input_names: Sequence[str] | None
    output_names: Sequence[str] | None


class ModelExporter:
    """Export a quantized model to ONNX and check that the graph computes what the model does.

    ``export_onnx_model`` writes standard ONNX with QuantizeLinear / Clip / DequantizeLinear
    (QCDQ), as AMD Quark's Brevitas extension; ``export_qonnx_model`` writes QONNX (Quant /
    BipolarQuant / Trunc nodes) for FINN. Both return an :class:`ExportReport`.

    The file appears only once written and verified (written beside it, then renamed): a failed
    or interrupted export leaves no partial file and keeps the previous one; a graph that fails
    verification or the target's checks is kept as ``<name>.rejected.onnx``. A missing directory
    is created.

    Args:
        export_path: the ``.onnx`` file to write.
        opset_version: ONNX opset; default 17 (18 with ``dynamo=True``).
        dynamo: use torch's dynamo exporter instead of the TorchScript one (see
            ``formats.py`` for why TorchScript is the default).

    Example::

        report = ModelExporter("model.onnx").export_onnx_model(qmodel, example_input)
        print(report)  # largest difference to torch, in output LSBs
    """

    def __init__(
        self, export_path: str | os.PathLike, *, opset_version: int | None = None, dynamo: bool = False
    ) -> None:
        if not isinstance(dynamo, bool):
            raise TypeError(f"ModelExporter(dynamo={dynamo!r}): expected True or False")
        lowest = EXPORTERS[dynamo][1]
        if opset_version is not None and (not isinstance(opset_version, int) or opset_version < lowest):
            raise ValueError(
                f"ModelExporter(opset_version={opset_version!r}): the {EXPORTERS[dynamo][0]} writes opset {lowest} "
                "or later; pass an integer >= that (or None for the default)"
            )
        self.export_path = os.fspath(export_path)
        self.opset_version = opset_version
        self.dynamo = dynamo

    def export_onnx_model(self, model: nn.Module, args: Any, **options: Unpack[ExportOptions]):
        """Write QCDQ ONNX (runnable in ONNX Runtime) and verify it.

        Args:
            model: the quantized model (from ``ModelQuantizer``); unchanged by the export, also
                when it fails.
            args: example inputs: a tensor, a tuple of tensors (optionally ending with a dict of
                keyword inputs) or a dict of keyword inputs. They move to the model's device.
            verify: execute the graph in ONNX Runtime and compare with the model in eval mode.
            tolerance_lsb: allowed difference in output LSBs; default 0 for exact graphs
                (power-of-two scales, exact operations), else 1.
            target_device: ``DeviceType.IPU`` checks the config before and the graph after
                export against the IPU's XINT8 requirements.
            plans: ``ModelQuantizer.plans``; their ``target_device`` is used when
                ``target_device`` is not given (default: the plans ``quantize_model`` recorded on
                the model, so a config's ``target_device`` is checked without passing anything).
            input_names, output_names: the graph's input and output names, one per input / output
                (default: ``forward``'s parameter names; ``output``, or ``output_0``, ...).

        Raises:
            UnsupportedExportError: the model has layers or quantizers QCDQ cannot express.
            TargetCheckError: the config or the graph does not meet the target device.
            ExportFailedError: the ONNX exporter failed (the model is restored).
            ExportVerificationError: the graph differs from the model beyond the tolerance.
        """
        return self._export(model, args, ExportFormat.qcdq, **options)

    def export_qonnx_model(self, model: nn.Module, args: Any, **options: Unpack[ExportOptions]):
        """Write QONNX (Quant / BipolarQuant / Trunc nodes, for FINN) and verify it with qonnx.

        Arguments and errors as :meth:`export_onnx_model`; ``target_device=DeviceType.FINN`` (or
        a config whose ``target_device`` is FINN) checks the config before and the graph after
        export against FINN's requirements. The FINN hand-off itself is
        :func:`~quark.torch.extensions.brevitas._backend.targets.finn.dataflow.finn_handoff`.
        """
        return self._export(model, args, ExportFormat.qonnx, **options)

    def verify(
        self, model: nn.Module, args: Any, *, tolerance_lsb: float | None = None, graph_inputs: Sequence[Any] | None = None
    ):
        """Execute the ONNX file at ``export_path`` (QONNX or QCDQ, told apart by its nodes) on
        ``args`` and compare it with ``model``, as the exports do. Returns the ``ExportReport``.
        ``graph_inputs``: arrays the graph is fed instead of ``args`` (a FINN graph taking the input
        quantizer's integers, say); ``model`` still runs on ``args``.

        Raises:
            FileNotFoundError: no file at ``export_path``.
            ExportVerificationError: the file does not run, or differs beyond the tolerance.
        """
        import onnx

        if not os.path.isfile(self.export_path):
            raise FileNotFoundError(f"verify: no ONNX file at {self.export_path}")
        onnx_model = onnx.load(self.export_path)
        qonnx = any(node.domain.startswith("qonnx") for node in onnx_model.graph.node)
        fmt = ExportFormat.qonnx if qonnx else ExportFormat.qcdq
        opset = next((o.version for o in onnx_model.opset_import if o.domain in ("", "ai.onnx")), 0)
        inputs = ExampleInputs.of(model, args)
        return self._verify(
            onnx_model, fmt, opset, inputs, self._reference(model, inputs), tolerance_lsb, [], graph_inputs=graph_inputs, model=model
        )

    def export_finn_dataflow(
        self,
        model: nn.Module,
        example: torch.Tensor,
        config: Any = None,
        *,
        part: str | None = None,
        target_fps: float | None = None,
        clock_mhz: float | None = None,
        top_k: int | None = None,
        integer_input: bool | None = None,
        folding: Any = None,
    ):
        """Take the model into FINN's dataflow: ``export_path`` is the output directory.

        Exports QONNX (verified against torch) to ``model.qonnx.onnx`` in the directory and runs the
        FINN build on it (``config``, a ``FinnBuildConfig`` from
        :mod:`quark.torch.extensions.brevitas.finn_steps`; its fields may be given as keywords
        instead): FINN's front end to one dataflow partition of hardware layers (each step executed
        and compared with torch on the first four samples), the hardware graph executed on every
        sample of ``example`` (a batch of inputs: pass a whole test set to compare the predictions on
        all of it), the layers folded for ``target_fps`` at ``clock_mhz`` on ``part`` (``folding``: a
        layer's PE / SIMD / ... on top, as ``estimate.md`` names the layer) and estimated.
        ``integer_input``: the accelerator takes the integers of the network input's quantizer (e.g.
        ``UINT8`` pixels, FINN's usual interface: its scale folds into the first layer) instead of
        floats it thresholds itself. The directory is a build FINN's own builder continues (its
        ``build.py`` and ``build_config.json``). Returns a ``DataflowExport`` (needs finn-plus). The
        model is unchanged. Layers with accumulator-aware weights (``A2QSpec``) are checked after
        FINN's MinimizeAccumulatorWidth: each MVAU / VVAU's accumulator must lie within the promised
        width; the result and ``estimate.md`` report each with the LUTs it saves.

        Raises:
            FinnError: a FINN step failed or changed the outputs, a node could not be mapped to
                hardware (named with its module and the fix), the hardware graph differs from the
                model, or an accumulator-aware layer's accumulator is beyond its promise.
            FinnConfigError: a build setting (part, clock, target, folding) that cannot be used.
        """
        from quark.torch.extensions.brevitas._backend.accumulator import promises
        from quark.torch.extensions.brevitas._backend.targets import TARGETS
        from quark.torch.extensions.brevitas._backend.targets.finn import dataflow, interface
        from quark.torch.extensions.brevitas._backend.targets.finn.build_config import FinnBuildConfig
        from quark.torch.extensions.brevitas._backend.targets.finn.front_end import require_finn

        if not isinstance(example, torch.Tensor):
            raise TypeError(
                f"example: FINN's dataflow takes one input tensor (batch first), got {type(example).__name__}"
            )
        require_finn()
        given = {
            "part": part,
            "target_fps": target_fps,
            "clock_mhz": clock_mhz,
            "top_k": top_k,
            "integer_input": integer_input,
            "folding": folding,
        }
        given = {k: v for k, v in given.items() if v is not None}
        if config is not None and not isinstance(config, FinnBuildConfig):
            raise TypeError(f"config: expected a FinnBuildConfig or None, got {type(config).__name__}")
        config = (config or FinnBuildConfig()).replace(**given)  # a bad setting fails before the export
        path = os.path.join(self.export_path, dataflow.FILES["qonnx"])
        ModelExporter(path).export_qonnx_model(model, example[:1])  # FINN's graphs take one sample at a time
        expected = self._reference(model, ExampleInputs.of(model, example))[0]
        inputs = dataflow.as_array(example, "example")
        interface_ = None
        if config.integer_input:
            integer_path = os.path.join(self.export_path, dataflow.FILES["integer_input_qonnx"])
            interface_ = interface.integer_input(path, integer_path)
            path, inputs = integer_path, interface_.integers(inputs)
            logger.info("FINN dataflow input: %s integers, scale %g", interface_.datatype, interface_.scale)
        build = TARGETS[DeviceType.FINN].build()  # the FINN target's build: dataflow.export_finn_dataflow
        return build(
            path,
            inputs,
            self.export_path,
            config,
            expected=expected,
            integer_input=interface_,
            accumulators=promises(model),
        )

    def export_hls4ml_project(self, model: nn.Module, example: torch.Tensor, config: Any = None, **settings: Any):
        """Take the model into an hls4ml project: ``export_path`` is the output directory.

        Exports QONNX (verified against torch, every activation quantizer a Quant node) to
        ``model.qonnx.onnx`` in the directory, checked against the hls4ml target's rules (before the
        export: quantizers, layers, graph-mode sites; after: the nodes hls4ml maps), then has hls4ml
        write its HLS C++ project with every layer's accumulator and result type computed exactly from
        the quantizers, compiles it with g++ and runs it on every sample of ``example`` (a batch of
        inputs: pass a whole test set), fed the network input quantizer's values. ``config``: an
        ``Hls4mlBuildConfig`` (io type, strategy, reuse factor, part, clock), or its fields as keywords.
        Returns an ``Hls4mlProject`` (needs hls4ml). The model is unchanged; a failure leaves no partial
        project (nor the files of a previous one) in the directory.

        Raises:
            TargetCheckError: the config or the graph cannot meet the hls4ml target (each named, with the
                fix; what only the prepared graph shows, a padded pool say, before hls4ml runs).
            Hls4mlError: hls4ml refused the graph, its C++ did not compile, or the firmware differs from torch.
        """
        from quark.torch.extensions.brevitas._backend.targets import TARGETS
        from quark.torch.extensions.brevitas._backend.targets.hls4ml.build_config import Hls4mlBuildConfig
        from quark.torch.extensions.brevitas._backend.targets.hls4ml.project import (
            FILES,
            as_inputs,
            project_directory,
            require_hls4ml,
        )

        if config is not None and not isinstance(config, Hls4mlBuildConfig):
            raise TypeError(f"config: expected an Hls4mlBuildConfig or None, got {type(config).__name__}")
        config = (config or Hls4mlBuildConfig()).replace(**settings)  # a bad setting fails before the export
        inputs = as_inputs(example, "example")
        example = torch.from_numpy(inputs)
        require_hls4ml()
        path = os.path.join(self.export_path, FILES["qonnx"])
        with project_directory(self.export_path):  # a failure leaves no partial project behind
            ModelExporter(path, dynamo=self.dynamo).export_qonnx_model(
                model, example[:1], target_device=DeviceType.HLS4ML
            )
            expected = self._reference(model, ExampleInputs.of(model, example))[0]
            build = TARGETS[DeviceType.HLS4ML].build()  # the hls4ml target's build: project.build
            return build(path, inputs, self.export_path, config, expected=expected)

    # -- the flow ---------------------------------------------------------------------------------

    def _export(
        self,
        model,
        args,
        fmt: ExportFormat,
        *,
        verify: bool = True,
        tolerance_lsb: float | None = None,
        target_device: DeviceType | str | None = None,
        plans: Sequence[Any] | None = None,
        input_names: Sequence[str] | None = None,
        output_names: Sequence[str] | None = None,
    ):
        if not isinstance(model, nn.Module):
            raise TypeError(f"export: model must be an nn.Module, got {type(model).__name__}")
        from quark.torch.extensions.brevitas._backend.targets import TARGETS

        require_export_stack(fmt)
        plans = plans if plans is not None else getattr(model, PLANS_ATTRIBUTE, None)
        device = _target(target_device, plans)
        target = TARGETS.get(device)
        if target is not None and target.format is not fmt:
            if target_device is not None:
                method = "export_onnx_model" if target.format is ExportFormat.qcdq else "export_qonnx_model"
                raise UnsupportedExportError(
                    f"target_device={device.name} takes {target.format.value}: use ModelExporter.{method}",
                    [f"target_device={device.name}"],
                )
            logger.info("the config's target_device=%s is checked on %s exports only", device.name, target.format.value)
            target = None
        if tolerance_lsb is not None and not (isinstance(tolerance_lsb, (int, float)) and tolerance_lsb >= 0):
            raise ValueError(f"export: tolerance_lsb={tolerance_lsb!r}; expected a number >= 0 or None")
        check_writable(self.export_path)  # a directory in the way fails now, not after the export
        opset = self.opset_version or FORMATS[fmt].opset[self.dynamo]
        if target is not None and target.opset is not None and (self.dynamo or opset != target.opset):
            raise UnsupportedExportError(
                f"target_device={device.name} takes opset {target.opset} from the TorchScript exporter; got opset "
                f"{opset}, dynamo={self.dynamo}: use ModelExporter(path) with the defaults",
                [f"opset {opset}", f"dynamo={self.dynamo}"],
            )
        if target is not None:
            target = target.for_model(model)  # the IPU's rules follow the precision of the quantizers
            target.check_config(model, plans or ())
        require_calibrated(model, f"export to {fmt.value}")
        exported = folding.merged(model)  # batch norm folded during QAT: the graph of merged batch norm
        support.check(exported, fmt, self.dynamo)
        inputs = ExampleInputs.of(model, args)
        expected = self._reference(model, inputs)
        inputs.names = _names("input_names", input_names, inputs.names)
        outputs = _names("output_names", output_names, default_output_names(len(expected)))
        # written next to export_path and moved there once checked: a failed or interrupted export
        # leaves no partial file and keeps the previous one
        with atomic_path(self.export_path) as written:
            thresholds = target.thresholds if target is not None else True
            onnx_model = self._write(exported, inputs, fmt, opset, outputs, written, thresholds)
            try:
                target_checks = target.check_graph(onnx_model) if target is not None else []
                report = self._verify(
                    onnx_model, fmt, opset, inputs, expected if verify else None, tolerance_lsb, target_checks, outputs, model
                )
            except (TargetCheckError, ExportVerificationError) as error:
                _keep_for_inspection(error, written, self.export_path)
                raise
        logger.info("%s", report)
        return report

    @staticmethod
    def _reference(model: nn.Module, inputs: ExampleInputs) -> list:
        training = model.training
        try:
            with torch.no_grad():
                return [t.detach().float().cpu().numpy() for t in flatten_outputs(inputs.run(model.eval()))]
        finally:
            model.train(training)

    def _write(
        self,
        model: nn.Module,
        inputs: ExampleInputs,
        fmt: ExportFormat,
        opset: int,
        outputs: list[str],
        path: str,
        thresholds: bool = True,
    ):
        """Export ``model`` to ``path``; ``thresholds``: see ``Target.thresholds`` (QONNX only)."""
        import onnx

        from quark.torch.extensions.brevitas._backend.export import qdq
        from quark.torch.extensions.brevitas._backend.export.handlers import MANAGERS, QUANT_NODE_MANAGERS
        from quark.torch.extensions.brevitas._backend.export.session import export_session

        quant_nodes = fmt is ExportFormat.qonnx and not thresholds
        manager = QUANT_NODE_MANAGERS[self.dynamo] if quant_nodes else MANAGERS[(fmt, self.dynamo)]
        module, args = inputs.module_and_args(model)
        kwargs = {
            "dynamo": self.dynamo,
            "opset_version": opset,
            "input_names": inputs.names,
            "output_names": outputs,
            "verbose": False,  # the dynamo exporter otherwise prints its progress to stdout
        }
        if not self.dynamo:
            kwargs["keep_initializers_as_inputs"] = False  # graph inputs are the model's inputs only
        try:
            with export_session(model, manager):
                manager.export(module, args=args, export_path=path, **kwargs)
        except Exception as error:  # the exporter's own errors: name the format and the exporter
            cause = error.__context__ if isinstance(error, AssertionError) and error.__context__ else error
            raise ExportFailedError(
                f"{fmt.value} export with the {EXPORTERS[self.dynamo][0]} failed: {type(cause).__name__}: {cause}; "
                "the model is restored to its state before the export"
            ) from error
        exported = onnx.load(path)
        if fmt is ExportFormat.qcdq:  # every activation tensor between Q/DQ, also after max pooling etc.
            exported = qdq.propagate(qdq.fold_weight_transposes(qdq.wide_domain(exported)))
            onnx.save(exported, path)
        return exported

    def _verify(
        self, onnx_model, fmt, opset, inputs, expected, tolerance_lsb, target_checks, outputs=None, model=None, graph_inputs=None
    ):
        from quark.torch.extensions.brevitas._backend.export import verify as checks

        common = {
            "path": self.export_path,
            "format": fmt,
            "exporter": EXPORTERS[self.dynamo][0],
            "opset": opset,
            "runtime": FORMATS[fmt].runtime,
            "target_checks": tuple(target_checks),
        }
        if expected is None:
            return checks.ExportReport(verified=False, **common)
        exact = checks.is_exact(onnx_model)
        if tolerance_lsb is None:
            tolerance_lsb = checks.EXACT_TOLERANCE_LSB if exact else checks.DEFAULT_TOLERANCE_LSB
        from quark.torch.extensions.brevitas._backend.export import safe_graph

        feeds = list(graph_inputs) if graph_inputs is not None else [t.detach().cpu().numpy() for t in inputs.tensors]
        safe_graph.check(onnx_model, self.export_path)  # the check files from elsewhere pass before they run
        try:
            produced = checks.run(fmt, onnx_model, feeds)
        except Exception as error:
            raise ExportVerificationError(
                f"the exported {fmt.value} graph {self.export_path} does not run in {FORMATS[fmt].runtime}: "
                f"{type(error).__name__}: {error}",
                None,
            ) from error
        graph = checks.Graph(onnx_model)
        names = outputs or default_output_names(len(expected))
        outputs = checks.compare(graph, produced, expected, names, exact, tolerance_lsb)
        replayed = None
        if fmt is ExportFormat.qcdq and not exact and model is not None and graph_inputs is None and not all(o.passed for o in outputs):
            from quark.torch.extensions.brevitas._backend.export.replay import replay

            # float operations between quantizers rounded differently: quantizer by quantizer (replay.py)
            replayed = replay(model, inputs.run, onnx_model, feeds, checks.RUNNERS[fmt], flatten_outputs)
            if replayed is not None:
                outputs = checks.compare(graph, produced, replayed.expected, names, exact, tolerance_lsb)
        deployed, workaround, saturates = (
            _optimized_runtime_diff(checks, onnx_model, feeds, expected, outputs)
            if fmt is ExportFormat.qcdq
            else (None, None, False)
        )
        report = checks.ExportReport(
            verified=True,
            exact=exact,
            tolerance_lsb=float(tolerance_lsb),
            outputs=outputs,
            optimized_runtime_diff=deployed,
            optimized_runtime_workaround=workaround,
            optimized_runtime_saturates=saturates,
            replayed_quantizers=replayed.quantizers if replayed else 0,
            replay_flips=(replayed.flipped, replayed.values) if replayed else (0, 0),
            replay_worst_lsb=replayed.worst_lsb if replayed else 0.0,
            **common,
        )
        if not report.passed:
            raise ExportVerificationError(
                f"the exported {fmt.value} graph {self.export_path} differs from the torch model beyond "
                f"{tolerance_lsb:g} LSB{' (exact graph)' if exact else ''}:\n  "
                + "\n  ".join(o.describe() for o in outputs if not o.passed),
                report,
            )
        return report


def _optimized_runtime_diff(checks, onnx_model, feeds, expected, outputs) -> tuple[float | None, str | None, bool]:
    """Largest difference (LSBs where quantized) with ONNX Runtime's default optimizations, the optimizer
    disabled to work around a known ONNX Runtime bug (or None), and whether a difference may be this
    machine's saturating int8 kernels (:func:`~.verify.integer_kernels_saturate`); warns beyond 1 LSB
    and on a workaround."""
    try:
        produced, bug = checks.run_onnxruntime_optimized(onnx_model, feeds)
    except Exception as error:  # noqa: BLE001  informative only: the graph was verified as written
        logger.warning("ONNX Runtime with its default optimizations could not run the graph: %s", error)
        return None, None, False
    if bug is not None:
        logger.warning(
            "%s; the graph as written runs. Deploy with InferenceSession(..., disabled_optimizers=[%r]) or a "
            "fixed ONNX Runtime.",
            bug,
            bug.optimizer,
        )
    diffs = []
    for out, got, ref in zip(outputs, produced, expected):
        diff = float(abs(got.astype("float64") - ref.astype("float64")).max()) if ref.size else 0.0
        diffs.append(diff / out.lsb if out.lsb else diff)
    worst = max(diffs, default=0.0)
    saturates = worst > 0 and checks.integer_kernels_saturate()
    if any(o.lsb for o in outputs) and worst > 1:
        logger.warning(
            "ONNX Runtime with its default graph optimizations differs from the torch model by %.3g LSB (the graph "
            "as written matches); %s",
            worst,
            checks.SATURATION_HINT
            if saturates
            else "its Q/DQ fusion into integer kernels changes the numbers, measured large for sub-8-bit Clip "
            "patterns. Deploy with SessionOptions.graph_optimization_level=ORT_DISABLE_ALL or 8-bit QDQ.",
        )
    return worst, None if bug is None else str(bug), saturates


def _names(field: str, given: Sequence[str] | None, default: list[str]) -> list[str]:
    """The graph's input or output names: ``given`` (one per tensor, distinct strings) or ``default``;
    Quark's default of an empty list means the default names."""
    if not given:
        return default
    names = list(given)
    if len(names) != len(default) or len(set(names)) != len(names) or not all(isinstance(n, str) and n for n in names):
        raise ValueError(
            f"export({field}={names!r}): expected {len(default)} distinct non-empty names, one per graph "
            f"{field.split('_')[0]} (the default names: {default})"
        )
    return names


def _keep_for_inspection(error: Exception, written: str, export_path: str) -> None:
    """Move the rejected graph to ``<name>.rejected.onnx`` and say so in ``error``'s message."""
    stem, suffix = os.path.splitext(export_path)
    kept = f"{stem}.rejected{suffix or '.onnx'}"
    os.replace(written, kept)
    error.args = (f"{error.args[0]}\n  the graph is kept at {kept} for inspection; {export_path} is unchanged", *error.args[1:])


#: attribute where ``ModelQuantizer.quantize_model`` records the plans of the model it returns
PLANS_ATTRIBUTE = "quark_plans"


def _target(target_device: Any, plans: Sequence[Any] | None) -> DeviceType | None:
    if isinstance(target_device, DeviceType):
        return target_device
    if target_device is not None:
        try:
            return DeviceType(str(target_device).lower())
        except ValueError:
            raise ValueError(
                f"export(target_device={target_device!r}): expected one of "
                f"{[d.name for d in DeviceType]} or None"
            ) from None
    targets = {p.target_device for p in plans or () if getattr(p, "target_device", None) is not None}
    if len(targets) > 1:
        raise ValueError(
            f"export(plans=...): the layers target different devices {sorted(t.name for t in targets)}; "
            "one graph goes to one device: pass target_device explicitly"
        )
    return next(iter(targets), None)
