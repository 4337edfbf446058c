"""Why W4A4 TQT QAT of the digits CNN swings from epoch to epoch: one candidate cause per variant.

Baseline (issue 9): main-API config, int4 weights and *signed* int4 layer inputs, power-of-two
TQT thresholds initialised by ``_3SD``, batch norm kept as a float layer in train mode, no
pre-processing, one Adam (lr 1e-3) over every parameter, thresholds included, 6 epochs; the loop is
``digits.train``'s (same shuffling). Each other variant changes one thing (see ``VARIANTS``;
``--bits 2`` makes every int4 / uint4 int2 / uint2, names unchanged). Per run it prints the
held-out accuracy after PTQ and after each epoch, the same weights with batch-norm statistics
re-estimated, the held-out loss, the accuracy range over each epoch's steps, how often a
quantizer's power of two ceil(log2 t) changed and how many weight codes changed; then a summary:
swing (max - min over the last ``--tail`` epochs), the per-step standard deviation over those
epochs, the end accuracy against the start and float, and the mean held-out accuracy jump at
steps where a power of two changed against all other steps. Results: ``benchmarks/logs/``.

    .venv/bin/python benchmarks/qat_stability.py [--seeds 0 1 2] [--epochs 6] [--bits 4] [--variants ...]
"""

from __future__ import annotations

import argparse
import copy
import statistics
from dataclasses import dataclass, field, replace

import torch
from brevitas.core.scaling.standalone import ParameterScaling
from torch import nn

from quark.torch.examples import digits
from quark.torch.extensions.brevitas.algos import Preprocess
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec, TQTSpec
from quark.torch.quantization.config.type import Dtype, ScaleType, TQTThresholdInitMeth

LR = 1e-3


@dataclass(frozen=True)
class Variant:
    """One QAT set-up; the defaults are the issue's baseline."""

    doc: str
    quantize: bool = True
    roles: tuple[str, ...] = ("weight", "input_tensors")  # the tensors quantized
    act_signed: bool = True  # signed layer inputs, as in the issue; False: unsigned (all are >= 0)
    merge_bn: bool = False  # Preprocess: batch norm merged into the convs before quantization
    bn_eval: bool = False  # batch norm kept but in eval mode during QAT: frozen running statistics
    bn_recalibrate: bool = False  # running statistics re-estimated on the quantized model before QAT
    threshold_lr: float | None = LR  # None: thresholds frozen
    threshold_opt: str = "adam"  # "adam" (the weights' optimizer, own lr) or "sgd" (separate plain SGD)
    weight_lr: float = LR
    weight_decay: float = 0.0  # > 0: AdamW with this decay instead of Adam
    decay_thresholds: bool = True  # with weight_decay: thresholds decay too (one group for all)


BASE = Variant("issue 9: int4 weights, signed int4 inputs, BN kept (train mode), Adam 1e-3 on all")
VARIANTS: dict[str, Variant] = {
    "float": replace(BASE, doc="float fine-tune, same loop", quantize=False),
    "baseline": BASE,
    # (a) batch norm statistics under fake quantization
    "bn_eval": replace(
        BASE, doc="(a) BN in eval mode during QAT (running stats frozen, affine trained)", bn_eval=True
    ),
    "bn_merged": replace(
        BASE, doc="(a) BN merged into the convs before quantization (Preprocess)", merge_bn=True
    ),
    "bn_calib_frozen": replace(
        BASE,
        doc="(a) BN statistics re-estimated on the quantized model after PTQ, then frozen during QAT",
        bn_eval=True,
        bn_recalibrate=True,
    ),
    # (b) thresholds trained by Adam
    "thr_frozen": replace(BASE, doc="(b) thresholds frozen at their PTQ values", threshold_lr=None),
    "thr_lr_1e-4": replace(BASE, doc="(b) thresholds in their own Adam group, lr 1e-4", threshold_lr=1e-4),
    "thr_sgd_1e-3": replace(BASE, doc="(b) thresholds by plain SGD, lr 1e-3", threshold_opt="sgd"),
    # (c) signed inputs after ReLU / on the [0, 1] image
    "uint4_inputs": replace(
        BASE, doc="(c) unsigned int4 layer inputs (all are non-negative)", act_signed=False
    ),
    # (d) others
    "weight_lr_1e-4": replace(
        BASE, doc="(d) lr 1e-4 for weights and thresholds", weight_lr=1e-4, threshold_lr=1e-4
    ),
    "adamw": replace(BASE, doc="(d) AdamW, torch's default decay 0.01 on every parameter", weight_decay=0.01),
    "adamw_thr_no_decay": replace(
        BASE, doc="(b)+(d) AdamW 0.01, thresholds without decay", weight_decay=0.01, decay_thresholds=False
    ),
    "weights_only": replace(BASE, doc="(d) int4 weights only, layer inputs float", roles=("weight",)),
    "inputs_only": replace(
        BASE, doc="(d) signed int4 layer inputs only, weights float", roles=("input_tensors",)
    ),
    # combinations
    "bn_eval+uint4": replace(BASE, doc="(a)+(c)", bn_eval=True, act_signed=False),
    "bn_eval+thr_frozen": replace(BASE, doc="(a)+(b)", bn_eval=True, threshold_lr=None),
    "bn_calib_frozen+uint4": replace(
        BASE, doc="(a)+(c)", bn_eval=True, bn_recalibrate=True, act_signed=False
    ),
    "bn_merged+uint4": replace(
        BASE, doc="README's recipe: BN merged, unsigned inputs", merge_bn=True, act_signed=False
    ),
}


