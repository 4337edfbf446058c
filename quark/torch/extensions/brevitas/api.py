"""``ModelQuantizer`` and ``ModelExporter``: the entry points of AMD Quark's Brevitas extension.

Orchestration only, every step looked up in a table: the config's view (per flavour), its
rewriter (per ``quant_mode`` / ``backend``), its algorithms (per config class, with their phase),
the rules (per layer). The numerics live in ``_backend``.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

import quark.torch.extensions.brevitas._backend  # noqa: F401  (the Brevitas version check, before any Brevitas import)
from quark.common.errors import FailedError, QuarkBrevitasError, RefusedError
from quark.torch.extensions.brevitas import config as ext
from quark.torch.extensions.brevitas._backend.algorithms.check import halves, output_error
from quark.torch.extensions.brevitas._backend.analysis import Analysis, QuantizerError, analyze
from quark.torch.extensions.brevitas._backend.calibrate import (
    HOW_TO_CALIBRATE,
    UncalibratedModelError,
    add_calibrated_flags,
    calibrate_on_first_call,
    static_act_proxies,
    uncalibrated,
)
from quark.torch.extensions.brevitas._backend.calibrate import calibrate as run_calibration
from quark.torch.extensions.brevitas._backend.data import BatchError, CalibrationData
from quark.torch.extensions.brevitas._backend.evaluation import Accuracy, Evaluation, evaluate
from quark.torch.extensions.brevitas._backend.export.errors import (
    ExportFailedError,
    ExportVerificationError,
    TargetCheckError,
    UnsupportedExportError,
)
from quark.torch.extensions.brevitas._backend.export.formats import ExportFormat
from quark.torch.extensions.brevitas._backend.exporter import PLANS_ATTRIBUTE, ModelExporter
from quark.torch.extensions.brevitas._backend.qat import freeze as freeze_model
from quark.torch.extensions.brevitas._backend.rewrite import rewriter_for
from quark.torch.extensions.brevitas._backend.rewrite.exported import copy_model
from quark.torch.extensions.brevitas._backend.rules import layers as rules
from quark.torch.extensions.brevitas._backend.targets.finn.errors import FinnError
from quark.torch.extensions.brevitas.checkpoint import checkpoint_config, read_checkpoint
from quark.torch.quantization import plan as planning
from quark.torch.quantization.config import config as main
from quark.torch.quantization.config.algorithms import Phase, implementation_of
from quark.torch.quantization.quark013_api import QuarkFeatureRefused

__all__ = [
    "Accuracy",
    "AlgorithmCheck",
    "AlgorithmWorseWarning",
    "Analysis",
    "Evaluation",
    "ExportFailedError",
    "ExportFormat",
    "ExportVerificationError",
    "FailedError",
    "FinnError",
    "ModelExporter",
    "ModelQuantizer",
    "QuantizationInterrupted",
    "QuantizerError",
    "QuarkBrevitasError",
    "RefusedError",
    "TargetCheckError",
    "UncalibratedModelError",
    "UncalibratedModelWarning",
    "UnsupportedExportError",
    "analyze",
    "calibrate",
    "evaluate",
    "finn_handoff",
    "load_checkpoint",
]

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from quark.torch.extensions.brevitas._backend.targets.finn.dataflow import finn_handoff



def __getattr__(name: str) -> Any:
    """Public names whose modules import ONNX / qonnx, loaded when first used."""
    if name == "finn_handoff":
        from quark.torch.extensions.brevitas._backend.targets.finn.dataflow import finn_handoff

        return finn_handoff
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _check_target(model: nn.Module, plans: list[planning.LayerPlan]) -> None:
    """The rules of the config's ``target_device`` on the calibrated model, before the algorithms
    and any training (the exporter checks them again): :class:`TargetCheckError` names everything
    the target refuses. Not on uncalibrated quantizers: reading them would initialise them."""
    from quark.torch.extensions.brevitas._backend.targets import TARGETS

    devices = {p.target_device for p in plans if p.target_device is not None}
    for device in devices:
        target = TARGETS.get(device)
        if target is not None:
            target.for_model(model).check_config(model, [p for p in plans if p.target_device in (device, None)])


class UncalibratedModelWarning(UserWarning):
    """``quantize_model`` returned a model whose static activation quantizers await calibration."""


class AlgorithmWorseWarning(UserWarning):
    """The config's algorithms gave a larger output error on the calibration data than round-to-nearest."""


