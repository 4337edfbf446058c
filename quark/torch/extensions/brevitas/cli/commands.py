"""The subcommands: each takes the parsed arguments and returns ``(exit status, result)``; the result
is what ``--json`` prints. A mistake in the command line or its files raises ``UsageError``; the
checks that need no work (flags, parts, paths) come first, and a failed command leaves no file it
created behind.

Imported only when a subcommand runs: torch and the backend load here, not for ``--help``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from quark.torch.extensions.brevitas.cli.errors import FAILED, OK, Failed, UsageError, one_line
from quark.torch.extensions.brevitas.cli.inputs import (
    check_model_spec,
    float_model_of,
    import_object,
    load_checkpoint,
    load_config,
    load_data,
    load_model,
    load_onnx,
    origin_of,
    read_checkpoint,
    removed_on_failure,
    save_checkpoint,
)

logger = logging.getLogger(__name__)

Result = tuple[int, dict[str, Any]]
#: the flags of `train` that set its recipe (``_backend.training.Recipe``'s fields)
RECIPE_FLAGS = ("epochs", "lr", "schedule", "warmup_epochs", "weight_decay")


def say(args: argparse.Namespace, text: str) -> None:
    """The command's own report on stdout (``--json`` prints the result instead)."""
    if not args.json:
        print(text)


# -- checks before any work -----------------------------------------------------------------------


def _device(args: argparse.Namespace) -> torch.device:
    if args.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: torch finds no CUDA device (torch.cuda.is_available() is False); use --device cpu")
    return torch.device(args.device)


def _positive(args: argparse.Namespace, *names: str) -> None:
    for name in names:
        value = getattr(args, name)
        if value is not None and not value > 0:
            raise UsageError(f"--{name.replace('_', '-')} {value:g}: must be > 0")


def _checkpoint_path(path: str, option: str = "-o") -> None:
    """A file the command will write: not a folder, its folder not a file."""
    from quark.torch.quantization.files import check_writable

    try:
        check_writable(path)
    except (IsADirectoryError, NotADirectoryError, PermissionError) as error:
        raise UsageError(f"{option} {path}: {one_line(error)}") from error


def _created_root(path: str) -> str:
    """The outermost of ``path`` and its folders that does not exist yet (what writing it creates)."""
    path = os.path.abspath(path)
    root = path
    while not os.path.exists(os.path.dirname(root)):
        root = os.path.dirname(root)
    return root


def _check_accepts(model: nn.Module, batch: Any, option: str) -> None:
    """The model runs on the first batch: a wrong shape or dtype is the user's, named here."""
    from quark.torch.extensions.brevitas._backend.data import BatchError, run_batch

    try:
        with torch.no_grad():
            run_batch(model, batch)
    except (RuntimeError, TypeError, ValueError, IndexError, BatchError) as error:
        shapes = {k: tuple(v.shape) for k, v in batch.items()} if isinstance(batch, dict) else tuple(batch.shape)
        raise UsageError(
            f"{option}: the model does not accept its batches (batch shape {shapes}): {one_line(error)[:300]}"
        ) from error


def _needs_data(quantizer: Any) -> list[str]:
    """What of the config needs calibration data: algorithms, and static activation specs by their
    YAML path."""
    from quark.torch.quantization import plan as planning
    from quark.torch.quantization.config.spec import ACTIVATION_ROLES

    hungry = [type(algo).__name__ for algo, impl in quantizer.algorithms if impl.needs_data]
    static = [
        where.replace("['", ".").replace("']", "")
        for where, spec in planning.config_specs(quantizer.view)
        if where.rpartition(".")[2] in ACTIVATION_ROLES and spec.needs_calibration
    ]
    return [*(f"{name} (an algorithm)" for name in hungry), *static]


# -- quantize --------------------------------------------------------------------------------------


