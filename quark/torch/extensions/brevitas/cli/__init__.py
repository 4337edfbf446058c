"""``quark-brevitas``: the command line (also ``python -m quark.torch.extensions.brevitas``).

    quark-brevitas init     --preset finn --bits 4 > cfg.yaml
    quark-brevitas quantize --config cfg.yaml --model model.py:build --data calib.npz -o q.pt
    quark-brevitas evaluate --checkpoint q.pt --data test.npz
    quark-brevitas analyze  --checkpoint q.pt --data test.npz
    quark-brevitas train    --checkpoint q.pt --data-module model.py:loaders --epochs 5 -o qat.pt
    quark-brevitas export   --checkpoint qat.pt --format finn --data test.npz -o finn_out
    quark-brevitas verify   --checkpoint qat.pt --onnx model.onnx --data test.npz
    quark-brevitas mix      --config a8w8.yaml --model model.py:build --data calib.npz --eval-data eval.npz --target 0.995 -o mixed.yaml
    quark-brevitas search   --model model.py:build --checkpoint float.pt --data train.npz --eval-data val.npz --part xc7z020clg400-1 --target-fps 20000 -o search_out
    quark-brevitas support

Exit status: 0 done; 1 a verification or a FINN step failed; 2 a mistake in the command line or
its files (one line); 3 an unexpected error (``--debug`` shows the traceback); 130 interrupted.

This module builds the parser with the standard library only: torch, Brevitas and the backend are
imported when a subcommand runs (:mod:`.commands`), so ``--help`` and ``--version`` answer at once.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence

from quark.common.errors import QuarkBrevitasError
from quark.torch.extensions.brevitas.cli import mix
from quark.torch.extensions.brevitas.cli import search as search_parser
from quark.torch.extensions.brevitas.cli.errors import FAILED, INTERNAL, INTERRUPTED, USAGE, one_line

EPILOG = """exit status: 0 done, 1 verification failed, 2 usage or input error, 3 unexpected error
(rerun with --debug), 130 interrupted"""
#: subcommand -> its function in .commands
COMMANDS = ("init", "quantize", "evaluate", "analyze", "train", "export", "verify", "mix", "search", "support")
#: preset names of `init` (cli/configs.PRESETS; listed here so that --help imports nothing)
PRESET_NAMES = ("finn", "hls4ml", "xint8", "w8a8", "w4a8", "w8", "w4")


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("quark-brevitas")
    except PackageNotFoundError:
        return "unknown (not installed)"


class _Help(argparse.HelpFormatter):
    """Help with each option's default, where it has one worth saying."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if "%(default)" in text or default in (None, False, argparse.SUPPRESS) or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"


def _add(sub, name: str, help_text: str) -> argparse.ArgumentParser:
    return sub.add_parser(name, help=help_text, description=help_text, epilog=EPILOG, formatter_class=_Help)


def _common(parser: argparse.ArgumentParser, *, batch_size: bool = True, device: bool = False) -> None:
    if batch_size:
        parser.add_argument("--batch-size", type=int, default=32, help="samples per batch of --data")
    if device:
        parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where the model runs")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object (for CI)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress: only results and errors")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress, other packages' warnings too")
    parser.add_argument("--debug", action="store_true", help="tracebacks of errors; keep what a failed command wrote")