@dataclass(frozen=True)
class AlgorithmCheck:
    """The config's algorithms against the same config without them (round-to-nearest): relative
    output error sum (q - float)^2 / sum float^2 of the first output, on the calibration data, and,
    with two calibration batches or more, fitted on the first half of the batches and measured on the
    other half (an algorithm that fits its data too closely, such as an error correction solved on
    few samples, looks better on the data it saw than it is)."""

    algorithms: tuple[str, ...]
    error_without: float
    error_with: float
    unseen_without: float | None = None
    unseen_with: float | None = None
    fitted_batches: int = 0
    unseen_batches: int = 0

    @property
    def worse(self) -> bool:
        unseen_worse = self.unseen_with is not None and self.unseen_with > self.unseen_without
        return self.error_with > self.error_without or unseen_worse

    def __str__(self) -> str:
        it = "it" if len(self.algorithms) == 1 else "them"
        text = (
            f"{' + '.join(self.algorithms)} {_verdict(self.error_without, self.error_with)} the output error on the "
            f"calibration data: {self.error_without:.4g} without {it}, {self.error_with:.4g} with"
        )
        if self.unseen_with is not None:
            text += (
                f"; fitted on the first {self.fitted_batches} calibration batches, {it} "
                f"{_verdict(self.unseen_without, self.unseen_with)} it on the other {self.unseen_batches}: "
                f"{self.unseen_without:.4g} without, {self.unseen_with:.4g} with"
            )
        return text


def _verdict(without: float, with_: float) -> str:
    return "increased" if with_ > without else ("reduced" if with_ < without else "left unchanged")


#: why ``ModelQuantizer(config, multi_device=True)`` is refused
MULTI_DEVICE_REFUSED = (
    "ModelQuantizer(config, multi_device=True): spreading one model over several devices (Quark's accelerate device "
    "maps for LLMs that do not fit one device) is not supported; the model is quantized on the device it is on. Use "
    "multi_device=False; for several processes, call torch.distributed.init_process_group before quantize_model "
    "(observers merge their statistics across ranks) and wrap the quantized model in DistributedDataParallel"
)
#: why ``ModelQuantizer.direct_quantize_checkpoint`` is refused
FILE_TO_FILE_REFUSED = (
    "ModelQuantizer.direct_quantize_checkpoint: quantizing safetensors shards on disk (Quark's file-to-file flow for "
    "LLM checkpoints too large for memory) is not supported; load the model and call quantize_model(model, dataloader), "
    "then export_safetensors(model, output_dir)"
)


