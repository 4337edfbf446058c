"""PTQ wall time side by side: this package against AMD Quark's own Brevitas extension, same client.

One client, written against AMD Quark's Brevitas extension exactly as Quark documents it
(``quark.torch.extensions.brevitas.config`` / ``.algos`` / ``.api``: a ``Config``, a classification
``DataLoader`` of ``(images, targets)``,
``ModelQuantizer(config).quantize_model(model, calib_loader)``), runs in two Python environments:

- **ours**: this interpreter (or ``--ours-python``) with this repository first on ``PYTHONPATH``;
- **AMD**: a virtual environment with AMD's ``amd-quark`` (default ``.venv-amd-quark/`` in the
  repository root, git-ignored), created here when missing: torch 2.13.0 (the CPU wheel on this
  machine: any other torch spec downloads a CUDA build), ``amd-quark`` with ``--no-deps`` and
  only what its extension imports (``AMD_PACKAGES`` below says which and why, and why amd-quark 0.13
  with Brevitas 0.13.4: the versions that run on torch 2.13).

The models are the vision classifiers of HuggingFace ``transformers`` (MobileNetV2, ResNet,
ConvNeXt, ViT, DeiT, ...) built from small random-init configs (no download), 3x32x32 inputs,
calibrated on fixed random images (same seed, same torch: the same weights and data in both).
Configs: the extension's W8A8 per tensor (float scales) and W8A8 per tensor with power-of-two
scales, both with ``pre_quant_opt_config=[]``: ``Preprocess()`` traces the model with plain torch.fx,
which transformers' models do not survive in either environment (``--configs "W8A8 per tensor,
Preprocess"`` shows both refusals), ``Backend.layerwise`` (AMD's extension has no other backend; ``--backend fx`` times
ours in graph mode and shows AMD's refusal). Each measurement is a fresh process (what a user
waits for: a script that builds a model and quantizes it), AMD and ours interleaved per cell so
that machine load hits both alike; threads pinned equal (``torch.set_num_threads``,
``OMP_NUM_THREADS``). Timed: ``quantize_model`` with calibration, the process's first call (the
compared figure: what a one-model script waits for), after a ``gc.collect()`` that settles the
garbage collector's debt from the imports and the model build (else a full collection lands in
whichever call next allocates enough: 0.14 s of ours' 0.33 s on ResNet, while AMD's 10-20 s import
pays its own; the collection is counted in import + first call) and a second call on a freshly built copy in the
same process (first-call costs paid); the model build from its config; the import of the extension
(both import Brevitas there; AMD's also imports most of its ``quark`` package). Reported per cell: medians over ``--runs``,
the ratio ours / AMD, the quantized output's relative error against float in each (so that the two
did comparable work), or the first line of the error where one failed.

    .venv/bin/python benchmarks/quark_ptq_time.py [--runs 3] [--threads 1] [--models NAME ...]
        [--configs NAME ...] [--backend layerwise|fx] [--amd-venv DIR] [--no-create] [--json PATH]

``benchmarks/run.py --only quark_ptq`` runs it too (opt-in, not in the default set); there, and here
with ``--no-create``, a missing AMD environment that cannot be created (no registry) is a skip with
its reason, not an error.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AMD_VENV = ROOT / ".venv-amd-quark"
AMD_QUARK = "0.13"

#: pip steps that make AMD's environment, each with why it is there (found by importing until it
#: worked on a fresh environment, with torch 2.13.0).
#: amd-quark 0.9 and 0.10 import ``torch.onnx._internal.jit_utils``, 0.11 to 0.11.2
#: ``torch.ao.quantization.pt2e``, both gone in torch 2.13 (0.9 and 0.11 measured failing; 0.12.post1
#: is the first release that guards the second). 0.13 is used: the newest, the one
#: ``COMPATIBILITY.md`` follows; its extension is 0.9's, reformatted, with Brevitas >= 0.12 support
#: in ``algos``. Its ``api`` asks for Brevitas 0.10.3 (a warning
#: otherwise), but Brevitas 0.10.3 to 0.12.1 call ``Tensor.rename``, gone in torch 2.13, in every
#: quantized layer's forward: 0.13.4, the one ours uses, is the Brevitas that runs.
AMD_PACKAGES: list[tuple[list[str], str]] = [
    (["torch==2.13.0"], "the CPU build on this machine, as in ours (any other spec fetches CUDA torch)"),
    (["--no-deps", f"amd-quark=={AMD_QUARK}"], "its declared deps (onnxruntime, evaluate, pandas, ...) go unused"),
    (["--no-deps", "brevitas==0.13.4", "unfoldNd==0.2.3", "dependencies==2.0.1"],
     "Brevitas as in ours, and its own imports (unfoldNd declares torch)"),
    (["numpy>=2.0", "packaging", "tqdm", "rich", "scipy", "psutil", "onnx==1.21.0", "onnxslim"],
     "imported by amd-quark's `quark` package on the way to the extension"),
    (["transformers==5.23.0"], "the model definitions, as in ours (amd-quark imports it at import time too)"),
]

#: name -> (transformers config class, its arguments, model class); small random-init models
MODELS: dict[str, tuple[str, dict, str]] = {
    "mobilenet_v2": ("MobileNetV2Config", {"image_size": 32, "depth_multiplier": 0.5}, "MobileNetV2ForImageClassification"),
    "resnet": (
        "ResNetConfig",
        {"embedding_size": 32, "hidden_sizes": [32, 64, 128, 256], "depths": [1, 1, 1, 1], "layer_type": "basic"},
        "ResNetForImageClassification",
    ),
    "convnext": (
        "ConvNextConfig",
        {"image_size": 32, "hidden_sizes": [24, 48, 96, 192], "depths": [1, 1, 2, 1]},
        "ConvNextForImageClassification",
    ),
    "vit": (
        "ViTConfig",
        {"image_size": 32, "patch_size": 4, "hidden_size": 96, "num_hidden_layers": 4, "num_attention_heads": 4,
         "intermediate_size": 192},
        "ViTForImageClassification",
    ),
    "deit": (
        "DeiTConfig",
        {"image_size": 32, "patch_size": 4, "hidden_size": 96, "num_hidden_layers": 4, "num_attention_heads": 4,
         "intermediate_size": 192},
        "DeiTForImageClassification",
    ),
}
#: name -> (power-of-two scales, Preprocess()); Preprocess (torch.fx tracing) fails on these models in
#: both environments (transformers' forward is not traceable by plain torch.fx): not in the default set
CONFIGS: dict[str, tuple[bool, bool]] = {
    "W8A8 per tensor": (False, False),
    "W8A8 per tensor pof2": (True, False),
    "W8A8 per tensor, Preprocess": (False, True),
}
DEFAULT_CONFIGS = ("W8A8 per tensor", "W8A8 per tensor pof2")
SHAPE, BATCH, BATCHES, SEED = (3, 32, 32), 16, 8, 0


# -- the client: runs in either environment, imports only torch, transformers and the extension ----


def _declare_missing_torchvision_ops() -> None:
    """transformers imports torchvision where installed; ours is a CUDA build whose C operators do
    not load beside the CPU torch (see ``quark.torch.examples.compat``, not importable in AMD's
    environment): declare the two operators its import registers, as that module does."""
    import importlib.util

    import torch

    if importlib.util.find_spec("torchvision") is None:
        return
    try:
        torch.ops.torchvision.nms  # noqa: B018
    except (AttributeError, RuntimeError):
        library = torch.library.Library("torchvision", "DEF")
        library.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        library.define("qnms(Tensor qdets, Tensor qscores, float iou_threshold) -> Tensor")
        _declare_missing_torchvision_ops.library = library  # keep it alive


def _logits(output):
    if hasattr(output, "logits"):
        return output.logits
    if isinstance(output, dict):
        return output["logits"]
    return output[0] if isinstance(output, (tuple, list)) else output


def client(model_name: str, config_name: str, backend: str, threads: int) -> dict:
    """Build, calibrate and quantize one model with the extension's documented API; timings in s."""
    import torch

    torch.set_num_threads(threads)
    _declare_missing_torchvision_ops()
    import transformers

    config_cls, config_kwargs, model_cls = MODELS[model_name]
    config_cls, model_cls = getattr(transformers, config_cls), getattr(transformers, model_cls)

    start = time.perf_counter()
    # --- AMD Quark Brevitas-extension code, as Quark's documentation writes it
    from quark.torch.extensions.brevitas.algos import Preprocess
    from quark.torch.extensions.brevitas.api import ModelQuantizer
    from quark.torch.extensions.brevitas.config import (
        Backend,
        Config,
        QuantizationConfig,
        QuantizationSpec,
    )
    from quark.torch.quantization.config.type import QSchemeType, ScaleType

    # ---
    import_s = time.perf_counter() - start

    torch.manual_seed(SEED)
    start = time.perf_counter()
    model = model_cls(config_cls(num_labels=10, **config_kwargs)).eval()
    build_s = time.perf_counter() - start

    generator = torch.Generator().manual_seed(SEED + 1)
    images = torch.randn(BATCHES * BATCH, *SHAPE, generator=generator)
    targets = torch.randint(0, 10, (BATCHES * BATCH,), generator=generator)
    calib_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(images, targets), batch_size=BATCH)
    probe = images[:BATCH]
    with torch.no_grad():
        reference = _logits(model(probe)).clone()  # before quantize_model: AMD's rewrites the model in place

    # Python's full garbage collection comes due after the imports and the model build: without this,
    # the first quantize_model that allocates enough pays it (measured: 0.14 s of ours' 0.33 s on
    # ResNet), wherever the environment's imports left the collector's counts
    start = time.perf_counter()
    gc.collect()
    collect_s = time.perf_counter() - start
    start = time.perf_counter()
    # --- AMD Quark Brevitas-extension code, as Quark's documentation writes it
    pof2, preprocess = CONFIGS[config_name]
    scale_type = ScaleType.pof2 if pof2 else ScaleType.float
    spec = QuantizationSpec(bit_width=8, qscheme=QSchemeType.per_tensor, symmetric=True, scale_type=scale_type)
    global_config = QuantizationConfig(input_tensors=spec, weight=spec)
    quant_config = Config(
        global_quant_config=global_config,
        pre_quant_opt_config=[Preprocess()] if preprocess else [],
        backend=getattr(Backend, backend),
    )
    quantizer = ModelQuantizer(quant_config)
    quant_model = quantizer.quantize_model(model, calib_loader)
    # ---
    quantize_s = time.perf_counter() - start

    with torch.no_grad():
        out = _logits(quant_model(probe))
    out, reference = out.double(), reference.double()  # float32 squares of MobileNetV2's ~1e-25 logits vanish
    rel_error = float((out - reference).norm() / reference.norm())

    torch.manual_seed(SEED)  # the same model again in the same process: first-call costs paid
    model = model_cls(config_cls(num_labels=10, **config_kwargs)).eval()
    gc.collect()
    start = time.perf_counter()
    ModelQuantizer(quant_config).quantize_model(model, calib_loader)
    second_s = time.perf_counter() - start
    return {
        "import_s": import_s,
        "import_and_quantize_s": import_s + collect_s + quantize_s,  # all the script waits for
        "build_s": build_s,
        "quantize_s": quantize_s,
        "second_s": second_s,
        "rel_error": rel_error,
    }


