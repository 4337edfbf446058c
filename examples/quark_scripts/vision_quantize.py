"""AMD Quark's image-classification flow (its ``examples/torch/vision/quantize.py`` and the page
``example_quark_fx_image_classification``), written for this package: every quantization call is the
one Quark's example makes, with Quark's names, flags and file names; the data and the training loop
are this script's own.

The model is torchvision's ResNet-18 (10 classes, randomly initialised, then trained for
``--float_epochs`` on the digits); the data is scikit-learn's 1,797 real handwritten digits, upsampled
from 8x8 to 32x32 and repeated to three channels. The flags are Quark's: ``--a8w8``, ``--a16w8``,
``--non_overflow``, ``--mse_powof2``, ``--qat --tqt``, ``--qat --lsq``, none (int8 everywhere);
``--model_export onnx torch_save`` writes ``quark_model.onnx`` (verified in ONNX Runtime) and
``resnet18_quantized.pth`` (``save_params``) into ``--export_dir``, and checks that ``load_params``
restores the model bit for bit.

    python examples/quark_scripts/vision_quantize.py --a8w8 --model_export onnx torch_save --export_dir out
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from quark.torch.examples.compat import declare_missing_torchvision_ops

declare_missing_torchvision_ops()  # the registry's torchvision is a CUDA build: declare its two C ops first

# --- the imports of AMD Quark's example, unchanged
from quark.common.utils.import_utils import export_for_training
from quark.common.utils.log import ScreenLogger
from quark.torch import ModelQuantizer, export_onnx
from quark.torch.quantization.config.config import QConfig, QLayerConfig, QTensorConfig, TQTSpec
from quark.torch.quantization.config.type import (
    Dtype,
    QSchemeType,
    QuantizationMode,
    RoundType,
    ScaleType,
    TQTThresholdInitMeth,
)
from quark.torch.quantization.observer.lsq_observer import LSQObserver
from quark.torch.quantization.observer.observer import (
    PerTensorMinMaxObserver,
    PerTensorPowOf2MinMaxObserver,
    PerTensorPowOf2MinMSEObserver,
)
from quark.torch.quantization.observer.tqt_observer import TQTObserver

logger = ScreenLogger(__name__)


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for flag in ("a8w8", "a16w8", "qat", "tqt", "lsq", "non_overflow", "mse_powof2"):
        parser.add_argument(f"--{flag}", action="store_true")
    parser.add_argument("--model_export", action="append", nargs="+", choices=["onnx", "torch_save"], default=None)
    parser.add_argument("--export_dir", default="./quark_vision_export")
    parser.add_argument("--model_name", default="resnet18")
    parser.add_argument("--float_epochs", type=int, default=1, help="training of the float ResNet-18 on the digits")
    parser.add_argument("--epochs", type=int, default=1, help="QAT epochs")
    parser.add_argument("--quantizer_lr", type=float, default=1e-3)
    parser.add_argument("--weight_lr", type=float, default=1e-4)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--max_steps", type=int, default=None, help="stop each training epoch after this many steps")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.model_export = [f for group in args.model_export or [] for f in group] or None
    return args


# -- data and model: this script's own ------------------------------------------------------------


def digits_as_images(seed: int) -> tuple[TensorDataset, TensorDataset]:
    """The digits, 3x32x32 in [0, 1] (bilinear upsampling, the channel repeated), normalised as
    ImageNet's statistics would normalise them."""
    from quark.torch.examples import digits

    data = digits.load(seed)
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)

    def images(split: TensorDataset) -> TensorDataset:
        x, y = split.tensors
        x = F.interpolate(x, size=32, mode="bilinear", align_corners=False).repeat(1, 3, 1, 1)
        return TensorDataset((x - mean) / std, y)

    return images(data.train), images(data.test)


def resnet18() -> nn.Module:
    from torchvision.models import resnet18 as torchvision_resnet18

    return torchvision_resnet18(num_classes=10)