SIGNED = {2: Dtype.int2, 3: Dtype.int3, 4: Dtype.int4, 8: Dtype.int8}
UNSIGNED = {2: Dtype.uint2, 3: Dtype.uint3, 4: Dtype.uint4, 8: Dtype.uint8}


def config(variant: Variant, bits: int = 4) -> Config:
    def tqt(dtype: Dtype) -> QuantizationSpec:
        return QuantizationSpec(
            dtype=dtype,
            symmetric=True,
            scale_type=ScaleType.pof2,
            qat_spec=TQTSpec(TQTThresholdInitMeth._3SD),
        )

    specs = {
        "weight": tqt(SIGNED[bits]),
        "input_tensors": tqt((SIGNED if variant.act_signed else UNSIGNED)[bits]),
    }
    return Config(
        global_quant_config=QuantizationConfig(**{role: specs[role] for role in variant.roles}),
        pre_quant_opt_config=[Preprocess(equalize_iterations=0)] if variant.merge_bn else [],
    )


def thresholds(model: nn.Module) -> dict[str, nn.Parameter]:
    """Learned log2 thresholds (Brevitas ``ParameterScaling.value``; every quantizer here is TQT)."""
    return {name: m.value for name, m in model.named_modules() if isinstance(m, ParameterScaling)}


def exponents(model: nn.Module) -> torch.Tensor:
    """ceil(log2 t) of every quantizer, as used in the forward pass."""
    return torch.stack([torch.ceil(v.detach()).reshape(()) for v in thresholds(model).values()])


def optimizers(model: nn.Module, variant: Variant) -> list[torch.optim.Optimizer]:
    thr = list(thresholds(model).values())
    thr_ids = {id(p) for p in thr}
    others = [p for p in model.parameters() if id(p) not in thr_ids]
    if variant.threshold_lr is None:
        for p in thr:
            p.requires_grad_(False)
        return [torch.optim.Adam(others, lr=variant.weight_lr)]
    if variant.threshold_opt == "sgd":
        return [torch.optim.Adam(others, lr=variant.weight_lr), torch.optim.SGD(thr, lr=variant.threshold_lr)]
    thr_decay = variant.weight_decay if variant.decay_thresholds else 0.0
    groups = [
        {"params": others, "lr": variant.weight_lr, "weight_decay": variant.weight_decay},
        {"params": thr, "lr": variant.threshold_lr, "weight_decay": thr_decay},
    ]
    return [torch.optim.AdamW(groups) if variant.weight_decay else torch.optim.Adam(groups)]


def set_train_mode(model: nn.Module, variant: Variant) -> None:
    model.train()
    if variant.bn_eval:
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.eval()


def weight_codes(model: nn.Module) -> torch.Tensor:
    """Integer codes of every quantized weight, concatenated."""
    layers = [m for m in model.modules() if hasattr(m, "weight_quant") and m.weight_quant.is_quant_enabled]
    return torch.cat(
        [torch.zeros(0, dtype=torch.int8)] + [m.quant_weight().int().reshape(-1) for m in layers]
    )