def versions() -> dict:
    """What this environment runs: torch, brevitas, quark (and where it was imported from)."""
    import importlib.metadata as md

    import torch

    _declare_missing_torchvision_ops()
    import brevitas
    import transformers

    import quark
    from quark.torch.extensions.brevitas.config import Backend

    def dist(*names: str) -> str:
        for name in names:
            try:
                return md.version(name)
            except md.PackageNotFoundError:
                continue
        return "?"

    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "brevitas": getattr(brevitas, "__version__", dist("brevitas")),
        "transformers": transformers.__version__,
        "quark": f"{dist('amd-quark') if 'site-packages' in quark.__file__ else 'this repository'}",
        "quark_path": str(Path(quark.__file__).parent),
        "backends": [b.name for b in Backend],
    }


def _client_main(argv: list[str]) -> None:
    """``--client MODEL CONFIG BACKEND THREADS`` or ``--versions``: one JSON line on stdout."""
    import logging
    import warnings

    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    if argv[0] == "--versions":
        print("JSON " + json.dumps(versions()), flush=True)
        return
    model_name, config_name, backend, threads = argv[1:5]
    print("JSON " + json.dumps(client(model_name, config_name, backend, int(threads))), flush=True)


# -- the parent: environments, interleaved runs, the table --------------------------------------


