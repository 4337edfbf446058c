"""Binary and low-bit CNV on real 8x8 digits: this package's QAT against Brevitas' own bnn_pynq CNV.

Data: scikit-learn's 1,797 real 8x8 digits (``quark.torch.examples.digits.load(seed=0)``: 1,438
training and 359 held-out digits, the same split for every run), pixels in [0, 1], each pixel
repeated 4x4 (nearest upsampling) to the 32x32 that CNV's geometry needs: six unpadded 3x3
convolutions and two 2x2 max pools take 32 to 1.

Both networks are CNV-shaped at a quarter of bnn_pynq's widths (``WIDTH_DIVISOR``; the full CNV,
64-64-128-128-256-256 channels, takes about 16 times the compute, minutes per epoch on two cores):
convolutions 16-16, pool, 32-32, pool, 64-64, then fully connected 128-128-10. For each seed and
each of W1A1, W1A2, W2A2:

- ours: the float network (Conv2d without bias, BatchNorm2d, ReLU; Linear, BatchNorm1d, ReLU; the
  last Linear plain) trained in float for ``--float-epochs``, then quantized with
  ``presets.finn(weight_bits, act_bits, input_bits=8)`` (graph mode, as ``binary_tfc.py``) and
  trained for ``--epochs``;
- bnn_pynq: Brevitas' ``brevitas_examples.bnn_pynq.models.CNV.CNV`` (its own quantizers, 8-bit
  input, TensorNorm at the end, weights clipped to [-1, 1] after every step as its trainer does)
  built with its channel and feature constants divided by ``WIDTH_DIVISOR``, one input channel,
  trained for ``--epochs`` from its own initialisation.

The loop is ``binary_tfc.train`` (Adam at a constant ``--lr``, cross-entropy, batches of 100 in the
same seeded order, held-out accuracy after every epoch). Every seed is printed.

    .venv/bin/python benchmarks/binary_cnv.py [--seeds 0 1 2] [--epochs 10] [--float-epochs 10]
        [--lr 1e-2] [--qat-lr 1e-3] [--float-control] [--widths W1A1 W1A2 W2A2 W4A4 W8A2]
        [--per-channel-weights] [--batch-norm-float] [--freeze-batch-norm-steps N|none]

``--qat-lr`` sets ours' learning rate apart from bnn_pynq's (``--lr``): ours fine-tunes a trained
float network, bnn_pynq trains from its initialisation. ``--float-control`` adds a row: the trained
float network trained on, unquantized, at ours' rate. At 1e-2, ten times the rate it was trained at,
the float network falls from 98-99 % to 46-80 % in its first epoch and recovers through its batch
norm statistics; ours, with batch norm folded and its statistics frozen from the start (the
defaults), stays at chance (``logs/binary_cnv.txt``, docs/qat.md).

``--per-channel-weights``, ``--batch-norm-float`` and ``--freeze-batch-norm-steps`` change ours only
(``presets.finn``'s ``per_channel_weights=True``; ``TQTSpec(fold_batch_norm=False)``,
``TQTSpec(freeze_batch_norm_steps=...)``).
"""

from __future__ import annotations

import time
from unittest import mock

import torch
from binary_tfc import BINARY_WIDTHS, WIDTHS, print_table, qat_lr, train_all, training_arguments
from torch import nn

from quark.torch.examples import digits

WIDTH_DIVISOR = 4
UPSAMPLE = 4  # 8x8 -> 32x32


