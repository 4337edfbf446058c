"""``quark-brevitas``: the command line (also ``python -m quark.torch.extensions.brevitas``).

    quark-brevitas quantize --config cfg.yaml --model pkg.mod:factory --data calib.npz -o q.pt
    quark-brevitas train    --checkpoint q.pt --data-module pkg.mod:loaders --epochs 5 -o qat.pt
    quark-brevitas export   --checkpoint qat.pt --format qonnx --data calib.npz -o model.onnx
    quark-brevitas verify   --checkpoint qat.pt --onnx model.onnx --data calib.npz
    quark-brevitas mix      --config a8w8.yaml --model pkg.mod:factory --data calib.npz --eval-data eval.npz --target 0.995 -o mixed.yaml
    quark-brevitas support

Exit status: 0 done; 1 a verification failed; 2 a mistake in the command line or its files
(reported in one line); 3 an unexpected error (rerun with --verbose for the traceback);
130 interrupted.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from quark.torch.extensions.brevitas.cli import commands, mix
from quark.torch.extensions.brevitas.cli.inputs import UsageError

INTERNAL, INTERRUPTED = 3, 130

EPILOG = """exit status: 0 done, 1 verification failed, 2 usage or input error, 3 unexpected error
(rerun with --verbose), 130 interrupted"""


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batch-size", type=int, default=32, help="batch size of --data (default 32)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress and show tracebacks")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="quark-brevitas",
        description="Quantize PyTorch models with AMD Quark configs on Brevitas; export to QONNX (FINN) and QDQ (ONNX Runtime / AMD NPU).",
        epilog=EPILOG,
    )
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    q = sub.add_parser("quantize", help="quantize (and calibrate) a model with a config", epilog=EPILOG)
    q.add_argument("--config", required=True, help="Quark config, .yaml or .json (main API or the Brevitas extension's)")
    q.add_argument("--flavour", choices=["auto", "quark", "brevitas"], default="auto", help="config flavour (default: from the file)")
    q.add_argument("--model", required=True, help="module:factory returning the float model, or a transformers model directory")
    q.add_argument("--data", help="calibration data: .npz, .pt or a folder of images (needed for static activations)")
    q.add_argument("--num-batches", type=int, help="use at most this many calibration batches")
    q.add_argument("-o", "--output", required=True, help="checkpoint to write (.pt)")
    _common(q)
    q.set_defaults(run=commands.quantize)

    t = sub.add_parser("train", help="quantization-aware training of a checkpoint", epilog=EPILOG)
    t.add_argument("--checkpoint", required=True, help="checkpoint from quantize (or train)")
    t.add_argument("--data-module", required=True, help="module:function returning (train_batches, eval_batches) of (inputs, labels)")
    t.add_argument("--epochs", type=int, default=1)
    t.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate (default 1e-3)")
    t.add_argument("--freeze", action="store_true", help="fix every quantization parameter at the end (for deployment)")
    t.add_argument("-o", "--output", required=True, help="checkpoint to write (.pt)")
    _common(t)
    t.set_defaults(run=commands.train)

    e = sub.add_parser("export", help="export a checkpoint (QONNX, QDQ or a FINN dataflow directory), verified", epilog=EPILOG)
    e.add_argument("--checkpoint", required=True)
    e.add_argument("--format", choices=["qonnx", "qdq", "finn"], required=True, help="qonnx: for FINN; qdq: ONNX Runtime / AMD NPU; finn: FINN dataflow directory")
    e.add_argument("--data", required=True, help="example inputs (the first batch is exported and verified)")
    e.add_argument("-o", "--output", required=True, help=".onnx file (qonnx, qdq) or directory (finn)")
    e.add_argument("--part", default="xc7z020clg400-1", help="finn: FPGA part or board (default Pynq-Z1's xc7z020clg400-1)")
    e.add_argument("--target-fps", type=float, help="finn: frames per second to fold for")
    e.add_argument("--clock-mhz", type=float, default=100.0, help="finn: clock (default 100 MHz)")
    e.add_argument("--top-k", type=int, help="finn: end the dataflow with a top-k label select")
    e.add_argument(
        "--integer-input",
        action="store_true",
        help="finn: the accelerator takes the input quantizer's integers (e.g. UINT8 pixels) instead of floats",
    )
    _common(e)
    e.set_defaults(run=commands.export)

    v = sub.add_parser("verify", help="execute an exported file and compare it with the checkpoint's model", epilog=EPILOG)
    v.add_argument("--checkpoint", required=True)
    v.add_argument("--onnx", required=True, help="QONNX or QDQ file")
    v.add_argument("--data", required=True, help="inputs (the first batch is compared)")
    v.add_argument("--tolerance-lsb", type=float, help="allowed difference in output LSBs (default 0 for exact graphs, else 1)")
    _common(v)
    v.set_defaults(run=commands.verify)

    mix.add_parser(sub, EPILOG, _common)

    s = sub.add_parser("support", help="print the support matrix: formats, rules, export", epilog=EPILOG)
    s.add_argument("sections", nargs="*", metavar="SECTION", help="formats, rules or export (default: all)")
    s.add_argument("-v", "--verbose", action="store_true")
    s.set_defaults(run=commands.support)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.run(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return INTERRUPTED
    except UsageError as error:
        return _fail(args, error, commands.USAGE, "error")
    except (ValueError, TypeError, NotImplementedError, FileNotFoundError, ImportError) as error:
        return _fail(args, error, commands.USAGE, "error")  # the library's errors name the field and the fix
    except RuntimeError as error:  # verification failures, a FINN step, ...
        return _fail(args, error, commands.FAILED, "failed")
    except Exception as error:  # noqa: BLE001  an unexpected error: one line, the traceback on request
        return _fail(args, error, INTERNAL, f"unexpected {type(error).__name__}")


def _fail(args: argparse.Namespace, error: BaseException, status: int, what: str) -> int:
    if args.verbose:
        import traceback

        traceback.print_exception(error)
    message = str(error).strip() or type(error).__name__
    first, _, rest = message.partition("\n")
    print(f"quark-brevitas {args.command}: {what}: {first}", file=sys.stderr)
    if rest:
        print(rest, file=sys.stderr)  # the library's multi-line errors list one problem per line
    if not args.verbose and status == INTERNAL:
        print("rerun with --verbose for the traceback", file=sys.stderr)
    return status