class Unavailable(RuntimeError):
    """AMD's environment is missing and cannot be made here (no registry, no venv module)."""


def amd_python(venv: Path, create: bool = True, log=print) -> Path:
    """The AMD environment's interpreter, the environment created first when missing."""
    python = venv / "bin" / "python"
    if python.exists() and (venv / ".complete").exists():
        return python
    if not create:
        raise Unavailable(f"{venv} does not exist (run benchmarks/quark_ptq_time.py without --no-create)")
    base = getattr(sys, "_base_executable", sys.executable)
    log(f"creating AMD Quark's environment in {venv} (downloads packages from the registry)")
    steps = [[base, "-m", "venv", str(venv)]] + [
        [str(python), "-m", "pip", "install", "-q", *args] for args, _ in AMD_PACKAGES
    ]
    for step in steps:
        log("  $ " + shlex.join(step))
        done = subprocess.run(step, check=False, capture_output=True, text=True)
        if done.returncode:
            lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
            raise Unavailable(f"`{shlex.join(step[-3:])}` failed: {lines[-1] if lines else done.returncode}")
    (venv / ".complete").write_text(json.dumps(AMD_PACKAGES))
    return python


def _run_client(python: Path, env: dict, args: list[str], timeout: float) -> dict:
    """One fresh process of this file in client mode; its JSON, or the first line of its error."""
    command = [str(python), str(Path(__file__).resolve()), *args]
    with tempfile.TemporaryDirectory() as cwd:  # neither repository on the path through the cwd
        try:
            done = subprocess.run(
                command, check=False, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout:.0f} s"}
    for line in done.stdout.splitlines():
        if line.startswith("JSON "):
            return json.loads(line[5:])
    return {"error": _first_error_line(done.stderr) or f"exit code {done.returncode}"}


