"""``quark-brevitas mix``: promote the fewest activation sites of a config from 8 to 16 bits until a
metric on evaluation data is met, and write the mixed config
(:func:`quark.torch.extensions.brevitas.mixing.mix`).

    quark-brevitas mix --config a8w8.yaml --model pkg.mod:factory --data calib.npz --eval-data eval.npz \\
        --metric cosine --target 0.995 -o mixed.yaml
"""

from __future__ import annotations

import argparse

from quark.torch.extensions.brevitas.cli.inputs import UsageError, load_config, load_data, load_model

#: exit statuses (as cli.commands): done, the target was not met, a usage error
OK, NOT_MET = 0, 1


def add_parser(sub: argparse._SubParsersAction, epilog: str, common) -> None:
    """Register ``mix`` in the command table (called by ``cli.parser``)."""
    m = sub.add_parser(
        "mix", help="promote the fewest activation sites to 16 bits until a metric is met (A8/A16 mixing)", epilog=epilog
    )
    m.add_argument("--config", required=True, help="base config (main API, 8-bit integer activations), .yaml or .json")
    m.add_argument("--model", required=True, help="module:factory returning the float model, or a transformers model directory")
    m.add_argument("--data", required=True, help="calibration data (.npz, .pt or a folder of images); also where sensitivities are measured")
    m.add_argument("--eval-data", required=True, help="evaluation data the metric is checked on")
    m.add_argument("--metric", choices=["cosine", "sqnr"], default="cosine", help="cosine (default) or sqnr (dB), against the float model")
    m.add_argument("--target", type=float, required=True, help="the metric to reach")
    m.add_argument("--no-prune", action="store_true", help="keep every site promoted on the way to the target")
    m.add_argument("-o", "--output", required=True, help="mixed config to write (.yaml or .json)")
    common(m)
    m.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from quark.torch.extensions.brevitas.mixing import mix
    from quark.torch.quantization.config.config import Config

    config = load_config(args.config, "quark")
    if not isinstance(config, Config):
        raise UsageError(f"--config {args.config}: mixing takes a main-API config")
    if not args.output.endswith((".yaml", ".yml", ".json")):
        raise UsageError(f"-o {args.output}: expected a .yaml, .yml or .json file")
    model = load_model(args.model)
    calib = load_data(args.data, args.batch_size)
    evaluation = load_data(args.eval_data, args.batch_size)
    result = mix(config, model, calib, evaluation, metric=args.metric, target=args.target, prune=not args.no_prune)
    result.config.save(args.output)
    print(result)
    print(f"\nwrote {args.output}")
    return OK if result.met else NOT_MET