def quantize(args: argparse.Namespace) -> Result:
    from quark.torch.extensions.brevitas.api import ModelQuantizer

    _checkpoint_path(args.output)
    _positive(args, "num_batches")
    device = _device(args)
    check_model_spec(args.model)
    config = load_config(args.config, args.flavour)
    batches = load_data(args.data, args.batch_size) if args.data else None
    try:
        quantizer = ModelQuantizer(config)
    except (ValueError, TypeError, NotImplementedError) as error:
        raise UsageError(f"--config {args.config}: {one_line(error)}") from error
    if batches is None:
        needing = _needs_data(quantizer)
        if needing:
            raise UsageError(
                f"--data is required: this config calibrates {', '.join(needing[:4])}"
                f"{' and more' if len(needing) > 4 else ''} on data (a .npz, .pt or folder of images); "
                "weight-only configs (init --preset w8) need none"
            )
    model = load_model(args.model).to(device)
    if batches:
        _check_accepts(model, batches[0], f"--data {args.data}")
    qmodel = quantizer.quantize_model(model, batches, num_calib_batches=args.num_batches, progress=not args.quiet)
    save_checkpoint(args.output, args.model, config, qmodel, origin_of(args.model))
    quantized = sum(p.quantized for p in quantizer.plans)
    say(args, quantizer.summary())
    say(args, f"\nquantized {quantized} of {len(quantizer.plans)} layers; wrote {args.output}")
    return OK, {
        "checkpoint": args.output,
        "layers": len(quantizer.plans),
        "quantized_layers": quantized,
        "summary": quantizer.summary(),
    }


# -- train -----------------------------------------------------------------------------------------


def _recipe(args: argparse.Namespace, resumed: dict[str, Any] | None) -> Any:
    """The training recipe: the flags' (their defaults where not given), or the resumed run's."""
    from quark.torch.extensions.brevitas._backend.training import Recipe, Schedule

    given = {k: getattr(args, k) for k in RECIPE_FLAGS if getattr(args, k) is not None}
    if resumed is None:
        if "schedule" in given:
            given["schedule"] = Schedule(given["schedule"])
        recipe = Recipe(**({"epochs": 1} | given))
        for name in ("epochs", "lr"):
            if not getattr(recipe, name) > 0:
                raise UsageError(f"--{name} {getattr(recipe, name):g}: must be > 0")
        for name in ("warmup_epochs", "weight_decay"):
            if getattr(recipe, name) < 0:
                raise UsageError(f"--{name.replace('_', '-')} {getattr(recipe, name):g}: must be >= 0")
        return recipe
    recorded = Recipe.from_dict(resumed["recipe"])
    changed = [f"--{k.replace('_', '-')} {v}" for k, v in given.items() if v != recorded.to_dict()[k]]
    if changed:
        raise UsageError(
            f"{', '.join(changed)}: --resume goes on with the recipe the checkpoint records "
            f"({', '.join(f'{k}={v}' for k, v in recorded.to_dict().items())}); drop {'it' if len(changed) == 1 else 'them'}, "
            "or start a new run from this checkpoint without --resume"
        )
    return recorded


def train(args: argparse.Namespace) -> Result:
    """Quantization-aware training of a checkpoint: the recipe of ``_backend.training``, a checkpoint
    after every epoch (``--resume`` goes on from it; Ctrl-C keeps the last finished epoch)."""
    from quark.torch.extensions.brevitas import qat
    from quark.torch.extensions.brevitas._backend.evaluation import evaluate
    from quark.torch.extensions.brevitas._backend.training import BadBatch, optimizer_for, train_epoch

    _checkpoint_path(args.output)
    device = _device(args)
    if args.model:
        check_model_spec(args.model)
    state = read_checkpoint(args.checkpoint)
    resumed = state.get("training") if args.resume else None
    if args.resume and resumed is None:
        raise UsageError(
            f"--resume: {args.checkpoint} holds no training state (written by quantize, or by a train run that "
            "finished); give it without --resume to start a new run"
        )
    recipe = _recipe(args, resumed)
    start = resumed["epoch"] + 1 if resumed else 1
    train_batches, eval_batches = _loaders(args)
    qmodel, config, spec = load_checkpoint(args.checkpoint, args.model, state)
    qmodel.to(device)
    optimizer = optimizer_for(qmodel, recipe)
    if resumed:
        optimizer.load_state_dict(resumed["optimizer"])
    origin = origin_of(args.model) if args.model else state.get("model_origin")
    accuracies: list[float | None] = list(resumed["accuracies"]) if resumed else []
    finished = start - 1
    try:
        for epoch in range(start, recipe.epochs + 1):
            try:
                loss = train_epoch(qmodel, train_batches, optimizer, recipe, epoch, progress=not args.quiet)
            except BadBatch as error:
                raise UsageError(f"--data-module {args.data_module}: {error}") from error
            scored = evaluate(qmodel, eval_batches, progress=False).quantized_accuracy
            accuracies.append(None if scored is None else scored.top1)
            held_out = "no labels to score" if scored is None else f"held-out accuracy {scored.top1:.2f}%"
            say(args, f"epoch {epoch}/{recipe.epochs}: loss {loss:.4f}, {held_out}")
            finished = epoch
            if epoch < recipe.epochs:  # where training stands, for --resume and Ctrl-C
                training = {"epoch": epoch, "recipe": recipe.to_dict(), "optimizer": optimizer.state_dict(), "accuracies": accuracies}
                save_checkpoint(args.output, spec, config, qmodel, origin, training=training)
    except KeyboardInterrupt:
        if finished >= start:
            print(
                f"interrupted: {args.output} holds epoch {finished} of {recipe.epochs}; go on with "
                f"`quark-brevitas train --checkpoint {args.output} --resume` (and the same --data-module, -o)",
                file=sys.stderr,
            )
        raise
    if args.freeze:
        qat.freeze(qmodel)
    save_checkpoint(args.output, spec, config, qmodel, origin)
    say(args, f"wrote {args.output}")
    return OK, {
        "checkpoint": args.output,
        "epochs": recipe.epochs,
        "recipe": recipe.to_dict(),
        "held_out_accuracy": accuracies,
        "frozen": args.freeze,
    }


