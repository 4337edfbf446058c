"""Leave the model as it was after an export, also when the export fails.

Brevitas' export managers switch proxies into export mode, attach export handlers as submodules,
override caching flags and fill a class-level cache, and undo all of it only on success: after a
failure the model stays in export mode and the next export dies on ``assert not self.cache``
(Xilinx/brevitas#365). Handlers also stay attached after a *successful* export, and a later export
to another format would reuse them (``_set_export_handler`` only fills empty slots). This
context undoes every one of these changes in ``finally``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from brevitas import config as brevitas_config
from brevitas.export.manager import (
    _restore_act_caching_mode,
    _restore_bias_caching_mode,
    _restore_quant_metadata_caching_mode,
    _set_layer_export_mode,
    _set_proxy_export_mode,
    _set_recurrent_layer_export_mode,
)
from torch import nn

_DYNAMO_STATE = "_brevitas_return_quant_tensor_state"  # set by Brevitas' dynamo export mode


@contextmanager
def export_session(model: nn.Module, manager: type) -> Iterator[None]:
    """Run an export of ``model`` with ``manager``; restore mode, flags and handlers afterwards."""
    training = model.training
    requires_grad = {name: p.requires_grad for name, p in model.named_parameters()}
    try:
        yield
    finally:
        _reset(model, manager)
        model.train(training)
        for name, p in model.named_parameters():
            p.requires_grad_(requires_grad[name])


def _reset(model: nn.Module, manager: type) -> None:
    brevitas_config._ONGOING_EXPORT = None
    manager._fn_cache.clear()
    manager._fn_to_cache.clear()
    if hasattr(model, _DYNAMO_STATE):
        manager.set_export_mode(model, enabled=False)  # also restores return_quant_tensor flags
    for set_mode in (_set_proxy_export_mode, _set_layer_export_mode, _set_recurrent_layer_export_mode):
        set_mode(model, enabled=False)
    for module in model.modules():
        _restore_act_caching_mode(module)
        _restore_bias_caching_mode(module)
        _restore_quant_metadata_caching_mode(module)
    for module in list(model.modules()):
        if "export_handler" in module._modules:
            del module._modules["export_handler"]
            object.__setattr__(module, "export_handler", None)