def _first_error_line(stderr: str) -> str:
    """The exception line of a traceback (the last line that names an error), else the last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if not line.startswith(("File ", "^", "~")) and ("Error" in line.split(":")[0]
              or "Exception" in line.split(":")[0])]
    return (errors or lines or [""])[-1][:200]


def _environments(amd: Path, ours: Path, threads: int) -> dict[str, tuple[Path, dict]]:
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    base |= {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "PYTHONWARNINGS": "ignore"}
    base.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return {"AMD": (amd, dict(base)), "ours": (ours, base | {"PYTHONPATH": str(ROOT)})}


def measure(
    runs: int = 3,
    threads: int = 1,
    models: list[str] | None = None,
    configs: list[str] | None = None,
    backend: str = "layerwise",
    amd_venv: Path = AMD_VENV,
    ours_python: Path | None = None,
    create: bool = True,
    timeout: float = 900,
    log=print,
) -> dict:
    """Interleaved runs in both environments; per cell the medians, ratio ours / AMD, errors."""
    amd = amd_python(amd_venv, create, log)
    envs = _environments(amd, Path(ours_python or sys.executable), threads)
    meta = {
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "threads": threads,
        "runs": runs,
        "backend": backend,
        "load_average_start": os.getloadavg(),
        "cpus": os.cpu_count(),
        "versions": {name: _run_client(py, env, ["--versions"], timeout) for name, (py, env) in envs.items()},
    }
    cells = [(m, c) for m in models or list(MODELS) for c in configs or DEFAULT_CONFIGS]
    samples: dict[tuple[str, str], dict[str, list[dict]]] = {cell: {"AMD": [], "ours": []} for cell in cells}
    for run in range(runs):
        for cell in cells:
            for name, (python, env) in envs.items():  # AMD, then ours, for every cell of every run
                result = _run_client(python, env, ["--client", *cell, backend, str(threads)], timeout)
                samples[cell][name].append(result)
                what = result.get("error") or f"{result['quantize_s']:.2f} s"
                log(f"  run {run + 1}/{runs} {cell[0]:<13} {cell[1]:<21} {name:<4} {what}")
    meta["load_average_end"] = os.getloadavg()
    rows = [_row(model, config, samples[model, config]) for model, config in cells]
    return {"meta": meta, "rows": rows}


def _median(results: list[dict], key: str) -> float | None:
    values = [r[key] for r in results if key in r]
    return statistics.median(values) if values and len(values) == len(results) else None


def _row(model: str, config: str, by_env: dict[str, list[dict]]) -> dict:
    row = {"model": model, "config": config}
    for name, results in by_env.items():
        for key in ("quantize_s", "second_s", "import_and_quantize_s", "build_s", "import_s", "rel_error"):
            row[f"{name} {key}"] = _median(results, key)
        errors = [r["error"] for r in results if "error" in r]
        row[f"{name} error"] = errors[0] if errors else None
    ours, amd = row["ours quantize_s"], row["AMD quantize_s"]
    row["ratio"] = ours / amd if ours is not None and amd else None
    ours, amd = row["ours second_s"], row["AMD second_s"]
    row["second ratio"] = ours / amd if ours is not None and amd else None
    return row


def render(result: dict) -> str:
    """The header (command, versions, load) and the side-by-side table."""
    meta, lines = result["meta"], []
    lines.append(f"$ {meta['command']}")
    for name, v in meta["versions"].items():
        if "error" in v:
            lines.append(f"{name:<4}: cannot import: {v['error']}")
            continue
        lines.append(
            f"{name:<4}: python {v['python']}, torch {v['torch']}, brevitas {v['brevitas']}, transformers "
            f"{v['transformers']}, quark {v['quark']} ({v['quark_path']}), Backend: {', '.join(v['backends'])}"
        )
    lines.append(
        f"threads {meta['threads']}, median of {meta['runs']} fresh processes per cell (AMD and ours interleaved), "
        f"Backend.{meta['backend']}, {BATCHES} calibration batches of {BATCH}x{'x'.join(map(str, SHAPE))}; "
        f"load average {meta['load_average_start'][0]:.1f} -> {meta['load_average_end'][0]:.1f} on {meta['cpus']} CPUs"
    )
    headers = ("model", "config", "ours s", "AMD s", "ours/AMD", "2nd call ours/AMD s", "ratio",
               "import+1st ours/AMD s", "build s ours/AMD", "rel. error ours/AMD")
    table = []
    for r in result["rows"]:
        cells = [r["model"], r["config"], _s(r["ours quantize_s"]), _s(r["AMD quantize_s"])]
        cells.append("" if r["ratio"] is None else f"{r['ratio']:.2f}x")
        cells.append(f"{_s(r['ours second_s'])} / {_s(r['AMD second_s'])}")
        cells.append("" if r["second ratio"] is None else f"{r['second ratio']:.2f}x")
        cells.append(f"{_s(r['ours import_and_quantize_s'])} / {_s(r['AMD import_and_quantize_s'])}")
        cells.append(f"{_s(r['ours build_s'])} / {_s(r['AMD build_s'])}")
        cells.append(f"{_e(r['ours rel_error'])} / {_e(r['AMD rel_error'])}")
        table.append(cells)
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *table)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()
    lines += ["", line(headers), line("-" * w for w in widths), *map(line, table)]
    failures = [(r, name) for r in result["rows"] for name in ("ours", "AMD") if r[f"{name} error"]]
    if failures:
        lines.append("")
        lines += [f"{r['model']} {r['config']}, {name} failed: {r[f'{name} error']}" for r, name in failures]
    lines.append("")
    for key, what in (("ratio", "first quantize_model in a process"), ("second ratio", "second one, same process")):
        ratios = [r[key] for r in result["rows"] if r[key] is not None]
        if ratios:
            lines.append(f"ours / AMD, {what}: {min(ratios):.2f}x to {max(ratios):.2f}x "
                         f"(median {statistics.median(ratios):.2f}x) over {len(ratios)} cells both ran")
    imports = [(r["ours import_s"], r["AMD import_s"]) for r in result["rows"]]
    imports = [pair for pair in imports if None not in pair]
    if imports:
        lines.append(
            "import of the extension (median over cells): ours "
            f"{statistics.median(p[0] for p in imports):.2f} s, AMD {statistics.median(p[1] for p in imports):.2f} s"
        )
    return "\n".join(lines)


def _s(value: float | None) -> str:
    return "failed" if value is None else f"{value:.2f}"


def _e(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog="see the module docstring for what is timed and how"
    )
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per cell and environment (median)")
    parser.add_argument("--threads", type=int, default=1, help="torch / OpenMP threads in both environments")
    parser.add_argument("--models", nargs="+", choices=list(MODELS), metavar="NAME", help=f"of {', '.join(MODELS)}")
    parser.add_argument(
        "--configs", nargs="+", choices=list(CONFIGS), metavar="NAME",
        help=f"of {', '.join(map(repr, CONFIGS))} (default: the first two)",
    )
    parser.add_argument("--backend", choices=("layerwise", "fx"), default="layerwise",
                        help="the extension's Backend (AMD's has layerwise only)")
    parser.add_argument("--amd-venv", type=Path, default=AMD_VENV, help="AMD Quark's environment (created if missing)")
    parser.add_argument("--ours-python", type=Path, help="interpreter for ours (default: this one)")
    parser.add_argument("--no-create", action="store_true", help="skip instead of creating a missing AMD environment")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per client process")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)
    try:
        result = measure(args.runs, args.threads, args.models, args.configs, args.backend, args.amd_venv,
                         args.ours_python, not args.no_create, args.timeout, log)
    except Unavailable as e:
        print(f"skipped: AMD Quark's environment is not available: {e}")
        return {"skipped": str(e)}
    print(render(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("--client", "--versions"):
        _client_main(sys.argv[1:])
    else:
        main()