def _loaders(args: argparse.Namespace) -> tuple[Any, Any]:
    """(train, eval) batches from ``--data-module``."""
    loaders_fn = import_object(args.data_module, "--data-module")
    try:
        loaders = loaders_fn()
    except Exception as error:
        raise UsageError(f"--data-module {args.data_module}: calling it failed: {type(error).__name__}: {one_line(error)}") from error
    if not (isinstance(loaders, (tuple, list)) and len(loaders) == 2):
        raise UsageError(f"--data-module {args.data_module}: must return (train_batches, eval_batches) of (inputs, labels)")
    return loaders[0], loaders[1]


# -- evaluate, analyze ------------------------------------------------------------------------------


def _models_and_batches(args: argparse.Namespace) -> tuple[nn.Module, nn.Module, list[Any] | Any]:
    """(quantized model, float model, batches) of ``evaluate`` / ``analyze``: --data or the eval
    batches of --data-module; the float model built again by the checkpoint's factory (--model)."""
    from quark.torch.extensions.brevitas._backend.evaluation import split_labels

    if (args.data is None) == (args.data_module is None):
        raise UsageError("give --data (a .npz with x and y, or inputs alone) or --data-module (its eval batches), one of them")
    if args.num_batches is not None and args.num_batches <= 0:
        raise UsageError(f"--num-batches {args.num_batches}: must be a positive integer")
    if args.model:
        check_model_spec(args.model)
    state = read_checkpoint(args.checkpoint)
    option = f"--data {args.data}" if args.data else f"--data-module {args.data_module}"
    batches = _batches(args.data, args.batch_size) if args.data else _loaders(args)[1]
    if isinstance(batches, Iterator):  # a generator from the data module: one pass only, and the check below takes a batch
        batches = list(batches)
    first = next(iter(batches), None)
    if first is None:
        raise UsageError(f"{option}: no batch")
    qmodel, _, _ = load_checkpoint(args.checkpoint, args.model, state)
    float_model = float_model_of(args.checkpoint, args.model, state)
    device = _device(args)
    qmodel.to(device)
    float_model.to(device)
    _check_accepts(qmodel, split_labels(first)[0], option)
    return qmodel, float_model, batches


def _batches(path: str, batch_size: int) -> list[Any]:
    """Labelled batches from a .npz holding x and y; the inputs alone from any other --data."""
    import numpy as np

    if path.endswith(".npz") and os.path.isfile(path):
        with contextlib.suppress(ValueError, OSError), np.load(path, allow_pickle=False) as arrays:
            if {"x", "y"} <= set(arrays.files):
                return _labelled(path, "--data", batch_size)
    return load_data(path, batch_size)


def evaluate(args: argparse.Namespace) -> Result:
    """Quantized and float model on the same batches: accuracy where labelled, output agreement."""
    from quark.torch.extensions.brevitas._backend.evaluation import evaluate as run

    qmodel, float_model, batches = _models_and_batches(args)
    result = run(qmodel, batches, float_model, num_batches=args.num_batches, progress=not args.quiet)
    say(args, result.report())
    return OK, result.to_dict()


