"""Quantization configs: pure dataclasses and enums, importable without Brevitas, ONNX or QONNX.

As in AMD Quark, the config classes and the ``DataTypeSpec`` helpers are reachable from here too
(``quark.torch.quantization.Int8PerTensorSpec``); they load on first use.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """``quark.torch.quantization.<name>`` for the public names of ``config.config`` (Quark's layout)."""
    from quark.torch.quantization.config import config

    if name in config.__all__:
        return getattr(config, name)
    raise AttributeError(f"module 'quark.torch.quantization' has no attribute {name!r}")