class ModelQuantizer:
    """Quantize a PyTorch model as a Quark config says, with Brevitas.

    The entry point of both AMD Quark's main API (``quark.torch.ModelQuantizer``: this class) and its
    Brevitas extension. Accepts the main Quark config (``quark.torch.quantization.config.config.Config``
    / ``QConfig``) or the Brevitas extension's (``quark.torch.extensions.brevitas.config.Config``). The
    config's mode and algorithms are checked here: one without an implementation fails at construction.

    Example::

        quantizer = ModelQuantizer(config)
        quant_model = quantizer.quantize_model(model, calib_loader)
        print(quantizer.summary())
        frozen = quantizer.freeze(quant_model)      # for deployment (AMD Quark's step before export)

    Args:
        config: the config.
        multi_device: AMD Quark's flag to spread an LLM over several devices; only False (the
            default) is supported, True is refused naming the reason.
    """

    def __init__(self, config: main.Config | ext.Config, multi_device: bool = False) -> None:
        if multi_device:
            raise QuarkFeatureRefused(MULTI_DEVICE_REFUSED)
        try:
            self.view = planning.config_view(config)
        except TypeError as error:
            raise TypeError(f"ModelQuantizer(config): {error}") from None
        self.rewriter = rewriter_for(self.view.mode)
        self.algorithms = [(algo, implementation_of(algo)) for algo in self.view.algorithms]
        self.config = config
        self.plans: list[planning.LayerPlan] = []
        self.algorithm_check: AlgorithmCheck | None = None

    def quantize_model(
        self,
        model: nn.Module,
        calib_loader: Iterable[Any] | None = None,
        *,
        dataloader: Iterable[Any] | None = None,
        num_calib_batches: int | None = None,
        progress: bool = True,
        inplace: bool = False,
        calibrate: bool = True,
        check_algorithms: bool = True,
    ) -> nn.Module:
        """Return the quantized model, calibrated (when data is given) and in eval mode.

        Steps: the config's specs are checked; the algorithms of the ``before_quantization``
        phase run on the float model (e.g. ``Preprocess``); the plan is resolved once, on that
        model, and checked against the rules; the rewriter swaps in the quantized layers; static
        activations are calibrated; the ``after_calibration`` and ``after_quantization``
        algorithms run.

        Args:
            model: the float model (a ``GraphModule`` from ``torch.export`` too, in graph mode: its
                layers are recovered from the ATen calls); left unchanged unless ``inplace``.
            calib_loader: a DataLoader or any iterable of tensors, tuples/lists (leading elements are
                the positional inputs) or dicts (keyword inputs). Needed when an algorithm of the
                config needs data. Without it, static activations stay uncalibrated, as in AMD Quark's
                extension: one :class:`UncalibratedModelWarning` names them and how to calibrate
                (:func:`calibrate`, or an algorithm's ``apply(model, calib_loader)``, which calibrates
                first); exporting or freezing the model before that is an
                :class:`UncalibratedModelError`. An empty one (``[]``, as AMD Quark's TQT scripts
                pass to train directly) is taken when every static activation quantizer is a
                trained TQT / LSQ one: they calibrate on the model's first call (Quark's warm-up).
            dataloader: AMD Quark's main-API name of ``calib_loader`` (give one of the two).
            num_calib_batches: use at most this many batches (in calibration and in each pass of
                an algorithm).
            progress: show progress bars.
            inplace: modify ``model`` itself instead of a copy (an error raised after the
                ``before_quantization`` algorithms leaves it pre-processed).
            calibrate: False builds the quantized model without calibrating (no data needed), to
                load a quantized checkpoint into it: the algorithms after quantization that need
                data (which set values the checkpoint holds) do not run, only what they add to the
                structure (``BiasCorrection``: a bias on every weighted layer); ``qat.uncalibrated_quantizers`` lists what
                is still uncalibrated.
            check_algorithms: when the config has algorithms and data is given (a list or a
                DataLoader), also quantize without them (structural ones such as ``MergeBatchNorm``
                stay on both sides; alone they are not checked) and compare the two models' output error
                against the float model on the calibration data; with two batches or more, also
                quantize both ways on the first half of the batches and compare them on the other
                half, which the algorithms did not see (the batches are then held in memory; two more
                quantizations). The result is :attr:`algorithm_check`, and an
                :class:`AlgorithmWorseWarning` names the algorithms when they made either worse.
                Skipped with ``inplace=True`` (no float model is left).
        """
        if not isinstance(model, nn.Module):
            raise TypeError(f"quantize_model(model=...): expected a torch.nn.Module, got {type(model).__name__}")
        if dataloader is not None:
            if calib_loader is not None:
                raise TypeError("quantize_model: calib_loader and dataloader name the same data; give one of them")
            calib_loader = dataloader
        if num_calib_batches is not None and num_calib_batches <= 0:
            raise ValueError(f"num_calib_batches={num_calib_batches}: must be a positive integer or None")
        specs = planning.config_specs(self.view)  # spec errors surface before the model is touched
        if calib_loader is None:
            self._require_no_data(specs, calibrate)
        data = CalibrationData(calib_loader, num_calib_batches, progress) if calib_loader is not None else None
        known_names = planning.module_names(model)
        stage = Stage(data)
        restore = _structure(model) if inplace else None
        try:
            # built outside inference mode, so that the quantized model trains (QAT) afterwards
            with torch.inference_mode(False):
                work = self._quantize(model if inplace else copy_model(model), data, known_names, calibrate, stage)
        except BaseException as error:
            if restore is not None:
                restore()
            explained = stage.explain(error, inplace)
            if explained is error:
                raise
            raise explained from error
        self.algorithm_check = None
        checked = [algo for algo, impl in self.algorithms if not impl.structural]
        if check_algorithms and checked and data is not None and not inplace and not isinstance(calib_loader, Iterator):
            self.algorithm_check = self._check_algorithms(model, work, calib_loader, num_calib_batches)
        return work

    def _check_algorithms(self, model: nn.Module, work: nn.Module, calib_loader: Any, num_batches: int | None) -> AlgorithmCheck:
        """The config's algorithms against round-to-nearest, on the calibration data and on half of it
        unseen (see ``check_algorithms``)."""
        plain = copy.copy(self.config)  # structural algorithms (MergeBatchNorm) on both sides
        plain.pre_quant_opt_config = _structural(plain.pre_quant_opt_config)
        plain.algo_config = _structural(plain.algo_config)

        def quantized(config, data, limit):
            with warnings.catch_warnings(), _quiet():  # said once, by the run the user asked for
                warnings.simplefilter("ignore")
                return ModelQuantizer(config).quantize_model(
                    model, data, num_calib_batches=limit, progress=False, check_algorithms=False
                )

        data = CalibrationData(calib_loader, num_batches, progress=False)
        errors = {
            "error_without": output_error(model, quantized(plain, calib_loader, num_batches), data, "algorithm check (without)"),
            "error_with": output_error(model, work, data, "algorithm check (with)"),
        }
        split = halves(calib_loader, num_batches)
        if split is not None:
            fit, unseen = split
            held_out = CalibrationData(unseen, progress=False)
            errors.update(
                unseen_without=output_error(model, quantized(plain, fit, None), held_out, "algorithm check (unseen, without)"),
                unseen_with=output_error(model, quantized(self.config, fit, None), held_out, "algorithm check (unseen, with)"),
                fitted_batches=len(fit),
                unseen_batches=len(unseen),
            )
        result = AlgorithmCheck(tuple(type(algo).__name__ for algo, impl in self.algorithms if not impl.structural), **errors)
        if result.worse:
            warnings.warn(
                f"quantize_model: {result}; consider more calibration data, or quantizing without them",
                AlgorithmWorseWarning,
                stacklevel=3,
            )
        else:
            logger.info("quantize_model: %s", result)
        return result

    def _quantize(self, work, data, known_names, calibrate, stage) -> nn.Module:
        stage("before_quantization algorithms")
        work = self._run_phase(Phase.before_quantization, work, data, stage, calibrate)
        stage("resolving the plan")
        work = self.rewriter.prepare(work)
        sites = self.rewriter.sites(work)
        plans = planning.resolve(
            self.config, sites, [*known_names, *planning.module_names(work)], self.rewriter.supported_types
        )
        self.rewriter.connect(work, plans, sites, self.view)
        rules.check(plans, sites, self.algorithms)
        if not any(p.quantized for p in plans):
            warnings.warn(_nothing_quantized(work, sites, plans, self.rewriter.supported_types), stacklevel=3)
        stage("rewriting the model")
        work = self.rewriter.rewrite(work, plans, sites)
        self.plans = plans
        setattr(work, PLANS_ATTRIBUTE, plans)  # the exporter reads target_device from them
        setattr(work, planning.CONFIG_ATTRIBUTE, self.config)  # Quark's save / export functions write it beside the tensors

        add_calibrated_flags(work)
        if calibrate and static_act_proxies(work):
            if data is not None:
                stage("calibration")
                if not run_calibration(work, data, allow_empty=True):
                    calibrate_on_first_call(work)
            else:
                warnings.warn(_uncalibrated_message(uncalibrated(work)), UncalibratedModelWarning, stacklevel=3)
        if calibrate and data is not None and not uncalibrated(work):
            _check_target(work, plans)
        work = self._run_phase(Phase.after_calibration, work, data, stage, calibrate)
        work = self._run_phase(Phase.after_quantization, work, data, stage, calibrate)
        logger.info("quantized %d of %d %s sites", sum(p.quantized for p in plans), len(sites), self.rewriter.name)
        return work.eval()

    def _require_no_data(self, specs: list[tuple[str, Any]], calibrate: bool) -> None:
        """Without data: no algorithm of the config may need data (static activations are left
        uncalibrated, with a warning)."""
        hungry = [type(algo).__name__ for algo, impl in self.algorithms if impl.needs_data and self._runs(impl, calibrate)]
        if hungry:
            raise ValueError(
                f"quantize_model: {', '.join(hungry)} needs calibration data; pass calib_loader, or calibrate=False to "
                "build the model to load a checkpoint into (presets.finn(bias_correction=False) leaves BiasCorrection out)"
            )

    @staticmethod
    def _runs(impl: Any, calibrate: bool) -> bool:
        """Whether an algorithm runs: without calibration, those after quantization that need data
        do not (they set values only, which the checkpoint loaded next holds)."""
        return calibrate or not impl.needs_data or impl.phase is Phase.before_quantization

    def _run_phase(self, phase: Phase, model: nn.Module, data: CalibrationData | None, stage: Stage, calibrate: bool) -> nn.Module:
        for algo, impl in self.algorithms:
            if impl.phase is not phase:
                continue
            if not self._runs(impl, calibrate):
                model = model if impl.shape is None else impl.shape(model)
            else:
                stage(f"{type(algo).__name__} ({phase.value})", edits_float_model=phase is Phase.before_quantization)
                logger.info("applying %s (%s)", type(algo).__name__, phase.value)
                extra = {"plans": self._float_plans(model)} if impl.wants_plans else {}
                model = impl.run(algo, model, data, **extra)
        return model

    def _float_plans(self, model: nn.Module) -> dict[str, planning.LayerPlan]:
        """The config resolved over ``model``'s layers as the layerwise backend sees them (for the
        algorithms that fit themselves to the quantizers, e.g. ``ActivationEqualization``); empty
        where the config does not resolve on them (its errors are reported when the plan is resolved)."""
        layerwise = rewriter_for(main.QuantizationMode.eager_mode)
        try:
            sites = layerwise.sites(model)
            resolved = planning.resolve(self.config, sites, planning.module_names(model), layerwise.supported_types)
        except ValueError as error:
            logger.info("the config does not resolve on the float model's layers (%s)", error)
            return {}
        return {p.name: p for p in resolved}

    def summary(self) -> str:
        """Table of what each layer got, from the last ``quantize_model`` call."""
        return planning.format_plan(self.plans)

    @staticmethod
    def freeze(model: nn.Module, quantize: bool | None = None, runtime_options: Any = None) -> nn.Module:
        """AMD Quark's ``ModelQuantizer.freeze``: fix every quantization parameter for deployment and
        return ``model`` (in eval mode); outputs are unchanged, bit for bit
        (:func:`quark.torch.extensions.brevitas.qat.freeze` says what it does to each kind of weight).

        Args:
            model: a model ``quantize_model`` returned, calibrated.
            quantize: True or None (Quark's default for eager models) replaces weights with learned
                scales (TQT) by their quantized values; False keeps every weight's float values.
            runtime_options: Quark's native inference options; only None, other values are refused
                (this package has no native inference kernels).
        """
        if runtime_options is not None:
            raise QuarkFeatureRefused(
                f"ModelQuantizer.freeze(runtime_options={runtime_options!r}): Quark's native inference kernels (ROCm / "
                "CUDA fp8, MXFP4 GEMMs) have no counterpart here; leave runtime_options=None and deploy with export_onnx"
            )
        return freeze_model(model, bake_weights=quantize is not False)

    def direct_quantize_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        """AMD Quark's file-to-file flow: refused (:class:`QuarkFeatureRefused` says why and what to use)."""
        raise QuarkFeatureRefused(FILE_TO_FILE_REFUSED)