def analyze(args: argparse.Namespace) -> Result:
    """Each quantizer's error, the worst first (``_backend.analysis``)."""
    from quark.torch.extensions.brevitas._backend.analysis import analyze as run
    from quark.torch.extensions.brevitas._backend.evaluation import split_labels

    qmodel, float_model, batches = _models_and_batches(args)
    inputs = (split_labels(batch)[0] for batch in batches)
    result = run(qmodel, inputs, float_model, num_batches=args.num_batches, progress=not args.quiet)
    say(args, result.table())
    return OK, result.to_dict()


# -- export ----------------------------------------------------------------------------------------

#: options that only --format finn takes: name -> (default, the FinnBuildConfig field it sets)
FINN_ONLY = {
    "part": None,
    "target_fps": None,
    "clock_mhz": None,
    "top_k": None,
    "integer_input": False,
    "folding": None,
    "mvau_wwidth_max": None,
}
#: options that only --format hls4ml takes: name -> default (each an Hls4mlBuildConfig field)
HLS4ML_ONLY = {"io_type": None, "strategy": None, "reuse_factor": None}
#: a directory format -> the options only it takes
FORMAT_ONLY = {"finn": FINN_ONLY, "hls4ml": HLS4ML_ONLY}
#: a directory this command wrote holds one of these files (an existing one may be replaced)
DIRECTORY_MARKERS = {"finn": ("estimate.json", "verification.json"), "hls4ml": ("hls4ml_config.json",)}


def _check_export_flags(args: argparse.Namespace) -> Any:
    """Every flag of ``export`` checked before any work; the build's settings (a ``FinnBuildConfig`` or an
    ``Hls4mlBuildConfig``; ``None`` for the file formats)."""
    for fmt, options in FORMAT_ONLY.items():
        given = [f"--{k.replace('_', '-')}" for k, default in options.items() if getattr(args, k) != default]
        if args.format != fmt and given:
            raise UsageError(f"{', '.join(given)}: only --format {fmt} takes {'it' if len(given) == 1 else 'them'}")
    if args.format not in FORMAT_ONLY:
        _checkpoint_path(args.output)
        return None
    config = _finn_config(args) if args.format == "finn" else _hls4ml_config(args)
    out = args.output
    if os.path.exists(out) and not os.path.isdir(out):
        raise UsageError(f"-o {out}: a file; --format {args.format} writes a directory: give a new directory's path")
    markers = DIRECTORY_MARKERS[args.format]
    if os.path.isdir(out) and os.listdir(out) and not any(os.path.exists(os.path.join(out, m)) for m in markers):
        raise UsageError(
            f"-o {out}: a directory holding other files; --format {args.format} writes a new directory (or replaces "
            "one it wrote)"
        )
    return config


def _finn_config(args: argparse.Namespace) -> Any:
    _positive(args, "target_fps", "clock_mhz", "top_k", "mvau_wwidth_max")
    from quark.torch.extensions.brevitas._backend.targets.finn.front_end import require_finn

    try:
        require_finn()
    except ImportError as error:
        raise UsageError(f"--format finn: {one_line(error)}") from error
    from quark.torch.extensions.brevitas.finn_steps import FinnBuildConfig, FinnConfigError

    settings = {k: getattr(args, k) for k, default in FINN_ONLY.items() if getattr(args, k) != default}
    if args.folding is not None and not os.path.isfile(args.folding):
        raise UsageError(f"--folding {args.folding}: no such file (a folding_config.json, as FINN writes it)")
    try:
        return FinnBuildConfig(**settings)
    except FinnConfigError as error:
        message = one_line(error)
        field = message.split("=", 1)[0].split("[", 1)[0]
        flag = f"--{field.replace('_', '-')}" if field in FINN_ONLY else None
        if flag == "--part":
            raise UsageError(f"--part {args.part}: {message.split(': ', 1)[-1]}") from error
        raise UsageError(f"{flag} {getattr(args, field)}: {message}" if flag else message) from error


