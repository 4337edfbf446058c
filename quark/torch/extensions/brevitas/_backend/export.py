"""Export of quantized models to ONNX."""

from __future__ import annotations

from typing import Any

from torch import nn

from quark.torch.extensions.brevitas._backend.calibrate import _device_dtype, _to


class ModelExporter:
    """Export a quantized model to ONNX (QuantizeLinear / Clip / DequantizeLinear, as AMD Quark)."""

    def __init__(self, export_path: str) -> None:
        self.export_path = export_path

    def export_onnx_model(self, model: nn.Module, args: Any) -> None:
        """Export ``model`` traced on ``args`` (a tensor or a tuple of tensors) to ``export_path``."""
        from brevitas.export import export_onnx_qcdq

        device, dtype = _device_dtype(model)
        args = _to(args, device, dtype)
        was_training = model.training
        try:
            export_onnx_qcdq(model.eval(), args=args, export_path=self.export_path)
        finally:
            model.train(was_training)
