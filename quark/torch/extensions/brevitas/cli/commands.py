"""The subcommands: each takes the parsed arguments and returns its exit status; a mistake in the
command line or its files raises ``UsageError``."""

from __future__ import annotations

import argparse
import logging
from typing import Any

import torch
from torch import nn

from quark.torch.extensions.brevitas.cli.inputs import (
    UsageError,
    import_object,
    load_checkpoint,
    load_config,
    load_data,
    load_model,
    save_checkpoint,
)

logger = logging.getLogger(__name__)

#: exit statuses
OK, FAILED, USAGE = 0, 1, 2


def quantize(args: argparse.Namespace) -> int:
    from quark.torch.extensions.brevitas.api import ModelQuantizer

    config = load_config(args.config, args.flavour)
    model = load_model(args.model)
    batches = load_data(args.data, args.batch_size) if args.data else None
    if batches:
        _check_accepts(model, batches[0], args.data)
    quantizer = ModelQuantizer(config)
    qmodel = quantizer.quantize_model(model, batches, num_calib_batches=args.num_batches, progress=not args.quiet)
    save_checkpoint(args.output, args.model, config, qmodel)
    print(quantizer.summary())
    print(f"\nquantized {sum(p.quantized for p in quantizer.plans)} of {len(quantizer.plans)} layers; wrote {args.output}")
    return OK


def _check_accepts(model: nn.Module, batch: Any, path: str) -> None:
    """The float model runs on the first batch: a wrong shape or dtype is the user's, named here."""
    from quark.torch.extensions.brevitas._backend.data import run_batch

    try:
        with torch.no_grad():
            run_batch(model, batch)
    except (RuntimeError, TypeError, ValueError, IndexError) as error:
        shapes = {k: tuple(v.shape) for k, v in batch.items()} if isinstance(batch, dict) else tuple(batch.shape)
        raise UsageError(
            f"--data {path}: the model does not accept its batches (batch shape {shapes}): {' '.join(str(error).split())}"
        ) from error


def train(args: argparse.Namespace) -> int:
    """Quantization-aware training of a checkpoint in a plain loop (Adam, cross-entropy)."""
    from quark.torch.extensions.brevitas import qat
    from quark.torch.extensions.brevitas._backend.data import batches as progress_batches
    from quark.torch.extensions.brevitas._backend.data import device_dtype, move

    qmodel, config, spec = load_checkpoint(args.checkpoint)
    loaders = import_object(args.data_module, "--data-module")()
    if not (isinstance(loaders, (tuple, list)) and len(loaders) == 2):
        raise UsageError(f"--data-module {args.data_module}: must return (train_batches, eval_batches) of (inputs, labels)")
    train_batches, eval_batches = loaders
    optimizer = torch.optim.Adam(qmodel.parameters(), lr=args.lr)
    device, dtype = device_dtype(qmodel)
    for epoch in range(1, args.epochs + 1):
        qmodel.train()
        for x, y in progress_batches(train_batches, progress=not args.quiet, desc=f"epoch {epoch}"):
            x, y = move(x, device, dtype), y.to(device)
            optimizer.zero_grad()
            nn.functional.cross_entropy(qmodel(x), y).backward()
            optimizer.step()
        print(f"epoch {epoch}: held-out accuracy {_accuracy(qmodel, eval_batches):.2f}%")
    if args.freeze:
        qat.freeze(qmodel)
    save_checkpoint(args.output, spec, config, qmodel)
    print(f"wrote {args.output}")
    return OK


@torch.no_grad()
def _accuracy(model: nn.Module, batches: Any) -> float:
    from quark.torch.extensions.brevitas._backend.data import device_dtype, move

    model.eval()
    device, dtype = device_dtype(model)
    correct = total = 0
    for x, y in batches:
        correct += int((model(move(x, device, dtype)).argmax(-1).cpu() == y).sum())
        total += len(y)
    return 100.0 * correct / max(total, 1)


def export(args: argparse.Namespace) -> int:
    from quark.torch.extensions.brevitas.api import ModelExporter

    qmodel, _, _ = load_checkpoint(args.checkpoint)
    batches = load_data(args.data, args.batch_size)
    example = batches[0]
    exporter = ModelExporter(args.output)
    if args.format == "finn":
        if not isinstance(example, torch.Tensor):
            raise UsageError("--format finn: FINN's dataflow takes one input tensor; --data holds keyword inputs")
        report = exporter.export_finn_dataflow(
            qmodel,
            example,
            part=args.part,
            target_fps=args.target_fps,
            clock_mhz=args.clock_mhz,
            top_k=args.top_k,
            integer_input=args.integer_input,
        )
    else:
        method = {"qonnx": exporter.export_qonnx_model, "qdq": exporter.export_onnx_model}[args.format]
        report = method(qmodel, example)
    print(report)
    return OK


def verify(args: argparse.Namespace) -> int:
    from quark.torch.extensions.brevitas.api import ModelExporter

    qmodel, _, _ = load_checkpoint(args.checkpoint)
    example = load_data(args.data, args.batch_size)[0]
    report = ModelExporter(args.onnx).verify(qmodel, example, tolerance_lsb=args.tolerance_lsb)
    print(report)
    return OK if report.passed else FAILED


def support(args: argparse.Namespace) -> int:
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
    for name in args.sections or list(sections):
        title, table = sections[name]
        print(f"## {title}\n\n{table()}\n")
    return OK