def _hls4ml_config(args: argparse.Namespace) -> Any:
    _positive(args, "reuse_factor")
    from quark.torch.extensions.brevitas._backend.targets.hls4ml.build_config import Hls4mlBuildConfig
    from quark.torch.extensions.brevitas._backend.targets.hls4ml.project import Hls4mlError, require_hls4ml

    try:
        require_hls4ml()
    except Hls4mlError as error:
        raise UsageError(f"--format hls4ml: {one_line(error)}") from error
    return Hls4mlBuildConfig(**{k: getattr(args, k) for k, default in HLS4ML_ONLY.items() if getattr(args, k) != default})


def export(args: argparse.Namespace) -> Result:
    from quark.torch.extensions.brevitas.api import ModelExporter

    build = _check_export_flags(args)
    if args.model:
        check_model_spec(args.model)
    batches = load_data(args.data, args.batch_size)
    example = batches[0]
    if args.format in FORMAT_ONLY and not isinstance(example, torch.Tensor):
        raise UsageError(f"--data {args.data}: --format {args.format} takes one input tensor; the file holds keyword inputs")
    logger.info("rebuilding the quantized model from %s", args.checkpoint)
    qmodel, _, _ = load_checkpoint(args.checkpoint, args.model)
    _check_accepts(qmodel, example, f"--data {args.data}")
    if args.format == "hls4ml":
        with _cleaned(args, _created_root(args.output)):
            logger.info("exporting QONNX, then hls4ml's project, compiled with g++ (about 30 s for a small CNN)")
            project = ModelExporter(args.output).export_hls4ml_project(qmodel, torch.cat(batches), build)
        say(args, str(project))
        return OK, project.to_json()
    if args.format != "finn":
        method = {"qonnx": "export_qonnx_model", "qdq": "export_onnx_model"}[args.format]
        with _cleaned(args, _created_root(args.output)):  # the file, and the folders it needed
            report = getattr(ModelExporter(args.output), method)(qmodel, example)
            for batch in batches[1:]:  # every batch of --data, as the first
                again = ModelExporter(args.output).verify(qmodel, batch)
                report = report if report.max_abs_diff >= again.max_abs_diff else again
        say(args, str(report))
        say(args, f"verified on {len(batches)} batch(es) of --data; wrote {args.output}")
        return OK, _report_json(report)
    # the directory is written beside its name and moved there complete: a failure leaves nothing
    staging = os.path.join(os.path.dirname(os.path.abspath(args.output)), f".{os.path.basename(os.path.abspath(args.output))}.{uuid.uuid4().hex[:8]}.partial")
    from quark.torch.extensions.brevitas._backend.targets.finn.dataflow import relocate

    created = _created_root(args.output)
    with _cleaned(args, staging, keep_message="the partial FINN directory"), _cleaned(args, created):
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        logger.info("exporting QONNX, then FINN's dataflow (about 20 s for a small CNN)")
        result = ModelExporter(staging).export_finn_dataflow(qmodel, torch.cat(batches), build)
        result = relocate(result, args.output)
    say(args, str(result))
    return OK, result.to_json()


@contextlib.contextmanager
def _cleaned(args: argparse.Namespace, path: str, keep_message: str = ""):
    """Remove ``path`` (and a ``.rejected.onnx`` beside it) if the block fails and they were not
    there before; ``--debug`` keeps them for inspection."""
    rejected = os.path.splitext(path)[0] + ".rejected.onnx"
    had_rejected = os.path.exists(rejected)
    if args.debug:
        try:
            yield
        except BaseException:
            if keep_message and os.path.exists(path):
                logger.warning("--debug: %s is kept in %s", keep_message, path)
            raise
        return
    with removed_on_failure(path):
        try:
            yield
        except BaseException:
            if not had_rejected and os.path.exists(rejected):
                os.remove(rejected)
            raise
    with contextlib.suppress(FileNotFoundError):
        if keep_message and os.path.isdir(path):
            shutil.rmtree(path)


def _report_json(report: Any) -> dict[str, Any]:
    return {
        "file": report.path,
        "format": report.format.value,
        "opset": report.opset,
        "runtime": report.runtime,
        "passed": report.passed,
        "exact": report.exact,
        "tolerance_lsb": report.tolerance_lsb,
        "max_abs_diff": report.max_abs_diff,
        "max_diff_lsb": report.max_diff_lsb,
        "target_checks": list(report.target_checks),
        "optimized_runtime_diff": report.optimized_runtime_diff,
    }


