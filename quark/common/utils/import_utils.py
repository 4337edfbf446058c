"""``export_for_training``, as AMD Quark's examples import it to hand ``ModelQuantizer`` a graph."""

from __future__ import annotations

from typing import Any


def export_for_training(
    mod: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None = None,
    *,
    dynamic_shapes: dict[str, Any] | tuple[Any, ...] | list[Any] | None = None,
) -> Any:
    """``torch.export.export(mod, args, kwargs, dynamic_shapes=...)``: the ``ExportedProgram`` whose
    ``.module()`` Quark's examples pass to ``ModelQuantizer.quantize_model`` in ``fx_graph_mode``.

    ``torch.export.export_for_training`` was folded into ``torch.export.export`` (torch >= 2.11 has
    no other); both give the training IR (ATen operators before decomposition), which graph mode
    turns back into layers.
    """
    import torch

    return torch.export.export(mod, args, kwargs, dynamic_shapes=dynamic_shapes)