def calibrate(
    model: nn.Module,
    calib_loader: Iterable[Any],
    *,
    num_calib_batches: int | None = None,
    progress: bool = True,
) -> nn.Module:
    """Calibrate the static activation quantizers of a model ``quantize_model`` returned, e.g. one
    quantized without data (``quantize_model(model)``); returns ``model``, in the mode it was in.

    Every static activation quantizer takes its range from ``calib_loader`` (the data forms of
    ``quantize_model``), recalibrated if it already was. Errors name the batch and its inputs, as in
    ``quantize_model``.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"calibrate(model=...): expected a torch.nn.Module, got {type(model).__name__}")
    if not static_act_proxies(model):
        logger.info("calibrate: %s has no static activation quantizer; nothing to calibrate", type(model).__name__)
        return model
    data = CalibrationData(calib_loader, num_calib_batches, progress)
    try:
        with torch.inference_mode(False):
            run_calibration(model, data)
    except KeyboardInterrupt as error:  # the ranges are written after the last batch: nothing changed
        raise QuantizationInterrupted(f"calibrate interrupted at {data.position}; the model is as it was") from error
    except BatchError as error:
        error.args = (f"calibration, {data.position}: {error.args[0]}; the model is as it was", *error.args[1:])
        raise
    return model


def _structural(algorithms: Any) -> list:
    """The structural algorithms (``Implementation.structural``) of a config's algorithm field."""
    listed = [] if algorithms is None else list(algorithms) if isinstance(algorithms, (list, tuple)) else [algorithms]
    return [algo for algo in listed if implementation_of(algo).structural]


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Only errors are logged inside the block (whatever level a logger was given)."""
    previous = logging.root.manager.disable
    logging.disable(max(previous, logging.WARNING))
    try:
        yield
    finally:
        logging.disable(previous)


def _uncalibrated_message(names: list[str]) -> str:
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return (
        f"quantize_model: no calibration data, so {len(names)} static activation quantizers are not calibrated "
        f"({shown}); their scales are placeholders until calibrated: {HOW_TO_CALIBRATE}. Exporting or freezing the "
        "model before that is an error"
    )


class QuantizationInterrupted(KeyboardInterrupt):
    """Ctrl-C during ``quantize_model``; the message says where it stopped and what the model is."""


class Stage:
    """What ``quantize_model`` is doing, to say where an error or Ctrl-C stopped it."""

    def __init__(self, data: CalibrationData | None) -> None:
        self.data = data
        self.name = "copying the model"
        self.passes_before = 0
        self.edited: list[str] = []  # algorithms that ran on the float model (in place with inplace=True)

    def __call__(self, name: str, edits_float_model: bool = False) -> None:
        self.name = name
        self.passes_before = self.data.position.passes if self.data is not None else 0
        if edits_float_model:
            self.edited.append(name.split(" ")[0])

    def where(self) -> str:
        position = self.data.position if self.data is not None else None
        if position is None or position.passes == self.passes_before or not position.batch:
            return self.name
        own_pass = "" if position.desc == self.name else f"its {position.desc!r} pass, "
        return f"{self.name}, {own_pass}{position}"

    def explain(self, error: BaseException, inplace: bool) -> BaseException:
        """``error`` with where it happened: Ctrl-C becomes :class:`QuantizationInterrupted`, a bad
        batch gets its pass and index; other errors pass unchanged."""
        if not inplace:
            model = "the model you passed is unchanged (the partly quantized copy is discarded)"
        elif self.edited:
            model = f"inplace=True: the model's original layers are back in place, with the changes {', '.join(self.edited)} made"
        else:
            model = "the model you passed is as it was (inplace=True: its original layers are back in place)"
        if isinstance(error, KeyboardInterrupt) and not isinstance(error, QuantizationInterrupted):
            return QuantizationInterrupted(f"quantize_model interrupted during {self.where()}; {model}")
        if isinstance(error, BatchError) and error.args:
            error.args = (f"{self.where()}: {error.args[0]}; {model}", *error.args[1:])
        return error


def _structure(model: nn.Module) -> Callable[[], None]:
    """A function that puts back every submodule of ``model`` as it is now (undoes module swaps)."""
    children = [(module, dict(module._modules)) for module in model.modules()]
    attributes = set(vars(model))

    def restore() -> None:
        for module, kept in children:
            module._modules.clear()
            module._modules.update(kept)
        for name in set(vars(model)) - attributes:  # e.g. the recorded plans
            delattr(model, name)

    return restore


def _nothing_quantized(model: nn.Module, sites: list, plans: list, supported: tuple[type, ...]) -> str:
    if not sites and type(model) in supported:
        reason = f"the model itself is a {type(model).__name__}, and only its submodules are swapped: pass nn.Sequential(model)"
    elif not sites:
        reason = "it has no layer of a quantizable type"
    elif not plans:
        reason = "every quantizable layer is excluded"
    else:
        reason = "no spec of the config applies to its quantizable layers (every role is None)"
    seen = Counter(type(m).__name__ for m in model.modules() if not next(m.children(), None))
    return (
        f"quantize_model: the config quantizes nothing in {type(model).__name__}: {reason}. Layer types seen: "
        f"{', '.join(f'{name} ({count})' for name, count in sorted(seen.items())) or 'none'}; quantizable types: "
        f"{', '.join(sorted(t.__name__ for t in supported))}. Layers of other types stay float."
    )


def load_checkpoint(path: str | dict[str, Any], model: nn.Module, config: Any = None) -> nn.Module:
    """The quantized model of checkpoint ``path`` (or of its contents), rebuilt on the float
    ``model`` (which it takes over, as ``quantize_model`` does), in eval mode. ``config``: the
    checkpoint's own, decoded already."""
    state = read_checkpoint(path) if isinstance(path, str) else path
    config = checkpoint_config(state) if config is None else config
    quark_logger = logging.getLogger("quark")
    level = quark_logger.level
    quark_logger.setLevel(logging.ERROR)  # what the rebuild warns about, quantize said already
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            qmodel = ModelQuantizer(config).quantize_model(model, calibrate=False, progress=False)
    finally:
        quark_logger.setLevel(level)
    qmodel.load_state_dict(state["state_dict"])
    return qmodel.eval()