# -- verify ----------------------------------------------------------------------------------------


def verify(args: argparse.Namespace) -> Result:
    from quark.torch.extensions.brevitas._backend.exporter import ExportVerificationError
    from quark.torch.extensions.brevitas.api import ModelExporter

    if args.tolerance_lsb is not None and args.tolerance_lsb < 0:
        raise UsageError(f"--tolerance-lsb {args.tolerance_lsb:g}: must be >= 0")
    if args.model:
        check_model_spec(args.model)
    load_onnx(args.onnx)
    example = load_data(args.data, args.batch_size)[0]
    qmodel, _, _ = load_checkpoint(args.checkpoint, args.model)
    _check_accepts(qmodel, example, f"--data {args.data}")
    integers = _integer_input_of(args.onnx)
    try:
        if integers is None:
            report = ModelExporter(args.onnx).verify(qmodel, example, tolerance_lsb=args.tolerance_lsb)
        else:  # a FINN directory's integer-input graph: fed the integers the input quantizer makes of --data
            report = ModelExporter(args.onnx).verify(
                qmodel, example, tolerance_lsb=args.tolerance_lsb, graph_inputs=[integers.integers(example.numpy())]
            )
    except ExportVerificationError as error:
        raise Failed(one_line(error)) from error
    say(args, str(report))
    result = _report_json(report)
    if not report.passed:
        raise Failed(f"{args.onnx} differs from the checkpoint's model beyond {report.tolerance_lsb:g} LSB (max |diff| {report.max_abs_diff:.3g})")
    return (OK if report.passed else FAILED), result


def _integer_input_of(onnx_path: str):
    """The network input of a FINN directory's integer-input graph (from the directory's
    ``verification.json``), or None for any other file."""
    from quark.torch.extensions.brevitas._backend.targets.finn.dataflow import FILES

    directory, name = os.path.split(os.path.abspath(onnx_path))
    record = os.path.join(directory, FILES["verification"])
    if name != FILES["integer_input_qonnx"] or not os.path.isfile(record):
        return None
    from quark.torch.extensions.brevitas._backend.targets.finn.interface import IntegerInput

    data = json.loads(Path(record).read_text()).get("integer_input")
    if not data:
        return None
    return IntegerInput(**{**data, "thresholds": tuple(data["thresholds"]) if data.get("thresholds") else None})


# -- mix -------------------------------------------------------------------------------------------


def mix(args: argparse.Namespace) -> Result:
    """A8/A16 mixing (the parser: :mod:`.mix`). Exit status 0 when the target is met, 1 when not (the
    config with every site promoted on the way is written either way)."""
    from quark.torch.extensions.brevitas.mixing import mix as search
    from quark.torch.quantization.config.config import Config

    if not args.output.endswith((".yaml", ".yml", ".json")):
        raise UsageError(f"-o {args.output}: expected a .yaml, .yml or .json file")
    _checkpoint_path(args.output)
    check_model_spec(args.model)
    config = load_config(args.config, "quark")
    if not isinstance(config, Config):
        raise UsageError(f"--config {args.config}: mixing takes a main-API config")
    calib = load_data(args.data, args.batch_size)
    evaluation = load_data(args.eval_data, args.batch_size)
    model = load_model(args.model)
    result = search(
        config, model, calib, evaluation, metric=args.metric, target=args.target, prune=not args.no_prune, ranking=args.ranking
    )
    with removed_on_failure(args.output):
        result.config.save(args.output)
    say(args, f"{result}\n\nwrote {args.output}")
    return (OK if result.met else FAILED), {
        "config": args.output,
        "met": result.met,
        "metric": args.metric,
        "target": args.target,
        "metric_8bit": result.metric_8bit,
        "metric_mixed": result.metric_mixed,
        "promoted": list(result.promoted),
        "fraction_16bit": result.fraction_16bit,
    }


