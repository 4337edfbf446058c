"""The axis an activation's blocks (OCP MX, MX6 / MX9, BFP16) run along, however the spec writes it.

The blocks of a layer's input or output run along its channels: axis 1 of a convolution's tensor, the
last axis (the features) of a ``Linear``'s. A spec may write the latter as ``ch_axis=-1`` or, for a 2-D
tensor ``[batch, features]``, as ``ch_axis=1`` (AMD Quark's LLM specs write ``ch_axis=1`` for a
Linear's input features): both are accepted. ``ch_axis=1`` names the features only of a 2-D tensor,
which is known when the layer runs: :func:`check_feature_axis` hooks the layer and raises, naming it,
on a tensor of more dimensions (a ``[batch, tokens, features]`` input, where axis 1 is the tokens).
"""

from __future__ import annotations

import functools
from typing import Any

from torch import nn

from quark.torch.quantization.config.spec import ACTIVATION_ROLES
from quark.torch.quantization.plan import LayerPlan


def block_axis(module: nn.Module) -> int:
    """The axis an activation's blocks run along: channels (1) for convolutions, features (-1) otherwise."""
    return 1 if isinstance(module, nn.modules.conv._ConvNd) else -1


def allowed_axes(module: nn.Module) -> tuple[int | None, ...]:
    """The ``ch_axis`` values an activation block spec of ``module`` may hold (None: the layer's axis)."""
    return (None, 1) if block_axis(module) == 1 else (None, -1, 1)


def check_feature_axis(layer: nn.Module, plan: LayerPlan, original: nn.Module) -> None:
    """Hook ``layer`` so that an activation block spec written ``ch_axis=1`` on a features-last layer meets
    2-D tensors only (see the module); nothing for other specs."""
    if block_axis(original) == 1:
        return
    for role in ACTIVATION_ROLES:
        spec = plan.specs[role]
        if spec is not None and spec.format.block and spec.ch_axis == 1:
            where = {"name": plan.name, "role": role, "spec": spec.dtype_name}
            if role == "input_tensors":
                layer.register_forward_pre_hook(functools.partial(_require_2d_input, **where))
            else:
                layer.register_forward_hook(functools.partial(_require_2d_output, **where))


def _require_2d_input(module: nn.Module, args: tuple[Any, ...], **where: str) -> None:
    if args:
        _require_2d(args[0], **where)


def _require_2d_output(module: nn.Module, args: tuple[Any, ...], output: Any, **where: str) -> None:
    _require_2d(output, **where)


def _require_2d(tensor: Any, *, name: str, role: str, spec: str) -> None:
    tensor = getattr(tensor, "value", tensor)
    if hasattr(tensor, "dim") and tensor.dim() != 2:
        raise ValueError(
            f"{name}: {role} {spec} blocks along ch_axis=1 name the features of a 2-D tensor; this one has "
            f"{tensor.dim()} dimensions (shape {tuple(tensor.shape)}), whose axis 1 is not its features: write ch_axis=-1"
        )
