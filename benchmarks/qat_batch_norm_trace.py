"""Diagnosis of ``qat_batch_norm.py``'s runs: the same loop, traced step by step, with ablations.

Per run: held-out accuracy after PTQ and every epoch (as ``qat_batch_norm.py``), and with
``--trace``: the 4-bit weight codes that changed per layer over the run, the largest relative drift
of each folded gamma, the standard deviation and mean of the held-out accuracy measured after every
step (``--trace 2`` prints every step, with the power-of-two exponents ceil(log2 t) that changed).
``--ablate`` stops parameters from training (``requires_grad`` False before the optimizer sees them):
``thr`` every TQT threshold, ``athr`` / ``wthr`` those of activations / weights, ``bn`` gamma and beta,
``gamma``, ``beta``, ``w`` weights and biases, ``float`` trains the float model instead; ``--merge``
merges batch norm before quantization (``MergeBatchNorm``). Used for docs/qat.md's diagnosis
("Batch norm kept during QAT"); log ``benchmarks/logs/qat_batch_norm_trace.txt``.

    .venv/bin/python benchmarks/qat_batch_norm_trace.py --seeds 0 1 2 --mode fold@0-raw --trace 1 [--ablate gamma] [--merge]
"""

from __future__ import annotations

import argparse
import copy

import torch
from qat_batch_norm import LR, ModelQuantizer, config, trained
from torch import nn

from quark.torch.examples import digits
from quark.torch.quantization.config.algorithms import MergeBatchNorm


def codes(model: nn.Module) -> dict[str, torch.Tensor]:
    """Layer name -> the integer codes of its quantized weight."""
    out = {}
    for name, module in model.named_modules():
        if hasattr(module, "weight_quant") and hasattr(module, "quant_weight"):
            qw = module.quant_weight()
            out[name] = (qw.value / qw.scale).round().to(torch.int8)
    return out


def exponents(model: nn.Module) -> dict[str, int]:
    return {n: int(torch.ceil(p.detach())) for n, p in model.named_parameters() if "scaling_impl.value" in n}


def ablated(name: str, ablate: list[str]) -> bool:
    threshold = "scaling_impl.value" in name
    return (
        ("thr" in ablate and threshold)
        or ("athr" in ablate and threshold and "input_quant" in name)
        or ("wthr" in ablate and threshold and "weight_quant" in name)
        or ("bn" in ablate and ".bn." in name)
        or ("gamma" in ablate and name.endswith(".bn.weight"))
        or ("beta" in ablate and name.endswith(".bn.bias"))
        or ("w" in ablate and not threshold and ".bn." not in name)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--init", default="_3SD", choices=["_3SD", "_LL_J"])
    parser.add_argument("--mode", default="fold@0", help="as qat_batch_norm.py's --modes")
    parser.add_argument("--ablate", nargs="*", default=[], help="thr athr wthr bn gamma beta w float")
    parser.add_argument("--graph", action="store_true")
    parser.add_argument("--trace", type=int, default=0, help="1: totals per run; 2: every step")
    parser.add_argument("--merge", action="store_true", help="MergeBatchNorm before quantization")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for seed in args.seeds:
        model, data = trained("digits", seed, 30)
        float_acc = digits.accuracy(model, data)
        if "float" in args.ablate:
            qmodel = copy.deepcopy(model)
        else:
            cfg = config(args.init, args.mode, args.graph)
            if args.merge:
                cfg.pre_quant_opt_config = [MergeBatchNorm()]
            calib = data.loader("train", batch_size=64)
            qmodel = ModelQuantizer(cfg).quantize_model(copy.deepcopy(model), calib, progress=False)
        for name, param in qmodel.named_parameters():
            if ablated(name, args.ablate):
                param.requires_grad_(False)
        acc = [digits.accuracy(qmodel, data)]
        gammas = {n: p.detach().clone() for n, p in qmodel.named_parameters() if n.endswith(".bn.weight")}
        torch.manual_seed(seed)  # digits.train's loop, traced
        optimizer = torch.optim.Adam(qmodel.parameters(), lr=LR)
        last_codes = codes(qmodel) if "float" not in args.ablate else {}
        last_exponents, changed, per_step, step = exponents(qmodel), {}, [], 0
        for _ in range(6):
            qmodel.train()
            for x, y in data.loader("train", shuffle=True, seed=seed):
                optimizer.zero_grad()
                nn.functional.cross_entropy(qmodel(x), y).backward()
                optimizer.step()
                step += 1
                if args.trace:
                    with torch.no_grad():
                        now, exps = (codes(qmodel) if "float" not in args.ablate else {}), exponents(qmodel)
                    flips = {n: int((now[n] != last_codes[n]).sum()) for n in now}
                    for n, k in flips.items():
                        changed[n] = changed.get(n, 0) + k
                    per_step.append(digits.accuracy(qmodel, data))
                    if args.trace > 1:
                        moved = {n: e - last_exponents[n] for n, e in exps.items() if e != last_exponents[n]}
                        print(f"  step {step:3d} acc {per_step[-1]:6.2f} codes changed {flips} {moved or ''}")
                    last_codes, last_exponents = now, exps
            acc.append(digits.accuracy(qmodel, data))
        if args.trace:
            drift = {
                n: round(float(((p.detach() - gammas[n]).abs() / gammas[n].abs()).max()), 3)
                for n, p in qmodel.named_parameters()
                if n in gammas
            }
            steps = torch.tensor(per_step)
            print(
                f"  codes changed {changed} gamma drift {drift} per-step accuracy sd {steps.std().item():.3f} "
                f"mean {steps.mean().item():.2f}"
            )
        worst, end = min(acc[1:]) - float_acc, acc[-1] - float_acc
        ok = worst >= -3 and end >= -1
        what = f"{args.mode}{'+merge' if args.merge else ''} {'+'.join(args.ablate) or '-'}"
        print(
            f"{args.init} {what} seed {seed:2d} float {float_acc:6.2f} "
            + " ".join(f"{a:6.2f}" for a in acc)
            + f"  worst {worst:+.2f} end {end:+.2f} {'yes' if ok else 'NO'}",
            flush=True,
        )


if __name__ == "__main__":
    main()