def search(args: argparse.Namespace) -> Result:
    """Per-layer widths against FINN's cost (the parser: :mod:`.search`). Each measured point's
    checkpoint is this command line's format: ``export`` / ``verify --checkpoint DIR/points/NAME/model.pt``."""
    from quark.torch.extensions.brevitas._backend.targets.finn.front_end import require_finn
    from quark.torch.extensions.brevitas._backend.targets.finn.parts import resolve
    from quark.torch.extensions.brevitas.search import search as width_search

    try:
        bits = tuple(int(b) for b in args.bits.split(","))
    except ValueError as error:
        raise UsageError(f"--bits {args.bits}: expected comma-separated integers such as 2,3,4,8") from error
    if min(bits) < 2:
        raise UsageError(f"--bits {args.bits}: widths of 2 bits and up (1-bit layers are another FINN structure)")
    if args.qat_epochs < 0:
        raise UsageError(f"--qat-epochs {args.qat_epochs}: must be >= 0")
    if args.points == "all":
        points = None
    elif args.points.isdigit() and int(args.points) >= 1:
        points = int(args.points)
    else:
        raise UsageError(f"--points {args.points}: expected an integer >= 1 or 'all'")
    if args.upto is not None and args.upto not in {f"W{b}A{b}" for b in bits}:
        raise UsageError(f"--upto {args.upto}: a uniform baseline of --bits {args.bits}: "
                         + ", ".join(f"W{b}A{b}" for b in sorted(set(bits))))
    _positive(args, "target_fps", "clock_mhz", "batch_size")
    try:
        require_finn()
    except ImportError as error:
        raise UsageError(f"search: {one_line(error)}") from error
    try:
        resolve(args.part)
    except ValueError as error:
        message = one_line(error)
        raise UsageError(f"--part {args.part}: {message.split(': ', 1)[1] if message.startswith('part=') else message}") from error
    if os.path.exists(args.output) and not os.path.isdir(args.output):
        raise UsageError(f"-o {args.output}: a file; search writes a directory")
    check_model_spec(args.model)
    train, evaluation = _labelled(args.data, "--data", args.batch_size), _labelled(args.eval_data, "--eval-data", args.batch_size)
    model = load_model(args.model)
    state = _read_float_state(args.checkpoint)
    try:
        model.load_state_dict(state)
    except RuntimeError as error:
        raise UsageError(f"--checkpoint {args.checkpoint}: does not fit the model {args.model} builds: {one_line(error)[:300]}") from error
    model.eval()
    _check_accepts(model, train[0][0], f"--data {args.data}")
    example = torch.cat([x for x, _ in evaluation])[:16]
    origin = origin_of(args.model)

    def checkpoint(path: str, config: Any, qmodel: nn.Module) -> None:
        save_checkpoint(path, args.model, config, qmodel, origin)

    # a failed or interrupted search keeps DIR: its cache/ lets the same command resume
    result = width_search(
        model, train, evaluation, example, args.output, part=args.part, target_fps=args.target_fps,
        clock_mhz=args.clock_mhz, bits=bits, qat_epochs=args.qat_epochs, metric=args.metric, points=points,
        upto=args.upto, seed=args.seed, network_input=args.search_input, progress=not args.quiet,
        save_checkpoint=checkpoint,
    )
    for point in result["points"]:
        say(args, f"{point['name']:<32} accuracy {point['accuracy']:6.2f} %  {args.metric.upper()} "
                  f"{point['predicted'][_RESOURCE[args.metric]]:,.0f}{'  (uniform)' if point['uniform'] else ''}")
    say(args, f"chosen: {result['chosen']}; wrote {args.output}/pareto.json, pareto.png, chosen.yaml, points/")
    return OK, {"output": args.output, "chosen": result["chosen"], "points": len(result["points"])}


#: --metric -> FINN's resource name
_RESOURCE = {"lut": "LUT", "bram": "BRAM_18K", "dsp": "DSP"}