@torch.no_grad()
def reestimate_bn(model: nn.Module, data: digits.DigitsData) -> None:
    """Batch-norm running statistics recomputed over the training split with the current weights."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    was_training = model.training
    model.train()
    for bn in norms:
        bn.reset_running_stats()
        bn.momentum = None  # cumulative average over the pass
    for x, _ in data.loader("train", batch_size=64):
        model(x)
    for bn in norms:
        bn.momentum = 0.1
    model.train(was_training)


@torch.no_grad()
def held_out_loss(model: nn.Module, data: digits.DigitsData) -> float:
    was_training = model.training
    model.eval()
    x, y = data.test.tensors
    loss = float(nn.functional.cross_entropy(model(x), y))
    model.train(was_training)
    return loss


def has_batch_norm(model: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


@dataclass
class Run:
    """Held-out measurements of one QAT run; per-epoch lists start with the PTQ (or float) model."""

    acc: list[float]  # accuracy after each epoch
    loss: list[float]  # cross-entropy after each epoch
    acc_bn: list[float] = field(default_factory=list)  # same weights, batch-norm statistics re-estimated
    flips: list[int] = field(default_factory=list)  # steps x quantizers where ceil(log2 t) changed
    code_step: list[float] = field(default_factory=list)  # mean fraction of weight codes changed per step
    code_net: list[float] = field(default_factory=list)  # fraction of codes changed over the epoch
    step_acc: dict[int, float] = field(default_factory=dict)  # step -> accuracy, steps of the last epochs
    epoch_steps: list[list[int]] = field(default_factory=list)  # the steps of each epoch
    flip_steps: list[int] = field(default_factory=list)  # global indices of steps with a threshold flip


def run(
    model: nn.Module,
    data: digits.DigitsData,
    variant: Variant,
    epochs: int,
    seed: int,
    bits: int = 4,
    tail: int = 4,
) -> Run:
    """``digits.train``'s loop (same seeds, same shuffling), measured after every step and epoch."""
    if variant.quantize:
        calib = data.loader("train", batch_size=64)
        model = ModelQuantizer(config(variant, bits)).quantize_model(model, calib, progress=False)
    if variant.bn_recalibrate:
        reestimate_bn(model, data)
    result = Run([digits.accuracy(model, data)], [held_out_loss(model, data)])
    torch.manual_seed(seed)
    opts = optimizers(model, variant)
    set_train_mode(model, variant)
    step = 0
    for epoch in range(epochs):
        exps = exponents(model) if variant.quantize else torch.zeros(1)
        codes = first = weight_codes(model) if variant.quantize else torch.zeros(1)
        flips, changed, first_step = 0, [], step + 1
        for x, y in data.loader("train", shuffle=True, seed=seed):
            for opt in opts:
                opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            for opt in opts:
                opt.step()
            step += 1
            if variant.quantize:
                new_exps, new_codes = exponents(model), weight_codes(model)
                if (new_exps != exps).any():
                    flips += int((new_exps != exps).sum())
                    result.flip_steps.append(step)
                changed.append(float((new_codes != codes).float().mean()) if len(codes) else 0.0)
                exps, codes = new_exps, new_codes
            if epoch >= epochs - tail:
                result.step_acc[step] = digits.accuracy(model, data)
        result.epoch_steps.append(list(range(first_step, step + 1)))
        result.acc.append(result.step_acc[step] if step in result.step_acc else digits.accuracy(model, data))
        result.loss.append(held_out_loss(model, data))
        if has_batch_norm(model) and not variant.bn_eval:
            probe = copy.deepcopy(model)  # a copy: the run's own trajectory is left as it is
            reestimate_bn(probe, data)
            result.acc_bn.append(digits.accuracy(probe, data))
        result.flips.append(flips)
        if variant.quantize:
            result.code_step.append(statistics.fmean(changed))
            result.code_net.append(float((codes != first).float().mean()) if len(codes) else 0.0)
    return result


def _row(label: str, values: list[float], fmt: str = ".2f") -> str:
    return f"  {label:<13}" + "".join(f"{v:>7{fmt}}" for v in values)


@dataclass
class Stats:
    """One run reduced to the figures the summary compares."""

    swing: float  # max - min of the per-epoch accuracy over the last epochs
    step_std: float  # standard deviation of the per-step accuracy over the same epochs
    end: float
    end_start: float
    end_float: float
    jumps_at_flips: list[float]  # |accuracy change| at steps where a threshold's power of two changed
    jumps_else: list[float]