def _rebuild(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        help="the float model's factory when not where the checkpoint recorded it (module:attribute or file.py:attribute)",
    )


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="quark-brevitas",
        description="Quantize PyTorch models with AMD Quark configs on Brevitas; export to QONNX and FINN "
        "dataflow directories (FPGAs) and QDQ (ONNX Runtime, AMD NPUs).",
        epilog=EPILOG,
        formatter_class=_Help,
    )
    top.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    i = _add(sub, "init", "write a commented starter config (YAML) from a preset")
    i.add_argument("--preset", choices=PRESET_NAMES, required=True, help="finn, hls4ml: FPGAs; xint8: AMD NPUs; wNaM: integer")
    i.add_argument("--bits", type=int, help="finn, hls4ml: weight and activation bits (finn: 2, 3, 4, 8, default 4; hls4ml: also 16, default 8)")
    i.add_argument("--weight-bits", type=int, help="finn, hls4ml: weight bits, over --bits")
    i.add_argument("--act-bits", type=int, help="finn, hls4ml: activation bits, over --bits")
    i.add_argument("--tqt", action="store_true", help="finn, hls4ml: train the power-of-two thresholds in `train` (TQT)")
    i.add_argument("--graph", action="store_true", help="xint8, wNaM: graph mode (every tensor between layers)")
    i.add_argument("-o", "--output", help="the .yaml file to write (default: stdout)")
    _common(i, batch_size=False)

    q = _add(sub, "quantize", "quantize (and calibrate) a model with a config")
    q.add_argument("--config", required=True, help="Quark config, .yaml or .json (from `init`, the main API's or the Brevitas extension's)")
    q.add_argument("--flavour", choices=["auto", "quark", "brevitas"], default="auto", help="config flavour (auto: from the file's keys)")
    q.add_argument(
        "--model",
        required=True,
        help="the float model: path/to/file.py:factory, module:factory (the current directory is importable) or a transformers model directory",
    )
    q.add_argument("--data", help="calibration data: .npz, .pt or a folder of images (needed for static activations)")
    q.add_argument("--num-batches", type=int, help="use at most this many calibration batches")
    q.add_argument("-o", "--output", required=True, help="checkpoint to write (.pt)")
    _common(q, device=True)

    t = _add(sub, "train", "quantization-aware training of a checkpoint")
    t.add_argument("--checkpoint", required=True, help="checkpoint from quantize (or train)")
    t.add_argument(
        "--data-module",
        required=True,
        help="module:function or file.py:function returning (train_batches, eval_batches) of (inputs, labels)",
    )
    t.add_argument("--epochs", type=int, help="passes over the training batches (default: 1)")
    t.add_argument("--lr", type=float, help="AdamW's peak learning rate (default: 0.001)")
    t.add_argument(
        "--schedule",
        choices=["cosine", "constant"],
        help="the learning rate after the warm-up: cosine decays it to 0 at the last step (default: cosine)",
    )
    t.add_argument("--warmup-epochs", type=float, help="epochs of linear warm-up from 0 to --lr (default: 0)")
    t.add_argument("--weight-decay", type=float, help="AdamW's decay of the layers' weights, not of scales or biases (default: 0)")
    t.add_argument(
        "--resume",
        action="store_true",
        help="go on from the epoch --checkpoint (written by an interrupted train) holds, with its recipe and optimizer",
    )
    t.add_argument("--freeze", action="store_true", help="fix every quantization parameter at the end (for deployment)")
    t.add_argument("-o", "--output", required=True, help="checkpoint to write (.pt)")
    _rebuild(t)
    _common(t, batch_size=False, device=True)

    for name, help_text in (
        ("evaluate", "accuracy of a checkpoint and of its float model side by side (top-1/top-5), or how far their outputs agree"),
        ("analyze", "each quantizer's error (SQNR, alone and accumulated), the worst first, in the model's module names"),
    ):
        a = _add(sub, name, help_text)
        a.add_argument("--checkpoint", required=True, help="checkpoint from quantize or train")
        a.add_argument(
            "--data",
            help="a .npz with arrays x (inputs) and y (integer labels), or inputs alone (.npz, .pt, a folder of images)",
        )
        a.add_argument(
            "--data-module",
            help="module:function or file.py:function returning (train_batches, eval_batches): the eval batches are used",
        )
        a.add_argument("--num-batches", type=int, help="use at most this many batches")
        _rebuild(a)
        _common(a, device=True)

    e = _add(sub, "export", "export a checkpoint (QONNX, QDQ, a FINN dataflow or an hls4ml project directory), verified")
    e.add_argument("--checkpoint", required=True, help="checkpoint from quantize or train")
    e.add_argument(
        "--format",
        choices=["qonnx", "qdq", "finn", "hls4ml"],
        required=True,
        help="qonnx: for FINN; qdq: ONNX Runtime / AMD NPU; finn: a FINN dataflow directory; hls4ml: an hls4ml "
        "project directory, its C++ compiled and run on every batch of --data",
    )
    e.add_argument(
        "--data",
        required=True,
        help="example inputs: the first batch is exported, every batch verified (finn: the hardware graph on all of them)",
    )
    e.add_argument("-o", "--output", required=True, help=".onnx file (qonnx, qdq) or a new directory (finn, hls4ml)")
    e.add_argument("--part", help="finn: FPGA part or board, e.g. Pynq-Z1, ZCU104, xczu3eg (default: Pynq-Z1's xc7z020clg400-1)")
    e.add_argument("--target-fps", type=float, help="finn: frames per second to fold for (default: no folding, PE = SIMD = 1)")
    e.add_argument("--clock-mhz", type=float, help="finn: clock in MHz (default: 100)")
    e.add_argument("--top-k", type=int, help="finn: end the dataflow with a top-k label select")
    e.add_argument(
        "--integer-input",
        action="store_true",
        help="finn: the accelerator takes the input quantizer's integers (e.g. UINT8 pixels) instead of floats",
    )
    e.add_argument(
        "--folding",
        help="finn: a folding file (FINN's folding_config.json format; layers named as estimate.md names them): "
        "its entries' attributes are set on top of the folding for --target-fps",
    )
    e.add_argument(
        "--mvau-wwidth-max", type=int, help="finn: FINN's bound on SIMD x weight bits of a layer when folding (default: 36)"
    )
    e.add_argument("--io-type", choices=["io_parallel", "io_stream"], help="hls4ml: arrays or streams (default: io_parallel)")
    e.add_argument("--strategy", choices=["latency", "resource"], help="hls4ml: Latency or Resource (default: latency)")
    e.add_argument("--reuse-factor", type=int, help="hls4ml: times each multiplier is reused (default: 1)")
    _rebuild(e)
    _common(e)

    v = _add(sub, "verify", "execute an exported file and compare it with the checkpoint's model")
    v.add_argument("--checkpoint", required=True, help="checkpoint the file was exported from")
    v.add_argument("--onnx", required=True, help="QONNX or QDQ file")
    v.add_argument("--data", required=True, help="inputs (the first batch is compared)")
    v.add_argument("--tolerance-lsb", type=float, help="allowed difference in output LSBs (default: 0 for exact graphs, else 1)")
    _rebuild(v)
    _common(v)

    mix.add_parser(sub, _add, _common)
    search_parser.add_parser(sub, _add, _common)

    s = _add(sub, "support", "print the support matrix: formats, rules, export")
    s.add_argument("sections", nargs="*", metavar="SECTION", help="formats, rules or export (default: all)")
    _common(s, batch_size=False)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from quark.torch.extensions.brevitas.cli.output import Output

    output = Output(args)
    started = time.perf_counter()
    try:
        with output.active():
            from quark.torch.extensions.brevitas.cli import commands

            status, result = getattr(commands, args.command)(args)
    except KeyboardInterrupt:
        return _fail(args, "interrupted", INTERRUPTED, "interrupted", None)
    except Exception as error:  # noqa: BLE001  sorted below: the library's errors name the field and the fix
        status, what = _classify(error)
        message = str(error).strip() or type(error).__name__
        return _fail(args, message, status, what, error)
    if args.json:
        print(json.dumps({"command": args.command, "status": status, "seconds": round(time.perf_counter() - started, 3), **result}, default=str))
    return status


def _classify(error: BaseException) -> tuple[int, str]:
    """(exit status, word) of an error: the package's own carry theirs (a verification or a toolchain
    step that failed is 1, a refused input 2); of the others, a refused value 2, a failed run 1,
    anything else 3."""
    if isinstance(error, QuarkBrevitasError) and error.exit_status != INTERNAL:
        return error.exit_status, error.word
    if isinstance(error, (ValueError, TypeError, NotImplementedError, FileNotFoundError, ImportError)):
        return USAGE, "error"
    if isinstance(error, RuntimeError):
        return FAILED, "failed"
    return INTERNAL, f"unexpected {type(error).__name__}"


def _fail(args: argparse.Namespace, message: str, status: int, what: str, error: BaseException | None) -> int:
    if error is not None and args.debug:
        import traceback

        traceback.print_exception(error)
    line = f"quark-brevitas {args.command}: {what}: {one_line(message)}"
    if status == INTERNAL and not args.debug:
        line += " (rerun with --debug for the traceback)"
    print(line, file=sys.stderr)
    if args.json:
        print(json.dumps({"command": args.command, "status": status, "error": one_line(message)}))
    logging.shutdown()
    return status