def _labelled(path: str, option: str, batch_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(inputs, integer labels) batches from a .npz with arrays ``x`` and ``y``."""
    import numpy as np

    if not path.endswith(".npz") or not os.path.isfile(path):
        raise UsageError(f"{option} {path}: expected an existing .npz file with arrays x (inputs) and y (integer labels)")
    with np.load(path, allow_pickle=False) as arrays:
        if not {"x", "y"} <= set(arrays.files):
            raise UsageError(f"{option} {path}: arrays {sorted(arrays.files)}; expected x (inputs) and y (integer labels)")
        x, y = torch.as_tensor(arrays["x"]).float(), torch.as_tensor(arrays["y"])
    if len(x) == 0 or len(x) != len(y):
        raise UsageError(f"{option} {path}: x has {len(x)} samples and y {len(y)}; expected as many, at least one")
    if y.is_floating_point() or y.ndim != 1:
        raise UsageError(f"{option} {path}: y has dtype {y.dtype} and shape {tuple(y.shape)}; expected integer labels, one per sample")
    y = y.long()
    return [(x[i : i + batch_size], y[i : i + batch_size]) for i in range(0, len(x), batch_size)]


def _read_float_state(path: str) -> dict[str, torch.Tensor]:
    """The float model's ``state_dict`` (``torch.save(model.state_dict(), path)``)."""
    if not os.path.isfile(path):
        raise UsageError(f"--checkpoint {path}: no such file; expected the float model's state_dict (.pt)")
    try:
        state = torch.load(path, weights_only=True)
    except Exception as error:
        raise UsageError(f"--checkpoint {path}: not a torch file: {one_line(error)[:200]}") from error
    if not (isinstance(state, dict) and all(isinstance(v, torch.Tensor) for v in state.values())):
        raise UsageError(f"--checkpoint {path}: expected the float model's state_dict (a dict of tensors)")
    return state


# -- support and init ------------------------------------------------------------------------------


def support(args: argparse.Namespace) -> Result:
    from quark.torch.extensions.brevitas._backend.export import support as export_support
    from quark.torch.extensions.brevitas._backend.rules import layers as rules
    from quark.torch.quantization.support import support_table

    sections = {
        "formats": ("What each dtype accepts, per tensor role", support_table),
        "rules": ("What a layer's specs cannot combine", rules.markdown),
        "export": ("What each export format can express", export_support.markdown),
    }
    unknown = [name for name in args.sections if name not in sections]
    if unknown:
        raise UsageError(f"support {' '.join(unknown)}: unknown section; sections: {', '.join(sections)}")
    tables = {}
    for name in args.sections or list(sections):
        title, table = sections[name]
        tables[name] = table()
        say(args, f"## {title}\n\n{tables[name]}\n")
    return OK, {"sections": tables}


def init(args: argparse.Namespace) -> Result:
    """A commented starter config from a preset, on stdout or in ``-o``."""
    import shlex
    import sys

    from quark.torch.extensions.brevitas.cli.configs import PRESETS, starter
    from quark.torch.quantization.files import write_text

    preset = PRESETS[args.preset]
    bits = {"--bits": args.bits, "--weight-bits": args.weight_bits, "--act-bits": args.act_bits}
    given = [flag for flag, value in bits.items() if value is not None]
    if given and not preset.widths:
        takers = " and ".join(name for name, p in PRESETS.items() if p.widths)
        raise UsageError(f"{', '.join(given)}: the {args.preset} preset has its bit widths in its name; {takers} take them")
    if args.graph and not preset.graph:
        raise UsageError(f"--graph: the {args.preset} preset is graph mode already")
    if args.tqt and not preset.tqt:
        takers = " and ".join(name for name, p in PRESETS.items() if p.tqt)
        raise UsageError(f"--tqt: trained power-of-two thresholds are part of the {takers} presets; {args.preset} has float scales")
    for flag, value in bits.items():
        if value is not None and value not in preset.widths:
            allowed = ", ".join(map(str, preset.widths[:-1])) + f" or {preset.widths[-1]}"
            raise UsageError(f"{flag} {value}: the {args.preset} preset allows {allowed}")
    if args.output:
        if not args.output.endswith((".yaml", ".yml")):
            raise UsageError(f"-o {args.output}: init writes YAML; give a .yaml or .yml path")
        _checkpoint_path(args.output)
    flags = [f"{flag} {value}" for flag, value in bits.items() if value is not None]
    flags += [flag for flag, on in (("--tqt", args.tqt), ("--graph", args.graph)) if on]
    command = " ".join(["quark-brevitas init --preset", shlex.quote(args.preset), *flags])
    _, text = starter(
        args.preset,
        weight_bits=args.weight_bits or args.bits,
        act_bits=args.act_bits or args.bits,
        tqt=args.tqt,
        graph=args.graph,
        command=command,
    )
    if args.output:
        write_text(args.output, text)
        if not (args.json or args.quiet):
            print(f"wrote {args.output}", file=sys.stderr)
    elif not args.json:
        sys.stdout.write(text)
    return OK, {"preset": args.preset, "yaml": text, "file": args.output}