def train(model: nn.Module, loader: DataLoader, optimizer: torch.optim.Optimizer, epochs: int, max_steps: int | None) -> None:
    model.train()
    for epoch in range(epochs):
        for step, (images, target) in enumerate(loader):
            if max_steps is not None and step >= max_steps:
                break
            loss = F.cross_entropy(model(images), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        logger.info(f"epoch {epoch}: last training loss {loss.item():.4f}")


@torch.no_grad()
def accuracy(model: nn.Module, loader: DataLoader) -> float:
    model.eval()
    correct = sum(int((model(x).argmax(1) == y).sum()) for x, y in loader)
    return 100.0 * correct / len(loader.dataset)


# -- AMD Quark's configs and calls ------------------------------------------------------------------


def quant_config_of(args: argparse.Namespace) -> QLayerConfig:
    """The layer config each flag of Quark's example builds, as it builds it."""
    INT8_PER_TENSOR_SPEC = QTensorConfig(dtype=Dtype.int8, qscheme=QSchemeType.per_tensor, observer_cls=PerTensorMinMaxObserver,
                                         symmetric=True, scale_type=ScaleType.float, round_method=RoundType.half_even, is_dynamic=False)  # fmt: skip
    INT16_PER_TENSOR_SPEC = QTensorConfig(dtype=Dtype.int16, qscheme=QSchemeType.per_tensor, observer_cls=PerTensorMinMaxObserver,
                                          symmetric=True, scale_type=ScaleType.float, round_method=RoundType.half_even, is_dynamic=False)  # fmt: skip
    INT32_PER_TENSOR_SPEC = QTensorConfig(dtype=Dtype.int32, qscheme=QSchemeType.per_tensor, observer_cls=PerTensorMinMaxObserver,
                                          symmetric=True, scale_type=ScaleType.float, round_method=RoundType.half_even, is_dynamic=False)  # fmt: skip
    if args.tqt:
        weight = QTensorConfig(dtype=Dtype.int8, qscheme=QSchemeType.per_tensor, observer_cls=TQTObserver, symmetric=True,
                               scale_type=ScaleType.float, round_method=RoundType.half_even, is_dynamic=False,
                               qat_spec=TQTSpec(threshold_init_meth=TQTThresholdInitMeth._3SD))  # fmt: skip
        activation = QTensorConfig(dtype=Dtype.int8, qscheme=QSchemeType.per_tensor, observer_cls=TQTObserver, symmetric=True,
                                   scale_type=ScaleType.float, round_method=RoundType.half_even, is_dynamic=False,
                                   qat_spec=TQTSpec(threshold_init_meth=TQTThresholdInitMeth._KL_J))  # fmt: skip
        return QLayerConfig(weight=weight, input_tensors=activation, output_tensors=activation, bias=weight)
    if args.lsq:
        lsq = QTensorConfig(dtype=Dtype.int8, qscheme=QSchemeType.per_tensor, observer_cls=LSQObserver, symmetric=True,
                            scale_type=ScaleType.float, round_method=RoundType.half_even, is_dynamic=False)  # fmt: skip
        return QLayerConfig(weight=lsq, input_tensors=lsq, output_tensors=lsq, bias=lsq)
    if args.non_overflow:
        pof2 = QTensorConfig(dtype=Dtype.int8, qscheme=QSchemeType.per_tensor, observer_cls=PerTensorPowOf2MinMaxObserver,
                             symmetric=True, scale_type=ScaleType.float, round_method=RoundType.half_even, is_dynamic=False)  # fmt: skip
        return QLayerConfig(input_tensors=pof2, output_tensors=pof2, weight=pof2, bias=pof2)
    if args.mse_powof2:
        weight = QTensorConfig(dtype=Dtype.int8, qscheme=QSchemeType.per_tensor, observer_cls=PerTensorPowOf2MinMSEObserver,
                               symmetric=True, scale_type=ScaleType.float, round_method=RoundType.half_even, is_dynamic=False)  # fmt: skip
        activation = QTensorConfig(dtype=Dtype.uint8, qscheme=QSchemeType.per_tensor, observer_cls=PerTensorPowOf2MinMSEObserver,
                                   symmetric=True, scale_type=ScaleType.float, round_method=RoundType.half_even, is_dynamic=False)  # fmt: skip
        return QLayerConfig(input_tensors=activation, output_tensors=activation, weight=weight, bias=weight)
    if args.a8w8:
        return QLayerConfig(input_tensors=INT8_PER_TENSOR_SPEC, output_tensors=INT8_PER_TENSOR_SPEC,
                            weight=INT8_PER_TENSOR_SPEC, bias=INT32_PER_TENSOR_SPEC)  # fmt: skip
    if args.a16w8:
        return QLayerConfig(input_tensors=INT16_PER_TENSOR_SPEC, output_tensors=INT16_PER_TENSOR_SPEC,
                            weight=INT8_PER_TENSOR_SPEC, bias=INT32_PER_TENSOR_SPEC)  # fmt: skip
    return QLayerConfig(input_tensors=INT8_PER_TENSOR_SPEC, output_tensors=INT8_PER_TENSOR_SPEC,
                        weight=INT8_PER_TENSOR_SPEC, bias=INT8_PER_TENSOR_SPEC)  # fmt: skip


def quantizer_parameters(model: nn.Module) -> list[nn.Parameter]:
    """Quark's example: the TQT thresholds, found as its TQTObserver modules."""
    return [module._log_threshold for module in model.modules() if isinstance(module, TQTObserver)]


def non_quantizer_parameters(model: nn.Module) -> list[nn.Parameter]:
    quantizer_ids = {id(p) for p in quantizer_parameters(model)}
    return [p for p in model.parameters() if id(p) not in quantizer_ids]


def main(argv: list[str] | None = None) -> dict[str, float]:
    args = arguments(argv)
    if args.tqt or args.lsq:
        assert args.qat, "Must set qat is True!"
    torch.manual_seed(args.seed)
    train_set, test_set = digits_as_images(args.seed)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, generator=torch.Generator().manual_seed(args.seed))
    val_loader = DataLoader(test_set, batch_size=128)
    calib_loader = DataLoader(TensorDataset(train_set.tensors[0][:256]), batch_size=128, collate_fn=lambda b: torch.stack([x for (x,) in b]))
    float_model = resnet18()
    train(float_model, train_loader, torch.optim.Adam(float_model.parameters(), 1e-3), args.float_epochs, args.max_steps)
    results = {"float": accuracy(float_model, val_loader)}
    logger.info(f"float ResNet-18: {results['float']:.2f} % on {len(test_set)} held-out digits")

    # --- AMD Quark's flow, as its example writes it
    example_inputs = (torch.rand(args.batch_size, 3, 32, 32),)
    quant_config = quant_config_of(args)
    if args.tqt:
        calib_loader = []  # if using tqt, we will directly train, skip PTQ
    quant_config = QConfig(global_quant_config=quant_config, quant_mode=QuantizationMode.fx_graph_mode)
    quantizer = ModelQuantizer(quant_config)
    graph_model = export_for_training(float_model.eval(), example_inputs).module()
    quantized_model = quantizer.quantize_model(graph_model, calib_loader)
    if not args.tqt:
        results["PTQ"] = accuracy(quantized_model, val_loader)
        logger.info(f"after PTQ: {results['PTQ']:.2f} %")
    if args.qat:
        param_groups = [
            {"params": quantizer_parameters(quantized_model), "lr": args.quantizer_lr, "name": "quantizer"},
            {"params": non_quantizer_parameters(quantized_model), "lr": args.weight_lr, "name": "weight"},
        ]
        train(quantized_model, train_loader, torch.optim.Adam(param_groups, args.weight_lr), args.epochs, args.max_steps)
        results["QAT"] = accuracy(quantized_model, val_loader)
        logger.info(f"after QAT: {results['QAT']:.2f} %")
    if args.model_export is not None:
        frozen_model = quantizer.freeze(quantized_model.eval())
        if "onnx" in args.model_export:
            example_inputs = (torch.rand(1, 3, 32, 32),)
            report = export_onnx(model=frozen_model, output_dir=args.export_dir, input_args=example_inputs[0])
            results["onnx max |diff|"] = report.max_abs_diff
            logger.info(str(report))
        if "torch_save" in args.model_export:
            from quark.torch.export.api import save_params

            example_inputs = (next(iter(val_loader))[0],)
            save_params(frozen_model, model_type=args.model_name, args=example_inputs, export_dir=args.export_dir,
                        quant_mode=quant_config.quant_mode)  # fmt: skip
            # the reload (this package's load_params takes the float graph the quantizer was given): bit for
            # bit, which load_params checks on the saved example outputs itself
            from quark.torch.export.api import load_params

            path = os.path.join(args.export_dir, f"{args.model_name}_quantized.pth")
            reloaded = load_params(graph_model, pth_path=path, quant_mode=quant_config.quant_mode)
            with torch.no_grad():
                results["load_params bit-exact"] = float(torch.equal(reloaded(example_inputs[0]), frozen_model(example_inputs[0])))
    print(results)
    return results


if __name__ == "__main__":
    main()