def digits_32(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The digits split, images 1x32x32 (each pixel repeated 4x4), labels."""
    data = digits.load(seed=seed)

    def images(x: torch.Tensor) -> torch.Tensor:
        return x.repeat_interleave(UPSAMPLE, dim=2).repeat_interleave(UPSAMPLE, dim=3)

    (x_train, y_train), (x_test, y_test) = data.train.tensors, data.test.tensors
    return images(x_train), y_train, images(x_test), y_test


def _cnv_constants():
    from brevitas_examples.bnn_pynq.models import CNV

    return {
        "CNV_OUT_CH_POOL": [(c // WIDTH_DIVISOR, pool) for c, pool in CNV.CNV_OUT_CH_POOL],
        "INTERMEDIATE_FC_FEATURES": [(i // WIDTH_DIVISOR, o // WIDTH_DIVISOR) for i, o in CNV.INTERMEDIATE_FC_FEATURES],
        "LAST_FC_IN_FEATURES": CNV.LAST_FC_IN_FEATURES // WIDTH_DIVISOR,
    }


def float_cnv() -> nn.Module:
    """bnn_pynq's CNV layout (divided widths) as a float network with ReLU."""
    constants = _cnv_constants()
    layers: list[nn.Module] = []
    channels = 1
    for out_channels, pool in constants["CNV_OUT_CH_POOL"]:
        layers += [nn.Conv2d(channels, out_channels, 3, bias=False), nn.BatchNorm2d(out_channels), nn.ReLU()]
        if pool:
            layers.append(nn.MaxPool2d(2))
        channels = out_channels
    layers.append(nn.Flatten())
    for in_features, out_features in constants["INTERMEDIATE_FC_FEATURES"]:
        layers += [nn.Linear(in_features, out_features, bias=False), nn.BatchNorm1d(out_features), nn.ReLU()]
    layers.append(nn.Linear(constants["LAST_FC_IN_FEATURES"], 10))
    return nn.Sequential(*layers)


def bnn_pynq_cnv(weight_bits: int, act_bits: int) -> nn.Module:
    from brevitas_examples.bnn_pynq.models import CNV

    with mock.patch.multiple(CNV, **_cnv_constants()):  # read by CNV.__init__ only
        return CNV.CNV(num_classes=10, weight_bit_width=weight_bits, act_bit_width=act_bits, in_bit_width=8, in_ch=1)


def run(args) -> None:
    data = digits_32()
    started = time.perf_counter()
    rows = train_all(data, args, float_cnv, bnn_pynq_cnv, args.widths)
    elapsed = time.perf_counter() - started
    steps = args.freeze_batch_norm_steps
    freeze = {"default": "", None: ", statistics never frozen by count"}.get(steps, f", frozen after {steps} steps")
    print(
        f"CNV / {WIDTH_DIVISOR} on scikit-learn digits repeated to 32x32 ({len(data[0])} train / {len(data[2])} held out); "
        f"Adam {args.schedule}, batch 100, {args.epochs} quantized epochs, lr {args.lr:g} (bnn_pynq), "
        f"{qat_lr(args):g} (ours, after {args.float_epochs} float epochs at lr {args.float_lr:g}); TQT: {args.tqt or 'off'}; weights: "
        f"{'per channel, scales from the weights' if args.per_channel_weights else 'per tensor'}; "
        f"batch norm {'float' if args.batch_norm_float else 'folded into TQT weights'}{freeze}; "
        f"{torch.get_num_threads()} thread(s); {elapsed:.0f} s"
    )
    print_table(rows, args.widths, args.seeds)


if __name__ == "__main__":
    parser = training_arguments(__doc__.splitlines()[0])
    parser.add_argument(
        "--qat-lr", type=float, default=1e-3,
        help="ours' learning rate for the quantized training, which starts from the trained float network "
        "(default: the float pre-training's 1e-3)",
    )  # fmt: skip
    parser.add_argument(
        "--float-control", action="store_true",
        help="also train the pre-trained float network on, unquantized, at ours' learning rate (a control row)",
    )  # fmt: skip
    parser.add_argument(
        "--per-channel-weights", action="store_true",
        help="ours: int2 / int4 weights with per-output-channel scales from the weights (presets.finn's option) "
        "instead of TQT-trained per-tensor thresholds",
    )  # fmt: skip
    parser.add_argument(
        "--batch-norm-float", action="store_true",
        help="ours: TQTSpec(fold_batch_norm=False), batch norm kept a float layer during QAT (the default folds it "
        "into the TQT weights with its statistics frozen from the start)",
    )  # fmt: skip
    parser.add_argument(
        "--freeze-batch-norm-steps", type=lambda v: v if v == "default" else None if v == "none" else int(v), default="default",
        help="ours: TQTSpec(freeze_batch_norm_steps=...), an integer or 'none' (default: the spec's, 0)",
    )  # fmt: skip
    parser.add_argument("--widths", nargs="+", default=BINARY_WIDTHS, choices=list(WIDTHS))
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    run(args)