def reduce(r: Run, float_acc: float, tail: int) -> Stats:
    jumps = {s: abs(a - r.step_acc[s - 1]) for s, a in r.step_acc.items() if s - 1 in r.step_acc}
    return Stats(
        swing=max(r.acc[-tail:]) - min(r.acc[-tail:]),
        step_std=statistics.pstdev(r.step_acc.values()),
        end=r.acc[-1],
        end_start=r.acc[-1] - r.acc[0],
        end_float=r.acc[-1] - float_acc,
        jumps_at_flips=[j for s, j in jumps.items() if s in r.flip_steps],
        jumps_else=[j for s, j in jumps.items() if s not in r.flip_steps],
    )


def print_run(seed: int, float_acc: float, r: Run, st: Stats, epochs: int) -> None:
    print(
        f"seed {seed}: float {float_acc:.2f}, swing {st.swing:.2f}, per-step std {st.step_std:.2f}, "
        f"end - start {st.end_start:+.2f}, end - float {st.end_float:+.2f}"
    )
    nan = float("nan")
    print(f"  {'':<13}{'start':>7}" + "".join(f"{f'ep{e + 1}':>7}" for e in range(epochs)))
    print(_row("accuracy", r.acc))
    if r.acc_bn:
        print(_row("BN re-est.", [nan] + r.acc_bn))
    print(_row("loss", r.loss, ".3f"))
    per_epoch = [[r.step_acc[s] for s in steps if s in r.step_acc] for steps in r.epoch_steps]
    print(_row("step min", [nan] + [min(a, default=nan) for a in per_epoch]))
    print(_row("step max", [nan] + [max(a, default=nan) for a in per_epoch]))
    if r.code_step:
        print(_row("t flips", [nan] + r.flips, ".0f"))
        print(_row("codes %/step", [nan] + [100 * c for c in r.code_step], ".3f"))
        print(_row("codes % net", [nan] + [100 * c for c in r.code_net], ".3f"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--tail", type=int, default=4, help="epochs over which the swing is measured")
    parser.add_argument("--bits", type=int, default=4, choices=sorted(SIGNED), help="weight and input bits")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--quiet", action="store_true", help="summary table only")
    args = parser.parse_args()
    torch.set_num_threads(1)

    floats = {seed: digits.trained_cnn(seed) for seed in args.seeds}
    print(
        f"digits CNN, W{args.bits}A{args.bits} TQT _3SD, {args.epochs} QAT epochs, seeds {args.seeds}, 1 thread"
    )
    print(
        f"swing: max - min of the held-out accuracy after each of the last {args.tail} epochs; per-step std:"
    )
    print("its standard deviation over every optimizer step of those epochs. Per seed: held-out accuracy")
    print("(start: PTQ or float), the same weights with batch-norm statistics re-estimated on the training")
    print("split, held-out cross-entropy, min and max accuracy over the epoch's steps, steps x quantizers")
    print("where ceil(log2 t) changed, % of weight codes changed per step (mean) and over the epoch.")
    summary: dict[str, list[Stats]] = {}
    for name in args.variants:
        variant = VARIANTS[name]
        if not args.quiet:
            print(f"\n== {name}: {variant.doc}")
        for seed in args.seeds:
            model, data = floats[seed]
            float_acc = digits.accuracy(model, data)
            r = run(copy.deepcopy(model), data, variant, args.epochs, seed, args.bits, args.tail)
            st = reduce(r, float_acc, args.tail)
            summary.setdefault(name, []).append(st)
            if not args.quiet:
                print_run(seed, float_acc, r, st, args.epochs)
                print(flush=True)
    med = statistics.median
    print(f"\nover seeds {args.seeds}: median (worst)")
    print(
        f"{'variant':<20}{'swing':>14}{'per-step std':>14}{'end':>14}{'end - start':>15}{'end - float':>15}"
        f"{'|jump| at t flip / else':>26}"
    )
    for name, stats in summary.items():

        def col(values: list[float], worst) -> str:
            return f"{med(values):.2f} ({worst(values):.2f})"

        at_flips = [j for st in stats for j in st.jumps_at_flips]
        other = [j for st in stats for j in st.jumps_else]
        flips = f"{statistics.fmean(at_flips):.2f} [{len(at_flips)}]" if at_flips else "- [0]"
        print(
            f"{name:<20}{col([s.swing for s in stats], max):>14}{col([s.step_std for s in stats], max):>14}"
            f"{col([s.end for s in stats], min):>14}{col([s.end_start for s in stats], min):>15}"
            f"{col([s.end_float for s in stats], min):>15}{flips + f' / {statistics.fmean(other):.2f}':>26}"
        )


if __name__ == "__main__":
    main()
